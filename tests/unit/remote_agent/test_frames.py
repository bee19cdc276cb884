"""Framing: what arrives damaged must fail loudly, never decode into different rows."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deltasieve_protocol import frames


def _body() -> bytes:
    batch = pa.record_batch({"id": pa.array(range(1000), pa.int64()), "name": pa.array([f"n{i}" for i in range(1000)])})
    return (
        frames.json_frame(frames.CONTROL, {"a": 1})
        + frames.arrow_frame(frames.ROWS, batch)
        + frames.json_frame(frames.SUMMARY, {"rows": 1000})
    )


def _decode_all(body: bytes, chunk: int = 997) -> list:
    return [f.decode() for f in frames.read_frames(body[i : i + chunk] for i in range(0, len(body), chunk))]


def test_a_body_round_trips_in_chunks_of_any_size():
    body = _body()
    for chunk in (1, 13, 997, len(body)):
        decoded = _decode_all(body, chunk)
        assert [f.kind for f in decoded] == [frames.CONTROL, frames.ROWS, frames.SUMMARY]
        assert decoded[1].batch().column("id").to_pylist() == list(range(1000))
        assert decoded[2].json() == {"rows": 1000}


@pytest.mark.parametrize("offset", [0, 5, 14, 40, 200, 1000, -20, -1])
def test_any_flipped_byte_is_an_error(offset):
    body = bytearray(_body())
    body[offset] ^= 0x5A
    with pytest.raises(frames.FrameError):
        _decode_all(bytes(body))


def test_every_single_byte_flip_is_caught():
    """Exhaustive over a small body: no damaged byte may decode as a valid, different answer."""
    batch = pa.record_batch({"k": pa.array([1, 2, 3], pa.int64())})
    body = frames.arrow_frame(frames.ROWS, batch) + frames.json_frame(frames.SUMMARY, {})
    for i in range(len(body)):
        damaged = bytearray(body)
        damaged[i] ^= 0x01
        with pytest.raises(frames.FrameError):
            _decode_all(bytes(damaged))


@pytest.mark.parametrize("cut", [1, 12, 13, 50, -1])
def test_a_cut_body_is_an_error(cut):
    body = _body()
    with pytest.raises(frames.FrameError, match="ends inside a frame"):
        _decode_all(body[:cut])


def test_a_well_framed_payload_that_is_not_arrow_or_json_is_a_frame_error():
    with pytest.raises(frames.FrameError, match="not a valid Arrow IPC stream"):
        frames.Frame(frames.ROWS, b"not arrow at all").batch()
    with pytest.raises(frames.FrameError, match="not valid JSON"):
        frames.Frame(frames.SUMMARY, b"\xff{").json()
    with pytest.raises(frames.FrameError, match="expected an object"):
        frames.Frame(frames.SUMMARY, b"[1, 2]").json()


def test_an_oversized_length_prefix_is_refused_before_reading_it():
    header = frames._HEADER.pack(frames.ROWS, frames.MAX_FRAME_BYTES + 1, 0)
    with pytest.raises(frames.FrameError, match="exceeds"):
        _decode_all(header + b"x" * 100)


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(
    st.lists(
        st.tuples(st.integers(-(2**63), 2**63 - 1), st.integers(-(2**63), 2**63 - 1), st.text(max_size=3)), max_size=30
    )
)
def test_delta_coding_round_trips_every_int64_column_and_leaves_others(rows):
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array([r[0] for r in rows], pa.int64()),
            pa.array([r[1] for r in rows], pa.int64()),
            pa.array([r[2] for r in rows], pa.string()),
        ],
        names=["__uid", "k", "t"],
    )
    coded = frames.delta_encode(batch)
    assert coded.column(2).equals(batch.column(2))
    [frame] = frames.read_frames([frames.arrow_frame(frames.UNIT_KEYS_DELTA, coded)])
    decoded = frames.delta_decode(frame.batch())
    assert decoded.equals(batch)


def test_delta_coding_packs_ascending_keys_and_refuses_nulls():
    keys = pa.array(range(1_000_000, 1_065_536), pa.int64())
    uids = pa.array([i // 9 for i in range(65_536)], pa.int64())
    plain = pa.RecordBatch.from_arrays([uids, keys], names=["__uid", "k"])
    assert len(frames.arrow_frame(frames.UNIT_KEYS_DELTA, frames.delta_encode(plain))) * 10 < len(
        frames.arrow_frame(frames.UNIT_KEYS, plain)
    )
    with_null = pa.RecordBatch.from_arrays(
        [uids, pa.array([None] + list(range(65_535)), pa.int64())], names=["__uid", "k"]
    )
    assert frames.delta_encode(with_null) is None
    with pytest.raises(frames.FrameError, match="NULL"):
        frames.delta_decode(with_null)
