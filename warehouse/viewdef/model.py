"""The checked view as the warehouse keeps it: ViewDef, its SiteQuery per site, their JSON, the errors."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import pyarrow as pa
import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from deltasieve_protocol import sitesql
from deltasieve_protocol.grouped import COUNT_COLUMN
from deltasieve_protocol.types import Column, arrow_schema, key_columns
from warehouse.errors import FormatError
from warehouse.formats import (
    DEFINITION_FORMAT,
    JOINED_MULTISET_DEFINITION_FORMAT,
    MULTISET_DEFINITION_FORMAT,
    check_format,
)


class ViewDefinitionError(ValueError):
    """The view cannot be maintained; `detail` says why and what is supported (HTTP 422)."""

    def __init__(self, detail: str):
        super().__init__(detail)
        self.detail = detail


class UnknownSourceError(ViewDefinitionError):
    """The view names a source that is not registered."""

    def __init__(self, source: str):
        super().__init__(
            f"source {source!r} is not registered: register it as a source first, then write its tables as {source}.table"
        )
        self.source = source


class Keyed:
    """Rows with a key: its columns, found by name once here, in the key's order.

    >>> from deltasieve_protocol.types import LogicalType
    >>> cols = [Column("a", LogicalType("int")), Column("b", LogicalType("text"))]
    >>> site = SiteQuery("src", "SELECT a, b FROM t", cols, ["b", "a"])
    >>> [c.name for c in site.key_columns()], site.key_schema().names
    (['b', 'a'], ['b', 'a'])
    """

    columns: list[Column]
    key: list[str]

    def key_columns(self) -> list[Column]:
        """The key's columns, in the key's order (KeyError for a key column not among them)."""
        return key_columns(self.columns, self.key)

    def key_schema(self) -> pa.Schema:
        """The Arrow schema of the key's columns, in the key's order."""
        return arrow_schema(self.key_columns())


#: Site queries whose tables are kept parsed (SiteQuery.tables): one a view of a service of
#: thousands, so that a sync, which asks for them more than once, parses its SQL once a version.
TABLES_KEPT = 16_384


@lru_cache(maxsize=TABLES_KEPT)
def _tables(sql: str, dialect: str | None) -> tuple[str, ...]:
    """The tables a site query's SQL reads, in order of first mention (none if it does not parse).

    >>> _tables('SELECT o.id FROM orders AS o JOIN items AS i ON o.id = i.oid', None)
    ('orders', 'items')
    """
    try:
        tree = sqlglot.parse_one(sql, read=dialect)
    except SqlglotError:
        return ()
    return tuple(dict.fromkeys(sitesql.exposed_name(t) for t in tree.find_all(exp.Table)))


@dataclass(frozen=True)
class SiteQuery(Keyed):
    """The part of a view evaluated at one source, as SQL in the source's dialect."""

    source: str
    sql: str
    columns: list[Column]
    key: list[str]
    #: The sqlglot dialect `sql` is written in; None: one the standard dialect reads (SQLite,
    #: PostgreSQL, dump files: double-quoted names).
    dialect: str | None = None
    #: Output columns the agent reads as a stronger type than their source declares (the
    #: view's column_types, viewdef/column_types.py): output column -> the declared type.
    read_from: dict[str, str] = field(default_factory=dict)
    #: Output columns the agent hashes or masks as it reads them (the view's column policies,
    #: viewdef/policies.py): output column -> "hash" | "mask".
    policies: dict[str, str] = field(default_factory=dict)
    #: Columns of its tables the view blocks, "table.column": the agent reads as if it did not expose them.
    blocked: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        data: dict = {
            "source": self.source,
            "sql": self.sql,
            "columns": [c.to_json() for c in self.columns],
            "key": list(self.key),
        }
        if self.dialect is not None:
            data["dialect"] = self.dialect
        if self.read_from:
            data["read_from"] = dict(self.read_from)
        if self.policies:
            data["policies"] = dict(self.policies)
        if self.blocked:
            data["blocked"] = list(self.blocked)
        return data

    def parse(self) -> exp.Select:
        """The site query's tree, read in its own dialect."""
        tree = sqlglot.parse_one(self.sql, read=self.dialect)
        if not isinstance(tree, exp.Select):  # decomposition writes a SELECT; anything else was not ours
            raise FormatError(f"the site query of source {self.source!r} is not a SELECT: {self.sql!r}")
        return tree

    def render(self, tree: exp.Expression) -> str:
        """`tree` (the site query changed) as SQL in the site query's dialect."""
        return tree.sql(dialect=self.dialect)

    @property
    def grouped(self) -> bool:
        """Whether it is a multiset's grouped site query (distinct rows with their counts)."""
        return any(c.name == COUNT_COLUMN for c in self.columns)

    def tables(self) -> list[str]:
        """The source tables it reads, in order of first mention (none if it does not parse)."""
        return list(_tables(self.sql, self.dialect))

    def where(self) -> str:
        """The source tables it reads, for messages: "table 'people'" or "tables 'a', 'b' (joined)"."""
        names = self.tables()
        if not names:
            return "the site query"
        if len(names) == 1:
            return f"table {names[0]!r}"
        return f"tables {', '.join(map(repr, names))} (joined)"

    def origin(self, column: str) -> str:
        """The source table and column an output column of the site query reads, "table.column"
        (the column's own name when it is not one column of one table).

        >>> SiteQuery("pg", 'SELECT o.id, o.amt AS amount FROM orders AS o', [], []).origin("amount")
        'orders.amt'
        """
        try:
            tree = self.parse()
        except SqlglotError:
            return column
        tables = {t.alias_or_name: t.name for t in tree.find_all(exp.Table)}
        for item in tree.expressions:
            read = item.find(exp.Column)
            if item.alias_or_name == column and read is not None:
                return f"{tables.get(read.table, read.table)}.{read.name}"
        return column

    @classmethod
    def from_json(cls, data: dict) -> SiteQuery:
        return cls(
            data["source"],
            data["sql"],
            [Column.from_json(c) for c in data["columns"]],
            list(data["key"]),
            data.get("dialect"),
            dict(data.get("read_from") or {}),
            dict(data.get("policies") or {}),
            list(data.get("blocked") or []),
        )


@dataclass(frozen=True)
class ViewDef(Keyed):
    """A checked view: its SQL, typed output columns, key, and one site query per site.

    `assembly` is None when the view has one site (the site query computes the view).
    With several sites it is a Spark SQL query over the tables `site_0`, `site_1`, ...
    (the site queries' results, columns named as in `sites[i].columns`) that computes the
    view's rows, columns named and ordered as `columns`.
    """

    sql: str
    columns: list[Column]
    key: list[str]
    sites: list[SiteQuery]
    assembly: str | None = None
    #: per table, whether its key is part of `key` and why (viewdef/keys.py); None for a
    #: view defined before keys were derived (its key holds every table's key)
    key_derivation: list[dict] | None = None
    #: the sites the assembly joins by LEFT JOIN (their columns are NULL in a row without partner)
    left_sites: list[int] = field(default_factory=list)
    #: a view over tables without a key (multiset.py): {"count": the site's count column,
    #: "nulls": {view column: its NULL flag column}}; None for a keyed view
    multiset: dict | None = None
    #: a table view's table, "source.table" ("source.schema.table" outside the default
    #: schema) as its agent names it: the view is every column of it (table_views.py); None
    #: for a view given as SQL
    table: str | None = None
    #: the columns of a table view's table it leaves out (its `exclude_columns`)
    exclude_columns: tuple[str, ...] = ()
    #: the view's column policies as given ({"columns": {...}, "row_filter": {...}},
    #: viewdef/policies.py); None without any
    policies: dict | None = None

    @property
    def left_out(self) -> tuple[str, ...]:
        """The columns of a table view's table it does not read: its exclude_columns and those its policies block."""
        blocked = [b.rpartition(".")[2] for s in self.sites for b in s.blocked]
        return self.exclude_columns + tuple(b for b in blocked if b not in self.exclude_columns)

    @property
    def count_column(self) -> str | None:
        """The site column holding how often a row occurs (a multiset view), else None."""
        return self.multiset["count"] if self.multiset else None

    @property
    def null_flags(self) -> dict[str, str]:
        """View column -> the site column saying it is NULL (a multiset view's nullable columns)."""
        return dict(self.multiset["nulls"]) if self.multiset else {}

    def to_json(self) -> dict:
        """The definition as the catalog stores it, in format DEFINITION_FORMAT (a multiset
        view's in MULTISET_DEFINITION_FORMAT, or JOINED_MULTISET_DEFINITION_FORMAT over several sites)."""
        data = {
            "format": self._format(),
            "sql": self.sql,
            "columns": [c.to_json() for c in self.columns],
            "key": list(self.key),
            "sites": [s.to_json() for s in self.sites],
        }
        if self.assembly is not None:  # a single-site definition has none
            data["assembly"] = self.assembly
        if self.key_derivation is not None:
            data["key_derivation"] = self.key_derivation
        if self.left_sites:
            data["left_sites"] = list(self.left_sites)
        if self.multiset:
            data["multiset"] = {"count": self.multiset["count"], "nulls": dict(self.multiset["nulls"])}
        if self.table is not None:
            data["table"] = self.table
        if self.exclude_columns:
            data["exclude_columns"] = list(self.exclude_columns)
        if self.policies:
            data["policies"] = self.policies
        return data

    def _format(self) -> int:
        return _format_of(self.multiset, self.assembly)

    @classmethod
    def from_json(cls, data: dict, what: str = "a view definition") -> ViewDef:
        """Read a stored definition, refused (FormatError) unless in the format of its kind of
        view; `what` says where it is stored, for the error."""
        check_format(data, _format_of(data.get("multiset"), data.get("assembly")), what)
        sites = [SiteQuery.from_json(s) for s in data["sites"]]
        return cls(
            data["sql"],
            [Column.from_json(c) for c in data["columns"]],
            list(data["key"]),
            sites,
            data.get("assembly"),
            data.get("key_derivation"),
            list(data.get("left_sites", [])),
            data.get("multiset"),
            data.get("table"),
            tuple(data.get("exclude_columns") or ()),
            data.get("policies"),
        )

    @classmethod
    def of_view(cls, name: str, data: dict) -> ViewDef:
        """The stored definition of view `name` (FormatError naming the view if in another format)."""
        return cls.from_json(data, f"the definition of view {name!r}")


def _format_of(multiset: dict | None, assembly: object) -> int:
    """The format a definition is stored in: one number per kind of view (formats.py)."""
    if not multiset:
        return DEFINITION_FORMAT
    return MULTISET_DEFINITION_FORMAT if assembly is None else JOINED_MULTISET_DEFINITION_FORMAT
