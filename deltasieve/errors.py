"""What the client can fail with: one root, each error saying whether trying again may help."""

from __future__ import annotations

from deltasieve.records import Sync

#: Sync error codes (the sync record's `error_code`) of failures that a later sync may not have:
#: an agent or the link down, Spark's engine restarted under it, the service stopped.
TRANSIENT_SYNC_CODES = frozenset({"agent_unreachable", "engine_lost", "interrupted"})


class DeltasieveError(Exception):
    """The root of the client's errors. `transient`: whether the same call later may succeed."""

    transient = False


class ServiceError(DeltasieveError):
    """The service answered with an error status; `detail` is what it said (its `detail` field)."""

    def __init__(self, status: int, detail: str, method: str, path: str):
        self.status = status
        self.detail = detail
        self.method = method
        self.path = path
        #: a busy or failing service (429, 5xx) may answer later; a 4xx says what to change
        self.transient = status == 429 or status >= 500
        super().__init__(f"{method} {path} → {status}: {detail}")


class Unreachable(DeltasieveError):
    """No answer from the service: it is not running, or not at that address."""

    transient = True

    def __init__(self, url: str, reason: str):
        self.url = url
        self.reason = reason
        super().__init__(f"cannot reach the deltasieve service at {url} ({reason})")


class SyncFailed(DeltasieveError):
    """A sync ended failed; `sync` is its record (`error`, `error_code`, `metrics`)."""

    def __init__(self, sync: Sync):
        self.sync = sync
        self.transient = sync.error_code in TRANSIENT_SYNC_CODES
        code = f" [{sync.error_code}]" if sync.error_code else ""
        super().__init__(f"sync {sync.id} of view {sync.view} failed{code}: {sync.error or 'no error recorded'}")


class SyncTimeout(DeltasieveError):
    """A sync did not end within the time the caller gave it to; it goes on at the service."""

    transient = True

    def __init__(self, sync: Sync, timeout_s: float):
        self.sync = sync
        super().__init__(f"sync {sync.id} of view {sync.view} is still {sync.status} after {timeout_s:g} s")
