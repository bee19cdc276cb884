"""The view option destinations as the API takes and shows it: the default, the checks, the
password never shown back, and views stored before destinations existed."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from service.app import create_app
from service.catalog import Catalog
from service.models import ViewIn, ViewSettings
from service.publishing import place, usable
from service.secrets import Secrets
from service.settings import ServiceSettings
from warehouse import destinations
from warehouse.destinations import available, public
from warehouse.multisets.multiset import _cols
from warehouse.view_options import DestinationSpec, ViewOptions
from warehouse.viewdef import ViewDef


def test_a_new_view_gets_its_delta_table_and_an_empty_list_publishes_nothing():
    assert [d.model_dump(exclude_defaults=True) for d in ViewIn(name="v", sql="x").destinations] == [{"kind": "delta"}]
    assert ViewIn(name="v", sql="x", destinations=[]).destinations == []


@pytest.mark.parametrize(
    "given",
    [
        [{"kind": "delta", "url": "postgresql://h/db"}],
        [{"kind": "postgres", "table": "a.b"}],
        [{"kind": "postgres", "url": "mysql://h/db", "table": "a.b"}],
        [{"kind": "postgres", "url": "postgresql://h/db", "table": "no_schema"}],
        [{"kind": "iceberg"}],
        [{"kind": "delta"}, {"kind": "delta"}],
        [{"kind": "delta", "path": "/x"}],
        [{"kind": "delta", "uri": "relative/dir"}],
        [{"kind": "iceberg", "table": "wh.t", "uri": "/x"}],
        [{"kind": "iceberg", "table": "no_namespace"}],
        [{"kind": "delta", "catalog": {"type": "sql"}}],
        [{"kind": "iceberg", "table": "wh.t", "catalog": {"uri": "postgresql://me:pw@h/db"}}],
        [{"kind": "iceberg", "table": "wh.t", "catalog": {"uri": "mysql://me@h/db"}}],
        [{"kind": "iceberg", "table": "wh.t", "catalog": {"uri": "sqlite:///relative.db"}}],
        [{"kind": "iceberg", "table": "wh.t", "catalog": {"type": "rest"}}],
        [{"kind": "iceberg", "table": "wh.t", "catalog": {"type": "rest", "uri": "http://c", "token": "literal"}}],
        [{"kind": "iceberg", "table": "wh.t", "catalog": {"token": "env:T"}}],
        [{"kind": "iceberg", "table": "wh.t"}, {"kind": "iceberg", "table": "wh.t"}],
        [{"kind": "delta", "mode": "scd2"}],
        [{"kind": "delta", "columns": {"active": "_a"}}],
        [{"kind": "delta", "mode": "history", "columns": {"current": "is current"}}],
    ],
)
def test_bad_destinations_are_refused(given):
    with pytest.raises(ValidationError):
        ViewIn(name="v", sql="x", destinations=given)
    with pytest.raises(ValidationError):
        ViewSettings(destinations=given)


def test_postgres_tables_of_one_view_in_one_schema_or_others_are_taken():
    given = [
        {"kind": "postgres", "url": "postgresql://h/db", "table": "bi.students"},
        {"kind": "postgres", "url": "postgresql://h/db", "table": "bi.students_history", "mode": "history"},
        {"kind": "postgres", "url": "postgresql://h/db", "table": "bi_history.students", "mode": "history"},
        {"kind": "postgres", "url": "postgresql://h/other", "table": "bi.students"},
    ]
    assert len(ViewIn(name="v", sql="x", destinations=given).destinations) == 4


def test_a_postgres_destination_is_refused_while_its_module_is_missing():
    given = [{"kind": "postgres", "url": "postgresql://me:pw@h/db", "table": "bi.orders"}]
    if available("postgres"):
        assert ViewIn(name="v", sql="x", destinations=given).destinations[0].table == "bi.orders"
    else:
        with pytest.raises(ValidationError, match="not available"):
            ViewIn(name="v", sql="x", destinations=given)


def test_an_iceberg_destination_is_refused_by_name_where_pyiceberg_is_missing(monkeypatch):
    given = [{"kind": "iceberg", "table": "wh.orders", "catalog": {"uri": "env:CATALOG_URL"}}]
    assert ViewIn(name="v", sql="x", destinations=given).destinations[0].catalog.uri == "env:CATALOG_URL"
    monkeypatch.setitem(destinations.NEEDS, "iceberg", "pyiceberg_not_installed_here")
    with pytest.raises(ValidationError, match=r"need pyiceberg.*deltasieve\[iceberg\]"):
        ViewIn(name="v", sql="x", destinations=given)


def test_an_iceberg_catalogs_secrets_are_read_when_it_is_opened(monkeypatch):
    spec = DestinationSpec.model_validate(
        {"kind": "iceberg", "table": "wh.t", "catalog": {"type": "rest", "uri": "env:CAT", "token": "env:TOK"}}
    )
    monkeypatch.setenv("CAT", "https://catalog.example/api")
    monkeypatch.setenv("TOK", "t0ken")
    opened = usable(spec, Secrets(None), "view 'v'")
    assert (opened.catalog.uri, opened.catalog.token) == ("https://catalog.example/api", "t0ken")
    assert public(spec, Path("/d"), "v")["catalog"] == {"type": "rest", "uri": "env:CAT"}
    assert "t0ken" not in place(spec)


def test_the_password_is_never_shown_nor_named_in_the_catalog():
    spec = DestinationSpec(kind="postgres", url="postgresql://me:s3cret@db:5433/wh", table="bi.orders")
    shown = public(spec, Path("/d"), "v")
    assert shown == {"kind": "postgres", "url": "postgresql://me:***@db:5433/wh", "table": "bi.orders"}
    assert "s3cret" not in place(spec)


def test_views_stored_before_keep_none_and_the_option_stores_round_trip():
    old = ViewOptions.from_stored({"strategy": "sketch"})
    assert old.destinations == []
    given = old.published([{"kind": "delta", "uri": "/lake/v"}])
    again = ViewOptions.from_stored(given.stored())
    assert again.destinations == [DestinationSpec(kind="delta", uri="/lake/v")]
    assert again.published([]).stored()["destinations"] == []


def test_a_mode_and_its_column_names_are_stored_as_given_and_shown_whole():
    given = {"kind": "delta", "mode": "history", "columns": {"current": "_fivetran_active"}}
    (spec,) = ViewIn(name="v", sql="x", destinations=[given]).destinations
    assert spec.model_dump(exclude_defaults=True) == given
    stored = ViewOptions.from_stored({"strategy": "sketch"}).published([given])
    assert stored.stored()["destinations"] == [given]
    (back,) = ViewOptions.from_stored(stored.stored()).destinations
    assert (back.mode, back.columns.current, back.columns.valid_from) == (
        "history",
        "_fivetran_active",
        "_deltasieve_valid_from",
    )


def test_a_mode_s_columns_are_refused_by_name_when_they_clash_and_shown_when_taken(tmp_path):
    catalog = Catalog(tmp_path / "catalog.db")
    definition = ViewDef("SELECT ...", _cols("id int", "name text"), ["id"], [])
    catalog.add_view("v", "SELECT ...", definition.to_json(), ViewOptions.from_stored({"strategy": "sketch"}))
    catalog.close()
    refused = [  # what is given, and what the answer names
        ({"mode": "history", "columns": {"current": "name"}}, "current is named name, a column of the view"),
        ({"columns": {"deleted": "_gone"}}, "the merge mode writes no deleted column"),
        ({"columns": {"synced_at": "_at", "sync_id": "_at"}}, "synced_at and sync_id are both named _at"),
        ({"mode": "scd2"}, "'merge', 'soft_delete' or 'history'"),
        ({"columns": {"synced_at": "bad name"}}, '"columns","synced_at"'),
    ]
    with TestClient(create_app(ServiceSettings(data_dir=tmp_path), start_spark=False)) as client:
        for given, named in refused:
            r = client.patch("/v1/views/v", json={"destinations": [{"kind": "delta", **given}]})
            assert r.status_code == 422 and named in r.text, r.text
        given = {"kind": "delta", "mode": "soft_delete", "columns": {"deleted": "_fivetran_deleted"}}
        r = client.patch("/v1/views/v", json={"destinations": [given]})
        assert r.status_code == 200, r.text
        (shown,) = r.json()["destinations"]
        assert shown["mode"] == "soft_delete"
        assert shown["columns"] == {
            "deleted": "_fivetran_deleted",
            "deleted_at": "_deltasieve_deleted_at",
            "synced_at": "_deltasieve_synced_at",
            "sync_id": "_deltasieve_sync_id",
        }


S3 = {"kind": "delta", "uri": "s3://lake/views/orders"}


@pytest.mark.parametrize(
    "storage, problem",
    [
        ({"endpoint": "http://s3:9000"}, None),
        ({"access_key_id": "env:S3_KEY"}, "together"),
        ({"access_key_id": "k", "secret_access_key": "s", "options": {"aws_secret_access_key": "s"}}, "credential"),
        ({"options": {"AWS_S3_ALLOW_UNSAFE_RENAME": "true"}}, "unsafe"),
        ({"options": {"aws_endpoint": "http://elsewhere"}}, "storage.endpoint"),
        ({"endpoint": "s3.example.com"}, "endpoint"),
        ({"access_key_id": "env:NOT A NAME", "secret_access_key": "s"}, "access_key_id"),
        ({"bucket": "lake"}, "bucket"),
    ],
)
def test_a_storage_is_checked_where_the_request_gives_it(storage, problem):
    if problem is None:
        assert ViewIn(name="v", sql="x", destinations=[{**S3, "storage": storage}]).destinations[0].storage
        return
    with pytest.raises(ValidationError, match=problem):
        ViewIn(name="v", sql="x", destinations=[{**S3, "storage": storage}])


@pytest.mark.parametrize(
    "given", [{"kind": "delta", "storage": {}}, {"kind": "delta", "uri": "/lake/orders", "storage": {}}]
)
def test_a_storage_goes_with_an_s3_uri_only(given):
    with pytest.raises(ValidationError, match="s3://BUCKET/PATH"):
        ViewIn(name="v", sql="x", destinations=[given])


def test_storage_credentials_are_sealed_or_kept_as_references_and_never_shown():
    from cryptography.fernet import Fernet

    from service.errors import Unprocessable
    from service.secrets import Secrets, stored_destinations

    given = {
        **S3,
        "storage": {"endpoint": "http://s3:9000", "access_key_id": "env:S3_KEY", "secret_access_key": "s3cret"},
    }
    (request,) = ViewIn(name="v", sql="x", destinations=[given]).destinations
    with pytest.raises(Unprocessable, match="SERVICE_SECRET_KEY"):
        stored_destinations([request], Secrets(None))
    (stored,) = stored_destinations([request], Secrets(Fernet.generate_key().decode()))
    assert stored["storage"]["access_key_id"] == "env:S3_KEY"
    assert stored["storage"]["secret_access_key"].startswith("fernet:") and "s3cret" not in str(stored)
    spec = ViewOptions.from_stored({"strategy": "sketch"}).published([stored]).destinations[0]
    assert public(spec, Path("/d"), "v")["storage"] == {
        "endpoint": "http://s3:9000",
        "access_key_id": "env:S3_KEY",
        "secret_access_key": "***",
    }
    assert place(spec) == "delta s3://lake/views/orders"
