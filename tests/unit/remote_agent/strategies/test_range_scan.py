"""The agent's ranged re-reads (strategies/range_checksum.py) on real SQLite and PostgreSQL.

Random ranges over the keys in Python's order, some to ship, the others summed: what the
ranged read counts and ships in each range must be what a full read placed in it by
Python's order, and it must have read the rows of the ranges only. On PostgreSQL the text
key sorts under a language collation (case and accents last), unlike Python.
"""

from __future__ import annotations

import random
import sqlite3
from collections import Counter

import psycopg
import pytest

from deltasieve_protocol import frames
from deltasieve_protocol.ranges import RangeSet
from deltasieve_protocol.wire import COUNT, RID, key_values
from remote_agent import key_intervals
from remote_agent.adapters import open_adapter
from remote_agent.settings import ScanSettings
from remote_agent.sitequery import validate_site_query
from remote_agent.strategies.range_checksum import range_scan
from tests.support.collations import STEMS, VARIANTS, language_collation

WORDS = sorted({(v(s) + end, n) for s in STEMS for v in VARIANTS for end in ("", " ", "Z", "é") for n in range(3)})

CODES = sorted({w for w, _ in WORDS} | {f"K{i:03}é" for i in range(300)})


def _query(adapter, sql: str, key: list[str]):
    return validate_site_query(sql, key, {t.name: t for t in adapter.describe()}, adapter.dialect)


def _answer(adapter, query, ranges: RangeSet, chunk_rows: int):
    counts, shipped, summary = {}, [], None
    body = range_scan(adapter, query, ranges, seed=3, bits=128, batch_rows=50, scan=ScanSettings(chunk_rows=chunk_rows))
    for f in frames.read_frames(body):
        if f.kind == frames.RANGE_SUMS:
            counts.update(zip(f.batch().column(RID).to_pylist(), f.batch().column(COUNT).to_pylist()))
        elif f.kind == frames.ROWS:
            shipped.extend(key_values(f.batch(), query.key))
        elif f.kind == frames.SUMMARY:
            summary = f.json()
    return counts, shipped, summary


def _random_ranges(keys: list, rng: random.Random, key: list[str]) -> RangeSet:
    """Ranges cut at random keys (bounds between keys too), about half of them asked about."""
    cuts = sorted(set(rng.sample(keys, 40)))
    bounds = [None, *cuts, None]
    ranges = RangeSet(key=key)
    for rid, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        if rng.random() < 0.5:
            ranges.append(rid, lo, hi, rng.random() < 0.3, (-1, 0))  # a count no range has: all differ
    if not ranges.rids:
        ranges.append(0, cuts[0], cuts[1], False, (-1, 0))
    ranges.freeze()
    return ranges


def _check(adapter, query, keys: list, seed: int, chunk_rows: int, *, ranged: bool = True):
    rng = random.Random(seed)
    ranges = _random_ranges(keys, rng, query.key)
    placed = Counter(ranges.locate(k) for k in keys)
    counts, shipped, summary = _answer(adapter, query, ranges, chunk_rows)
    for i, rid in enumerate(ranges.rids):
        if ranges.ship[i]:
            assert sorted(k for k in shipped if ranges.locate(k) == i) == sorted(
                k for k in keys if ranges.locate(k) == i
            )
        elif placed[i]:
            assert counts[rid] == placed[i], (rid, ranges.los[i], ranges.his[i])
    assert len(shipped) == sum(placed[i] for i in range(len(ranges.rids)) if ranges.ship[i])
    assert summary["ranged"] is ranged, summary
    wanted = sum(n for i, n in placed.items() if i is not None)
    if not ranged:
        assert summary["rows_scanned"] == len(keys) and summary["full_scan_reason"], summary
    elif summary["intervals"] == len(key_intervals.merge(list(zip(ranges.los, ranges.his)))):
        assert summary["rows_scanned"] == wanted, summary  # nothing read between the ranges
    else:  # intervals joined across gaps: their rows read too, never the whole query
        assert wanted < summary["rows_scanned"] < len(keys), summary
    return summary


@pytest.fixture(scope="module")
def pg(postgres):
    with psycopg.connect(postgres.owner_url, autocommit=True) as c:
        collation = language_collation(c)
        c.execute(f'CREATE TABLE words (w text COLLATE "{collation}", n integer, v text, PRIMARY KEY (w, n))')
        c.cursor().executemany("INSERT INTO words VALUES (%s, %s, 'x')", WORDS)
        c.execute("CREATE TABLE codes (k varchar(20) PRIMARY KEY)")
        c.cursor().executemany("INSERT INTO codes VALUES (%s)", [(k,) for k in CODES])
        c.execute("CREATE TABLE nums (k bigint PRIMARY KEY, v text)")
        c.execute("INSERT INTO nums SELECT i * 3, 'v' FROM generate_series(-200, 300) i")
        c.execute("CREATE TABLE reals (k double precision PRIMARY KEY)")
        c.execute("INSERT INTO reals SELECT i / 4.0 FROM generate_series(1, 200) i")
        c.execute("GRANT SELECT ON ALL TABLES IN SCHEMA public TO reader")
    return postgres


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("chunk_rows", [7, 10_000])
def test_postgres_text_keys_under_a_language_collation(pg, seed, chunk_rows):
    adapter = open_adapter(pg.reader_url, statement_timeout_s=5)
    query = _query(adapter, "SELECT x.w, x.n, x.v FROM words x", ["w", "n"])
    summary = _check(adapter, query, WORDS, seed, chunk_rows)
    assert summary["intervals"] <= key_intervals.MAX_UNINDEXED_INTERVALS, "each bound statement scans the table"


@pytest.mark.parametrize("seed", range(3))
def test_postgres_text_keys_in_byte_order_already(pg, seed):
    # The server's default collation is C: the key is bounded as it is, so its index serves.
    adapter = open_adapter(pg.reader_url, statement_timeout_s=5)
    query = _query(adapter, "SELECT c.k FROM codes c", ["k"])
    summary = _check(adapter, query, CODES, seed, 3)
    assert summary["intervals"] > key_intervals.MAX_UNINDEXED_INTERVALS


@pytest.mark.parametrize("seed", range(3))
def test_postgres_integer_keys(pg, seed):
    adapter = open_adapter(pg.reader_url, statement_timeout_s=5)
    query = _query(adapter, "SELECT t.k, t.v FROM nums t WHERE t.k <> 30", ["k"])
    _check(adapter, query, [k for k in range(-600, 901, 3) if k != 30], seed, 5)


def test_postgres_float_keys_read_the_whole_query(pg):
    adapter = open_adapter(pg.reader_url, statement_timeout_s=5)
    query = _query(adapter, "SELECT r.k FROM reals r", ["k"])
    _check(adapter, query, [i / 4 for i in range(1, 201)], 0, 1000, ranged=False)


@pytest.fixture(scope="module")
def sqlite_url(tmp_path_factory):
    path = tmp_path_factory.mktemp("ranges") / "legacy.db"
    with sqlite3.connect(path) as c:
        c.execute("CREATE TABLE pairs (a INTEGER NOT NULL, b INTEGER NOT NULL, v TEXT, PRIMARY KEY (a, b))")
        c.executemany("INSERT INTO pairs VALUES (?, ?, 'v')", [(a, b) for a in range(-5, 25) for b in range(9)])
        c.execute("CREATE TABLE names (k TEXT PRIMARY KEY)")
        c.executemany("INSERT INTO names VALUES (?)", [(w,) for w, _ in WORDS if _ == 0])
    return f"sqlite:///{path}"


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("chunk_rows", [4, 10_000])
def test_sqlite_composite_integer_keys(sqlite_url, seed, chunk_rows):
    adapter = open_adapter(sqlite_url, statement_timeout_s=5)
    query = _query(adapter, "SELECT p.a, p.b, p.v FROM pairs p WHERE p.b <> 2", ["a", "b"])
    keys = [(a, b) for a in range(-5, 25) for b in range(9) if b != 2]
    _check(adapter, query, keys, seed, chunk_rows)


def test_sqlite_text_keys_read_the_whole_query(sqlite_url):
    # A text column may hold blobs, which SQLite sorts after all text (Adapter.range_key).
    adapter = open_adapter(sqlite_url, statement_timeout_s=5)
    query = _query(adapter, "SELECT n.k FROM names n", ["k"])
    _check(adapter, query, sorted({w for w, n in WORDS if n == 0}), 1, 1000, ranged=False)
