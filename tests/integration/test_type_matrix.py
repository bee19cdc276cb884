"""The type matrix (workloads/type_matrix.py), row by row, through real sources and the session's service.

Per engine, one table holds a column per delivered row of the matrix and a row per edge
value (table row k holds the column's edge k modulo its count), read by a table view
published to a Delta table and to a PostgreSQL table. The load is checked, then every
table row moves on to the next edge value of each column and a second sync is checked:
its delta holds exactly one update per table row (no delete and insert), naming the
columns whose value changed. In both rounds the view's rows, the sync's delta, the
change feed, the Delta table (read with deltalake) and the PostgreSQL table hold what
the matrix says, compared column by column so a failure names its row of the matrix.

A refused row has a table and a view of its own whose load must fail, naming its column,
key and value.
The set-up runs once per engine, at the first test of that engine.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
from deltalake import DeltaTable

from service.jsonvalues import to_json_value
from tests.support.sources import database_name
from workloads import mariadb as mariadb_tools
from workloads.harness import Api, start_agent
from workloads.postgres import ensure_postgis
from workloads.published import METADATA, view_rows, wait_published
from workloads.type_matrix import MARIADB_SESSION, ROWS, Row

pytestmark = pytest.mark.integration

KEY = "k"
#: Seconds a destination is given to apply a sync.
CATCH_UP_S = 90


@dataclass
class Round:
    """What one sync left in the five places, each as {key: {column: JSON value}}."""

    sync: dict
    rows: dict[int, dict]
    delta: list[dict]
    delta_table: dict[int, dict]
    destination: dict[int, dict]
    feed: list[dict] = field(default_factory=list)


@dataclass
class Table:
    """One matrix table of an engine: its rows of the matrix and its two rounds (or the failure)."""

    rows: tuple[Row, ...]
    size: int
    rounds: list[Round] = field(default_factory=list)
    error: str | None = None


@dataclass
class EngineRun:
    delivered: Table
    refused: dict[str, dict]  # family -> the failed sync


def _value(row: Row, k: int, turn: int) -> Any:
    return row.edges[(k + turn) % len(row.edges)]


class Source:
    """The legacy database of one engine, written through its owner's connection."""

    def __init__(self, engine: str, request: pytest.FixtureRequest, tmp: Path):
        self.engine = engine
        if engine == "sqlite":
            path = tmp / "matrix.db"
            self.conn: Any = sqlite3.connect(path, isolation_level=None)
            self.reader_url = f"sqlite:///{path}"
        elif engine == "postgres":
            database = request.getfixturevalue("postgres_server").create_database(
                database_name(f"type_matrix_{engine}")
            )
            self.conn = psycopg.connect(database.owner_url, autocommit=True)
            self.reader_url = database.reader_url
        else:
            database = request.getfixturevalue("mariadb_server").create_database(database_name(f"type_matrix_{engine}"))
            self.conn = mariadb_tools.connect(database.owner_url)
            self.reader_url = database.reader_url
            for statement in MARIADB_SESSION:
                self.run(statement)

    def run(self, statement: str) -> None:
        cursor = self.conn.cursor()
        cursor.execute(statement)
        cursor.close()

    def create(self, table: str, rows: tuple[Row, ...], size: int) -> None:
        columns = ", ".join(f"{row.column} {row.declared}" for row in rows)
        self.run(f"CREATE TABLE {table} ({KEY} integer PRIMARY KEY{', ' if rows else ''}{columns})")
        for k in range(size):
            names = "".join(f", {row.column}" for row in rows)
            values = "".join(f", {_value(row, k, 0).sql}" for row in rows)
            self.run(f"INSERT INTO {table} ({KEY}{names}) VALUES ({k}{values})")

    def turn(self, table: str, rows: tuple[Row, ...], size: int) -> None:
        for k in range(size):
            assignments = ", ".join(f"{row.column} = {_value(row, k, 1).sql}" for row in rows)
            self.run(f"UPDATE {table} SET {assignments} WHERE {KEY} = {k}")

    def close(self) -> None:
        self.conn.close()


def _keyed(lines: list[dict]) -> dict[int, dict]:
    return {line[KEY]: line for line in lines}


def _as_json(record: dict) -> dict:
    return {name: to_json_value(value) for name, value in record.items()}


def _published(api: Api, view: str, sync_id: str) -> None:
    """Wait until both destinations of `view` hold `sync_id`."""
    wait_published(api, view, sync_id, CATCH_UP_S)


class Warehouse:
    """The session's service and the PostgreSQL database the views are published to."""

    def __init__(self, api: Api, destination_url: str):
        self.api = api
        self.destination_url = destination_url
        self.dest = psycopg.connect(destination_url, autocommit=True, options="-c TimeZone=UTC")
        self.dest.execute("CREATE SCHEMA IF NOT EXISTS matrix")

    def add_view(self, name: str, table: str) -> None:
        destinations = [
            {"kind": "delta"},
            {"kind": "postgres", "url": self.destination_url, "table": f"matrix.{name}"},
        ]
        r = self.api.http.post("/v1/views", json={"name": name, "table": table, "destinations": destinations})
        assert r.status_code == 201, r.text

    def round(self, view: str, after: str | None) -> Round:
        sync = self.api.sync(view)
        if sync["status"] != "succeeded":
            return Round(sync, {}, [], {}, {})
        _published(self.api, view, sync["id"])
        uri = next(d["uri"] for d in self.api.http.get(f"/v1/views/{view}").json()["destinations"] if d.get("uri"))
        delta_table = [_as_json(r) for r in view_rows(DeltaTable(uri)).to_pylist()]
        with self.dest.cursor(row_factory=psycopg.rows.dict_row) as cursor:
            cursor.execute(f'SELECT * FROM matrix."{view}"')
            destination = [_as_json({k: v for k, v in r.items() if k not in METADATA}) for r in cursor.fetchall()]
        return Round(
            sync,
            _keyed(self.api.rows(view)),
            self.api.delta(view, sync["id"]),
            _keyed(delta_table),
            _keyed(destination),
            self.api.ndjson(f"/v1/views/{view}/changes?after={after}") if after else [],
        )

    def run(self, source: Source, source_name: str, name: str, table: Table) -> None:
        """Create table `name` at the source with `table`'s rows, load a view of it, turn, sync again."""
        view = f"{source_name}_{name}"
        if not table.rows:
            return
        source.create(name, table.rows, table.size)
        self.add_view(view, f"{source_name}.{name}")
        first = self.round(view, None)
        table.rounds.append(first)
        if first.sync["status"] != "succeeded":
            table.error = first.sync["error"]
            return
        source.turn(name, table.rows, table.size)
        table.rounds.append(self.round(view, first.sync["id"]))
        if table.rounds[1].sync["status"] != "succeeded":
            table.error = table.rounds[1].sync["error"]


def _size(rows: tuple[Row, ...]) -> int:
    return max((len(row.edges) for row in rows), default=0)


@pytest.fixture(scope="module")
def warehouse(api, postgres) -> Warehouse:
    api.wait_idle()
    wh = Warehouse(api, postgres.owner_url)
    yield wh
    wh.dest.close()


@pytest.fixture(scope="module")
def engines(request, warehouse, logs_dir, tmp_path_factory):
    """Each engine's run, made at the first test of that engine."""
    runs: dict[str, EngineRun] = {}
    failed: dict[str, str] = {}
    agents = []

    def run(engine: str) -> EngineRun:
        if engine in failed:  # set up once: a failed set-up fails the engine's other rows without a retry
            pytest.fail(f"the {engine} set-up failed: {failed[engine]}")
        if engine not in runs:
            try:
                runs[engine] = make(engine)
            except BaseException as exc:
                failed[engine] = f"{type(exc).__name__}: {exc}"
                raise
        return runs[engine]

    def make(engine: str) -> EngineRun:
        source = Source(engine, request, tmp_path_factory.mktemp(f"matrix_{engine}"))
        rows = tuple(row for row in ROWS if row.engine == engine)
        if engine == "postgres":  # the geometry row is tested wherever PostgreSQL is
            ensure_postgis()
        for statement in dict.fromkeys(s for row in rows for s in row.setup):
            source.run(statement)
        delivered = tuple(row for row in rows if not row.refused)
        refused = tuple(row for row in rows if row.refused)
        result = EngineRun(Table(delivered, _size(delivered)), {})
        for row in refused:
            source.create(f"refused_{row.family}", (row,), len(row.edges))
        agent = start_agent(source.reader_url, logs_dir)
        agents.append(agent)
        name = f"tm_{engine}"
        warehouse.api.add_source(name, agent.url)
        warehouse.run(source, name, "matrix", result.delivered)
        for row in refused:
            view = f"{name}_refused_{row.family}"
            warehouse.add_view(view, f"{name}.refused_{row.family}")
            result.refused[row.family] = warehouse.api.sync(view)
        source.close()
        return result

    yield run
    for agent in agents:
        agent.stop()


def _changed(rows: tuple[Row, ...], k: int) -> list[str]:
    return [row.column for row in rows if _value(row, k, 0).json != _value(row, k, 1).json]


def _check_delivered(row: Row, table: Table) -> None:
    assert table.error is None, f"the sync of the table holding {row.id} failed: {table.error}"
    column = row.column
    for turn, round_ in enumerate(table.rounds):
        want = {k: _value(row, k, turn).json for k in range(table.size)}
        where = "load" if turn == 0 else "second sync"
        assert {k: r[column] for k, r in round_.rows.items()} == want, f"{row.id}: the view's rows after the {where}"
        delta = {line["row"][KEY]: line for line in round_.delta}
        assert len(delta) == len(round_.delta) == table.size, f"{row.id}: one delta line a row ({where})"
        assert {line["op"] for line in round_.delta} == {"insert" if turn == 0 else "update"}, row.id
        assert {k: line["row"][column] for k, line in delta.items()} == want, f"{row.id}: the delta of the {where}"
        got = {k: r[column] for k, r in round_.delta_table.items()}
        assert got == want, f"{row.id}: the Delta table after the {where}"
        got = {k: r[column] for k, r in round_.destination.items()}
        assert got == want, f"{row.id}: the PostgreSQL destination after the {where}"
        if turn == 1:
            for k, line in delta.items():
                assert (column in line["changed"]) == (column in _changed(table.rows, k)), (
                    f"{row.id}: `changed` of key {k}: {line['changed']}"
                )
            feed = {line["row"][KEY]: line for line in round_.feed}
            assert {line["sync"] for line in round_.feed} == {round_.sync["id"]}, row.id
            assert {k: line["row"][column] for k, line in feed.items()} == want, f"{row.id}: the change feed"


def _check_refused(row: Row, sync: dict) -> None:
    assert sync["status"] == "failed", f"{row.id} was delivered, not refused: {sync}"
    error = sync["error"]
    assert row.edges[0].json in error, f"the error does not name the value: {error}"
    assert f"refused_{row.family}" in error, f"the error does not name the table: {error}"
    assert repr(row.column) in error, f"the error does not name the column: {error}"
    assert "'k': 0" in error, f"the error does not name the key: {error}"


@pytest.mark.parametrize("row", [pytest.param(row, id=row.id) for row in ROWS])
def test_type_matrix(row: Row, engines):
    run = engines(row.engine)
    if row.refused:
        _check_refused(row, run.refused[row.family])
    else:
        _check_delivered(row, run.delivered)
