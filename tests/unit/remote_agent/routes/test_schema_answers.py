"""What the agent says about its schema: the 409 of a changed column for programs, the
fingerprint of the columns each extraction answer names, the schema of a few tables.

The agent runs in process over a real SQLite file whose table changes between requests.
"""

from __future__ import annotations

import sqlite3

import pytest
from fastapi.testclient import TestClient

from deltasieve_protocol import frames
from deltasieve_protocol.models import ExtractControl, SiteSpec
from deltasieve_protocol.schema import FINGERPRINT_HEADER, SourceSchema, columns_fingerprint
from remote_agent.app import create_app
from remote_agent.settings import AgentSettings

SQL = "SELECT t.id, t.amount FROM t"


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "t.db"
    with sqlite3.connect(path) as c:
        c.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, amount DECIMAL(14,2), note TEXT)")
        c.execute("CREATE TABLE other (id INTEGER PRIMARY KEY)")
        c.executemany("INSERT INTO t VALUES (?, ?, ?)", [(i, i * 1.5, "n") for i in range(20)])
    return path


def extract(client: TestClient, amount: str):
    control = ExtractControl(
        site=SiteSpec(sql=SQL, key=["id"], columns=[{"name": "id", "type": "int"}, {"name": "amount", "type": amount}]),
        seed=1,
    )
    body = frames.json_frame(frames.CONTROL, control.model_dump())
    return client.post("/v1/extract", content=body, headers={"Content-Type": frames.MEDIA_TYPE})


def test_a_changed_column_is_a_409_with_its_code_and_changes(db):
    with TestClient(create_app(AgentSettings(db_url=f"sqlite:///{db}"))) as client:
        r = extract(client, "decimal(12,2)")
    assert r.status_code == 409
    body = r.json()
    assert "decimal(14,2) at the source but was decimal(12,2)" in body["detail"]
    assert body["code"] == "schema_changed"
    assert body["changes"] == [{"table": "t", "column": "amount", "old": "decimal(12,2)", "new": "decimal(14,2)"}]


def test_the_fingerprint_follows_the_columns_of_the_tables_read_and_the_schema_of_them_alone(db):
    with TestClient(create_app(AgentSettings(db_url=f"sqlite:///{db}"))) as client:
        first = extract(client, "decimal(14,2)")
        assert first.status_code == 200, first.text
        schema = client.get("/v1/schema", params={"table": ["t", "missing"]}).json()
        assert [t["name"] for t in schema["tables"]] == ["t"]
        read = SourceSchema.from_json(schema).tables.values()
        assert first.headers[FINGERPRINT_HEADER] == columns_fingerprint(read)
        with sqlite3.connect(db) as c:
            c.execute("CREATE TABLE unread (id INTEGER PRIMARY KEY)")  # not a table the query reads
        assert extract(client, "decimal(14,2)").headers[FINGERPRINT_HEADER] == first.headers[FINGERPRINT_HEADER]
        with sqlite3.connect(db) as c:
            c.execute("ALTER TABLE t ADD COLUMN memo TEXT")  # a column the query does not read
        after = extract(client, "decimal(14,2)")
        assert after.status_code == 200 and after.headers[FINGERPRINT_HEADER] != first.headers[FINGERPRINT_HEADER]
        assert len(client.get("/v1/schema").json()["tables"]) == 3
