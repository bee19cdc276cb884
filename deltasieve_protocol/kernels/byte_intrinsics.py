"""Unaligned loads, stores and copies on uint8 arrays, and a prefetch, for the numba-compiled kernels.

Each is a numba intrinsic: a few LLVM instructions put in place of the call, with no bounds
check. Written as functions, they would read and write one byte at a time, and numba would
compile a version of each for every constant offset a kernel calls it with.
"""

from __future__ import annotations

import sys

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


def _is_bytes(array: types.Type) -> bool:
    return isinstance(array, types.Array) and array.dtype == types.uint8 and array.ndim == 1


def _address(context, builder, array_type, array, at):
    """The address of byte `at` of a uint8 array."""
    return builder.gep(context.make_array(array_type)(context, builder, array).data, [at])


def _swap_unless(order: str, builder, value):
    """`value` in byte order `order` from the machine's, or back."""
    return value if sys.byteorder == order else builder.bswap(value)


def _loader(bits: int, order: str):
    @intrinsic
    def load(typingctx, array, at):
        def codegen(context, builder, signature, args):
            address = _address(context, builder, signature.args[0], args[0], args[1])
            value = builder.load(builder.bitcast(address, ir.IntType(bits).as_pointer()), align=1)
            value = _swap_unless(order, builder, value)
            return builder.zext(value, ir.IntType(64)) if bits < 64 else value

        if not (_is_bytes(array) and isinstance(at, types.Integer)):
            return None
        return types.uint64(array, at), codegen

    return load


def _storer(bits: int, order: str):
    @intrinsic
    def store(typingctx, array, at, value):
        def codegen(context, builder, signature, args):
            address = _address(context, builder, signature.args[0], args[0], args[1])
            word = context.cast(builder, args[2], signature.args[2], types.uint64)
            if bits < 64:
                word = builder.trunc(word, ir.IntType(bits))
            word = _swap_unless(order, builder, word)
            builder.store(word, builder.bitcast(address, ir.IntType(bits).as_pointer()), align=1)
            return context.get_dummy_value()

        if not (_is_bytes(array) and isinstance(at, types.Integer) and isinstance(value, types.Integer)):
            return None
        return types.none(array, at, value), codegen

    return store


#: load_le32(array, at), load_le64(array, at): the little-endian unsigned integer at byte
#: `at`, as uint64.
load_le32 = _loader(32, "little")
load_le64 = _loader(64, "little")
#: store_be32(array, at, value), store_be64(array, at, value): the low 32 or 64 bits of the
#: integer `value` (two's complement), most significant byte first, at byte `at`;
#: store_le64 least significant first.
store_be32 = _storer(32, "big")
store_be64 = _storer(64, "big")
store_le64 = _storer(64, "little")


@intrinsic
def copy_bytes(typingctx, target, at, source, start, count):
    """Copy `count` bytes from `source[start:]` to `target[at:]` (a memcpy: the two must not overlap)."""

    def codegen(context, builder, signature, args):
        to = _address(context, builder, signature.args[0], args[0], args[1])
        frm = _address(context, builder, signature.args[2], args[2], args[3])
        cgutils.raw_memcpy(builder, to, frm, args[4], 1)
        return context.get_dummy_value()

    if not (_is_bytes(target) and _is_bytes(source)):
        return None
    if not all(isinstance(t, types.Integer) for t in (at, start, count)):
        return None
    return types.none(target, at, source, start, count), codegen


@intrinsic
def byte_swap64(typingctx, value):
    """The uint64 `value` with its 8 bytes in reverse order."""

    def codegen(context, builder, signature, args):
        return builder.bswap(args[0])

    if value != types.uint64:
        return None
    return types.uint64(types.uint64), codegen


@intrinsic
def prefetch_for_write(typingctx, array, at):
    """Ask for the cache line of `array[at]` (any one-dimensional array), to be written soon:
    a kernel whose writes land all over a table larger than the cache (iblt_fold.py) asks
    for a few dozen lines at once, and they arrive while it computes, instead of one at a
    time when each write waits for its own."""

    def codegen(context, builder, signature, args):
        array_type = signature.args[0]
        data = context.make_array(array_type)(context, builder, args[0])
        address = cgutils.get_item_pointer(context, builder, array_type, data, [args[1]], wraparound=False)
        pointer = ir.IntType(8).as_pointer()
        hint = ir.FunctionType(ir.VoidType(), [pointer] + [ir.IntType(32)] * 3)
        llvm_prefetch = builder.module.declare_intrinsic("llvm.prefetch", [pointer], hint)
        write, keep_in_every_cache, data_not_code = (ir.Constant(ir.IntType(32), v) for v in (1, 3, 1))
        builder.call(llvm_prefetch, [builder.bitcast(address, pointer), write, keep_in_every_cache, data_not_code])
        return context.get_dummy_value()

    if not (isinstance(array, types.Array) and array.ndim == 1 and isinstance(at, types.Integer)):
        return None
    return types.none(array, at), codegen
