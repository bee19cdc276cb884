"""The memory the Spark heap is sized from: the machine's, or a container's lower limit."""

from __future__ import annotations

import os

import pytest


@pytest.mark.parametrize("limit, expected", [("max", None), ("8589934592\n", 8 * 2**30), ("not a number", None)])
def test_a_container_memory_limit_lowers_the_memory_the_heap_is_sized_from(tmp_path, monkeypatch, limit, expected):
    from warehouse import spark

    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    (tmp_path / "memory.max").write_text(limit)
    monkeypatch.setattr(spark, "CGROUP_LIMIT_FILES", (str(tmp_path / "memory.max"), str(tmp_path / "absent")))
    assert spark.machine_memory_bytes() == min(physical, expected or physical)
    monkeypatch.setattr(spark, "CGROUP_LIMIT_FILES", (str(tmp_path / "absent"), str(tmp_path / "memory.max")))
    assert spark.machine_memory_bytes() == min(physical, expected or physical)
