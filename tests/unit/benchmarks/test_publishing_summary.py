"""The publishing benchmark's headline: publishing added over the sync's time, against the goal of #37."""

from __future__ import annotations

from tests.benchmarks import publishing


def _round(number: int, kind: str, lines: int, added: float, postgres_s: float) -> dict:
    return {
        "round": number,
        "kind": kind,
        "plain": {"seconds": 4.8, "lines": lines},
        "published": {"seconds": 5.0, "lines": lines},
        "publishing": {
            "apply_s": {"delta": 1.0, "postgres": postgres_s},
            "until_applied_s": {"delta": 1.1, "postgres": 1.1 + postgres_s},
            "added_share": added,
            "delta_share": 0.2,
            "postgres_share": round(postgres_s / 5, 3),
        },
        "delta_table": {
            "version": number,
            "files": 1,
            "bytes": 10,
            "files_on_disk": number + 1,
            "bytes_on_disk": 20,
            "compactions": 0,
        },
    }


def _out(added: list[float]) -> dict:
    rounds = [_round(0, "load", 1000, 0.5, 2.0)]
    rounds += [_round(i + 1, "change", 16, a, 0.2) for i, a in enumerate(added)]
    rounds.append(_round(len(added) + 1, "10x change", 160, 0.6, 2.0))
    return {"rows": 1000, "rounds": rounds, "syncs": []}


def test_the_goal_is_judged_on_the_median_round_and_a_miss_says_by_how_much():
    out = _out([0.1, 0.3, 0.3])
    s = publishing.summarize(out)
    assert (s["added_share"], s["goal_met"]) == (0.3, False)
    assert (s["postgres_s_per_1k_lines"], s["large_postgres_s_per_1k_lines"]) == (12.5, 12.5)  # in proportion
    said = publishing.findings({**out, "summary": s})
    assert "not met: 30.0 % against ≤ 20 %, 10.0 points over" in said[0]
    assert "the table more than the delta" in said[2]  # the Delta apply did not grow with the lines
    assert publishing.summarize(_out([0.1, 0.15, 0.3]))["goal_met"]
