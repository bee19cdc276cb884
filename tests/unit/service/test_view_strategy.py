"""A new view's strategy: auto unless the request names one; a stored view keeps its own; a setting
only other strategies read is refused, and a view keeps the settings of its strategy only.

Through the service's API (no agent, no Spark: the source's schema is stubbed).
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

import service.routes.views as views_route
from deltasieve_protocol.schema import ColumnInfo, SourceSchema, TableInfo
from deltasieve_protocol.types import LogicalType
from service.app import create_app
from service.settings import ServiceSettings
from warehouse.strategies import STRATEGIES

SQL = "SELECT p.id, p.name FROM crm.people p"
PEOPLE = TableInfo(
    "people",
    (
        ColumnInfo("id", LogicalType.parse("int"), False, "INTEGER"),
        ColumnInfo("name", LogicalType.parse("text"), True, "TEXT"),
        ColumnInfo("updated_at", LogicalType.parse("timestamp"), True, "DATETIME"),
    ),
    ("id",),
)


#: The dialect the stubbed agents report: row_version needs PostgreSQL, the others take any.
DIALECTS = {"row_version": "postgres", "snapshot_diff": "duckdb"}


@pytest.fixture
def client(tmp_path, monkeypatch, request):
    strategy = getattr(request, "param", None)

    def fetch_schemas(agents, **_):
        dialect = DIALECTS.get(strategy, "sqlite")
        return {name: SourceSchema(dialect, {"people": PEOPLE}) for name, _url, _token in agents}

    monkeypatch.setattr(views_route, "fetch_schemas", fetch_schemas)
    with TestClient(create_app(ServiceSettings(data_dir=tmp_path), start_spark=False)) as client:
        assert (
            client.post("/v1/sources", json={"name": "crm", "url": "http://127.0.0.1:9", "check": False}).status_code
            == 201
        )
        yield client


def _strategy(client: TestClient, view: str) -> str:
    r = client.get(f"/v1/views/{view}")
    assert r.status_code == 200, r.text
    return r.json()["strategy"]


def test_a_new_view_without_a_strategy_gets_auto(client):
    r = client.post("/v1/views", json={"name": "v", "sql": SQL})
    assert r.status_code == 201, r.text
    assert r.json()["strategy"] == "auto"
    assert _strategy(client, "v") == "auto"
    assert [v["strategy"] for v in client.get("/v1/views").json()] == ["auto"]


@pytest.mark.parametrize("client", list(STRATEGIES), indirect=True)
def test_a_strategy_the_request_names_is_kept(client, request):
    strategy = request.node.callspec.params["client"]
    stamps = {"timestamps": {"people": "updated_at"}} if strategy == "timestamp" else {}  # it needs them
    r = client.post("/v1/views", json={"name": "v", "sql": SQL, "strategy": strategy, **stamps})
    assert r.status_code == 201, r.text
    assert r.json()["strategy"] == strategy
    assert _strategy(client, "v") == strategy


def test_a_redefinition_keeps_the_strategy_unless_it_names_another(client):
    assert client.post("/v1/views", json={"name": "v", "sql": SQL, "strategy": "group_hash"}).status_code == 201
    narrower = SQL + " WHERE p.id > 10"
    r = client.put("/v1/views/v", json={"sql": narrower})
    assert r.status_code == 200, r.text
    assert r.json()["strategy"] == "group_hash" and r.json()["sql"] == narrower
    r = client.put("/v1/views/v", json={"sql": SQL, "strategy": "sketch"})
    assert r.status_code == 200, r.text
    assert _strategy(client, "v") == "sketch"


STAMPED = {"timestamps": {"people": "updated_at"}}


@pytest.mark.parametrize(
    "strategy, given, named",
    [
        ("sketch", STAMPED, "timestamps (read by auto and timestamp)"),
        ("full_ship", {"timestamp_lag_s": 1}, "timestamp_lag_s (read by auto and timestamp)"),
        ("group_hash", {"reconcile_every": 2}, "reconcile_every (read by auto, timestamp and row_version)"),
        (
            "row_version",
            {"snapshot_diff": {"algorithm": "sort_merge"}},
            "snapshot_diff (read by auto and snapshot_diff)",
        ),
        ("snapshot_diff", STAMPED, "timestamps (read by auto and timestamp)"),
    ],
)
def test_a_setting_the_strategy_never_reads_is_refused_naming_those_that_read_it(client, strategy, given, named):
    r = client.post("/v1/views", json={"name": "v", "sql": SQL, "strategy": strategy, **given})
    assert r.status_code == 422, r.text
    assert r.json()["detail"].startswith(f"strategy {strategy} does not read {named}"), r.text
    assert client.get("/v1/views/v").status_code == 404


def test_settings_at_their_defaults_are_taken_by_any_strategy_and_not_stored(client):
    defaults = {"timestamps": {}, "timestamp_lag_s": 5, "reconcile_every": 24, "snapshot_diff": {"algorithm": "window"}}
    r = client.post("/v1/views", json={"name": "v", "sql": SQL, "strategy": "sketch", **defaults})
    assert r.status_code == 201, r.text
    view = r.json()  # the answer keeps its fields: the defaults
    assert (view["timestamps"], view["timestamp_lag_s"], view["reconcile_every"], view["snapshot_diff"]) == (
        {},
        5.0,
        24,
        {},
    )
    stored = client.app.state.catalog.view("v").options.stored()
    assert stored == {"strategy": "sketch", "delete_flags": {}, "destinations": [{"kind": "delta"}]}


@pytest.mark.parametrize("client", ["row_version"], indirect=True)  # sources on PostgreSQL
def test_a_redefinition_to_another_strategy_keeps_only_the_settings_it_reads(client):
    r = client.post(
        "/v1/views",
        json={"name": "v", "sql": SQL, "strategy": "timestamp", "timestamp_lag_s": 2, "reconcile_every": 3, **STAMPED},
    )
    assert r.status_code == 201, r.text
    r = client.put("/v1/views/v", json={"sql": SQL, "strategy": "auto"})  # auto reads them all
    assert r.status_code == 200, r.text
    assert (r.json()["timestamps"], r.json()["timestamp_lag_s"]) == ({"crm.people": "updated_at"}, 2.0)
    r = client.put("/v1/views/v", json={"sql": SQL, "strategy": "row_version"})
    assert r.status_code == 200, r.text
    assert (r.json()["timestamps"], r.json()["reconcile_every"]) == ({}, 3)
    r = client.put("/v1/views/v", json={"sql": SQL, **STAMPED})  # the view's strategy is row_version now
    assert r.status_code == 422 and "strategy row_version does not read timestamps" in r.json()["detail"], r.text
    r = client.put("/v1/views/v", json={"sql": SQL, "strategy": "timestamp"})  # its timestamps went with auto
    assert r.status_code == 422 and "timestamp column for every table" in r.json()["detail"], r.text
    r = client.put("/v1/views/v", json={"sql": SQL, "strategy": "timestamp", **STAMPED})
    assert r.status_code == 200, r.text
    assert (r.json()["timestamps"], r.json()["timestamp_lag_s"], r.json()["reconcile_every"]) == (
        {"crm.people": "updated_at"},
        5.0,
        3,
    )
