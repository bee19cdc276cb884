"""The agent's doors, over HTTP against a real agent process on SQLite: its token, what
site queries it runs, its body size limit and its cap on concurrent extractions."""

from __future__ import annotations

import hashlib
import os
import re
import socket
import sqlite3
import time

import httpx
import pytest
from fastapi.routing import APIRoute, iter_route_contexts

from deltasieve_protocol import frames
from remote_agent.app import create_app
from remote_agent.metrics import ABANDONED
from remote_agent.settings import AgentSettings
from tests.support.agent_requests import (
    INERT,
    QUERY_ENDPOINTS,
    REFUSED,
    answer_frames,
    assert_refused,
    bearer_client,
    inert_request,
    payload_params,
    post_site_query,
    site_body,
)
from workloads.harness import start_agent

pytestmark = pytest.mark.integration

TOKEN = "agent-token-7f3a9c1e5b"
#: Wrong tokens, including ones a byte-by-byte comparison would get far into.
WRONG_TOKENS = ["nope", TOKEN[:-1], TOKEN + "x", TOKEN.upper(), f"{TOKEN} {TOKEN}"]
#: Documentation routes FastAPI adds; they describe the public API and stay open.
DOC_PATHS = {"/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"}
ITEM_COLUMNS = [{"name": "sku", "type": "text"}, {"name": "name", "type": "text"}]
MAX_BODY_BYTES = 64 * 1024


@pytest.fixture(scope="module")
def legacy(tmp_path_factory):
    """`items` (exposed, but its `cost` hidden) and `secrets` (not exposed)."""
    db = tmp_path_factory.mktemp("legacy") / "legacy.db"
    with sqlite3.connect(db) as c:
        c.execute("CREATE TABLE items (sku TEXT PRIMARY KEY, name TEXT, cost REAL, stock INTEGER)")
        c.execute("CREATE TABLE secrets (id TEXT PRIMARY KEY, password TEXT)")
        c.executemany(
            "INSERT INTO items VALUES (?, ?, ?, ?)", [(f"sku-{i:04d}", f"item {i}", i * 0.5, i % 7) for i in range(200)]
        )
        c.execute("INSERT INTO secrets VALUES ('root', 'hunter2')")
    c.close()
    return db


@pytest.fixture(scope="module")
def agent(legacy, logs_dir):
    # log level info: the access log is on, so the test below can look for tokens in it
    proc = start_agent(
        f"sqlite:///{legacy}",
        logs_dir,
        token=TOKEN,
        allow=["items:sku,name,stock"],
        extra=["--log-level", "info", "--max-body-bytes", str(MAX_BODY_BYTES)],
    )
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def client(agent):
    with bearer_client(agent.url, TOKEN) as c:
        yield c


def fingerprint(db) -> tuple[str, list]:
    """The database file's bytes and its tables' rows: both must survive every attack."""
    digest = hashlib.sha256(db.read_bytes()).hexdigest()
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as c:
        rows = [c.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall() for t in ("items", "secrets")]
        rows.append(c.execute("SELECT name, sql FROM sqlite_master ORDER BY name").fetchall())
    c.close()
    return digest, rows


def api_operations(legacy) -> list[tuple[str, str]]:
    """(method, path) of every operation of the agent's app, from the OpenAPI document
    FastAPI builds out of its routes: an endpoint added later is covered by the tests below."""
    app = create_app(AgentSettings(db_url=f"sqlite:///{legacy}", token="x"))
    ops = [
        (m.upper(), re.sub(r"\{[^}]+\}", "nope", path)) for path, item in app.openapi()["paths"].items() for m in item
    ]
    # iter_route_contexts: the routes of included routers too, each with its full path
    hidden = {
        r.path or repr(r.original_route)
        for r in iter_route_contexts(app.routes)
        if not isinstance(r.original_route, APIRoute) or not r.include_in_schema
    }
    assert hidden <= DOC_PATHS, (
        f"routes missing from the OpenAPI document: {hidden - DOC_PATHS}; decide whether they need the token"
    )
    return ops


# --- the token -----------------------------------------------------------------------------


def test_every_endpoint_but_health_needs_the_token(agent, legacy):
    ops = api_operations(legacy)
    assert ("GET", "/health") in ops and ("POST", "/v1/extract") in ops
    for method, path in ops:
        for headers in [
            {},
            *({"Authorization": f"Bearer {w}"} for w in WRONG_TOKENS),
            {"Authorization": "Bearer"},
            {"Authorization": f"Basic {TOKEN}"},
            {"Authorization": TOKEN},
            {"X-API-Key": TOKEN},
        ]:
            r = httpx.request(method, agent.url + path, headers=headers, content=b"")
            if path == "/health":
                assert r.status_code == 200, (method, path, headers)
                continue
            assert r.status_code == 401, (method, path, headers, r.status_code, r.text)
            assert r.headers["www-authenticate"] == "Bearer"
            assert "token" in r.json()["detail"]
            assert TOKEN not in r.text
        right = httpx.request(method, agent.url + path, headers={"Authorization": f"Bearer {TOKEN}"}, content=b"")
        assert right.status_code != 401, (method, path)
        assert right.status_code < 500, (method, path, right.text)


def test_tokens_never_appear_in_logs_or_error_messages(agent, client, legacy):
    for endpoint in QUERY_ENDPOINTS:
        assert post_site_query(client, endpoint, "SELECT s.password FROM secrets s", ["password"]).status_code == 403
    wrong = "wrong-token-4d2c8e"
    for path in ("/v1/schema", "/v1/extract", "/v1/nowhere"):
        r = httpx.post(agent.url + path, headers={"Authorization": f"Bearer {wrong}"}, content=b"x")
        assert wrong not in r.text and TOKEN not in r.text
    assert client.get("/v1/schema").status_code == 200
    time.sleep(0.5)  # let the access log reach the file
    log = agent.log.read_text(errors="replace")
    assert "/v1/schema" in log, "the agent logged no requests: this test would prove nothing"
    for secret in (TOKEN, wrong, *[w for w in WRONG_TOKENS if len(w) > 4]):
        assert secret not in log, f"a token ({secret[:4]}...) appears in the agent's log"


# --- what site queries the agent runs -------------------------------------------------------


def test_a_plain_select_over_exposed_columns_is_answered(client):
    """The yardstick for the refusals below: the same requests, with a legitimate query, work."""
    r = post_site_query(
        client, "/v1/extract", "SELECT i.sku, i.name FROM items i WHERE i.stock > 2", ["sku"], ITEM_COLUMNS
    )
    assert r.status_code == 200, r.text
    got = answer_frames(r)
    assert got[-1].kind == frames.SUMMARY
    rows = sum(f.batch().num_rows for f in got if f.kind == frames.UNGROUPED_ROWS)
    assert rows == sum(1 for i in range(200) if i % 7 > 2)


@pytest.mark.parametrize("endpoint", list(QUERY_ENDPOINTS))
@pytest.mark.parametrize("sql, words", payload_params(REFUSED))
def test_anything_but_a_select_over_exposed_columns_is_refused(client, legacy, endpoint, sql, words):
    before = fingerprint(legacy)
    key = ["sku"]
    r = post_site_query(client, endpoint, sql, key)
    assert_refused(r, words, secret="hunter2")
    assert fingerprint(legacy) == before
    assert not os.path.exists("/tmp/deltasieve-attack.db")


@pytest.mark.parametrize("endpoint", list(QUERY_ENDPOINTS))
@pytest.mark.parametrize("sql, names", payload_params(INERT))
def test_hostile_names_and_strings_stay_names_and_strings(client, legacy, endpoint, sql, names):
    before = fingerprint(legacy)
    inert_request(client, endpoint, sql, names)
    assert fingerprint(legacy) == before


# --- limits --------------------------------------------------------------------------------


def test_a_body_over_the_limit_is_413_whether_declared_or_streamed(client):
    big = site_body("/v1/extract", "SELECT i.sku FROM items i", ["sku"], [{"name": "sku", "type": "text"}]) + b"\0" * (
        MAX_BODY_BYTES + 1
    )
    r = client.post("/v1/extract", content=big, headers={"Content-Type": frames.MEDIA_TYPE})
    assert r.status_code == 413 and str(MAX_BODY_BYTES) in r.json()["detail"]

    def chunks():  # no Content-Length: sent chunked, counted as it arrives
        for start in range(0, len(big), 8192):
            yield big[start : start + 8192]

    r = client.post("/v1/extract", content=chunks(), headers={"Content-Type": frames.MEDIA_TYPE})
    assert r.status_code == 413 and str(MAX_BODY_BYTES) in r.json()["detail"]
    assert client.get("/v1/schema").status_code == 200  # and the agent carries on


def _abandoned(client: httpx.Client, route: str) -> int:
    """The agent's count of `route`'s requests whose client left before their body was read."""
    r = client.get("/metrics")
    assert r.status_code == 200, r.text
    series = f'{ABANDONED}{{route="{route}"}} '
    return next(int(line.removeprefix(series)) for line in r.text.splitlines() if line.startswith(series))


def test_a_client_gone_before_its_body_is_read_is_ended_quietly_and_counted(agent, client):
    """A warehouse that cancels a sync shuts its call, maybe before the agent read the body:
    the agent ends that request with one line at info, no traceback, and counts it."""
    body = site_body("/v1/extract", "SELECT i.sku FROM items i", ["sku"], [{"name": "sku", "type": "text"}])
    before = _abandoned(client, "/v1/extract")
    logged = agent.log.stat().st_size
    head = (
        f"POST /v1/extract HTTP/1.1\r\nHost: {agent.host}\r\nAuthorization: Bearer {TOKEN}\r\n"
        f"Content-Type: {frames.MEDIA_TYPE}\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    with socket.create_connection((agent.host, agent.port)) as half:
        half.sendall(head.encode() + body[: len(body) // 2])
    deadline = time.monotonic() + 10
    while (now := _abandoned(client, "/v1/extract")) == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert now == before + 1
    time.sleep(0.2)  # let the log line reach the file
    with agent.log.open("rb") as f:
        f.seek(logged)
        log = f.read().decode(errors="replace")
    assert "Traceback" not in log and "ClientDisconnect" not in log, log
    assert log.count("left before the agent read its body") == 1, log
    # the agent carries on: the same request, sent whole, is answered
    r = client.post("/v1/extract", content=body, headers={"Content-Type": frames.MEDIA_TYPE})
    assert r.status_code == 200, r.text
    assert answer_frames(r)[-1].kind == frames.SUMMARY


@pytest.fixture(scope="module")
def big_legacy(tmp_path_factory):
    """A table whose extraction answer (random text: zstd cannot shrink it) far exceeds socket buffers."""
    db = tmp_path_factory.mktemp("big") / "big.db"
    with sqlite3.connect(db) as c:
        c.execute("CREATE TABLE blobs (id INTEGER PRIMARY KEY, payload TEXT)")
        c.executemany("INSERT INTO blobs VALUES (?, ?)", ((i, os.urandom(96).hex()) for i in range(200_000)))
    c.close()
    return db


def test_extractions_beyond_the_cap_get_429_with_retry_after(big_legacy, logs_dir):
    agent = start_agent(f"sqlite:///{big_legacy}", logs_dir, extra=["--max-concurrent-extractions", "1"])
    columns = [{"name": "id", "type": "int"}, {"name": "payload", "type": "text"}]
    body = site_body("/v1/extract", "SELECT b.id, b.payload FROM blobs b", ["id"], columns)
    headers = {"Content-Type": frames.MEDIA_TYPE}
    try:
        with (
            httpx.Client(base_url=agent.url, timeout=60) as slow,
            httpx.Client(base_url=agent.url, timeout=60) as other,
        ):
            # The slow reader takes its answer's first bytes and then stops reading: the agent
            # cannot finish its extraction and keeps its only slot.
            with slow.stream("POST", "/v1/extract", content=body, headers=headers) as held:
                assert held.status_code == 200
                # keep the iterator: a dropped one is closed, and the connection with it
                answer = held.iter_raw(1024)
                next(answer)
                time.sleep(0.5)
                r = other.post("/v1/extract", content=body, headers=headers)
                assert r.status_code == 429, r.text
                assert int(r.headers["retry-after"]) > 0
                assert "retry" in r.json()["detail"]
                assert other.get("/health").status_code == 200  # only extractions are capped
            # The slow reader went away: its slot comes back.
            deadline = time.monotonic() + 30
            while True:
                r = other.post("/v1/extract", content=body, headers=headers)
                if r.status_code == 200 or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            assert r.status_code == 200, (
                f"the slot of an abandoned extraction never came back: {r.status_code} {r.text}"
            )
            assert answer_frames(r)[-1].kind == frames.SUMMARY
    finally:
        agent.stop()
