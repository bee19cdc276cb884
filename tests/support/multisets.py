"""Checks of a multiset view's sync against the truth computed at its sources."""

from __future__ import annotations

from collections import Counter


def check_sync(api, view: str, columns: list[str], before: Counter, truth: Counter, sync: dict) -> int:
    """The view equals `truth` as a multiset of rows (tuples in `columns` order); the delta
    turns `before` into it exactly, one line per distinct row that changed (never an insert
    and a delete of one row), each with its count where above one; the metrics count the
    occurrences. Returns the delta's lines with a count above one."""
    assert sync["status"] == "succeeded", sync["error"]
    as_row = lambda obj: tuple(obj[c] for c in columns)  # noqa: E731
    rows = Counter(as_row(r) for r in api.rows(view))
    assert rows == truth, f"view {view}: missing {truth - rows}, extra {rows - truth}"
    inserted, deleted = Counter(), Counter()
    for line in api.delta(view, sync["id"]):
        assert line["op"] in ("insert", "delete"), line
        assert "count" not in line or line["count"] > 1, line
        assert list(line) == (["op", "count", "row"] if "count" in line else ["op", "row"]), line
        row = as_row(line["row"])
        target = inserted if line["op"] == "insert" else deleted
        assert row not in inserted and row not in deleted, f"{row} on two lines of the delta"
        target[row] = line.get("count", 1)
    assert inserted == truth - before and deleted == before - truth, view
    m = sync["metrics"]
    assert (m["rows_inserted"], m["rows_updated"], m["rows_deleted"]) == (
        sum(inserted.values()),
        0,
        sum(deleted.values()),
    ), m
    assert m["rows_in_view"] == sum(truth.values())
    return sum(1 for n in [*inserted.values(), *deleted.values()] if n > 1)


def check_sample(api, view: str, columns: list[str], truth: Counter, target: int) -> Counter:
    """GET a multiset view's sample: occurrences of the view's rows, no row more often than
    the view holds it, at most `target` in all and at least half of that (or the whole
    view), its header saying how many. Returns it."""
    import json

    r = api.http.get(f"/v1/views/{view}/sample")
    assert r.status_code == 200, r.text
    sample = Counter(tuple(json.loads(line)[c] for c in columns) for line in r.text.splitlines() if line)
    assert not sample - truth, f"sampled rows the view does not hold (so often): {sample - truth}"
    size, total = sum(sample.values()), sum(truth.values())
    assert size == int(r.headers["X-Sample-Size"]), dict(r.headers)
    # deletes shrink it; short of its target while the view has more rows, it is drawn again
    assert size == min(target, total), (size, total, target)
    return sample


def random_bag_delta(rng, truth: Counter) -> list[dict]:
    """A random delta of a multiset view of columns `a` (int) and `b` (text), lines with
    `OP` and `COUNT`, against `truth` (changed in place to the view after it): a row loses
    some of its occurrences or gains a few, NULLs among the values."""
    from warehouse.multisets.multiset import COUNT
    from warehouse.names import OP

    lines = []
    for row in {(rng.choice([1, 2, None]), rng.choice(["x", None])) for _ in range(4)}:
        if truth[row] and rng.random() < 0.5:
            gone = rng.randrange(1, truth[row] + 1)
            truth[row] -= gone
            lines.append({OP: "delete", "a": row[0], "b": row[1], COUNT: gone})
        else:
            came = rng.randrange(1, 4)
            truth[row] += came
            lines.append({OP: "insert", "a": row[0], "b": row[1], COUNT: came})
    return lines
