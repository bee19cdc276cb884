"""A "legacy host" in its own network namespace, linked to this ("warehouse") host by a veth pair.

The two ends get the two usable addresses of a private /30; each end can be rate limited
with a `tc tbf` qdisc (netem is not available everywhere, tbf is). A process runs on the
legacy host when started with `link.prefix()` in front of its command (`ip netns exec`
replaces itself with the command, so the pid stays the command's). The interface counters
of the warehouse end show every frame that crossed the link, and the link can be cut and
restored. Names are `ds-<pid>-<n>`, so parallel runs do not collide and `remove_stale()`
can tell which namespaces belong to runs that are gone.

Needs root: `available()` says whether this machine can do it, and if not, exactly why.

    with legacy_host(rate_mbit=20) as link:
        agent = start_agent(db_url, logs, host=link.ns_ip, prefix=link.prefix())
        ...
"""

from __future__ import annotations

import fcntl
import ipaddress
import itertools
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

#: Names of everything this module creates start with this.
PREFIX = "ds-"
#: The /30s of the links are taken from here (private, unlikely to be routed on a test box).
POOL = ipaddress.ip_network("10.250.0.0/16")
#: Held while an address is chosen and assigned, so parallel runs never pick the same /30.
LOCK_FILE = Path(tempfile.gettempdir()) / "deltasieve-netns.lock"
#: Bytes of Ethernet (14), IPv4 (20) and TCP with timestamps (32) headers in front of the
#: payload of every TCP frame on the link (the kernel's default options).
TCP_FRAME_OVERHEAD = 14 + 20 + 32
#: tbf needs a bucket of at least one (GSO-segmented) frame; 10 ms of traffic above that
#: keeps a fast link from stalling on timer granularity.
MIN_BURST_BYTES = 32 * 1024
#: How long a frame may wait in the tbf queue before it is dropped.
TBF_LATENCY_MS = 400

_NAME = re.compile(rf"^{re.escape(PREFIX)}(\d+)-(\d+)([hl]?)$")
_counter = itertools.count(1)


class NetnsError(RuntimeError):
    """A namespace, link or qdisc command failed."""


def _run(args: list[str], check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(args, capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise NetnsError(f"{' '.join(args)} failed ({proc.returncode}): {(proc.stderr or proc.stdout).strip()}")
    return proc


@lru_cache(maxsize=1)
def available() -> tuple[bool, str]:
    """(True, "") when this process can build a legacy host, else (False, why not)."""
    if os.geteuid() != 0:
        return False, f"needs root to create network namespaces (running as uid {os.geteuid()})"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return False, f"the `{tool}` command (iproute2) is not installed"
    try:
        with legacy_host(rate_mbit=100):
            pass
    except (NetnsError, OSError, subprocess.SubprocessError) as exc:
        return False, f"cannot build a network namespace with a rate-limited veth link: {exc}"
    return True, ""


@dataclass(frozen=True)
class Counters:
    """Frames and bytes through the warehouse end of the link (headers included)."""

    tx_bytes: int
    rx_bytes: int
    tx_packets: int
    rx_packets: int

    def __sub__(self, other: Counters) -> Counters:
        return Counters(*(a - b for a, b in zip(self._values(), other._values())))

    def _values(self) -> tuple[int, int, int, int]:
        return self.tx_bytes, self.rx_bytes, self.tx_packets, self.rx_packets

    def payload_to_legacy(self) -> int:
        """Bytes sent towards the legacy host minus the TCP/IP frame headers."""
        return self.tx_bytes - TCP_FRAME_OVERHEAD * self.tx_packets

    def payload_from_legacy(self) -> int:
        """Bytes received from the legacy host minus the TCP/IP frame headers."""
        return self.rx_bytes - TCP_FRAME_OVERHEAD * self.rx_packets


@dataclass
class Link:
    """A network namespace and the veth pair joining it to the root namespace."""

    name: str
    host_dev: str
    ns_dev: str
    host_ip: str
    ns_ip: str
    rate_mbit: float | None = None

    def prefix(self) -> list[str]:
        """Put in front of a command to run it on the legacy host."""
        return ["ip", "netns", "exec", self.name]

    def run(self, args: list[str], check: bool = True) -> subprocess.CompletedProcess:
        """Run a command on the legacy host and wait for it."""
        return _run([*self.prefix(), *args], check=check)

    def counters(self) -> Counters:
        stats = Path("/sys/class/net") / self.host_dev / "statistics"
        return Counters(*(int((stats / f).read_text()) for f in ("tx_bytes", "rx_bytes", "tx_packets", "rx_packets")))

    def set_rate(self, mbit: float | None) -> None:
        """Limit both directions to `mbit` (None: unlimited) with a tbf qdisc on each end."""
        for dev, prefix in ((self.host_dev, []), (self.ns_dev, self.prefix())):
            _run([*prefix, "tc", "qdisc", "del", "dev", dev, "root"], check=False)  # none yet is fine
            if mbit is not None:
                burst = max(MIN_BURST_BYTES, int(mbit * 1e6 / 8 / 100))
                _run(
                    [
                        *prefix,
                        "tc",
                        "qdisc",
                        "add",
                        "dev",
                        dev,
                        "root",
                        "tbf",
                        "rate",
                        f"{mbit:g}mbit",
                        "burst",
                        str(burst),
                        "latency",
                        f"{TBF_LATENCY_MS}ms",
                    ]
                )
        self.rate_mbit = mbit

    def cut(self) -> None:
        """Take the legacy host's interface down: frames vanish, as when a cable is pulled.

        The warehouse end keeps its route (marked linkdown), so the service's packets are
        dropped rather than sent out of another interface."""
        self.run(["ip", "link", "set", self.ns_dev, "down"])

    def restore(self) -> None:
        """Bring the legacy host's interface back up (addresses and qdisc survive a cut)."""
        self.run(["ip", "link", "set", self.ns_dev, "up"])

    def destroy(self) -> None:
        """Remove the veth pair and the namespace; whatever is already gone is fine."""
        _run(["ip", "link", "del", self.host_dev], check=False)
        _run(["ip", "netns", "del", self.name], check=False)


def _used_networks() -> list[ipaddress.IPv4Network]:
    out = _run(["ip", "-o", "-4", "addr", "show"]).stdout
    return [ipaddress.ip_interface(m).network for m in re.findall(r"inet (\S+)", out)]


def _free_subnet() -> ipaddress.IPv4Network:
    used = _used_networks()
    for net in POOL.subnets(new_prefix=30):
        if not any(net.overlaps(u) for u in used):
            return net
    raise NetnsError(f"no free /30 left in {POOL}; remove stale namespaces with workloads.netns.remove_stale()")


def create(rate_mbit: float | None = None) -> Link:
    """Build a new legacy host; the caller must `destroy()` it (or use `legacy_host`)."""
    name = f"{PREFIX}{os.getpid()}-{next(_counter)}"
    link = Link(name, f"{name}h", f"{name}l", "", "")
    try:
        with open(LOCK_FILE, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            net = _free_subnet()
            link.host_ip, link.ns_ip = (str(a) for a in net.hosts())
            _run(["ip", "netns", "add", name])
            _run(["ip", "link", "add", link.host_dev, "type", "veth", "peer", "name", link.ns_dev, "netns", name])
            _run(["ip", "addr", "add", f"{link.host_ip}/30", "dev", link.host_dev])
        # no IPv6 autoconfiguration chatter on the link: its counters should show our traffic
        for path in (f"/proc/sys/net/ipv6/conf/{link.host_dev}/disable_ipv6",):
            if os.path.exists(path):
                Path(path).write_text("1")
        link.run(
            [
                "sh",
                "-c",
                f"[ ! -e /proc/sys/net/ipv6/conf/{link.ns_dev}/disable_ipv6 ] || echo 1 > /proc/sys/net/ipv6/conf/{link.ns_dev}/disable_ipv6",
            ]
        )
        link.run(["ip", "addr", "add", f"{link.ns_ip}/30", "dev", link.ns_dev])
        link.run(["ip", "link", "set", "lo", "up"])
        link.run(["ip", "link", "set", link.ns_dev, "up"])
        _run(["ip", "link", "set", link.host_dev, "up"])
        link.set_rate(rate_mbit)
    except BaseException:
        link.destroy()
        raise
    return link


@contextmanager
def legacy_host(rate_mbit: float | None = None) -> Iterator[Link]:
    """A legacy host for the duration of the block, removed however the block ends.

    Stop the processes started in it before the block ends: a namespace lives on while a
    process is inside it (its veth pair does not: it is deleted here in any case)."""
    link = create(rate_mbit)
    try:
        yield link
    finally:
        link.destroy()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale() -> list[str]:
    """Remove the namespaces and veth ends of runs whose process is gone; returns their names."""
    removed = []
    namespaces = [
        line.split()[0] for line in _run(["ip", "netns", "list"], check=False).stdout.splitlines() if line.strip()
    ]
    links = re.findall(
        rf"^\d+: ({re.escape(PREFIX)}[^:@\s]+)", _run(["ip", "-o", "link", "show"], check=False).stdout, re.M
    )
    for name in namespaces:
        m = _NAME.match(name)
        if m and not m.group(3) and not _alive(int(m.group(1))):
            _run(["ip", "netns", "del", name], check=False)
            removed.append(name)
    for dev in links:
        m = _NAME.match(dev)
        if m and m.group(3) == "h" and not _alive(int(m.group(1))):
            if _run(["ip", "link", "del", dev], check=False).returncode == 0:  # gone with its namespace otherwise
                removed.append(dev)
    return removed
