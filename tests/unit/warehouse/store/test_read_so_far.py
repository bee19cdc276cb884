"""The rows a full read kept from failed attempts (warehouse/store/read_so_far.py), on real Parquet files."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from warehouse.store.read_so_far import ReadSoFar

SCHEMA = pa.schema([("region", pa.string()), ("code", pa.int64()), ("v", pa.string())])


def _filed(staging, *batches: list[tuple]):
    """An attempt's staging file as the Sink leaves it: one row group per frame received."""
    staging.mkdir(parents=True, exist_ok=True)
    path = staging / "returned.parquet"
    with pq.ParquetWriter(path, SCHEMA) as writer:
        for rows in batches:
            writer.write_table(pa.Table.from_pylist([dict(zip(SCHEMA.names, r)) for r in rows], SCHEMA))
    return path


def _rows(so_far: ReadSoFar) -> list[tuple]:
    return [tuple(r.values()) for p in so_far.paths for r in pq.read_table(p).to_pylist()]


def test_parts_follow_one_another_and_survive_the_next_attempt(tmp_path):
    staging, key = tmp_path / "site-0", ["region", "code"]
    so_far = ReadSoFar.beside(staging)
    assert so_far.after is None and so_far.paths == []
    so_far.take(
        _filed(staging, [("a", 1, "x"), ("a", 2, "y")], [("b", 1, "z")], []), key, continued=False, complete=False
    )
    assert (so_far.rows, so_far.after) == (3, ["b", 1])
    again = ReadSoFar.beside(staging)  # the next attempt's SiteRun reads the record afresh
    assert again == so_far and not (staging / "returned.parquet").exists()
    again.take(_filed(staging, [("c", 5, None)]), key, continued=True, complete=True)
    assert _rows(again) == [("a", 1, "x"), ("a", 2, "y"), ("b", 1, "z"), ("c", 5, None)]
    assert again.after == ["c", 5] and ReadSoFar.beside(staging).rows == 4


def test_an_attempt_that_failed_before_a_row_keeps_what_was_kept(tmp_path):
    staging, key = tmp_path / "site-0", ["region", "code"]
    so_far = ReadSoFar.beside(staging)
    so_far.take(_filed(staging, [("a", 1, "x")]), key, continued=False, complete=False)
    so_far.take(_filed(staging), key, continued=False, complete=False)  # no answer at all: no headers either
    so_far.take(tmp_path / "never-written.parquet", key, continued=False, complete=False)
    assert _rows(so_far) == [("a", 1, "x")] and so_far.after == ["a", 1]


def test_an_answer_from_the_first_key_replaces_what_was_kept(tmp_path):
    """An agent that predates resume_after (or cannot resume by this key) reads from the start."""
    staging, key = tmp_path / "site-0", ["region", "code"]
    so_far = ReadSoFar.beside(staging)
    so_far.take(_filed(staging, [("a", 1, "x"), ("a", 2, "y")]), key, continued=False, complete=False)
    so_far.take(_filed(staging, [("a", 1, "x2")]), key, continued=False, complete=False)
    assert _rows(so_far) == [("a", 1, "x2")] and so_far.after == ["a", 1]
    so_far.take(_filed(staging), key, continued=False, complete=True)  # a whole answer, the query now empty
    assert so_far.paths == [] and so_far.after is None and so_far.rows == 0
