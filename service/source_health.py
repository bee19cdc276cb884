"""Each source's health: how its agent answered the service's last contact with it.

A source is `ok` when its agent last answered (a sync's extraction succeeded, or the
periodic check got its schema), `refused` when the agent answered no (a wrong token: 401),
`unreachable` when it could not be reached or broke off. The periodic check (every
SERVICE_SOURCE_CHECK_INTERVAL_S, first at start) asks each agent for its schema with the
source's token, so a source no view reads, or whose views all fail, still has a health.
Health lives in the process: the first check after a start fills it in.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from service.catalog import Catalog, now
from service.periodic import Periodic
from service.records import SourceRecord
from service.secrets import Secrets, source_token
from warehouse.agent_client import AgentClient
from warehouse.errors import AgentRejected, AgentUnavailable, SchemaUnavailable, WarehouseError

log = logging.getLogger("service.sources")

#: Longest a check waits for an agent (seconds).
CHECK_TIMEOUT_S = 15.0
OK, UNREACHABLE, REFUSED = "ok", "unreachable", "refused"


@dataclass(frozen=True)
class Health:
    """How a source's agent answered the last contact (`checked_at`), and since when (`since`)
    it has answered so."""

    status: str
    checked_at: str
    since: str
    error: str | None = None


def status_of(error: WarehouseError | None) -> str:
    """The health an agent's answer says: none (it answered), refused (an answer no retry
    changes: a wrong token), or unreachable (no answer, or one a retry may change).

    >>> status_of(None), status_of(AgentRejected("agent answered 401", 401)), status_of(AgentUnavailable("timed out"))
    ('ok', 'refused', 'unreachable')
    """
    if error is None:
        return OK
    return UNREACHABLE if error.transient else REFUSED


def failed_agent(error: WarehouseError, sources: list[str]) -> str | None:
    """The source whose agent a sync's failure says did not answer or refused, if it says
    which: a schema read names its source; a lost link or a refused token of a view of one
    source is that source's. Other refusals (a query the agent will not run) are answers.

    >>> from warehouse.errors import AgentRejected, AgentUnavailable, SchemaUnavailable
    >>> failed_agent(SchemaUnavailable("erp", AgentRejected("401", 401)), ["erp", "crm"])
    'erp'
    >>> failed_agent(AgentUnavailable("timed out"), ["erp"]), failed_agent(AgentUnavailable("timed out"), ["erp", "crm"])
    ('erp', None)
    >>> failed_agent(AgentRejected("agent answered 401", 401), ["erp"]), failed_agent(AgentRejected("bad query", 400), ["erp"])
    ('erp', None)
    """
    if isinstance(error, SchemaUnavailable):
        return error.source
    lost = isinstance(error, AgentUnavailable) or (isinstance(error, AgentRejected) and error.status in (401, 403))
    return sources[0] if lost and len(sources) == 1 else None


class SourceHealth:
    """The health of every source, reported by syncs and by the periodic check."""

    def __init__(self, on_change: Callable[[str, Health], None] | None = None):
        self._health: dict[str, Health] = {}
        self._lock = threading.Lock()
        self._on_change = on_change

    def report(self, source: str, error: WarehouseError | None) -> Health:
        """Record how `source`'s agent answered just now (`error`: None when it did)."""
        status, at = status_of(error), now()
        with self._lock:
            before = self._health.get(source)
            since = before.since if before is not None and before.status == status else at
            health = Health(status, at, since, error.message if error is not None else None)
            self._health[source] = health
        if self._on_change is not None:
            self._on_change(source, health)
        return health

    def of(self, source: str) -> Health | None:
        """The source's health; None before any contact with its agent."""
        with self._lock:
            return self._health.get(source)

    def forget(self, source: str) -> None:
        with self._lock:
            self._health.pop(source, None)

    def check(self, source: SourceRecord, verify, secrets: Secrets) -> Health:
        """Ask the source's agent for its schema now, with the source's token; its health."""
        try:
            token = source_token(secrets, source.name, source.token)
            with AgentClient(
                source.url, token, verify=verify, read_timeout_s=CHECK_TIMEOUT_S, deadline_s=CHECK_TIMEOUT_S
            ) as client:
                client.schema()
        except WarehouseError as exc:
            return self.report(source.name, exc)
        return self.report(source.name, None)


class SourceChecker(Periodic):
    """Checks every source's agent every `interval_s` seconds, the first time at start."""

    def __init__(self, catalog: Catalog, health: SourceHealth, verify, secrets: Secrets, interval_s: float):
        super().__init__("source-check", interval_s, self.check_all, at_start=True)
        self.catalog = catalog
        self.health = health
        self.verify = verify
        self.secrets = secrets

    def check_all(self) -> None:
        """One round: each source's agent, one after the other."""
        for source in self.catalog.sources():
            if self.stopping:
                return
            self.health.check(source, self.verify, self.secrets)
