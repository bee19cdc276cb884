"""Delta destinations on an S3-protocol server (moto's, on the loopback): random deltas
applied one commit each and read back by an independent reader (pyarrow reading the
Parquet files the log lists straight from the bucket), compaction and vacuum on the bucket,
and a server that fails the commit: nothing published half, nothing twice."""

from __future__ import annotations

import random
from collections import Counter

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from deltasieve_protocol.types import Column, LogicalType
from tests.support.multisets import random_bag_delta
from tests.support.s3_faults import LOSE, REFUSE, CommitFaults
from tests.support.s3_server import ACCESS_KEY_ID, REGION, SECRET_ACCESS_KEY
from warehouse.destinations import delta_upkeep, open_destination
from warehouse.destinations.delta import MAINTENANCE, SYNC_ID, DeltaDestination
from warehouse.multisets.multiset import COUNT
from warehouse.names import OP
from warehouse.view_options import DestinationSpec

KEYED = [Column("k", LogicalType("int")), Column("v", LogicalType("text"))]
KEYED_SCHEMA = pa.schema([pa.field(OP, pa.string()), pa.field("k", pa.int64()), pa.field("v", pa.string())])
BAG = [Column("a", LogicalType("int")), Column("b", LogicalType("text"))]
BAG_SCHEMA = pa.schema(
    [pa.field(OP, pa.string()), pa.field("a", pa.int64()), pa.field("b", pa.string()), pa.field(COUNT, pa.int64())]
)
#: Retries of a failing request inside delta-rs (object_store's): few and short, so that a
#: refused commit fails the apply in seconds rather than after its three minutes of retries.
QUICK_RETRIES = {"max_retries": "2", "retry_timeout": "5s", "backoff_config.init_backoff": "100ms"}


@pytest.fixture(scope="module")
def faults(s3_server):
    proxy = CommitFaults(s3_server.endpoint)
    yield proxy
    proxy.close()


def _filesystem(s3_server) -> pafs.S3FileSystem:
    return pafs.S3FileSystem(
        endpoint_override=s3_server.endpoint,
        access_key=ACCESS_KEY_ID,
        secret_key=SECRET_ACCESS_KEY,
        region=REGION,
    )


def _read_back(s3_server, uri: str) -> list[dict]:
    """The table's rows as an independent reader sees them: the log's current files, each
    read with pyarrow straight from the bucket (delta-rs writes no deletion vectors)."""
    files = DeltaTable(uri, storage_options=s3_server.storage_options()).file_uris()
    filesystem = _filesystem(s3_server)
    return [r for f in files for r in pq.read_table(f.removeprefix("s3://"), filesystem=filesystem).to_pylist()]


def _carried(s3_server, uri: str) -> list[str]:
    history = DeltaTable(uri, storage_options=s3_server.storage_options()).history()
    return [c[SYNC_ID] for c in reversed(history) if SYNC_ID in c]


def _keyed_lines(rng: random.Random, truth: dict) -> list[dict]:
    """A random keyed delta against `truth` (changed in place to the view after it)."""
    lines = []
    for k in rng.sample(sorted(truth), min(len(truth), rng.randrange(0, 5))):
        if rng.random() < 0.4:
            lines.append({OP: "delete", "k": k, "v": None})
            del truth[k]
        else:
            truth[k] = f"u{rng.random():.4f}"
            lines.append({OP: "update", "k": k, "v": truth[k]})
    for k in {rng.randrange(500) for _ in range(rng.randrange(1, 6))} - set(truth):
        truth[k] = rng.choice(["x", None])
        lines.append({OP: "insert", "k": k, "v": truth[k]})
    return lines


def _catch_up(destination: DeltaDestination, syncs: list[tuple[str, list[dict]]], columns, key, schema, multiset):
    """What the applier does (service/publishing.py catch_up): ask the table which sync it
    holds, then apply every later one in order."""
    held = destination.applied()
    ids = [s for s, _ in syncs]
    for n in range(ids.index(held) + 1 if held in ids else 0, len(syncs)):
        sync, lines = syncs[n]
        destination.apply(sync, n + 1, columns, key, [pa.RecordBatch.from_pylist(lines, schema=schema)], multiset)


def test_keyed_rounds_on_s3_with_compaction_and_vacuum(s3_server, monkeypatch, tmp_path):
    monkeypatch.setattr(delta_upkeep, "OPTIMIZE_EVERY", 3)  # compactions within a few syncs
    uri = f"s3://{s3_server.bucket()}/views/orders"
    spec = DestinationSpec(
        kind="delta",
        uri=uri,
        storage={
            "endpoint": s3_server.endpoint,
            "region": REGION,
            "access_key_id": ACCESS_KEY_ID,
            "secret_access_key": SECRET_ACCESS_KEY,
        },
    )
    destination = open_destination(spec, tmp_path, "orders", keep_versions=2)
    assert destination.applied() is None
    rng = random.Random(11)
    truth: dict = {}
    for n in range(8):
        lines = _keyed_lines(rng, truth)
        destination.apply(f"s{n}", n + 1, KEYED, ["k"], [pa.RecordBatch.from_pylist(lines, schema=KEYED_SCHEMA)], False)
        assert destination.applied() == f"s{n}"
        assert {r["k"]: r["v"] for r in _read_back(s3_server, uri)} == truth, f"after s{n}"
    assert _carried(s3_server, uri) == [f"s{n}" for n in range(8)]
    history = DeltaTable(uri, storage_options=s3_server.storage_options()).history()
    operations = [c["operation"] for c in history]
    assert "OPTIMIZE" in operations and "VACUUM END" in operations
    assert not any(SYNC_ID in c for c in history if MAINTENANCE in c)
    # vacuum deleted files from the bucket: what is left is about the last versions' files
    listed = _filesystem(s3_server).get_file_info(pafs.FileSelector(uri.removeprefix("s3://"), recursive=False))
    parquet = [f for f in listed if f.path.endswith(".parquet")]
    current = len(DeltaTable(uri, storage_options=s3_server.storage_options()).file_uris())
    assert len(parquet) <= 3 * 2 + current, len(parquet)


def test_multiset_rounds_on_s3(s3_server):
    uri = f"s3://{s3_server.bucket()}/bag"
    destination = DeltaDestination(uri, s3_server.storage_options())
    rng = random.Random(5)
    truth: Counter = Counter()
    for n in range(6):
        lines = random_bag_delta(rng, truth)
        destination.apply(f"s{n}", n + 1, BAG, [], [pa.RecordBatch.from_pylist(lines, schema=BAG_SCHEMA)], True)
        assert Counter((r["a"], r["b"]) for r in _read_back(s3_server, uri)) == +truth, f"sync {n}"
    assert _carried(s3_server, uri) == [f"s{n}" for n in range(6)]


@pytest.mark.parametrize("fault, times", [(REFUSE, None), (LOSE, 1)], ids=["refused", "answer-lost"])
@pytest.mark.parametrize("multiset", [False, True], ids=["keyed", "multiset"])
def test_a_commit_failing_at_the_server_is_published_once(s3_server, faults, fault, times, multiset):
    """The commit PUT refused every time (never stored), or its first answer lost (stored,
    unseen: delta-rs' retry of the PUT is then refused as the version exists, and its
    commit loop finds that version is its own commit by the transaction id it carries): the
    table holds the sync wholly or not at all, and the applier's next turn publishes it
    exactly once."""
    uri = f"s3://{s3_server.bucket()}/t"
    destination = DeltaDestination(uri, {**s3_server.storage_options(faults.endpoint), **QUICK_RETRIES})
    reader = DeltaDestination(uri, s3_server.storage_options())  # straight to the server
    columns, key, schema = (BAG, [], BAG_SCHEMA) if multiset else (KEYED, ["k"], KEYED_SCHEMA)
    if multiset:  # inserts only: a blind append, which a commit written twice would double
        syncs = [(f"s{n}", [{OP: "insert", "a": n, "b": "x", COUNT: 2}]) for n in range(3)]
    else:
        rng, truth = random.Random(3), {}
        syncs = [(f"s{n}", _keyed_lines(rng, truth)) for n in range(3)]
    _catch_up(destination, syncs[:2], columns, key, schema, multiset)
    before = _read_back(s3_server, uri)

    seen = len(faults.commits())
    faults.fail_commits(fault, times)
    try:
        _catch_up(destination, syncs, columns, key, schema, multiset)
        landed = True
    except Exception:  # the error delta-rs or the server gives: what matters is what the table holds
        landed = False
    finally:
        faults.heal()
    assert any(f == fault for f, _ in faults.commits()[seen:]), "the fault met a commit"
    held = reader.applied()
    if fault == REFUSE:
        assert not landed and held == "s1", "a refused commit publishes nothing"
        assert sorted(map(str, _read_back(s3_server, uri))) == sorted(map(str, before)), "nothing half"
    else:
        assert held == "s2", "the lost answer's commit landed"

    _catch_up(destination, syncs, columns, key, schema, multiset)  # the applier's next turn
    assert reader.applied() == "s2"
    assert _carried(s3_server, uri) == ["s0", "s1", "s2"], "each sync once"
    rows = _read_back(s3_server, uri)
    if multiset:
        assert Counter((r["a"], r["b"]) for r in rows) == Counter({(0, "x"): 2, (1, "x"): 2, (2, "x"): 2})
    else:
        assert {r["k"]: r["v"] for r in rows} == truth
