"""The scale projection: sittings read from results files, per-row costs and the 100M figures."""

from __future__ import annotations

import doctest
import json
import shutil

from tests.benchmarks import scale

RESULTS = scale.HERE / "results"


def test_the_scale_docstring_examples_hold():
    assert doctest.testmod(scale).failed == 0


def _sittings(tmp_path):
    folder = tmp_path / "sittings"
    folder.mkdir()
    shutil.copy(RESULTS / "time-1m-now.json", folder / "sqlite-1m.json")
    shutil.copy(RESULTS / "10m-auto.json", folder / "sqlite-10m.json")
    return folder


def test_sittings_of_different_commits_are_refused_unless_asked(tmp_path, capsys):
    folder = _sittings(tmp_path)
    assert scale.main(["report", "--dir", str(folder), "--out", str(tmp_path / "s")]) == 2
    assert "different commits" in capsys.readouterr().err
    assert not (tmp_path / "s.json").exists()


def test_the_report_holds_each_size_per_million_rows_and_a_projection(tmp_path):
    folder = _sittings(tmp_path)
    assert scale.main(["report", "--dir", str(folder), "--out", str(tmp_path / "s"), "--mixed-commits"]) == 0
    out = json.loads((tmp_path / "s.json").read_text())
    sqlite = [r for r in out["sittings"] if r["source"] == "sqlite" and r["strategy"] == "auto"]
    assert [r["rows"] for r in sqlite] == [1_000_000, 10_000_000]
    ten = sqlite[1]
    # 10m-auto's steady sync took 46.6 s over 10M rows: 4.66 s per million
    assert abs(ten["sync s/M rows"] - 4.66) < 0.01
    projected = out["summary"]["sqlite"]
    assert projected["sizes"] == [1_000_000, 10_000_000]
    assert projected["steady sync s"] == round(ten["sync s/M rows"] * 100, 1)
    assert any(f.startswith("sqlite at 100,000,000 rows") for f in out["findings"])
    assert (tmp_path / "s.md").read_text().startswith("# Scale projection")
