"""What the service stores of a secret (service/secrets.py), over its API without Spark: a
literal refused without SERVICE_SECRET_KEY, references taken, a catalog's clear tokens
encrypted at the first start with a key. (Syncs with them: tests/integration/test_stored_secrets.py.)"""

from __future__ import annotations

import pytest
from cryptography.fernet import Fernet
from fastapi.testclient import TestClient

from service.app import create_app
from service.catalog import Catalog
from service.secrets import Secrets
from service.settings import ServiceSettings
from warehouse.errors import SecretUnavailable

AGENT = "http://127.0.0.1:9"  # never asked: check is false
PG_URL = "postgresql://loader:pg-s3cret@127.0.0.1:9/wh"


def test_without_a_key_a_literal_is_refused_and_a_reference_taken(tmp_path):
    app = create_app(ServiceSettings(data_dir=tmp_path, secret_key=None), start_spark=False)
    with TestClient(app) as client:
        literal = client.post("/v1/sources", json={"name": "lit", "url": AGENT, "token": "t0ken", "check": False})
        assert literal.status_code == 422, literal.text
        assert "SERVICE_SECRET_KEY" in literal.json()["detail"] and "env:" in literal.json()["detail"]
        patched = client.post("/v1/sources", json={"name": "ref", "url": AGENT, "token": "env:X", "check": False})
        assert patched.status_code == 201 and patched.json()["token_reference"] == "env:X", patched.text
        again = client.patch("/v1/sources/ref", json={"token": "t0ken", "check": False})
        assert again.status_code == 422, again.text
        assert client.get("/v1/sources/ref").json()["token_reference"] == "env:X", "the refused change left it"
    assert b"t0ken" not in (tmp_path / "catalog.db").read_bytes()


def test_a_literal_is_stored_encrypted_under_the_key(tmp_path):
    key = Fernet.generate_key().decode()
    app = create_app(ServiceSettings(data_dir=tmp_path, secret_key=key), start_spark=False)
    with TestClient(app) as client:
        r = client.post("/v1/sources", json={"name": "lit", "url": AGENT, "token": "t0ken", "check": False})
        assert r.status_code == 201 and r.json()["has_token"] and "t0ken" not in r.text, r.text
    catalog = Catalog(tmp_path / "catalog.db")
    stored = catalog.source("lit").token
    catalog.close()
    assert stored is not None and stored.startswith("fernet:")
    assert Secrets(key).reveal(stored, "token") == "t0ken"
    with pytest.raises(SecretUnavailable, match="another SERVICE_SECRET_KEY"):
        Secrets(Fernet.generate_key().decode()).reveal(stored, "token")
    for path in tmp_path.rglob("*"):
        assert not path.is_file() or b"t0ken" not in path.read_bytes(), path


def test_a_catalog_from_before_is_encrypted_at_the_first_start_with_a_key(tmp_path):
    catalog = Catalog(tmp_path / "catalog.db")
    catalog.add_source("old", AGENT, "clear-t0ken")  # as the service stored tokens before
    catalog.add_source("ref", AGENT, "file:/run/secrets/token")
    catalog.close()
    assert b"clear-t0ken" in (tmp_path / "catalog.db").read_bytes() + _wal(tmp_path)

    without = create_app(ServiceSettings(data_dir=tmp_path, secret_key=None), start_spark=False)
    with TestClient(without) as client:  # no key: kept as it is, and still used
        assert client.get("/v1/sources/old").json()["has_token"] is True
    key = Fernet.generate_key().decode()
    with TestClient(create_app(ServiceSettings(data_dir=tmp_path, secret_key=key), start_spark=False)) as client:
        assert client.get("/v1/sources/old").json()["has_token"] is True
    assert b"clear-t0ken" not in (tmp_path / "catalog.db").read_bytes() + _wal(tmp_path)
    catalog = Catalog(tmp_path / "catalog.db")
    assert Secrets(key).reveal(catalog.source("old").token or "", "token") == "clear-t0ken"
    assert catalog.source("ref").token == "file:/run/secrets/token"
    catalog.close()


def test_a_destination_password_is_sealed_and_the_url_keeps_its_place():
    key = Fernet.generate_key().decode()
    sealed = Secrets(key).destination_sealed_again({"kind": "postgres", "url": PG_URL, "table": "s.t"})
    assert sealed is not None and sealed["url"] == "postgresql://loader:***@127.0.0.1:9/wh"
    assert "pg-s3cret" not in str(sealed) and Secrets(key).reveal(sealed["sealed"], "url") == PG_URL
    assert Secrets(key).destination_sealed_again({"kind": "postgres", "url": "env:WH", "table": "s.t"}) is None


def _wal(data_dir) -> bytes:
    wal = data_dir / "catalog.db-wal"
    return wal.read_bytes() if wal.exists() else b""
