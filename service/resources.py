"""What the service process holds of the machine now: threads, open files, TCP connections and
memory, read from Linux's /proc (GET /metrics shows them; elsewhere they read as absent).

None of these should grow with the number of sources or views: the sync pool, the per-source
slots, one sequential source check and the publisher's workers bound the threads, and every
agent client is closed when its sync or check ends (docs/operations/many-views.md#many-sources).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

#: /proc/net/tcp's state code of an established connection, and of a listening socket.
ESTABLISHED, LISTEN = "01", "0A"


@dataclass(frozen=True)
class Usage:
    """One reading of a process's resources (None: not readable here)."""

    threads: int | None
    open_files: int | None
    #: established TCP connections: accepted on a port the process listens on, and opened by it
    connections_in: int | None
    connections_out: int | None
    rss_bytes: int | None
    #: the process and its descendants (the service's Spark JVM and its Python workers)
    tree_rss_bytes: int | None


def _status(pid: int | str, field: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def _socket_inodes(pid: int | str) -> tuple[int | None, set[str]]:
    """The number of open file descriptors, and the inodes of those that are sockets."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return None, set()
    inodes = set()
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return len(fds), inodes


def tcp_sockets(table: str) -> list[tuple[int, int, str, str]]:
    """(local port, remote port, state, inode) of each socket of a /proc/net/tcp table's text.

    >>> text = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\\n"
    >>> text += "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 4242 1\\n"
    >>> tcp_sockets(text)
    [(8080, 0, '0A', '4242')]
    """
    out = []
    for line in table.splitlines()[1:]:
        parts = line.split()
        if len(parts) < 10:
            continue
        local, remote = (int(address.rsplit(":", 1)[1], 16) for address in parts[1:3])
        out.append((local, remote, parts[3], parts[9]))
    return out


def _tcp(pid: int | str) -> list[tuple[int, int, str, str]]:
    rows = []
    for name in ("tcp", "tcp6"):
        try:
            rows += tcp_sockets(Path(f"/proc/{pid}/net/{name}").read_text())
        except OSError:
            continue
    return rows


def peers(pid: int | str) -> list[int]:
    """The remote ports of the process's established TCP connections (one entry per connection)."""
    _, inodes = _socket_inodes(pid)
    return [remote for _, remote, state, inode in _tcp(pid) if inode in inodes and state == ESTABLISHED]


def connections(pid: int | str, inodes: set[str]) -> tuple[int | None, int | None]:
    """Established TCP connections of the process's sockets (`inodes`): (accepted, opened).

    A connection is accepted when its local port is one the process listens on."""
    rows = _tcp(pid)
    if not rows:
        return None, None
    mine = [r for r in rows if r[3] in inodes]
    listening = {port for port, _, state, _ in mine if state == LISTEN}
    established = [port for port, _, state, _ in mine if state == ESTABLISHED]
    accepted = sum(port in listening for port in established)
    return accepted, len(established) - accepted


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        member = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{member}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                kids = [int(c) for c in Path(f"/proc/{member}/task/{task}/children").read_text().split()]
            except (OSError, ValueError):
                continue
            found += kids
            todo += kids
    return found


def usage(pid: int | None = None) -> Usage:
    """The resources of process `pid` (this one by default) now."""
    pid = pid or os.getpid()
    open_files, inodes = _socket_inodes(pid)
    accepted, opened = connections(pid, inodes)
    rss_kb = _status(pid, "VmRSS")
    tree = [kb for kb in (_status(child, "VmRSS") for child in _descendants(pid)) if kb is not None]
    return Usage(
        threads=_status(pid, "Threads"),
        open_files=open_files,
        connections_in=accepted,
        connections_out=opened,
        rss_bytes=None if rss_kb is None else rss_kb * 1024,
        tree_rss_bytes=None if rss_kb is None else (rss_kb + sum(tree)) * 1024,
    )
