"""Which definition a view's stored rows and deltas follow, across its redefinitions.

The catalog holds the definition a view asks for, the view's versions the one their rows
follow (meta.json "definition"): a PUT stores a view's new definition at once, and its rows
follow the old one until a sync applies it (warehouse/pipeline/redefine.py). While the two
differ, a redefinition is pending (`pending_redefinition`). A delta follows the definition
of the version its sync committed: walking the view's succeeded syncs from the newest back,
each sync that redefined the view (its delta says so) hands on the definition it came from.

A Parquet file has one schema, so a Parquet answer cannot span a redefinition:
`parquet_refused` says which requests give the same deltas in parts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from service.catalog import Catalog
from service.errors import Conflict
from service.records import SyncRecord, ViewRecord
from warehouse.pipeline.redefine import pending, redefined
from warehouse.pipeline.schema_policy import adopted_definition
from warehouse.store.versions import Version, ViewStore
from warehouse.viewdef import ViewDef

#: The answer header naming the columns (with their types) of the first lines of rows, a delta or the feed.
COLUMNS_HEADER = "X-Columns"
COLUMNS_HEADER_DOC = {
    "description": 'the columns of the rows (the first lines: a "schema" line changes them) as a JSON list of '
    '{"name", "type"}, ASCII-escaped: a view\'s rows follow its old definition until a redefinition is applied',
    "schema": {"type": "string"},
}


def columns_header(view: ViewDef) -> str:
    """The COLUMNS_HEADER value for rows of `view`."""
    return json.dumps([c.to_json() for c in view.columns], ensure_ascii=True, separators=(",", ":"))


def follows_of(version: Version | None) -> dict | None:
    """The definition (JSON) the rows of `version` follow, as it records it; None without a version."""
    return version.meta()["definition"] if version is not None else None


def pending_redefinition(catalog: Catalog, store: ViewStore, view: ViewRecord) -> ViewDef | None:
    """The definition the view's stored rows follow, when it is not the one the catalog holds
    (`view`): a redefinition waits for the sync that applies it. None when they agree, before
    the view's first version, and for a version a widening sync committed whose definition the
    catalog has not adopted yet (pipeline/schema_policy.py adopted_definition): the catalog
    adopts it before it records that sync as finished (service/jobs.py), so only while that
    sync is the view's queued or running one, and then it is no redefinition.
    """
    version = store.current()
    follows = pending(version, ViewDef.of_view(view.name, view.definition))
    if follows is None or version is None:
        return None
    busy = catalog.busy_sync(view.name)
    if busy is not None and busy.id == version.sync_id and adopted_definition(version, view.definition) is not None:
        return None  # widened by the sync under way, which has yet to hand its definition to the catalog
    return follows


def rows_definition(version: Version) -> ViewDef:
    """The definition to read the rows of `version` with (a redefinition waits for a sync)."""
    return ViewDef.from_json(version.meta()["definition"])


def redefine_within(catalog: Catalog, name: str, sync_id: str, sql: str, definition: ViewDef) -> ViewRecord:
    """Give view `name` a new definition from inside its sync `sync_id` (queued or running),
    which then applies it as a PUT's next sync would (trigger "redefine", a schema line, the
    exact difference, history and feed positions kept): how a table view follows its table
    when a column is added or dropped at the source. Call it before the sync builds its
    SyncRun, and build that from the record returned: a SyncRun whose view differs from the
    definition its stored rows follow applies the redefinition (pipeline/redefine.pending)."""
    current = catalog.view(name)
    record = catalog.redefine_view(name, sql, definition.to_json(), current.options, by_sync=sync_id)
    catalog.update_sync(sync_id, trigger="redefine")
    return record


@dataclass(frozen=True)
class Segment:
    """Consecutive syncs whose deltas follow one definition; `redefined`: the first of them
    applied it (its delta starts with a schema line)."""

    view: ViewDef
    redefined: bool
    syncs: list[SyncRecord]


def segments(store: ViewStore, view: ViewRecord, syncs: list[SyncRecord], later: list[SyncRecord]) -> list[Segment]:
    """`syncs` (succeeded, oldest first) cut where a sync redefined the view, each part with
    the definition its deltas follow; `later`: the view's succeeded syncs after them."""
    definition = ViewDef.from_json(follows_of(store.current()) or view.definition)
    marked: list[tuple[SyncRecord, ViewDef, bool]] = []
    for sync in reversed([*syncs, *later]):
        change = redefined(store.delta(sync.id)) if sync.trigger == "redefine" else None
        marked.append((sync, definition, change is not None))
        if change is not None:
            definition = change[0]
    wanted = {s.id for s in syncs}
    out: list[Segment] = []
    for sync, followed, redefining in reversed(marked):
        if sync.id not in wanted:
            continue
        if redefining or not out:
            out.append(Segment(followed, redefining, [sync]))
        else:
            out[-1].syncs.append(sync)
    return out


def _query(after: str | None, limit: int | None, fmt: str) -> str:
    """A change feed request's query string.

    >>> _query(None, 2, "parquet"), _query("s1", None, "ndjson")
    ('?limit_syncs=2&format=parquet', '?after=s1&format=ndjson')
    """
    parts = ([f"after={after}"] if after else []) + ([f"limit_syncs={limit}"] if limit else []) + [f"format={fmt}"]
    return "?" + "&".join(parts)


def parquet_refused(name: str, after: str | None, parts: list[Segment], feed: bool) -> Conflict | None:
    """The 409 for a Parquet answer spanning a redefinition (one schema per file), naming the
    requests that give the same deltas; None if it spans none."""
    first = next((p for p in parts if p.redefined), None)
    if first is None:
        return None
    sync = first.syncs[0].id
    why = (
        f"sync {sync} redefined view {name!r}: its delta starts with a schema line and a Parquet file holds one schema"
    )
    if not feed:
        return Conflict(f"{why}; read this delta as NDJSON (GET /v1/views/{name}/syncs/{sync}/delta?format=ndjson)")
    changes = f"GET /v1/views/{name}/changes"
    earlier = [s for p in parts[: parts.index(first)] for s in p.syncs]
    steps = []
    if earlier:
        steps.append(f"read up to sync {earlier[-1].id} in Parquet ({changes}{_query(after, len(earlier), 'parquet')})")
    steps.append(
        f"sync {sync} in NDJSON ({changes}{_query(earlier[-1].id if earlier else after, 1, 'ndjson')}; "
        "it has the schema line, then the rows in the new columns)"
    )
    steps.append(f"the syncs after it in Parquet ({changes}{_query(sync, None, 'parquet')})")
    return Conflict(f"{why}; read the same lines in {len(steps)} requests: " + ", then ".join(steps))
