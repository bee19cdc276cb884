"""strategy row_version through a streaming replica (hot standby) of its PostgreSQL source.

A primary of the test's own and a standby made from it by `pg_basebackup -R`. The view's
source is one address (the API cannot change a source's URL: a source is only ever POSTed,
409 if its name exists), which leads, as a DNS name or a load balancer would, to one of
two agents: one with the primary's URL, one with the standby's. After every sync the view equals the truth read
from the server the agent read, and the delta is exact. In order:

- the agent's snapshot on each server: on the standby, the primary's xids and identity, and
  the WAL it had replayed;
- a load from the primary, a round of changes, and a sync from the standby once it has
  replayed them: the same system identifier and the primary's transaction ids, so the
  changed read serves (no fall-back); the agent's reads are the standby's (its statement log);
- the standby paused between two commits of the primary, the later-numbered first, and the
  primary synced: the standby's counter is *not* behind the kept snapshot, yet a
  transaction that snapshot saw has not committed there. The sync falls back all the same
  (the WAL positions kept with the snapshot), or the view would keep that transaction's update;
- still paused, the primary changed and synced: the standby's counter lies behind the kept
  snapshot, and the sync reconciles in full, saying why; replay resumed, the next sync reads
  the changed rows again, exact.

A read the standby cancels to go on replaying fails with a message that says so.
"""

from __future__ import annotations

import contextlib
import random
import time

import psycopg
import pytest

from remote_agent.adapters.postgres import PostgresAdapter
from remote_agent.errors import SourceUnavailable
from tests.support.oracle import check_sync
from workloads.harness import Process, start_agent
from workloads.postgres import PostgresServer, start_primary, start_standby
from workloads.relay import Relay, close_socket

pytestmark = pytest.mark.integration

ROWS = 2000
VIEW_SQL = "SELECT i.id, i.name, i.qty FROM {src}.items i WHERE i.qty >= 0"
COLUMNS = ["id", "name", "qty"]
#: Seconds the standby may take to replay what the primary wrote (well under one here).
REPLAY_TIMEOUT_S = 30


@pytest.fixture(scope="module")
def clusters(tmp_path_factory):
    """A primary and its hot standby, both stopped and removed at the end, pass or fail."""
    tmp_path = tmp_path_factory.mktemp("replica")
    primary = start_primary(tmp_path)
    try:
        with psycopg.connect(primary.owner_url, autocommit=True) as c:
            # no transaction but the test's: a counter that moves only when the test writes
            c.execute("ALTER SYSTEM SET autovacuum = off")
            c.execute("SELECT pg_reload_conf()")
        standby = start_standby(primary, tmp_path)
    except BaseException:
        primary.stop()
        raise
    try:
        yield primary, standby
    finally:
        standby.stop()
        primary.stop()


def report(sync: dict) -> dict:
    return sync["metrics"]["row_version"]


def truth(server: PostgresServer) -> dict:
    with psycopg.connect(server.owner_url, autocommit=True) as c:
        rows = c.execute("SELECT id, name, qty FROM items WHERE qty >= 0").fetchall()
    return {(r[0],): dict(zip(COLUMNS, r, strict=True)) for r in rows}


class Items:
    """A keyed table of the primary without timestamps, changed at random: updates (some
    leave or enter the WHERE clause), hard deletes and inserts."""

    def __init__(self, primary: PostgresServer, seed: int):
        self.url, self.rng = primary.owner_url, random.Random(seed)
        with psycopg.connect(self.url, autocommit=True) as c:
            c.execute("CREATE TABLE items (id integer PRIMARY KEY, name text, qty integer)")
            c.execute("INSERT INTO items SELECT g, 'item ' || g, g %% 50 FROM generate_series(1, %s) AS g", (ROWS,))
        self.ids, self.next_id = set(range(1, ROWS + 1)), ROWS + 1

    def change(self) -> None:
        rng = self.rng
        with psycopg.connect(self.url, autocommit=True) as c:
            for key in rng.sample(sorted(self.ids), 20):
                c.execute("UPDATE items SET qty = %s, name = %s WHERE id = %s", (rng.randrange(-5, 50), "changed", key))
            for key in rng.sample(sorted(self.ids), 5):
                c.execute("DELETE FROM items WHERE id = %s", (key,))
                self.ids.discard(key)
            for _ in range(10):
                c.execute("INSERT INTO items VALUES (%s, 'new', %s)", (self.next_id, rng.randrange(50)))
                self.ids.add(self.next_id)
                self.next_id += 1


class Address(Relay):
    """The source's one address, as a DNS name or a load balancer would be, relayed to the
    agent it is switched to."""

    def switch(self, agent: Process) -> None:
        """Relay to `agent` from now on; connections to the previous one are cut (the service opens new ones)."""
        with self._lock:
            self.target = (agent.host, agent.port)
            for s in self._sockets:
                close_socket(s)
            self._sockets.clear()


class ReplicaView:
    """A row_version view whose source's address leads to the agent of one server or the other."""

    def __init__(self, api, name: str, logs_dir, servers: list[PostgresServer]):
        self.api, self.name, self.server = api, name, None
        self.agents: dict[int, Process] = {}
        self.address: Address | None = None
        try:
            for server in servers:
                self.agents[server.port] = start_agent(server.reader_url, logs_dir)
            self.address = Address("127.0.0.1", self.agents[servers[0].port].port)
            api.add_source(name, self.address.url)
            api.add_view(name, VIEW_SQL.format(src=name), strategy="row_version", reconcile_every=1000)
        except BaseException:
            self.stop()
            raise
        self.before: dict = {}

    def point_at(self, server: PostgresServer) -> None:
        """The source's address now leads to the agent of `server`."""
        self.address.switch(self.agents[server.port])
        self.server = server

    def sync(self) -> dict:
        """A sync, exact against the server the agent reads."""
        now = truth(self.server)
        sync = self.api.sync(self.name)
        check_sync(self.api, self.name, ["id"], self.before, now, sync)
        self.before = now
        return sync

    def stop(self) -> None:
        if self.address is not None:
            self.address.close()
        for agent in self.agents.values():
            agent.stop()


def wait_replayed(primary: PostgresServer, standby: PostgresServer) -> None:
    """Until the standby has replayed every WAL record the primary has inserted so far.

    The insert position, not `pg_current_wal_lsn()` (the written one): with
    `synchronous_commit = off` a commit may be inserted and not yet written.
    """
    with psycopg.connect(primary.owner_url, autocommit=True) as c:
        target = c.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]
    deadline = time.monotonic() + REPLAY_TIMEOUT_S
    with psycopg.connect(standby.owner_url, autocommit=True) as c:
        while not c.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (target,)).fetchone()[0]:
            assert time.monotonic() < deadline, f"the standby did not replay up to {target} in {REPLAY_TIMEOUT_S} s"
            time.sleep(0.05)


def snapshot_of(server: PostgresServer) -> dict:
    """The snapshot the agent's adapter reads for row_version (`source_snapshot`)."""
    adapter = PostgresAdapter(server.reader_url, statement_timeout_s=60)
    with adapter.session() as session:
        return adapter.source_snapshot(session)


def set_replay(standby: PostgresServer, *, paused: bool) -> None:
    with psycopg.connect(standby.owner_url, autocommit=True) as c:
        c.execute("SELECT pg_wal_replay_pause()" if paused else "SELECT pg_wal_replay_resume()")
        deadline = time.monotonic() + REPLAY_TIMEOUT_S
        state = "paused" if paused else "not paused"
        while c.execute("SELECT pg_get_wal_replay_pause_state()").fetchone()[0] != state:
            assert time.monotonic() < deadline, f"replay not {state} after {REPLAY_TIMEOUT_S} s"
            time.sleep(0.05)


def test_row_version_through_a_streaming_replica(api, clusters, logs_dir):
    primary, standby = clusters
    items = Items(primary, seed=1515)
    view = ReplicaView(api, "rv_replica", logs_dir, [primary, standby])
    try:
        # the agent's snapshot on a hot standby (read-only REPEATABLE READ transactions): the
        # primary's xids, a transaction running on the primary running there too (as the
        # snapshot's xmin: PostgreSQL 15 lists no xip on a standby), and the WAL replayed
        with psycopg.connect(primary.owner_url) as running, psycopg.connect(primary.owner_url, autocommit=True) as c:
            xid = int(running.execute("SELECT pg_current_xact_id()::text").fetchone()[0])
            running.execute("UPDATE items SET name = 'running' WHERE id = 1")
            c.execute("UPDATE items SET name = 'ended' WHERE id = 2")  # the xmax moves past the running one
            on_primary = snapshot_of(primary)
            wait_replayed(primary, standby)
            on_standby = snapshot_of(standby)
            running.rollback()
        assert on_standby["xmin"] == on_primary["xmin"] == xid, (on_standby, on_primary)
        assert (on_primary["xip"], on_standby["xip"]) == ([xid], []), "a standby's xip: README, row_version"
        assert on_standby["system_identifier"] == on_primary["system_identifier"] is not None
        assert on_primary["replayed_lsn"] is None and on_primary["wal_lsn"] <= on_standby["replayed_lsn"], on_primary
        assert on_standby["replayed_lsn"] <= on_standby["wal_lsn"], on_standby

        # a load from the primary, a round of changes, a sync from the standby once it has
        # replayed them: the same identity, the primary's counter: the changed read serves
        view.point_at(primary)
        view.sync()
        items.change()
        wait_replayed(primary, standby)
        view.point_at(standby)
        logged = standby.logfile.stat().st_size
        sync = view.sync()
        with open(standby.logfile, encoding="utf-8") as log:
            log.seek(logged)
            assert "reader@legacy" in log.read(), "the agent did not read the standby"
        rv = report(sync)
        assert "fallback" not in rv and not rv["reconciled"] and 0 < rv["rows_read"] <= 35, rv
        # a standby gives no change token: its snapshot does not list the transactions in progress
        assert "unchanged_by_token" not in sync["metrics"], sync["metrics"]
        assert "hot standby" in sync["metrics"]["change_token_reason"], sync["metrics"]
        previous, current = rv["previous_snapshot"], rv["snapshot"]
        assert previous["system_identifier"] == current["system_identifier"] == on_primary["system_identifier"], rv
        assert previous["replayed_lsn"] is None and current["replayed_lsn"] >= previous["wal_lsn"], rv
        assert current["xmax"] > previous["xmax"] and sync["metrics"]["rows_inserted"] > 0, rv
        assert view.before == truth(primary)

        # replay paused between two commits of the primary, the later-numbered first; a sync
        # from the primary (its previous snapshot the standby's) sees both
        with psycopg.connect(primary.owner_url) as late, psycopg.connect(primary.owner_url, autocommit=True) as c:
            late_xid = int(late.execute("SELECT pg_current_xact_id()::text").fetchone()[0])
            in_view = sorted(view.before)
            late.execute("UPDATE items SET name = 'late' WHERE id = %s", in_view[0])
            c.execute("UPDATE items SET name = 'early' WHERE id = %s", in_view[-1])
            wait_replayed(primary, standby)
            set_replay(standby, paused=True)
            late.commit()
        view.point_at(primary)
        seen = report(view.sync())
        assert "fallback" not in seen and seen["rows_read"] == 2 and seen["snapshot"]["xmin"] > late_xid, seen
        # the standby's counter is not behind, yet the earlier-numbered commit is not there
        view.point_at(standby)
        rv = report(view.sync())  # without a fall-back, the view would keep 'late'
        assert rv["snapshot"]["xmax"] == seen["snapshot"]["xmax"], "the counter went back: not the case tested"
        assert rv["snapshot"]["xmin"] == late_xid, rv  # running, as far as the standby knows
        assert rv["reconciled"] and "has not replayed" in rv["fallback"] and rv["rows_missed"] is None, rv

        # still paused: the primary changes and is synced; now the standby's counter is behind
        view.point_at(primary)
        items.change()
        ahead = report(view.sync())
        assert "fallback" not in ahead, ahead
        view.point_at(standby)
        sync = view.sync()  # exact against the standby: the round just synced is undone
        rv = report(sync)
        assert rv["reconciled"] and "the transaction counter went back" in rv["fallback"], rv
        assert rv["snapshot"]["xmax"] < ahead["snapshot"]["xmax"] and rv["rows_missed"] is None, rv
        assert sync["metrics"]["rows_deleted"] > 0 and view.before != truth(primary)

        # replay resumed: the changed read again, from the xmin the paused standby last showed
        set_replay(standby, paused=False)
        wait_replayed(primary, standby)
        rv = report(view.sync())
        assert "fallback" not in rv and rv["read_from_xmin"] == late_xid and 0 < rv["rows_read"] <= 40, rv
        assert view.before == truth(primary)
    finally:
        view.stop()
        with contextlib.suppress(psycopg.Error, AssertionError):  # for the next test; the failure is told
            set_replay(standby, paused=False)


def set_streaming_delay(standby: PostgresServer, value: str) -> None:
    with psycopg.connect(standby.owner_url, autocommit=True) as c:
        c.execute(f"ALTER SYSTEM SET max_standby_streaming_delay = '{value}'")
        c.execute("SELECT pg_reload_conf()")


def test_a_read_the_standby_cancels_says_why(clusters):
    """Replay that removes rows a read still sees cancels the read (at once here: no delay
    allowed): the agent says that the standby did it, and how to make it rarer."""
    primary, standby = clusters
    with psycopg.connect(primary.owner_url, autocommit=True) as c:
        c.execute("CREATE TABLE burst (id integer PRIMARY KEY, n integer)")
        c.execute("INSERT INTO burst SELECT g, 0 FROM generate_series(1, 1000) AS g")
    wait_replayed(primary, standby)
    set_streaming_delay(standby, "0")
    try:
        adapter = PostgresAdapter(standby.reader_url, statement_timeout_s=60)
        with adapter.session() as session, session.read() as reader:
            chunks = reader.stream("SELECT id FROM burst", fetch_rows=100)
            assert len(next(chunks)) == 100  # the read's snapshot is held between fetches
            with psycopg.connect(primary.owner_url, autocommit=True) as c:
                c.execute("DELETE FROM burst")
                c.execute("VACUUM burst")  # removes rows the standby's read still sees
            wait_replayed(primary, standby)
            with pytest.raises(SourceUnavailable, match="standby cancelled the read") as failed:
                list(chunks)
        assert "max_standby_streaming_delay" in str(failed.value), failed.value
    finally:
        set_streaming_delay(standby, "-1")
