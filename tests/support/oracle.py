"""The truth, computed straight from the source databases, and the delta it implies."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

import httpx

Normalizer = Callable[[object], object]


#: The metrics every sync record holds (CONTRACT.md).
CONTRACT_METRICS = (
    "bytes_to_agent",
    "bytes_from_agent",
    "round_trips",
    "rows_inserted",
    "rows_updated",
    "rows_deleted",
    "groups_sent",
    "groups_identical",
    "groups_changed",
    "groups_regrouped",
    "tuples_ungrouped",
    "wall_seconds",
)


def keyed(rows: Iterable[dict], key: list[str]) -> dict:
    out = {}
    for row in rows:
        k = tuple(row[c] for c in key)
        assert k not in out, f"duplicate key {k} in {row}"
        out[k] = row
    return out


def normalize(rows: Iterable[tuple], columns: list[str], normalizers: dict[str, Normalizer]) -> list[dict]:
    out = []
    for row in rows:
        out.append({c: (normalizers[c](v) if c in normalizers and v is not None else v) for c, v in zip(columns, row)})
    return out


def expected_delta(before: dict, after: dict) -> dict:
    """{key: (op, row)} that turns `before` into `after`, real changes only."""
    delta = {}
    for k, row in after.items():
        if k not in before:
            delta[k] = ("insert", row)
        elif before[k] != row:
            delta[k] = ("update", row)
    for k, row in before.items():
        if k not in after:
            delta[k] = ("delete", row)
    return delta


def differs(old: object, new: object) -> bool:
    """Whether a column's value changed, as a delta's `changed` says: NULL to a value and
    back does, NaN to NaN does not."""
    if old is None or new is None:
        return (old is None) != (new is None)
    if isinstance(old, float) and isinstance(new, float) and old != old and new != new:
        return False
    return old != new


def changed_columns(old: dict, new: dict, key: list[str]) -> list[str]:
    """The columns an update from `old` to `new` changed, in `new`'s order."""
    return [c for c in new if c not in key and differs(old[c], new[c])]


def check_sync(api, view: str, key: list[str], before: dict, truth: dict, sync: dict) -> None:
    """The view equals the truth; its delta and metrics say exactly what changed (with the
    columns each update changed, where the delta says them)."""
    assert sync["status"] == "succeeded", sync["error"]
    rows = keyed(api.rows(view), key)
    if rows != truth:
        missing = truth.keys() - rows.keys()
        extra = rows.keys() - truth.keys()
        differ = [(rows[k], truth[k]) for k in rows.keys() & truth.keys() if rows[k] != truth[k]]
        raise AssertionError(
            f"view {view} differs from the source: missing {sorted(missing)[:5]}, extra {sorted(extra)[:5]}, different {differ[:3]}"
        )
    want = expected_delta(before, truth)
    got = {}
    for line in api.delta(view, sync["id"]):
        if line["op"] == "schema":  # a sync that applied a redefinition says so first
            assert line == api.delta(view, sync["id"])[0] and sync["trigger"] == "redefine", line
            continue
        k = tuple(line["row"][c] for c in key)
        assert k not in got, f"key {k} twice in the delta"
        got[k] = (line["op"], line["row"] if line["op"] != "delete" else want.get(k, (None, line["row"]))[1])
        if "changed" in line:
            assert line["op"] == "update", f"`changed` on a {line['op']} line: {line}"
            assert k in before and k in truth, f"an update of key {k} the truth does not update"
            truly = changed_columns(before[k], line["row"], key)
            assert line["changed"] == truly, (
                f"key {k}: changed {line['changed']} != {truly} ({before[k]} -> {line['row']})"
            )
    assert {k: v[0] for k, v in got.items()} == {k: v[0] for k, v in want.items()}, "delta ops differ from the truth"
    for k, (op, row) in want.items():
        if op != "delete":
            assert got[k][1] == row, f"delta row for {k}: {json.dumps(got[k][1])} != {json.dumps(row)}"
    m = sync["metrics"]
    # a sync on the Arrow executor (warehouse/executor.py) ran no Spark job at all
    assert m.get("executor") in ("arrow", "spark", None), m.get("executor")
    if m.get("executor") == "arrow":
        assert m["spark_jobs"] == 0, f"an Arrow sync ran {m['spark_jobs']} Spark job(s)"
    counts = {op: sum(1 for v in want.values() if v[0] == op) for op in ("insert", "update", "delete")}
    assert (m["rows_inserted"], m["rows_updated"], m["rows_deleted"]) == (
        counts["insert"],
        counts["update"],
        counts["delete"],
    )
    if m.get("columns_changed") is not None:
        updates = [(before[k], row) for k, (op, row) in want.items() if op == "update"]
        counts_per_column = {c: sum(c in changed_columns(o, n, key) for o, n in updates) for c in m["columns_changed"]}
        assert m["columns_changed"] == counts_per_column, "metrics.columns_changed differ from the truth"
    if m.get("differences_found") is not None and len(m.get("sites", ())) == 1:
        # a peeled sketch of a one-site view finds exactly the pairs that differ: two per
        # update (old and new row), one per insert and per delete; no more, no fewer
        pairs = 2 * counts["update"] + counts["insert"] + counts["delete"]
        assert m["differences_found"] == pairs, (m["differences_found"], counts)


def run_rounds(api, legacy, views: dict, rounds: int, *, at_once: int = 1) -> dict:
    """Define the views, then load and sync them `rounds` times with changes in between.

    `views`: name -> (view SQL, SQL computing the truth on the source, key, normalizers
    [, extra view options such as the strategy]). `legacy` has `change()` and
    `truth(sql, key, normalizers)`. `at_once` views sync side by side (the service runs
    SERVICE_MAX_CONCURRENT_SYNCS at once, 2 by default): the source does not change
    within a round, so each sync is checked against the same truth as when run alone.
    Returns the last sync of each view.
    """
    for name, (sql, _, key, _, *extra) in views.items():
        view = api.add_view(name, sql, **(extra[0] if extra else {}))
        assert view["key"] == key, view
    before = {name: {} for name in views}
    last = {}
    with ThreadPoolExecutor(at_once, thread_name_prefix="round") as pool:
        for rnd in range(rounds + 1):
            if rnd:
                legacy.change()
            truths = {
                name: legacy.truth(sql, key, normalizers) for name, (_, sql, key, normalizers, *_) in views.items()
            }
            # at_once == 1: each sync starts once the one before it is checked (a metered link needs that)
            syncs = {name: pool.submit(api.sync, name) for name in views} if at_once > 1 else {}
            for name, (_, _, key, _, *_) in views.items():
                sync = syncs[name].result() if syncs else api.sync(name)
                check_sync(api, name, key, before[name], truths[name], sync)
                before[name] = truths[name]
                last[name] = sync
    return last


def check_sample(api, view: str, key: list[str], truth: dict, target: int) -> tuple[dict, httpx.Headers]:
    """GET the view's sample: rows of the view with the view's values, each once, at most
    `target` of them; headers that say its size, target, the view's size and version.
    Returns the sample keyed, and the headers."""
    r = api.http.get(f"/v1/views/{view}/sample")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/x-ndjson")
    sample = keyed((json.loads(line) for line in r.text.splitlines() if line), key)
    for k, row in sample.items():
        assert truth.get(k) == row, f"sampled row {k} is not the view's: {row} != {truth.get(k)}"
    h = r.headers
    assert int(h["X-Sample-Size"]) == len(sample) <= target == int(h["X-Sample-Target"]), dict(h)
    assert int(h["X-View-Rows"]) == len(truth)
    return sample, h
