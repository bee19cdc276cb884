"""The service and format numbers of stored state: state in another format is refused by name."""

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

#: A view definition as stored, without its "format" field.
UNNUMBERED = {
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
        catalog.add_view(name, definition["sql"], definition, ViewOptions.from_stored({"strategy": "auto"}))
    catalog.close()


def served(tmp_path) -> TestClient:
    return TestClient(create_app(ServiceSettings(data_dir=tmp_path), start_spark=False))


def test_a_definition_without_a_format_answers_409_naming_the_view(tmp_path):
    catalog_with(tmp_path, old=UNNUMBERED, new={**UNNUMBERED, "format": 2})
    with served(tmp_path) as client:
        assert client.get("/v1/views/new").json()["key"] == ["id"]
        for path in ("/v1/views/old", "/v1/views"):
            r = client.get(path)
            assert r.status_code == 409, r.text
            assert "view 'old'" in r.json()["detail"] and "create it again" in r.json()["detail"]
    catalog = Catalog(tmp_path / "catalog.db")
    assert catalog.view("old").definition == UNNUMBERED  # left as it was
    catalog.close()


def test_a_newer_definition_answers_409_saying_to_upgrade(tmp_path):
    catalog_with(tmp_path, future={**UNNUMBERED, "format": 5})
    with served(tmp_path) as client:
        for path in ("/v1/views/future", "/v1/views"):
            r = client.get(path)
            assert r.status_code == 409, r.text
            assert "format 5" in r.json()["detail"] and "upgrade deltasieve" in r.json()["detail"]
    catalog = Catalog(tmp_path / "catalog.db")
    assert catalog.view("future").definition["format"] == 5  # left as it was
    catalog.close()


def test_the_service_does_not_start_on_a_newer_stored_view(tmp_path):
    catalog_with(tmp_path, future={**UNNUMBERED, "format": 2})
    view_dir = tmp_path / "views" / "future"
    (view_dir / "versions" / "1").mkdir(parents=True)
    (view_dir / "CURRENT").write_text(json.dumps({"format": STORAGE_FORMAT + 1, "version": 1, "sync_id": "s"}))
    with pytest.raises(FormatError, match="upgrade deltasieve"):
        with served(tmp_path):
            pass


def test_a_table_view_keeps_its_table_across_a_restart_and_other_views_have_none(tmp_path):
    table_view = {
        **UNNUMBERED,
        "format": 2,
        "sql": 'SELECT "id" FROM "crm"."people"',
        "table": "crm.people",
    }
    catalog_with(tmp_path, other={**UNNUMBERED, "format": 2}, people=table_view)
    with served(tmp_path) as client:
        assert client.get("/v1/views/people").json()["table"] == "crm.people"
        assert client.get("/v1/views/other").json()["table"] is None
    catalog = Catalog(tmp_path / "catalog.db")
    assert catalog.view("people").definition == table_view
    catalog.close()
