"""MariaDB sources beyond the randomized rounds of test_sync, test_timestamp and test_gentle_reads:
a view joining a MariaDB table with a SQLite one, a multiset view over values a case-,
accent- and space-blind collation holds equal (each its own row to the view), and the
strategies that need another kind of source refused with a clear 422."""

from __future__ import annotations

import random
import sqlite3
from collections import Counter

import pytest

from tests.support.mapped_files import numba_files, process_tree
from tests.support.mariadb_legacy import NORMALIZE, MariadbLegacy, Owner
from tests.support.multisets import check_sync as check_multiset
from tests.support.oracle import keyed, run_rounds
from workloads.harness import start_agent

pytestmark = pytest.mark.integration

ACTIVITY = {-1: "banned", 0: "idle", 1: "active", 2: "busy"}
JOIN_SQL = (
    "SELECT a.id, a.owner, a.amount, a.born, r.code, r.label FROM myj.accounts a "
    "JOIN sqj.activity r ON r.code = a.active WHERE r.label <> 'banned'"
)
#: Values a general_ci collation holds equal, and NULL: each distinct value is its own row.
TALLY = ["a", "A", "a ", "á", "Á", "ß", "ss", "", None]


class Joined:
    """Accounts on MariaDB, their activity's label on SQLite; the truth joined in Python."""

    def __init__(self, mariadb_url: str, sqlite_path, seed: int):
        self.accounts = MariadbLegacy(mariadb_url, seed=seed, rows=150)
        self.path = sqlite_path
        self.rng = random.Random(seed)
        with sqlite3.connect(sqlite_path) as c:
            c.execute("CREATE TABLE activity (code INTEGER PRIMARY KEY, label TEXT NOT NULL)")
            c.executemany("INSERT INTO activity VALUES (?, ?)", ACTIVITY.items())

    def change(self) -> None:
        self.accounts.change()
        with sqlite3.connect(self.path) as c:
            code = self.rng.choice([0, 1, 2])
            c.execute(
                "UPDATE activity SET label = ? WHERE code = ?", (f"{ACTIVITY[code]} {self.rng.random():.4f}", code)
            )

    def truth(self, sql: str, key: list[str], normalizers) -> dict:
        with sqlite3.connect(self.path) as c:
            labels = dict(c.execute("SELECT code, label FROM activity").fetchall())
        accounts = self.accounts.truth("SELECT id, owner, amount, born, active FROM accounts", ["id"], NORMALIZE)
        rows = [
            {**{k: v for k, v in a.items() if k != "active"}, "code": a["active"], "label": labels[a["active"]]}
            for a in accounts.values()
            if a["active"] in labels and labels[a["active"]] != "banned"
        ]
        return keyed(rows, key)


def test_a_view_joining_mariadb_with_sqlite_is_exact(api, mariadb, tmp_path, logs_dir):
    legacy = Joined(mariadb.owner_url, tmp_path / "activity.db", seed=21)
    agents = [start_agent(mariadb.reader_url, logs_dir), start_agent(f"sqlite:///{tmp_path / 'activity.db'}", logs_dir)]
    try:
        api.add_source("myj", agents[0].url)
        api.add_source("sqj", agents[1].url)
        views = {
            f"myjoin_{s}": (JOIN_SQL, None, ["id"], {}, {"strategy": s}) for s in ("auto", "group_hash", "tuple_hash")
        }
        last = run_rounds(api, legacy, views, rounds=2, at_once=2)
    finally:
        for agent in agents:
            agent.stop()
    assert all(len(sync["metrics"]["sites"]) == 2 for sync in last.values())


def test_a_multiset_view_tells_apart_what_the_collation_blurs(api, mariadb, logs_dir):
    rng = random.Random(4)
    with Owner(mariadb.owner_url) as c:
        c.execute("CREATE TABLE tally (word VARCHAR(10) COLLATE utf8mb4_general_ci, n INT)")

        def refill(rows: int) -> None:
            c.execute("DELETE FROM tally WHERE RAND() < 0.3")
            for _ in range(rows):
                c.execute("INSERT INTO tally VALUES (%s, %s)", (rng.choice(TALLY), rng.choice([1, 2, None])))

        def truth() -> Counter:
            return Counter(c.execute("SELECT word, n FROM tally WHERE n IS NULL OR n < 3").fetchall())

        refill(60)
        agent = start_agent(mariadb.reader_url, logs_dir, extra=["--chunk-rows", "3"])
        try:
            api.add_source("mytally", agent.url)
            views = {}
            for strategy in ("auto", "group_hash", "sketch"):
                name = f"tally_{strategy}"
                view = api.add_view(
                    name, "SELECT t.word, t.n FROM mytally.tally t WHERE t.n IS NULL OR t.n < 3", strategy=strategy
                )
                assert view["key"] == [], view
                views[name] = Counter()
            for rnd in range(3):
                if rnd:
                    refill(15)
                now = truth()
                assert len({w.lower().strip() for w, _ in now if w}) < len({w for w, _ in now if w}), (
                    "the rounds must hold values the collation holds equal"
                )
                for name, before in views.items():
                    check_multiset(api, name, ["word", "n"], before, now, api.sync(name))
                    views[name] = now
        finally:
            agent.stop()


@pytest.mark.parametrize("strategy, says", [("row_version", "PostgreSQL"), ("snapshot_diff", "dump")])
def test_strategies_of_other_sources_are_refused(api, mariadb, logs_dir, strategy, says):
    with Owner(mariadb.owner_url) as c:
        c.execute("CREATE TABLE IF NOT EXISTS plain (id INT PRIMARY KEY, v TEXT)")
    agent = start_agent(mariadb.reader_url, logs_dir)
    try:
        api.add_source(f"myplain_{strategy}", agent.url)
        r = api.http.post(
            "/v1/views",
            json={
                "name": f"plain_{strategy}",
                "sql": f"SELECT p.id, p.v FROM myplain_{strategy}.plain p",
                "strategy": strategy,
            },
        )
        if r.status_code == 201:  # refused at the first sync instead: it fails, saying why
            sync = api.sync(f"plain_{strategy}")
            assert sync["status"] == "failed" and says in sync["error"], sync
        else:
            assert r.status_code == 422 and says in r.text, r.text
    finally:
        agent.stop()


def test_the_agent_and_its_readers_read_and_hash_without_numba(api, mariadb, logs_dir):
    """The MariaDB reader's loops (remote_agent/adapters/mysql_result.py) come from the kernels'
    ahead-of-time build like the others: after syncs that read every row through them in a
    reader and hashed it, neither the agent nor its readers' fork server (which loaded the
    loops for every reader it forks) nor a reader maps numba's modules or its LLVM library."""
    with Owner(mariadb.owner_url) as c:
        c.execute("CREATE TABLE lean (id INT PRIMARY KEY, name VARCHAR(20), amount DECIMAL(10,2), born DATE)")
        c.execute(
            "INSERT INTO lean SELECT seq, IF(seq % 3, CONCAT('n', seq), NULL), seq / 4, "
            "'2000-01-01' + INTERVAL seq % 28 DAY FROM seq_0_to_1999"
        )
        agent = start_agent(mariadb.reader_url, logs_dir, extra=["--chunk-rows", "500"])
        try:
            api.add_source("mylean", agent.url)
            api.add_view("lean", "SELECT l.id, l.name, l.amount, l.born FROM mylean.lean l", strategy="sketch")
            api.sync("lean")
            c.execute("UPDATE lean SET name = 'changed' WHERE id % 100 = 7")
            m = api.sync("lean")["metrics"]
            assert m["agent_timings"]["hash_s"] > 0 and m["sketch_cells"] > 0, m
            names = Counter(row["name"] for row in api.rows("lean"))
            assert names["changed"] == 20 and names.total() == 2_000, names
            processes = process_tree(agent.proc.pid)
        finally:
            agent.stop()
    numba = {pid: numba_files(mapped) for pid, (_, mapped) in processes.items() if numba_files(mapped)}
    assert not numba, numba
    (fork_server,) = [mapped for command, mapped in processes.values() if "forkserver" in command]
    assert any("_compiled_kernels" in path for path in fork_server), sorted(fork_server)
    assert any("MySQLdb/_mysql" in path for path in fork_server), sorted(fork_server)
