"""auto's candidates: timestamp only where every table of the site query has a timestamp,
row_version only where the site's source is PostgreSQL.

The choice is made on a real SiteContext (no Spark is touched before a strategy plans).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from warehouse.metrics import SiteMetrics
from warehouse.options import SyncOptions
from warehouse.planning.cost_model import CostModel
from warehouse.strategies import STRATEGIES, SiteContext, SiteEstimate, Snapshot
from warehouse.strategies.changed_rows import StateLoad
from warehouse.strategies.row_version.strategy import RowVersion
from warehouse.strategies.sync_context import SyncContext
from warehouse.strategies.timestamp import Timestamp
from warehouse.view_options import AutoOptions
from warehouse.viewdef import SiteQuery

JOIN = 'SELECT "l"."id" AS "id", "o"."n" AS "n" FROM "lines" AS "l" JOIN "orders" AS "o" ON "o"."id" = "l"."oid"'
#: Few rows, few changes and no delete: the ranged read plus range checksums over the keys
#: expect fewer bytes than the sketch (see the costs printed by the assertion).
QUIET = SiteEstimate(3000, 0.01, 0.003, CostModel(60, 5, 16), 128)
#: The snapshot the strategies are created with: its statistics only (no Spark is touched).
STORED = Snapshot(cost=QUIET.cost, estimate=QUIET)


def context(timestamps: dict, key: list[str] | None = None, versioned: tuple = ()) -> SiteContext:
    site = SiteQuery("s", JOIN, [], ["id"] if key is None else key)
    view_options = AutoOptions(strategy="auto", timestamps=timestamps, row_version_sources=list(versioned))
    options = SyncOptions(strategy="auto", view_options=view_options)
    sync = SyncContext(spark=None, store=None, view_name="v", sync_id="s", endpoints={}, options=options, seed=1)
    return SiteContext(
        sync=sync,
        index=0,
        site=site,
        client=None,
        staging=Path("/nonexistent"),
        current=None,
        metrics=SiteMetrics(source="s"),
    )


BOTH = {"s.lines": "at", "s.orders": "at"}


def test_auto_chooses_timestamp_where_every_table_is_stamped_and_it_is_cheapest():
    costs = {name: cls.expected_bytes(QUIET) for name, cls in STRATEGIES.items()}
    assert costs["timestamp"] < min(costs["sketch"], costs["group_hash"], costs["full_ship"]), costs
    ctx = context(BOTH)
    chosen = STRATEGIES["auto"].create(ctx, STORED)
    assert (chosen.name, ctx.metrics.chosen) == ("timestamp", "timestamp")


@pytest.mark.parametrize(
    "timestamps, key",
    [({}, None), ({"s.lines": "at"}, None), (BOTH, [])],
    ids=["no timestamps", "one table of two", "no key"],
)
def test_auto_never_chooses_timestamp_where_it_cannot_serve(timestamps, key):
    ctx = context(timestamps, key)
    assert STRATEGIES["auto"].create(ctx, STORED).name == "sketch"
    assert STRATEGIES["auto"].create_load(ctx, STORED) is None


def test_the_load_of_a_stamped_auto_view_reads_the_clock():
    """So that a later sync that chooses timestamp starts from a watermark, not a reconciliation."""
    load = STRATEGIES["auto"].create_load(context(BOTH), STORED)
    assert isinstance(load, StateLoad) and load.owner is Timestamp


def test_auto_reads_row_versions_on_a_source_that_was_postgresql_at_definition():
    ctx = context({}, versioned=("s",))
    assert STRATEGIES["auto"].create(ctx, STORED).name == "row_version"
    load = STRATEGIES["auto"].create_load(ctx, STORED)
    assert isinstance(load, StateLoad) and load.owner is RowVersion
    assert STRATEGIES["auto"].create(context({}, versioned=("other",)), STORED).name == "sketch"
    assert STRATEGIES["auto"].create(context({}, key=[], versioned=("s",)), STORED).name == "sketch"
