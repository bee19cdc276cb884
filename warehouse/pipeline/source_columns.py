"""Source columns: the columns of the tables a site query reads, followed from sync to sync.

Each extraction answer names a fingerprint of those columns (deltasieve_protocol/schema.py
FINGERPRINT_HEADER: 36 bytes). A site keeps the columns it last saw, with their
fingerprint, in FILE in its directory of each version. When an answer names the kept
fingerprint, nothing more is asked. When it names another (or none is kept yet, as at the load),
the sync asks the agent for those tables alone
(GET /v1/schema?table=...) and lists what changed that the view's own columns do not
show — a column the view does not read added or dropped, a declared type or nullability
changed under the same logical type (integer to bigint) — in the sync record's
`schema_changes` with action "none". A change of the logical type of a column the view
reads is the schema policy's (schema_policy.py) and is not listed here.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from deltasieve_protocol.schema import SourceSchema, columns_fingerprint
from warehouse.agent_client import AgentClient
from warehouse.errors import WarehouseError
from warehouse.viewdef import SiteQuery

log = logging.getLogger("warehouse.pipeline.source_columns")

FILE = "source_columns.json"
#: The action a sync record lists for a change that the view needs nothing done for.
NONE = "none"

#: A column as kept: [logical type, declared type, nullable].
Described = list


@dataclass(frozen=True)
class Seen:
    """The columns of a site query's tables as last seen: table -> column -> Described."""

    fingerprint: str
    tables: dict[str, dict[str, Described]]


def load(site_dir: Path | None) -> Seen | None:
    """The columns a version's site kept (None: none kept)."""
    path = site_dir / FILE if site_dir is not None else None
    if path is None or not path.is_file():
        return None
    data = json.loads(path.read_text())
    return Seen(data["fingerprint"], data["tables"])


def save(site_dir: Path, seen: Seen) -> None:
    site_dir.mkdir(parents=True, exist_ok=True)
    (site_dir / FILE).write_text(json.dumps({"fingerprint": seen.fingerprint, "tables": seen.tables}))


def observe(client: AgentClient, site: SiteQuery, kept: Seen | None) -> tuple[Seen | None, list[dict]]:
    """The columns to keep after an extraction through `client`, and the changes to list.

    Asks the agent only when the fingerprint its answer named is not the kept one. An agent
    that names none (older than this) is asked nothing, and nothing is kept; one that cannot
    answer leaves the kept columns as they were (the next sync asks again).
    """
    if client.fingerprint is None:
        return None, []
    if kept is not None and kept.fingerprint == client.fingerprint:
        return kept, []
    try:
        schema = SourceSchema.from_json(client.schema(site.tables()))
    except WarehouseError as exc:
        log.warning("source %s: could not read the columns of %s: %s", site.source, site.where(), exc.message)
        return kept, []
    seen = Seen(
        columns_fingerprint(schema.tables.values()),
        {t.name: {c.name: [str(c.type), c.declared, c.nullable] for c in t.columns} for t in schema.tables.values()},
    )
    read = {site.origin(c.name) for c in site.columns}
    return seen, (changes(kept, seen, site.source, read) if kept is not None else [])


def changes(old: Seen, new: Seen, source: str, read: set[str]) -> list[dict]:
    """What changed from `old` to `new` that the view's columns do not show, as schema_changes.

    `read` holds the "table.column" of the columns the site query reads.

    >>> old = Seen("a", {"orders": {"id": ["int", "integer", False], "note": ["text", "text", True]}})
    >>> new = Seen("b", {"orders": {"id": ["int", "bigint", False], "memo": ["text", "text", True]}})
    >>> for c in changes(old, new, "pg", {"orders.id"}): print(c["column"], c["old"], c["new"], c["action"])
    id integer not null bigint not null none
    memo None text none
    note text None none
    >>> retyped = Seen("c", {"orders": {**new.tables["orders"], "id": ["decimal(20,0)", "numeric(20)", False]}})
    >>> [c["column"] for c in changes(old, retyped, "pg", {"orders.id"})]
    ['memo', 'note']
    """
    out = []
    for table in sorted(old.tables.keys() & new.tables.keys()):
        was, now = old.tables[table], new.tables[table]
        for column in sorted(was.keys() | now.keys()):
            before, after = was.get(column), now.get(column)
            if before == after:
                continue
            if before and after and before[0] != after[0]:
                if f"{table}.{column}" in read:
                    continue  # the schema policy's: taken or refused before this is reached
                shown = (before[0], after[0])
            else:
                shown = (_declared(before), _declared(after))
            out.append(
                {"table": f"{source}.{table}", "column": column, "old": shown[0], "new": shown[1], "action": NONE}
            )
    return out


def _declared(column: Described | None) -> str | None:
    """A column's declared type and nullability for a record: "integer not null"."""
    if column is None:
        return None
    return f"{column[1]}{'' if column[2] else ' not null'}"
