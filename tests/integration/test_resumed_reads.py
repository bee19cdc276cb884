"""A load or full read whose agent is killed part way resumes after the rows received.

The agent reads a table of 150,000 rows, paced so that a read takes a few seconds, behind
a fault proxy. Once the service has filed a third of the rows (its sync record's
progress), the proxy holds the answer, the agent is killed (SIGKILL) and started again
on the same port, and the proxy cuts the held answer: the service sees its answer end
before the summary, as when the agent died with the link up. The sync's own retry asks
for the rows after the last key it kept, and the view must equal the source (the oracle)
with fewer rows read the second time than the table holds. Once on SQLite, once on
PostgreSQL; the key is (text, integer), so the text half is compared by the database's
own collation.
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Iterator
from contextlib import closing

import psycopg
import pytest

from tests.support.faultproxy import FaultProxy
from tests.support.oracle import check_sync, keyed
from tests.support.polling import until
from tests.support.sources import database_name
from workloads.harness import Api, start_agent

pytestmark = pytest.mark.integration

#: Six of the agent's default chunks (10,000 rows): the kill lands after the second.
ROWS = 60_000
#: The agent's pace: a whole read takes about ROWS / this seconds, room to act mid-read.
ROWS_PER_S = 20_000
KEY = ["region", "id"]
REGIONS = ["north", "North", "süd", "東", "", "ouest"]
VIEW_SQL = "SELECT p.region, p.id, p.name, p.score FROM {source}.people p"
TABLE = "CREATE TABLE people (region TEXT NOT NULL, id INTEGER NOT NULL, name TEXT, score INTEGER, PRIMARY KEY (region, id))"


class Legacy:
    """The table at the source, written through its owner's connection, and the truth."""

    def __init__(self, engine: str, connect, reader_url: str, mark: str):
        self.engine, self.connect, self.reader_url, self.mark = engine, connect, reader_url, mark
        self.rng = random.Random(39)
        self.next_id = ROWS
        with closing(self.connect()) as c:
            c.execute(TABLE)
            rows = [self._row(i) for i in range(ROWS)]
            if engine == "postgres":
                with c.cursor().copy("COPY people FROM STDIN") as copy:
                    for row in rows:
                        copy.write_row(row)
            else:
                c.executemany(self._sql("INSERT INTO people VALUES (?, ?, ?, ?)"), rows)
            c.commit()

    def _sql(self, sql: str) -> str:
        return sql.replace("?", self.mark)

    def _row(self, i: int) -> tuple:
        return (REGIONS[i % len(REGIONS)], i, f"person {i} {self.rng.random():.6f}", self.rng.randrange(1000))

    def change(self) -> None:
        """Updates, deletes and inserts spread over the whole key range."""
        with closing(self.connect()) as c:
            keys = [tuple(r) for r in c.execute("SELECT region, id FROM people").fetchall()]
            for region, i in self.rng.sample(keys, 300):
                c.execute(
                    self._sql("UPDATE people SET name = ?, score = ? WHERE region = ? AND id = ?"),
                    (f"new {i}", -1, region, i),
                )
            for region, i in self.rng.sample(keys, 300):
                c.execute(self._sql("DELETE FROM people WHERE region = ? AND id = ?"), (region, i))
            for _ in range(100):
                c.execute(self._sql("INSERT INTO people VALUES (?, ?, ?, ?)"), self._row(self.next_id))
                self.next_id += 1
            c.commit()

    def truth(self) -> dict:
        with closing(self.connect()) as c:
            rows = c.execute("SELECT region, id, name, score FROM people").fetchall()
        return {(r[0], r[1]): dict(zip(["region", "id", "name", "score"], r)) for r in rows}


def _legacy(engine: str, request, tmp_path_factory) -> Legacy:
    if engine == "postgres":
        database = request.getfixturevalue("postgres_server").create_database(database_name(f"resumed_{engine}"))
        return Legacy(engine, lambda: psycopg.connect(database.owner_url), database.reader_url, "%s")
    path = tmp_path_factory.mktemp("resumed") / "legacy.db"
    return Legacy(engine, lambda: sqlite3.connect(path), f"sqlite:///{path}", "?")


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def setup(request, tmp_path_factory, logs_dir, service) -> Iterator[dict]:
    """The engine's table, its paced agent behind a fault proxy, a source and a full_ship view on it."""
    engine = request.param
    legacy = _legacy(engine, request, tmp_path_factory)
    env = {"AGENT_MAX_ROWS_PER_S": str(ROWS_PER_S)}
    agent = start_agent(legacy.reader_url, logs_dir, env=env)
    proxy = FaultProxy("127.0.0.1", agent.port)
    api = Api(service.url)
    source, view = f"resumed_{engine}", f"resumed_{engine}"
    api.add_source(source, proxy.url)
    # full_ship: after the load, every sync is a full read as well (a deleted key is one it did not read)
    api.add_view(view, VIEW_SQL.format(source=source), strategy="full_ship")
    state = {
        "legacy": legacy,
        "agent": agent,
        "env": env,
        "proxy": proxy,
        "api": api,
        "view": view,
        "logs_dir": logs_dir,
    }
    yield state
    api.close()
    proxy.close()
    state["agent"].stop()


def _sync_killed_mid_read(setup, at_rows: int) -> dict:
    """Run a sync; once it has received `at_rows` rows, kill the agent, start it again and cut the link."""
    api, proxy, view = setup["api"], setup["proxy"], setup["view"]
    queued = api.http.post(f"/v1/views/{view}/syncs").json()
    record = f"/v1/views/{view}/syncs/{queued['id']}"

    def received() -> bool:
        progress = api.http.get(record).json().get("progress") or {}
        return progress.get("rows_received", 0) >= at_rows

    until(f"the sync received {at_rows} rows", received, within_s=120, every_s=0.05)
    proxy.hold()  # not a byte more reaches the service
    port = setup["agent"].port
    setup["agent"].kill()
    setup["agent"] = start_agent(setup["legacy"].reader_url, setup["logs_dir"], port=port, env=setup["env"])
    proxy.cut()
    return until("the sync ended", lambda: _finished(api.http.get(record).json()), within_s=300, every_s=0.2)


def _finished(record: dict) -> dict | None:
    return record if record["status"] in ("succeeded", "failed") else None


def _check_resumed(sync: dict, rows: int) -> dict:
    """The sync retried once, resumed after the rows its first attempt kept, and counted both attempts' bytes."""
    m = sync["metrics"]
    assert m["retries"] == 1, m["attempts"]
    [failed] = m["attempts"]
    assert "ended before its summary" in failed["error"] or "unreachable" in failed["error"], failed
    kept = m["resumed_from_rows"]
    assert ROWS // 3 <= kept < rows, (kept, rows)
    assert m["rows_received"] <= rows - ROWS // 3, m["rows_received"]  # the retry read only the rest
    assert m["bytes_from_agent"] >= failed["bytes_from_agent"] + m["sites"][0]["bytes_from_agent"]
    return m


def test_a_load_whose_agent_is_killed_resumes_and_is_exact(setup):
    api, legacy, view = setup["api"], setup["legacy"], setup["view"]
    sync = _sync_killed_mid_read(setup, ROWS // 3)
    check_sync(api, view, KEY, {}, legacy.truth(), sync)
    m = _check_resumed(sync, ROWS)
    assert m["resumed_from_rows"] + m["rows_received"] == ROWS  # nothing read twice, nothing missed


def test_a_full_read_whose_agent_is_killed_resumes_and_finds_the_deleted_keys(setup):
    """Deleted keys are those neither part returned: the kept part counts as read."""
    api, legacy, view = setup["api"], setup["legacy"], setup["view"]
    legacy.change()
    before = keyed(api.rows(view), KEY)
    truth = legacy.truth()
    sync = _sync_killed_mid_read(setup, ROWS // 3)
    check_sync(api, view, KEY, before, truth, sync)
    m = _check_resumed(sync, len(truth))
    assert m["resumed_from_rows"] + m["rows_received"] == len(truth)
    assert m["rows_deleted"] == 300
    # and the next sync, undisturbed, finds nothing to do
    again = api.sync(view)
    check_sync(api, view, KEY, truth, legacy.truth(), again)
    assert "resumed_from_rows" not in again["metrics"] and again["metrics"]["retries"] == 0
