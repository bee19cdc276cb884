"""Joining benchmark runs made in several sittings (`python -m tests.benchmarks --merge`)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from tests.benchmarks import report
from tests.benchmarks.__main__ import main, merge

QUICK = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "quick.json"


def before_no_change_round(results: dict) -> dict:
    """A results document as runs made before the no-change round wrote them."""
    results["meta"].pop("no_change_round", None)
    for measured in results["workloads"].values():
        measured.pop("no_change", None)
        for strategy in measured["strategies"].values():
            strategy.pop("no_change", None)
    return results


def bytes_table(text: str) -> str:
    """The summary's first table, without the time breakdown below it (its rows start alike)."""
    return text.split(report.TIME_HEADING)[0]


def row(text: str, strategy: str, workload: str = "students") -> list[str]:
    """The cells of a workload's row for `strategy` in the summary's bytes table."""
    [line] = [line for line in bytes_table(text).splitlines() if line.startswith(f"| {workload} | {strategy} |")]
    return [cell.strip() for cell in line.strip("|").split("|")]


def part(workload: str, commit: str, **meta) -> dict:
    """The committed quick run, as if it had measured `workload` at `commit` before the
    no-change round was added (a test adds it back where it wants one)."""
    results = before_no_change_round(json.loads(QUICK.read_text()))
    [(_, measured)] = results["workloads"].items()
    results["workloads"] = {workload: copy.deepcopy(measured)}
    results["meta"].update(
        workloads=[workload],
        rows_by_workload={workload: measured["rows"]},
        git_commit=commit,
        name=f"part-{workload}",
        **meta,
    )
    results.pop("summary", None)
    return results


def test_parts_join_into_one_table_that_names_each_sitting():
    a = part("students", "a" * 40, elapsed_s=600.0, date="2026-11-23T18:00:00+00:00")
    b = part("narrow", "b" * 40, elapsed_s=300.0, date="2026-11-22T09:00:00+00:00")
    joined = merge([a, b], name="full")
    assert joined["meta"]["name"] == "full"
    assert (joined["meta"]["date"], joined["meta"]["git_commit"]) == (a["meta"]["date"], "a" * 40)  # the latest sitting
    assert list(joined["workloads"]) == ["students", "narrow"]
    assert joined["meta"]["workloads"] == ["students", "narrow"]
    assert joined["meta"]["elapsed_s"] == 900.0
    assert [p["git_commit"] for p in joined["meta"]["parts"]] == ["a" * 40, "b" * 40]
    text = report.markdown(joined, report.summarize(joined))
    assert "| students | group_hash |" in text and "| narrow | group_hash |" in text
    assert (
        "students on" in text
        and "at commit aaaaaaaaaa" in text
        and "narrow on" in text
        and "at commit bbbbbbbbbb" in text
    )
    assert text.startswith("# Benchmark `full`") and "2 sittings, 2026-11-22 to 2026-11-23" in text


@pytest.mark.parametrize(
    "setting, value", [("rounds", 3), ("seed", 8), ("strategies", ["group_hash"]), ("link_mbit", 10.0)]
)
def test_runs_with_other_settings_are_refused(setting, value):
    with pytest.raises(ValueError, match=setting):
        merge([part("students", "a" * 40), part("narrow", "b" * 40, **{setting: value})])


def test_a_workload_measured_twice_is_refused():
    with pytest.raises(ValueError, match="students"):
        merge([part("students", "a" * 40), part("students", "b" * 40)])


def test_the_command_needs_an_output_and_reports_a_refusal(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--merge", str(QUICK)])
    assert exc.value.code == 2 and "--out" in capsys.readouterr().err
    paths = []
    for name, results in (("a", part("students", "a" * 40)), ("b", part("students", "b" * 40))):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(results))
    assert main(["--merge", *map(str, paths), "--out", str(tmp_path / "joined.json")]) == 2
    assert "appear in more than one run" in capsys.readouterr().err
    assert not (tmp_path / "joined.json").exists()


def test_a_run_with_the_no_change_round_joins_one_from_before_it():
    a = part("students", "a" * 40, no_change_round=True)
    for strategy in a["workloads"]["students"]["strategies"].values():
        load = strategy["rounds"][0]["bytes"]
        strategy["no_change"] = {**strategy["rounds"][-1], "round": 6, "bytes": load // 100, "no_change": True}
    b = part("narrow", "b" * 40)  # the committed run predates the no-change round
    joined = merge([a, b], name="full")
    assert [p.get("no_change_round") for p in joined["meta"]["parts"]] == [True, None]
    text = report.markdown(joined, report.summarize(joined))
    students, narrow = row(text, "group_hash"), row(text, "group_hash", "narrow")
    assert students[-2].endswith("(1.0 %)") and students[-1] == "yes" and narrow[-2:] == ["—", "yes"]


def test_a_postgresql_sitting_joins_a_sqlite_one_and_the_table_says_which_read_what():
    a = part("students", "a" * 40)  # from before the PostgreSQL source: no `source` anywhere
    b = part("students", "b" * 40, source="postgres")
    b["workloads"] = {"students@postgres": {**b["workloads"]["students"], "source": "postgres"}}
    b["meta"].update(workloads=["students@postgres"], rows_by_workload={"students@postgres": 200_000})
    b["meta"]["legs"] = {"students@postgres": {"workload": "students", "source": "postgres"}}
    joined = merge([a, b], name="full")
    assert joined["meta"]["source"] == "sqlite+postgres" and list(joined["meta"]["legs"]) == ["students@postgres"]
    text = report.markdown(joined, report.summarize(joined))
    assert "source: SQLite; PostgreSQL for students@postgres;" in text
    assert row(text, "auto", "students@postgres")[-1] == "yes"
