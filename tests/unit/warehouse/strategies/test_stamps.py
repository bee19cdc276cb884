"""Timestamp and delete-flag settings: checked against the schemas, and the SQL they imply."""

from __future__ import annotations

import pytest

from deltasieve_protocol.schema import ColumnInfo, SourceSchema, TableInfo
from deltasieve_protocol.types import LogicalType
from warehouse.strategies.stamps import (
    StampSettings,
    apply_delete_flags,
    check_settings,
    keys_sql,
    not_null_aliases,
    ranged_sql,
    site_stamps,
    text_aliases,
)
from warehouse.view_options import TimestampSettings, ViewOptions
from warehouse.viewdef import ViewDefinitionError, analyze_view
from warehouse.viewdef.column_types import asked_schemas, resolve, with_read_from


def _table(name: str, *columns: tuple[str, str]) -> TableInfo:
    return TableInfo(name, tuple(ColumnInfo(c, LogicalType.parse(t), True, t) for c, t in columns), ("id",))


SCHEMAS = {
    "s": SourceSchema(
        "sqlite",
        {
            "a": _table("a", ("id", "int"), ("x", "text"), ("at", "timestamp"), ("gone", "bool")),
            "b": _table("b", ("id", "int"), ("a_id", "int"), ("at", "timestamptz"), ("del", "int")),
        },
    )
}
JOIN = "SELECT a.id, a.x, b.id AS b_id FROM s.a a JOIN s.b b ON b.a_id = a.id WHERE a.x <> 'z'"


def timestamp(settings: StampSettings) -> TimestampSettings:
    """The settings strategy timestamp reads, as the view's options hold them."""
    read = ViewOptions.of("timestamp", settings).timestamp_settings
    assert read is not None
    return read


@pytest.fixture(scope="module")
def definition():
    return analyze_view(JOIN, SCHEMAS)


def test_tables_are_named_source_dot_table(definition):
    got = check_settings(StampSettings({"a": "at", "s.b": "at"}, {"b": "del"}), definition, SCHEMAS, "timestamp")
    assert (got.timestamps, got.delete_flags) == ({"s.a": "at", "s.b": "at"}, {"s.b": "del"})


@pytest.mark.parametrize(
    ("settings", "strategy", "words"),
    [
        (StampSettings({"a": "at"}), "timestamp", "give s.b one"),
        (StampSettings({"a": "x"}), "auto", "not a timestamp"),
        (StampSettings({"c": "at"}), "auto", "reads no table 'c'"),
        (StampSettings({}, {"a": "nope"}), "auto", "has no column 'nope'"),
        (StampSettings(lag_s=-1), "auto", "timestamp_lag_s"),
        (StampSettings(reconcile_every=0), "auto", "reconcile_every"),
    ],
)
def test_bad_settings_say_what_is_wrong(definition, settings, strategy, words):
    with pytest.raises(ViewDefinitionError, match=words):
        check_settings(settings, definition, SCHEMAS, strategy)


def test_delete_flags_filter_the_site_query(definition):
    settings = check_settings(StampSettings({}, {"a": "gone", "b": "del"}), definition, SCHEMAS, "auto")
    sql = apply_delete_flags(definition, settings, SCHEMAS).sites[0].sql
    assert '("a"."gone" IS NULL OR "a"."gone" = FALSE)' in sql or '"a"."gone" = 0' in sql, sql
    assert '("b"."del" IS NULL OR "b"."del" = 0)' in sql, sql


def test_ranged_and_key_reads_of_a_join(definition):
    settings = check_settings(StampSettings({"a": "at", "b": "at"}), definition, SCHEMAS, "timestamp")
    site = definition.sites[0]
    stamps = site_stamps(site, timestamp(settings))
    assert stamps == {"a": "at", "b": "at"}
    ranged = ranged_sql(site, stamps, "2026-11-25 00:00:00.000000")
    assert '"a"."x" <> \'z\' AND (' in ranged and ranged.count(">= '2026-11-25 00:00:00.000000'") == 2, ranged
    assert ranged.count("IS NULL") == 2, ranged
    # the view's key is b's alone (b.a_id = a.id implies a's key): the key read selects it
    assert keys_sql(site).startswith('SELECT "b"."id" AS "b_id" FROM'), keys_sql(site)
    assert "1 = 0" in ranged_sql(site, stamps, None)


def test_a_not_null_timestamp_is_read_without_an_is_null_term(definition):
    """SQLite reads `at >= ?` through an index on `at`, but not `(at >= ? OR at IS NULL)`."""
    strict = {
        "s": SourceSchema(
            "sqlite",
            {
                "a": TableInfo(
                    "a",
                    (
                        *SCHEMAS["s"].tables["a"].columns[:2],
                        ColumnInfo("at", LogicalType.parse("timestamp"), False, "DATETIME"),
                    ),
                    ("id",),
                ),
                "b": SCHEMAS["s"].tables["b"],
            },
        )
    }
    settings = check_settings(StampSettings({"a": "at", "b": "at"}), definition, strict, "timestamp")
    stored = ViewOptions.of("timestamp", settings).stored()
    assert settings.not_null == ("s.a",) and StampSettings.from_options(stored) == settings
    site, read = definition.sites[0], timestamp(settings)
    ranged = ranged_sql(site, site_stamps(site, read), "2026-11-25 00:00:00", not_null_aliases(site, read))
    assert '"a"."at" IS NULL' not in ranged and '"b"."at" IS NULL' in ranged, ranged


def test_row_version_needs_every_site_on_postgresql(definition):
    with pytest.raises(ViewDefinitionError, match=r"needs PostgreSQL sources.*not PostgreSQL: s \(sqlite\)"):
        check_settings(StampSettings(), definition, SCHEMAS, "row_version")
    on_postgres = {"s": SourceSchema("postgres", SCHEMAS["s"].tables)}
    assert check_settings(StampSettings(), definition, on_postgres, "row_version") == StampSettings(versioned=("s",))
    # any strategy: the sources on PostgreSQL are noted, for auto
    assert check_settings(StampSettings(), definition, SCHEMAS, "auto").versioned == ()
    assert check_settings(StampSettings(), definition, on_postgres, "auto").versioned == ("s",)


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
def test_a_text_timestamp_read_as_one_serves_on_sqlite_only(dialect):
    table = _table("a", ("id", "int"), ("at", "text"))
    schemas = {"s": SourceSchema(dialect, {"a": table})}
    sql = "SELECT a.id, a.at FROM s.a a"
    asked = resolve({"a.at": "timestamp"}, sql, schemas)
    read = asked_schemas(schemas, asked)
    view = with_read_from(analyze_view(sql, read), asked)
    settings = StampSettings(timestamps={"a": "at"})
    if dialect != "sqlite":
        with pytest.raises(ViewDefinitionError, match="on SQLite only"):
            check_settings(settings, view, read, "timestamp")
        return
    checked = check_settings(settings, view, read, "timestamp")
    assert checked.text_stamps == ("s.a",)
    assert StampSettings.from_options(ViewOptions.of("timestamp", checked).stored()) == checked
    (site,), read = view.sites, timestamp(checked)
    sql = ranged_sql(site, site_stamps(site, read), "2026-11-27 03:40:05.500", text=text_aliases(site, read))
    assert sql.endswith(
        """WHERE (("a"."at" >= '2026-11-27 03:40:05.5' AND ("a"."at" < '2026-11-27T' OR "a"."at" >= """
        """'2026-11-27T03:40:05.5') AND NOT "a"."at" IN ('2026-11-27 03:40:05Z', '2026-11-27T03:40:05Z')) """
        """OR "a"."at" IS NULL)"""
    )
