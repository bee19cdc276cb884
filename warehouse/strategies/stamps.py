"""Timestamps and delete flags of a view's tables: checked settings and the SQL they imply.

The view settings `timestamps` and `delete_flags` ({TABLE: COLUMN}, TABLE written `table` or
`source.table`) are checked against the sources' schemas when a view is defined. A delete
flag filters its table in the site query (a row with the flag set is not in the view,
whatever the strategy); the timestamps serve the timestamp strategy (strategies/timestamp.py),
which narrows each site query to the rows stamped since a watermark and lists its keys.
"""

from __future__ import annotations

import datetime as dt
import functools
from dataclasses import replace

import sqlglot
from sqlglot import exp

from deltasieve_protocol import sitesql
from deltasieve_protocol.column_types import text_bound
from deltasieve_protocol.schema import SourceSchema
from deltasieve_protocol.types import LogicalType
from warehouse.view_options import StampSettings, TimestampSettings
from warehouse.viewdef import SiteQuery, ViewDef, ViewDefinitionError

#: Logical types a timestamp column may have.
STAMP_TYPES = ("timestamp", "timestamptz")
#: The dialect (as the agents' schemas name it) of an agent on a directory of dump files.
DUMP_DIALECT = "duckdb"
#: The text form of a watermark: what the agents' clocks answer and the literal compared.
WATERMARK_FORMAT = "%Y-%m-%d %H:%M:%S.%f"


def site_tables(site: SiteQuery, dialect: str | None = None) -> list[tuple[str, str]]:
    """(table name, alias) of each table a site query reads (a table joined with itself twice).

    >>> site_tables(SiteQuery("s", 'SELECT "p"."id" AS "id" FROM "people" AS "p" JOIN "people" AS "q" ON "q"."id" = "p"."id"', [], ["id"]))
    [('people', 'p'), ('people', 'q')]
    """
    return list(_tables_read(site.sql, dialect or site.dialect))


@functools.lru_cache(maxsize=4096)
def _tables_read(sql: str, dialect: str) -> tuple[tuple[str, str], ...]:
    """`site_tables` of a site query's text, parsed once (auto asks at every sync of a view
    with timestamps, and sqlglot takes milliseconds a parse)."""
    tree = sqlglot.parse_one(sql, read=dialect)
    return tuple((sitesql.exposed_name(t), t.alias_or_name) for t in tree.find_all(exp.Table))


def _resolve(table: str, definition: ViewDef, setting: str) -> tuple[str, str]:
    """(source, table) of a TABLE of a setting, written `table` or `source.table` (a table
    outside the default schema: `schema.table` or `source.schema.table`)."""
    read = {(s.source, name) for s in definition.sites for name, _ in site_tables(s)}
    source, _, name = table.partition(".")
    found = [(source, name)] if (source, name) in read else [(source, name) for source, name in read if name == table]
    tables = ", ".join(sorted(f"{s}.{t}" for s, t in read))
    if not found:
        raise ViewDefinitionError(f"{setting}: the view reads no table {table!r}; it reads {tables}")
    if len(found) > 1:
        raise ViewDefinitionError(f"{setting}: table {table!r} is ambiguous; write it source.table ({tables})")
    return found[0]


def check_settings(
    settings: StampSettings, definition: ViewDef, schemas: dict[str, SourceSchema], strategy: str
) -> StampSettings:
    """The settings with tables written `source.table`, checked against the schemas.

    Raises:
        ViewDefinitionError: an unknown table or column, a timestamp that is no timestamp,
            or strategy timestamp without a timestamp for every table (or without a key).
    """
    if settings.lag_s < 0:
        raise ViewDefinitionError("timestamp_lag_s must be at least 0")
    if settings.reconcile_every < 1:
        raise ViewDefinitionError("reconcile_every must be at least 1")
    if definition.multiset and (settings.timestamps or strategy in ("timestamp", "row_version")):
        raise ViewDefinitionError(
            f"{'strategy ' + strategy if strategy in ('timestamp', 'row_version') else 'timestamps'} cannot serve this view: "
            "it reads tables without a key, so it is a multiset read grouped (each distinct row with its count), "
            "which has no per-row timestamp or row version; use auto, sketch, group_hash, tuple_hash, range_checksum "
            "or full_ship (delete_flags are supported)"
        )
    out: dict[str, dict[str, str]] = {"timestamps": {}, "delete_flags": {}}
    not_null, text = [], []
    for setting in out:
        for table, column in getattr(settings, setting).items():
            source, name = _resolve(table, definition, setting)
            info = schemas[source].tables[name].column(column)
            if info is None:
                columns = ", ".join(c.name for c in schemas[source].tables[name].columns)
                raise ViewDefinitionError(
                    f"{setting}: table {source}.{name} has no column {column!r}; it has {columns}"
                )
            if setting == "timestamps" and info.type.kind not in STAMP_TYPES:
                raise ViewDefinitionError(
                    f"timestamps: column {source}.{name}.{column} is of type {info.type}, not a timestamp "
                    f"({' or '.join(STAMP_TYPES)}; text holding ISO timestamps in UTC may be read as one: "
                    + "column_types {"
                    + f"'{name}.{column}': 'timestamp'"
                    + "})"
                )
            if setting == "timestamps" and info.read_from is not None:
                text.append(_text_stamp(f"{source}.{name}.{column}", info.read_from, schemas[source].dialect))
            out[setting][f"{source}.{name}"] = column
            if setting == "timestamps" and not info.nullable:
                not_null.append(f"{source}.{name}")
    if strategy == "row_version":
        check_row_version(definition, schemas)
    if strategy == "timestamp":
        if not definition.key:
            raise ViewDefinitionError("strategy timestamp needs a keyed view (this one has no key)")
        for site in definition.sites:
            names = dict.fromkeys(t for t, _ in site_tables(site))  # a self-join names a table twice
            missing = [t for t in names if f"{site.source}.{t}" not in out["timestamps"]]
            if missing:
                raise ViewDefinitionError(
                    f"strategy timestamp needs a timestamp column for every table of the view: give "
                    f"{', '.join(f'{site.source}.{t}' for t in missing)} one in timestamps ({{TABLE: COLUMN}})"
                )
    versioned = sorted({s.source for s in definition.sites if schemas[s.source].dialect == ROW_VERSION_DIALECT})
    dumped = sorted({s.source for s in definition.sites if schemas[s.source].dialect == DUMP_DIALECT})
    if strategy == "snapshot_diff":
        check_snapshot_diff(definition, schemas)
    return replace(
        settings,
        dumped=tuple(dumped),
        timestamps=out["timestamps"],
        delete_flags=out["delete_flags"],
        not_null=tuple(sorted(not_null)),
        text_stamps=tuple(sorted(t.rpartition(".")[0] for t in text)),
        versioned=tuple(versioned),
    )


#: The dialect (as the agents' schemas name it) that compares text byte by byte, whatever the column.
TEXT_STAMP_DIALECT = "sqlite"


def _text_stamp(column: str, declared: LogicalType, dialect: str) -> str:
    """A timestamp column read as a timestamp from text (column_types), checked: on SQLite only.

    PostgreSQL and MySQL compare text by the column's collation, which may weigh the
    digits, '-', ':' and 'T' otherwise than their bytes: a ranged read could miss rows.
    """
    if declared.kind != "text":
        raise ViewDefinitionError(f"timestamps: column {column} is {declared} at the source, not a timestamp")
    if dialect != TEXT_STAMP_DIALECT:
        raise ViewDefinitionError(
            f"timestamps: column {column} is text read as a timestamp (column_types); a text timestamp serves the "
            f"timestamp strategy on SQLite only ({dialect} compares text by its collation): use another strategy, "
            "e.g. auto, or a column declared as a timestamp"
        )
    return column


#: The dialect (as the agents' schemas name it) whose row versions strategy row_version reads.
ROW_VERSION_DIALECT = "postgres"


def _sites_not_on(
    definition: ViewDef, schemas: dict[str, SourceSchema], strategy: str, dialect: str, multiset: bool = False
) -> str:
    """The view's sources whose dialect is not `dialect`, listed (a view without a key is
    refused unless `multiset`: its grouped sites are keyed by their rows)."""
    if not definition.key and not (multiset and definition.multiset):
        raise ViewDefinitionError(f"strategy {strategy} needs a keyed view (this one has no key)")
    return ", ".join(
        sorted(
            f"{s.source} ({schemas[s.source].dialect})"
            for s in definition.sites
            if schemas[s.source].dialect != dialect
        )
    )


def check_row_version(definition: ViewDef, schemas: dict[str, SourceSchema]) -> None:
    """Strategy row_version needs a keyed view all of whose sites are on PostgreSQL.

    Raises:
        ViewDefinitionError: saying which source is not, or that the view has no key.
    """
    other = _sites_not_on(definition, schemas, "row_version", ROW_VERSION_DIALECT)
    if other:
        raise ViewDefinitionError(
            f"strategy row_version needs PostgreSQL sources (it reads their row versions' xmin); "
            f"not PostgreSQL: {other}. Use timestamp (with timestamp columns) or auto there"
        )


def check_snapshot_diff(definition: ViewDef, schemas: dict[str, SourceSchema]) -> None:
    """Strategy snapshot_diff needs a view (keyed, or a multiset) all of whose sites are directories of dumps.

    Raises:
        ViewDefinitionError: saying which source is not, or that the view has no key.
    """
    other = _sites_not_on(definition, schemas, "snapshot_diff", DUMP_DIALECT, multiset=True)
    if other:
        raise ViewDefinitionError(
            f"strategy snapshot_diff compares dump files (agents started with --db-url file:///DIR); these sources "
            f"are databases: {other}. Use auto or another strategy there"
        )


def flag_predicate(column: exp.Column, kind: str) -> exp.Expression:
    """The rows whose delete flag is not set: NULL, FALSE or 0 (any other value is set).

    >>> flag_predicate(exp.column("gone", "t"), "bool").sql()
    '(t.gone IS NULL OR t.gone = FALSE)'
    >>> flag_predicate(exp.column("deleted_at", "t"), "timestamp").sql()
    't.deleted_at IS NULL'
    """
    unset = exp.Is(this=column.copy(), expression=exp.Null())
    if kind == "bool":
        return exp.Paren(this=exp.or_(unset, exp.EQ(this=column.copy(), expression=exp.Boolean(this=False))))
    if kind in ("int", "decimal", "float"):
        return exp.Paren(this=exp.or_(unset, exp.EQ(this=column.copy(), expression=exp.Literal.number(0))))
    return unset


def apply_delete_flags(definition: ViewDef, settings: StampSettings, schemas: dict[str, SourceSchema]) -> ViewDef:
    """The definition with each flagged table's rows filtered to those whose flag is not set."""
    sites = []
    for site in definition.sites:
        dialect = schemas[site.source].dialect
        tree = sqlglot.parse_one(site.sql, read=dialect)
        assert isinstance(tree, exp.Select), "a site query is one SELECT (sitesql.py)"
        for name, alias in site_tables(site, dialect):
            column = settings.delete_flags.get(f"{site.source}.{name}")
            if column is not None:
                info = schemas[site.source].tables[name].column(column)
                assert info is not None, "a delete flag names a column of its table (checked when the view was defined)"
                kind = info.type.kind
                tree = tree.where(flag_predicate(exp.column(column, alias, quoted=True), kind), append=True)
        sites.append(replace(site, sql=tree.sql(dialect=dialect)))
    return replace(definition, sites=sites)


def not_null_aliases(site: SiteQuery, settings: TimestampSettings) -> frozenset:
    """The aliases of the site query's tables whose timestamp is declared NOT NULL."""
    return frozenset(
        alias for name, alias in site_tables(site) if f"{site.source}.{name}" in settings.timestamps_not_null
    )


def site_stamps(site: SiteQuery, settings: TimestampSettings) -> dict[str, str]:
    """Alias -> timestamp column of the site query's stamped tables."""
    return {
        alias: settings.timestamps[f"{site.source}.{name}"]
        for name, alias in site_tables(site)
        if f"{site.source}.{name}" in settings.timestamps
    }


def since(watermark: str, lag_s: float) -> str:
    """The lower bound of the next read: the watermark minus the lag, in the same text form
    and with as many fractional digits (text stamps compare as text: SQLite's '…:03.500'
    sorts after '…:03.5', and '…:03.500000' after a row stamped '…:03.500').

    >>> since("2026-11-25 20:00:03.500", 5), since("2026-11-25 20:00:03.123456", 0)
    ('2026-11-25 19:59:58.500', '2026-11-25 20:00:03.123456')
    >>> since("2026-11-25 20:00:03", 1.5)
    '2026-11-25 20:00:01'
    """
    bound = (dt.datetime.fromisoformat(watermark) - dt.timedelta(seconds=lag_s)).strftime(WATERMARK_FORMAT)
    digits = len(watermark.rpartition(".")[2]) if "." in watermark else 0
    return bound[: len(bound) - 6 + digits] if digits else bound[:-7]


def text_aliases(site: SiteQuery, settings: TimestampSettings) -> frozenset:
    """The aliases of the site query's tables whose timestamp is text read as a timestamp (column_types)."""
    return frozenset(alias for name, alias in site_tables(site) if f"{site.source}.{name}" in settings.timestamps_text)


def text_bound_condition(col: exp.Column, bound: str) -> exp.Condition:
    """`col` (text holding timestamps, deltasieve_protocol/column_types.py) at or after `bound`, compared as text.

    >>> text_bound_condition(exp.column("at", "p"), "2026-01-01 10:00:00").sql()
    "p.at >= '2026-01-01 10:00:00' AND (p.at < '2026-01-01T' OR p.at >= '2026-01-01T10:00:00')"
    >>> text_bound_condition(exp.column("at", "p"), "2026-01-01 10:00:00.500").sql()  # doctest: +ELLIPSIS
    "p.at >= '2026-01-01 10:00:00.5' AND (...) AND NOT p.at IN ('2026-01-01 10:00:00Z', '2026-01-01T10:00:00Z')"
    """
    text = text_bound(bound)
    gap = exp.or_(
        exp.LT(this=col.copy(), expression=exp.Literal.string(text.gap[0])),
        exp.GTE(this=col.copy(), expression=exp.Literal.string(text.gap[1])),
    )
    terms: list[exp.Expression] = [
        exp.GTE(this=col.copy(), expression=exp.Literal.string(text.lowest)),
        exp.Paren(this=gap),
    ]
    if text.early:
        early = exp.In(this=col.copy(), expressions=[exp.Literal.string(t) for t in text.early])
        terms.append(exp.Not(this=early))
    return exp.and_(*terms)


def ranged_sql(
    site: SiteQuery,
    stamps: dict[str, str],
    bound: str | None,
    not_null: frozenset = frozenset(),
    text: frozenset = frozenset(),
) -> str:
    """The site query narrowed to rows with any stamped table's timestamp >= `bound`, or NULL
    (a NULL timestamp counts as changed at every sync; not asked of the aliases in
    `not_null`, whose column cannot be NULL); no row at all when `bound` is None. The
    aliases in `text` have text timestamps (column_types): see `text_bound_condition`.

    >>> s = SiteQuery("s", 'SELECT "p"."id" AS "id" FROM "people" AS "p" WHERE "p"."id" > 0', [], ["id"])
    >>> ranged_sql(s, {"p": "at"}, "2026-01-01 00:00:00.000000")
    'SELECT "p"."id" AS "id" FROM "people" AS "p" WHERE "p"."id" > 0 AND ("p"."at" >= \\'2026-01-01 00:00:00.000000\\' OR "p"."at" IS NULL)'
    >>> ranged_sql(s, {"p": "at"}, "2026-01-01 00:00:00", frozenset({"p"}))
    'SELECT "p"."id" AS "id" FROM "people" AS "p" WHERE "p"."id" > 0 AND ("p"."at" >= \\'2026-01-01 00:00:00\\')'
    """
    tree = site.parse()
    if bound is None:
        return site.render(
            tree.where(exp.EQ(this=exp.Literal.number(1), expression=exp.Literal.number(0)), append=True)
        )
    terms: list[exp.Expression] = []
    for alias, column in stamps.items():
        col = exp.column(column, alias, quoted=True)
        if alias in text:
            terms.append(exp.Paren(this=text_bound_condition(col, bound)))
        else:
            terms.append(exp.GTE(this=col, expression=exp.Literal.string(bound)))
        if alias not in not_null:
            terms.append(exp.Is(this=col.copy(), expression=exp.Null()))
    return site.render(tree.where(exp.Paren(this=exp.or_(*terms)), append=True))


def keys_sql(site: SiteQuery) -> str:
    """The site query projected on its key columns, in the key's order (the key reconciliation's read).

    The agent checks a request's columns in order against those it reads, and the key's
    order is the primary key's, which need not be the order of the table's columns.

    >>> keys_sql(SiteQuery("s", 'SELECT "p"."id" AS "id", "p"."n" AS "n" FROM "people" AS "p"', [], ["id"]))
    'SELECT "p"."id" AS "id" FROM "people" AS "p"'
    >>> keys_sql(SiteQuery("s", 'SELECT "t"."a" AS "a", "t"."b" AS "b", "t"."c" AS "c" FROM "t" AS "t"', [], ["c", "a"]))
    'SELECT "t"."c" AS "c", "t"."a" AS "a" FROM "t" AS "t"'
    """
    tree = site.parse()
    selected = {e.alias_or_name: e for e in tree.expressions}
    return site.render(tree.select(*(selected[k] for k in site.key), append=False))
