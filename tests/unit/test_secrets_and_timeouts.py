"""Checks that behaviour over HTTP cannot show: secrets are compared in constant time, and
every outbound HTTP call of the service has a timeout."""

from __future__ import annotations

import ast
import hmac
import sqlite3
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

import remote_agent.app as agent_app
import remote_agent.deps as agent_deps
import service.auth as service_auth
from remote_agent.settings import AgentSettings
from service.app import create_app as create_service
from service.settings import ServiceSettings

ROOT = Path(__file__).resolve().parents[2]
#: httpx functions and classes that open connections, and so need a timeout.
HTTPX_CALLS = {"get", "post", "put", "patch", "delete", "head", "options", "request", "stream", "Client", "AsyncClient"}


@pytest.fixture
def compare_calls(monkeypatch):
    """Record the arguments of every hmac.compare_digest call (the real one still decides)."""
    calls = []
    real = hmac.compare_digest

    def recording(a, b):
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", recording)
    return calls


def test_the_agent_compares_its_token_in_constant_time(tmp_path, compare_calls):
    db = tmp_path / "t.db"
    sqlite3.connect(db).close()
    app = agent_app.create_app(AgentSettings(db_url=f"sqlite:///{db}", token="right-token"))
    with TestClient(app) as client:
        assert client.get("/v1/schema", headers={"Authorization": "Bearer wrong-token"}).status_code == 401
        assert client.get("/v1/schema", headers={"Authorization": "Bearer right-token"}).status_code == 200
    assert compare_calls == [(b"wrong-token", b"right-token"), (b"right-token", b"right-token")]
    assert agent_deps.hmac is hmac


def test_the_service_compares_its_api_key_in_constant_time(tmp_path, compare_calls):
    app = create_service(ServiceSettings(data_dir=tmp_path, api_key="right-key"), start_spark=False)
    with TestClient(app) as client:
        body = {"name": "s", "url": "http://127.0.0.1:9"}
        assert client.post("/v1/sources", json=body, headers={"X-API-Key": "wrong-key"}).status_code == 401
        assert client.post("/v1/sources", json=body, headers={"X-API-Key": "right-key"}).status_code == 201
        assert client.post("/v1/sources", content=b"{not json", headers={"Content-Type": "application/json"}).status_code == 401
    # the ApiKeyGate middleware and the routes' dependency both compare
    assert set(compare_calls) == {(b"wrong-key", b"right-key"), (b"right-key", b"right-key"), (b"", b"right-key")}
    assert service_auth.hmac is hmac


def outbound_calls_without_timeout(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        owner = node.func.value
        if isinstance(owner, ast.Name) and owner.id == "httpx" and node.func.attr in HTTPX_CALLS:
            if not any(k.arg == "timeout" for k in node.keywords):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: httpx.{node.func.attr}(...) without timeout=")
        if isinstance(owner, ast.Name) and owner.id in ("requests", "urllib") or node.func.attr == "urlopen":
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node.func)} (use httpx with a timeout)")
    return found


def test_every_outbound_http_call_of_the_service_has_a_timeout():
    files = [p for part in ("service", "warehouse") for p in sorted((ROOT / part).rglob("*.py"))]
    assert any("httpx.Client" in p.read_text() for p in files), "no httpx client found: this test would prove nothing"
    problems = [problem for p in files for problem in outbound_calls_without_timeout(p)]
    assert not problems, "\n".join(problems)
