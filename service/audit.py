"""The audit log: every call that changes something and every read of a view's data, with
the time, the key's name (never the key), method, path, view or source, status and the rows
returned when the answer is NDJSON. Kept in the catalog under the retention policy of sync
records (SERVICE_KEEP_DELTAS), and as JSON lines in SERVICE_AUDIT_FILE when set."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
import sqlite3
import threading
from pathlib import Path
from typing import Any

import anyio
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: Reads of data: the rows, a sync's delta, the change feed, the sample (each in any format).
DATA_READ = re.compile(r"^/v1/views/[^/]+/(rows|sample|changes|syncs/[^/]+/delta)/?$")
#: Where the view or source a call reaches sits in its path.
NAMED = re.compile(r"^/v1/(views|sources)/([^/]+)")
MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})


@dataclasses.dataclass(frozen=True)
class Entry:
    """One audited call."""

    at: str
    key_name: str | None
    method: str
    route: str
    view: str | None
    source: str | None
    status: int
    rows: int | None


def audited(method: str, path: str) -> bool:
    """Whether a call goes into the audit log.

    >>> audited("GET", "/v1/views/v/rows"), audited("GET", "/v1/views/v"), audited("DELETE", "/v1/keys/k")
    (True, False, True)
    """
    return method in MUTATING or (method in ("GET", "HEAD") and DATA_READ.match(path) is not None)


class AuditTable:
    """The audit log's rows in the catalog (the catalog hands over its connection and lock)."""

    def __init__(self, conn: sqlite3.Connection, lock: threading.RLock):
        self._conn = conn
        self._lock = lock

    def add(self, entry: Entry) -> None:
        with self._lock:
            self._conn.execute(
                "INSERT INTO audit (at, key_name, method, route, view, source, status, rows)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                dataclasses.astuple(entry),
            )

    def recent(self, limit: int) -> list[dict[str, Any]]:
        """The newest `limit` entries, newest first."""
        rows = self._conn.execute("SELECT * FROM audit ORDER BY seq DESC LIMIT ?", (limit,))
        return [{k: row[k] for k in row.keys() if k != "seq"} for row in rows]

    def prune(self, seconds: float | None, count: int | None, now: dt.datetime) -> int:
        """Apply the retention policy of sync records: entries older than its duration go, or,
        for a count, all but the newest `count` entries of each view or source (and of the
        calls naming neither); how many went."""
        with self._lock:
            if seconds is not None:
                cutoff = (now - dt.timedelta(seconds=seconds)).isoformat(timespec="milliseconds")
                return self._conn.execute("DELETE FROM audit WHERE at < ?", (cutoff,)).rowcount
            return self._conn.execute(
                "DELETE FROM audit WHERE seq IN (SELECT seq FROM (SELECT seq, ROW_NUMBER() OVER"
                " (PARTITION BY coalesce(view, ''), coalesce(source, '') ORDER BY seq DESC) AS n FROM audit) WHERE n > ?)",
                (count,),
            ).rowcount


class AuditTrail:
    """ASGI middleware, outside the key gate (so that refused calls are recorded too): records
    each audited call once its answer is sent, counting the lines of an NDJSON answer."""

    def __init__(self, app: ASGIApp, file: Path | None = None):
        self.app = app
        self.file = file
        self._file_lock = threading.Lock()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not audited(scope["method"], scope["path"]):
            return await self.app(scope, receive, send)
        status = 500
        lines: int | None = None
        written = False

        async def record() -> None:
            nonlocal written
            written = True
            named = NAMED.match(scope["path"])
            kind, name = (named.group(1), named.group(2)) if named else (None, None)
            entry = Entry(
                at=dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"),
                key_name=scope.get("state", {}).get("key_name"),
                method=scope["method"],
                route=scope["path"],
                view=name if kind == "views" else None,
                source=name if kind == "sources" else None,
                status=status,
                rows=lines if 200 <= status < 300 else None,
            )
            await anyio.to_thread.run_sync(self._write, scope, entry)

        async def counting(message: Message) -> None:
            nonlocal status, lines
            if message["type"] == "http.response.start":
                status = message["status"]
                if Headers(raw=message.get("headers", [])).get("content-type", "").startswith("application/x-ndjson"):
                    lines = 0
            elif message["type"] == "http.response.body":
                if lines is not None:
                    lines += message.get("body", b"").count(b"\n")
                if not message.get("more_body", False):
                    await record()  # before the answer ends: a caller's next call finds it recorded
            await send(message)

        try:
            await self.app(scope, receive, counting)
        finally:
            if not written:  # no complete answer (the client went away, or an error)
                await record()

    def _write(self, scope: Scope, entry: Entry) -> None:
        catalog = getattr(getattr(scope.get("app"), "state", None), "catalog", None)
        if catalog is not None:
            catalog.audit.add(entry)
        if self.file is not None:
            with self._file_lock, self.file.open("a", encoding="utf-8") as out:
                out.write(json.dumps(dataclasses.asdict(entry)) + "\n")
