"""Checks every strategy makes of its request and of the rows the source gives back."""

from __future__ import annotations

import pyarrow as pa

from deltasieve_protocol.models import SiteColumn
from deltasieve_protocol.types import Column
from deltasieve_protocol.wire import HASH
from remote_agent.errors import BadRequest, SchemaChanged, SourceDataError, changed_column, example_row
from remote_agent.sitequery import ValidatedQuery


def wire_hashes(batch: pa.RecordBatch, bits: int, what: str, setting: str) -> list[bytes]:
    """The HASH column of a request frame, each checked to be `bits` wide."""
    hashes = batch.column(HASH).to_pylist()
    bad = next((h for h in hashes if h is None or len(h) != bits // 8), b"")
    if bad != b"":
        raise BadRequest(f"{what} {bad!r} is not {bits // 8} bytes ({setting} {bits})")
    return hashes


def check_columns(query: ValidatedQuery, expected: list[SiteColumn]) -> None:
    """Refuse a site query whose columns at the source no longer match the registered ones
    (SchemaChanged: the prose for people, the changed columns for the warehouse)."""
    got = [{"name": c.name, "type": str(c.type)} for c in query.columns]
    want = [{"name": c.name, "type": c.type} for c in expected]
    if got == want:
        return
    origins = dict(zip((c.name for c in query.columns), query.origins))
    have = {g["name"]: g["type"] for g in got}
    problems, changes = [], []
    for w in want:
        name = w["name"]
        if name not in have:
            problems.append(f"column {name!r} is gone")
            changes.append(changed_column(None, name, w["type"], None))
        elif have[name] != w["type"]:
            origin = origins.get(name, name)
            problems.append(
                f"column {name!r} ({origin}) is {have[name]} at the source but was {w['type']} when the view was registered"
            )
            changes.append(changed_column(origin, name, w["type"], have[name]))
    problems += [f"column {g['name']!r} is new" for g in got if g["name"] not in {w["name"] for w in want}]
    if not problems:
        problems.append(f"the columns are now {[g['name'] for g in got]} instead of {[w['name'] for w in want]}")
    raise SchemaChanged(
        f"the source schema of {query.where()} changed since the view was registered: {'; '.join(problems)}. "
        "Restore the column at the source, or redefine the view to match the new schema",
        changes,
    )


def duplicate_key(k, query: ValidatedQuery, batch: pa.RecordBatch, keys: list) -> SourceDataError:
    """The error for key `k` met a second time in one scan, quoting the row of this batch."""
    row = batch.slice(keys.index(k), 1).to_pylist()[0]
    return SourceDataError(
        f"{query.where()}: key {dict(zip(query.key, k if isinstance(k, tuple) else (k,)))} occurs more than once, e.g. in the row {example_row(row)}; "
        f"the declared key {list(query.key)} is not unique at the source: remove the duplicate rows, or redefine the view with a key that is unique"
    )


def key_columns(query: ValidatedQuery) -> list[Column]:
    """The key columns of a site query with their logical types, in key order."""
    types = {c.name: c.type for c in query.columns}
    return [Column(k, types[k]) for k in query.key]
