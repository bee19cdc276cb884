"""The view's random sample: uniform under inserts, updates and deletes, and the three
deferred refreshes of paper 004 alike in distribution.

Every test runs a fixed set of seeds, so its outcome is fixed: the chi-square bounds are
at a significance of 0.1 %, and a seed set that passes passes every time.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pyarrow as pa
import pytest

from warehouse.sample import refresh as sample_refresh
from warehouse.sample.view_sample import SampleSettings, ViewChange, maintain, multiset_removals

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.string())])
M = 8


def _rounds(seed: int = 42, start: int = 40, rounds: int = 3) -> list[dict]:
    """The same view history for every run: per round the keys deleted, updated, inserted."""
    r = random.Random(seed)
    keys = list(range(start))
    fresh = start
    out = []
    for n in range(rounds):
        deleted = r.sample(keys, 14 if n == 1 else 6)  # round 1 shrinks the sample enough to refill, often
        keys = [k for k in keys if k not in deleted]
        updated = r.sample(keys, 5)
        inserted = list(range(fresh, fresh + 20))
        fresh += 20
        keys += inserted
        out.append({"deleted": deleted, "updated": updated, "inserted": inserted, "keys": list(keys), "round": n})
    return out


def _table(keys, round_: int) -> pa.Table:
    return pa.table({"k": keys, "v": [f"{k}@{round_}" for k in keys]}, schema=SCHEMA)


def _history() -> tuple[pa.Table, list[dict]]:
    """The first view, then per round its change and the view after it (made once)."""
    first = view = _table(list(range(40)), -1)
    steps = []
    for step in _rounds():
        updated, inserted = _table(step["updated"], step["round"]), _table(step["inserted"], step["round"])
        gone = pa.array(step["deleted"] + step["updated"])
        kept = view.filter(pa.compute.invert(pa.compute.is_in(view.column("k"), gone)))
        after = pa.concat_tables([kept, updated, inserted])
        truth = {r["k"]: r["v"] for r in after.to_pylist()}
        steps.append(
            {**step, "updated_rows": updated, "inserted_rows": inserted, "before": view, "view": after, "truth": truth}
        )
        view = after
    return first, steps


FIRST, HISTORY = _history()


def _run(seed: int, method: str | None = None) -> tuple[pa.Table, dict]:
    """Build a sample of the first view, then keep it through the rounds; check at each
    step that it is a subset of the view with the view's values."""
    rng = np.random.default_rng(seed)
    settings = SampleSettings(M, ["k"], SCHEMA, method)
    m = maintain(None, settings, ViewChange(0, FIRST.num_rows, 0, lambda: iter([])), FIRST.to_batches, rng)
    states, samples = [m.state], []
    for step in HISTORY:
        change = ViewChange(
            step["before"].num_rows,
            step["view"].num_rows,
            len(step["deleted"]),
            lambda step=step: iter(step["inserted_rows"].to_batches(max_chunksize=7)),
            deleted=pa.table({"k": step["deleted"]}),
            updated=step["updated_rows"],
        )
        m = maintain(
            (m.rows, m.state), settings, change, lambda step=step: iter(step["view"].to_batches(max_chunksize=16)), rng
        )
        truth = step["truth"]
        keys, values = m.rows.column("k").to_pylist(), m.rows.column("v").to_pylist()
        assert len(set(keys)) == len(keys) == m.state.size <= M
        assert all(truth.get(k) == v for k, v in zip(keys, values)), "a sampled row differs from the view's"
        assert m.state.view_rows == step["view"].num_rows
        states.append(m.state)
        samples.append(keys)
    return m.rows, {"view": HISTORY[-1]["view"], "states": states, "samples": samples}


def _chi2_bound(df: int, z: float = 3.09) -> float:
    """The chi-square quantile at 1 - 0.1 % (z of 0.1 %), by Wilson and Hilferty."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def test_every_row_is_sampled_with_the_same_probability():
    """After every round, over the runs: each row's inclusion count against its expectation
    (the sum over runs of s / N), row by row and by the rows' history (never changed,
    updated, inserted in a given round), which shows a bias toward old or new rows."""
    runs = 600
    counts = [{} for _ in HISTORY]
    expected = [0.0 for _ in HISTORY]
    refills = methods = 0
    for seed in range(runs):
        _, info = _run(seed)
        for r, (step, keys) in enumerate(zip(HISTORY, info["samples"], strict=True)):
            for k in keys:
                counts[r][k] = counts[r].get(k, 0) + 1
            expected[r] += len(keys) / step["view"].num_rows  # P(row in sample | size) = s / N
        refills += info["states"][-1].refills
        methods += sum(s.method in ("stack", "nomem") for s in info["states"])
    for r, step in enumerate(HISTORY):
        keys, e = step["keys"], expected[r]
        assert set(counts[r]) <= set(keys)
        chi2 = sum((counts[r].get(k, 0) - e) ** 2 / e for k in keys)
        assert chi2 < _chi2_bound(len(keys) - 1), (r, chi2)
        history = {k: "first" for k in keys}
        for earlier in HISTORY[: r + 1]:
            history.update({k: f"updated {earlier['round']}" for k in earlier["updated"] if k in history})
            history.update({k: f"inserted {earlier['round']}" for k in earlier["inserted"] if k in history})
        classes: dict[str, list[int]] = {}
        for k, label in history.items():
            classes.setdefault(label, []).append(k)
        chi2 = sum(
            (sum(counts[r].get(k, 0) for k in members) - e * len(members)) ** 2 / (e * len(members))
            for members in classes.values()
        )
        assert chi2 < _chi2_bound(len(classes) - 1), (r, {c: len(m) for c, m in classes.items()}, chi2)
    assert refills > 0 and methods > 0, "the runs must pass through refills and refreshes"


def test_the_three_refreshes_give_identically_distributed_samples():
    """Chi-square homogeneity of the final inclusion counts, array vs stack vs nomem."""
    runs = 250
    table = {}
    for method in ("array", "stack", "nomem"):
        counts: dict[int, int] = {}
        for seed in range(runs):
            rows, _ = _run(10_000 + seed, method)
            for k in rows.column("k").to_pylist():
                counts[k] = counts.get(k, 0) + 1
        table[method] = counts
    keys = sorted(set().union(*table.values()))
    totals = {m: sum(c.values()) for m, c in table.items()}
    grand = sum(totals.values())
    chi2 = 0.0
    for k in keys:
        row = sum(table[m].get(k, 0) for m in table)
        for m in table:
            e = row * totals[m] / grand
            chi2 += (table[m].get(k, 0) - e) ** 2 / e
    assert chi2 < _chi2_bound((len(keys) - 1) * 2), chi2


@pytest.mark.parametrize("m,length", [(5, 11), (1, 4), (7, 3), (30, 200)])
def test_each_refresh_keeps_a_candidate_with_the_exact_probability(m, length):
    """Candidate i survives the length - 1 - i later ones with probability (1 - 1/m)^(length-1-i)."""
    runs = 3000
    for name in ("array", "stack", "nomem"):
        rng = np.random.default_rng(len(name) * 1000 + m * 7 + length)
        kept = np.zeros(length)
        positions = np.zeros(m)
        for _ in range(runs):
            plan = sample_refresh.refresh(name, m, length, rng)
            assert [p for p, _ in plan] == sorted({p for p, _ in plan}) and len(plan) <= min(m, length)
            assert [i for _, i in plan] == sorted({i for _, i in plan}) and plan[-1][1] == length - 1
            for p, i in plan:
                kept[i] += 1
                positions[p] += 1
        exact = np.array([(1 - 1 / m) ** (length - 1 - i) for i in range(length)]) * runs
        live = (exact > 0) & (exact < runs)  # sure outcomes (the newest is always final) have no variance
        if live.any():
            chi2 = float(np.sum((kept[live] - exact[live]) ** 2 / (exact[live] * (1 - exact[live] / runs))))
            assert chi2 < _chi2_bound(int(live.sum())), (name, chi2)
        if m > 1:  # the displaced positions are spread evenly
            even = positions.sum() / m
            assert float(np.sum((positions - even) ** 2 / even)) < _chi2_bound(m - 1), name


# --- a multiset: equal rows are occurrences, and the sample holds occurrences -------------

MSCHEMA = pa.schema([("a", pa.int64())])


def _multiset_history(seed: int = 7, rounds: int = 3) -> tuple[dict, list[dict]]:
    """Contents with counts, then per round: delete lines (content, n), pairs `match` made
    (old content -> new content, one occurrence each), insert lines (content, n)."""
    r = random.Random(seed)
    first = {c: r.randint(1, 5) for c in range(20)}
    now, steps = dict(first), []
    for n in range(rounds):
        went = {c: r.randint(1, now[c]) for c in r.sample(sorted(now), 5 if n != 1 else 12)}
        before = dict(now)
        for c, k in went.items():
            now[c] -= k
        left = [c for c in now if now[c] > 0]
        moved = [(c, 100 + n * 10 + i) for i, c in enumerate(r.sample(left, 3))]
        for old, new in moved:
            now[old] -= 1
            now[new] = now.get(new, 0) + 1
        came = {c: r.randint(1, 3) for c in r.sample(range(60), 8)}
        for c, k in came.items():
            now[c] = now.get(c, 0) + k
        now = {c: k for c, k in now.items() if k > 0}
        steps.append({"before": before, "went": went, "moved": moved, "came": came, "after": dict(now)})
    return first, steps


MFIRST, MHISTORY = _multiset_history()


def _expand(counts: dict) -> pa.Table:
    return pa.table({"a": [c for c, k in sorted(counts.items()) for _ in range(k)]}, schema=MSCHEMA)


def _run_multiset(seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    view = _expand(MFIRST)
    settings = SampleSettings(M, [], MSCHEMA)
    m = maintain(None, settings, ViewChange(0, view.num_rows, 0, lambda: iter([])), view.to_batches, rng)
    held = []
    for step in MHISTORY:
        deleted = pa.table(
            {"__op": ["delete"] * len(step["went"]), "a": list(step["went"]), "__ds_count": list(step["went"].values())}
        )
        updated = pa.table(
            {"__op": ["update"] * len(step["moved"]), "a": [n for _, n in step["moved"]], "__ds_count": [1] * len(step["moved"]),
             "__ds_old_a": [o for o, _ in step["moved"]]}
        )  # fmt: skip
        inserts = [_expand(step["came"])]
        after = _expand(step["after"])
        removals = multiset_removals(
            ["a"], deleted, updated, lambda t, b=step["before"]: {(c,): b[c] for c in t.column("a").to_pylist()}, rng
        )
        gone = sum(step["went"].values()) + len(step["moved"])
        change = ViewChange(
            sum(step["before"].values()), after.num_rows, gone, lambda inserts=inserts: iter(inserts), removals=removals
        )
        m = maintain(
            (m.rows, m.state), settings, change, lambda after=after: iter(after.to_batches(max_chunksize=16)), rng
        )
        got: dict[int, int] = {}
        for c in m.rows.column("a").to_pylist():
            got[c] = got.get(c, 0) + 1
        assert all(k <= step["after"].get(c, 0) for c, k in got.items()), "more copies sampled than the view holds"
        assert m.state.size == m.rows.num_rows <= M and m.state.view_rows == after.num_rows
        held.append(got)
    return held


def test_a_multiset_sample_holds_each_content_in_proportion_to_its_count():
    """Per round, over the runs: the sampled copies of each content against s · N_c / N."""
    runs = 500
    copies = [{} for _ in MHISTORY]
    share = [0.0 for _ in MHISTORY]
    for seed in range(runs):
        for r, (step, got) in enumerate(zip(MHISTORY, _run_multiset(seed), strict=True)):
            for c, k in got.items():
                copies[r][c] = copies[r].get(c, 0) + k
            share[r] += sum(got.values()) / sum(step["after"].values())
    for r, step in enumerate(MHISTORY):
        chi2 = sum((copies[r].get(c, 0) - share[r] * k) ** 2 / (share[r] * k) for c, k in step["after"].items())
        assert chi2 < _chi2_bound(len(step["after"]) - 1), (r, chi2)
