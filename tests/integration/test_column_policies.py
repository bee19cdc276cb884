"""Column policies applied by the agent inside the read, on SQLite, PostgreSQL and MariaDB, real processes.

A table view of `people` hashes `ssn`, masks `card`, blocks `secret` and keeps only adults
(a row filter); its agent hashes `name` by its own --hash (the view asks to mask it: the
agent's policy wins) and blocks `note` by --block. Synced over rounds of random changes, the
view is exact and minimal against an oracle that applies the same policies here (HMAC-SHA-256
under the same key). The service reaches the agent through a wiretap: every exchange of
those syncs, decoded as the two ends decode it, carries no raw value of a hashed or masked
column, while a view of the same table without policies, through the same tap, does (so the
check can fail). PostgreSQL's statement log and MariaDB's general log show that neither
blocked column was ever read. Caller mistakes are 422s; an agent without a hash key fails
the sync with hash_key_missing.
"""

from __future__ import annotations

import hashlib
import hmac
import random
import re
import sqlite3
from urllib.parse import urlparse

import httpx
import psycopg
import pytest

from deltasieve_protocol import frames
from deltasieve_protocol.models import ExtractControl, SiteSpec
from tests.integration.test_security_mariadb import agent_statements as mariadb_statements
from tests.integration.test_security_postgres import agent_statements as postgres_statements
from tests.support.oracle import check_sync, keyed
from tests.support.sources import SourceDatabase
from tests.support.wiretap import Wiretap, carried_strings
from workloads.harness import start_agent
from workloads.mariadb import connect as mariadb_connect

pytestmark = pytest.mark.integration

HASH_KEY = "policies-test-key"
#: Syncs of each engine's view, a change between two: the load, then updates, deletes and inserts.
ROUNDS = 2
COLUMNS = {"people.ssn": "hash", "people.card": "mask", "people.secret": "block", "people.name": "mask"}
ROW_FILTER = {"people": "age >= 18"}
VIEW_COLUMNS = ["id", "name", "ssn", "card", "age"]


def hmac_hex(value: str | None) -> str | None:
    return None if value is None else hmac.new(HASH_KEY.encode(), value.encode(), hashlib.sha256).hexdigest()


def mask(value: str | None) -> str | None:
    if value is None:
        return None
    return "*" * len(value) if len(value) <= 4 else "*" * (len(value) - 4) + value[-4:]


class People:
    """The `people` table changed at random between syncs; `truth()` applies the view's policies."""

    def __init__(self, connect, ph: str, seed: int):
        self.connect, self.ph = connect, ph
        self.rng = random.Random(seed)
        self.next_id = 1
        with self.connect() as c:
            c.cursor().execute(
                "CREATE TABLE people (id integer PRIMARY KEY, name text, ssn text, card text, age integer, "
                "secret text, note text)"
            )
        self.insert(40)

    def _row(self, i: int) -> tuple:
        r = self.rng
        return (
            i,
            r.choice(["Ann Lee", "Bo Chan", "Cy Diaz", None]),
            f"{r.randint(100, 999)}-{r.randint(10, 99)}-{r.randint(1000, 9999)}",
            r.choice([f"4111{r.randint(10**11, 10**12 - 1)}", "12", None]),
            r.choice([12, 17, 18, 40, 71, None]),
            f"secret-{r.randint(0, 10**6)}",
            f"note-{r.randint(0, 10**6)}",
        )

    def insert(self, n: int) -> None:
        rows = [self._row(self.next_id + i) for i in range(n)]
        self.next_id += n
        with self.connect() as c:
            c.cursor().executemany(f"INSERT INTO people VALUES ({', '.join([self.ph] * 7)})", rows)

    def change(self) -> None:
        with self.connect() as c:
            cur = c.cursor()
            for _ in range(6):
                _, name, ssn, card, age, secret, _note = self._row(0)
                column, value = self.rng.choice(
                    [("name", name), ("ssn", ssn), ("card", card), ("age", age), ("secret", secret)]
                )
                cur.execute(
                    f"UPDATE people SET {column} = {self.ph} WHERE id = {self.ph}",
                    (value, self.rng.randrange(1, self.next_id)),
                )
            cur.execute(f"DELETE FROM people WHERE id = {self.ph}", (self.rng.randrange(1, self.next_id),))
        self.insert(3)

    def rows(self) -> list[tuple]:
        with self.connect() as c:
            cur = c.cursor()
            cur.execute("SELECT id, name, ssn, card, age, secret, note FROM people")
            return list(cur.fetchall())

    def truth(self) -> dict:
        return keyed(
            [
                dict(zip(VIEW_COLUMNS, (i, hmac_hex(name), hmac_hex(ssn), mask(card), age)))
                for i, name, ssn, card, age, _s, _n in self.rows()
                if age is not None and age >= 18
            ],
            ["id"],
        )

    def raw_values(self) -> set[str]:
        """The values no answer may carry: every name, ssn and card longer than four characters."""
        return {v for row in self.rows() for v in row[1:4] if isinstance(v, str) and len(v) > 4}


def connector(source: SourceDatabase):
    """The legacy application's connection maker and placeholder on the source's engine."""
    if source.engine == "sqlite":
        return (lambda: sqlite3.connect(source.owner_url)), "?"
    if source.engine == "postgres":
        return (lambda: psycopg.connect(source.owner_url)), "%s"
    return (lambda: mariadb_connect(source.owner_url)), "%s"


def agent_login(source: SourceDatabase, request) -> str:
    """The agent's login: on MariaDB one of its own that reads this database only, so that
    the agent exposes its tables alone and the general log tells its statements apart."""
    if source.engine == "mariadb":
        return request.getfixturevalue("mariadb_server").sole_reader(urlparse(source.owner_url).path.lstrip("/"))
    return source.reader_url


def statements_run(source: SourceDatabase, login: str, request) -> list[str] | None:
    """What the agent's login ran, from the database's own statement log (SQLite keeps none)."""
    if source.engine == "postgres":
        database = urlparse(source.owner_url).path.lstrip("/")
        return postgres_statements(request.getfixturevalue("postgres_server").logfile, "reader", database)
    if source.engine == "mariadb":
        return mariadb_statements(request.getfixturevalue("mariadb_server").general_log, urlparse(login).username)
    return None


@pytest.mark.engines("sqlite", "postgres", "mariadb")
def test_policies_hold_over_rounds_and_on_the_wire(api, logs_dir, source, request):
    connect, ph = connector(source)
    people = People(connect, ph, seed={"sqlite": 48, "postgres": 49, "mariadb": 50}[source.engine])
    if source.engine == "postgres":
        with psycopg.connect(source.owner_url, autocommit=True) as c:
            c.execute("GRANT SELECT ON people TO reader")
    login = agent_login(source, request)
    name = f"pol_{source.engine}"
    agent = start_agent(
        login, logs_dir, extra=["--hash", "people.name", "--block", "people.note"], env={"AGENT_HASH_KEY": HASH_KEY}
    )
    tap = Wiretap("127.0.0.1", agent.port)
    try:
        api.add_source(name, tap.url)
        exposed = {c["name"]: c for c in api.http.get(f"/v1/sources/{name}/tables").json()["tables"][0]["columns"]}
        assert "note" not in exposed and exposed["name"]["type"] == "text" and exposed["name"]["policy"] == "hash"

        view = f"{name}_people"
        body = {"name": view, "table": f"{name}.people", "columns": COLUMNS, "row_filter": ROW_FILTER}
        r = api.http.post("/v1/views", json=body)
        assert r.status_code == 201, r.text
        made = r.json()
        assert made["columns"] == VIEW_COLUMNS and made["key"] == ["id"]
        assert made["policies"] == {"columns": COLUMNS, "row_filter": ROW_FILTER}
        q = "`" if source.engine == "mariadb" else '"'  # how the site query quotes names
        assert f"{q}age{q} >= 18" in made["sites"][0]["sql"] and "secret" not in made["sites"][0]["sql"]

        before: dict = {}
        raw: set[str] = set()  # every value of a hashed or masked column the source ever held
        for _ in range(ROUNDS):
            truth = people.truth()
            raw |= people.raw_values()
            check_sync(api, view, ["id"], before, truth, api.sync(view))
            before = truth
            people.change()

        statements = statements_run(source, login, request)
        if statements is not None:  # the database's own log: neither blocked column was ever read
            assert any(re.search(r"\bssn\b", s) for s in statements), statements[:5]
            assert not [s for s in statements if re.search(r"\b(secret|note)\b", s)]

        # what crossed the link during those syncs, both ways, decoded as the two ends decode it
        policed = tap.exchanges()
        assert any(e.target == "/v1/extract" for e in policed), [e.target for e in policed]
        carried = carried_strings(policed)
        assert not raw & carried, sorted(raw & carried)[:3]
        assert {hmac_hex(v) for v in raw} & carried  # the hashes did cross: the tap saw the rows
        # the same table in a view without policies, through the same tap: ssn and card cross
        # raw (so the check above can fail), while the agent's own --hash holds on name
        since = len(tap.connections)
        r = api.http.post("/v1/views", json={"name": f"{name}_open", "table": f"{name}.people"})
        assert r.status_code == 201, r.text
        assert api.sync(f"{name}_open")["status"] == "succeeded"
        opened = carried_strings(tap.exchanges(since))
        names = {row[1] for row in people.rows() if row[1]}
        assert raw & opened and not names & opened, sorted(names & opened)[:3]
        asked, answered = tap.bytes_each_way()
        assert answered > asked > 0

        # the agent refuses a request that reads a column its view blocks
        site = made["sites"][0]
        spec = SiteSpec.model_validate({"sql": site["sql"], "key": site["key"], "columns": site["columns"]})
        blocked = spec.model_copy(
            update={"sql": site["sql"].replace(f"{q}age{q}", f"{q}secret{q}", 1), "blocked": ["people.secret"]}
        )
        body_bytes = frames.json_frame(frames.CONTROL, ExtractControl(site=blocked, seed=7).model_dump())
        r = httpx.post(f"{agent.url}/v1/extract", content=body_bytes, headers={"Content-Type": frames.MEDIA_TYPE})
        assert r.status_code == 403, r.text

    finally:
        tap.close()
        agent.stop()


@pytest.fixture(scope="module")
def sqlite_people(api, logs_dir, tmp_path_factory):
    """A SQLite `people` behind an agent with a hash key (`polq`) and one without (`polq_nokey`)."""
    path = tmp_path_factory.mktemp("policies") / "legacy.db"
    People(lambda: sqlite3.connect(path), "?", seed=7)
    keyed_agent = start_agent(f"sqlite:///{path}", logs_dir, env={"AGENT_HASH_KEY": HASH_KEY})
    bare_agent = start_agent(f"sqlite:///{path}", logs_dir)
    api.add_source("polq", keyed_agent.url)
    api.add_source("polq_nokey", bare_agent.url)
    yield path
    keyed_agent.stop()
    bare_agent.stop()


@pytest.mark.parametrize(
    ("body", "needles"),
    [
        ({"table": "polq.people", "columns": {"people.id": "hash"}}, ["key", "cannot be hashed"]),
        ({"table": "polq.people", "columns": {"people.age": "mask"}}, ["only text columns can be masked"]),
        ({"table": "polq.people", "columns": {"people.nope": "hash"}}, ["no column 'nope'"]),
        ({"table": "polq.people", "columns": {"people.ssn": "scramble"}}, ["block", "hash", "mask"]),
        ({"table": "polq.people", "row_filter": {"people": "upper(name) = 'A'"}}, ["function call upper"]),
        ({"table": "polq.people", "row_filter": {"people": "nope = 1"}}, ["column 'nope'"]),
        ({"table": "polq.people", "row_filter": {"others": "age > 1"}}, ["does not read"]),
        ({"sql": "SELECT p.id, p.secret FROM polq.people p", "columns": {"people.secret": "block"}}, ["blocks"]),
        (
            {"sql": "SELECT p.id, p.ssn FROM polq.people p WHERE p.ssn = 'x'", "columns": {"people.ssn": "hash"}},
            ["WHERE"],
        ),
    ],
)
def test_bad_policies_are_422(api, sqlite_people, body, needles):
    r = api.http.post("/v1/views", json={"name": "pol_bad", **body})
    assert r.status_code == 422, r.text
    for needle in needles:
        assert needle in r.text, r.text


def test_a_sql_view_with_policies_and_an_agent_without_key(api, sqlite_people):
    r = api.http.post(
        "/v1/views",
        json={
            "name": "polq_adults",
            "sql": "SELECT p.id, p.ssn, p.card FROM polq.people p",
            "columns": {"people.ssn": "hash", "people.card": "mask", "people.secret": "block"},
            "row_filter": {"people": "age >= 18"},
        },
    )
    assert r.status_code == 201, r.text
    assert api.sync("polq_adults")["status"] == "succeeded"
    with sqlite3.connect(sqlite_people) as c:
        want = {i: (hmac_hex(s), mask(k)) for i, s, k in c.execute("SELECT id, ssn, card FROM people WHERE age >= 18")}
    assert {row["id"]: (row["ssn"], row["card"]) for row in api.rows("polq_adults")} == want

    r = api.http.post(
        "/v1/views", json={"name": "polq_nokey_v", "table": "polq_nokey.people", "columns": {"people.ssn": "hash"}}
    )
    assert r.status_code == 201, r.text
    sync = api.sync("polq_nokey_v")
    assert sync["status"] == "failed" and sync["error_code"] == "hash_key_missing", sync
    assert "AGENT_HASH_KEY" in sync["error"]


def test_a_mirror_takes_its_tables_policies_and_a_put_keeps_them(api, sqlite_people):
    r = api.http.post(
        "/v1/sources/polq/mirror",
        json={"tables": ["people"], "columns": {"people.ssn": "hash", "people.secret": "block"}},
    )
    assert r.status_code == 200 and [v["view"] for v in r.json()["created"]] == ["polq_people"], r.text
    mirrored = api.http.get("/v1/views/polq_people").json()
    assert "secret" not in mirrored["columns"] and mirrored["policies"]["columns"] == {
        "people.ssn": "hash",
        "people.secret": "block",
    }
    r = api.http.post("/v1/sources/polq/mirror", json={"columns": {"nope.x": "hash"}})
    assert r.status_code == 422 and "nope.x" in r.text, r.text

    r = api.http.post(
        "/v1/views",
        json={"name": "polq_put", "sql": "SELECT p.id, p.ssn FROM polq.people p"} | {"columns": {"people.ssn": "hash"}},
    )
    assert r.status_code == 201, r.text
    r = api.http.put("/v1/views/polq_put", json={"sql": "SELECT p.id, p.ssn, p.age FROM polq.people p"})
    assert r.status_code == 200 and r.json()["policies"]["columns"] == {"people.ssn": "hash"}, r.text
