"""Keys and the audit log without Spark: SERVICE_METRICS_OPEN, the request state's key name,
and the audit log's retention."""

from __future__ import annotations

import datetime as dt

from fastapi.testclient import TestClient

from service.app import create_app
from service.audit import Entry
from service.catalog import Catalog
from service.settings import ServiceSettings


def test_metrics_need_a_key_unless_opened(tmp_path):
    for opened, status in ((False, 401), (True, 200)):
        app = create_app(ServiceSettings(data_dir=tmp_path, api_key="k", metrics_open=opened), start_spark=False)
        with TestClient(app) as client:
            assert client.get("/metrics").status_code == status
            assert client.get("/v1/views").status_code == 401  # only /metrics opens


def test_a_service_without_keys_stays_open_until_one_is_made(tmp_path):
    app = create_app(ServiceSettings(data_dir=tmp_path), start_spark=False)
    with TestClient(app) as client:
        assert client.get("/v1/views").status_code == 200
        made = client.post("/v1/keys", json={"name": "first", "scope": "admin"})
        assert made.status_code == 201
        assert client.get("/v1/views").status_code == 401
        assert client.get("/v1/views", headers={"Authorization": f"Bearer {made.json()['key']}"}).status_code == 200
        assert client.get("/health").status_code == 200


def entry(at: dt.datetime, view: str | None) -> Entry:
    return Entry(at.isoformat(timespec="milliseconds"), "k", "GET", f"/v1/views/{view}/rows", view, None, 200, 1)


def test_the_audit_log_follows_the_retention_of_sync_records(tmp_path):
    catalog = Catalog(tmp_path / "catalog.db")
    now = dt.datetime(2026, 11, 29, tzinfo=dt.UTC)
    for days in (40, 20, 10, 1):
        for view in ("a", "b"):
            catalog.audit.add(entry(now - dt.timedelta(days=days), view))
    assert catalog.audit.prune(30 * 86400, None, now) == 2  # the entries of 40 days ago
    assert catalog.audit.prune(None, 2, now) == 2  # each view keeps its newest two
    kept = catalog.audit.recent(100)
    assert sorted((e["view"], e["at"][:10]) for e in kept) == [
        ("a", "2026-11-19"),
        ("a", "2026-11-28"),
        ("b", "2026-11-19"),
        ("b", "2026-11-28"),
    ]
    catalog.close()
