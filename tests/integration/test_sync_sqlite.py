"""Agent and service as real processes over HTTP, on a SQLite legacy database.

Randomized rounds of inserts, updates, deletes, NULLs, Unicode, composite keys and rows
crossing the WHERE clause; after every sync the view equals the truth read straight from
the database, the delta is exact and the metrics count what the delta holds.
"""

from __future__ import annotations

import random
import sqlite3
from decimal import Decimal

import pytest

from tests.support.oracle import keyed, normalize, run_rounds
from workloads.harness import start_agent

pytestmark = pytest.mark.integration

ROUNDS = 5
WORDS = ["alpha", "Ærø", "naïve café", "日本語テキスト", "emoji 🚀✨", "", "tab\there", "quote ' \" \\", "Zürich", "ß"]


def _decimal(v):
    return str(Decimal(repr(v) if isinstance(v, float) else str(v)).quantize(Decimal("0.01")))


PEOPLE_NORMALIZE = {"balance": _decimal, "flag": bool}
VIEWS = {
    "people_v": (
        "SELECT p.id, p.name, p.city, p.score, p.balance, p.born, p.flag, p.note FROM src.people p WHERE p.score >= 20 OR p.city = 'Zürich'",
        "SELECT id, name, city, score, balance, born, flag, note FROM people WHERE score >= 20 OR city = 'Zürich'",
        ["id"],
        PEOPLE_NORMALIZE,
    ),
    "enrol_v": (
        "SELECT e.region, e.code AS course_code, e.grade, e.person FROM src.enrol AS e WHERE e.grade <> 'X'",
        "SELECT region, code AS course_code, grade, person FROM enrol WHERE grade <> 'X'",
        ["region", "course_code"],
        {},
    ),
    "joined_v": (
        "SELECT p.id, p.name, e.region, e.code, e.grade FROM src.people p JOIN src.enrol e ON e.person = p.id WHERE p.score > 10",
        "SELECT p.id, p.name, e.region, e.code, e.grade FROM people p JOIN enrol e ON e.person = p.id WHERE p.score > 10",
        ["id", "region", "code"],
        {},
    ),
}


# The same view through the other strategies, on the same data and rounds.
VIEWS["people_tuple_hash"] = (*VIEWS["people_v"], {"strategy": "tuple_hash"})
VIEWS["people_full_ship"] = (*VIEWS["people_v"], {"strategy": "full_ship"})
VIEWS["people_ranges"] = (*VIEWS["people_v"], {"strategy": "range_checksum"})
VIEWS["enrol_ranges"] = (*VIEWS["enrol_v"], {"strategy": "range_checksum"})


class Legacy:
    """The legacy application, changing the database at random between syncs."""

    def __init__(self, path, seed: int):
        self.path = path
        self.rng = random.Random(seed)
        with sqlite3.connect(path) as c:
            c.execute("CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT, city TEXT, score REAL, balance DECIMAL(10,2), born DATE, flag BOOLEAN, note TEXT)")
            c.execute("CREATE TABLE enrol (region TEXT NOT NULL, code INTEGER NOT NULL, person INTEGER, grade TEXT, PRIMARY KEY (region, code))")
        self.next_id = 1
        with sqlite3.connect(path) as c:
            for _ in range(400):
                self.insert_person(c)
            for _ in range(300):
                self.insert_enrol(c)

    def person(self):
        r = self.rng
        return (
            r.choice(WORDS + [None]),
            r.choice(["Zürich", "Oslo", "Kraków", None, "Wollongong"]),
            r.choice([r.uniform(0, 40), None, 20.0, -0.0, 1e300]),
            r.choice([round(r.uniform(-1000, 1000), 2), None, 0]),
            r.choice(["2001-02-03", "1999-12-31", None, "2024-02-29"]),
            r.choice([0, 1, None]),
            r.choice(WORDS + [None, "x" * 300]),
        )

    def insert_person(self, c):
        c.execute("INSERT INTO people VALUES (?, ?, ?, ?, ?, ?, ?, ?)", (self.next_id, *self.person()))
        self.next_id += 1

    def insert_enrol(self, c):
        r = self.rng
        c.execute("INSERT OR IGNORE INTO enrol VALUES (?, ?, ?, ?)", (r.choice(["north", "süd", "東", "west"]), r.randint(1, 500), r.randint(1, self.next_id), r.choice(["A", "B", "C", "X", None])))

    def change(self):
        r = self.rng
        with sqlite3.connect(self.path) as c:
            ids = [row[0] for row in c.execute("SELECT id FROM people")]
            for pid in r.sample(ids, min(len(ids), r.randint(5, 40))):
                what = r.random()
                if what < 0.4:
                    c.execute("UPDATE people SET score = ? WHERE id = ?", (r.choice([r.uniform(0, 40), None, 19.99, 20.0]), pid))
                elif what < 0.7:
                    c.execute("UPDATE people SET name = ?, note = ? WHERE id = ?", (r.choice(WORDS + [None]), r.choice(WORDS + [None]), pid))
                elif what < 0.85:
                    c.execute("UPDATE people SET city = ?, balance = ? WHERE id = ?", (r.choice(["Zürich", "Oslo", None]), r.choice([None, round(r.uniform(-5, 5), 2)]), pid))
                else:
                    c.execute("UPDATE people SET flag = ?, born = ? WHERE id = ?", (r.choice([0, 1, None]), r.choice(["2000-01-01", None]), pid))
            for pid in r.sample(ids, min(len(ids), r.randint(0, 8))):
                c.execute("DELETE FROM people WHERE id = ?", (pid,))
            for _ in range(r.randint(0, 15)):
                self.insert_person(c)
            keys = list(c.execute("SELECT region, code FROM enrol"))
            for region, code in r.sample(keys, min(len(keys), r.randint(0, 25))):
                c.execute("UPDATE enrol SET grade = ?, person = ? WHERE region = ? AND code = ?", (r.choice(["A", "B", "X", None]), r.randint(1, self.next_id), region, code))
            for region, code in r.sample(keys, min(len(keys), r.randint(0, 6))):
                c.execute("DELETE FROM enrol WHERE region = ? AND code = ?", (region, code))
            for _ in range(r.randint(0, 10)):
                self.insert_enrol(c)

    def truth(self, sql: str, key: list[str], normalizers) -> dict:
        with sqlite3.connect(f"file:{self.path}?mode=ro", uri=True) as c:
            cur = c.execute(sql)
            cols = [d[0] for d in cur.description]
            rows = normalize(cur.fetchall(), cols, normalizers)
        for row in rows:  # SQLite keeps -0.0 and integers in REAL columns; JSON has one zero
            for col, v in row.items():
                if isinstance(v, float) and v == 0:
                    row[col] = 0.0
        return keyed(rows, key)


@pytest.fixture(scope="module")
def legacy(tmp_path_factory):
    return Legacy(tmp_path_factory.mktemp("sqlite") / "legacy.db", seed=20261122)


@pytest.fixture(scope="module")
def agent(legacy, logs_dir):
    proc = start_agent(f"sqlite:///{legacy.path}", logs_dir, token="s3cret")
    yield proc
    proc.stop()


def test_randomized_rounds_are_exact(api, agent, legacy):
    api.add_source("src", agent.url, "s3cret")
    run_rounds(api, legacy, VIEWS, ROUNDS)
    last = api.sync("people_v")
    assert last["metrics"]["groups_sent"] > 0, f"after several rounds the statistics must produce groups: {last['metrics']}"


def test_unchanged_source_gives_empty_delta_and_few_bytes(api, tmp_path, logs_dir):
    from workloads.students import StudentsSource

    db = tmp_path / "students.db"
    StudentsSource(db, seed=3).create(20_000)
    agent = start_agent(f"sqlite:///{db}", logs_dir)
    try:
        api.add_source("still", agent.url)
        api.add_view("still_v", "SELECT s.student_id, s.first_name, s.last_name, s.phone, s.address, s.birth_date FROM still.students s")
        load = api.sync("still_v")
        assert load["metrics"]["rows_inserted"] == 20_000
        load_bytes = load["metrics"]["bytes_to_agent"] + load["metrics"]["bytes_from_agent"]
        for _ in range(2):
            sync = api.sync("still_v")
            assert sync["status"] == "succeeded", sync["error"]
            assert api.delta("still_v", sync["id"]) == []
            m = sync["metrics"]
            assert (m["rows_inserted"], m["rows_updated"], m["rows_deleted"]) == (0, 0, 0)
            moved = m["bytes_to_agent"] + m["bytes_from_agent"]
            assert moved < 0.25 * load_bytes, f"a no-change sync moved {moved} bytes, the load {load_bytes}"
            assert m["groups_changed"] == 0 and m["groups_regrouped"] == 0
    finally:
        agent.stop()


@pytest.mark.parametrize("strategy", ["range_checksum", "tuple_hash", "group_hash"])
def test_strategies_on_a_larger_table(api, tmp_path, logs_dir, strategy):
    """Enough rows that range bisection runs several rounds and groups form for real."""
    from workloads.students import StudentsSource

    db = tmp_path / "students.db"
    legacy = StudentsSource(db, seed=11)
    legacy.create(20_000)
    agent = start_agent(f"sqlite:///{db}", logs_dir)
    source = f"big_{strategy}"
    cols = "student_id, first_name, last_name, phone, address, gpa"

    class Students:
        def change(self):
            legacy.change()

        def truth(self, sql, key, normalizers):
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as c:
                cur = c.execute(sql)
                names = [d[0] for d in cur.description]
                return keyed(normalize(cur.fetchall(), names, normalizers), key)

    try:
        api.add_source(source, agent.url)
        views = {
            f"students_{strategy}": (
                f"SELECT s.{cols.replace(', ', ', s.')} FROM {source}.students s WHERE s.active = 1",
                f"SELECT {cols} FROM students WHERE active = 1",
                ["student_id"],
                {"gpa": _decimal},
                {"strategy": strategy},
            )
        }
        last = run_rounds(api, Students(), views, 3)[f"students_{strategy}"]["metrics"]
        load = api.http.get(f"/v1/views/students_{strategy}/syncs").json()[-1]["metrics"]
        moved, loaded = last["bytes_to_agent"] + last["bytes_from_agent"], load["bytes_to_agent"] + load["bytes_from_agent"]
        assert moved < 0.6 * loaded, (moved, loaded)
        if strategy == "range_checksum":
            assert last["range_rounds"] >= 2 and last["round_trips"] == last["range_rounds"]
    finally:
        agent.stop()
