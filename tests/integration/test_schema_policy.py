"""A view's schema policy on PostgreSQL: a column the view reads changes type at the source.

Three views over one table. Under `evolve` (the default), numeric(14,2) -> numeric(16,4) is
taken by the next sync: it succeeds, reads little (no reload: the stored rows are cast on the
warehouse's disk; strategies sketch and group_hash, whose tables and hashes of the old values
are built again locally: row_version, auto's choice on PostgreSQL, would read every row once,
as ALTER COLUMN TYPE rewrites them all at the source), the rows, their new type and the delta equal the oracle's, and the sync
record lists the change. numeric(10,4) -> double precision fails the sync with error_code
schema_changed and a message naming table, column and types, while the view keeps serving
its rows. Under `freeze`, the same widening fails the same way, until the policy is set to
evolve (PATCH), which is the way out the message names.

A widening sync killed before its commit leaves the old version and the old definition, and
the next sync takes the widening again; killed after the new version became current but
before the catalog heard of it, the restart records the sync and adopts its definition.
The module runs on the suite's special service (tests/support/special.py), which it may kill.
"""

from __future__ import annotations

import decimal
import random
import signal
import sqlite3

import psycopg
import pytest

from tests.support.oracle import check_sample, check_sync, keyed
from tests.support.special import SpecialService
from workloads.harness import start_agent

pytestmark = pytest.mark.integration

ROWS = 3000
SOURCE = "sp_shop"
COLUMNS = {"amount": ["id", "name", "amount"], "rate": ["id", "rate"], "credit": ["id", "credit"]}
#: The crash view's sample, cast with its rows.
SAMPLE = 50
#: Seconds a killed service is given to die once armed.
DIE_WITHIN_S = 300


def truth(url: str, columns: list[str]) -> dict:
    """The view's rows straight from the source, values as the API writes them (decimals as strings)."""
    with psycopg.connect(url, autocommit=True) as c:
        rows = c.execute(f"SELECT {', '.join(columns)} FROM accounts").fetchall()
    shown = lambda v: str(v) if isinstance(v, decimal.Decimal) else v  # noqa: E731
    return keyed(({k: shown(v) for k, v in zip(columns, row, strict=True)} for row in rows), ["id"])


@pytest.fixture(scope="module")
def shop(special_service: SpecialService, postgres, logs_dir):
    """The table, its agent and the views, loaded; the special service and the owner's URL."""
    rng = random.Random(3636)
    with psycopg.connect(postgres.owner_url, autocommit=True) as c:
        c.execute(
            "CREATE TABLE accounts (id integer PRIMARY KEY, name text, amount numeric(14,2), rate numeric(10,4), "
            "credit numeric(12,2))"
        )
        with c.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO accounts VALUES (%s, %s, %s, %s, %s)",
                [
                    (
                        i,
                        f"account {i}",
                        decimal.Decimal(rng.randrange(10**9)).scaleb(-2),
                        rng.randrange(10**6) / 10**4,
                        decimal.Decimal(rng.randrange(10**7)).scaleb(-2),
                    )
                    for i in range(1, ROWS + 1)
                ],
            )
    agent = start_agent(postgres.reader_url, logs_dir)
    api = special_service.api
    try:
        api.add_source(SOURCE, agent.url)
        table = f"{SOURCE}.accounts"
        views = {
            "sp_evolve": api.add_view("sp_evolve", f"SELECT a.id, a.name, a.amount FROM {table} a", strategy="sketch"),
            "sp_freeze": api.add_view(
                "sp_freeze",
                f"SELECT a.id, a.name, a.amount FROM {table} a",
                strategy="group_hash",
                on_schema_change="freeze",
            ),
            "sp_rate": api.add_view("sp_rate", f"SELECT a.id, a.rate FROM {table} a"),
            "sp_crash": api.add_view(
                "sp_crash", f"SELECT a.id, a.credit FROM {table} a", strategy="group_hash", sample_size=SAMPLE
            ),
        }
        assert views["sp_evolve"]["on_schema_change"] == "evolve" and views["sp_freeze"]["on_schema_change"] == "freeze"
        loads = {}
        for name in views:
            loads[name] = api.sync(name)
            column = {"sp_rate": "rate", "sp_crash": "credit"}.get(name, "amount")
            check_sync(api, name, ["id"], {}, truth(postgres.owner_url, COLUMNS[column]), loads[name])
        yield special_service, postgres.owner_url, loads
    finally:
        # leave the shared service as the next module expects it: running, nothing armed
        special_service.kill_file.unlink(missing_ok=True)
        if special_service.proc.proc.poll() is not None:
            special_service.restart()
        agent.stop()


def test_schema_changes_under_each_policy(shop):
    service, url, loads = shop
    api = service.api
    rate_before = truth(url, COLUMNS["rate"])
    with psycopg.connect(url, autocommit=True) as c:
        c.execute(
            "ALTER TABLE accounts ALTER COLUMN amount TYPE numeric(16,4), ALTER COLUMN rate TYPE double precision"
        )
    before = truth(url, COLUMNS["amount"])  # the stored rows, read at the new type
    with psycopg.connect(url, autocommit=True) as c:  # and a few changes, one with a digit the old type had no room for
        c.execute("UPDATE accounts SET amount = 1234567890.1234 WHERE id IN (7, 8)")
        c.execute("UPDATE accounts SET name = 'renamed' WHERE id = 9")
        c.execute("DELETE FROM accounts WHERE id = 10")
        c.execute("INSERT INTO accounts VALUES (5001, 'new', 0.0001, 1.5)")
    after = truth(url, COLUMNS["amount"])

    # evolve: the widening is taken in place, and the sync reads no more than the changes need
    widened = api.sync("sp_evolve")
    check_sync(api, "sp_evolve", ["id"], before, after, widened)
    m, load = widened["metrics"], loads["sp_evolve"]["metrics"]
    table = f"{SOURCE}.accounts"
    assert m["schema_changes"] == [
        {"table": table, "column": "amount", "old": "decimal(14,2)", "new": "decimal(16,4)", "action": "widened"},
        # the column it does not read is told too, and nothing is done about it
        {"table": table, "column": "rate", "old": "decimal(10,4)", "new": "float", "action": "none"},
    ], m
    # a third of the load's bytes: the sketch's digests are salted anew each exchange, and a
    # collision sends a row whole, so the exact figure moves a little from run to run
    assert m["bytes_from_agent"] < load["bytes_from_agent"] / 3, (m["bytes_from_agent"], load["bytes_from_agent"])
    assert m["rows_received"] < ROWS / 10, m
    # the change token's request, the refused request and the schema read that followed count with the sync's bytes
    assert [a["round_trips"] for a in m["attempts"]] == [3], m["attempts"]
    assert m["attempts"][0]["bytes_from_agent"] > 1000, m
    assert m["sketch_rebuilt"], m  # its table of the old values' hashes was left behind
    shown = api.http.get("/v1/views/sp_evolve").json()
    # the version the widening committed and the catalog hold one definition: no redefinition waits
    assert shown["column_types"]["amount"] == "decimal(16,4)" and shown["redefinition_pending"] is False, shown
    again = api.sync("sp_evolve")  # the view now is of the new type: nothing to change, nothing to tell
    check_sync(api, "sp_evolve", ["id"], after, after, again)
    assert "schema_changes" not in again["metrics"] and again["trigger"] == "api", again
    assert again["metrics"]["unchanged_by_token"] is True and again["metrics"]["rows_scanned"] == 0, again
    with psycopg.connect(url, autocommit=True) as c:  # a column it does not read added: told, nothing done
        c.execute("ALTER TABLE accounts ADD COLUMN memo text")
    noticed = api.sync("sp_evolve")
    check_sync(api, "sp_evolve", ["id"], after, after, noticed)
    added = {"table": table, "column": "memo", "old": None, "new": "text", "action": "none"}
    assert noticed["metrics"]["schema_changes"] == [added], noticed["metrics"]
    # what told it: a fingerprint in each answer, and, this once, the schema of the table read
    calls = [c["call"] for c in noticed["metrics"]["sites"][0]["calls"]]
    assert noticed["metrics"]["unchanged_by_token"] is False and calls.count("GET /v1/schema") == 1, calls

    # numeric -> double precision is no widening: the sync fails, the view keeps its rows
    refused = api.sync("sp_rate")
    assert (refused["status"], refused["error_code"]) == ("failed", "schema_changed"), refused
    for part in ("accounts", "column rate", "decimal(10,4)", "float", "PUT /v1/views/sp_rate", "restore the column"):
        assert part in refused["error"], (part, refused["error"])
    assert [c["action"] for c in refused["metrics"]["schema_changes"]] == ["refused"], refused["metrics"]
    assert keyed(api.rows("sp_rate"), ["id"]) == rate_before
    assert api.http.get("/v1/views/sp_rate").json()["column_types"]["rate"] == "decimal(10,4)"

    # freeze: even the widening fails, and the message names the way out this test then takes
    frozen = api.sync("sp_freeze")
    assert (frozen["status"], frozen["error_code"]) == ("failed", "schema_changed"), frozen
    assert '"on_schema_change": "evolve"' in frozen["error"] and "decimal(14,2)" in frozen["error"], frozen["error"]
    assert len(api.rows("sp_freeze")) == ROWS
    changed = api.http.patch("/v1/views/sp_freeze", json={"on_schema_change": "evolve"})
    assert changed.status_code == 200 and changed.json()["on_schema_change"] == "evolve", changed.text
    thawed = api.sync("sp_freeze")
    check_sync(api, "sp_freeze", ["id"], before, after, thawed)
    assert [c["action"] for c in thawed["metrics"]["schema_changes"]] == ["widened", "none", "none"]

    # a column the view reads dropped: no longer bound, the same failure, the rows still served
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("ALTER TABLE accounts DROP COLUMN rate")
    dropped = api.sync("sp_rate")
    assert (dropped["status"], dropped["error_code"]) == ("failed", "schema_changed"), dropped
    gone = {"table": f"{SOURCE}.accounts", "column": "rate", "old": "decimal(10,4)", "new": None, "action": "refused"}
    assert dropped["metrics"]["schema_changes"] == [gone], dropped["metrics"]
    assert "column rate: gone" in dropped["error"] and "PUT /v1/views/sp_rate" in dropped["error"], dropped["error"]
    assert keyed(api.rows("sp_rate"), ["id"]) == rate_before


def _killed_sync(service: SpecialService, view: str, point: str) -> str:
    """Start a sync of `view` with the service armed to die at `point`, and start the service
    again once it died there; the sync's id."""
    service.kill_file.write_text(point)
    r = service.api.http.post(f"/v1/views/{view}/syncs")
    assert r.status_code == 202, r.text
    service.proc.proc.wait(timeout=DIE_WITHIN_S)
    assert service.proc.proc.returncode == -signal.SIGKILL, f"the service did not die at {point}: {service.proc.tail()}"
    service.restart()
    return r.json()["id"]


def test_a_widening_sync_killed_leaves_the_old_view_or_the_new_one_with_its_definition(shop):
    service, url, _ = shop
    before = keyed(service.api.rows("sp_crash"), ["id"])  # as loaded (the other test changed rows since)
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("ALTER TABLE accounts ALTER COLUMN credit TYPE numeric(14,3)")
        c.execute("UPDATE accounts SET credit = 99999999999.999 WHERE id IN (11, 12)")
    after = truth(url, COLUMNS["credit"])
    column_type = lambda: service.api.http.get("/v1/views/sp_crash").json()["column_types"]["credit"]  # noqa: E731

    # killed with the widened fragments staged: the old version, the old definition
    killed = _killed_sync(service, "sp_crash", "fragments_written")
    record = service.api.http.get(f"/v1/views/sp_crash/syncs/{killed}").json()
    assert record["status"] == "failed" and "interrupted" in record["error"], record
    assert keyed(service.api.rows("sp_crash"), ["id"]) == before
    assert column_type() == "decimal(12,2)"
    staging = service.data_dir / "views" / "sp_crash" / "staging"
    assert not staging.exists() or not any(staging.iterdir()), list(staging.iterdir())

    # killed once the new version is current, before the catalog was told: the restart adopts both
    committed = _killed_sync(service, "sp_crash", "after_visible")
    record = service.api.http.get(f"/v1/views/sp_crash/syncs/{committed}").json()
    assert record["status"] == "succeeded", record
    taken = [c for c in record["metrics"]["schema_changes"] if c["action"] != "none"]
    assert [(c["column"], c["action"]) for c in taken] == [("credit", "widened")], record["metrics"]
    assert column_type() == "decimal(14,3)"
    assert service.api.http.get("/v1/views/sp_crash").json()["redefinition_pending"] is False
    assert keyed(service.api.rows("sp_crash"), ["id"]) == after
    check_sample(service.api, "sp_crash", ["id"], after, SAMPLE)

    with psycopg.connect(url, autocommit=True) as c:
        c.execute("UPDATE accounts SET credit = 0.001 WHERE id = 13")
    latest = truth(url, COLUMNS["credit"])
    sync = service.api.sync("sp_crash")
    check_sync(service.api, "sp_crash", ["id"], after, latest, sync)
    assert "schema_changes" not in sync["metrics"] and sync["trigger"] == "api", sync


def test_a_widening_on_sqlite_is_taken_in_place(shop, tmp_path, logs_dir):
    """SQLite has no ALTER COLUMN: the table is rebuilt with the wider declared type, as its tools do."""
    service = shop[0]
    api = service.api
    db = tmp_path / "ledger.db"
    with sqlite3.connect(db) as c:
        c.execute("CREATE TABLE ledger (id INTEGER PRIMARY KEY, amount DECIMAL(10,2))")
        c.executemany(
            "INSERT INTO ledger VALUES (?, ?)", [(i, f"{i * 37 % 10_000}.{i % 100:02d}") for i in range(1, 501)]
        )
    agent = start_agent(f"sqlite:///{db}", logs_dir)
    try:
        api.add_source("sp_ledger", agent.url)
        api.add_view("sp_sqlite", "SELECT l.id, l.amount FROM sp_ledger.ledger l", strategy="group_hash")
        assert api.sync("sp_sqlite")["status"] == "succeeded"
        loaded = keyed(api.rows("sp_sqlite"), ["id"])
        with sqlite3.connect(db) as c:
            c.executescript(
                "CREATE TABLE wider (id INTEGER PRIMARY KEY, amount DECIMAL(12,3));"
                "INSERT INTO wider SELECT id, amount FROM ledger; DROP TABLE ledger;"
                "ALTER TABLE wider RENAME TO ledger; UPDATE ledger SET amount = 123456789.125 WHERE id = 3;"
            )
        widened = api.sync("sp_sqlite")
        assert widened["status"] == "succeeded", widened["error"]
        change = {"table": "sp_ledger.ledger", "column": "amount", "old": "decimal(10,2)", "new": "decimal(12,3)"}
        assert widened["metrics"]["schema_changes"] == [{**change, "action": "widened"}], widened["metrics"]
        expected = {
            k: {**row, "amount": str(decimal.Decimal(row["amount"]).quantize(decimal.Decimal("0.001")))}
            for k, row in loaded.items()
        }
        expected[(3,)]["amount"] = "123456789.125"
        assert keyed(api.rows("sp_sqlite"), ["id"]) == expected
        assert [line["row"]["id"] for line in api.delta("sp_sqlite", widened["id"])] == [3]
    finally:
        agent.stop()
