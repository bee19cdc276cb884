"""Widths the contract's settings and messages name, in a module that imports nothing.

The agent's and the service's settings and the JSON messages (models.py) take their
defaults from here, so that reading them loads neither Arrow nor NumPy; the modules that
hash (encoding.py, column_digests.py) import the same constants.
"""

from __future__ import annotations

from typing import Final

#: Group hashes default to 128 bits; 64 is allowed where a smaller hash is worth the risk.
DEFAULT_HASH_BITS: Final = 128
#: Bits of one column's digest (column_digests.py): 8 cost a byte per column per updated row,
#: and let one changed cell in 256 through to the row check (then its row is fetched whole);
#: 4 bits would send 6 % of the updated rows twice, 16 would cost twice the bytes for nothing.
DIGEST_BITS = 8
#: Bits of each updated row's own check in a sketch answer that names its updated rows by
#: column digests (column_digests.py), the XOR of their 64-bit row hashes travelling once in
#: the summary: 16 bits find the rows whose digests collided (one in 256 per changed cell)
#: but for one in 65,536 of them, which the XOR then catches; 8 bytes a row cost 6 more.
ROW_CHECK_BITS: Final = 16
