"""The row encoding kernel's kinds of column: how a value is written after its tag.

Shared by the kernel (row_encoding.py) and the code that lays a batch out for it
(deltasieve_protocol/row_kernel.py); a module of its own, without numba, so that the second
can import it without loading numba.
"""

from __future__ import annotations

import numpy as np

WORD = 0  # 8 bytes, big-endian two's complement (int, timestamp, timestamptz)
FLOAT = 1  # 8 bytes of IEEE 754 binary64; -0.0 as +0.0, every NaN as the one canonical NaN
DAYS = 2  # 4 bytes, big-endian (date)
FLAG = 3  # one byte, 0 or 1 (bool)
DECIMAL = 4  # 4-byte length and the canonical text of unscaled value and scale (the parameter)
PREFIXED = 5  # 4-byte length and the bytes (text, bytes)
VERBATIM = 6  # no tag: bytes encoded beforehand, copied as they are
#: The most bytes one value of each kind takes (beyond its own bytes, for the last two). A
#: decimal: tag, length, sign, 20 digits (the most a uint64 has), 'e', '-' and 2 digits
#: (its exponent lies between -38 and 19).
WIDEST = np.array([9, 9, 5, 2, 30, 5, 0], np.int64)
