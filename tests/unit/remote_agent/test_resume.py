"""A full read resumed after a key (remote_agent/resume.py, chunks.py) on real SQLite: exactly the rest."""

from __future__ import annotations

import sqlite3

import pytest

from remote_agent import chunks, resume
from remote_agent.adapters import open_adapter
from remote_agent.sitequery import validate_site_query


@pytest.fixture
def adapter(tmp_path):
    path = tmp_path / "legacy.db"
    with sqlite3.connect(path) as c:
        c.execute(
            "CREATE TABLE enrol (region TEXT NOT NULL, code INTEGER NOT NULL, grade TEXT, PRIMARY KEY (region, code))"
        )
        c.executemany(
            "INSERT INTO enrol VALUES (?, ?, ?)",
            [(r, i, g) for r in ("north", "süd", "東", "", "North") for i, g in zip(range(1, 9), "ABCXABCX")],
        )
        c.execute("CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT, score REAL)")
        c.executemany("INSERT INTO people VALUES (?, ?, ?)", [(i, f"p{i}", i / 3) for i in range(-5, 30)])
        c.execute("CREATE TABLE nullkey (k INTEGER, v TEXT)")
        c.executemany("INSERT INTO nullkey VALUES (?, ?)", [(1, "a"), (2, "b"), (None, "c"), (3, "d")])
    return open_adapter(f"sqlite:///{path}", statement_timeout_s=5)


def _query(adapter, sql: str, key: list[str]):
    return validate_site_query(sql, key, {t.name: t for t in adapter.describe()}, adapter.dialect)


def _rows(adapter, query, chunk_rows: int) -> list[tuple]:
    with adapter.session() as session:
        return [r for rows in chunks.scan(adapter, session, query, chunk_rows) for r in rows]


@pytest.mark.parametrize("chunk_rows", [1, 3, 100])
@pytest.mark.parametrize(
    "sql, key",
    [
        ("SELECT e.region, e.code, e.grade FROM enrol e WHERE e.grade <> 'X'", ["region", "code"]),
        ("SELECT p.id, p.name FROM people p", ["id"]),
    ],
)
def test_a_read_resumed_after_any_key_reads_exactly_the_rows_after_it(adapter, sql, key, chunk_rows):
    query = _query(adapter, sql, key)
    whole = _rows(adapter, query, 4)
    positions = query.key_positions
    for i, row in enumerate(whole):
        after = [row[p] for p in positions]
        resumed = resume.resumed(adapter, query, after, whole=True)
        assert resumed is not None
        assert _rows(adapter, resumed, chunk_rows) == whole[i + 1 :], after


def test_a_key_between_the_rows_resumes_at_the_next_one(adapter):
    """The database compares: a key the source no longer holds (deleted since) is a cursor like any."""
    query = _query(adapter, "SELECT p.id, p.name FROM people p WHERE p.name <> 'p7'", ["id"])
    resumed = resume.resumed(adapter, query, [7], whole=True)
    assert [r[0] for r in _rows(adapter, resumed, 2)] == list(range(8, 30))


def test_a_nullable_key_is_probed_before_a_resumed_read(adapter):
    from remote_agent.errors import SourceDataError

    query = _query(adapter, "SELECT n.k, n.v FROM nullkey n", ["k"])
    resumed = resume.resumed(adapter, query, [1], whole=True)
    if query.nulls_first:  # SQLite sorts NULL first: the first attempt's first chunk met it
        assert [r[0] for r in _rows(adapter, resumed, 10)] == [2, 3]
    else:
        with pytest.raises(SourceDataError, match="NULL in key"):
            _rows(adapter, resumed, 10)


@pytest.mark.parametrize(
    "sql, key, after, whole",
    [
        ("SELECT p.id, p.name FROM people p", ["id"], [3], False),  # units or hashes sent
        ("SELECT p.id, p.name FROM people p", ["id"], ["3"], True),  # not the key's type
        ("SELECT p.id, p.name FROM people p", ["id"], [3, 4], True),  # not one value per key column
        ("SELECT p.score, p.name FROM people p", ["score"], [1], True),  # a float key
        ("SELECT p.id, p.name FROM people p", ["id"], None, True),  # nothing to resume after
    ],
)
def test_what_is_read_from_the_start(adapter, sql, key, after, whole):
    assert resume.resumed(adapter, _query(adapter, sql, key), after, whole=whole) is None


def test_a_grouped_query_is_read_from_the_start(adapter):
    query = _query(adapter, "SELECT e.grade, COUNT(*) AS n FROM enrol e GROUP BY e.grade", ["grade"])
    assert query.grouped and resume.resumed(adapter, query, ["A"], whole=True) is None


# -- PostgreSQL: text compared by the column's collation, NULL sorted last -------------------

PG_SCHEMA = """
CREATE TABLE pairs (b text NOT NULL, a integer NOT NULL, v text, PRIMARY KEY (b, a));
INSERT INTO pairs SELECT s, i, s || i FROM unnest(ARRAY['x', 'ß', 'y z', '', 'X', 'é']) s, generate_series(1, 5) i;
CREATE TABLE nullable (k integer UNIQUE, v text);
INSERT INTO nullable SELECT i, 'v' FROM generate_series(1, 10) i;
INSERT INTO nullable VALUES (NULL, 'null key');
GRANT SELECT ON ALL TABLES IN SCHEMA public TO reader;
"""


@pytest.fixture(scope="module")
def pg(postgres):
    import psycopg

    with psycopg.connect(postgres.owner_url, autocommit=True) as c:
        c.execute(PG_SCHEMA)
    return open_adapter(postgres.reader_url, statement_timeout_s=5)


def test_postgres_resumes_after_any_key_in_its_own_order(pg):
    query = _query(pg, "SELECT p.b, p.a, p.v FROM pairs p", ["b", "a"])
    whole = _rows(pg, query, 7)
    assert len(whole) == 30
    for i, row in enumerate(whole):
        resumed = resume.resumed(pg, query, [row[0], row[1]], whole=True)
        assert _rows(pg, resumed, 4) == whole[i + 1 :], row


def test_postgres_a_resumed_read_finds_a_null_key_sorted_last(pg):
    from remote_agent.errors import SourceDataError

    query = _query(pg, "SELECT n.k, n.v FROM nullable n", ["k"])
    resumed = resume.resumed(pg, query, [9], whole=True)  # one row left: its only chunk is not full
    with pytest.raises(SourceDataError, match="NULL in key"):
        _rows(pg, resumed, 100)
