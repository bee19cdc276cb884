"""Names in the site-query language: which table or column a reference denotes.

Both sides resolve a view's or a site query's names the same way against a schema: an
exact match first, else the one match ignoring case; a column reference through the
table or alias that is visible in the FROM clause; output names unique ignoring case.
The parsing and rendering of the language are in sitesql.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sqlglot import exp

from deltasieve_protocol.sitesql import ErrorClass
from deltasieve_protocol.sqlnodes import snippet


def pick_name(wanted: str, names: Iterable[str], error: ErrorClass, what: str) -> str | None:
    """The name in `names` that `wanted` denotes: an exact match, else the one equal ignoring case.

    >>> pick_name("Id", ["id", "name"], ValueError, "column")
    'id'
    >>> pick_name("nope", ["id"], ValueError, "column") is None
    True
    """
    names = list(names)
    if wanted in names:
        return wanted
    folded = [n for n in names if n.casefold() == wanted.casefold()]
    if len(folded) > 1:
        raise error(
            f"{what} {wanted!r} matches {', '.join(map(repr, folded))}, which differ only in case: quote the exact name"
        )
    return folded[0] if folded else None


@dataclass(frozen=True)
class Relation:
    """A table occurrence in scope: the name it is visible under and its columns.

    `prefix` is what may qualify the table itself in a three-part column reference
    (`source.table.column` in a view); None where no such prefix exists.
    """

    visible: str
    table: str
    columns: tuple[str, ...]
    aliased: bool
    label: str
    prefix: str | None = None


class Scope:
    """Resolves column references against the relations of one FROM clause."""

    def __init__(self, relations: Sequence[Relation], error: ErrorClass, unknown: ErrorClass):
        self.relations = list(relations)
        self.error = error
        self.unknown = unknown

    def resolve(self, column: exp.Column) -> tuple[int, str]:
        """(index of the relation, exact column name) that `column` refers to."""
        if column.args.get("catalog") is not None:
            raise self.error(f"column reference {snippet(column)} has too many qualifiers: write alias.column")
        name = column.name
        qualifier = column.table
        if qualifier:
            index = self._relation_of(column)
            relation = self.relations[index]
            exact = pick_name(name, relation.columns, self.error, f"column of {relation.label}")
            if exact is None:
                raise self.unknown(
                    f"column {name!r} does not exist in {relation.label} (its columns: {name_list(relation.columns)})"
                )
            return index, exact
        hits = []
        for index, relation in enumerate(self.relations):
            exact = pick_name(name, relation.columns, self.error, f"column of {relation.label}")
            if exact is not None:
                hits.append((index, exact))
        if not hits:
            tables = "; ".join(f"{r.label}: {name_list(r.columns)}" for r in self.relations)
            raise self.unknown(f"column {name!r} does not exist in any table of the FROM clause ({tables})")
        if len(hits) > 1:
            where = ", ".join(self.relations[i].visible for i, _ in hits)
            raise self.error(f"column {name!r} is ambiguous, it exists in {where}: qualify it as alias.{name}")
        return hits[0]

    def _relation_of(self, column: exp.Column) -> int:
        qualifier, prefix = column.table, column.text("db")
        candidates = []
        for index, r in enumerate(self.relations):
            if prefix:
                if (
                    r.aliased
                    or r.prefix is None
                    or r.prefix.casefold() != prefix.casefold()
                    or r.table.casefold() != qualifier.casefold()
                ):
                    continue
            elif r.visible.casefold() != qualifier.casefold():
                continue
            candidates.append(index)
        if not candidates:
            written = f"{prefix}.{qualifier}" if prefix else qualifier
            visible = ", ".join(r.visible for r in self.relations)
            raise self.error(
                f"column reference {snippet(column)} names {written!r}, which is not a table or alias of the FROM clause (those are: {visible})"
            )
        if len(candidates) > 1:
            raise self.error(f"column reference {snippet(column)} is ambiguous: give each table its own alias")
        return candidates[0]


def name_list(names: Iterable[str], limit: int = 40) -> str:
    """Names for a message, cut after `limit`."""
    names = list(names)
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names)} in all)" if len(names) > limit else "") if names else "none"


def check_unique_visible(relations: Sequence[Relation], error: ErrorClass) -> None:
    """Every table occurrence must be visible under its own name (alias or table name)."""
    seen: dict[str, str] = {}
    for r in relations:
        key = r.visible.casefold()
        if key in seen:
            raise error(
                f"the name {r.visible!r} stands for two tables of the FROM clause ({seen[key]} and {r.label}): give each occurrence its own alias"
            )
        seen[key] = r.label


def check_output_names(names: Sequence[str], error: ErrorClass, generated: Sequence[str] = ()) -> None:
    """Output names must be unique ignoring case (Spark's default) and not reserved; but
    the `generated` ones, which a grouped site query adds (sitesql.py), may be."""
    seen: set[str] = set()
    for name in names:
        if name.startswith("__") and name not in generated:
            raise error(
                f"output column name {name!r} is reserved (names starting with '__' are used internally): choose another alias"
            )
        if name.casefold() in seen:
            raise error(
                f"output column name {name!r} occurs twice (names are compared ignoring case): give the columns distinct aliases"
            )
        seen.add(name.casefold())
