"""A multiset view's `match`: vanished and appeared rows paired into updates by BestmatchJoin.

In a table without a key, a row that changed is a row that vanished and a row that
appeared. A multiset view may say how to recognise them: `{"order_by": COLUMN, "epsilon":
{COLUMN: NUMBER, ...}}`. At each sync the occurrences its delta deletes (the left input)
are joined with those it inserts (the right input) by the constrained left-outer
BestmatchJoin, computed by the window algorithm (TU München, "The Window Algorithm";
bestmatch.py) over both sorted by `order_by`: a pair qualifies when every epsilon column differs by at most its
epsilon, and an appeared row is a best match of a vanished one unless another qualifying
row dominates it (at least as close in every epsilon column, closer in one).

The join may give a vanished row several best matches, and an appeared row may be a best
match of several vanished ones; the delta pairs them one to one, deterministically:

1. Vanished rows are taken in the join's order: by `order_by`, then by the other epsilon
   columns in name order, then by their other columns (NULL first).
2. Each takes, of its best matches no earlier vanished row took, the one closest in
   `order_by`, then in the other epsilon columns in name order, then first in the same
   order of rows; if every best match is taken it stays a delete (a dominated row is never
   a fallback: only best matches pair).
3. Each pair becomes an `update` whose `row` is the appeared row and whose `old` the
   vanished one; rows left unpaired stay deletes and inserts, with their counts.

A row with NULL (or NaN, or an infinity) in an epsilon column matches nothing. The pairing
runs on the driver over the sync's vanished and appeared occurrences: its memory grows with
the change, not with the view (the window itself holds only rows within epsilon on
`order_by`). The sync's `metrics.match` reports the pairs, the inputs, the window cases.
"""

from __future__ import annotations

import math
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from warehouse.multisets import multiset
from warehouse.multisets.bestmatch import Stats, bestmatch_join
from warehouse.names import DELETE, INSERT, OP, UPDATE
from warehouse.view_options import MatchSettings
from warehouse.viewdef import ViewDef, ViewDefinitionError

#: Column types a `match` can measure distances on.
NUMERIC_KINDS = ("int", "float", "decimal")
MATCH_HELP = (
    'match is {"order_by": COLUMN, "epsilon": {COLUMN: NUMBER, ...}}: numeric view columns, '
    "each epsilon a finite number >= 0, order_by one of the epsilon columns (the window moves along it)"
)


def check_match(match: MatchSettings | None, view: ViewDef) -> MatchSettings | None:
    """The view's `match` as stored (epsilon columns in name order), after checking it.

    Raises:
        ViewDefinitionError: a keyed view, an unknown or non-numeric column, a bad epsilon.

    >>> from warehouse.multisets.multiset import _cols
    >>> v = ViewDef("", _cols("at int", "v float", "s text"), [], [], multiset={"count": "c", "nulls": {}})
    >>> check_match(MatchSettings(order_by="at", epsilon={"v": 0.5, "at": 2}), v)
    MatchSettings(order_by='at', epsilon={'at': 2, 'v': 0.5})
    >>> check_match(MatchSettings(order_by="s", epsilon={"s": 1}), v)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    warehouse.viewdef.model.ViewDefinitionError: match: column 's' is of type text, not a number; ...
    """
    if match is None:
        return None
    if not view.multiset:
        raise ViewDefinitionError(
            "match pairs rows of a view over tables without a key; this view is keyed, so its delta "
            "already has updates by key: leave match out"
        )
    order_by, epsilon = match.order_by, match.epsilon
    if not epsilon:
        raise ViewDefinitionError(f"match needs order_by and a non-empty epsilon: {MATCH_HELP}")
    types = {c.name: c.type for c in view.columns}
    for name in [order_by, *epsilon]:
        if name not in types:
            raise ViewDefinitionError(
                f"match: the view has no column {name!r} (it has {', '.join(types)}); {MATCH_HELP}"
            )
        if types[name].kind not in NUMERIC_KINDS:
            raise ViewDefinitionError(f"match: column {name!r} is of type {types[name]}, not a number; {MATCH_HELP}")
    for name, eps in epsilon.items():
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps < 0:
            raise ViewDefinitionError(f"match: the epsilon of {name!r} is {eps!r}; {MATCH_HELP}")
    if order_by not in epsilon:
        raise ViewDefinitionError(f"match: order_by {order_by!r} has no epsilon; {MATCH_HELP}")
    return MatchSettings(order_by=order_by, epsilon={name: epsilon[name] for name in sorted(epsilon)})


def dimensions(match: MatchSettings) -> list[str]:
    """The epsilon columns, `order_by` first, the others in name order.

    >>> dimensions(MatchSettings(order_by="t", epsilon={"z": 1, "a": 2, "t": 0}))
    ['t', 'a', 'z']
    """
    return [match.order_by, *sorted(c for c in match.epsilon if c != match.order_by)]


def _measurable(value) -> bool:
    """Whether a distance can be taken from `value`: not NULL, NaN or infinite."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, Decimal):
        return value.is_finite()
    return value is not None


def _order(value) -> tuple:
    """A sort key of one value of a column: NULL first, NaN next, then by value."""
    if value is None:
        return (0,)
    if isinstance(value, float) and math.isnan(value):
        return (1,)
    return (2, value)


def pair(vanished: list[dict], appeared: list[dict], match: MatchSettings, stats: Stats | None = None):
    """Pair vanished and appeared occurrences into updates (the rule of the module's docstring).

    Returns (pairs as (old, new), unpaired vanished, unpaired appeared).

    >>> m = MatchSettings(order_by="t", epsilon={"t": 2, "v": 1})
    >>> old = [{"t": 1, "v": 5}, {"t": 10, "v": 0}, {"t": 1, "v": 5}]
    >>> new = [{"t": 2, "v": 5}, {"t": 3, "v": 5}, {"t": 20, "v": 0}]
    >>> pairs, gone, came = pair(old, new, m)
    >>> pairs  # (3, 5) is dominated by (2, 5), so the second (1, 5) has no free best match
    [({'t': 1, 'v': 5}, {'t': 2, 'v': 5})]
    >>> gone, came
    ([{'t': 10, 'v': 0}, {'t': 1, 'v': 5}], [{'t': 3, 'v': 5}, {'t': 20, 'v': 0}])
    """
    dims = dimensions(match)
    eps = tuple(match.epsilon[d] for d in dims)
    names = list(vanished[0] if vanished else appeared[0] if appeared else [])
    rest = [n for n in names if n not in dims]

    def key(row: dict) -> tuple:
        return tuple(_order(row[d]) for d in dims) + tuple(_order(row[n]) for n in rest)

    def point(item: tuple[int, dict]) -> tuple:
        return tuple(item[1][d] for d in dims)

    def stream(rows: list[dict]) -> list[tuple[int, dict]]:
        """The measurable rows with their positions, in the join's order."""
        ok = [(i, r) for i, r in enumerate(rows) if all(_measurable(r[d]) for d in dims)]
        return sorted(ok, key=lambda t: key(t[1]))

    left, right = stream(vanished), stream(appeared)
    taken: set[int] = set()
    paired_left: set[int] = set()
    pairs: list[tuple[dict, dict]] = []
    best: dict[int, list[tuple[int, dict]]] = {}
    order: list[tuple[int, dict]] = []
    for (li, lrow), match_ in bestmatch_join(left, right, point, eps, stats):
        if li not in best:
            best[li] = []
            order.append((li, lrow))
        if match_ is not None:
            best[li].append(match_)
    for li, lrow in order:
        lp = point((li, lrow))
        free = [(ri, r) for ri, r in best[li] if ri not in taken]
        if not free:
            continue
        ri, r = min(free, key=lambda m: (tuple(abs(x - y) for x, y in zip(lp, point(m))), key(m[1]), m[0]))
        taken.add(ri)
        paired_left.add(li)
        pairs.append((lrow, r))
    gone = [r for i, r in enumerate(vanished) if i not in paired_left]
    came = [r for i, r in enumerate(appeared) if i not in taken]
    return pairs, gone, came


def pair_delta(path: Path, view: ViewDef, match: MatchSettings) -> tuple[tuple[int, int, int], dict]:
    """Rewrite the multiset delta staged in `path` with the matched pairs as updates.

    Returns (occurrences inserted, pairs, occurrences deleted) and the `match` metrics.
    """
    schema = multiset.delta_schema(view)
    delta = pq.read_table(path).select(schema.names).cast(schema)
    names = [c.name for c in view.columns]
    expanded: dict[str, list[dict]] = {INSERT: [], DELETE: []}
    for line in delta.to_pylist():
        row = {n: line[n] for n in names}
        expanded[line[OP]] += [row] * line[multiset.COUNT]
    stats = Stats()
    pairs, gone, came = pair(expanded[DELETE], expanded[INSERT], match, stats)
    out_schema = multiset.delta_schema(view, with_old=True)
    rows = [{OP: UPDATE, **new, multiset.COUNT: 1, **_old(old)} for old, new in pairs]
    for op, left in ((INSERT, came), (DELETE, gone)):
        for values, n in Counter(tuple(r[c] for c in names) for r in left).items():
            rows.append({OP: op, **dict(zip(names, values)), multiset.COUNT: n})
    table = pa.Table.from_pylist(rows, schema=out_schema)
    for part in path.iterdir():
        part.unlink()
    pq.write_table(table, path / "part-0.zstd.parquet", compression="zstd")
    metrics = {
        "vanished": len(expanded[DELETE]),
        "appeared": len(expanded[INSERT]),
        "pairs": len(pairs),
        "window_cases": {str(k): v for k, v in sorted(stats.cases.items())},
        "widest_window": [stats.widest_left, stats.widest_right],
    }
    ops = table.column(OP)
    total = lambda op: pc.sum(table.filter(pc.equal(ops, op)).column(multiset.COUNT)).as_py() or 0  # noqa: E731
    return (total(INSERT), len(pairs), total(DELETE)), metrics


def _old(row: dict) -> dict:
    return {multiset.OLD_PREFIX + name: value for name, value in row.items()}
