"""Framing of the binary exchange between the warehouse and the agent.

A body is a sequence of frames: one kind byte, a 4-byte big-endian payload length, the
8-byte big-endian xxh3-64 checksum of the payload (seed 0), the payload. TCP's own 16-bit
checksum lets corruption through now and then; the frame checksum turns a damaged payload
into an error instead of wrong rows in the warehouse. Control frames carry JSON; data frames carry one Arrow IPC stream (schema plus
one record batch) compressed with zstd; binary frames (RAW_KINDS) are read by their own
module. The last frame of a complete response is always a
summary (`S`) or an error (`E`) frame, so a truncated body is detected, never mistaken
for a short answer.
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import xxhash

MEDIA_TYPE = "application/vnd.deltasieve.frames"
#: One frame may not exceed this; a longer length prefix means a corrupt or hostile body.
MAX_FRAME_BYTES = 256 * 1024 * 1024
#: zstd level for data frames: level 3 is zstd's default trade of speed for size.
ZSTD_LEVEL = 3

_HEADER = struct.Struct(">cIQ")

# Control frames (JSON).
CONTROL = b"J"
SUMMARY = b"S"
ERROR = b"E"
JSON_KINDS = frozenset({CONTROL, SUMMARY, ERROR})
# Data frames (Arrow).
UNIT_KEYS = b"K"  # request: uid + key columns of every grouped tuple
UNIT_KEYS_DELTA = b"k"  # request: as UNIT_KEYS, every int64 column delta-coded (see delta_encode)
UNITS = b"U"  # request: uid + group hash
UNITS_DELTA = b"u"  # request: as UNITS, the uid column delta-coded (see delta_encode)
FETCH_KEYS = b"F"  # request: keys whose current rows are wanted
TUPLE_HASHES = b"T"  # request: key columns + the 64-bit hash of each tuple (one hash per tuple)
RANGES = b"G"  # request: key ranges with expected count and hash, or to be shipped whole
SKETCH = b"I"  # request: the warehouse's reconciliation table (IBLT cells, see iblt.py)
# Binary frames (neither JSON nor Arrow: their own module reads them).
SKETCH_CELLS = b"i"  # request: as SKETCH, in the packed binary form of iblt_bytes.py
RAW_KINDS = frozenset({SKETCH_CELLS})
UNGROUPED_ROWS = b"N"  # response: rows whose key is in no unit (new or ungrouped)
CHANGED_ROWS = b"C"  # response: current rows of units whose hash differs
DELETED_KEYS = b"D"  # response: keys missing at the source (extract: with the uid of their unit; sketch: the key alone)
BROKEN_UNITS = b"B"  # response: uid, hash and count of the surviving part of a broken unit
ROWS = b"R"  # response to fetch and ranges: current rows
GONE_FINGERPRINTS = (
    b"X"  # response to sketch: fingerprints of keys only the warehouse holds (keys not their own fingerprint)
)
RANGE_SUMS = b"Q"  # response to ranges: count and hash of each range that differs
UPDATED_DIGESTS = b"V"  # response to sketch (protocol 4): key, column digests and check of each updated row
CHANGED_COLUMNS = b"M"  # request to sketch/cells: the bitmap of the columns to send, per updated row in order
CELLS = b"L"  # response to sketch/cells: the updated rows in order, the cells not asked for NULL


class FrameError(ValueError):
    """The body is not a well-formed frame sequence."""


@dataclass
class Frame:
    kind: bytes
    payload: bytes
    _json: dict | None = field(default=None, repr=False, compare=False)
    _batch: pa.RecordBatch | None = field(default=None, repr=False, compare=False)

    def json(self) -> dict:
        """The payload of a control frame; a payload that is not a JSON object is a FrameError."""
        if self._json is None:
            try:
                message = json.loads(self.payload)
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise FrameError(f"control frame {self.kind!r} is not valid JSON: {exc}") from None
            if not isinstance(message, dict):
                raise FrameError(
                    f"control frame {self.kind!r} holds a JSON {type(message).__name__}, expected an object"
                )
            self._json = message
        return self._json

    def batch(self) -> pa.RecordBatch:
        """The record batch of a data frame (decoded once); a corrupt payload is a FrameError."""
        if self._batch is None:
            try:
                batches = list(pa.ipc.open_stream(pa.BufferReader(self.payload)))
            except (pa.ArrowException, OSError, ValueError) as exc:
                raise FrameError(f"data frame {self.kind!r} is not a valid Arrow IPC stream: {exc}") from None
            if len(batches) != 1:
                raise FrameError(f"data frame {self.kind!r} holds {len(batches)} batches, expected 1")
            self._batch = batches[0]
        return self._batch

    def decode(self) -> Frame:
        """Parse the payload now, so a corrupt frame fails where the caller expects errors."""
        if self.kind in JSON_KINDS:
            self.json()
        elif self.kind not in RAW_KINDS:
            self.batch()
        return self


def frame(kind: bytes, payload: bytes) -> bytes:
    if len(payload) > MAX_FRAME_BYTES:
        raise FrameError(f"frame of {len(payload)} bytes exceeds the {MAX_FRAME_BYTES}-byte limit")
    return _HEADER.pack(kind, len(payload), xxhash.xxh3_64_intdigest(payload)) + payload


def json_frame(kind: bytes, message: dict) -> bytes:
    return frame(kind, json.dumps(message, separators=(",", ":"), default=str).encode())


_WRITE_OPTIONS = pa.ipc.IpcWriteOptions(compression=pa.Codec("zstd", compression_level=ZSTD_LEVEL))


def arrow_frame(kind: bytes, batch: pa.RecordBatch | pa.Table) -> bytes:
    """One data frame holding `batch` as a zstd-compressed Arrow IPC stream."""
    if isinstance(batch, pa.Table):
        batch = (
            batch.combine_chunks().to_batches()[0]
            if batch.num_rows
            else pa.RecordBatch.from_pylist([], schema=batch.schema)
        )
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, batch.schema, options=_WRITE_OPTIONS) as writer:
        writer.write_batch(batch)
    return frame(kind, sink.getvalue())


def delta_encode(batch: pa.RecordBatch) -> pa.RecordBatch | None:
    """Each int64 column as differences from the previous row (the first row's value as
    is), in wrapping 64-bit arithmetic, so that ascending keys and runs of one uid become
    small numbers that zstd packs into a byte or less. None if an int64 column has NULLs.
    """
    columns = []
    for column in batch.columns:
        if pa.types.is_int64(column.type):
            if column.null_count:
                return None
            values = column.to_numpy()
            column = pa.array(np.diff(values, prepend=np.int64(0)) if len(values) else values, pa.int64())
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, schema=batch.schema)


def delta_or_plain_frame(plain_kind: bytes, delta_kind: bytes, batch: pa.RecordBatch) -> bytes:
    """The batch as a frame of `delta_kind`, delta-coded, or of `plain_kind` if it cannot be."""
    coded = delta_encode(batch)
    return arrow_frame(plain_kind, batch) if coded is None else arrow_frame(delta_kind, coded)


def delta_decode(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The inverse of delta_encode: running sums of every int64 column, wrapping as it did."""
    columns = []
    for column in batch.columns:
        if pa.types.is_int64(column.type):
            if column.null_count:
                raise FrameError("a delta-coded column holds NULLs")
            column = pa.array(np.cumsum(column.to_numpy(), dtype=np.int64), pa.int64())
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, schema=batch.schema)


def read_frames(chunks: Iterable[bytes]) -> Iterator[Frame]:
    """Parse frames from a stream of byte chunks of any size.

    Each payload is copied once, out of the chunk it lies in (or, for a frame that spans
    chunks, out of the bytes kept from them): a request body of one large frame is held
    twice at most, not four or five times.

    >>> body = frame(b"j", b'{"a":1}') + frame(b"b", b"xyz")
    >>> [(f.kind, f.payload) for f in read_frames([body[:5], body[5:20], body[20:]])]
    [(b'j', b'{"a":1}'), (b'b', b'xyz')]
    >>> list(read_frames([body[:-1]]))
    Traceback (most recent call last):
    ...
    deltasieve_protocol.frames.FrameError: body ends inside a frame (15 stray bytes)
    """
    buffer = bytearray()  # the bytes of a frame begun in an earlier chunk
    for chunk in chunks:
        if buffer:
            buffer.extend(chunk)
        source = buffer if buffer else chunk
        with memoryview(source) as view:
            at = 0
            while (found := _frame_at(view, at)) is not None:
                yield found[0]
                at = found[1]
            if source is not buffer:
                buffer += view[at:]  # the start of a frame the next chunks end
        if source is buffer:
            del buffer[:at]
    if buffer:
        raise FrameError(f"body ends inside a frame ({len(buffer)} stray bytes)")


def _frame_at(view: memoryview, at: int) -> tuple[Frame, int] | None:
    """The frame that starts at `at` in `view` and where it ends; None if `view` ends before it does."""
    if len(view) - at < _HEADER.size:
        return None
    kind, length, checksum = _HEADER.unpack_from(view, at)
    if length > MAX_FRAME_BYTES:
        raise FrameError(f"frame length {length} exceeds the {MAX_FRAME_BYTES}-byte limit")
    end = at + _HEADER.size + length
    if len(view) < end:
        return None
    payload = view[at + _HEADER.size : end].tobytes()
    if xxhash.xxh3_64_intdigest(payload) != checksum:
        raise FrameError(f"frame {kind!r} of {length} bytes fails its checksum (damaged in transit?)")
    return Frame(kind, payload), end


async def aread_frames(chunks) -> list[Frame]:
    """Collect all frames of an async byte stream (a request body)."""
    buffer = bytearray()
    async for chunk in chunks:
        buffer.extend(chunk)
    return list(read_frames([buffer]))
