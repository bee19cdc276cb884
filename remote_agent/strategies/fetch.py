"""Current rows of the site query for given keys: /v1/fetch, and the changed groups of an extraction."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from deltasieve_protocol import frames
from deltasieve_protocol.wire import key_values
from remote_agent import chunks
from remote_agent.adapters.base import Adapter, Session
from remote_agent.adapters.rows import RowConverter
from remote_agent.settings import ScanSettings
from remote_agent.sitequery import ValidatedQuery
from remote_agent.timings import Timings

#: Keys per lookup statement; well under SQLite's and PostgreSQL's bound-parameter limits.
LOOKUP_CHUNK = 500


def fetch_rows(
    adapter: Adapter, query: ValidatedQuery, keys: list, *, batch_rows: int, scan: ScanSettings | None = None
) -> Iterator[bytes]:
    """The answer of /v1/fetch: ROWS frames with the current rows for `keys`, then a summary.

    At most `scan.chunk_rows` keys per statement (`lookup_rows`); lookups are not paced.
    """
    scan = scan or ScanSettings()
    converter = RowConverter(
        adapter, query.columns, query.where(), hash_key=query.hash_key
    )  # now, before the answer's first byte
    timings = Timings()

    def answer() -> Iterator[bytes]:
        started = time.monotonic()
        sent = 0
        with adapter.session() as session:
            looked_up = lookup_rows(adapter, session, query, converter, keys, batch_rows, scan.chunk_rows)
            for batch in timings.timed("lookup_s", looked_up):
                sent += batch.num_rows
                yield frames.arrow_frame(frames.ROWS, batch)
        summary = {"rows": sent, "keys": len(keys), "elapsed_s": round(time.monotonic() - started, 4)}
        yield frames.json_frame(frames.SUMMARY, {**summary, "timings": timings.to_json()})

    return timings.sending(answer())


def lookup_rows(
    adapter: Adapter,
    session: Session,
    query: ValidatedQuery,
    converter: RowConverter,
    keys: list,
    batch_rows: int,
    chunk_rows: int = chunks.DEFAULT_CHUNK_ROWS,
) -> Iterator[pa.RecordBatch]:
    """Current rows of the site query for `keys`, in batches.

    At most `chunk_rows` keys per statement, each statement in a transaction of its own,
    read as canonical Arrow columns where the reader can (`Reader.arrow`), as a scan's chunks are.
    """
    if not keys:
        return
    if adapter.can_lookup([c.type for c in query.columns if c.name in query.key]):
        types = [c.type for c in query.columns] if chunks.arrow_readable(query) else None
        pending: list[pa.RecordBatch] = []
        pending_rows = 0
        per_statement = min(LOOKUP_CHUNK, chunk_rows)
        statements: dict[int, str] = {}  # rendered once per number of keys: every chunk but the last has as many
        for start in range(0, len(keys), per_statement):
            chunk = keys[start : start + per_statement]
            params: list[Any] = []
            for k in chunk:
                params.extend(k if isinstance(k, tuple) else (k,))
            if len(chunk) not in statements:
                statements[len(chunk)] = query.lookup_sql(len(chunk))
            sql = statements[len(chunk)]
            bound = [adapter.bind(v) for v in params]
            with session.read() as reader:  # a key matches one row at most: the read is bounded
                read = None
                if types is not None:
                    read = reader.arrow(sql, bound, types=types, schema=converter.schema, key=query.key_positions)
                rows = reader.rows(sql, bound, limit=len(chunk)) if read is None else []
            if read is not None:
                batch = read.combine_chunks().to_batches()[0] if read.num_rows else None
            else:
                batch = converter.batch(rows, query.key) if rows else None
            if batch is not None:
                if not adapter.exact_lookups:  # the database may match keys Python tells apart
                    asked = set(chunk)  # this statement's: another's would be read twice
                    batch = batch.filter(pa.array([k in asked for k in key_values(batch, query.key)], pa.bool_()))
                pending.append(batch)
                pending_rows += batch.num_rows
            if pending_rows >= batch_rows:
                yield pa.Table.from_batches(pending, schema=converter.schema).combine_chunks().to_batches()[0]
                pending, pending_rows = [], 0
        if pending_rows:
            yield pa.Table.from_batches(pending, schema=converter.schema).combine_chunks().to_batches()[0]
        return
    # Keys whose stored form may differ from their canonical value (dates kept as text in
    # SQLite, for instance) cannot be matched in SQL reliably: filter a rescan instead.
    wanted = set(keys)
    for rows in chunks.scan(adapter, session, query, chunk_rows):
        batch = converter.batch(rows, query.key)
        mask = [k in wanted for k in key_values(batch, query.key)]
        if any(mask):
            yield batch.filter(pa.array(mask))
