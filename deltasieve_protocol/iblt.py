"""An invertible Bloom lookup table (IBLT) of (key fingerprint, row hash) pairs.

Each pair is folded into one cell of each of `hashes` sub-tables: the cell's count goes up
by the pair's sign and its three sums are XORed with the key, the row hash and a checksum
of both. Folding the source's pairs with sign -1 into the warehouse's table leaves only the
pairs the two sides do not share, however many rows they have in common. A cell left with
one pair ("pure": count +-1 and a checksum that matches its sums) gives that pair away; taking
it out of its other cells may make them pure in turn. Peeling stops when no cell is pure;
it recovers the whole difference when the table has enough cells for it (`iblt_sizing.cells_for`).
A pair's cells follow from its key and row hash together: an updated row (same key, new
row hash) is two pairs in unrelated cells, not one that cancels out its own key.

Both sides must build their tables with the same cells, hashes and seed: everything here
is deterministic 64-bit integer arithmetic, identical on any machine. Pairs go into a table
through one compiled fold (iblt_fold.py), on the agent and on the warehouse's executors
alike; `Iblt.reference_add` is its definition in NumPy.

On the wire a table travels *compact* (`Iblt.compact`): counts modulo 4 and checksums cut to
32 bits: 20.4 bytes a cell once compressed, against 24.9 for the full form. That
is enough: a table that is peeled holds few pairs per cell, a pure cell's count is +1 or -1
(1 or 3 modulo 4), and the 32-bit checksum plus the pair's own cell rule out a false pure
cell but for a chance of about 2**-32 / width per look. The warehouse keeps its table full.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import numpy as np

from deltasieve_protocol.iblt_fold import fold
from deltasieve_protocol.scatter import Scatter

FORMAT_VERSION = 1
"""Version of the Arrow layout (iblt_arrow.py) and of the hashing; bumped when either changes."""

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
#: A compact table's counts are kept modulo this, its checksums to 32 bits.
COMPACT_COUNT_MODULUS = 4
#: Pairs `reference_add` folds in one go: its grouping by cell (scatter.py) holds about 40
#: bytes a pair and sub-table beside the table (31 MiB at its peak for this many and 3
#: sub-tables). The compiled fold (`add`) holds nothing beside the table.
FOLD_PAIRS = 1 << 18
_CHECK32 = np.uint64(0xFFFFFFFF)
#: The three sums of a cell, by attribute (and Arrow column) name.
SUMS = ("key_sum", "hash_sum", "check_sum")


def mix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finalizer: a bijection of uint64 that spreads every input bit over the output.

    >>> mix64(np.array([0, 1, 2**64 - 1], dtype=np.uint64)).tolist()
    [0, 6238072747940578789, 13029008266876403067]
    """
    x = np.asarray(x, dtype=np.uint64)
    with np.errstate(over="ignore"):  # multiplication modulo 2**64 is the point
        x = x ^ (x >> np.uint64(30))
        x = x * _M1
        x = x ^ (x >> np.uint64(27))
        x = x * _M2
        return x ^ (x >> np.uint64(31))


def _mix_int(x: int) -> int:
    """mix64 of one Python int, for deriving the salts from the seed."""
    x &= _MASK
    x ^= x >> 30
    x = (x * int(_M1)) & _MASK
    x ^= x >> 27
    x = (x * int(_M2)) & _MASK
    return x ^ (x >> 31)


def _pair_hash(keys: np.ndarray, hashes: np.ndarray, salt) -> np.ndarray:
    """A 64-bit hash of each (key, row hash) pair; distinct salts give independent hashes.

    For a fixed key and salt it is a bijection of the row hash, so an updated row (same key,
    new row hash) never hashes like the old one.
    """
    return mix64(mix64(keys ^ salt) ^ hashes)


def _as_u64(values, name: str) -> np.ndarray:
    array = np.asarray(values)
    if array.ndim != 1 or (array.size and array.dtype.kind not in "iu"):
        raise TypeError(
            f"{name} must be a one-dimensional array of 64-bit integers, not {array.dtype} of shape {array.shape}"
        )
    return array.astype(np.uint64, copy=False)  # signed values keep their bit pattern


@dataclass(frozen=True)
class Peeled:
    """What peeling a table gave: the pairs counted +1 and -1 (sorted by key, then row hash).

    For a.subtract(b), plus is what only a holds and minus what only b holds.

    `complete` is True iff the table emptied entirely; when False the pairs listed are a
    correct part of the difference, not all of it.
    """

    plus_keys: np.ndarray
    plus_hashes: np.ndarray
    minus_keys: np.ndarray
    minus_hashes: np.ndarray
    complete: bool


class Iblt:
    """An IBLT of `cells` cells (rounded up to a multiple of `hashes`) in `hashes` equal sub-tables.

    >>> ours = Iblt(30, seed=7)
    >>> ours.add(np.array([1, 2, 3], dtype=np.uint64), np.array([10, 20, 30], dtype=np.uint64))
    >>> theirs = ours.copy()      # the other side starts from the table it was sent...
    >>> theirs.add(np.array([2, 3, 4], dtype=np.uint64), np.array([20, 31, 40], dtype=np.uint64), sign=-1)
    >>> p = theirs.peel()         # ...and folds its own pairs in with the opposite sign
    >>> p.complete, p.plus_keys.tolist(), p.plus_hashes.tolist(), p.minus_keys.tolist(), p.minus_hashes.tolist()
    (True, [1, 3], [10, 30], [3, 4], [31, 40])
    """

    def __init__(self, cells: int, hashes: int = 3, seed: int = 0, *, compact: bool = False):
        cells, hashes, seed = operator.index(cells), operator.index(hashes), operator.index(seed)  # numpy ints too
        if hashes < 1:
            raise ValueError(f"hashes must be a positive integer, got {hashes!r}")
        if cells < 1:
            raise ValueError(f"cells must be a positive integer, got {cells!r}")
        if not 0 <= seed <= _MASK:
            raise ValueError(f"seed must be an integer in [0, 2**64), got {seed!r}")
        self.hashes = hashes
        self.seed = seed
        self.compact = bool(compact)
        self.width = -(-cells // hashes)
        self.cells = self.width * hashes
        # A compact table holds its counts modulo 4 and its checksums to 32 bits, so it
        # keeps them in a byte and in 32 bits: 21 bytes a cell, not 32 (the agent holds
        # its own table and the warehouse's at once). Its counts wrap modulo 256, a
        # multiple of 4, between normalizations.
        self.count: np.ndarray = np.zeros(self.cells, dtype=np.uint8 if self.compact else np.int64)
        self.key_sum: np.ndarray = np.zeros(self.cells, dtype=np.uint64)
        self.hash_sum: np.ndarray = np.zeros(self.cells, dtype=np.uint64)
        self.check_sum: np.ndarray = np.zeros(self.cells, dtype=np.uint32 if self.compact else np.uint64)
        # one salt per sub-table, then the checksum's: all derived from the seed alone
        self._salts = np.array([_mix_int(seed * _GOLDEN + i + 1) for i in range(hashes + 1)], dtype=np.uint64)

    def __repr__(self) -> str:
        tail = ", compact=True" if self.compact else ""
        return f"Iblt(cells={self.cells}, hashes={self.hashes}, seed={self.seed}{tail})"

    def normalize(self) -> None:
        """Bring a compact table's counts and checksums back to their ranges (after adds
        made with `normalize=False`)."""
        if self.compact:
            np.remainder(self.count, COMPACT_COUNT_MODULUS, out=self.count)

    def to_compact(self) -> Iblt:
        """A compact copy (counts modulo 4, 32-bit checksums): the form a table is sent in.

        >>> t = Iblt(6, seed=3)
        >>> t.add(np.array([1, 2], dtype=np.uint64), np.array([5, 6], dtype=np.uint64), sign=-1)
        >>> c = t.to_compact()
        >>> c, bool(((c.count >= 0) & (c.count < 4)).all()), int(c.check_sum.max()) < 2**32
        (Iblt(cells=6, hashes=3, seed=3, compact=True), True, True)
        """
        out = Iblt(self.cells, self.hashes, self.seed, compact=True)
        out.count[:] = np.remainder(self.count, COMPACT_COUNT_MODULUS)
        out.key_sum[:] = self.key_sum
        out.hash_sum[:] = self.hash_sum
        out.check_sum[:] = self.check_sum & _CHECK32
        return out

    def _cells(self, keys: np.ndarray, hashes: np.ndarray) -> np.ndarray:
        """The cell of each pair in each sub-table, as global indices, shape (hashes, n)."""
        width = np.uint64(self.width)
        out = np.empty((self.hashes, keys.size), dtype=np.int64)
        for j in range(self.hashes):
            out[j] = (_pair_hash(keys, hashes, self._salts[j]) % width).astype(np.int64) + j * self.width
        return out

    def _checksums(self, keys: np.ndarray, hashes: np.ndarray) -> np.ndarray:
        checks = _pair_hash(keys, hashes, self._salts[self.hashes])
        return checks & _CHECK32 if self.compact else checks

    def add(self, keys: np.ndarray, hashes: np.ndarray, sign: int | np.ndarray = 1, *, normalize: bool = True) -> None:
        """Fold the pairs (keys[i], hashes[i]) in with sign +1 or -1 (compiled: iblt_fold.py).

        Args:
            keys: key fingerprints, uint64 (int64 is taken by its bit pattern).
            hashes: row hashes, same length and types.
            sign: +1 for one side's pairs, -1 for the other's (or one of the two per pair).
                A pair is meant to be folded once per side: a set, not a multiset.
            normalize: False leaves a compact table's counts out of their range (many
                batches into a wide table: `normalize()` once after the last).
        """
        self._fold(*self._pairs(keys, hashes, sign), normalize)

    def reference_add(
        self, keys: np.ndarray, hashes: np.ndarray, sign: int | np.ndarray = 1, *, normalize: bool = True
    ) -> None:
        """`add` in NumPy, by grouping the pairs' cells (scatter.py): the definition the
        compiled fold is tested against.

        >>> a, b = Iblt(12, seed=5), Iblt(12, seed=5)
        >>> keys, hashes = np.array([1, 2], np.uint64), np.array([10, 20], np.uint64)
        >>> a.add(keys, hashes); b.reference_add(keys, hashes)
        >>> all(bool((getattr(a, n) == getattr(b, n)).all()) for n in ("count",) + SUMS)
        True
        """
        keys, hashes, signs = self._pairs(keys, hashes, sign)
        for start in range(0, keys.size, FOLD_PAIRS):
            part = slice(start, start + FOLD_PAIRS)
            moved = signs[part] if np.ndim(sign) else int(signs[0])
            self._reference_fold(self._cells(keys[part], hashes[part]), keys[part], hashes[part], moved, normalize)

    def _pairs(self, keys, hashes, sign) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The pairs of an add as uint64 arrays, and their signs as int64 (one, or one per pair), checked."""
        keys, hashes = _as_u64(keys, "keys"), _as_u64(hashes, "hashes")
        if keys.size != hashes.size:
            raise ValueError(f"{keys.size} keys but {hashes.size} row hashes")
        if np.ndim(sign):
            signs = np.asarray(sign)
            if signs.shape != keys.shape or not np.isin(signs, (1, -1)).all():
                raise ValueError(f"signs must be {keys.size} values of 1 or -1")
            return keys, hashes, signs.astype(np.int64, copy=False)
        if sign not in (1, -1):
            raise ValueError(f"sign must be 1 or -1, got {sign!r}")
        return keys, hashes, np.array([sign], np.int64)

    def _fold(self, keys: np.ndarray, hashes: np.ndarray, signs: np.ndarray, normalize: bool = True) -> None:
        """Fold pairs into their cells, compiled; `signs` is int64, one or one per pair."""
        modulus = COMPACT_COUNT_MODULUS if self.compact and normalize else 0
        fold(self.count, self.key_sum, self.hash_sum, self.check_sum, self._salts, keys, hashes, signs, modulus)

    def _reference_fold(self, cells: np.ndarray, keys: np.ndarray, hashes: np.ndarray, signs, normalize: bool) -> None:
        """`_fold` by grouping the cells: `signs` is one int or one per pair."""
        # Grouped by cell once, then plain fancy indexing: np.add.at and np.bitwise_xor.at
        # cost several times as much (see scatter.py).
        grouped = Scatter(cells, self.cells)
        touched = grouped.cells
        if np.ndim(signs):
            moved = grouped.sum(np.asarray(signs, np.int64))
        else:
            moved = int(signs) * grouped.counts()
        self.count[touched] += moved.astype(self.count.dtype, copy=False)  # a compact table's wraps (see __init__)
        self.key_sum[touched] ^= grouped.xor(keys)
        self.hash_sum[touched] ^= grouped.xor(hashes)
        self.check_sum[touched] ^= grouped.xor(self._checksums(keys, hashes))
        if self.compact and normalize:  # only the cells this batch touched can have left [0, modulus)
            self.count[touched] = np.remainder(self.count[touched], COMPACT_COUNT_MODULUS)

    def _check_same_shape(self, other: Iblt) -> None:
        if not isinstance(other, Iblt):
            raise TypeError(f"cannot combine an Iblt with {type(other).__name__}")
        if (self.cells, self.hashes, self.seed, self.compact) != (other.cells, other.hashes, other.seed, other.compact):
            raise ValueError(f"tables differ in shape or seed: {self!r} and {other!r}")

    def subtract(self, other: Iblt) -> Iblt:
        """A new table of self's pairs with sign +1 and other's with sign -1.

        >>> a, b = Iblt(12), Iblt(12)
        >>> a.add(np.array([5], dtype=np.uint64), np.array([50], dtype=np.uint64))
        >>> b.add(np.array([5], dtype=np.uint64), np.array([50], dtype=np.uint64))
        >>> a.subtract(b).is_empty()
        True
        >>> a.subtract(Iblt(12, seed=1))
        Traceback (most recent call last):
        ...
        ValueError: tables differ in shape or seed: Iblt(cells=12, hashes=3, seed=0) and Iblt(cells=12, hashes=3, seed=1)
        """
        self._check_same_shape(other)
        out = self.copy()
        out.count -= other.count
        for name in SUMS:
            getattr(out, name)[:] ^= getattr(other, name)
        out.normalize()
        return out

    def subtract_folded(self, wider: Iblt) -> Iblt:
        """`self.subtract(wider.shrink(self.width))`, written over self (returns self) and
        without the shrunk copy: a wide table meets a narrower one with no third table in
        memory. `self.width` must divide `wider.width`.

        >>> big, sent = Iblt(3 * 8, seed=1), Iblt(3 * 2, seed=1)
        >>> big.add(np.array([1, 2], dtype=np.uint64), np.array([5, 6], dtype=np.uint64))
        >>> sent.add(np.array([2, 3], dtype=np.uint64), np.array([6, 7], dtype=np.uint64))
        >>> expected = sent.subtract(big.shrink(2))
        >>> got = sent.subtract_folded(big)
        >>> got is sent, all(bool((getattr(got, n) == getattr(expected, n)).all()) for n in ("count",) + SUMS)
        (True, True)
        """
        if not isinstance(wider, Iblt) or (self.hashes, self.seed, self.compact) != (
            wider.hashes,
            wider.seed,
            wider.compact,
        ):
            raise ValueError(f"tables differ in hashes, seed or layout: {self!r} and {wider!r}")
        # One array at a time, folded to this width (a temporary of one array of this
        # table's size), then written into this table's own array.
        np.subtract(self.count, wider._folded("count", self.width), out=self.count)
        for name in SUMS:
            np.bitwise_xor(getattr(self, name), wider._folded(name, self.width), out=getattr(self, name))
        self.normalize()
        return self

    def copy(self) -> Iblt:
        """An independent copy."""
        out = Iblt(self.cells, self.hashes, self.seed, compact=self.compact)
        out.count[:] = self.count
        for name in SUMS:
            getattr(out, name)[:] = getattr(self, name)
        return out

    def shrink(self, width: int) -> Iblt:
        """The table of the same pairs with `width` cells per sub-table; `width` must divide this one's.

        A pair's cell is its hash modulo the width, so the cells that a smaller width maps
        onto one are summed (counts) and XORed (sums): a big table kept up to date at the
        warehouse serves every sync at the size that sync needs.

        >>> big = Iblt(3 * 8, seed=1)
        >>> big.add(np.array([1, 2], dtype=np.uint64), np.array([5, 6], dtype=np.uint64))
        >>> small = Iblt(3 * 2, seed=1)
        >>> small.add(np.array([1, 2], dtype=np.uint64), np.array([5, 6], dtype=np.uint64))
        >>> folded = big.shrink(2)
        >>> bool((folded.count == small.count).all() and (folded.check_sum == small.check_sum).all())
        True
        """
        out = Iblt(operator.index(width) * self.hashes, self.hashes, self.seed, compact=self.compact)
        for name in ("count", *SUMS):
            setattr(out, name, self._folded(name, out.width))
        out.normalize()
        return out

    def _folded(self, name: str, width: int) -> np.ndarray:
        """Array `name` at `width` cells per sub-table: the cells a narrower width maps onto
        one summed (counts, wrapping as a compact table's do) or XORed (sums)."""
        if width < 1 or self.width % width:
            raise ValueError(f"cannot fold a table {self.width} cells wide to {width}: the width must divide it")
        blocks = getattr(self, name).reshape(self.hashes, self.width // width, width)
        if name == "count":
            return blocks.sum(axis=1, dtype=blocks.dtype).reshape(-1)
        return np.bitwise_xor.reduce(blocks, axis=1).reshape(-1)

    def is_empty(self) -> bool:
        """True iff every count and every sum is zero (as after adding and removing the same pairs).

        >>> t = Iblt(6)
        >>> t.is_empty()
        True
        >>> t.add(np.array([1], dtype=np.uint64), np.array([1], dtype=np.uint64), sign=-1)
        >>> t.is_empty()
        False
        """
        return not (self.count.any() or self.key_sum.any() or self.hash_sum.any() or self.check_sum.any())

    def empty_cells(self) -> int:
        """Cells whose count and sums are all zero: how full a difference is tells how many
        pairs it holds, when it holds too many to peel.

        >>> t = Iblt(30)
        >>> t.add(np.array([1], dtype=np.uint64), np.array([1], dtype=np.uint64))
        >>> t.empty_cells()
        27
        """
        return self.cells - int(np.count_nonzero(self._occupied(slice(None))))

    def _occupied(self, cells: np.ndarray | slice) -> np.ndarray:
        return (
            (self.count[cells] != 0)
            | (self.key_sum[cells] != 0)
            | (self.hash_sum[cells] != 0)
            | (self.check_sum[cells] != 0)
        )

    def _pure(self, cells: np.ndarray) -> np.ndarray:
        """Those of `cells` that hold one pair: count +-1, a matching checksum, and the pair's own cell."""
        cells = cells[self._counts_one(self.count[cells])]
        keys, hashes = self.key_sum[cells], self.hash_sum[cells]
        good = self._checksums(keys, hashes) == self.check_sum[cells]
        cells, keys, hashes = cells[good], keys[good], hashes[good]
        sub = cells // self.width
        own = (_pair_hash(keys, hashes, self._salts[sub]) % np.uint64(self.width)).astype(np.int64) + sub * self.width
        return cells[own == cells]

    def _counts_one(self, count: np.ndarray) -> np.ndarray:
        return (count == 1) | (count == (COMPACT_COUNT_MODULUS - 1 if self.compact else -1))

    def peel(self, *, in_place: bool = False) -> Peeled:
        """Recover the pairs of the table (self is left unchanged, unless `in_place`: then
        self is peeled, for a caller that drops the table after, one table less in memory).

        Each round takes every pair of a pure cell out of all its cells and looks again at
        the cells it touched. In a sound table each pair taken out empties at least its
        pure cell, so the number of occupied cells falls every round; a round where it
        does not (a corrupt or forged table) ends the peel, incomplete, without reporting
        that round's pairs. Hence at most `cells` rounds.

        A table one cell wide peels nothing: its sub-tables share their one cell, so a
        pair taken out of it is confirmed by no other cell, and a false pure cell (a
        chance of 2**-32 in a compact table) would leave the table empty. It only says
        whether it is empty.

        >>> one = Iblt(3, seed=2)
        >>> one.add(np.array([4], dtype=np.uint64), np.array([40], dtype=np.uint64))
        >>> p = one.peel(); p.complete, p.plus_keys.size
        (False, 0)
        """
        t = self if in_place else self.copy()
        if t.width == 1:
            none = np.zeros(0, np.uint64)
            return Peeled(none, none, none, none, complete=t.is_empty())
        found: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        candidates = np.flatnonzero(t._counts_one(t.count))  # no pure cell elsewhere
        sound = True
        for _ in range(t.cells + 1):
            pure = t._pure(candidates)
            if pure.size == 0:
                break
            signs = np.where(t.count[pure] == 1, 1, -1)  # a compact table's -1 is 3
            keys, hashes, signs = _distinct(t.key_sum[pure], t.hash_sum[pure], signs)
            if keys is None:  # one pair pure with both signs: not a table of sets
                sound = False
                break
            cells = t._cells(keys, hashes)
            touched = np.sort(cells, axis=None)
            touched = touched[
                np.concatenate(([True], touched[1:] != touched[:-1]))
            ]  # np.unique's hashing is slower here
            before = int(t._occupied(touched).sum())
            t._fold(keys, hashes, -signs)
            if before - int(t._occupied(touched).sum()) < keys.size:
                sound = False
                break
            found.append((keys, hashes, signs))
            candidates = touched
        keys, hashes, signs = (
            (np.concatenate(parts) for parts in zip(*found))
            if found
            else (np.zeros(0, np.uint64),) * 2 + (np.zeros(0, np.int64),)
        )
        order = np.lexsort((hashes, keys))
        keys, hashes, signs = keys[order], hashes[order], signs[order]
        plus = signs == 1
        return Peeled(keys[plus], hashes[plus], keys[~plus], hashes[~plus], complete=sound and t.is_empty())


def _distinct(keys: np.ndarray, hashes: np.ndarray, signs: np.ndarray):
    """The distinct (key, hash, sign) triples; (None, None, None) if a pair comes with both signs."""
    order = np.lexsort((signs, hashes, keys))
    keys, hashes, signs = keys[order], hashes[order], signs[order]
    same_pair = (keys[1:] == keys[:-1]) & (hashes[1:] == hashes[:-1])
    if (same_pair & (signs[1:] != signs[:-1])).any():
        return None, None, None
    keep = np.concatenate(([True], ~same_pair))
    return keys[keep], hashes[keep], signs[keep]
