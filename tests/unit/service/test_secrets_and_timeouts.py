"""Checks that behaviour over HTTP cannot show: the service compares its API key in
constant time, and every outbound HTTP call of the service has a timeout.

(The agent's token: tests/unit/remote_agent/test_agent_token.py.)"""

from __future__ import annotations

import ast
import hmac
from pathlib import Path

from fastapi.testclient import TestClient

import service.auth as service_auth
from service.app import create_app as create_service
from service.keys import digest
from service.settings import ServiceSettings

ROOT = Path(__file__).resolve().parents[3]
#: httpx functions and classes that open connections, and so need a timeout.
HTTPX_CALLS = {"get", "post", "put", "patch", "delete", "head", "options", "request", "stream", "Client", "AsyncClient"}


def test_the_service_compares_its_api_key_in_constant_time(tmp_path, compare_calls):
    app = create_service(ServiceSettings(data_dir=tmp_path, api_key="right-key"), start_spark=False)
    with TestClient(app) as client:
        body = {"name": "s", "url": "http://127.0.0.1:9", "check": False}  # the key is what is tested
        assert client.post("/v1/sources", json=body, headers={"X-API-Key": "wrong-key"}).status_code == 401
        assert client.post("/v1/sources", json=body, headers={"X-API-Key": "right-key"}).status_code == 201
        assert (
            client.post("/v1/sources", content=b"{not json", headers={"Content-Type": "application/json"}).status_code
            == 401
        )
        seen = list(compare_calls)
        # a key made through the API is found by comparing digests too, every stored one
        made = client.post("/v1/keys", json={"name": "r", "scope": "read"}, headers={"X-API-Key": "right-key"})
        compare_calls.clear()
        assert client.get("/v1/views", headers={"X-API-Key": made.json()["key"]}).status_code == 200
        assert (digest(made.json()["key"]), digest(made.json()["key"])) in compare_calls
    # the ApiKeyGate middleware compares digests of the keys (equal lengths: nothing told by the time taken)
    pairs = {frozenset(pair) for pair in seen}
    assert {frozenset((digest("wrong-key"), digest("right-key"))), frozenset((digest("right-key"),))} <= pairs
    assert all(len(a) == len(b) == 64 for a, b in seen)
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
