"""A sync's OpenLineage events, sent through the OpenLineage client's real file and HTTP
transports: what they name, that they carry no secret, and that a dead endpoint costs
nothing but a count in /metrics."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pyarrow as pa
import pytest
from pydantic import ValidationError
from pyiceberg.catalog import load_catalog

from deltasieve_protocol.types import Column, LogicalType
from service.catalog import Catalog
from service.lineage import run_id
from service.lineage_sender import Lineage
from service.metrics import ServiceMetrics
from service.settings import ServiceSettings
from warehouse.destinations import open_destination
from warehouse.destinations.iceberg_catalog import CATALOG_NAME, properties
from warehouse.view_options import DestinationSpec, ViewOptions
from warehouse.viewdef import SiteQuery, ViewDef

COLUMNS = [Column("id", LogicalType("int")), Column("name", LogicalType("text"))]
#: Secrets the events must never carry: the agent's URL's password and token, the warehouse's password.
SECRETS = ("agentpw", "tok3n", "whpw")
DESTINATIONS = [
    {"kind": "delta"},
    {"kind": "delta", "uri": "s3://lake/tables/people"},
    {"kind": "postgres", "url": "env:LINEAGE_PG_URL", "table": "crm.people"},
    {"kind": "iceberg", "table": "wh.people"},
]


@pytest.fixture
def catalog(tmp_path, monkeypatch):
    monkeypatch.setenv("LINEAGE_PG_URL", "postgresql://loader:whpw@wh.example/analytics?sslmode=require")
    catalog = Catalog(tmp_path / "catalog.db")
    catalog.add_source("crm", "http://ops:agentpw@agent.example:8765/?token=tok3n", None)
    site = SiteQuery("crm", "SELECT p.id, p.name FROM people AS p", COLUMNS, ["id"])
    definition = ViewDef("SELECT p.id, p.name FROM crm.people p", COLUMNS, ["id"], [site])
    options = ViewOptions.from_stored({"strategy": "auto", "destinations": DESTINATIONS})
    catalog.add_view("people", definition.sql, definition.to_json(), options)
    yield catalog
    catalog.close()


def one_sync(settings: ServiceSettings, catalog: Catalog, metrics: ServiceMetrics) -> None:
    """What the service reports of two syncs: one that succeeded and was applied to its Delta
    table (a real one), one that failed. Sent before it returns."""
    reporter = Lineage(settings, catalog, metrics)
    reporter.started("people", "s-1")
    reporter.succeeded("people", "s-1", {"rows_inserted": 2, "rows_updated": 1, "rows_deleted": 0})
    spec = DestinationSpec(kind="delta")
    table = open_destination(spec, settings.data_dir, "people")
    rows = pa.RecordBatch.from_pylist([{"id": 1, "name": "a"}, {"id": 2, "name": "b"}])
    table.rebuild("s-1", 1, COLUMNS, ["id"], [rows], False, "the view's load")
    reporter.published("people", "s-1", spec, table)
    iceberg = DestinationSpec(kind="iceberg", table="wh.people")
    table = open_destination(iceberg, settings.data_dir, "people")
    table.rebuild("s-1", 1, COLUMNS, ["id"], [rows], False, "the view's load")
    reporter.published("people", "s-1", iceberg, table)
    reporter.started("people", "s-2")
    reporter.failed("people", "s-2", "the agent at http://agent.example:8765 did not answer", "agent_unreachable")
    reporter.stop()


def sent(metrics: ServiceMetrics, event_type: str, outcome: str) -> float:
    value = metrics.registry.get_sample_value(
        "deltasieve_lineage_events_total", {"event_type": event_type, "outcome": outcome}
    )
    return value or 0.0


def check_events(events: list[dict], data_dir) -> None:
    """The six events of one_sync, as OpenLineage's spec and this service's naming say."""
    assert [e["eventType"] for e in events] == ["START", "COMPLETE", "OTHER", "OTHER", "START", "FAIL"]
    assert [e["run"]["runId"] for e in events] == [run_id("s-1")] * 4 + [run_id("s-2")] * 2
    for event in events:  # what the spec requires of every run event
        assert {"eventTime", "producer", "schemaURL", "run", "job"} <= event.keys()
        assert event["job"] == {**event["job"], "namespace": "deltasieve", "name": "people"}
        assert event["job"]["facets"]["sql"]["query"] == "SELECT p.id, p.name FROM crm.people p"
        for facet in [*event["run"]["facets"].values(), *event["job"]["facets"].values()]:
            assert {"_producer", "_schemaURL"} <= facet.keys()
    start, complete, other, other_iceberg, _, failed = events
    assert [(i["namespace"], i["name"]) for i in complete["inputs"]] == [("http://agent.example:8765", "people")]
    assert complete["inputs"][0]["facets"]["datasource"]["name"] == "crm"
    places = [(o["namespace"], o["name"]) for o in complete["outputs"]]
    assert places == [
        ("file", str((data_dir / "tables" / "people").absolute())),
        ("s3://lake", "tables/people"),
        ("postgres://wh.example:5432", "analytics.crm.people"),
        ("file", str((data_dir / "iceberg" / "warehouse" / "wh" / "people").absolute())),
    ]
    for output in complete["outputs"]:
        assert output["outputFacets"]["outputStatistics"]["rowCount"] == 3
        fields = output["facets"]["schema"]["fields"]
        assert [(f["name"], f["type"], f.get("description")) for f in fields] == [
            ("id", "int", "key column"),
            ("name", "text", None),
        ]
    assert [(o["namespace"], o["name"]) for o in other["outputs"]] == places[:1]
    assert other["outputs"][0]["facets"]["version"]["datasetVersion"] == "0"  # the table's first commit
    # the Iceberg table: named by where pyiceberg put it, its catalog's name a symlink, its version the snapshot
    table = load_catalog(CATALOG_NAME, **properties(None, data_dir.absolute())).load_table(("wh", "people"))
    (iceberg,) = other_iceberg["outputs"]
    assert ("file", iceberg["name"]) == places[3] and table.location() == f"file://{iceberg['name']}"
    assert iceberg["facets"]["symlinks"]["identifiers"] == [
        {"namespace": f"sqlite:///{data_dir.absolute()}/iceberg/catalog.db", "name": "wh.people", "type": "TABLE"}
    ]
    assert iceberg["facets"]["version"]["datasetVersion"] == str(table.current_snapshot().snapshot_id)
    assert failed["run"]["facets"]["errorMessage"]["message"].startswith("agent_unreachable: the agent at")
    assert failed["outputs"] == []


def test_the_file_transport_gets_each_event_of_a_sync_in_order_without_secrets(tmp_path, catalog):
    path = tmp_path / "lineage" / "events.ndjson"
    settings = ServiceSettings(data_dir=tmp_path / "data", openlineage_file=path)
    assert settings.openlineage_transport == "file"
    metrics = ServiceMetrics()
    one_sync(settings, catalog, metrics)
    text = path.read_text()
    assert not any(secret in text for secret in SECRETS)
    check_events([json.loads(line) for line in text.splitlines()], settings.data_dir)
    assert sent(metrics, "START", "sent") == 2 and sent(metrics, "FAIL", "sent") == 1


class _Collector(BaseHTTPRequestHandler):
    """An OpenLineage endpoint: keeps what is posted to it, answers `status`."""

    status = 201
    posted: list[tuple[str, str, dict]] = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.posted.append((self.path, self.headers.get("Authorization", ""), json.loads(body)))
        self.send_response(self.status)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def endpoint():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    _Collector.posted = []
    _Collector.status = 201
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, _Collector
    server.shutdown()
    server.server_close()


def test_the_http_transport_posts_each_event_with_the_key(tmp_path, catalog, endpoint):
    server, collector = endpoint
    url = f"http://127.0.0.1:{server.server_address[1]}"
    settings = ServiceSettings(data_dir=tmp_path / "data", openlineage_url=url, openlineage_api_key="k-123")
    metrics = ServiceMetrics()
    one_sync(settings, catalog, metrics)
    assert {(path, auth) for path, auth, _ in collector.posted} == {("/api/v1/lineage", "Bearer k-123")}
    events = [body for _, _, body in collector.posted]
    assert not any(secret in json.dumps(events) for secret in SECRETS)
    check_events(events, settings.data_dir)


def test_an_endpoint_that_refuses_costs_the_events_and_a_count_never_a_sync(tmp_path, catalog, endpoint):
    server, collector = endpoint
    collector.status = 400  # refused, not retried
    url = f"http://127.0.0.1:{server.server_address[1]}"
    metrics = ServiceMetrics()
    one_sync(ServiceSettings(data_dir=tmp_path / "data", openlineage_url=url), catalog, metrics)
    assert len(collector.posted) == 6
    assert (sent(metrics, "START", "failed"), sent(metrics, "COMPLETE", "failed")) == (2, 1)
    assert sent(metrics, "START", "sent") == 0


def test_an_endpoint_that_is_down_is_counted_after_the_client_retries(tmp_path, catalog):
    with ThreadingHTTPServer(("127.0.0.1", 0), _Collector) as closed:  # a port nothing listens on
        port = closed.server_address[1]
    metrics = ServiceMetrics()
    reporter = Lineage(ServiceSettings(data_dir=tmp_path, openlineage_url=f"http://127.0.0.1:{port}"), catalog, metrics)
    reporter.started("people", "s-1")  # returns at once: the event waits on the queue
    reporter.stop()
    assert sent(metrics, "START", "failed") == 1


def test_an_event_that_cannot_be_built_is_counted_and_the_sync_goes_on(tmp_path, catalog):
    metrics = ServiceMetrics()
    reporter = Lineage(ServiceSettings(data_dir=tmp_path, openlineage_transport="console"), catalog, metrics)
    reporter.started("no_such_view", "s-1")
    reporter.stop()
    assert sent(metrics, "START", "failed") == 1


def test_lineage_is_off_unless_configured_and_a_transport_needs_its_place(tmp_path, catalog):
    reporter = Lineage(ServiceSettings(data_dir=tmp_path), catalog)
    assert not reporter.on
    reporter.started("people", "s-1")  # nothing to do, nothing built
    with pytest.raises(ValidationError, match="SERVICE_OPENLINEAGE_URL"):
        ServiceSettings(openlineage_transport="http")
    with pytest.raises(ValidationError, match="SERVICE_OPENLINEAGE_FILE"):
        ServiceSettings(openlineage_transport="file")
    with pytest.raises(ValidationError, match="say which"):
        ServiceSettings(openlineage_url="http://x", openlineage_file=tmp_path / "f")
