"""A scan the warehouse expects to be small (`expected_rows`) is read in the answer's own thread,
without a reader process, and answers the same rows; the agent keeps a validated site query only
while the tables it reads stay as they were.

The agent runs in process over a real SQLite file, reading ahead as by default.
"""

from __future__ import annotations

import sqlite3

import pytest
from fastapi.testclient import TestClient

from deltasieve_protocol import frames
from deltasieve_protocol.models import ExtractControl, SiteSpec
from remote_agent.app import create_app
from remote_agent.settings import AgentSettings

COLUMNS = [{"name": "id", "type": "int"}, {"name": "v", "type": "text"}]
SQL = "SELECT t.id, t.v FROM t"


@pytest.fixture()
def agent(tmp_path):
    db = tmp_path / "t.db"
    with sqlite3.connect(db) as c:
        c.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
        c.executemany("INSERT INTO t VALUES (?, ?)", [(i, f"v{i}") for i in range(300)])
    settings = AgentSettings(db_url=f"sqlite:///{db}", chunk_rows=64, read_ahead_min_rows=1_000)
    with TestClient(create_app(settings)) as client:
        yield client, db


def _extract(client, control: ExtractControl) -> tuple[list, dict]:
    content = frames.json_frame(frames.CONTROL, control.model_dump(exclude_none=True))
    r = client.post("/v1/extract", content=content, headers={"Content-Type": frames.MEDIA_TYPE})
    assert r.status_code == 200, r.text
    got = list(frames.read_frames([r.content]))
    rows = [row for f in got if f.kind == frames.UNGROUPED_ROWS for row in f.batch().to_pylist()]
    summary = next(f.json() for f in got if f.kind == frames.SUMMARY)
    return rows, summary


def test_a_scan_expected_small_is_read_without_a_reader_and_answers_the_same_rows(agent):
    client, _ = agent
    spec = SiteSpec(sql=SQL, key=["id"], columns=COLUMNS)
    ahead, read_ahead = _extract(client, ExtractControl(site=spec, seed=1))
    here, in_thread = _extract(client, ExtractControl(site=spec, seed=1, expected_rows=300))
    large, still_ahead = _extract(client, ExtractControl(site=spec, seed=1, expected_rows=5_000))
    assert here == ahead == large and len(here) == 300
    # the answer's thread waits for a reader's batches only when one reads
    assert read_ahead["timings"]["wait_s"] > 0 and still_ahead["timings"]["wait_s"] > 0
    assert in_thread["timings"]["wait_s"] == 0


def test_a_kept_site_query_is_validated_again_once_its_table_changes(agent):
    client, db = agent
    spec = SiteSpec(sql=SQL, key=["id"], columns=COLUMNS)
    rows, _ = _extract(client, ExtractControl(site=spec, seed=1, expected_rows=300))
    assert len(rows) == 300
    with sqlite3.connect(db) as c:  # the column the query reads goes
        c.execute("ALTER TABLE t DROP COLUMN v")
    content = frames.json_frame(frames.CONTROL, ExtractControl(site=spec, seed=1).model_dump(exclude_none=True))
    r = client.post("/v1/extract", content=content, headers={"Content-Type": frames.MEDIA_TYPE})
    assert r.status_code == 403, r.text
