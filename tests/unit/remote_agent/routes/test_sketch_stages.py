"""/v1/sketch in stages: a small table that does not peel leaves the agent's table kept under
a session, and a wider one sent with that session peels without reading the source again.
Updated rows come as column digests and then as their changed cells (/v1/sketch/cells,
protocol 4), which `_answer` asks for and merges as the warehouse does; a request of
protocol 3, or one that asks (`updated_rows: "whole"`), gets them whole.

The agent runs in process over a real SQLite file; the warehouse's table is built from the
rows the warehouse would hold, as the sketch strategy builds it.
"""

from __future__ import annotations

import sqlite3

import pyarrow as pa
import pytest
from fastapi.testclient import TestClient

from deltasieve_protocol import column_digests, frames, iblt_arrow
from deltasieve_protocol.fingerprints import key_fingerprints, row_fingerprints, sketch_seeds
from deltasieve_protocol.iblt import Iblt
from deltasieve_protocol.models import (
    PROTOCOL_VERSION,
    ChangeTokenControl,
    FetchControl,
    SiteSpec,
    SketchCellsControl,
    SketchControl,
)
from deltasieve_protocol.types import Column, LogicalType
from deltasieve_protocol.wire import KEY_FP
from remote_agent.app import create_app
from remote_agent.errors import Gone
from remote_agent.settings import AgentSettings
from remote_agent.strategies.sketch import Reconciliations
from tests.support.agent_requests import check_timings

SECRET = 1234567
ROWS = 3_000


def _columns(key_type: str) -> list[Column]:
    return [Column("k", LogicalType.parse(key_type)), Column("v", LogicalType.parse("text"))]


def _source(key_type: str):
    key = (lambda i: i * 3 - 100) if key_type == "int" else (lambda i: f"key-{i:05d}")
    old = {key(i): f"v{i}" for i in range(ROWS)}
    new = dict(old)
    for i in range(0, 300, 3):  # 100 updates
        new[key(i)] = f"changed {i}"
    for i in range(300, 340):  # 40 deletes
        del new[key(i)]
    for i in range(ROWS, ROWS + 60):  # 60 inserts
        new[key(i)] = f"new {i}"
    return old, new


@pytest.fixture(scope="module", params=["int", "text"])
def setup(request, tmp_path_factory):
    key_type = request.param
    old, new = _source(key_type)
    db = tmp_path_factory.mktemp("sketch") / "t.db"
    with sqlite3.connect(db) as c:
        c.execute(f"CREATE TABLE t (k {'INTEGER' if key_type == 'int' else 'TEXT'} PRIMARY KEY, v TEXT)")
        c.executemany("INSERT INTO t VALUES (?, ?)", list(new.items()))
    with TestClient(create_app(AgentSettings(db_url=f"sqlite:///{db}"))) as client:
        yield client, key_type, old, new


#: key fingerprint -> key, of the warehouse's rows (what its fragment tells it)
NAMES: dict = {}


def _table(key_type: str, rows: dict, width: int) -> Iblt:
    columns = _columns(key_type)
    batch = pa.table(
        {"k": list(rows), "v": list(rows.values())},
        schema=pa.schema([pa.field(c.name, c.type.arrow()) for c in columns]),
    )
    key_seed, row_seed = sketch_seeds(SECRET)
    fps = key_fingerprints(batch, columns[:1], key_seed)
    NAMES.update(zip(fps.tolist(), rows))
    t = Iblt(3 * width, 3, SECRET)
    t.add(fps, row_fingerprints(batch, columns, row_seed))
    return t


def _post(
    client,
    key_type: str,
    old: dict,
    width: int,
    widest: int,
    session: str | None = None,
    compact=True,
    batch_rows: int = 16_384,
    protocol: int = PROTOCOL_VERSION,
    row_check_bits: int = 64,
    updated_rows: str = "digests",
    change_token: dict | None = None,
):
    columns = [c.to_json() for c in _columns(key_type)]
    control = SketchControl.model_construct(  # unchecked: the agent is the one to check
        site=SiteSpec(sql="SELECT t.k, t.v FROM t", key=["k"], columns=columns),
        seed=SECRET,
        width=widest,
        session=session,
        protocol=protocol,
        batch_rows=batch_rows,
        row_check_bits=row_check_bits,
        updated_rows=updated_rows,
        change_token=change_token,
    )
    table = _table(key_type, old, width)
    table = table.to_compact() if compact else table
    content = frames.json_frame(frames.CONTROL, control.model_dump()) + frames.arrow_frame(
        frames.SKETCH, iblt_arrow.to_arrow(table)
    )
    return client.post("/v1/sketch", content=content, headers={"Content-Type": frames.MEDIA_TYPE})


def _answer(response, client=None, key_type: str = "int", old: dict | None = None) -> tuple[dict, list[dict], list]:
    """The summary, the new and changed rows and the deleted keys of a sketch answer; with
    `client`, the changed cells of the updated rows asked for and merged into whole rows."""
    assert response.status_code == 200, response.text
    rows, deleted, summary, digests = [], [], None, []
    for f in frames.read_frames([response.content]):
        if f.kind == frames.ROWS:
            rows.extend(f.batch().to_pylist())
        elif f.kind == frames.UPDATED_DIGESTS:
            digests.append(f.batch())
        elif f.kind == frames.DELETED_KEYS:
            deleted.extend(f.batch().column("k").to_pylist())
        elif f.kind == frames.GONE_FINGERPRINTS:  # keys the agent cannot name: the warehouse can
            deleted.extend(NAMES[fp] for fp in f.batch().column(KEY_FP).to_pylist())
        elif f.kind == frames.SUMMARY:
            summary = f.json()
        else:
            raise AssertionError(f"unexpected frame {f.kind!r}: {f.json() if f.kind == frames.ERROR else ''}")
    assert summary is not None
    if digests:
        assert client is not None and old is not None and summary["updated_rows"] == sum(map(len, digests))
        rows.extend(_cells(client, key_type, old, pa.Table.from_batches(digests), summary))
    return summary, rows, deleted


def _cells(client, key_type: str, old: dict, digests: pa.Table, summary: dict) -> list[dict]:
    """The updated rows, rebuilt from `old` and the cells whose digests differ (as sketch/columns.py)."""
    columns = _columns(key_type)
    schema = pa.schema([pa.field(c.name, c.type.arrow()) for c in columns])
    keys = digests.column("k").to_pylist()
    before = pa.table({"k": keys, "v": [old[k] for k in keys]}, schema=schema)
    _, row_seed = sketch_seeds(SECRET)
    digest_seed = column_digests.exchange_seed(row_seed, summary["digest_salt"])
    changed = column_digests.digests_matrix(digests.column(column_digests.DIGESTS), 2) != (
        column_digests.column_digests(before, columns, digest_seed)
    )
    # a digest in 256 collides (their salt is drawn per exchange): those rows are fetched whole
    assert not changed[:, 0].any() and changed[:, 1].sum() >= len(keys) // 2
    control = SketchCellsControl(
        site=SiteSpec(sql="SELECT t.k, t.v FROM t", key=["k"], columns=[c.to_json() for c in columns]),
        seed=SECRET,
        session=summary["session"],
    )
    bitmaps = pa.record_batch([column_digests.bitmap_array(changed)], names=[column_digests.CHANGED])
    content = frames.json_frame(frames.CONTROL, control.model_dump()) + frames.arrow_frame(
        frames.CHANGED_COLUMNS, bitmaps
    )
    response = client.post("/v1/sketch/cells", content=content, headers={"Content-Type": frames.MEDIA_TYPE})
    assert response.status_code == 200, response.text
    got = [f.batch() for f in frames.read_frames([response.content]) if f.kind == frames.CELLS]
    cells = pa.Table.from_batches(got).cast(schema).to_pylist()
    asked = changed.any(axis=1)
    rebuilt, collided = [], []
    for i, k in enumerate(keys):
        v = cells.pop(0)["v"] if asked[i] else old[k]
        right = row_fingerprints(pa.table({"k": [k], "v": [v]}, schema=schema), columns, row_seed)
        assert column_digests.checks_match(right, digests.column(column_digests.CHECK).slice(i, 1))[0] == asked[i]
        if asked[i]:
            rebuilt.append({"k": k, "v": v})
        else:  # its digests collided: fetched whole, as the warehouse does
            collided.append(k)
    rows = rebuilt + (_fetch(client, control.site, schema, collided) if collided else [])
    if column_digests.HASH_XOR in summary:  # short checks: the whole hashes' XOR, once
        hashes = row_fingerprints(pa.Table.from_pylist(rows, schema=schema), columns, row_seed)
        assert column_digests.hash_xor(hashes) == summary[column_digests.HASH_XOR]
    return rows


def _fetch(client, site: SiteSpec, schema: pa.Schema, keys: list) -> list[dict]:
    """The current rows of `keys` (POST /v1/fetch)."""
    content = frames.json_frame(frames.CONTROL, FetchControl(site=site).model_dump()) + frames.arrow_frame(
        frames.FETCH_KEYS, pa.record_batch([pa.array(keys, schema.field("k").type)], names=["k"])
    )
    response = client.post("/v1/fetch", content=content, headers={"Content-Type": frames.MEDIA_TYPE})
    assert response.status_code == 200, response.text
    return [
        row for f in frames.read_frames([response.content]) if f.kind == frames.ROWS for row in f.batch().to_pylist()
    ]


def test_a_probe_that_does_not_peel_keeps_the_table_for_a_wider_stage(setup):
    client, key_type, old, new = setup
    first, rows, deleted = _answer(_post(client, key_type, old, width=16, widest=16 * 40))
    assert not first["complete"] and first["session"] and not rows and not deleted
    assert first["rows_scanned"] == len(new) and 0 <= first["empty_cells"] < 48
    second, rows, deleted = _answer(
        _post(client, key_type, old, width=16 * 20, widest=16 * 40, session=first["session"]), client, key_type, old
    )
    assert second["complete"], second
    assert "rows_scanned" in second and second["rows_scanned"] == len(new)  # the read of the first stage
    changed = {k: v for k, v in new.items() if old.get(k) != v}
    assert {r["k"]: r["v"] for r in rows} == changed
    assert sorted(deleted) == sorted(set(old) - set(new))
    assert second["differences"] == 2 * 100 + 40 + 60
    # the first stage read and hashed the source; the second only looked rows up
    for summary in (first, second):
        check_timings(summary["timings"], summary["elapsed_s"])
    assert first["timings"]["read_s"] > 0 and first["timings"]["hash_s"] > 0, first
    assert second["timings"]["read_s"] == 0 and second["timings"]["lookup_s"] > 0, second
    # the session ended with the complete answer
    again = _post(client, key_type, old, width=16 * 20, widest=16 * 40, session=first["session"])
    assert again.status_code == 410 and "start the exchange again" in again.json()["detail"]


def test_short_row_checks_send_two_bytes_a_row_and_the_xor_of_the_whole_hashes(setup):
    client, key_type, old, new = setup
    response = _post(client, key_type, old, width=16 * 20, widest=16 * 20, row_check_bits=16)
    checks = [
        f.batch().column(column_digests.CHECK)
        for f in frames.read_frames([response.content])
        if f.kind == frames.UPDATED_DIGESTS
    ]
    assert checks and all(c.type == pa.uint16() for c in checks)
    summary, rows, _ = _answer(response, client, key_type, old)
    assert summary["complete"] and len(summary[column_digests.HASH_XOR]) == 16, summary
    assert {r["k"]: r["v"] for r in rows} == {k: v for k, v in new.items() if old.get(k) != v}


@pytest.mark.parametrize("ask", [{"protocol": 3}, {"updated_rows": "whole"}], ids=["protocol 3", "asked whole"])
def test_a_warehouse_of_protocol_3_or_that_asks_gets_updated_rows_whole(setup, ask):
    client, key_type, old, new = setup
    summary, rows, _ = _answer(_post(client, key_type, old, width=16 * 20, widest=16 * 20, **ask))
    assert summary["complete"] and "updated_rows" not in summary and "session" not in summary, summary
    assert {r["k"]: r["v"] for r in rows} == {k: v for k, v in new.items() if old.get(k) != v}


def test_each_exchange_salts_its_digests_afresh(setup):
    """Two exchanges of the same change draw two salts, so that values whose digests
    collided in one exchange most likely do not in the next."""
    client, key_type, old, _ = setup
    answers = []
    for _ in range(2):
        response = _post(client, key_type, old, width=16 * 20, widest=16 * 20)
        got = list(frames.read_frames([response.content]))
        digests = pa.Table.from_batches([f.batch() for f in got if f.kind == frames.UPDATED_DIGESTS])
        summary = next(f.json() for f in got if f.kind == frames.SUMMARY)
        answers.append((summary["digest_salt"], digests.sort_by("k").column(column_digests.DIGESTS).to_pylist()))
    (salt, digests), (other_salt, other_digests) = answers
    assert salt != other_salt and len(digests) == 100
    assert digests != other_digests  # one seed would give the same 200 bytes


def test_a_change_token_riding_on_the_first_stage_ends_it_unread_when_it_is_the_same(setup):
    """The token's answer rides in the summary; a token equal to `since` ends the stage before
    any row is read, and another one lets the stage run as without it."""
    client, key_type, old, new = setup
    site = SiteSpec(sql="SELECT t.k, t.v FROM t", key=["k"], columns=[c.to_json() for c in _columns(key_type)])
    asked = client.post(
        "/v1/change_token",
        content=frames.json_frame(frames.CONTROL, ChangeTokenControl(site=site).model_dump()),
        headers={"Content-Type": frames.MEDIA_TYPE},
    )
    token = list(frames.read_frames([asked.content]))[-1].json()["change_token"]
    assert token is not None
    same, rows, deleted = _answer(_post(client, key_type, old, 16, 16 * 40, change_token={"since": token}))
    assert same["unchanged"] and same["complete"] and same["rows_scanned"] == 0 and not rows and not deleted, same
    assert same["change_token"]["change_token"] == token and same["change_token"]["unchanged"], same
    ridden = _post(client, key_type, old, 16 * 20, 16 * 20, change_token={"since": "another"})
    moved, rows, _ = _answer(ridden, client, key_type, old)
    assert moved["complete"] and "unchanged" not in moved and moved["rows_scanned"] == len(new), moved
    assert moved["change_token"]["change_token"] == token and not moved["change_token"]["unchanged"], moved
    assert {r["k"]: r["v"] for r in rows} == {k: v for k, v in new.items() if old.get(k) != v}


def test_no_change_peels_at_the_probe(setup):
    client, key_type, _, new = setup
    summary, rows, deleted = _answer(_post(client, key_type, new, width=16, widest=16 * 40))
    assert summary["complete"] and summary["differences"] == 0 and not rows and not deleted
    assert "session" not in summary


def test_small_batches_give_the_same_answer(setup):
    """The scan folds each batch as it reads it, its counts normalized once after the read:
    many small batches change nothing of the answer."""
    client, key_type, old, new = setup
    summary, rows, deleted = _answer(
        _post(client, key_type, old, width=16 * 20, widest=16 * 20, batch_rows=700), client, key_type, old
    )
    assert summary["complete"] and summary["rows_scanned"] == len(new)
    assert {r["k"]: r["v"] for r in rows} == {k: v for k, v in new.items() if old.get(k) != v}
    assert sorted(deleted) == sorted(set(old) - set(new))


@pytest.mark.parametrize(
    "width, widest, compact, status, words",
    [
        (16, 40, True, 400, "does not divide"),
        (16, 32, False, 400, "compact"),
        (16, 2**22, True, 400, "width"),
    ],
)
def test_bad_stages_are_refused(setup, width, widest, compact, status, words):
    client, key_type, old, _ = setup
    r = _post(client, key_type, old, width=width, widest=widest, compact=compact)
    assert r.status_code == status, r.text
    assert words in r.text


def test_an_unknown_session_is_gone(setup):
    client, key_type, old, _ = setup
    r = _post(client, key_type, old, width=16, widest=32, session="f" * 32)
    assert r.status_code == 410 and "not held here" in r.json()["detail"]


class _Rec:
    def __init__(self):
        self.closed = False
        self.touched = float("inf")

    def close(self):
        self.closed = True


def test_kept_reconciliations_are_bounded_and_taken_once():
    kept = Reconciliations(limit=2)
    recs = [_Rec() for _ in range(3)]
    ids = [kept.keep(r) for r in recs]
    assert recs[0].closed and not recs[1].closed and len(kept) == 2  # the oldest went
    with pytest.raises(Gone):
        kept.take(ids[0])
    assert kept.take(ids[2]) is recs[2]
    with pytest.raises(Gone):
        kept.take(ids[2])
    expired = Reconciliations(limit=2, ttl_s=0.0)
    rec = _Rec()
    rec.touched = -1.0
    session = expired.keep(rec)
    with pytest.raises(Gone):
        expired.take(session)
    assert rec.closed
    kept.close()
    assert recs[1].closed


def test_an_agent_short_of_memory_builds_a_narrower_table_and_says_so(tmp_path):
    """1 MiB holds 49,932 cells (21 bytes each): asked for 3 x 16 x 2,048, the agent builds
    3 x 16 x 1,024, names that width, and refuses a later stage wider than what it holds."""
    key_type = "int"
    old, new = _source(key_type)
    db = tmp_path / "t.db"
    with sqlite3.connect(db) as c:
        c.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)")
        c.executemany("INSERT INTO t VALUES (?, ?)", list(new.items()))
    with TestClient(create_app(AgentSettings(db_url=f"sqlite:///{db}", sketch_table_mib=1))) as client:
        first, rows, _ = _answer(_post(client, key_type, old, width=16, widest=16 * 2_048))
        assert not first["complete"] and first["width"] == 16 * 1_024, first
        wider = _post(client, key_type, old, width=16 * 2_048, widest=16 * 2_048, session=first["session"])
        assert wider.status_code == 400 and "does not divide" in wider.text
        first, _, _ = _answer(_post(client, key_type, old, width=16, widest=16 * 2_048))
        second, rows, deleted = _answer(
            _post(client, key_type, old, width=16 * 32, widest=16 * 2_048, session=first["session"]),
            client,
            key_type,
            old,
        )
        assert second["complete"] and len(rows) == 160 and len(deleted) == 40, second
