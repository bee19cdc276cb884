"""Many sources, each its own agent process: the service's threads and connections do not grow
with them (#52). The suite's service takes one source of three mirrored tables, syncs them,
and is read (its /metrics and its TCP connections in /proc); then seven more sources are
added and every view synced, and it is read again. Less than one thread and one connection
per source added may appear (the pool's and the publisher's threads are bounded by their
settings, not by sources), and no connection to an agent outlives its sync.
"""

from __future__ import annotations

import time

import pytest

from service.resources import peers
from workloads.fleet import Fleet, reading
from workloads.harness import Api

pytestmark = pytest.mark.integration

SOURCES, TABLES, ROWS = 8, 3, 50
WITHIN_S = 300
#: Readings taken after the syncs end, the lowest kept: a thread of a sync that just
#: ended may still be winding down.
READINGS = 3


@pytest.fixture(scope="module")
def fleet(tmp_path_factory, api):
    sources = Fleet(tmp_path_factory.mktemp("fleet"), SOURCES, TABLES, ROWS)
    try:
        sources.start()
        yield sources
    finally:
        for view in api.http.get("/v1/views").json():
            if view["name"].startswith("fleet"):
                api.http.delete(f"/v1/views/{view['name']}")
        for i in range(SOURCES):
            api.http.delete(f"/v1/sources/{sources.name(i)}")
        sources.stop()


def sync_all(api: Api, views: list[str]) -> None:
    """Queue a sync of every view at once (the pool runs them a few at a time); wait until all succeeded."""
    for view in views:
        r = api.http.post(f"/v1/views/{view}/syncs")
        assert r.status_code == 202, r.text
    deadline = time.monotonic() + WITHIN_S
    for view in views:
        while (latest := api.http.get(f"/v1/views/{view}/syncs").json()[0])["status"] in ("queued", "running"):
            assert time.monotonic() < deadline, latest
            time.sleep(0.1)
        assert latest["status"] == "succeeded", latest


def settled(api: Api) -> dict:
    """The service's readings once its syncs ended: the lowest of a few."""
    seen = []
    for _ in range(READINGS):
        time.sleep(0.3)
        seen.append(reading(api))
    return {k: min(r[k] for r in seen) for k in ("threads", "open_files", "connections_opened")}


def test_threads_and_connections_do_not_grow_with_sources(service, api, fleet):
    first = fleet.add(api, 0, None)
    sync_all(api, first)
    sync_all(api, first)  # the pool and the publisher have grown their threads by now
    one = settled(api)
    views = [view for i in range(1, SOURCES) for view in fleet.add(api, i, None)]
    assert len(views) == (SOURCES - 1) * TABLES
    sync_all(api, views)
    every = settled(api)
    added = SOURCES - 1
    assert every["threads"] - one["threads"] < added, (one, every)
    assert every["connections_opened"] - one["connections_opened"] < added, (one, every)
    assert every["open_files"] - one["open_files"] < added, (one, every)
    agents = {agent.port for agent in fleet.agents}
    left = [port for port in peers(service.proc.pid) if port in agents]
    assert not left, f"connections to agents left open after their syncs: {left}"
