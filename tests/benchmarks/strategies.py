"""The strategies the benchmark compares, and how each one is driven.

A strategy the service implements is a view option (`{"strategy": name}` on `POST
/v1/views`): it gets its own view over the workload's SQL and is synced through the API. A
strategy the service does not (yet) accept is skipped with the service's reason, so the
suite picks up `tuple_hash` and `range_checksum` as soon as the service offers them.
`reladiff` runs outside the service: the real tool against a PostgreSQL copy of the
workload, its traffic counted by a TCP proxy (`reladiff_runner.py`).

Every runner answers with the same things: a sync record (`metrics` as the service's), the
sync's delta and the view's rows as NDJSON objects, so the oracle can check any of them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass

from workloads.harness import Api


@dataclass(frozen=True)
class Strategy:
    name: str
    kind: str  # "view": a view option of the service; "external": a runner of its own
    description: str


STRATEGIES: dict[str, Strategy] = {
    s.name: s
    for s in (
        Strategy("full_ship", "view", "the agent sends the whole site query; the warehouse diffs"),
        Strategy("tuple_hash", "view", "one hash per tuple (keys + hashes out, changed and new tuples back)"),
        Strategy("range_checksum", "view", "key ranges with checksums and bisection"),
        Strategy("group_hash", "view", "the paper's group-hash method (the default)"),
        Strategy(
            "sketch", "view", "set reconciliation of (key, row hash) pairs with an IBLT sized from the statistics"
        ),
        Strategy(
            "auto", "view", "per sync, the strategy with the least expected bytes (sketch, group_hash, full_ship)"
        ),
        Strategy(
            "timestamp",
            "view",
            "the rows stamped since the last sync (an index range read), the keys reconciled, a full reconciliation every 24 syncs",
        ),
        Strategy(
            "row_version",
            "view",
            "PostgreSQL: the rows whose row version (xmin) is newer than the last sync's snapshot, the keys reconciled",
        ),
        Strategy("reladiff", "external", "the reladiff tool against a PostgreSQL copy, bytes counted by a TCP proxy"),
    )
}


class Skipped(Exception):
    """This strategy cannot run here; the message says why."""


@dataclass
class SyncResult:
    record: dict  # the service's sync record: id, status, error, metrics
    wall_s: float  # as seen by the client, queueing and HTTP included

    @property
    def ok(self) -> bool:
        return self.record.get("status") == "succeeded"


def iter_ndjson(api: Api, path: str) -> Iterator[dict]:
    """Stream an NDJSON resource one object at a time (a view can be larger than memory)."""
    with api.http.stream("GET", path) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if line:
                yield json.loads(line)


def _rejects_strategy(body: dict) -> bool:
    detail = body.get("detail") if isinstance(body, dict) else None
    if isinstance(detail, list):  # request validation: the field's location
        return any(isinstance(e, dict) and list(e.get("loc", []))[-1:] == ["strategy"] for e in detail)
    return "strategy" in str(detail)


class ViewRunner:
    """A strategy the service implements, on a view of its own."""

    #: Its syncs go through the agent, whose memory is measured.
    uses_agent = True

    def __init__(self, api: Api, strategy: Strategy, view: str, sql: str, options: dict | None = None):
        self.api = api
        self.strategy = strategy
        self.view = view
        self.sql = sql
        # view settings of the workload (timestamps, delete_flags); no destinations: publishing
        # (a background Delta apply after each sync) would share the cores with the next sync,
        # and the floor it is compared with publishes nothing (publishing.py measures it)
        self.options = {"destinations": [], **(options or {})}
        self.definition: dict = {}

    def prepare(self) -> dict:
        """Define the view; a 422 that names the strategy means the service does not offer it."""
        r = self.api.http.post(
            "/v1/views",
            json={"name": self.view, "sql": self.sql, "strategy": self.strategy.name, **self.options},
        )
        if r.status_code == 422 and _rejects_strategy(r.json()):
            raise Skipped(f"the service does not accept strategy {self.strategy.name!r} yet")
        if r.status_code != 201:
            raise RuntimeError(f"view {self.view} not created: {r.status_code} {r.text}")
        self.definition = r.json()
        return self.definition

    def sync(self) -> SyncResult:
        started = time.perf_counter()
        r = self.api.http.post(f"/v1/views/{self.view}/syncs", params={"wait": "true"})
        wall = time.perf_counter() - started
        if r.status_code != 200:
            return SyncResult(
                {"status": "failed", "error": f"HTTP {r.status_code}: {r.text[:500]}", "metrics": {}}, wall
            )
        return SyncResult(r.json(), wall)

    def delta(self, result: SyncResult) -> Iterator[dict]:
        return iter_ndjson(self.api, f"/v1/views/{self.view}/syncs/{result.record['id']}/delta")

    def rows(self) -> Iterator[dict]:
        return iter_ndjson(self.api, f"/v1/views/{self.view}/rows")

    def on_change(self, change) -> None:
        """The source changed (the service finds out by itself)."""

    def close(self) -> None:
        """Nothing of its own to stop: the view lives in the service."""


def make_runner(api: Api, strategy: Strategy, view: str, sql: str, source=None, options: dict | None = None):
    """The runner of `strategy`; an external one needs the workload's `source` (a SourceContext)."""
    if strategy.kind == "view":
        return ViewRunner(api, strategy, view, sql, options)
    if strategy.name == "reladiff":
        from tests.benchmarks.reladiff_runner import ReladiffRunner

        return ReladiffRunner(api, strategy, view, sql, source)
    raise ValueError(f"no runner for strategy {strategy.name!r}")
