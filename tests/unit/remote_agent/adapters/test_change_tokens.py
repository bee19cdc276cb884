"""Change tokens (remote_agent/change_tokens.py): equal while nothing is committed, never after."""

from __future__ import annotations

import os
import pickle
import sqlite3

import psycopg
import pytest

from remote_agent.adapters.postgres import PostgresAdapter
from remote_agent.adapters.sqlite import SqliteAdapter
from remote_agent.change_tokens import read_token
from remote_agent.sitequery import validate_site_query


def _file(path, journal: str) -> sqlite3.Connection:
    writer = sqlite3.connect(path)
    writer.execute(f"PRAGMA journal_mode = {journal}")
    writer.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER)")
    writer.execute("CREATE VIEW v AS SELECT id, v FROM t")
    writer.commit()
    return writer


@pytest.mark.parametrize("journal", ["delete", "wal"])
def test_a_sqlite_token_changes_with_each_commit_and_only_then(tmp_path, journal):
    path = tmp_path / "source.db"
    writer = _file(path, journal)
    adapter = SqliteAdapter(f"sqlite:///{path}", statement_timeout_s=5)
    first = adapter.change_token().value
    assert first is not None and adapter.change_token().value == first
    with adapter.session() as session, session.read() as reader:  # the agent's own reads change nothing
        reader.rows("SELECT count(*) FROM t", limit=1)
    writer.execute("INSERT INTO t VALUES (1, 1)")
    assert adapter.change_token().value == first  # not committed yet
    writer.rollback()
    assert adapter.change_token().value == first
    writer.execute("INSERT INTO t VALUES (1, 1)")
    writer.commit()
    second = adapter.change_token().value
    assert second not in (None, first) and adapter.change_token().value == second
    # another connection of another process commits: so does the agent's copy in its reader process
    other = sqlite3.connect(path)
    other.execute("UPDATE t SET v = 2")
    other.commit()
    third = adapter.change_token().value
    assert third != second
    copy = pickle.loads(pickle.dumps(adapter))
    assert copy.change_token().value is not None
    writer.close()
    other.close()


def test_a_sqlite_file_replaced_under_its_name_gives_another_token(tmp_path):
    path, spare = tmp_path / "source.db", tmp_path / "spare.db"
    _file(path, "delete").close()
    _file(spare, "delete").close()
    adapter = SqliteAdapter(f"sqlite:///{path}", statement_timeout_s=5)
    first = adapter.change_token().value
    os.replace(spare, path)
    second = adapter.change_token().value
    assert second not in (None, first) and adapter.change_token().value == second


def test_a_site_query_over_a_view_has_no_token(tmp_path):
    path = tmp_path / "source.db"
    _file(path, "delete").close()
    adapter = SqliteAdapter(f"sqlite:///{path}", statement_timeout_s=5)
    exposed = {t.name: t for t in adapter.describe()}
    over_view = validate_site_query("SELECT v.id, v.v FROM v v", ["id"], exposed, "sqlite", adapter.key_order)
    out = read_token(adapter, "a1", over_view, exposed, None)
    assert out.change_token is None and "view" in out.reason and not out.unchanged
    over_table = validate_site_query("SELECT t.id, t.v FROM t t", ["id"], exposed, "sqlite", adapter.key_order)
    out = read_token(adapter, "a1", over_table, exposed, None)
    assert out.change_token.startswith("a1/sqlite/") and not out.unchanged
    assert read_token(adapter, "a1", over_table, exposed, out.change_token).unchanged
    assert not read_token(adapter, "a2", over_table, exposed, out.change_token).unchanged  # another agent instance


def test_a_postgres_token_changes_when_a_transaction_ends(postgres):
    with psycopg.connect(postgres.owner_url, autocommit=True) as c:
        c.execute("CREATE TABLE tokened (id integer PRIMARY KEY, v integer)")
    adapter = PostgresAdapter(postgres.reader_url, statement_timeout_s=30)  # the SELECT-only role reads it
    first = adapter.change_token().value
    assert first is not None and first.startswith("pg/") and adapter.change_token().value == first
    with psycopg.connect(postgres.owner_url) as running:
        running.execute("INSERT INTO tokened VALUES (1, 1)")
        running.execute("SAVEPOINT s")
        running.execute("INSERT INTO tokened VALUES (2, 2)")
        assert adapter.change_token().value == first  # running: nothing another reader sees changed
        running.commit()
    second = adapter.change_token().value
    assert second != first
    with psycopg.connect(postgres.owner_url) as aborted:
        aborted.execute("INSERT INTO tokened VALUES (3, 3)")
        aborted.rollback()
    assert adapter.change_token().value not in (first, second)  # an end, though nothing became visible
