"""The view's key, made minimal by the functional dependencies its inner joins imply.

Every table contributes its key to the view (binding.py). Some of those keys are implied
by the others: when the join conditions equate each key column of a table with a column
whose value the rest of the key already fixes (directly, or through a chain of such
joins), that table joins at most one row per row of the others, and its key adds nothing.
A view keyed by more than it needs sees a row that changes partner as a delete and an
insert of two different keys; under the minimal key it is one update.

Dependencies used, for the attributes (table occurrence, column) of the view's rows:
a table's key fixes all its columns; `a = b` in an ON condition or a top-level conjunct of
WHERE fixes each side from the other (an inner join and a WHERE drop rows where it does
not hold, NULLs included); `a = constant` fixes `a`. In the ON of a LEFT JOIN, an
equality fixes the joined table's column from the other side only (a row without a
partner keeps its values and gets NULLs), and a constant fixes the joined table's column. Only columns of the same logical
type count as equated (across types, a coercion could equate two different values with
one). Tables are tried from the last joined to the first, so the first table's key stays
when two keys imply each other (a 1:1 join).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sqlglot import exp

from warehouse.viewdef.bound import BoundView, KeyPart

Attribute = tuple[int, str]  # (index of the table occurrence, column name)
Named = tuple[str, str]  # (alias of the table occurrence, column name)


def equalities(conditions: Iterable[exp.Expression | None]) -> tuple[list[tuple[Named, Named]], set[Named]]:
    """Column = column pairs, and columns equated to a constant, among the top-level
    conjuncts of `conditions` (bound: columns written "alias"."column"), each column as
    (alias, column).

    >>> import sqlglot
    >>> on = sqlglot.parse_one('"e"."dept" = "d"."id" AND "d"."kind" = 3 AND "e"."x" > 1')
    >>> equalities([None, on])
    ([(('e', 'dept'), ('d', 'id'))], {('d', 'kind')})
    """
    pairs: list[tuple[Named, Named]] = []
    constants: set[Named] = set()
    for condition in conditions:
        for conjunct in _conjuncts(condition):
            if not isinstance(conjunct, exp.EQ):
                continue
            left, right = conjunct.this, conjunct.expression
            if isinstance(left, exp.Column) and isinstance(right, exp.Column):
                pairs.append(((left.table, left.name), (right.table, right.name)))
            elif isinstance(left, exp.Column) and isinstance(right, exp.Literal):
                constants.add((left.table, left.name))
            elif isinstance(right, exp.Column) and isinstance(left, exp.Literal):
                constants.add((right.table, right.name))
    return pairs, constants


def _conjuncts(condition: exp.Expression | None) -> list[exp.Expression]:
    if condition is None:
        return []
    while isinstance(condition, exp.Paren):
        condition = condition.this
    if isinstance(condition, exp.And):
        return _conjuncts(condition.this) + _conjuncts(condition.expression)
    return [condition]


def closure(
    fixed: set[Attribute],
    keys: list[set[Attribute]],
    columns: list[set[Attribute]],
    pairs: list[tuple[Attribute, Attribute]],
    arrows: Sequence[tuple[Attribute, Attribute]] = (),
) -> set[Attribute]:
    """Every attribute that `fixed` determines: a table's key brings its columns, an
    equality either side from the other, an arrow (a, b) b from a only.

    >>> keys = [{(0, "id")}, {(1, "id")}]
    >>> cols = [{(0, "id"), (0, "dept")}, {(1, "id"), (1, "name")}]
    >>> sorted(closure({(0, "id")}, keys, cols, [((0, "dept"), (1, "id"))]))
    [(0, 'dept'), (0, 'id'), (1, 'id'), (1, 'name')]
    """
    out = set(fixed)
    grown = True
    while grown:
        grown = False
        for key, cols in zip(keys, columns, strict=True):
            if key <= out and not cols <= out:
                out |= cols
                grown = True
        for a, b in pairs:
            if (a in out) != (b in out):
                out |= {a, b}
                grown = True
        for a, b in arrows:
            if a in out and b not in out:
                out.add(b)
                grown = True
    return out


def minimal(
    keys: list[set[Attribute]],
    columns: list[set[Attribute]],
    pairs: list[tuple[Attribute, Attribute]],
    constants: set[Attribute],
    arrows: Sequence[tuple[Attribute, Attribute]] = (),
) -> list[bool]:
    """Which tables' keys the view key keeps: from the last table to the first, a key
    that the other kept keys determine is dropped.

    A chain: orders (0) → customers (1) → regions (2), each joined on the next one's key.

    >>> keys = [{(0, "id")}, {(1, "id")}, {(2, "id")}]
    >>> cols = [{(0, "id"), (0, "cust")}, {(1, "id"), (1, "region")}, {(2, "id")}]
    >>> minimal(keys, cols, [((0, "cust"), (1, "id")), ((1, "region"), (2, "id"))], set())
    [True, False, False]

    Joined on a column that is not the other table's whole key: both keys stay.

    >>> minimal([{(0, "id")}, {(1, "a"), (1, "b")}], [{(0, "id"), (0, "a")}, {(1, "a"), (1, "b")}], [((0, "a"), (1, "a"))], set())
    [True, True]
    """
    kept = [True] * len(keys)
    for i in reversed(range(len(keys))):
        others = set().union(*(k for j, k in enumerate(keys) if kept[j] and j != i), constants)
        if sum(kept) > 1 and keys[i] <= closure(others, keys, columns, pairs, arrows):
            kept[i] = False
    return kept


def derive(bound: BoundView) -> list[KeyPart]:
    """Per table of `bound`, whether its key is part of the view's key, and why."""
    position = {r.alias: i for i, r in enumerate(bound.relations)}
    inner = [on for i, on in enumerate(bound.conditions) if not bound.is_left(i)]
    named_pairs, named_constants = equalities([*inner, bound.where])
    named_arrows: list[tuple[Named, Named]] = []
    for i, on in enumerate(bound.conditions):
        if bound.is_left(i):  # its ON fixes its columns from the others', never the reverse (NULLs)
            alias = bound.relations[i].alias
            more_pairs, more_constants = equalities([on])
            for a, b in more_pairs:
                if a[0] == alias and b[0] == alias:
                    named_pairs.append((a, b))
                elif alias in (a[0], b[0]):
                    named_arrows.append((a, b) if b[0] == alias else (b, a))
            named_constants |= {c for c in more_constants if c[0] == alias}

    def same_type(a: Named, b: Named) -> bool:
        # equal only as the same type: '01' = 1 may hold for two different keys under a coercion
        return (
            bound.relations[position[a[0]]].table.known_column(a[1]).type
            == bound.relations[position[b[0]]].table.known_column(b[1]).type
        )

    pairs = [((position[a[0]], a[1]), (position[b[0]], b[1])) for a, b in named_pairs if same_type(a, b)]
    arrows = [((position[a[0]], a[1]), (position[b[0]], b[1])) for a, b in named_arrows if same_type(a, b)]
    constants = {(position[t], c) for t, c in named_constants}
    keys = [{(i, _column_of(bound, i, name)) for name in names} for i, names in enumerate(bound.keys)]
    columns = [{(i, c.name) for c in r.table.columns} for i, r in enumerate(bound.relations)]
    kept = minimal(keys, columns, pairs, constants, arrows)
    parts = []
    for i, relation in enumerate(bound.relations):
        if kept[i]:
            reason = "its key is needed: no join condition fixes all of its key columns from the other tables' keys"
        else:
            by = sorted(
                f"{bound.relations[a[0]].alias}.{a[1]} = {bound.relations[b[0]].alias}.{b[1]}"
                for a, b in [*pairs, *arrows]
                if i in (a[0], b[0]) and ((a in keys[i]) or (b in keys[i]))
            )
            reason = (
                "implied by the other tables' keys through the join: "
                + (", ".join(by) if by else "its key columns are fixed by the conditions")
                + f" (each row of the view joins at most one row of {relation.alias})"
            )
        parts.append(KeyPart(relation.label, list(bound.keys[i]), kept[i], reason))
    return parts


def _column_of(bound: BoundView, relation: int, output: str) -> str:
    """The table column behind output name `output` of `relation`."""
    return next(o.column.name for o in bound.outputs if o.relation == relation and o.name == output)
