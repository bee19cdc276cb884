"""An extract with `resume_after` (deltasieve_protocol/resume.py): the rows after the key, and a header that says so.

The agent runs in process over a real SQLite file.
"""

from __future__ import annotations

import sqlite3

import pytest
from fastapi.testclient import TestClient

from deltasieve_protocol import frames
from deltasieve_protocol.models import ExtractControl, SiteSpec
from deltasieve_protocol.resume import RESUMED_HEADER
from remote_agent.app import create_app
from remote_agent.settings import AgentSettings

COLUMNS = [{"name": "id", "type": "int"}, {"name": "v", "type": "text"}]
SQL = "SELECT t.id, t.v FROM t"


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    db = tmp_path_factory.mktemp("resumed") / "t.db"
    with sqlite3.connect(db) as c:
        c.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
        c.executemany("INSERT INTO t VALUES (?, ?)", [(i * 7 - 300, f"v{i}") for i in range(200)])
    with TestClient(create_app(AgentSettings(db_url=f"sqlite:///{db}", chunk_rows=16))) as client:
        yield client


def _extract(client, control: ExtractControl, *data: bytes):
    content = frames.json_frame(frames.CONTROL, control.model_dump(exclude_none=True)) + b"".join(data)
    r = client.post("/v1/extract", content=content, headers={"Content-Type": frames.MEDIA_TYPE})
    assert r.status_code == 200, r.text
    ids = [
        row["id"]
        for f in frames.read_frames([r.content])
        if f.kind == frames.UNGROUPED_ROWS
        for row in f.batch().to_pylist()
    ]
    return r, ids


def test_a_resumed_extract_reads_after_the_key_and_says_so(client):
    spec = SiteSpec(sql=SQL, key=["id"], columns=COLUMNS)
    r, whole = _extract(client, ExtractControl(site=spec, seed=1, batch_rows=10))
    assert RESUMED_HEADER not in r.headers and len(whole) == 200
    r, rest = _extract(client, ExtractControl(site=spec, seed=1, batch_rows=10, resume_after=[whole[122]]))
    assert r.headers[RESUMED_HEADER] == "1" and rest == whole[123:]


def test_an_extract_that_cannot_resume_reads_from_the_start_without_the_header(client):
    spec = SiteSpec(sql=SQL, key=["id"], columns=COLUMNS)
    r, rows = _extract(client, ExtractControl(site=spec, seed=1, resume_after=["-300"]))  # text for an int key
    assert RESUMED_HEADER not in r.headers and len(rows) == 200
