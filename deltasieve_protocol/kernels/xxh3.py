"""Seeded XXH3-64 in numba: the hash of every row of a batch in one call (`hash_slices`).

The rows are slices of one byte buffer (`offsets[i]:offsets[i + 1]` of `data`, as the
compiled row encoding lays them out), so no Python object is made per row. The results are
those of the xxhash package's `xxh3_64_intdigest(row, seed)` (XXH3 0.8), which the tests
check for every length class: 0, 1-3, 4-8, 9-16, 17-128, 129-240 bytes, and longer inputs,
hashed in stripes with a secret derived from the seed.

All arithmetic is on uint64 and wraps modulo 2**64, as XXH3's does; constants and shift
counts are uint64 so that numba never mixes signed and unsigned operands (it would widen
them to float64).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from deltasieve_protocol.kernels.byte_intrinsics import byte_swap64, load_le32, load_le64, store_le64

_U = np.uint64

_PRIME32_1 = _U(0x9E3779B1)
_PRIME32_2 = _U(0x85EBCA77)
_PRIME32_3 = _U(0xC2B2AE3D)
_PRIME64_1 = _U(0x9E3779B185EBCA87)
_PRIME64_2 = _U(0xC2B2AE3D27D4EB4F)
_PRIME64_3 = _U(0x165667B19E3779F9)
_PRIME64_4 = _U(0x85EBCA77C2B2AE63)
_PRIME64_5 = _U(0x27D4EB2F165667C5)
_PRIME_MX1 = _U(0x165667919E3779F9)
_PRIME_MX2 = _U(0x9FB21C651E98DF25)
_LOW32 = _U(0xFFFFFFFF)
_HIGH32 = _U(0xFFFFFFFF00000000)

#: XXH3's default secret (kSecret), 192 bytes.
_SECRET = np.frombuffer(
    bytes.fromhex(
        "b8fe6c3923a44bbe7c01812cf721ad1cded46de9839097db7240a4a4b7b3671f"
        "cb79e64eccc0e578825ad07dccff7221b8084674f743248ee03590e6813a264c"
        "3c2852bb91c300cb88d0658b1b532ea371644897a20df94e3819ef46a9deacd8"
        "a8fa763fe39c343ff9dcbbc7c70b4f1d8a51e04bcdb45931c89f7ec9d9787364"
        "eac5ac8334d3ebc3c581a0fffa1363eb170ddd51b7f0da49d316552629d4689e"
        "2b16be587d47a1fc8ff8b8d17ad031ce45cb3a8f95160428afd7fbcabb4b407e"
    ),
    np.uint8,
)
_SECRET_SIZE = 192
#: Inputs longer than this are hashed in 64-byte stripes (the "long" hash).
_MIDSIZE_MAX = 240
_STRIPE = 64
#: Stripes between two scrambles of the accumulators: (secret size - stripe) / 8.
_STRIPES_PER_BLOCK = (_SECRET_SIZE - _STRIPE) // 8
_BLOCK = _STRIPE * _STRIPES_PER_BLOCK
#: Where in the secret the lanes of 129-240 byte inputs past the eighth start, and where the
#: last lane's are.
_MIDSIZE_SECRET = 3
_MIDSIZE_LAST_SECRET = 136 - 17
#: Where in the secret the last stripe of a long input is keyed, and where the keys of the
#: final merge of its accumulators start.
_LAST_STRIPE_SECRET = _SECRET_SIZE - _STRIPE - 7
_MERGE_SECRET = 11


@intrinsic
def _fold_product(typingctx, a, b):
    """The 128-bit product of two uint64, its high half XORed into its low half."""

    def codegen(context, builder, signature, args):
        wide = ir.IntType(128)
        product = builder.mul(builder.zext(args[0], wide), builder.zext(args[1], wide))
        low = builder.trunc(product, ir.IntType(64))
        high = builder.trunc(builder.lshr(product, ir.Constant(wide, 64)), ir.IntType(64))
        return builder.xor(low, high)

    if a != types.uint64 or b != types.uint64:
        return None
    return types.uint64(types.uint64, types.uint64), codegen


@njit(cache=True, nogil=True)
def _xxh64_avalanche(h):
    """XXH64's finalizer (of the 0-3 byte classes)."""
    h ^= h >> _U(33)
    h *= _PRIME64_2
    h ^= h >> _U(29)
    h *= _PRIME64_3
    return h ^ (h >> _U(32))


@njit(cache=True, nogil=True)
def _avalanche(h):
    """XXH3's finalizer."""
    h ^= h >> _U(37)
    h *= _PRIME_MX1
    return h ^ (h >> _U(32))


@njit(cache=True, nogil=True)
def _rrmxmx(h, length):
    """The stronger finalizer of the 4-8 byte class (it mixes in the length)."""
    h ^= ((h << _U(49)) | (h >> _U(15))) ^ ((h << _U(24)) | (h >> _U(40)))  # two rotations
    h *= _PRIME_MX2
    h ^= (h >> _U(35)) + length
    h *= _PRIME_MX2
    return h ^ (h >> _U(28))


# inlined where it is called: it is called with constant offsets, and numba would compile a
# function of its own for each
@njit(cache=True, nogil=True, inline="always")
def _mix16(data, at, secret_at, seed):
    """16 input bytes at `at` against 16 bytes of the default secret at `secret_at`."""
    low = load_le64(data, at) ^ (load_le64(_SECRET, secret_at) + seed)
    high = load_le64(data, at + 8) ^ (load_le64(_SECRET, secret_at + 8) - seed)
    return _fold_product(low, high)


@njit(cache=True, nogil=True)
def _upto16(data, start, length, seed):
    """Up to 16 bytes: the input read as one or two words, keyed with the secret, finalized."""
    n = _U(length)
    if length > 8:
        flip_low = (load_le64(_SECRET, 24) ^ load_le64(_SECRET, 32)) + seed
        flip_high = (load_le64(_SECRET, 40) ^ load_le64(_SECRET, 48)) - seed
        low = load_le64(data, start) ^ flip_low
        high = load_le64(data, start + length - 8) ^ flip_high
        return _avalanche(n + byte_swap64(low) + high + _fold_product(low, high))
    if length >= 4:
        seed ^= byte_swap64(seed) & _HIGH32  # on top, the low 32 bits of the seed byte-swapped
        first = load_le32(data, start)
        last = load_le32(data, start + length - 4)
        flip = (load_le64(_SECRET, 8) ^ load_le64(_SECRET, 16)) - seed
        return _rrmxmx((last + (first << _U(32))) ^ flip, n)
    if length > 0:
        combined = (
            (_U(data[start]) << _U(16))
            | (_U(data[start + (length >> 1)]) << _U(24))
            | _U(data[start + length - 1])
            | (n << _U(8))
        )
        return _xxh64_avalanche(combined ^ ((load_le32(_SECRET, 0) ^ load_le32(_SECRET, 4)) + seed))
    return _xxh64_avalanche(seed ^ load_le64(_SECRET, 56) ^ load_le64(_SECRET, 64))


@njit(cache=True, nogil=True)
def _upto128(data, start, length, seed):
    """17 to 128 bytes: pairs of 16-byte lanes taken from both ends towards the middle."""
    end = start + length
    acc = _U(length) * _PRIME64_1
    if length > 32:
        if length > 64:
            if length > 96:
                acc += _mix16(data, start + 48, 96, seed)
                acc += _mix16(data, end - 64, 112, seed)
            acc += _mix16(data, start + 32, 64, seed)
            acc += _mix16(data, end - 48, 80, seed)
        acc += _mix16(data, start + 16, 32, seed)
        acc += _mix16(data, end - 32, 48, seed)
    acc += _mix16(data, start, 0, seed)
    acc += _mix16(data, end - 16, 16, seed)
    return _avalanche(acc)


@njit(cache=True, nogil=True)
def _upto240(data, start, length, seed):
    """129 to 240 bytes: eight 16-byte lanes, an avalanche, then the rest at shifted secret offsets."""
    acc = _U(length) * _PRIME64_1
    for i in range(8):
        acc += _mix16(data, start + 16 * i, 16 * i, seed)
    acc = _avalanche(acc)
    for i in range(8, length // 16):
        acc += _mix16(data, start + 16 * i, 16 * (i - 8) + _MIDSIZE_SECRET, seed)
    acc += _mix16(data, start + length - 16, _MIDSIZE_LAST_SECRET, seed)
    return _avalanche(acc)


@njit(cache=True, nogil=True)
def _seeded_secret(seed):
    """The secret of long inputs: the default one with the seed added to and taken from its words."""
    secret = np.empty(_SECRET_SIZE, np.uint8)
    for i in range(0, _SECRET_SIZE, 16):
        store_le64(secret, i, load_le64(_SECRET, i) + seed)
        store_le64(secret, i + 8, load_le64(_SECRET, i + 8) - seed)
    return secret


@njit(cache=True, nogil=True)
def _stripe(acc, data, at, secret, secret_at):
    """Fold the 64 bytes at `at` into the accumulators, keyed with the secret at `secret_at`."""
    for i in range(8):
        value = load_le64(data, at + 8 * i)
        keyed = value ^ load_le64(secret, secret_at + 8 * i)
        acc[i ^ 1] += value
        acc[i] += (keyed & _LOW32) * (keyed >> _U(32))


@njit(cache=True, nogil=True)
def _scramble(acc, secret):
    """Mix the accumulators with the end of the secret, after each block of stripes."""
    for i in range(8):
        value = acc[i] ^ (acc[i] >> _U(47))
        acc[i] = (value ^ load_le64(secret, _SECRET_SIZE - _STRIPE + 8 * i)) * _PRIME32_1


@njit(cache=True, nogil=True)
def _long(data, start, length, secret, acc):
    """More than 240 bytes: 64-byte stripes into eight accumulators (`acc`, scratch space)."""
    acc[0], acc[1], acc[2], acc[3] = _PRIME32_3, _PRIME64_1, _PRIME64_2, _PRIME64_3
    acc[4], acc[5], acc[6], acc[7] = _PRIME64_4, _PRIME32_2, _PRIME64_5, _PRIME32_1
    blocks = (length - 1) // _BLOCK
    for block in range(blocks):
        for s in range(_STRIPES_PER_BLOCK):
            _stripe(acc, data, start + block * _BLOCK + s * _STRIPE, secret, 8 * s)
        _scramble(acc, secret)
    tail = start + blocks * _BLOCK
    for s in range(((length - 1) - blocks * _BLOCK) // _STRIPE):
        _stripe(acc, data, tail + s * _STRIPE, secret, 8 * s)
    _stripe(acc, data, start + length - _STRIPE, secret, _LAST_STRIPE_SECRET)
    result = _U(length) * _PRIME64_1
    for i in range(4):
        key = _MERGE_SECRET + 16 * i
        result += _fold_product(acc[2 * i] ^ load_le64(secret, key), acc[2 * i + 1] ^ load_le64(secret, key + 8))
    return _avalanche(result)


@njit(cache=True, nogil=True)
def hash_slices(offsets, data, seed):
    """Seeded XXH3-64 of each slice `data[offsets[i]:offsets[i + 1]]` (int64 offsets, uint8
    data, a uint64 seed), as uint64 (deltasieve_protocol/xxh3.py checks the arguments)."""
    rows = offsets.shape[0] - 1
    out = np.empty(rows, np.uint64)
    secret = _seeded_secret(seed)
    acc = np.empty(8, np.uint64)
    for r in range(rows):
        start = offsets[r]
        length = offsets[r + 1] - start
        if length <= 16:
            out[r] = _upto16(data, start, length, seed)
        elif length <= 128:
            out[r] = _upto128(data, start, length, seed)
        elif length <= _MIDSIZE_MAX:
            out[r] = _upto240(data, start, length, seed)
        else:
            out[r] = _long(data, start, length, secret, acc)
    return out
