"""Before and after: two results files set side by side, figure by figure."""

from __future__ import annotations

import doctest
import json

import pytest

from tests.benchmarks import compare
from tests.benchmarks.scale import HERE

RESULTS = HERE / "results"


def test_the_compare_docstring_examples_hold():
    assert doctest.testmod(compare).failed == 0


def test_each_workload_and_strategy_both_ran_is_compared_and_a_missing_floor_is_said(tmp_path):
    assert (
        compare.main([str(RESULTS / "time-1m-now.json"), str(RESULTS / "floors-1m.json"), "--out", str(tmp_path / "c")])
        == 0
    )
    out = json.loads((tmp_path / "c.json").read_text())
    auto = out["summary"]["students · auto · 1,000,000 rows"]
    assert auto["sync s"].startswith("9.48 → 31.9")  # the two runs' steady medians
    assert auto["÷ floor"].startswith("not measured → ")  # the earlier run predates the floors
    assert "students@postgres · full_ship · 1,000,000 rows" in out["summary"]
    assert "## students · auto" in (tmp_path / "c.md").read_text()


def test_files_come_in_pairs(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        compare.main([str(RESULTS / "quick.json"), "--out", str(tmp_path / "c")])
    assert stop.value.code == 2
    assert "pairs" in capsys.readouterr().err
