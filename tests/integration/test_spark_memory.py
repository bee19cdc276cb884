"""The service's Spark JVM gets the heap the settings promise.

On a local master the driver runs every task, and 2g ran out of heap on a 1M-row view of
1 KB rows; the default is now a quarter of the machine. Checked on the real JVM's command
line, the only place the heap size takes effect.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from warehouse.spark import default_driver_memory, machine_memory_bytes
from workloads.harness import start_service

pytestmark = pytest.mark.integration


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        children = (task / "children").read_text().split()
        out += [int(c) for c in children]
    return out


def java_heap(pid: int) -> str:
    """The -Xmx of the Java process started under `pid`."""
    todo, seen = [pid], []
    while todo:
        p = todo.pop()
        seen.append(p)
        args = Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")
        if args and os.path.basename(args[0]) == b"java":
            heaps = [a.decode()[4:] for a in args if a.startswith(b"-Xmx")]
            assert heaps, f"java process {p} has no -Xmx: {args}"
            return heaps[-1]
        todo += _children(p)
    raise AssertionError(f"no java process under {pid} (looked at {seen})")


def test_the_default_heap_is_a_quarter_of_the_machine(service):
    expected = default_driver_memory("local[*]", machine_memory_bytes())
    assert java_heap(service.proc.pid) == expected
    assert int(expected.removesuffix("m")) >= 2048


def test_the_heap_can_be_set(tmp_path, logs_dir):
    proc = start_service(tmp_path / "warehouse", logs_dir, env={"SERVICE_SPARK_DRIVER_MEMORY": "3g"})
    try:
        assert java_heap(proc.proc.pid) == "3g"
    finally:
        proc.stop()
