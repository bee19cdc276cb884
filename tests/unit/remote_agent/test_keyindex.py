"""The agent's columnar key index finds exactly the keys a dict would, for every key shape.

A dict from Python key to position is the reference: the index must agree with it on
keys that are present, absent, and (with a deliberately weak fingerprint) on keys whose
fingerprints collide.
"""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deltasieve_protocol.encoding import combine, limbs_to_bytes, row_hash_limbs, row_hashes
from deltasieve_protocol.types import Column, LogicalType
from deltasieve_protocol.wire import key_values
from remote_agent.errors import BadRequest
from remote_agent.keyindex import KeyIndex, hashed_fingerprint
from remote_agent.strategies.group_hash import UnitIndex

INT = [Column("id", LogicalType("int"))]
TEXT_DATE = [Column("name", LogicalType("text")), Column("day", LogicalType("date"))]


def weak(columns):
    """A fingerprint with four values, so that most keys collide."""
    strong = hashed_fingerprint(columns)
    return lambda keys: strong(keys) % np.uint64(4)


def table(columns, keys):
    if len(columns) == 1:
        return pa.table({columns[0].name: pa.array(keys, columns[0].type.arrow())})
    return pa.table({c.name: pa.array([k[i] for k in keys], c.type.arrow()) for i, c in enumerate(columns)})


def built(columns, keys, fingerprint=None) -> KeyIndex:
    index = KeyIndex(columns, "unit", fingerprint=fingerprint)
    half = len(keys) // 2
    index.add(table(columns, keys[:half]), np.arange(half))
    index.add(table(columns, keys[half:]), np.arange(half, len(keys)))
    index.freeze()
    return index


def agrees_with_dict(index: KeyIndex, columns, sent, probes) -> None:
    reference = {k: i for i, k in enumerate(sent)}
    found = index.find(table(columns, probes))
    got = [int(index.payload[p]) if p >= 0 else None for p in found]
    assert got == [reference.get(k) for k in probes]
    for p, k in zip(found, probes):
        if p >= 0:
            assert key_values(index.keys(np.array([p])), [c.name for c in columns]) == [k]


int_keys = st.lists(st.integers(-(2**63), 2**63 - 1), unique=True, max_size=60)
text_date_keys = st.lists(
    st.tuples(st.text(max_size=4), st.dates(dt.date(1, 1, 1), dt.date(9999, 12, 31))), unique=True, max_size=60
)


@settings(max_examples=60, deadline=None)
@given(sent=int_keys, others=int_keys)
def test_integer_keys_are_their_own_fingerprint(sent, others):
    index = built(INT, sent)
    assert index.exact
    agrees_with_dict(index, INT, sent, sent[::-1] + others)


@settings(max_examples=60, deadline=None)
@given(sent=text_date_keys, others=text_date_keys)
def test_composite_keys_are_confirmed_after_the_fingerprint(sent, others):
    index = built(TEXT_DATE, sent)
    assert not index.exact
    agrees_with_dict(index, TEXT_DATE, sent, sent[::-1] + others)


@settings(max_examples=60, deadline=None)
@given(sent=text_date_keys, others=text_date_keys)
def test_colliding_fingerprints_still_find_the_right_key(sent, others):
    agrees_with_dict(built(TEXT_DATE, sent, weak(TEXT_DATE)), TEXT_DATE, sent, sent + others)


def test_collisions_on_an_integer_key_with_a_hashed_fingerprint():
    sent = list(range(0, 200, 3))
    index = built(INT, sent, weak(INT))
    assert not index.exact and index._shared
    agrees_with_dict(index, INT, sent, list(range(-5, 205)))


@pytest.mark.parametrize(
    "columns, keys", [(INT, [1, 2, 1]), (TEXT_DATE, [("a", dt.date(2020, 1, 1)), ("a", dt.date(2020, 1, 1))])]
)
@pytest.mark.parametrize("weakened", [False, True])
def test_a_key_sent_twice_is_refused(columns, keys, weakened):
    with pytest.raises(BadRequest, match="is in more than one unit"):
        built(columns, keys, weak(columns) if weakened else None)


def test_keys_of_the_wrong_type_or_null_are_refused():
    index = KeyIndex(INT, "unit")
    with pytest.raises(BadRequest, match="key's types"):
        index.add(pa.table({"id": ["x"]}), np.array([0]))
    with pytest.raises(BadRequest, match="NULL"):
        index.add(pa.table({"id": pa.array([None], pa.int64())}), np.array([0]))
    with pytest.raises(BadRequest, match="lacks key columns"):
        index.add(pa.table({"other": [1]}), np.array([0]))


def test_a_narrower_integer_type_on_the_wire_is_widened():
    index = KeyIndex(INT, "unit")
    index.add(pa.table({"id": pa.array([5, 7], pa.int32())}), np.array([0, 1]))
    index.freeze()
    assert index.find(pa.table({"id": pa.array([7, 6, 5], pa.int64())})).tolist() == [1, -1, 0]


def test_an_empty_index_finds_nothing():
    index = KeyIndex(TEXT_DATE, "unit")
    index.freeze()
    assert index.find(table(TEXT_DATE, [("a", dt.date(2000, 1, 1))])).tolist() == [-1]
    assert index.keys().num_rows == 0


@pytest.mark.parametrize("bits", [64, 128])
def test_unit_sums_equal_the_group_hash_of_the_rows_met(bits):
    """Limb sums with carries give what `combine` gives on Python integers."""
    rows = pa.table({"id": list(range(300)), "v": [f"value {i}" * (i % 5) for i in range(300)]})
    columns = [Column("id", LogicalType("int")), Column("v", LogicalType("text"))]
    unit_of = np.random.default_rng(3).integers(0, 9, 300)
    units = UnitIndex(INT, bits)
    units.add_units(
        pa.record_batch(
            {
                "__uid": pa.array(range(100, 109), pa.int64()),
                "__hash": pa.array([b"\0" * (bits // 8)] * 9, pa.binary(bits // 8)),
            }
        )
    )
    units.add_keys(
        pa.record_batch({"__uid": pa.array(unit_of + 100, pa.int64()), "id": rows.column("id").combine_chunks()})
    )
    units.freeze()
    for start in (0, 100, 250):  # several scan batches
        part = rows.slice(start, {0: 100, 100: 150, 250: 50}[start])
        units.met(units.keys.find(part), row_hash_limbs(part, columns, 11, bits))
    hashes = row_hashes(rows, columns, 11, bits)
    want = [combine([h for h, u in zip(hashes, unit_of) if u == unit], bits) for unit in range(9)]
    got = [int.from_bytes(b, "big") for b in limbs_to_bytes(units.totals(np.arange(9)))]
    assert got == want
    assert units.counts.tolist() == np.bincount(unit_of, minlength=9).tolist() == units.sizes.tolist()


def test_unit_requests_that_do_not_add_up_are_refused():
    units = UnitIndex(INT, 64)
    units.add_units(
        pa.record_batch({"__uid": pa.array([1, 2], pa.int64()), "__hash": pa.array([b"\0" * 8] * 2, pa.binary(8))})
    )
    with pytest.raises(BadRequest, match="refers to unit 3, which was not sent"):
        units.add_keys(pa.record_batch({"__uid": pa.array([1, 3], pa.int64()), "id": pa.array([10, 11], pa.int64())}))
    with pytest.raises(BadRequest, match="not 8 bytes"):
        units.add_units(
            pa.record_batch({"__uid": pa.array([4], pa.int64()), "__hash": pa.array([b"\0" * 16], pa.binary(16))})
        )
    twice = UnitIndex(INT, 64)
    twice.add_units(
        pa.record_batch({"__uid": pa.array([1, 1], pa.int64()), "__hash": pa.array([b"\0" * 8] * 2, pa.binary(8))})
    )
    with pytest.raises(BadRequest, match="unit 1 sent twice"):
        twice.freeze()
