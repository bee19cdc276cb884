"""The agent's side of the changed-columns exchange that follows a peeled sketch (protocol 4).

A row whose key is on both sides of the peeled difference was updated: instead of the
whole row the agent sends its key, a digest per column and its 64-bit row hash, or its
low 16 bits when the request asks for short checks (`row_check_bits`), the XOR of the whole
ones then in the summary (UPDATED_DIGESTS, see deltasieve_protocol/column_digests.py; the
digests salted afresh for the exchange), and holds the row with its reconciliation under the session id its summary
names. The warehouse answers with a bitmap of the columns to send per row (POST
/v1/sketch/cells, CHANGED_COLUMNS), in the order the rows came; the agent sends the rows
that ask for a cell, in order, with those cells and every other cell NULL (CELLS), and
forgets the session. New rows (a key only the source holds) still go whole (ROWS).

Memory: the updated rows, as read by the lookup, until the cells request or the session's
expiry: bounded by the change, not by the table.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from deltasieve_protocol import column_digests, frames
from deltasieve_protocol.fingerprints import row_fingerprints, sketch_seeds
from deltasieve_protocol.types import Column
from remote_agent.errors import BadRequest

#: Rows per CELLS frame: frames stay small whatever the change.
CELLS_BATCH_ROWS = 65_536


class UpdatedRows:
    """The updated rows of one exchange: split from the looked-up rows, sent as digests, kept."""

    def __init__(
        self,
        updated_keys: np.ndarray,
        key: list[Column],
        columns: list[Column],
        seed: int,
        digest_bits: int,
        check_bits: int = 64,
    ):
        self.updated_keys = updated_keys
        self.digest_bits = digest_bits
        #: bits of each row's row hash sent (64, or the short check with `hash_xor` in the summary)
        self.check_bits = check_bits
        self.hash_xor = np.uint64(0)
        self.key = key
        self.columns = columns
        _, self.row_seed = sketch_seeds(seed)
        # a fresh salt per exchange: two values whose digests collide do so in this exchange only
        self.salt = secrets.randbits(column_digests.SALT_BITS)
        self.digest_seed = column_digests.exchange_seed(self.row_seed, self.salt)
        self.kept: list[pa.RecordBatch] = []

    @property
    def rows(self) -> int:
        return sum(b.num_rows for b in self.kept)

    def split(self, batch: pa.RecordBatch, fingerprints: np.ndarray) -> Iterator[bytes]:
        """The frames for a batch of looked-up rows: the new rows whole (ROWS), the updated
        ones as key, digests and check (UPDATED_DIGESTS), those kept for the cells request."""
        updated = np.isin(fingerprints, self.updated_keys)
        if not updated.any():
            yield frames.arrow_frame(frames.ROWS, batch)
            return
        if not updated.all():
            yield frames.arrow_frame(frames.ROWS, batch.filter(pa.array(~updated)))
        rows = batch.filter(pa.array(updated))
        self.kept.append(rows)
        keys = rows.select([c.name for c in self.key])
        keys = keys.append_column(
            column_digests.DIGESTS,
            column_digests.digests_array(
                column_digests.column_digests(rows, self.columns, self.digest_seed, self.digest_bits)
            ),
        )
        hashes = row_fingerprints(rows, self.columns, self.row_seed)
        self.hash_xor ^= np.bitwise_xor.reduce(hashes, initial=np.uint64(0))
        keys = keys.append_column(column_digests.CHECK, column_digests.row_checks(hashes, self.check_bits))
        yield frames.arrow_frame(frames.UPDATED_DIGESTS, keys)

    def summary(self) -> dict:
        """What the sketch answer's summary says of the updated rows."""
        summary: dict[str, int | str] = {
            "updated_rows": self.rows,
            "digest_bits": self.digest_bits,
            "digest_salt": self.salt,
        }
        if self.check_bits != 64:
            summary[column_digests.HASH_XOR] = column_digests.hash_xor(np.array([self.hash_xor], np.uint64))
        return summary


def cells_answer(updated: UpdatedRows, bitmaps: list[pa.RecordBatch]) -> Iterator[bytes]:
    """The answer of /v1/sketch/cells: the cells each bitmap asks for (CELLS), then a summary.

    The bitmaps name the kept rows in the order they were sent; 400 when their count differs.
    The summary's `elapsed_s` counts from the call to the summary, as every answer's does.
    """
    started = time.monotonic()
    changed = np.concatenate(
        [np.zeros((0, len(updated.columns)), bool)]
        + [column_digests.bitmap_matrix(b.column(column_digests.CHANGED), len(updated.columns)) for b in bitmaps]
    )
    if len(changed) != updated.rows:
        raise BadRequest(f"the cells request holds {len(changed)} bitmaps for the {updated.rows} updated rows sent")
    asked = changed.any(axis=1)
    if asked.any():
        # the bitmap names the site query's columns in order; the rows carry the same
        rows = pa.Table.from_batches(updated.kept).filter(pa.array(asked))
        cells = column_digests.only_changed(rows, changed[asked])
        for batch in cells.to_batches(max_chunksize=CELLS_BATCH_ROWS):
            yield frames.arrow_frame(frames.CELLS, batch)
    summary = {"rows": len(changed), "cells": int(changed.sum()), "elapsed_s": round(time.monotonic() - started, 4)}
    yield frames.json_frame(frames.SUMMARY, summary)
