"""The benchmark's table: the steady state over the change rounds, and the no-change round beside it."""

from __future__ import annotations

import doctest
import json
from pathlib import Path

from tests.benchmarks import report
from tests.benchmarks.__main__ import main
from tests.unit.benchmarks.test_merge import before_no_change_round, row

QUICK = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "quick.json"
KIB, MIB = 1024, 2**20


def sync(rnd: int, nbytes: int, exact: bool = True, **extra) -> dict:
    return {
        "round": rnd,
        "bytes": nbytes,
        "bytes_to_agent": nbytes // 4,
        "bytes_from_agent": nbytes - nbytes // 4,
        "round_trips": 2,
        "wall_s": 1.0 + rnd,
        "exact": exact,
        "rows_scanned": 1000,
        **extra,
    }


def results(quiet: dict | None = None) -> dict:
    """Three rounds after the load of two strategies; the steady state is rounds 2-3."""
    strategies = {
        "full_ship": {"rounds": [sync(0, 40 * MIB), *(sync(r, 40 * MIB) for r in (1, 2, 3))]},
        "group_hash": {"rounds": [sync(0, 40 * MIB), sync(1, 900 * KIB), sync(2, 100 * KIB), sync(3, 300 * KIB)]},
    }
    workload = {
        "rows": 1000,
        "description": "synthetic",
        "lower_bound_bytes": [30 * MIB, 50 * KIB, 50 * KIB, 50 * KIB],
        "floor_rounds": [{"adbc": 0.5, "psql": 0.8}] * 4,
        "view_rows": [1000, 1000, 1000, 1000],
        "strategies": strategies,
    }
    if quiet is not None:
        workload["no_change"] = {"round": 4, "lower_bound_bytes": 0, "true_delta": {}, "view_rows": 1000}
        for name, record in quiet.items():
            strategies[name]["no_change"] = {**record, "no_change": True}
    meta = {
        "name": "synthetic",
        "date": "2026-11-25T10:00:00+00:00",
        "git_commit": "c" * 40,
        "cpus": 2,
        "rounds": 3,
        "rows_by_workload": {"students": 1000},
        "elapsed_s": 60.0,
    }
    return {"meta": meta, "workloads": {"students": workload}}


def test_the_no_change_round_is_a_column_with_its_share_of_the_strategys_own_load():
    doc = results({"full_ship": sync(4, 40 * MIB), "group_hash": sync(4, 12 * KIB)})
    text = report.markdown(doc, report.summarize(doc))
    header = row(text.replace("| workload | strategy |", "| students | header |"), "header")
    assert header[-2:] == ["no-change round", "exact"]
    assert row(text, "full_ship")[-2:] == ["40.0 MiB (100 %)", "yes"]
    assert row(text, "group_hash")[-2:] == ["12.0 KiB (0.03 %)", "yes"]
    assert row(text, "*lower bound*")[-2:] == ["0 B", ""]
    assert "*no-change round*" in text and "after round 3" in text


def test_the_no_change_round_is_not_in_the_steady_state():
    doc = results({"full_ship": sync(4, 40 * MIB), "group_hash": sync(4, 90 * MIB)})
    summary = report.summarize(doc)["students"]
    assert summary["rounds"] == [2, 3]
    group_hash = summary["strategies"]["group_hash"]
    assert group_hash["bytes"] == 200 * KIB  # median of 100 and 300 KiB: not 90 MiB's round 4
    assert group_hash["wall_s"] == 3.5
    assert (group_hash["no_change_bytes"], group_hash["no_change_of_load"]) == (90 * MIB, 90 / 40)
    assert report.summarize(results())["students"]["strategies"]["group_hash"]["bytes"] == 200 * KIB


def test_a_no_change_round_that_is_not_exact_makes_the_strategy_not_exact():
    doc = results({"full_ship": sync(4, 40 * MIB), "group_hash": sync(4, 12 * KIB, exact=False)})
    strategies = report.summarize(doc)["students"]["strategies"]
    assert strategies["full_ship"]["exact"] and not strategies["group_hash"]["exact"]
    assert row(report.markdown(doc, report.summarize(doc)), "group_hash")[-1] == "**NO**"


def test_results_from_before_the_no_change_round_replot_with_a_dash(tmp_path, capsys):
    copy = tmp_path / "quick.json"
    copy.write_text(json.dumps(before_no_change_round(json.loads(QUICK.read_text()))))
    assert all(
        "no_change" not in s for s in json.loads(copy.read_text())["workloads"]["students"]["strategies"].values()
    )
    assert main(["--replot", str(copy)]) == 0
    text = (tmp_path / "quick.md").read_text()
    for strategy in ("full_ship", "group_hash", "sketch", "auto"):
        assert row(text, strategy)[-2:] == ["—", "yes"]
    assert (tmp_path / "quick-students.png").stat().st_size > 0


def test_the_reports_docstring_examples_hold():
    assert doctest.testmod(report).failed == 0


def test_results_with_a_no_change_round_are_written_and_replot_the_same(tmp_path):
    out = tmp_path / "synthetic.json"
    written = report.write(results({"full_ship": sync(4, 40 * MIB), "group_hash": sync(4, 12 * KIB)}), out)
    assert written["png:students"].stat().st_size > 0
    table = written["md"].read_text()
    assert main(["--replot", str(out)]) == 0
    assert written["md"].read_text() == table and "12.0 KiB (0.03 %)" in table


def test_a_run_without_the_no_change_round_says_so():
    doc = results()
    doc["meta"]["no_change_round"] = False
    text = report.markdown(doc, report.summarize(doc))
    assert "*no-change round*: not run (`--no-quiet-round`)." in text
    assert row(text, "group_hash")[-2:] == ["—", "yes"]


def timed(rnd: int, wall: float, **extra) -> dict:
    """A sync with the service's phases, one site's extraction steps and the agent's seconds."""
    return sync(
        rnd,
        100 * KIB,
        wall_s=wall,
        sync_wall_s=wall - 0.1,
        phases={"extract_sites": wall / 2, "build_fragments": wall / 4, "assemble_view": 0.2, "commit": 0.01},
        site_phases=[{"project_snapshot": 0.1, "plan_groups": 0.3, "exchange_units": wall / 2 - 0.5, "regroup": 0.1}],
        agent_seconds=wall / 4,
        **extra,
    )


def test_the_time_breakdown_is_the_steady_state_median_of_each_phase_against_the_floor():
    doc = results()
    split = {"read_s": 0.5, "convert_s": 0.25, "hash_s": 0.125, "send_s": 0.0625, "lookup_s": 0.0}
    doc["workloads"]["students"]["strategies"]["group_hash"]["rounds"] = [
        timed(0, 30.0),
        timed(1, 90.0),  # not in the steady state (rounds 2-3)
        timed(2, 4.0, agent_timings=split),
        timed(3, 6.0, site_agent_timings=[{k: 2 * v for k, v in split.items()}]),
    ]
    times = report.time_breakdown(doc)["students"]["group_hash"]
    assert (times["rounds"], times["wall_s"], times["sync_wall_s"]) == ([2, 3], 5.0, 4.9)
    assert times["phases"] == {"extract_sites": 2.5, "build_fragments": 1.25, "assemble_view": 0.2, "commit": 0.01}
    assert list(times["site_phases"]) == ["project_snapshot", "plan_groups", "exchange_units", "regroup"]
    assert times["site_phases"]["exchange_units"] == 2.0
    assert times["agent_seconds"] == 1.25
    assert times["agent_timings"]["read_s"] == 0.75  # the view's own 0.5 and the site's 1.0
    assert times["floor"] == {"seconds": 0.5, "method": "adbc", "methods": {"adbc": 0.5, "psql": 0.8}}
    assert times["x_floor"] == 10.0
    assert report.summarize(doc)["students"]["strategies"]["group_hash"]["time"] == times

    table = report.markdown(doc, report.summarize(doc)).split(report.TIME_HEADING)[1]
    [line] = [line for line in table.splitlines() if line.startswith("| students | group_hash |")]
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[2:8] == ["5.00", "4.90", "2.50", "1.25", "0.20", "0.01"]
    assert cells[8:10] == ["0.10 · 0.30 · 2.00 · 0.10", "1.25"]
    assert cells[10] == "read 0.75 · convert 0.38 · hash 0.19 · send 0.09 · lookup 0.00"
    assert cells[11:] == ["0.50", "10.0×"]


def test_records_without_phases_or_agent_timings_show_a_dash():
    doc = results()
    times = report.time_breakdown(doc)["students"]["full_ship"]
    assert (times["phases"], times["site_phases"], times["agent_timings"], times["agent_seconds"]) == ({}, {}, {}, None)
    table = report.time_table(doc, report.time_breakdown(doc))
    [line] = [line for line in table.splitlines() if line.startswith("| students | full_ship |")]
    assert line.count("| — ") == 8 and line.endswith("| 0.50 | 7.0× |")


def test_the_committed_quick_run_has_a_time_table_without_the_agents_split(capsys):
    assert main(["--breakdown", str(QUICK)]) == 0
    table = capsys.readouterr().out
    for strategy in ("full_ship", "group_hash", "sketch", "auto"):
        [line] = [line for line in table.splitlines() if line.startswith(f"| students | {strategy} |")]
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[4] != "—" and cells[10] == "—"  # phases recorded; agent_timings came later


def test_the_service_memory_and_the_plan_are_stated_when_measured():
    doc = results()
    assert "Service peak RSS" not in report.markdown(doc, report.summarize(doc))
    doc["workloads"]["students"].update(
        service_peak_rss_kb=3 * 2**20, service_peak_rss_by_process_kb={"service": 2**20, "java": 2 * 2**20}
    )
    doc["meta"].update(service_peak_rss_kb=4 * 2**20, plan="students at 1,000 rows")
    text = report.markdown(doc, report.summarize(doc))
    assert "Plan: students at 1,000 rows." in text
    assert (
        "(the service process, its Spark JVM and the JVM's Python workers, summed; sampled every 0.5 s from /proc): students 3.0 GiB (java 2.0 GiB, service 1.0 GiB); whole run 4.0 GiB."
        in text
    )


def test_each_sync_is_set_against_its_own_rounds_fastest_floor_method():
    doc = results()
    w = doc["workloads"]["students"]
    w["floor_rounds"] = [{"adbc": 5.0}, {"adbc": 9.0}, {"adbc": 1.0, "psql": 0.5}, {"adbc": 2.0, "psql": 4.0}]
    w["floor_failed"] = {"shell": "FileNotFoundError: `sqlite3` is not installed"}
    summary = report.summarize(doc)["students"]
    # rounds 2-3: floors 0.5 (psql) and 2.0 (adbc), one round each: adbc is quicker over both
    assert summary["floor"] == {"seconds": 1.25, "method": "adbc", "methods": {"adbc": 1.5, "psql": 2.25}}
    assert summary["strategies"]["group_hash"]["x_floor"] == 4.0  # median of 6.0 and 2.0
    text = report.markdown(doc, report.summarize(doc))
    assert row(text, "*floor: adbc*")[7:9] == ["1.25 s", "1.0×"]
    assert row(text, "group_hash")[8] == "4.0×"
    assert "| students | adbc (fastest most often: the floor) | 1.50 |" in text
    assert "| students | psql | 2.25 |" in text
    assert "| students | shell | did not run: FileNotFoundError: `sqlite3` is not installed |" in text
    assert "× scan" not in text and "bare scan" not in text


def test_results_from_before_the_floors_say_not_measured_and_keep_no_python_read_ratio(tmp_path):
    doc = results()
    w = doc["workloads"]["students"]
    del w["floor_rounds"]
    w.update(bare_scan_s_rounds=[0.5] * 4, bare_scan_s=0.5)  # the Python read older files recorded
    text = report.markdown(doc, report.summarize(doc))
    assert row(text, "*floor: not measured*")[7:9] == ["", ""]
    assert row(text, "group_hash")[8] == "—"
    [line] = [line for line in text.split(report.TIME_HEADING)[1].splitlines() if "| group_hash |" in line]
    assert line.endswith("| not measured | — |")
    assert "## Floors" not in text and "0.50 s" not in text
    assert report.write(doc, tmp_path / "old.json")["png:students"].stat().st_size > 0
