"""API keys: who a caller is, what scope it has and which views and sources it may reach.

Keys are stored as digests in the catalog (table `api_keys`, migration 9); the key itself is
shown once, when it is made. SERVICE_API_KEY is the admin key "admin" and is never stored.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import hmac
import json
import secrets
import sqlite3
import threading
from collections.abc import Iterable

from service.errors import Conflict, NotFound

#: Scopes from least to most: each allows what the ones before it allow.
SCOPES = ("read", "sync", "admin")
#: The name SERVICE_API_KEY goes by (in the audit log and the request's state); no stored key may take it.
SERVICE_KEY_NAME = "admin"
#: Random bytes in a key: 256 bits, far beyond any guessing, which is why a plain SHA-256 digest
#: stores it safely. A slow hash (bcrypt, scrypt) protects low-entropy passwords from a stolen
#: catalog by making each guess costly; against 2^256 possibilities no guess succeeds anyway,
#: and a fast digest keeps the check on every request cheap.
KEY_BYTES = 32
#: What every key starts with: it tells a leaked deltasieve key apart in logs and secret scanners.
KEY_PREFIX = "dsk_"


def digest(key: str) -> str:
    """The stored form of a key: its SHA-256, in hex.

    >>> digest("k")[:16]
    '8254c329a92850f6'
    """
    return hashlib.sha256(key.encode()).hexdigest()


def new_key() -> str:
    """A fresh random key."""
    return KEY_PREFIX + secrets.token_urlsafe(KEY_BYTES)


@dataclasses.dataclass(frozen=True)
class Grant:
    """What one key allows: its scope and, when limited, the views and sources it may reach."""

    name: str
    scope: str
    views: frozenset[str] | None = None
    sources: frozenset[str] | None = None

    @property
    def limited(self) -> bool:
        """Whether the key is limited to named views or sources."""
        return self.views is not None or self.sources is not None

    def allows(self, needed: str) -> bool:
        """Whether the key's scope covers `needed`.

        >>> Grant("k", "sync").allows("read"), Grant("k", "sync").allows("admin")
        (True, False)
        """
        return SCOPES.index(self.scope) >= SCOPES.index(needed)

    def may_see_source(self, source: str) -> bool:
        """Whether the key may reach `source`: any, unless limited; then only the sources it names.

        >>> Grant("k", "read", views=frozenset({"v"})).may_see_source("erp")
        False
        """
        return not self.limited or source in (self.sources or ())

    def may_see_view(self, view: str, reads: Iterable[str]) -> bool:
        """Whether the key may reach `view`, which reads the sources `reads`: any, unless
        limited; then a view it names, or one reading only sources it names.

        >>> g = Grant("k", "read", views=frozenset({"a"}), sources=frozenset({"erp"}))
        >>> g.may_see_view("a", ["crm"]), g.may_see_view("b", ["erp"]), g.may_see_view("c", ["erp", "crm"])
        (True, True, False)
        """
        if not self.limited or view in (self.views or ()):
            return True
        read = set(reads)
        return bool(read) and self.sources is not None and read <= self.sources


class KeyTable:
    """The stored keys, in the catalog's file (the catalog hands over its connection and lock)."""

    def __init__(self, conn: sqlite3.Connection, lock: threading.RLock):
        self._conn = conn
        self._lock = lock

    def add(self, name: str, scope: str, views: list[str] | None, sources: list[str] | None) -> tuple[dict, str]:
        """Store a new key; its record and the key itself (which is not kept)."""
        key = new_key()
        with self._lock:
            try:
                self._conn.execute(
                    "INSERT INTO api_keys (name, digest, scope, views, sources, created_at) VALUES (?, ?, ?, ?, ?, ?)",
                    (name, digest(key), scope, _listed(views), _listed(sources), _now()),
                )
            except sqlite3.IntegrityError:
                raise Conflict(f"key {name!r} already exists; revoke it first (DELETE /v1/keys/{name})") from None
        return self.get(name), key

    def get(self, name: str) -> dict:
        row = self._conn.execute("SELECT * FROM api_keys WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise NotFound(f"key {name!r} not found")
        return _record(row)

    def list(self) -> list[dict]:
        return [_record(r) for r in self._conn.execute("SELECT * FROM api_keys ORDER BY name")]

    def revoke(self, name: str) -> None:
        with self._lock:
            if self._conn.execute("DELETE FROM api_keys WHERE name = ?", (name,)).rowcount == 0:
                raise NotFound(f"key {name!r} not found")

    def any(self) -> bool:
        return self._conn.execute("SELECT 1 FROM api_keys LIMIT 1").fetchone() is not None

    def find(self, given_digest: str) -> Grant | None:
        """The key whose digest is `given_digest`, compared with every stored digest in constant
        time (no early exit), so that the time taken says nothing about the stored ones."""
        found = None
        for row in self._conn.execute("SELECT * FROM api_keys").fetchall():
            if hmac.compare_digest(row["digest"], given_digest):
                found = _grant(row)
        return found


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def _listed(names: list[str] | None) -> str | None:
    return json.dumps(sorted(set(names))) if names is not None else None


def _record(row: sqlite3.Row) -> dict:
    """A key as listed: never the key, nor its digest."""
    return {
        "name": row["name"],
        "scope": row["scope"],
        "views": json.loads(row["views"]) if row["views"] is not None else None,
        "sources": json.loads(row["sources"]) if row["sources"] is not None else None,
        "created_at": row["created_at"],
    }


def _grant(row: sqlite3.Row) -> Grant:
    record = _record(row)
    views, sources = record["views"], record["sources"]
    return Grant(
        record["name"],
        record["scope"],
        frozenset(views) if views is not None else None,
        frozenset(sources) if sources is not None else None,
    )
