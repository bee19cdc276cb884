"""The goals page reads each goal's figure from its results file, and says what is missing."""

from __future__ import annotations

import json
import shutil

from tests.benchmarks import goals

RESULTS = goals.RESULTS


def test_every_goal_is_read_from_the_committed_files_or_said_to_be_missing():
    rows = goals.collect()
    assert list(rows) == [g.name for g in goals.GOALS]
    for goal in goals.GOALS:
        row = rows[goal.name]
        path = RESULTS / goal.file
        if path.exists() and (goals._date(json.loads(path.read_text())) or "") < goal.since:
            assert row["standing"] == f"not measured: {goal.command}", goal.name  # a run before the goal's
        elif path.exists():
            assert row["measured"] is not None, (goal.name, "its results file holds no such figure")
            assert row["standing"] == "met" or row["standing"].startswith("missed: ")
            assert row["standing"] == "met" or row["in the way"], goal.name
        else:
            assert row["standing"] == f"not measured: {goal.command}"


def test_a_new_run_moves_the_standing(tmp_path):
    """The page follows the files: a run that meets a goal turns its row to met."""
    goal = next(g for g in goals.GOALS if g.name == "sync ÷ floor, SQLite, 1M rows")
    run = json.loads((RESULTS / goal.file).read_text())
    students = run["workloads"]["students"]  # every round's floor 1 s, every sync 1.25 s
    students["floor_rounds"] = [{"a floor": 1.0} for _ in students["floor_rounds"]]
    for record in students["strategies"]["auto"]["rounds"]:
        record["wall_s"] = 1.25
    (tmp_path / goal.file).write_text(json.dumps(run))
    shutil.copy(RESULTS / "small-syncs.json", tmp_path / "small-syncs.json")
    rows = goals.collect(tmp_path)
    assert rows[goal.name]["standing"] == "met" and rows[goal.name]["measured"] == 1.25
    assert rows[goal.name]["in the way"] == ""
    page = goals.markdown(rows)
    assert f"({goal.file.removesuffix('.json')}.md)" in page and "publishing-1m.json (not there)" in page
