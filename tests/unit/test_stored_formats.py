"""The service and format numbers of stored state: older definitions upgraded at start, newer state refused."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.catalog import Catalog
from service.settings import ServiceSettings
from warehouse.errors import FormatError
from warehouse.formats import STORAGE_FORMAT
from warehouse.view_options import ViewOptions

#: A view definition as deltasieve 41bc7ec stored it (format 1: no "format" field).
FORMAT_1 = {
    "sql": "SELECT p.id FROM crm.people p",
    "columns": [{"name": "id", "type": "int"}],
    "key": ["id"],
    "sites": [
        {
            "source": "crm",
            "sql": 'SELECT "p"."id" AS "id" FROM "people" AS "p"',
            "columns": [{"name": "id", "type": "int"}],
            "key": ["id"],
        }
    ],
}


def catalog_with(tmp_path, **definitions: dict) -> None:
    catalog = Catalog(tmp_path / "catalog.db")
    for name, definition in definitions.items():
        catalog.add_view(name, definition["sql"], definition, ViewOptions())
    catalog.close()


def served(tmp_path) -> TestClient:
    return TestClient(create_app(ServiceSettings(data_dir=tmp_path), start_spark=False))


def test_definitions_of_format_1_are_rewritten_in_format_2_at_start(tmp_path):
    catalog_with(tmp_path, old=FORMAT_1, new={**FORMAT_1, "format": 2})
    with served(tmp_path) as client:
        view = client.get("/v1/views/old")
        assert view.status_code == 200 and view.json()["key"] == ["id"]
    catalog = Catalog(tmp_path / "catalog.db")
    assert catalog.view("old").definition == {"format": 2, **FORMAT_1}
    assert catalog.view("new").definition == {"format": 2, **FORMAT_1}
    catalog.close()


def test_a_newer_definition_answers_409_saying_to_upgrade(tmp_path):
    catalog_with(tmp_path, future={**FORMAT_1, "format": 5})
    with served(tmp_path) as client:
        for path in ("/v1/views/future", "/v1/views"):
            r = client.get(path)
            assert r.status_code == 409, r.text
            assert "format 5" in r.json()["detail"] and "upgrade deltasieve" in r.json()["detail"]
    catalog = Catalog(tmp_path / "catalog.db")
    assert catalog.view("future").definition["format"] == 5  # left as it was
    catalog.close()


def test_the_service_does_not_start_on_a_newer_stored_view(tmp_path):
    catalog_with(tmp_path, future=FORMAT_1)
    view_dir = tmp_path / "views" / "future"
    (view_dir / "versions" / "1").mkdir(parents=True)
    (view_dir / "CURRENT").write_text(json.dumps({"format": STORAGE_FORMAT + 1, "version": 1, "sync_id": "s"}))
    with pytest.raises(FormatError, match="upgrade deltasieve"):
        with served(tmp_path):
            pass


def test_a_table_view_keeps_its_table_across_a_restart_and_old_views_have_none(tmp_path):
    table_view = {
        **FORMAT_1,
        "format": 2,
        "sql": 'SELECT "id" FROM "crm"."people"',
        "table": "crm.people",
    }
    catalog_with(tmp_path, old=FORMAT_1, people=table_view)
    with served(tmp_path) as client:
        assert client.get("/v1/views/people").json()["table"] == "crm.people"
        assert client.get("/v1/views/old").json()["table"] is None
    catalog = Catalog(tmp_path / "catalog.db")
    assert catalog.view("people").definition == table_view  # the start's upgrade leaves it as it is
    catalog.close()
