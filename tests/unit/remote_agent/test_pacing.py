"""Pacing of the chunked scan (remote_agent/pacing.py) on a real SQLite file, read in place
and in a reader process: the rate cap holds, the chunk sizes follow the target, the rows
are those of an unpaced scan, and the time asleep is not counted as reading."""

from __future__ import annotations

import sqlite3
import time

import pyarrow as pa
import pytest

from remote_agent import readahead
from remote_agent.adapters import open_adapter
from remote_agent.adapters.rows import RowConverter
from remote_agent.pacing import MIN_CHUNK_ROWS, Pacer, Pacing
from remote_agent.settings import AgentSettings, ScanSettings
from remote_agent.sitequery import validate_site_query
from remote_agent.timings import Timings

ROWS = 3_000
#: A cap the reads of this table are far faster than (a few ms for all of it), so the
#: scan's pace is the pacer's: ROWS at this rate take 1.5 s.
CAP = 2_000


@pytest.fixture(scope="module")
def adapter(tmp_path_factory):
    path = tmp_path_factory.mktemp("pacing") / "legacy.db"
    with sqlite3.connect(path) as c:
        c.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT)")
        c.executemany("INSERT INTO t VALUES (?, ?)", [(i, f"n{i}") for i in range(ROWS)])
    return open_adapter(f"sqlite:///{path}", statement_timeout_s=5)


def _scan(adapter, pacer: Pacer | None, *, read_ahead: bool, timings: Timings) -> pa.Table:
    query = validate_site_query(
        "SELECT t.id, t.name FROM t t", ["id"], {t.name: t for t in adapter.describe()}, adapter.dialect
    )
    batches = readahead.batches(
        adapter,
        query,
        RowConverter(adapter, query.columns, query.where()),
        ScanSettings(chunk_rows=50_000, read_ahead=read_ahead),
        batch_rows=512,
        timings=timings,
        pacer=pacer,
    )
    return pa.Table.from_batches(list(batches))


@pytest.mark.parametrize("read_ahead", [False, True], ids=["in-place", "reader-process"])
def test_the_rate_cap_holds_within_a_fifth(adapter, read_ahead):
    unpaced = _scan(adapter, None, read_ahead=False, timings=Timings())
    pacer = Pacer(50_000, Pacing(max_rows_per_s=CAP))
    timings = Timings()
    started = time.monotonic()
    paced = _scan(adapter, pacer, read_ahead=read_ahead, timings=timings)
    elapsed = time.monotonic() - started
    assert paced.equals(unpaced), "pacing changed the rows read"
    report = pacer.report()
    # the scan may only be slower than the cap if the machine is: never faster
    assert elapsed >= ROWS / CAP * 0.8, (elapsed, report)
    assert report["rows_per_s"] <= CAP * 1.2, report
    assert report["chunks"] >= ROWS // (CAP // 4), report  # a chunk holds a quarter second's rows
    assert report["chunk_rows_max"] <= CAP // 4, report
    assert report["slept_s"] > 0.5 * ROWS / CAP, report
    # the time asleep is not reading: the reads of 3,000 rows take milliseconds
    assert timings.seconds["read_s"] < report["slept_s"], (timings.to_json(), report)


def test_chunks_follow_the_target_duration(adapter):
    """With a target far longer than this table's reads, chunks grow from the first one's
    1,000 rows by at most 4 times a chunk; with a tiny one they shrink to the floor."""
    grow = Pacer(50_000, Pacing(target_chunk_s=10.0))
    _scan(adapter, grow, read_ahead=True, timings=Timings())
    report = grow.report()
    assert (report["chunks"], report["chunk_rows_min"], report["chunk_rows_max"]) == (2, 1_000, 2_000), report
    shrink = Pacer(50_000, Pacing(target_chunk_s=1e-9))
    _scan(adapter, shrink, read_ahead=False, timings=Timings())
    report = shrink.report()
    assert report["chunk_rows_max"] == 1_000 and report["chunk_rows_min"] == MIN_CHUNK_ROWS, report
    # the first chunk, the floor-sized ones, and the read that finds nothing after the last
    assert report["chunks"] == 2 + (ROWS - 1_000) // MIN_CHUNK_ROWS, report


def test_pacing_settings_are_checked():
    assert AgentSettings(db_url="sqlite:////x.db").pacing() == Pacing()
    assert AgentSettings(db_url="sqlite:////x.db", target_chunk_s=0.5, max_rows_per_s=1e4).pacing() == Pacing(0.5, 1e4)
    for bad in ({"target_chunk_s": 0}, {"max_rows_per_s": -1}):
        with pytest.raises(ValueError):
            AgentSettings(db_url="sqlite:////x.db", **bad)
    with pytest.raises(ValueError, match="must be positive"):
        Pacing(max_rows_per_s=0)
