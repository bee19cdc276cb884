"""Find the Spark JVM a service process started, through /proc."""

from __future__ import annotations

import os
from pathlib import Path


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        out += [int(c) for c in (task / "children").read_text().split()]
    return out


def java_process(pid: int) -> tuple[int, list[str]]:
    """Pid and command line of the live Java process under `pid`."""
    todo, seen = [pid], []
    while todo:
        p = todo.pop()
        seen.append(p)
        try:
            args = Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")
            todo += _children(p)
        except OSError:  # gone meanwhile
            continue
        if args and os.path.basename(args[0]) == b"java":
            return p, [a.decode() for a in args if a]
    raise AssertionError(f"no live java process under {pid} (looked at {seen})")


def java_pid(pid: int) -> int:
    return java_process(pid)[0]


def java_heap(pid: int) -> str:
    """The -Xmx of the Java process under `pid`."""
    _, args = java_process(pid)
    heaps = [a[4:] for a in args if a.startswith("-Xmx")]
    assert heaps, f"the java process has no -Xmx: {args}"
    return heaps[-1]
