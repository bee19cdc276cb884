"""strategy timestamp with a source whose clock is off from the warehouse's, both ways.

The legacy machine's clock runs two hours ahead of (or behind) the warehouse's: its
application stamps rows with that clock, and its agent reads the database's "now" from it
(the agent runs under faketime, so SQLite's clock is the skewed one). The watermark must
be the source's clock: had the warehouse used its own, a source behind it would have its
updates missed (the view would differ from the truth) and a source ahead of it would have
every row read again at every sync (the read bound below would fail).
"""

from __future__ import annotations

import datetime as dt
import glob
import random
import sqlite3
import time

import pytest

from tests.support.oracle import check_sync
from workloads.debian import ensure_command
from workloads.harness import start_agent

pytestmark = pytest.mark.integration

ROWS = 2000
ROUNDS = 2
#: Rows updated, inserted and deleted per round.
UPDATES, INSERTS, DELETES = 12, 6, 4
#: The view's timestamp lag: a sync reads again the rows stamped this long before its watermark.
LAG_S = 1
VIEW_SQL = "SELECT i.id, i.grp, i.v FROM {src}.items i WHERE i.grp < 8"
TRUTH_SQL = "SELECT id, grp, v FROM items WHERE grp < 8"


class SkewedSource:
    """A SQLite table whose application stamps rows with a clock `skew_h` hours off."""

    def __init__(self, path, skew_h: int, seed: int):
        self.path, self.rng = path, random.Random(seed)
        self.now = f"strftime('%Y-%m-%d %H:%M:%f', 'now', '{skew_h:+d} hours')"
        self.next_id = ROWS
        with sqlite3.connect(path) as c:
            c.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, grp INTEGER, v TEXT, updated_at DATETIME)")
            c.executemany(
                f"INSERT INTO items VALUES (?, ?, ?, {self.now})",
                [(i, self.rng.randrange(10), f"v{i}") for i in range(ROWS)],
            )

    def change(self) -> None:
        """Updates (some crossing the WHERE clause) that bump the stamp, inserts, hard deletes."""
        with sqlite3.connect(self.path) as c:
            ids = [r[0] for r in c.execute("SELECT id FROM items")]
            picked = self.rng.sample(ids, UPDATES + DELETES)
            for i in picked[:UPDATES]:
                c.execute(
                    f"UPDATE items SET grp = ?, v = ?, updated_at = {self.now} WHERE id = ?",
                    (self.rng.randrange(10), f"u{self.rng.randrange(10**6)}", i),
                )
            c.executemany("DELETE FROM items WHERE id = ?", [(i,) for i in picked[UPDATES:]])
            for _ in range(INSERTS):
                c.execute(f"INSERT INTO items VALUES (?, ?, 'new', {self.now})", (self.next_id, self.rng.randrange(10)))
                self.next_id += 1

    def truth(self) -> dict:
        with sqlite3.connect(self.path) as c:
            return {(r[0],): {"id": r[0], "grp": r[1], "v": r[2]} for r in c.execute(TRUTH_SQL)}


def skewed_clock(skew_h: int) -> dict[str, str]:
    """The environment that runs a process `skew_h` hours off the machine's clock: libfaketime
    preloaded (Debian's faketime, installed when missing). Not the `faketime` wrapper, which
    names a semaphore and a shared memory segment after its process id and leaves them behind
    when the process is SIGKILLed: a later process given the same id failed to start."""
    ensure_command("faketime", "faketime")
    (library,) = glob.glob("/usr/lib/*/faketime/libfaketime.so.1")
    return {"LD_PRELOAD": library, "FAKETIME": f"{skew_h:+d}h"}


@pytest.mark.parametrize("skew_h", [2, -2], ids=["source ahead", "source behind"])
def test_the_watermark_is_the_sources_clock(api, tmp_path, logs_dir, skew_h):
    legacy = SkewedSource(tmp_path / "skewed.db", skew_h, seed=700 + skew_h)
    agent = start_agent(f"sqlite:///{tmp_path / 'skewed.db'}", logs_dir, env=skewed_clock(skew_h))
    src, name = f"skew{skew_h + 2}", f"skewed_{skew_h + 2}"
    try:
        api.add_source(src, agent.url)
        api.add_view(
            name,
            VIEW_SQL.format(src=src),
            strategy="timestamp",
            timestamps={"items": "updated_at"},
            timestamp_lag_s=LAG_S,
            reconcile_every=100,  # no full reconciliation: the ranged reads alone must be exact
        )
        before = legacy.truth()
        # The load's watermark must fall more than the lag after the table's stamps, or the
        # first ranged read takes them all again: a warm service loads within the lag.
        time.sleep(LAG_S + 1)
        check_sync(api, name, ["id"], {}, before, api.sync(name))
        for _ in range(ROUNDS):
            legacy.change()
            truth = legacy.truth()
            sync = api.sync(name)
            check_sync(api, name, ["id"], before, truth, sync)
            before = truth
            stamp = sync["metrics"]["timestamp"]
            assert not stamp["reconciled"], stamp
            # the source's clock, not the warehouse's: the watermark is `skew_h` hours off ours
            off = dt.datetime.fromisoformat(legacy_clock(legacy)) - dt.datetime.fromisoformat(stamp["watermark"])
            assert dt.timedelta(0) <= off < dt.timedelta(minutes=10), (stamp, off)
            # this round's changed rows, plus the last round's if they fell within the lag
            assert stamp["rows_read"] <= 2 * (UPDATES + INSERTS), stamp
    finally:
        agent.stop()


def legacy_clock(legacy: SkewedSource) -> str:
    """The legacy machine's clock now, as its application stamps rows."""
    with sqlite3.connect(legacy.path) as c:
        return c.execute(f"SELECT {legacy.now}").fetchone()[0]
