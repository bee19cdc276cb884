"""Keyset-paginated reads of the site query (remote_agent/chunks.py) on real SQLite and PostgreSQL."""

from __future__ import annotations

import math
import sqlite3

import psycopg
import pytest

from remote_agent import chunks, resume
from remote_agent.adapters import open_adapter
from remote_agent.errors import SourceDataError
from remote_agent.sitequery import validate_site_query


def _query(adapter, sql: str, key: list[str]):
    return validate_site_query(sql, key, {t.name: t for t in adapter.describe()}, adapter.dialect)


def _scan(adapter, query, chunk_rows: int) -> list[list[tuple]]:
    with adapter.session() as session:
        return list(chunks.scan(adapter, session, query, chunk_rows))


def _all(adapter, query) -> list[tuple]:
    with adapter.read() as reader:
        return [r for rows in reader.stream(query.sql) for r in rows]


def _flat(parts: list[list[tuple]]) -> list[tuple]:
    return [r for rows in parts for r in rows]


# -- SQLite --------------------------------------------------------------------------------


@pytest.fixture
def sqlite_db(tmp_path):
    path = tmp_path / "legacy.db"
    with sqlite3.connect(path) as c:
        c.execute(
            "CREATE TABLE enrol (region TEXT NOT NULL, code INTEGER NOT NULL, grade TEXT, PRIMARY KEY (region, code))"
        )
        c.executemany(
            "INSERT INTO enrol VALUES (?, ?, ?)",
            [(r, i, g) for r in ("north", "süd", "東", "") for i, g in zip(range(1, 14), "ABCXABCXABCXA")],
        )
        c.execute("CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT)")
        c.executemany("INSERT INTO people VALUES (?, ?)", [(i, f"p{i}") for i in range(1, 41)])
        c.execute("CREATE TABLE dups (k INTEGER, v TEXT)")
        c.executemany("INSERT INTO dups VALUES (?, ?)", [(1, "a"), (2, "b"), (2, "c"), (3, "d")])
        c.execute("CREATE TABLE nullkey (k INTEGER, v TEXT)")
        c.executemany("INSERT INTO nullkey VALUES (?, ?)", [(1, "a"), (2, "b"), (None, "c"), (3, "d")])
    return path


@pytest.mark.parametrize("chunk_rows", [1, 2, 7, 13, 10_000])
@pytest.mark.parametrize(
    "sql, key",
    [
        ("SELECT e.region, e.code, e.grade FROM enrol e WHERE e.grade <> 'X' OR e.code = 4", ["region", "code"]),
        ("SELECT p.id, p.name FROM people p", ["id"]),
        ("SELECT p.id, p.name, e.region, e.code FROM people p JOIN enrol e ON e.code = p.id", ["id", "region", "code"]),
    ],
)
def test_sqlite_chunks_cover_the_query_once_in_key_order(sqlite_db, sql, key, chunk_rows):
    adapter = open_adapter(f"sqlite:///{sqlite_db}", statement_timeout_s=5)
    query = _query(adapter, sql, key)
    parts = _scan(adapter, query, chunk_rows)
    rows = _flat(parts)
    assert sorted(rows, key=repr) == sorted(_all(adapter, query), key=repr)
    assert len({tuple(r[p] for p in query.key_positions) for r in rows}) == len(rows)
    assert all(len(p) <= chunk_rows for p in parts)
    assert len(parts) == max(1, math.ceil(len(rows) / chunk_rows))


def test_sqlite_writers_commit_between_chunks_and_the_scan_is_a_fuzzy_snapshot(sqlite_db):
    """No lock is held between chunks; changes above the cursor are seen, below it not."""
    adapter = open_adapter(f"sqlite:///{sqlite_db}", statement_timeout_s=5)
    query = _query(adapter, "SELECT p.id, p.name FROM people p", ["id"])
    with adapter.session() as session:
        scan = chunks.scan(adapter, session, query, 10)
        first = next(scan)
        assert [r[0] for r in first] == list(range(1, 11))
        # timeout=0: a read transaction still open would make this fail with "database is locked".
        with sqlite3.connect(sqlite_db, timeout=0) as writer:
            writer.execute("UPDATE people SET name = 'changed' WHERE id IN (5, 25)")
            writer.execute("DELETE FROM people WHERE id = 30")
            writer.execute("DELETE FROM people WHERE id = 3")
            writer.execute("INSERT INTO people VALUES (0, 'below'), (100, 'above')")
        rest = _flat(list(scan))
    seen = {r[0]: r[1] for r in first + rest}
    assert seen[5] == "p5" and seen[3] == "p3"  # read before the change, once
    assert seen[25] == "changed" and 30 not in seen and seen[100] == "above"
    assert 0 not in seen  # inserted below the cursor: picked up by the next sync
    assert len(first + rest) == len(seen)


def test_duplicate_key_across_a_chunk_boundary_is_passed_on_twice(sqlite_db):
    adapter = open_adapter(f"sqlite:///{sqlite_db}", statement_timeout_s=5)
    query = _query(adapter, "SELECT d.k, d.v FROM dups d", ["k"])
    for chunk_rows in (1, 2, 3):
        with pytest.raises(SourceDataError, match="not unique") if chunk_rows == 1 else _nothing():
            rows = _flat(_scan(adapter, query, chunk_rows))
            # Which of the two rows of key 2 comes twice is the database's choice; that the
            # key comes twice is what lets the extraction report the key as not unique.
            assert sorted(r[0] for r in rows) == [1, 2, 2, 3], chunk_rows


def test_null_key_fails_with_its_message_in_sqlite(sqlite_db):
    adapter = open_adapter(f"sqlite:///{sqlite_db}", statement_timeout_s=5)
    query = _query(adapter, "SELECT n.k, n.v FROM nullkey n", ["k"])
    for chunk_rows in (1, 2, 100):
        with pytest.raises(SourceDataError, match=r"NULL in key column\(s\) \['k'\]"):
            _scan(adapter, query, chunk_rows)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_chunk_sql_is_keyset_pagination_on_the_stored_key():
    from deltasieve_protocol.types import LogicalType
    from remote_agent.adapters.base import ColumnInfo, TableInfo

    table = TableInfo(
        "t",
        (
            ColumnInfo("a", LogicalType("text"), False, "uuid", "CAST({col} AS TEXT)"),
            ColumnInfo("b", LogicalType("int"), False, "int"),
            ColumnInfo("c", LogicalType("text"), True, "text"),
        ),
        ("a", "b"),
    )
    query = validate_site_query(
        "SELECT t.a, t.b, t.c FROM t WHERE t.c = 'x' OR t.b > 1", ["a", "b"], {"t": table}, "postgres"
    )
    assert query.chunk_sql(5, from_cursor=True) == (
        'SELECT CAST("t"."a" AS TEXT) AS "a", "t"."b" AS "b", "t"."c" AS "c" FROM "t" AS "t" '
        'WHERE ("t"."c" = \'x\' OR "t"."b" > 1) AND ("t"."a", "t"."b") >= (%s, %s) ORDER BY "t"."a", "t"."b" LIMIT 5'
    )
    assert query.chunk_sql(5, from_cursor=False).endswith(
        'WHERE "t"."c" = \'x\' OR "t"."b" > 1 ORDER BY "t"."a", "t"."b" LIMIT 5'
    )
    assert query.null_key_sql().endswith(
        'WHERE ("t"."c" = \'x\' OR "t"."b" > 1) AND ("t"."a" IS NULL OR "t"."b" IS NULL) LIMIT 1'
    )


# -- resumed reads (remote_agent/resume.py): exactly the rows after the key ---------------------


def _sqlite(sqlite_db):
    return open_adapter(f"sqlite:///{sqlite_db}", statement_timeout_s=5)


@pytest.mark.parametrize("chunk_rows", [1, 3, 100])
@pytest.mark.parametrize(
    "sql, key",
    [
        ("SELECT e.region, e.code, e.grade FROM enrol e WHERE e.grade <> 'X'", ["region", "code"]),
        ("SELECT p.id, p.name FROM people p", ["id"]),
    ],
)
def test_a_read_resumed_after_any_key_reads_exactly_the_rows_after_it(sqlite_db, sql, key, chunk_rows):
    adapter = _sqlite(sqlite_db)
    query = _query(adapter, sql, key)
    whole = _flat(_scan(adapter, query, 4))
    for i, row in enumerate(whole):
        after = [row[p] for p in query.key_positions]
        resumed = resume.resumed(adapter, query, after, whole=True)
        assert resumed is not None
        assert _flat(_scan(adapter, resumed, chunk_rows)) == whole[i + 1 :], after


def test_a_key_between_the_rows_resumes_at_the_next_one(sqlite_db):
    """The database compares: a key the source no longer holds (deleted since) is a cursor like any."""
    adapter = _sqlite(sqlite_db)
    query = _query(adapter, "SELECT p.id, p.name FROM people p WHERE p.name <> 'p7'", ["id"])
    resumed = resume.resumed(adapter, query, [7], whole=True)
    assert [r[0] for r in _flat(_scan(adapter, resumed, 2))] == list(range(8, 41))


def test_sqlite_a_resumed_read_after_a_null_key_sorted_first(sqlite_db):
    """SQLite sorts NULL first: the first attempt's first chunk met it (PostgreSQL: probed, below)."""
    adapter = _sqlite(sqlite_db)
    query = _query(adapter, "SELECT n.k, n.v FROM nullkey n", ["k"])
    assert query.nulls_first
    assert [r[0] for r in _flat(_scan(adapter, resume.resumed(adapter, query, [1], whole=True), 10))] == [2, 3]


@pytest.mark.parametrize(
    "sql, key, after, whole",
    [
        ("SELECT p.id, p.name FROM people p", ["id"], [3], False),  # units or hashes sent
        ("SELECT p.id, p.name FROM people p", ["id"], ["3"], True),  # not the key's type
        ("SELECT p.id, p.name FROM people p", ["id"], [3, 4], True),  # not one value per key column
        ("SELECT p.id, p.name FROM people p", ["id"], None, True),  # nothing to resume after
        ("SELECT e.grade, COUNT(*) AS n FROM enrol e GROUP BY e.grade", ["grade"], ["A"], True),  # grouped
    ],
)
def test_what_is_read_from_the_start(sqlite_db, sql, key, after, whole):
    adapter = _sqlite(sqlite_db)
    assert resume.resumed(adapter, _query(adapter, sql, key), after, whole=whole) is None


# -- PostgreSQL ----------------------------------------------------------------------------

PG_SCHEMA = """
CREATE TABLE floats (k real PRIMARY KEY, v text);
INSERT INTO floats VALUES (0.1, 'a'), (0.2, 'b'), ('NaN', 'nan'), ('Infinity', 'inf'), ('-Infinity', '-inf'), (1e-45, 'tiny'), (-0.3, 'neg');
CREATE TABLE doubles (k double precision PRIMARY KEY, v text);
INSERT INTO doubles VALUES (0.1, 'a'), (1e300, 'big'), ('NaN', 'nan'), (5e-324, 'tiny'), (0.30000000000000004, 'odd');
CREATE TABLE ids (k uuid PRIMARY KEY, v text);
INSERT INTO ids SELECT md5(i::text)::uuid, i::text FROM generate_series(1, 23) i;
CREATE TABLE pairs (b text NOT NULL, a integer NOT NULL, v text, PRIMARY KEY (b, a));
INSERT INTO pairs SELECT s, i, s || i FROM unnest(ARRAY['x', 'ß', 'y z', '']) s, generate_series(1, 9) i;
CREATE TABLE nullable (k integer UNIQUE, v text);
INSERT INTO nullable SELECT i, 'v' FROM generate_series(1, 10) i;
INSERT INTO nullable VALUES (NULL, 'null key');
GRANT SELECT ON ALL TABLES IN SCHEMA public TO reader;
"""


@pytest.fixture(scope="module")
def pg(postgres):
    with psycopg.connect(postgres.owner_url, autocommit=True) as c:
        c.execute(PG_SCHEMA)
    return postgres


@pytest.mark.parametrize("chunk_rows", [1, 3, 1000])
@pytest.mark.parametrize(
    "sql, key",
    [
        ("SELECT f.k, f.v FROM floats f", ["k"]),
        ("SELECT d.k, d.v FROM doubles d", ["k"]),
        ("SELECT i.k, i.v FROM ids i", ["k"]),
        ("SELECT p.b, p.a, p.v FROM pairs p WHERE p.a <> 4", ["b", "a"]),
    ],
)
def test_postgres_chunks_cover_the_query_once(pg, sql, key, chunk_rows):
    adapter = open_adapter(pg.reader_url, statement_timeout_s=5)
    query = _query(adapter, sql, key)
    rows = _flat(_scan(adapter, query, chunk_rows))
    assert sorted(map(repr, rows)) == sorted(map(repr, _all(adapter, query)))
    assert len({repr(tuple(r[p] for p in query.key_positions)) for r in rows}) == len(rows)


def test_postgres_null_in_a_nullable_key_sorted_last_is_found(pg):
    adapter = open_adapter(pg.reader_url, statement_timeout_s=5)
    query = _query(adapter, "SELECT n.k, n.v FROM nullable n", ["k"])
    for chunk_rows in (2, 100):
        with pytest.raises(SourceDataError, match=r"NULL in key column\(s\) \['k'\]"):
            _scan(adapter, query, chunk_rows)


def test_postgres_resumes_after_any_key_in_its_own_order(pg):
    """A resumed read (remote_agent/resume.py): text compared by the column's collation."""
    adapter = open_adapter(pg.reader_url, statement_timeout_s=5)
    query = _query(adapter, "SELECT p.b, p.a, p.v FROM pairs p", ["b", "a"])
    whole = _flat(_scan(adapter, query, 7))
    for i, row in enumerate(whole):
        resumed = resume.resumed(adapter, query, [row[0], row[1]], whole=True)
        assert _flat(_scan(adapter, resumed, 4)) == whole[i + 1 :], row


def test_postgres_a_resumed_read_finds_a_null_key_sorted_last(pg):
    adapter = open_adapter(pg.reader_url, statement_timeout_s=5)
    resumed = resume.resumed(adapter, _query(adapter, "SELECT n.k, n.v FROM nullable n", ["k"]), [9], whole=True)
    with pytest.raises(SourceDataError, match="NULL in key"):  # one row left: its only chunk is not full
        _scan(adapter, resumed, 100)


def test_postgres_connection_is_idle_between_chunks(pg):
    """Between two chunks the agent's backend holds no transaction (no snapshot, no lock)."""
    adapter = open_adapter(pg.reader_url, statement_timeout_s=5)
    query = _query(adapter, "SELECT p.b, p.a, p.v FROM pairs p", ["b", "a"])
    with adapter.session() as session, psycopg.connect(pg.owner_url, autocommit=True) as owner:
        scan = chunks.scan(adapter, session, query, 5)
        starts = []
        for _ in range(3):
            next(scan)
            state, xact_start, app = owner.execute(
                "SELECT state, xact_start, application_name FROM pg_stat_activity WHERE usename = 'reader' AND datname = current_database() AND backend_type = 'client backend'"
            ).fetchone()
            assert (state, xact_start, app) == ("idle", None, "deltasieve-agent")
            starts.append(xact_start)
        scan.close()


@pytest.mark.parametrize(
    "table, key_sql, wanted", [("people", "p.id", [3, 9, 40]), ("days", "p.day", ["2024-01-03", "2024-01-09"])]
)
def test_lookups_run_in_bounded_statements_and_rescans_in_chunks(sqlite_db, table, key_sql, wanted):
    """Keys SQLite can match (ints) are looked up a few per statement; others (dates,
    stored as text) by a chunked rescan; both find exactly the rows asked for."""
    import datetime as dt

    from remote_agent.adapters.rows import RowConverter
    from remote_agent.strategies.fetch import lookup_rows

    with sqlite3.connect(sqlite_db) as c:
        c.execute("CREATE TABLE days (day DATE PRIMARY KEY, v TEXT)")
        c.executemany("INSERT INTO days VALUES (?, ?)", [(f"2024-01-{d:02d}", str(d)) for d in range(1, 29)])
    adapter = open_adapter(f"sqlite:///{sqlite_db}", statement_timeout_s=5)
    column = key_sql.split(".")[1]
    query = _query(adapter, f"SELECT {key_sql}, p.{'name' if table == 'people' else 'v'} FROM {table} p", [column])
    keys = [dt.date.fromisoformat(k) if isinstance(k, str) else k for k in wanted]
    converter = RowConverter(adapter, query.columns)
    with adapter.session() as session:
        found = [
            k
            for batch in lookup_rows(adapter, session, query, converter, keys, batch_rows=100, chunk_rows=2)
            for k in batch.column(column).to_pylist()
        ]
    assert sorted(found) == sorted(keys)
