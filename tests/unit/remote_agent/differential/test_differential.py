"""Snapshot differentials (remote_agent/differential/) against a brute-force oracle.

Snapshots are random keyed tables changed between two dumps (updates, deletes, inserts)
and reordered: every record moves within a chunk of `spread` records. The exact joins must
equal the oracle in any order; the window algorithm must equal it after `reconcile`
whatever its buffers, and produce no useless pair when its aging buffers hold more than
the records move.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from remote_agent.differential import DELETE, INSERT, UPDATE, distance, reconcile
from remote_agent.differential.partitioned_hash import partitioned_hash
from remote_agent.differential.sort_merge import sort_merge
from remote_agent.differential.window import window, window_blocks


def snapshots(seed: int, rows: int, spread: int) -> tuple[list, list]:
    """An old and a new dump: ~5 % updated, ~2 % deleted, ~2 % inserted, each dump's records
    shuffled within chunks of `spread` (the new one shifted by half a chunk)."""
    rng = random.Random(seed)
    old = [(k, rng.randrange(1000)) for k in rng.sample(range(rows * 3), rows)]
    new = []
    for key, value in old:
        r = rng.random()
        if r < 0.05:
            new.append((key, value + 1))
        elif r >= 0.07:
            new.append((key, value))
    for _ in range(rows // 50):
        new.insert(rng.randrange(len(new) + 1), (rows * 3 + rng.randrange(10**6), 0))
    new = list(dict(new).items())  # an inserted key drawn twice is one record

    def shuffled(records: list, offset: int) -> list:
        out = records[:offset]
        rng.shuffle(out)
        for i in range(offset, len(records), spread):
            chunk = records[i : i + spread]
            rng.shuffle(chunk)
            out += chunk
        return out

    return shuffled(old, 0), shuffled(new, spread // 2)


def truth(old: list, new: list) -> set:
    a, b = dict(old), dict(new)
    out = {(UPDATE, k, a[k], b[k]) for k in a.keys() & b.keys() if a[k] != b[k]}
    out |= {(DELETE, k, a[k], None) for k in a.keys() - b.keys()}
    return out | {(INSERT, k, None, b[k]) for k in b.keys() - a.keys()}


def as_set(changes) -> set:
    return {(c.op, c.key, c.old, c.new) for c in changes}


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("spread", [1, 40, 2000])
def test_the_joins_are_exact_in_any_order(seed, spread):
    old, new = snapshots(seed, 2000, spread)
    assert as_set(sort_merge(old, new)) == truth(old, new)
    assert as_set(partitioned_hash(old, new, partitions=7)) == truth(old, new)


@pytest.mark.parametrize("seed", range(4))
def test_the_window_is_exact_without_useless_pairs_when_records_move_less_than_it_holds(seed):
    old, new = snapshots(seed, 3000, spread=40)
    folded = reconcile(window(old, new, block_rows=16, aging_rows=400))
    assert as_set(folded.changes) == truth(old, new)
    assert folded.useless_pairs == 0 and folded.split_updates == 0


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("aging_rows", [1, 8, 30])
def test_the_window_is_exact_after_reconcile_when_records_move_further(seed, aging_rows):
    old, new = snapshots(seed, 3000, spread=200)
    raw = list(window(old, new, block_rows=4, aging_rows=aging_rows))
    folded = reconcile(raw)
    assert as_set(folded.changes) == truth(old, new)
    assert folded.useless_pairs > 0  # moved records came out as a delete and an insert
    assert len(raw) == len(folded.changes) + 2 * folded.useless_pairs + folded.split_updates


def test_fewer_useless_pairs_with_larger_aging_buffers():
    old, new = snapshots(7, 3000, spread=200)
    useless = [reconcile(window(old, new, block_rows=4, aging_rows=n)).useless_pairs for n in (4, 32, 128, 512)]
    assert useless == sorted(useless, reverse=True) and useless[-1] == 0 and useless[0] > 100


def test_distance_grows_with_the_spread():
    near, far = snapshots(1, 2000, spread=10), snapshots(1, 2000, spread=1000)
    assert distance(*near) < distance(*far) < 1


def test_reconcile_refuses_a_key_deleted_twice():
    from remote_agent.differential import Change

    with pytest.raises(ValueError, match="twice"):
        reconcile([Change(DELETE, 1, old=1), Change(DELETE, 1, old=1)])


def as_blocks(records: list, sizes: list[int]) -> list:
    """`records` as (keys, values) arrays, cut at sizes unrelated to the window's blocks."""
    out, i = [], 0
    while i < len(records):
        part = records[i : i + sizes[len(out) % len(sizes)]]
        out.append((np.array([k for k, _ in part], np.int64), np.array([v for _, v in part], np.uint64)))
        i += len(part)
    return out


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("aging_rows", [1, 30, 5000])
def test_the_window_over_arrays_gives_the_window_s_differential(seed, aging_rows):
    old, new = snapshots(seed, 3000, spread=200)
    expected = as_set(window(old, new, block_rows=16, aging_rows=aging_rows))
    got = list(window_blocks(as_blocks(old, [7, 100]), as_blocks(new, [33]), block_rows=16, aging_rows=aging_rows))
    assert as_set(got) == expected and len(got) == len(expected)
    assert all(isinstance(c.key, int) and not isinstance(c.new, np.generic) for c in got)
    assert as_set(reconcile(got).changes) == truth(old, new)
