"""Reading the site query in key-range chunks, each in its own short read-only transaction.

A legacy OLTP database must barely notice us (Carnes and Hanson, "Query-Based Change
Detection", on the load a change detector puts on the source): a scan in one transaction
holds its snapshot (PostgreSQL: vacuum cannot clean behind it) or its shared lock (SQLite:
writers cannot commit) for as long as the whole extraction lasts. So the agent reads the
site query by keyset pagination, `... WHERE (k1, k2) >= (cursor) ORDER BY k1, k2 LIMIT n`,
each chunk a statement of its own transaction that ends before a row goes on the wire;
the statement timeout bounds each transaction, and between chunks the connection is idle.

What this means for exactness — the result is a *fuzzy snapshot*, and that is enough:

- Chunks cover consecutive, disjoint key ranges, and the cursor only moves forward: every
  key present throughout the scan is read exactly once, never skipped and never twice.
  A row updated between chunks is read either before or after the update, once.
- A key inserted below the cursor (or deleted above it) after the scan passed (or before
  it got there) is missed (or not seen) this time: to the warehouse it looks as if the
  change had happened just after (before) the sync. Lookups of changed groups run later,
  in transactions of their own, and may see a newer state still.
- None of that can leave the warehouse wrong for good: it stores rows, not the agent's
  verdicts, and every sync compares the stored rows afresh with the source (hashes are
  computed from what the warehouse holds). A sync with no concurrent writes therefore
  sees one consistent state and makes the view exactly equal to the source — which is
  what the exactness tests check.

Keys are compared by the database, in its own order, with the values read back as
parameters (`Adapter.rebind`); Python never orders keys. A NULL in a key column is an
error as before; where NULL sorts last (PostgreSQL) such rows never come after a cursor,
so a nullable key is probed for NULLs once before the second chunk.

A ranged read (`ValidatedQuery.within`, the range-checksum strategy's later rounds) walks
each of its key intervals the same way: the interval's lower bound is the first cursor,
its upper bound a condition of every chunk, both bound as parameters; its key is ordered
as the adapter guarantees Python orders the values (`Adapter.range_key`), because there
the agent, not the database, decides which range a row belongs to.

A resumed read (`ValidatedQuery.resumed_after`, a full read's retry: deltasieve_protocol/resume.py)
starts after the key of the last row the warehouse kept, its first chunk compared with `>`
by the database, bound as the warehouse sent it (`Adapter.bind`): to the warehouse, the
two attempts together are one fuzzy snapshot as above, the pause between them like the
one between two chunks.

`batches` is what the strategies' scans use: the chunks as Arrow batches, with the time
spent reading and converting counted.

The next chunk is not read in a thread while the current one is hashed: measured at 1M
rows on 2 cores, it saved nothing with SQLite or PostgreSQL (sqlite3 and psycopg build
their Python rows holding the GIL, so the reading thread only slowed the hashing down).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Iterator, Sequence
from operator import itemgetter

import pyarrow as pa
import pyarrow.compute as pc

from remote_agent.adapters.base import Adapter, Session
from remote_agent.adapters.rows import RowConverter
from remote_agent.errors import SourceDataError, example_row
from remote_agent.pacing import Pacer
from remote_agent.settings import DEFAULT_CHUNK_ROWS
from remote_agent.sitequery import ValidatedQuery
from remote_agent.timings import Timings

__all__ = [
    "DEFAULT_CHUNK_ROWS",
    "arrow_readable",
    "batches",
    "scan",
    "slices",
    "probe_null_keys",
    "check_key",
    "check_keys",
    "same_key",
]

#: Rows converted to Arrow at a time: small enough that a batch of wide rows stays small,
#: large enough that the per-batch costs of conversion and hashing are amortised.
CONVERT_ROWS = 10_000


def batches(
    adapter: Adapter,
    session: Session,
    query: ValidatedQuery,
    converter: RowConverter,
    *,
    chunk_rows: int,
    batch_rows: int,
    timings: Timings,
    pacer: Pacer | None = None,
) -> Iterator[pa.RecordBatch]:
    """Every row of the site query in key order, as Arrow batches of at most `batch_rows` rows.

    The time waited for rows goes to `timings.read_s` (less the time `pacer` slept), the
    conversion to `convert_s`.
    """
    chunked = scan(adapter, session, query, chunk_rows, arrow=converter, pacer=pacer)
    for rows in timings.timed("read_s", slices(chunked, min(batch_rows, CONVERT_ROWS))):
        if pacer is not None:
            timings.seconds["read_s"] -= pacer.take_slept()
        if isinstance(rows, pa.RecordBatch):  # read as canonical Arrow columns already
            yield rows
            continue
        with timings.phase("convert_s"):
            batch = converter.batch(rows, query.key)
        yield batch


def scan(
    adapter: Adapter,
    session: Session,
    query: ValidatedQuery,
    chunk_rows: int,
    *,
    arrow: RowConverter | None = None,
    pacer: Pacer | None = None,
) -> Iterator[list[tuple] | pa.Table]:
    """Every row of the site query in key order, as lists of at most `chunk_rows` raw rows.

    Each list is read in one transaction of `session`, ended before the list is yielded.
    With `arrow`, a chunk the reader can read as canonical Arrow columns of `arrow.schema`
    (`Reader.arrow`) comes as a table instead of a list. With `pacer`, each chunk asks for
    the rows the pacer says and starts when it says (pacing.py).

    Raises:
        SourceDataError: a key column holds NULL, or more than `chunk_rows` rows share a key.
    """
    if chunk_rows < 1:
        raise ValueError("chunk_rows must be at least 1")
    for start, stop in query.intervals or [(None, None)]:
        yield from _walk(adapter, session, query, chunk_rows, start, stop, arrow=arrow, pacer=pacer)


def _walk(
    adapter: Adapter,
    session: Session,
    query: ValidatedQuery,
    chunk_rows: int,
    start: tuple | None,
    stop: tuple | None,
    *,
    arrow: RowConverter | None,
    pacer: Pacer | None,
) -> Iterator[list[tuple] | pa.Table]:
    """The rows of one key interval [start, stop) (bound parameters; None: unbounded), chunk by chunk.

    The lower bound is the first chunk's cursor, the upper one a condition of every chunk.
    """
    positions = query.key_positions
    # No comparison holds for NULL: an interval's bound keeps out the rows a probe would find.
    nullable = not query.intervals and any(c.nullable for c in query.columns if c.name in query.key)

    types = [c.type for c in query.columns]
    if not arrow_readable(query):
        arrow = None
    upper = list(stop) if stop is not None else []

    def key_of(rows: list[tuple] | pa.Table, i: int) -> tuple:
        if isinstance(rows, pa.Table):
            return tuple(rows.column(p)[i].as_py() for p in positions)
        return tuple(rows[i][p] for p in positions)

    cursor: tuple | None = None
    tail = 0  # rows of the last chunk, at its end, that have the cursor's key
    statements: dict[tuple[int, bool, bool], str] = {}  # each chunk's SQL by (limit, from a cursor, strictly)
    after = None if query.intervals else query.after
    if after is not None and nullable and not query.nulls_first:
        probe_null_keys(session, query)  # a NULL key sorts after every cursor: the first chunk misses it too
    while True:
        # Inclusive of the cursor: the rows with its key come back first; asking for `tail`
        # more rows keeps a chunk at `chunk_rows` new rows.
        limit = (chunk_rows if pacer is None else pacer.next_rows()) + tail
        if cursor is not None:
            params = [adapter.rebind(v) for v in cursor]
        elif after is not None:  # a resumed read: strictly after the key the warehouse holds
            params = list(after)
        else:
            params = list(start) if start is not None else []
        strictly = cursor is None and after is not None
        shape = (limit, bool(params), strictly)
        if shape not in statements:  # rendered once: sqlglot takes milliseconds a statement
            statements[shape] = query.chunk_sql(
                limit, from_cursor=bool(params), below=stop is not None, strictly=strictly
            )
        sql = statements[shape]
        params += upper
        started = time.perf_counter()
        with session.read() as reader:
            rows = None if arrow is None else reader.arrow(sql, params, types=types, schema=arrow.schema, key=positions)
            if rows is None:
                rows = reader.rows(sql, params, limit=limit)
        read_s = time.perf_counter() - started
        full = len(rows) == limit
        if cursor is not None:
            seen = 0
            while seen < min(tail, len(rows)) and same_key(key_of(rows, seen), cursor):
                seen += 1
            rows = rows.slice(seen) if isinstance(rows, pa.Table) else rows[seen:]  # read in the last chunk
        if pacer is not None:
            pacer.chunk_read(len(rows), read_s)  # the new rows; it may sleep (no transaction open)
        check_keys(rows, positions, query)
        if len(rows):
            yield rows
        if not full:
            return
        last = key_of(rows, len(rows) - 1)
        run = 1
        while run < len(rows) and same_key(key_of(rows, len(rows) - run - 1), last):
            run += 1
        tail = tail + run if cursor is not None and same_key(last, cursor) else run
        if tail > chunk_rows:
            raise SourceDataError(
                f"more than {chunk_rows} rows of the site query share the key {dict(zip(query.key, last))}: the declared key {query.key} is not unique at the source"
            )
        if cursor is None and nullable and not query.nulls_first and after is None:
            probe_null_keys(session, query)
        cursor = last


def arrow_readable(query: ValidatedQuery) -> bool:
    """Whether the site query's rows may be read as canonical Arrow columns (`Reader.arrow`).

    Not when a column is read as a stronger type than declared (its strict converter reads
    it), nor hashed or masked (policies.py: transformed value by value).
    """
    return not any(c.read_from is not None or c.policy is not None for c in query.columns)


def slices(chunked: Iterable[list[tuple] | pa.Table], size: int) -> Iterator[list[tuple] | pa.RecordBatch]:
    """The rows of every chunk again, in lists (batches, of a table) of at most `size`.

    >>> list(slices([[1, 2, 3], [4]], 2))
    [[1, 2], [3], [4]]
    """
    for rows in chunked:
        if isinstance(rows, pa.Table):
            yield from rows.to_batches(max_chunksize=size)
            continue
        for start in range(0, len(rows), size):
            yield rows[start : start + size]


def probe_null_keys(session: Session, query: ValidatedQuery) -> None:
    """Fail if a row of the site query has a NULL in a key column (one short read)."""
    positions = query.key_positions
    with session.read() as reader:
        found = reader.rows(query.null_key_sql(), limit=1)
    for row in found:
        check_key(tuple(row[p] for p in positions), query, row)


def check_keys(rows: list[tuple] | pa.Table, positions: Sequence[int], query: ValidatedQuery) -> None:
    """Fail on the first row with a NULL in a key column (see `check_key`).

    The scan of a column runs in C (`None in` over an itemgetter map, or Arrow's null
    count): a Python call per row cost more than the driver's own fetch.

    >>> check_keys([(1, "a"), (2, "b")], [0], query=None)
    """
    if isinstance(rows, pa.Table):
        nulls = [_first_null(rows.column(p)) for p in positions if rows.column(p).null_count]
        if nulls:
            row = tuple(column[min(nulls)].as_py() for column in rows.columns)
            check_key(tuple(row[q] for q in positions), query, row)
        return
    for p in positions:
        column = list(map(itemgetter(p), rows))
        if None in column:
            row = rows[column.index(None)]
            check_key(tuple(row[q] for q in positions), query, row)


def _first_null(column: pa.ChunkedArray) -> int:
    return pc.index(column.is_null(), True).as_py()


def check_key(key: tuple, query: ValidatedQuery, row: Sequence) -> None:
    """Fail on a NULL in a key column, naming the table, the key and the row."""
    if any(v is None for v in key):
        shown = key[0] if len(key) == 1 else key
        raise SourceDataError(
            f"{query.where()}: NULL in key column(s) {list(query.key)} (key {shown!r}) of the row {example_row(dict(zip((c.name for c in query.columns), row)))}; "
            "the view's key must identify every row, so key columns must be non-NULL: fix the row at the source, or exclude it in the view's WHERE"
        )


def same_key(a: tuple, b: tuple) -> bool:
    """Equal keys as the database sees them (a NaN equals itself in a database's order).

    >>> same_key((1, float("nan")), (1, float("nan"))), same_key((1, 2.0), (1, 3.0))
    (True, False)
    """
    return all(
        x == y or (isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y))
        for x, y in zip(a, b)
    )
