"""Column names of the Arrow frames, and how a key is read out of a frame.

Both sides build and read these frames, so the names live here once.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

#: Unit id (group-hash units, unit keys, deleted keys, broken units).
UID = "__uid"
#: A hash on the wire: a unit's, a tuple's or a range's, fixed width.
HASH = "__hash"
#: A count of rows (a broken unit's survivors, a range's rows).
COUNT = "__count"
#: Range id, and whether the range is to be shipped whole (range checksums).
RID = "__rid"
SHIP = "__ship"
#: Prefixes of a range's lower and upper bound columns, one per key column.
LO = "__lo_"
HI = "__hi_"
#: A key fingerprint of the sketch strategy (GONE_FINGERPRINTS frames, the agent's spill of keys).
KEY_FP = "__kf"


def key_values(batch: pa.RecordBatch | pa.Table, key: Sequence[str]) -> list:
    """The key of every row: a scalar for a one-column key, else a tuple.

    >>> key_values(pa.table({"a": [1, 2], "b": ["x", "y"]}), ["a"])
    [1, 2]
    >>> key_values(pa.table({"a": [1, 2], "b": ["x", "y"]}), ["a", "b"])
    [(1, 'x'), (2, 'y')]
    """
    if len(key) == 1:
        return batch.column(key[0]).to_pylist()
    return list(zip(*(batch.column(k).to_pylist() for k in key)))
