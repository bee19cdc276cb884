"""A view with every name resolved: its table occurrences, output columns, conditions and key parts.

What binding.py produces and keys.py and decomposition.py read.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from deltasieve_protocol.schema import ColumnInfo, TableInfo
from deltasieve_protocol.types import LogicalType


@dataclass(frozen=True)
class KeyPart:
    """Whether a table's key is part of the view's key, and why."""

    table: str  # "source.table" (alias a) as binding labels it
    key: list[str]  # the table's key, as output names of the view
    kept: bool
    reason: str

    def to_json(self) -> dict:
        return {"table": self.table, "key": list(self.key), "in_view_key": self.kept, "reason": self.reason}


@dataclass(frozen=True)
class BoundRelation:
    """A table occurrence of the view, bound to its source and schema."""

    source: str
    table: TableInfo
    alias: str  # the name it is visible under: its alias, else its table name
    aliased: bool

    @property
    def label(self) -> str:
        name = f"{self.source}.{self.table.name}"
        return f"table {name!r} (alias {self.alias!r})" if self.aliased else f"table {name!r}"


@dataclass(frozen=True)
class Output:
    """One output column of the view: which relation and column it reads, and its name."""

    relation: int
    column: ColumnInfo
    name: str


@dataclass(frozen=True)
class BoundView:
    """The view with every name resolved."""

    relations: list[BoundRelation]
    outputs: list[Output]
    conditions: list[exp.Expression | None]  # ON per relation, columns as "alias"."column"
    where: exp.Expression | None
    keys: list[list[str]]  # per relation, its key columns' output names
    #: per relation, whether its key is part of the view's key and why (keys.py); empty: all are
    key_parts: tuple[KeyPart, ...] = ()
    #: per relation, whether it is joined by LEFT JOIN; empty: every join is inner
    left: tuple[bool, ...] = ()
    #: per relation, whether its table has no key at all (no primary key, no unique key)
    keyless: tuple[bool, ...] = ()

    @property
    def multiset(self) -> bool:
        """Whether the view's rows are a multiset: some table has no key, so equal rows may
        occur several times and nothing but their content tells them apart."""
        return any(self.keyless)

    def is_left(self, relation: int) -> bool:
        return bool(self.left) and self.left[relation]

    @property
    def key(self) -> list[str]:
        """The view's key: the keys of the relations the others do not imply, relation by relation."""
        if self.multiset:
            return []
        kept = [p.kept for p in self.key_parts] or [True] * len(self.keys)
        return [name for key, keep in zip(self.keys, kept, strict=True) if keep for name in key]

    def relation_of(self, column: exp.Column) -> int:
        """Index of the relation a bound column reference ("alias"."column") reads."""
        return next(i for i, r in enumerate(self.relations) if r.alias == column.table)

    def type_of(self, column: exp.Column) -> LogicalType:
        return self.relations[self.relation_of(column)].table.known_column(column.name).type
