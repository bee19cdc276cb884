"""The soak benchmark's headline: growth over the second half, failures told apart by the faults, the verdicts."""

from __future__ import annotations

import datetime as dt
import doctest

from tests.benchmarks import soak_faults, soak_sources, soak_summary

START = 1_000_000.0


def _iso(at: float) -> str:
    return dt.datetime.fromtimestamp(at, dt.UTC).isoformat()


def _out(memory_end_kb: int, failed_at: list[float]) -> dict:
    """A 10-minute run of 6 views: a sync every 10 s, memory flat at 1 GB until it ends at `memory_end_kb`."""
    span = 600.0
    syncs = {
        f"s{i}": {
            "view": f"v{i % 6}",
            "status": "succeeded",
            "error_code": None,
            "queued_s": 0.1 * (i % 5),
            "finished_at": _iso(START + 10 * i + 5),
        }
        for i in range(60)
    }
    for n, at in enumerate(failed_at):
        syncs[f"f{n}"] = {
            "view": "v0",
            "status": "failed",
            "error_code": "agent_unreachable",
            "queued_s": 0.0,
            "finished_at": _iso(START + at),
        }
    samples = [(START + t, 1_000_000 if t < 540 else memory_end_kb, 5_000_000) for t in range(0, 600, 5)]
    return {
        "settings": {"every_s": 60, "fault_grace_s": 30.0},
        "run": {"started_at": START, "ended_at": START + span},
        "views": {f"v{i}": {"source": "sq1" if i < 3 else "pg"} for i in range(6)},
        "syncs": syncs,
        "faults": [{"kind": "agent", "target": "sq1", "at_s": 100.0, "down_s": 10.0, "outage_s": 20.0}],
        "samples": samples,
        "client": {"statuses": {"200": 500, "202": 3, "409": 1}},
        "check": {"views": 6, "exact": 6, "differ": {}},
        "stuck": [],
        "writer": {"update": 300, "insert": 150, "delete": 150},
        "service_log": {"tracebacks": 0, "lines_5xx": 0},
        "retention": {"keep": "10", "records_held": 60, "most_deltas_in_a_view": 10, "removed_answers": {"410": 6}},
    }


def test_a_flat_run_meets_the_goals_and_failures_are_told_apart_by_the_faults():
    s = soak_summary.summarize(_out(1_000_000, failed_at=[110.0, 400.0]))
    assert s["memory_kb"] == {"middle": 1_000_000, "end": 1_000_000, "growth": 0.0, "met": True}
    assert s["data_dir_bytes"]["met"] is True
    assert s["failures"] == {
        "during_faults": 1,
        "outside_faults": 1,
        "codes_during": {"agent_unreachable": 1},
        "codes_outside": {"agent_unreachable": 1},
    }
    assert (s["views"], s["sources"], s["succeeded"], s["failed"]) == (6, 2, 60, 2)
    assert s["syncs_per_minute"] == 6.0 and s["answers_5xx"] == 0 and s["queue"]["longest_s"] == 0.4
    text = " ".join(soak_summary.findings(s))
    assert (
        "the writer made 600 transactions" in text
        and "all 6 views exact" in text
        and "kept up with" in text
        and "+0.0 % (met" in text
    )


def test_memory_grown_in_the_last_tenth_is_a_miss_and_says_so():
    s = soak_summary.summarize(_out(1_060_000, failed_at=[]))
    assert s["memory_kb"]["growth"] == 0.06 and s["memory_kb"]["met"] is False
    assert "+6.0 % (NOT met" in " ".join(soak_summary.findings(s))


def test_docstring_examples():
    for module in (soak_summary, soak_faults, soak_sources):
        assert doctest.testmod(module).failed == 0, module.__name__
