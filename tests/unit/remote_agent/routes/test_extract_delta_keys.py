"""Units and unit keys sent delta-coded (`u`, `k` frames) mean exactly what plain `U`, `K` frames mean.

The agent runs in process over a real SQLite file; the same units go once with plain key
frames and once with delta-coded ones, and the answers must be the same frames.
"""

from __future__ import annotations

import sqlite3

import pyarrow as pa
import pytest
from fastapi.testclient import TestClient

from deltasieve_protocol import frames
from deltasieve_protocol.encoding import combine, hash_to_bytes, row_hashes
from deltasieve_protocol.models import ExtractControl, SiteSpec
from deltasieve_protocol.types import Column, LogicalType
from deltasieve_protocol.wire import HASH, UID
from remote_agent.app import create_app
from remote_agent.settings import AgentSettings
from tests.support.agent_requests import check_timings

COLUMNS = [{"name": "id", "type": "int"}, {"name": "v", "type": "text"}]
SQL = "SELECT t.id, t.v FROM t"


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    db = tmp_path_factory.mktemp("delta") / "t.db"
    with sqlite3.connect(db) as c:
        c.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
        c.executemany("INSERT INTO t VALUES (?, ?)", [(i * 7 - 300, f"v{i}") for i in range(200)])
    with TestClient(create_app(AgentSettings(db_url=f"sqlite:///{db}"))) as client:
        yield client


def body(kind: bytes, keys: pa.RecordBatch, units: pa.RecordBatch) -> bytes:
    """Plain K and U frames, or (kind `k`) delta-coded k and u frames."""
    control = ExtractControl(site=SiteSpec(sql=SQL, key=["id"], columns=COLUMNS), seed=5)
    if kind == frames.UNIT_KEYS_DELTA:
        unit_frame = frames.arrow_frame(frames.UNITS_DELTA, frames.delta_encode(units))
        key_frame = frames.arrow_frame(kind, frames.delta_encode(keys))
    else:
        unit_frame, key_frame = frames.arrow_frame(frames.UNITS, units), frames.arrow_frame(kind, keys)
    return frames.json_frame(frames.CONTROL, control.model_dump()) + unit_frame + key_frame


def answer(client, content: bytes) -> list:
    r = client.post("/v1/extract", content=content, headers={"Content-Type": frames.MEDIA_TYPE})
    assert r.status_code == 200, r.text
    out = []
    for f in frames.read_frames([r.content]):
        decoded = f.json() if f.kind == frames.SUMMARY else f.batch().to_pylist()
        if f.kind == frames.SUMMARY:
            check_timings(decoded["timings"], decoded["elapsed_s"])
            for timing in ("elapsed_s", "scan_s", "timings", "pacing"):  # pacing: rows_per_s is a rate
                decoded.pop(timing, None)
        out.append((f.kind, decoded))
    return out


def test_delta_coded_keys_get_the_same_answer_as_plain_ones(client):
    # three units over keys in descending and ascending runs (negative differences too);
    # the first unit's hash is right, the second's is wrong, the third lost a key (-1000)
    ids = [i * 7 - 300 for i in range(200)]
    members = {1: ids[10:20], 2: ids[40:30:-1], 3: ids[100:110] + [-1000]}
    columns = [Column("id", LogicalType.parse("int")), Column("v", LogicalType.parse("text"))]
    rows = {i: (i, f"v{(i + 300) // 7}") for i in ids}

    def unit_hash(keys):
        present = [rows[k] for k in keys if k in rows]
        table = pa.table({"id": [r[0] for r in present], "v": [r[1] for r in present]})
        return hash_to_bytes(combine(row_hashes(table, columns, 5, 128)), 128)

    units = pa.RecordBatch.from_arrays(
        [
            pa.array(list(members), pa.int64()),
            pa.array([unit_hash(members[1]), b"\x00" * 16, unit_hash(members[3])], pa.binary(16)),
        ],
        names=[UID, HASH],
    )
    keys = pa.RecordBatch.from_arrays(
        [
            pa.array([u for u, ks in members.items() for _ in ks], pa.int64()),
            pa.array([k for ks in members.values() for k in ks], pa.int64()),
        ],
        names=[UID, "id"],
    )
    plain = answer(client, body(frames.UNIT_KEYS, keys, units))
    coded = answer(client, body(frames.UNIT_KEYS_DELTA, keys, units))
    assert coded == plain
    kinds = [k for k, _ in plain]
    assert frames.CHANGED_ROWS in kinds and frames.DELETED_KEYS in kinds and frames.UNGROUPED_ROWS in kinds


def test_a_delta_frame_with_nulls_is_a_clear_400(client):
    units = pa.RecordBatch.from_arrays(
        [pa.array([1], pa.int64()), pa.array([b"\x00" * 16], pa.binary(16))], names=[UID, HASH]
    )
    keys = pa.RecordBatch.from_arrays(
        [pa.array([1, 1], pa.int64()), pa.array([None, 5], pa.int64())], names=[UID, "id"]
    )
    content = body(frames.UNIT_KEYS, keys, units)  # NULLs cannot be delta-coded: swap the kind byte instead
    control_len = len(
        frames.json_frame(
            frames.CONTROL, ExtractControl(site=SiteSpec(sql=SQL, key=["id"], columns=COLUMNS), seed=5).model_dump()
        )
    )
    units_len = len(frames.arrow_frame(frames.UNITS, units))
    at = control_len + units_len
    content = content[:at] + frames.UNIT_KEYS_DELTA + content[at + 1 :]
    r = client.post("/v1/extract", content=content, headers={"Content-Type": frames.MEDIA_TYPE})
    assert r.status_code == 400 and "NULL" in r.json()["detail"], r.text
