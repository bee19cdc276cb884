"""The brute-force BestmatchJoin pairing the `match` tests compare a sync's updates with."""

from __future__ import annotations

from collections import Counter

MATCH = {"order_by": "at", "epsilon": {"at": 2, "v": 0.5}}
READINGS = ["at", "sensor", "v"]


def _order(value) -> tuple:
    return (0,) if value is None else (2, value)


def oracle_pairs(vanished: Counter, appeared: Counter) -> tuple[Counter, Counter, Counter]:
    """The pairing by brute force: every vanished occurrence (in order) against every
    appeared one; best matches are the qualifying rows no other qualifying row dominates;
    each takes its closest free best match (matching.py's documented rule)."""
    dims, eps = ["at", "v"], (2, 0.5)
    rest = [c for c in READINGS if c not in dims]

    def key(row):
        return tuple(_order(row[READINGS.index(d)]) for d in dims + rest)

    def point(row):
        return tuple(row[READINGS.index(d)] for d in dims)

    def measurable(row):
        return all(v is not None for v in point(row))

    left = sorted((r for r in vanished.elements() if measurable(r)), key=key)
    right = [r for r in appeared.elements() if measurable(r)]
    free = list(range(len(right)))
    pairs = Counter()
    for old in left:
        lp = point(old)
        dist = lambda r, lp=lp: tuple(abs(x - y) for x, y in zip(lp, point(r)))  # noqa: E731
        near = [i for i in range(len(right)) if all(d <= e for d, e in zip(dist(right[i]), eps))]
        best = [
            i
            for i in near
            if not any(
                all(a <= b for a, b in zip(dist(right[j]), dist(right[i]))) and dist(right[j]) != dist(right[i])
                for j in near
            )
        ]
        candidates = [i for i in best if i in free]
        if candidates:
            i = min(candidates, key=lambda i: (dist(right[i]), key(right[i])))
            free.remove(i)
            pairs[(old, right[i])] += 1
    gone = vanished - Counter(old for old, _ in pairs.elements())
    came = appeared - Counter(new for _, new in pairs.elements())
    return pairs, gone, came
