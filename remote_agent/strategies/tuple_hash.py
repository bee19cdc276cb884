"""The agent's side of the tuple-hash strategy (the ⟨K, b⟩ baseline): one hash per key.

The scan of `extraction.py` compares each row that carries a hash with it and ships the
rows that differ; keys it never meets are reported deleted.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from deltasieve_protocol.encoding import LIMB_BITS, limbs_from_bytes
from deltasieve_protocol.types import Column
from deltasieve_protocol.wire import HASH
from remote_agent.errors import BadRequest
from remote_agent.keyindex import KeyIndex
from remote_agent.strategies.checks import wire_hashes


class TupleIndex:
    """Per-tuple hashes (the ⟨K, b⟩ baseline): the keys, and the expected hash of each."""

    def __init__(self, key: Sequence[Column], bits: int = 64):
        self.key = list(key)
        self.bits = bits
        self.keys = KeyIndex(self.key, "tuple hash", twice="sent twice")
        self._parts: list[np.ndarray] = []
        self.expected = np.empty((0, bits // LIMB_BITS), np.uint64)
        self._count = 0

    def add(self, batch: pa.RecordBatch) -> None:
        if HASH not in batch.schema.names:
            raise BadRequest(f"tuple hash frame lacks columns {[HASH]}")
        hashes = wire_hashes(batch, self.bits, "tuple hash", "tuple_hash_bits")
        self.keys.add(batch, np.arange(self._count, self._count + len(hashes)))
        self._count += len(hashes)
        if hashes:
            self._parts.append(limbs_from_bytes(hashes, self.bits))

    def freeze(self) -> None:
        self.keys.freeze()
        if self._parts:
            self.expected = np.concatenate(self._parts)[self.keys.payload]
            self._parts = []
