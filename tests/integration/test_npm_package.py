"""The npm package of the JavaScript client (static/package.json, `spool-broker-client`) as
an application gets it: packed with `npm pack` (its prepack emits the declarations),
installed offline from the tarball into a scratch project, and run by Node (20+, with the
`ws` package for the WebSocket) against a real broker on loopback:

- the plain client publishes with persisted acks and replays from a bookmark: exactly the
  messages after it, in order, then the live one;
- the HA clients (memory publish and bookmark stores) across a SIGKILL of the broker and a
  restart on the same port, with messages published while it is down: the subscriber gets
  every message once, in order, and the broker's log holds each once under its own
  sequence number;
- TypeScript (moduleResolution node16) accepts a file that uses the main API as documented
  and refuses one with a deliberate type error, where and as expected.

`ws` and `typescript` are linked from the repository's node_modules (`make install`): no
download.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import selectors
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spool.server.bookmarks import pub_hash
from tests.support.replication import free_ports, read_log
from tests.support.server import SpoolProcess, config_xml

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
NODE_MODULES = ROOT / "node_modules"

PLAIN = """
import WebSocket from "ws";
import { SpoolClient } from "spool-broker-client";

const [url, topic] = process.argv.slice(2);
const pub = new SpoolClient(url, { name: "npm-plain", WebSocket });
await pub.connect();
const acks = [];
for (let n = 1; n <= 30; n++) acks.push(await pub.publish(topic, { n }, { ackPersisted: true }));

// from the bookmark of message 10: the messages after it, then live ones
const reader = new SpoolClient(url, { name: "npm-plain-reader", WebSocket });
await reader.connect();
const got = [];
let completed;
const replayed = new Promise((resolve) => { completed = resolve; });
await reader.subscribe(topic, { bookmark: acks[9].bookmark, onCompleted: () => completed() },
  (m) => got.push([m.bookmark, m.json().n]));
await replayed;
const live = await pub.publish(topic, { n: 31 }, { ackPersisted: true });
// the live message is the last one expected: anything doubled would come before it
const deadline = Date.now() + 20000;
while (!got.some(([, n]) => n === 31) && Date.now() < deadline) {
  await new Promise((resolve) => setTimeout(resolve, 5));
}
pub.close();
reader.close();
console.log(JSON.stringify({ acks, got, live }));
"""

HA = """
import WebSocket from "ws";
import { createInterface } from "node:readline";
import { HAClient, DefaultServerChooser, ExponentialDelayStrategy, MemoryPublishStore,
  MemoryBookmarkStore, MOST_RECENT } from "spool-broker-client/ha";

const [url, topic, total, hold] = [process.argv[2], process.argv[3], Number(process.argv[4]),
  Number(process.argv[5])];
const input = createInterface({ input: process.stdin });
const lines = input[Symbol.asyncIterator]();
const say = (value) => console.log(JSON.stringify(value));
const errors = [];
const states = [];
const make = (name, stores) => {
  const ha = new HAClient(name, {
    chooser: new DefaultServerChooser([url]),
    delay: new ExponentialDelayStrategy({ initial: 50, maximum: 250 }),
    WebSocket,
    ...stores,
  });
  ha.setExceptionListener((e) => errors.push(`${name}: ${e}`));
  ha.addConnectionStateListener((s) => states.push(`${name}:${s}`));
  return ha;
};

const reader = make("npm-ha-reader", { bookmarkStore: new MemoryBookmarkStore() });
await reader.connectAndLogon();
const got = [];
await reader.subscribe(topic, { bookmark: MOST_RECENT, subId: "feed" }, (m) => {
  got.push(m.json().n);
  m.discard();
});
const writer = make("npm-ha-writer", { publishStore: new MemoryPublishStore() });
await writer.connectAndLogon();
for (let n = 1; n <= total; n++) {
  await writer.publish(topic, { n });
  if (n === hold) {
    say({ held: n });
    await lines.next(); // the broker is killed meanwhile
    input.close();
  }
}
// published while the broker is down: only the store has them
say({ stored: writer.unreplicatedCount() });
await writer.publishFlush(30000);
// the last message: anything doubled before it would reach the reader first
const fence = total + 1;
await writer.publish(topic, { n: fence });
await writer.publishFlush(30000);
const deadline = Date.now() + 30000;
while (!got.includes(fence) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
await writer.close();
await reader.close();
say({ got, errors, states });
"""

TS_OK = """
import { SpoolClient, SpoolError, type SpoolMessage, type WebSocketClass } from "spool-broker-client";
import {
  HAClient, DefaultServerChooser, ExponentialDelayStrategy, MemoryPublishStore,
  MemoryBookmarkStore, MOST_RECENT, type PublishStoreEntry, type RestoredPublishes,
} from "spool-broker-client/ha";

export async function plain(url: string, WebSocket: WebSocketClass): Promise<string[]> {
  const client = new SpoolClient(url, { name: "typed", WebSocket, heartbeat: 10 });
  client.on("disconnect", (info) => console.warn(info));
  await client.connect();
  const got: string[] = [];
  const subId: string = await client.subscribe("orders", { bookmark: "0", onCompleted: () => {} },
    (message: SpoolMessage) => {
      const bookmark: string | undefined = message.bookmark;
      if (bookmark !== undefined) got.push(bookmark);
      got.push(String(message.json().id));
    });
  await client.publish("orders", { id: 1 }, { ackPersisted: true });
  await client.unsubscribe(subId);
  client.close();
  return got;
}

export async function ha(url: string, WebSocket: WebSocketClass): Promise<number> {
  const restored: PublishStoreEntry[] = [];
  const client = new HAClient("typed-ha", {
    chooser: new DefaultServerChooser([url]),
    delay: new ExponentialDelayStrategy({ initial: 100, maximum: 1000 }),
    publishStore: new MemoryPublishStore({ capacity: 1000 }),
    bookmarkStore: new MemoryBookmarkStore(),
    WebSocket,
    onRestore: ({ pending, lastSeq }: RestoredPublishes) => {
      for (const entry of pending) restored.push(entry);
      console.log(lastSeq);
    },
  });
  await client.connectAndLogon();
  await client.subscribe("orders", { bookmark: MOST_RECENT, subId: "view" }, (m) => m.discard());
  const seq: number = await client.publish("orders", { id: 2 }, { correlationId: "c-1" });
  await client.publishFlush(5000);
  try {
    await client.close();
  } catch (error) {
    if (error instanceof SpoolError) console.warn(error.reason);
  }
  return seq + restored.length;
}
"""

#: line 5: publish() resolves to the sequence number, a number
TS_BAD = """
import { HAClient, DefaultServerChooser } from "spool-broker-client/ha";
export async function wrong(url: string): Promise<string> {
  const client = new HAClient("typed-ha", { chooser: new DefaultServerChooser([url]) });
  const seq: string = await client.publish("orders", { id: 1 });
  return seq;
}
"""


def run(args: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scratch Node project with the packed package installed from its tarball."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.fail("node and npm are needed (Node 20+): see `make install`")
    for package in ("typescript", "ws"):
        if not (NODE_MODULES / package).is_dir():
            pytest.fail(f"{NODE_MODULES / package} is missing: run `make install` (npm ci)")
    work = tmp_path_factory.mktemp("npm")
    packed = run(["npm", "pack", "./static", "--pack-destination", str(work), "--json"], cwd=ROOT)
    assert packed.returncode == 0, packed.stderr
    info = json.loads(packed.stdout)[0]
    shipped = sorted(f["path"] for f in info["files"])
    assert shipped == [
        "README.md",
        "package.json",
        "spool-client.js",
        "spool-codec.js",
        "spool-error.js",
        "spool-ha-idb.js",
        "spool-ha-reconnect.js",
        "spool-ha-stores.js",
        "spool-ha.js",
        "spool-message.js",
        "spool-session.js",
        "spool-transport.js",
        "types/spool-client.d.ts",
        "types/spool-codec.d.ts",
        "types/spool-error.d.ts",
        "types/spool-ha-idb.d.ts",
        "types/spool-ha-reconnect.d.ts",
        "types/spool-ha-stores.d.ts",
        "types/spool-ha.d.ts",
        "types/spool-message.d.ts",
        "types/spool-session.d.ts",
        "types/spool-transport.d.ts",
    ]
    # the broker serves static/: what prepack made for the package is gone again
    assert not (ROOT / "static" / "types").exists()
    assert not (ROOT / "static" / "README.md").exists()
    proj = work / "project"
    proj.mkdir()
    (proj / "package.json").write_text(
        json.dumps({"name": "scratch", "private": True, "type": "module"})
    )
    installed = run(
        ["npm", "install", "--offline", "--no-audit", "--no-fund", str(work / info["filename"])],
        cwd=proj,
    )
    assert installed.returncode == 0, installed.stderr
    for package in ("typescript", "ws"):
        os.symlink(NODE_MODULES / package, proj / "node_modules" / package)
    return proj


class Broker:
    """A broker on a fixed port, so that a restart keeps the clients' URL."""

    def __init__(self, workdir: Path) -> None:
        port = free_ports(1)[0]
        xml = config_xml(workdir / "data", name="spool-npm").replace(
            "<InetAddr>127.0.0.1:0</InetAddr>", f"<InetAddr>127.0.0.1:{port}</InetAddr>"
        )
        self.proc = SpoolProcess(workdir, xml)
        self.url = f"ws://127.0.0.1:{port}/amps/json"

    def log(self) -> list[tuple[int, int, bytes, tuple[str, ...]]]:
        """The log's records (the broker is stopped to read them, then started again)."""
        self.proc.stop()
        try:
            return asyncio.run(read_log(self.proc))
        finally:
            self.proc.start()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    b = Broker(tmp_path_factory.mktemp("npm-broker"))
    b.proc.start()
    yield b
    b.proc.stop()


class NodeScript:
    """A Node script of the scratch project, talking JSON lines on stdout and stdin."""

    def __init__(self, project: Path, name: str, source: str, *args: object) -> None:
        (project / name).write_text(source)
        self.proc = subprocess.Popen(
            ["node", name, *map(str, args)],
            cwd=project,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def read(self, timeout: float = 60) -> Any:
        """The next line of output, parsed; fails with the script's stderr if it ended."""
        assert self.proc.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(self.proc.stdout, selectors.EVENT_READ)
            deadline = time.monotonic() + timeout
            while not selector.select(max(0.0, deadline - time.monotonic())):
                if time.monotonic() >= deadline:
                    self.proc.kill()
                    pytest.fail(f"no output from node in {timeout} s")
        line = self.proc.stdout.readline()
        if not line:
            assert self.proc.stderr is not None
            pytest.fail(f"node ended ({self.proc.wait()}): {self.proc.stderr.read()}")
        return json.loads(line)

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def finish(self) -> None:
        assert self.proc.wait(30) == 0, self.proc.stderr.read() if self.proc.stderr else ""

    def kill(self) -> None:
        """End the script if it still runs, and close its pipes."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


def test_plain_client_publishes_and_replays_from_a_bookmark(project: Path, broker: Broker) -> None:
    script = NodeScript(project, "plain.mjs", PLAIN, broker.url, "npm-plain")
    try:
        out = script.read()
        script.finish()
    finally:
        script.kill()
    acks = out["acks"]
    assert [a["seq"] for a in acks] == list(range(1, 31))
    assert len({a["bookmark"] for a in acks}) == 30
    expected = [[a["bookmark"], n] for n, a in enumerate(acks, start=1)][10:]
    assert out["got"] == [*expected, [out["live"]["bookmark"], 31]]


def test_ha_clients_lose_and_double_nothing_across_a_broker_crash(
    project: Path, broker: Broker
) -> None:
    total, hold = 200, 100
    topic = "npm-ha"
    script = NodeScript(project, "ha.mjs", HA, broker.url, topic, total, hold)
    try:
        assert script.read() == {"held": hold}
        broker.proc.kill()
        script.send("go")
        # published while the broker is down: the store holds at least those
        stored = script.read()["stored"]
        assert stored >= total - hold
        broker.proc.start()
        out = script.read()
        script.finish()
    finally:
        script.kill()
    assert out["errors"] == []
    assert out["got"] == list(range(1, total + 2))  # each once, in order, the fence last
    assert "npm-ha-writer:publish_replayed" in out["states"]
    assert out["states"].count("npm-ha-reader:resubscribed") == 2  # logon, and after the restart
    records = broker.log()
    mine = [
        (seq, json.loads(body)["n"])
        for h, seq, body, _ in records
        if h == pub_hash("npm-ha-writer")
    ]
    assert mine == [(n, n) for n in range(1, total + 2)]


def test_typescript_accepts_the_api_and_refuses_a_type_error(project: Path) -> None:
    tsc = ["node", "node_modules/typescript/bin/tsc"]
    options = {
        "target": "ES2022",
        "module": "node16",
        "moduleResolution": "node16",
        "lib": ["ES2022", "DOM"],
        "types": [],
        "strict": True,
        "noEmit": True,
    }
    for name, source in (("ok", TS_OK), ("bad", TS_BAD)):
        (project / f"{name}.ts").write_text(source)
        config = {"compilerOptions": options, "files": [f"{name}.ts"]}
        (project / f"tsconfig.{name}.json").write_text(json.dumps(config))
    ok = run([*tsc, "-p", "tsconfig.ok.json"], cwd=project)
    assert (ok.returncode, ok.stdout) == (0, "")
    bad = run([*tsc, "-p", "tsconfig.bad.json"], cwd=project)
    assert bad.returncode != 0
    # exactly the deliberate error: the package resolved, its declarations checked
    assert bad.stdout.splitlines() == [
        "bad.ts(5,9): error TS2322: Type 'number' is not assignable to type 'string'."
    ]
