"""A statement the database refuses reads as SourceRefused (code source_error), on each engine's
own server; a timeout stays SourceUnavailable, worth a retry."""

from __future__ import annotations

import pickle
import sqlite3

import pytest

from remote_agent.adapters.mysql import MysqlAdapter
from remote_agent.adapters.sqlite import SqliteAdapter
from remote_agent.errors import SourceDenied, SourceRefused, SourceUnavailable
from tests.support.mariadb_legacy import Owner


def test_mariadb_refusals(mariadb):
    with Owner(mariadb.owner_url) as c:
        c.execute("CREATE TABLE places (id INT PRIMARY KEY, at POINT NOT NULL, label TEXT)")
        c.execute("INSERT INTO places VALUES (1, POINT(1, 2), 'one')")
    adapter = MysqlAdapter(mariadb.reader_url, statement_timeout_s=0.5)
    with adapter.read() as reader, pytest.raises(SourceRefused) as refused:
        list(reader.stream("SELECT CAST(at AS CHAR) FROM places"))  # 4078: a point has no text cast
    assert refused.value.status == 424 and refused.value.code == "source_error"
    assert "cast_as_char" in refused.value.source_message and "MySQL/MariaDB refused the read" in refused.value.message
    with adapter.read() as reader, pytest.raises(SourceDenied):
        list(reader.stream("SELECT user FROM mysql.user"))
    with adapter.read() as reader, pytest.raises(SourceUnavailable, match="statement timeout"):
        list(reader.stream("SELECT SLEEP(3)"))
    with adapter.read() as reader:  # the session is still usable after a refusal
        assert list(reader.stream("SELECT label FROM places")) == [[("one",)]]


def test_sqlite_refusal_names_the_table_once_located(tmp_path):
    path = tmp_path / "s.db"
    with sqlite3.connect(path) as c:
        c.execute("CREATE TABLE t (id INTEGER PRIMARY KEY)")
    adapter = SqliteAdapter(f"sqlite:///{path}", statement_timeout_s=5)
    with adapter.read() as reader, pytest.raises(SourceRefused) as refused:
        list(reader.stream("SELECT nope FROM t"))
    exc = refused.value.located(("t",))
    assert exc.message == "SQLite refused the read of table 't': no such column: nope"
    assert exc.fields() == {
        "code": "source_error",
        "table": "t",
        "column": None,
        "source_message": "no such column: nope",
    }
    again = pickle.loads(pickle.dumps(exc))  # as a reader process sends it (readahead.py)
    assert (type(again), again.message, again.fields()) == (SourceRefused, exc.message, exc.fields())
