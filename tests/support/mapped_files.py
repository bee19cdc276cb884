"""The files an agent's processes map (/proc/<pid>/maps): the agent, its readers' fork server and its readers."""

from __future__ import annotations

from pathlib import Path

from tests.benchmarks import machine


def process_tree(pid: int) -> dict[int, tuple[str, set[str]]]:
    """Each live process of the tree under `pid`, with its command line and the files it maps
    (a process that ended meanwhile, a reader say, is left out)."""
    found, todo = {}, [pid]
    while todo:
        at = todo.pop()
        try:
            lines = Path(f"/proc/{at}/maps").read_text().splitlines()
            command = Path(f"/proc/{at}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        found[at] = command, {line.split()[-1] for line in lines if "/" in line}
        todo += machine.children(at)
    return found


def numba_files(mapped: set[str]) -> list[str]:
    """The files of numba's modules or of its LLVM library (llvmlite) among `mapped`.

    >>> numba_files({"/v/lib/llvmlite/binding/libllvmlite.so", "/v/lib/numba/core/x.so", "/usr/lib/libc.so.6"})
    ['/v/lib/llvmlite/binding/libllvmlite.so', '/v/lib/numba/core/x.so']
    """
    return sorted(path for path in mapped if "llvmlite" in path or "/numba/" in path)
