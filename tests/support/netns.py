"""A network namespace for one broker, joined to the root namespace by a veth pair (root).

    with veth_net("10.200") as net:     # 10.200.N.1 on the root side, 10.200.N.2 inside
        b = SpoolProcess(..., prefix=net.prefix)   # runs inside the namespace
        net.set_link(False)             # a partition: the namespace's end goes down

Names are unique per run (the pid and a random number; interface names stay within 15
characters) and everything is deleted at the end. ``observer=True`` adds a second address
on the root side (N.3), which a test can bind its own clients to, so that rules dropping
the root side's main address (N.1) leave the test's view of the namespace alone. A host
that cannot build namespaces skips the test.

:func:`pair` configures two replicating instances across it: ``a`` in the root namespace
on N.1, ``b`` inside on N.2, each the other's destination.
"""

from __future__ import annotations

import contextlib
import os
import random
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.replication import destination, free_ports, replication_xml, token_users
from tests.support.server import SpoolProcess

__all__ = ["PLAINTEXT", "Pair", "VethNet", "ip", "pair", "veth_net"]

# The addresses of a VethNet live only inside the namespaces a test creates (nothing
# outside can reach them), so the listeners run without TLS; the configuration refuses a
# non-loopback listener with users and no TLS unless it is told so explicitly.
PLAINTEXT = "<AllowPlaintext>true</AllowPlaintext>"


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


class VethNet:
    """One namespace and the veth pair to it (see the module docstring)."""

    def __init__(self, network: str, *, tag: str = "sp", observer: bool = False) -> None:
        name = f"{tag}{os.getpid() % 10000}{random.randrange(100)}"
        self.ns = name
        self.host_if = f"{name}a"
        self.ns_if = f"{name}b"
        subnet = random.randrange(1, 250)
        self.a = f"{network}.{subnet}.1"
        self.b = f"{network}.{subnet}.2"
        self.observer = f"{network}.{subnet}.3" if observer else None

    def up(self) -> None:
        ip("netns", "add", self.ns)
        ip("link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if)
        ip("link", "set", self.ns_if, "netns", self.ns)
        ip("addr", "add", f"{self.a}/24", "dev", self.host_if)
        if self.observer is not None:  # secondary: never the source of the root side's dials
            ip("addr", "add", f"{self.observer}/24", "dev", self.host_if)
        ip("link", "set", self.host_if, "up")
        for cmd in (
            ("link", "set", "lo", "up"),
            ("addr", "add", f"{self.b}/24", "dev", self.ns_if),
            ("link", "set", self.ns_if, "up"),
        ):
            ip("netns", "exec", self.ns, "ip", *cmd)

    def set_link(self, up: bool) -> None:
        """Bring the namespace's end of the pair up or down."""
        ip("netns", "exec", self.ns, "ip", "link", "set", self.ns_if, "up" if up else "down")

    def down(self) -> None:
        subprocess.run(["ip", "link", "del", self.host_if], check=False, capture_output=True)
        subprocess.run(["ip", "netns", "del", self.ns], check=False, capture_output=True)

    @property
    def prefix(self) -> tuple[str, ...]:
        """The command prefix that runs a process inside the namespace."""
        return ("ip", "netns", "exec", self.ns)


@contextlib.contextmanager
def veth_net(network: str, *, tag: str = "sp", observer: bool = False) -> Iterator[VethNet]:
    """A :class:`VethNet` that is up, deleted at the end (the test is skipped when the
    host cannot build it)."""
    net = VethNet(network, tag=tag, observer=observer)
    try:
        net.up()
    except subprocess.CalledProcessError as exc:
        net.down()
        pytest.skip(f"cannot build network namespaces here: {exc.stderr!r}")
    try:
        yield net
    finally:
        net.down()


class Pair:
    """Two instances across a :class:`VethNet` (not started).

    Attributes:
        token: the users' tokens (``app``, ``repl``, ``ops``: tests/support/replication.py
            ``token_users``).
        hosts: name -> (address, port).
        procs: name -> its process (``b`` runs inside the namespace).
    """

    def __init__(
        self,
        token: dict[str, str],
        hosts: dict[str, tuple[str, int]],
        procs: dict[str, SpoolProcess],
    ) -> None:
        self.token = token
        self.hosts = hosts
        self.procs = procs

    def url(self, name: str) -> str:
        host, port = self.hosts[name]
        return f"ws://{host}:{port}/amps/json"


def pair(root: Path, net: VethNet, *, sync: tuple[bool, bool] = (True, True), **kw: Any) -> Pair:
    """``a`` on ``net.a`` (root namespace) and ``b`` on ``net.b`` (inside), each the
    other's destination (``sync``: a's and b's), its links logging on as ``repl``;
    ``kw``: more of :func:`~tests.support.replication.replication_xml`'s arguments."""
    token, users = token_users()
    port_a, port_b = free_ports(2)
    hosts = {"a": (net.a, port_a), "b": (net.b, port_b)}
    procs: dict[str, SpoolProcess] = {}
    for (name, other), is_sync in zip((("a", "b"), ("b", "a")), sync, strict=True):
        xml = replication_xml(
            root / name / "data", name, host=hosts[name][0], port=hosts[name][1],
            users=users, admin_extra=PLAINTEXT,
            destinations=[destination(other, [hosts[other]], sync=is_sync, user="repl",
                                      secret=token["repl"])],
            **kw,
        )  # fmt: skip
        procs[name] = SpoolProcess(root / name, xml, prefix=net.prefix if name == "b" else ())
    return Pair(token, hosts, procs)
