"""Source data that breaks the view's assumptions: the sync fails, names it, applies nothing.

Between two syncs the legacy table is rebuilt with the fault in it (SQLite cannot drop a
constraint or change a column's type in place, so the table is recreated, as a legacy
application's migration would). Each time the sync fails with an error that names the
table, the key or column, and an example row; the view keeps its rows and its version; and
once the data is fixed the next sync is exact, with the changes made meanwhile.
"""

from __future__ import annotations

import sqlite3

import psycopg
import pytest

from tests.support.oracle import check_sync, keyed
from tests.support.people import KEY, VIEW_SQL, People
from workloads.harness import start_agent

pytestmark = pytest.mark.integration

GOOD_DDL = "id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT, score INTEGER NOT NULL"
COLUMNS = "id, name, city, score"


def recreate(db, ddl: str, select: str = COLUMNS, extra: list[tuple] = ()) -> None:
    """Rebuild table people with columns `ddl` from `select` over the old one, plus rows `extra`."""
    with sqlite3.connect(db) as c:
        c.execute(f"CREATE TABLE people_new ({ddl})")
        c.execute(f"INSERT INTO people_new SELECT {select} FROM people")
        if extra:
            c.executemany(f"INSERT INTO people_new VALUES ({', '.join('?' * len(extra[0]))})", extra)
        c.execute("DROP TABLE people")
        c.execute("ALTER TABLE people_new RENAME TO people")


def existing_id(db) -> int:
    """A stored row of the view, with an id distinctive enough to look for in a message."""
    with sqlite3.connect(db) as c:
        return c.execute("SELECT min(id) FROM people WHERE score >= 0 AND id >= 1234").fetchone()[0]


# name -> (break the table, words the error must hold, repair the table)
SCENARIOS = {
    "duplicate key of a new row": (
        lambda db: recreate(
            db,
            "id INTEGER, name TEXT NOT NULL, city TEXT, score INTEGER NOT NULL",
            extra=[(900_001, "twin one", "Oslo", 5), (900_001, "twin two", "Oslo", 6)],
        ),
        ["people", "id", "900001", "twin", "not unique"],
        lambda db: _repair(db, "DELETE FROM people WHERE id = 900001"),
    ),
    "duplicate key of a stored row": (
        lambda db: recreate(
            db,
            "id INTEGER, name TEXT NOT NULL, city TEXT, score INTEGER NOT NULL",
            extra=[(existing_id(db), "second copy", "Oslo", 7)],
        ),
        ["people", "id", "not unique", "{id}"],
        lambda db: _repair(db, "DELETE FROM people WHERE name = 'second copy'"),
    ),
    "NULL key": (
        lambda db: recreate(
            db,
            "id INTEGER, name TEXT NOT NULL, city TEXT, score INTEGER NOT NULL",
            extra=[(None, "nameless key", "Oslo", 8)],
        ),
        ["people", "id", "NULL", "nameless key"],
        lambda db: _repair(db, "DELETE FROM people WHERE id IS NULL"),
    ),
    "column type changed": (
        lambda db: recreate(
            db,
            "id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT, score TEXT NOT NULL",
            "id, name, city, 'S' || score",
        ),
        ["people", "score", "int", "text"],
        lambda db: recreate(db, GOOD_DDL, "id, name, city, CAST(substr(score, 2) AS INTEGER)"),
    ),
    "value of another type": (
        lambda db: _repair(db, f"UPDATE people SET score = 'n/a' WHERE id = {existing_id(db)}", keep_schema=True),
        ["people", "score", "n/a", "{id}"],
        lambda db: _repair(db, "UPDATE people SET score = 1 WHERE score = 'n/a'", keep_schema=True),
    ),
    "column vanished": (
        lambda db: recreate(
            db, "id INTEGER PRIMARY KEY, name TEXT NOT NULL, score INTEGER NOT NULL", "id, name, score"
        ),
        ["people", "city", "schema", "PUT"],
        lambda db: recreate(db, GOOD_DDL, "id, name, NULL, score"),
    ),
}


def _repair(db, statement: str, keep_schema: bool = False) -> None:
    with sqlite3.connect(db) as c:
        c.execute(statement)
    if not keep_schema:
        recreate(db, GOOD_DDL)


@pytest.fixture(scope="module")
def legacy(api, tmp_path_factory, logs_dir):
    people = People(tmp_path_factory.mktemp("source_data") / "people.db", rows=2_000)
    agent = start_agent(f"sqlite:///{people.path}", logs_dir)
    api.add_source("sd", agent.url)
    api.add_view("sd_v", VIEW_SQL.format(source="sd"))
    sync = api.sync("sd_v")
    check_sync(api, "sd_v", KEY, {}, people.truth(), sync)
    yield people
    agent.stop()


def fails_and_applies_nothing(api, view: str, key: list[str], words: list[str]) -> dict:
    """Sync `view`, expect a failure whose error holds `words`; the view must be unchanged."""
    rows = keyed(api.rows(view), key)
    last = api.http.get(f"/v1/views/{view}/syncs").json()[0]
    assert last["status"] == "succeeded"
    sync = api.sync(view)
    assert sync["status"] == "failed", sync
    for word in words:
        assert word.lower() in sync["error"].lower(), f"{word!r} not in the error: {sync['error']}"
    assert keyed(api.rows(view), key) == rows
    # the version is unchanged: the last succeeded sync is still the one before
    assert [s["id"] for s in api.http.get(f"/v1/views/{view}/syncs").json() if s["status"] == "succeeded"][0] == last[
        "id"
    ]
    assert api.http.get(f"/v1/views/{view}/syncs/{sync['id']}/delta").status_code == 409
    return sync


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_broken_source_data_fails_the_sync_and_applies_nothing(api, legacy, scenario):
    people = legacy
    breaks, words, repair = SCENARIOS[scenario]
    people.change(updates=40, inserts=20, deletes=10)  # real changes that must wait for the repair
    words = [w.format(id=existing_id(people.path)) for w in words]
    breaks(people.path)
    try:
        fails_and_applies_nothing(api, "sd_v", KEY, words)
    finally:
        repair(people.path)
    before = keyed(api.rows("sd_v"), KEY)
    sync = api.sync("sd_v")
    check_sync(api, "sd_v", KEY, before, people.truth(), sync)


def test_duplicate_key_and_changed_type_on_postgres(api, postgres, logs_dir):
    server = postgres
    agent = None
    try:
        with psycopg.connect(server.owner_url, autocommit=True) as c:
            c.execute("CREATE TABLE members (id bigint PRIMARY KEY, name text NOT NULL)")
            c.execute("INSERT INTO members SELECT g, 'member ' || g FROM generate_series(1, 500) g")
            c.execute("GRANT SELECT ON members TO reader")
        agent = start_agent(server.reader_url, logs_dir)
        api.add_source("pgdup", agent.url)
        api.add_view("pgdup_v", "SELECT m.id, m.name FROM pgdup.members m")
        assert api.sync("pgdup_v")["status"] == "succeeded"
        with psycopg.connect(server.owner_url, autocommit=True) as c:
            c.execute("ALTER TABLE members DROP CONSTRAINT members_pkey")
            c.execute("UPDATE members SET name = 'changed' WHERE id = 3")
            c.execute("INSERT INTO members VALUES (42, 'the other 42'), (501, 'new')")
        fails_and_applies_nothing(api, "pgdup_v", ["id"], ["members", "id", "42", "not unique"])
        with psycopg.connect(server.owner_url, autocommit=True) as c:
            c.execute("DELETE FROM members WHERE name = 'the other 42'")
        before = keyed(api.rows("pgdup_v"), ["id"])
        truth = {(i,): {"id": i, "name": "changed" if i == 3 else f"member {i}"} for i in range(1, 501)}
        truth[(501,)] = {"id": 501, "name": "new"}
        check_sync(api, "pgdup_v", ["id"], before, truth, api.sync("pgdup_v"))

        with psycopg.connect(server.owner_url, autocommit=True) as c:
            c.execute("ALTER TABLE members ALTER COLUMN name TYPE bytea USING convert_to(name, 'UTF8')")
        fails_and_applies_nothing(api, "pgdup_v", ["id"], ["members", "name", "bytes", "text", "PUT /v1/views/pgdup_v"])
        with psycopg.connect(server.owner_url, autocommit=True) as c:
            c.execute("ALTER TABLE members ALTER COLUMN name TYPE text USING convert_from(name, 'UTF8')")
            c.execute("UPDATE members SET name = 'changed again' WHERE id = 4")
        before = keyed(api.rows("pgdup_v"), ["id"])
        truth[(4,)] = {"id": 4, "name": "changed again"}
        check_sync(api, "pgdup_v", ["id"], before, truth, api.sync("pgdup_v"))
    finally:
        if agent is not None:
            agent.stop()


def test_a_read_the_database_refuses_fails_once_with_source_error(api, postgres, logs_dir):
    """A row-level security policy whose check raises for a row: the database refuses every read
    that reaches the row. The sync ends failed with source_error, says which table, what the
    database said and the way out, is not retried, and the next sync after the repair is exact."""
    server = postgres
    agent = None
    try:
        with psycopg.connect(server.owner_url, autocommit=True) as c:
            c.execute("CREATE TABLE ledger (id bigint PRIMARY KEY, note text NOT NULL)")
            c.execute("INSERT INTO ledger SELECT g, 'entry ' || g FROM generate_series(1, 300) g")
            c.execute(
                "CREATE FUNCTION ledger_readable(note text) RETURNS boolean LANGUAGE plpgsql AS $$ BEGIN "
                "IF note = 'sealed' THEN RAISE EXCEPTION 'ledger entry sealed by its auditor'; END IF; "
                "RETURN true; END $$"
            )
            c.execute("ALTER TABLE ledger ENABLE ROW LEVEL SECURITY")
            c.execute("CREATE POLICY reads ON ledger FOR SELECT USING (ledger_readable(note))")
            c.execute("GRANT SELECT ON ledger TO reader")
        agent = start_agent(server.reader_url, logs_dir)
        api.add_source("pgrefuses", agent.url)
        api.add_view("pgrefuses_v", "SELECT l.id, l.note FROM pgrefuses.ledger l")
        assert api.sync("pgrefuses_v")["status"] == "succeeded"
        with psycopg.connect(server.owner_url, autocommit=True) as c:
            c.execute("UPDATE ledger SET note = 'sealed' WHERE id = 7")
            c.execute("UPDATE ledger SET note = 'changed' WHERE id = 8")
        sync = fails_and_applies_nothing(
            api, "pgrefuses_v", ["id"], ["'ledger'", "sealed by its auditor", "exclude_columns", "column_types"]
        )
        assert sync["error_code"] == "source_error", sync
        assert sync["metrics"]["retries"] == 0 and len(sync["metrics"]["attempts"]) == 1, sync["metrics"]
        with psycopg.connect(server.owner_url, autocommit=True) as c:
            c.execute("UPDATE ledger SET note = 'unsealed' WHERE id = 7")
        before = keyed(api.rows("pgrefuses_v"), ["id"])
        truth = {(i,): {"id": i, "note": f"entry {i}"} for i in range(1, 301)}
        truth[(7,)], truth[(8,)] = {"id": 7, "note": "unsealed"}, {"id": 8, "note": "changed"}
        check_sync(api, "pgrefuses_v", ["id"], before, truth, api.sync("pgrefuses_v"))
    finally:
        if agent is not None:
            agent.stop()
