"""The agent's side of the group-hash strategy: the units a request sends, indexed.

The warehouse sends units (a uid, the keys of a group of tuples, the group's hash); the
scan of `extraction.py` adds each row it meets to its unit's running sum, and at the end
the units tell which of them lost keys and which differ.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from deltasieve_protocol.encoding import LIMB_BITS, carry_limbs, limbs_from_bytes
from deltasieve_protocol.scatter import Scatter
from deltasieve_protocol.types import Column
from deltasieve_protocol.wire import UID, key_values
from remote_agent.errors import BadRequest
from remote_agent.keyindex import KeyIndex
from remote_agent.strategies.checks import wire_hashes


class UnitIndex:
    """The units of one request: their keys, and per unit its uid, expected hash, and the
    running sum and count of the rows the scan met.

    Columnar throughout (numpy arrays and a `KeyIndex`), so a request of millions of keys
    costs tens of bytes a key on the agent, not the hundreds a dict of Python objects did.
    """

    def __init__(self, key: Sequence[Column], bits: int):
        self.key = list(key)
        self.bits = bits
        self.keys = KeyIndex(self.key, "unit")
        self._uid_parts: list[np.ndarray] = []
        self._hash_parts: list[bytes] = []
        self.uids = np.empty(0, np.int64)
        self.expected = np.empty((0, bits // LIMB_BITS), np.uint64)
        self._uid_order: np.ndarray | None = None
        self.sums = self.expected.copy()
        self.counts = np.empty(0, np.int64)
        self.sizes = np.empty(0, np.int64)

    def add_units(self, batch: pa.RecordBatch) -> None:
        hashes = wire_hashes(batch, self.bits, "unit hash", "hash_bits")
        uids = batch.column(UID).to_numpy(zero_copy_only=False)
        if batch.column(UID).null_count:
            raise BadRequest("a unit has no uid")
        self._uid_parts.append(uids.astype(np.int64))
        self._hash_parts.extend(hashes)

    def _freeze_units(self) -> np.ndarray:
        """Sort the units added (once; a unit sent twice is a BadRequest); their uids' sort order."""
        if self._uid_order is not None:
            return self._uid_order
        self.uids = np.concatenate(self._uid_parts) if self._uid_parts else np.empty(0, np.int64)
        self.expected = limbs_from_bytes(self._hash_parts, self.bits) if self._hash_parts else self.expected
        self._uid_parts, self._hash_parts = [], []
        self._uid_order = np.argsort(self.uids, kind="stable")
        ordered = self.uids[self._uid_order]
        twice = np.flatnonzero(ordered[1:] == ordered[:-1])
        if len(twice):
            raise BadRequest(f"unit {int(ordered[twice[0]])} sent twice")
        self.sums = np.zeros_like(self.expected)
        self.counts = np.zeros(len(self.uids), np.int64)
        return self._uid_order

    def add_keys(self, batch: pa.RecordBatch) -> None:
        """Keys with the uid of their unit; every unit must have been added before."""
        uid_order = self._freeze_units()
        if batch.column(UID).null_count:
            raise BadRequest("a unit key has no uid")
        uids = batch.column(UID).to_numpy(zero_copy_only=False).astype(np.int64)
        ordered = self.uids[uid_order]
        at = np.searchsorted(ordered, uids)
        at[at == len(ordered)] = 0
        unknown = np.flatnonzero(ordered[at] != uids) if len(ordered) else np.arange(len(uids))
        if len(unknown):
            row = int(unknown[0])
            missing = [c.name for c in self.key if c.name not in batch.schema.names]
            where = (
                f"key {key_values(batch.slice(row, 1), [c.name for c in self.key])[0]!r}" if not missing else "a key"
            )
            raise BadRequest(f"{where} refers to unit {int(uids[row])}, which was not sent")
        self.keys.add(batch, uid_order[at])

    def freeze(self) -> None:
        """Done adding: index the keys and size the units."""
        self._freeze_units()
        self.keys.freeze()
        self.sizes = np.bincount(self.keys.payload, minlength=len(self.uids)).astype(np.int64)

    def met(self, positions: np.ndarray, limbs: np.ndarray) -> None:
        """Scanned rows at key `positions` (each new) with their row hashes as limbs."""
        self.keys.seen[positions] = True
        grouped = Scatter(self.keys.payload[positions], len(self.counts))
        self.sums[grouped.cells] += grouped.sum(limbs)
        self.counts[grouped.cells] += grouped.counts()

    def totals(self, units: np.ndarray) -> np.ndarray:
        """The hash of what the scan met of each unit, as limbs."""
        return carry_limbs(self.sums[units])
