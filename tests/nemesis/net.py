"""The cluster's network: one namespace per instance on a bridge (root), or loopback.

As root every instance gets its own network namespace and address (``10.238.N.i``) on a
bridge in the root namespace, whose own address (``10.238.N.254``) is where the harness's
clients come from. Faults are packet rules inside the instances' namespaces (nftables):

- a **partition** drops the packets between two instances, one way (``a`` drops what it
  sends to ``b``; ``b``'s packets still arrive, but their TCP acknowledgements do not
  return) or both ways; the clients' address is never cut, so clients keep their
  instance;
- **loss** drops a random share of every packet an instance sends and receives (the
  kernel retransmits: a lossy network, not a cut).

Without root there are no namespaces: the instances share loopback and the network
faults are skipped (:attr:`Network.why_not` says why; the summary shows it).

Every name carries the run's tag (``spnem-<pid>-...``), the addresses a /24 of
``10.238.0.0/16`` no interface of this machine uses, and :meth:`Network.down` deletes
everything it made (a ``finally`` of the run).
"""

from __future__ import annotations

import os
import random
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["CLIENT_OCTET", "Network", "NetworkError"]

#: the last octet of the bridge's address: the harness's clients
CLIENT_OCTET = 254
_TABLE = "nemesis"


class NetworkError(RuntimeError):
    """A namespace, link or rule could not be made."""


def _run(args: Sequence[str], *, check: bool = True, stdin: str | None = None) -> str:
    done = subprocess.run(list(args), capture_output=True, text=True, input=stdin, check=False)
    if check and done.returncode != 0:
        raise NetworkError(f"{' '.join(args)}: {done.stderr.strip() or done.returncode}")
    return done.stdout


def _free_subnet(rng: random.Random) -> int:
    """A third octet N such that no interface here has an address in 10.238.N.0/24."""
    used = _run(["ip", "-4", "-o", "addr", "show"], check=False)
    for _ in range(500):
        n = rng.randrange(1, 250)
        if f" 10.238.{n}." not in used:
            return n
    raise NetworkError("no free /24 in 10.238.0.0/16")


@dataclass
class Network:
    """Addresses of ``names`` and the rules between them.

    Attributes:
        isolated: True when each instance has its own namespace (root); False: loopback.
        why_not: why the network faults cannot run (None when they can).
    """

    names: list[str]
    isolated: bool = False
    why_not: str | None = None
    tag: str = ""
    subnet: int = 0
    #: the namespaces made so far (deleted by down())
    _made: list[str] = field(default_factory=list)
    _bridge: str = ""
    #: (victim, peer or None for loss) -> the rules in force, to rebuild a chain
    _cuts: dict[str, set[str]] = field(default_factory=dict)
    _loss: dict[str, int] = field(default_factory=dict)

    @classmethod
    def build(cls, names: Sequence[str], *, want_isolation: bool = True) -> Network:
        """Namespaces on a bridge as root; loopback otherwise (or when they fail)."""
        net = cls(list(names))
        if not want_isolation:
            net.why_not = "network faults were turned off (--no-netns)"
            return net
        if os.geteuid() != 0:
            net.why_not = "network namespaces need root: partitions and loss skipped"
            return net
        for tool in ("ip", "nft"):
            if subprocess.run(["which", tool], capture_output=True).returncode != 0:
                net.why_not = f"{tool} is not installed: partitions and loss skipped"
                return net
        net.tag = f"spnem-{os.getpid()}"
        net.subnet = _free_subnet(random.Random())
        net.isolated = True  # the addresses below are the namespaces' from here on
        try:
            net._up()
        except NetworkError as exc:
            net.down()
            net.isolated = False
            net.why_not = f"cannot build network namespaces here ({exc}): loopback instead"
        return net

    # -- addresses --------------------------------------------------------------------

    def ns(self, name: str) -> str:
        return f"{self.tag}-{name}"

    def host(self, name: str) -> str:
        """The address instance ``name`` listens on."""
        if not self.isolated:
            return "127.0.0.1"
        return f"10.238.{self.subnet}.{self.names.index(name) + 1}"

    @property
    def client_host(self) -> str:
        return f"10.238.{self.subnet}.{CLIENT_OCTET}" if self.isolated else "127.0.0.1"

    def prefix(self, name: str) -> tuple[str, ...]:
        """The command prefix that runs a program in instance ``name``'s namespace."""
        return ("ip", "netns", "exec", self.ns(name)) if self.isolated else ()

    # -- building ---------------------------------------------------------------------

    def _short(self, kind: str, i: int) -> str:
        """An interface name of at most 15 characters, unique to this run."""
        return f"n5{os.getpid() % 1_000_000}{kind}{i}"[:15]

    def _up(self) -> None:
        self._bridge = self._short("b", 0)
        _run(["ip", "link", "add", self._bridge, "type", "bridge"])
        _run(["ip", "addr", "add", f"{self.client_host}/24", "dev", self._bridge])
        _run(["ip", "link", "set", self._bridge, "up"])
        for i, name in enumerate(self.names):
            ns = self.ns(name)
            _run(["ip", "netns", "add", ns])
            self._made.append(ns)
            outer, inner = self._short("h", i), self._short("p", i)
            _run(["ip", "link", "add", outer, "type", "veth", "peer", "name", inner])
            _run(["ip", "link", "set", inner, "netns", ns])
            _run(["ip", "link", "set", outer, "master", self._bridge])
            _run(["ip", "link", "set", outer, "up"])
            inside = ["ip", "netns", "exec", ns]
            _run([*inside, "ip", "link", "set", "lo", "up"])
            _run([*inside, "ip", "link", "set", inner, "name", "eth0"])
            _run([*inside, "ip", "addr", "add", f"{self.host(name)}/24", "dev", "eth0"])
            _run([*inside, "ip", "link", "set", "eth0", "up"])
            # prompt reconnection after a long cut (TCP backs off otherwise)
            _run(
                [*inside, "sysctl", "-q", "-w", "net.ipv4.tcp_rto_max_ms=1000",
                 "net.ipv4.tcp_retries2=40"],
                check=False,
            )  # fmt: skip
            self._cuts[name] = set()
            self._apply(name)

    def down(self) -> None:
        """Delete every namespace and the bridge (their veths go with them)."""
        for ns in self._made:
            _run(["ip", "netns", "del", ns], check=False)
        self._made.clear()
        if self._bridge:
            _run(["ip", "link", "del", self._bridge], check=False)
            self._bridge = ""

    # -- faults -----------------------------------------------------------------------

    def cut(self, src: str, dst: str) -> None:
        """Drop what ``src`` sends to ``dst`` (one way)."""
        self._cuts[src].add(dst)
        self._apply(src)

    def heal(self) -> None:
        """Every partition and every loss ends."""
        for name in self.names:
            self._cuts[name] = set()
        self._loss.clear()
        if self.isolated:
            for name in self.names:
                self._apply(name)

    def lose(self, name: str, percent: int) -> None:
        """Drop ``percent`` % of the packets ``name`` sends and receives, at random."""
        self._loss[name] = percent
        self._apply(name)

    def _apply(self, name: str) -> None:
        """Replace the namespace's table with the rules now in force (atomic in nft)."""
        if not self.isolated:
            return
        rules = []
        for peer in sorted(self._cuts.get(name, ())):
            rules.append(f"    ip daddr {self.host(peer)} drop")
        percent = self._loss.get(name, 0)
        out = list(rules)
        into = []
        if percent:
            out.append(f'    oifname "eth0" numgen random mod 100 < {percent} drop')
            into.append(f'    iifname "eth0" numgen random mod 100 < {percent} drop')
        script = (
            f"table inet {_TABLE}\n"
            f"delete table inet {_TABLE}\n"
            f"table inet {_TABLE} {{\n"
            "  chain output {\n    type filter hook output priority 0; policy accept;\n"
            + "\n".join(out)
            + "\n  }\n"
            "  chain input {\n    type filter hook input priority 0; policy accept;\n"
            + "\n".join(into)
            + "\n  }\n}\n"
        )
        _run([*self.prefix(name), "nft", "-f", "-"], stdin=script)
