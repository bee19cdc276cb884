"""A sketch request in the binary table form and with its site query named by reference.

The agent runs in process over a real SQLite file. A reference it does not hold is refused
(409 unknown_site) before anything is read; once sent the site in full, it reads the
reference as that site and answers as it did in full; a binary table that is cut short or
garbled is a 400, never a 5xx. The binary form round-trips any compact table.
"""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest
from fastapi.testclient import TestClient

from deltasieve_protocol import frames, iblt_bytes
from deltasieve_protocol.iblt import Iblt
from deltasieve_protocol.models import SiteSpec, SketchControl
from deltasieve_protocol.siterefs import UNKNOWN_SITE, by_reference, site_ref
from remote_agent.app import create_app
from remote_agent.settings import AgentSettings

SECRET = 99
SITE = SiteSpec(
    sql="SELECT t.k, t.v FROM t", key=["k"], columns=[{"name": "k", "type": "int"}, {"name": "v", "type": "text"}]
)


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    db = tmp_path_factory.mktemp("refs") / "t.db"
    with sqlite3.connect(db) as c:
        c.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)")
        c.executemany("INSERT INTO t VALUES (?, ?)", [(i, f"v{i}") for i in range(200)])
    with TestClient(create_app(AgentSettings(db_url=f"sqlite:///{db}"))) as client:
        yield client


def _post(client, control: dict, table: bytes):
    body = frames.json_frame(frames.CONTROL, control) + frames.frame(frames.SKETCH_CELLS, table)
    return client.post("/v1/sketch", content=body, headers={"Content-Type": frames.MEDIA_TYPE})


def _summary(response) -> dict:
    assert response.status_code == 200, response.text
    found = [f for f in frames.read_frames([response.content]) if f.kind == frames.SUMMARY]
    return found[0].json()


def test_a_reference_is_refused_until_the_site_was_sent_in_full_then_reads_as_it(client):
    control = SketchControl(site=SITE, seed=SECRET).model_dump(exclude_defaults=True) | {"protocol": 3}
    empty = iblt_bytes.to_bytes(Iblt(3, 3, SECRET, compact=True))
    ref = site_ref(control["site"])
    refused = _post(client, by_reference(control, ref), empty)
    assert refused.status_code == 409 and refused.json()["code"] == UNKNOWN_SITE, refused.text
    full = _summary(_post(client, control, empty))
    by_ref = _summary(_post(client, by_reference(control, ref), empty))
    # an empty warehouse table against 200 rows: the same read and the same difference either way
    seen = ("rows_scanned", "complete", "cells", "empty_cells")
    assert [full[k] for k in seen] == [by_ref[k] for k in seen] == [200, False, 3, 0], (full, by_ref)


@pytest.mark.parametrize("cut", [0, 3, 10, -1])
def test_a_binary_table_cut_short_or_garbled_is_a_400(client, cut):
    control = SketchControl(site=SITE, seed=SECRET).model_dump()
    table = Iblt(30, 3, SECRET, compact=True)
    table.add(np.arange(5, dtype=np.uint64), np.arange(5, dtype=np.uint64) + 7)
    data = iblt_bytes.to_bytes(table)
    sent = data[:cut] if cut >= 0 else data[:6] + bytes(len(data) - 6)  # a compressed body of zeros
    response = _post(client, control, sent)
    assert response.status_code == 400 and "bad sketch table" in response.json()["detail"], response.text


@pytest.mark.parametrize("cells", [3, 48, 3 * 1024])
def test_the_binary_form_round_trips_any_compact_table(cells):
    rng = np.random.default_rng(cells)
    table = Iblt(cells, 3, SECRET, compact=True)
    n = 10 * cells
    table.add(rng.integers(0, 2**40, n, dtype=np.int64), rng.integers(0, 2**63, n, dtype=np.int64))
    back = iblt_bytes.from_bytes(iblt_bytes.to_bytes(table), SECRET)
    for name in ("count", "key_sum", "hash_sum", "check_sum"):
        assert (getattr(back, name) == getattr(table, name)).all(), name
    assert len(iblt_bytes.to_bytes(table)) <= iblt_bytes.table_bytes(cells)
