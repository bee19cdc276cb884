"""A view published by the service to Iceberg tables in its embedded catalog, read back with
pyiceberg's own scan (not deltasieve's code): after each of a few syncs of a changing SQLite
source, the merge table equals the source, the history table's current rows equal it too,
and each holds one snapshot per sync that changed the view, carrying that sync's id.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyiceberg.catalog import load_catalog

from tests.support.oracle import keyed
from tests.support.people import KEY, VIEW_SQL, People
from warehouse.destinations.iceberg import SYNC_ID
from warehouse.destinations.iceberg_catalog import CATALOG_NAME, properties
from workloads.harness import start_agent
from workloads.published import view_rows, wait_published

pytestmark = pytest.mark.integration

SOURCE = "ice"
VIEW = "ice_people"
TABLES = {"merge": ("wh", "people"), "history": ("wh", "people_history")}
#: Seconds the destinations are given to catch up after a sync.
CATCH_UP_S = 90


@pytest.fixture(scope="module")
def data_dir(service) -> Path:
    args = service.proc.args
    return Path(args[args.index("--data-dir") + 1])


def test_a_view_published_to_iceberg_tables_equals_its_source(api, data_dir, tmp_path, logs_dir):
    people = People(tmp_path / "people.db", rows=500, seed=51)
    agent = start_agent(f"sqlite:///{people.path}", logs_dir)
    try:
        api.add_source(SOURCE, agent.url)
        destinations = [
            {"kind": "iceberg", "table": ".".join(TABLES["merge"])},
            {"kind": "iceberg", "table": ".".join(TABLES["history"]), "mode": "history"},
        ]
        api.add_view(VIEW, VIEW_SQL.format(source=SOURCE), destinations=destinations)
        shown = api.http.get(f"/v1/views/{VIEW}").json()["destinations"]
        assert [(d["kind"], d["catalog"], d["table"]) for d in shown] == [
            ("iceberg", {"type": "embedded"}, "wh.people"),
            ("iceberg", {"type": "embedded"}, "wh.people_history"),
        ]
        changing = []
        for n in range(4):
            if n:
                people.change(updates=20, inserts=10, deletes=5)
            sync = api.sync(VIEW)
            assert sync["status"] == "succeeded", sync
            changing.append(sync["id"])
            wait_published(api, VIEW, sync["id"], CATCH_UP_S)
            # opened once the first apply made it (DATA_DIR/iceberg holds nothing before)
            catalog = load_catalog(CATALOG_NAME, **properties(None, data_dir))
            for mode, name in TABLES.items():
                table = catalog.load_table(name)
                rows = table.scan().to_arrow()
                if mode == "history":
                    rows = rows.filter(rows.column("_deltasieve_current"))
                assert keyed(view_rows(rows).to_pylist(), KEY) == people.truth(), f"{mode} after sync {n}"
                carried = [s.summary.additional_properties.get(SYNC_ID) for s in table.snapshots()]
                assert carried == changing, mode
    finally:
        agent.stop()
