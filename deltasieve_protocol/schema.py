"""What an agent exposes: tables, their columns and keys, and the JSON of GET /v1/schema.

The agent builds the answer from its adapter's description; the warehouse reads it back
into the same classes. One definition serves both, so the two cannot drift apart.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from deltasieve_protocol.models import ColumnOut, SchemaOut, TableKind, TableOut
from deltasieve_protocol.types import LogicalType


@dataclass(frozen=True)
class ColumnInfo:
    name: str
    type: LogicalType
    nullable: bool
    declared: str  # the type as the database declares it
    #: SQL the adapter must select instead of the bare column (e.g. a cast to text), or None.
    read_as: str | None = None
    #: The type the source declares, when a view reads the column as `type` instead
    #: (its `column_types`, deltasieve_protocol/column_types.py); None: read as declared. Never on the wire.
    read_from: LogicalType | None = None
    #: A column policy the agent applies to each value it reads (deltasieve_protocol/policies.py):
    #: "hash" or "mask"; None: the value as read. On the wire for the agent's own --hash.
    policy: str | None = None
    #: The type a hashed column's values are read as before they are hashed (its `type`
    #: is then text); None otherwise. Never on the wire.
    policy_from: LogicalType | None = None


@dataclass(frozen=True)
class TableInfo:
    """A table an agent exposes.

    A table of the connection's default schema (PostgreSQL's search path, the MySQL URL's
    database, SQLite's file) is named as it is (`orders`); one of another schema or
    database carries its `schema` and is named `schema.table` (`erp.orders`), so two
    tables of one name in two schemas never share a name.
    """

    name: str
    columns: tuple[ColumnInfo, ...]
    primary_key: tuple[str, ...]
    unique_keys: tuple[tuple[str, ...], ...] = field(default=())
    #: the schema (database) of a table outside the default one; None in the default one
    schema: str | None = None
    #: what the relation is at the source (TABLE_KINDS); a mirror makes views of tables only
    kind: TableKind = "table"
    #: the table whose reads hold this one's rows (a partition's root, an inheriting table's
    #: parent), as the agent names it; None when there is none
    parent: str | None = None

    @property
    def mirrored_with(self) -> str | None:
        """Why a mirror of every table makes no view of this one, or None when it makes one.

        >>> TableInfo("pay_2024_01", (), (), kind="partition", parent="pay").mirrored_with
        'partition of pay: its rows are read through the view of pay'
        >>> TableInfo("t", (), ()).mirrored_with is None
        True
        """
        if self.kind == "partition":
            return f"partition of {self.parent}: its rows are read through the view of {self.parent}"
        if self.parent is not None:
            return f"inherits from {self.parent}: its rows are read through the view of {self.parent}"
        if self.kind != "table":
            return (
                f"a {self.kind} of the source, not a table: a view of it is made only when asked for, by name in "
                "the mirror's tables or as a view over it"
            )
        return None

    @property
    def path(self) -> tuple[str, ...]:
        """The parts a query writes the table with: (schema, table) outside the default schema.

        >>> TableInfo("erp.orders", (), ("id",), schema="erp").path
        ('erp', 'orders')
        >>> TableInfo("orders", (), ("id",)).path
        ('orders',)
        """
        if self.schema is None:
            return (self.name,)
        return (self.schema, self.name[len(self.schema) + 1 :])

    def column(self, name: str) -> ColumnInfo | None:
        """The column called `name`, or None when the table has none."""
        for c in self.columns:
            if c.name == name:
                return c
        return None

    def known_column(self, name: str) -> ColumnInfo:
        """The column called `name`, which a resolved reference says the table has.

        >>> t = TableInfo("t", (ColumnInfo("id", LogicalType.parse("int"), False, "integer"),), ("id",))
        >>> t.known_column("id").declared
        'integer'
        """
        column = self.column(name)
        if column is None:
            raise KeyError(f"table {self.name!r} has no column {name!r}")
        return column


@dataclass(frozen=True)
class SourceSchema:
    """What a source's agent exposes (its GET /v1/schema answer).

    >>> t = TableInfo("t", (ColumnInfo("id", LogicalType.parse("int"), False, "INTEGER"),), ("id",))
    >>> s = SourceSchema("sqlite", {"t": t})
    >>> SourceSchema.from_json(s.to_json()) == s
    True
    """

    dialect: str
    tables: dict[str, TableInfo]

    @classmethod
    def from_json(cls, data: dict) -> SourceSchema:
        """Lenient about fields an older agent (or a hand-written fixture) leaves out."""
        tables = {}
        for t in data["tables"]:
            columns = tuple(
                ColumnInfo(
                    c["name"],
                    LogicalType.parse(c["type"]),
                    bool(c.get("nullable", True)),
                    c.get("declared", ""),
                    c.get("read_as"),
                    policy=c.get("policy"),
                )
                for c in t["columns"]
            )
            tables[t["name"]] = TableInfo(
                t["name"],
                columns,
                tuple(t.get("primary_key") or ()),
                tuple(tuple(u) for u in t.get("unique_keys") or ()),
                t.get("schema"),
                t.get("kind") or "table",
                t.get("parent"),
            )
        return cls(data["dialect"], tables)

    def to_json(self) -> dict:
        return schema_to_json(self.dialect, list(self.tables.values()))


def schema_to_json(dialect: str, tables: list[TableInfo]) -> dict:
    """The body of the agent's GET /v1/schema for `tables`."""
    body = SchemaOut(
        dialect=dialect,
        tables=[
            TableOut(
                name=t.name,
                columns=[
                    ColumnOut(
                        name=c.name,
                        type=str(c.type),
                        nullable=c.nullable,
                        declared=c.declared,
                        read_as=c.read_as,
                        policy=c.policy,
                    )
                    for c in t.columns
                ],
                primary_key=list(t.primary_key),
                unique_keys=[list(u) for u in t.unique_keys],
                schema=t.schema,
                kind=t.kind,
                parent=t.parent,
            )
            for t in tables
        ],
    ).model_dump()
    for table in body["tables"]:  # a column without a policy as an older agent gave it
        for column in table["columns"]:
            if column.get("policy") is None:
                column.pop("policy", None)
    return body


#: The header of an agent's extraction answer that holds the fingerprint of the columns of
#: the tables the site query reads (`columns_fingerprint`): 36 bytes on the wire.
FINGERPRINT_HEADER = "X-Schema-Fingerprint"
#: Hex digits of a fingerprint: 48 bits, so that a change goes unseen with odds 2^-48.
FINGERPRINT_HEX = 12


def columns_fingerprint(tables: Iterable[TableInfo]) -> str:
    """A short digest of the tables' names and columns (name, logical and declared type,
    nullability), whatever their order: it changes when any of them does.

    >>> t = TableInfo("t", (ColumnInfo("id", LogicalType.parse("int"), False, "integer"),), ("id",))
    >>> wider = TableInfo("t", (ColumnInfo("id", LogicalType.parse("int"), False, "bigint"),), ("id",))
    >>> len(columns_fingerprint([t])), columns_fingerprint([t]) == columns_fingerprint([wider])
    (12, False)
    """
    described = sorted([t.name, [[c.name, str(c.type), c.declared, c.nullable] for c in t.columns]] for t in tables)
    return hashlib.sha256(json.dumps(described).encode()).hexdigest()[:FINGERPRINT_HEX]
