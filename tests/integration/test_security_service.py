"""The service's doors, against one service process started with an API key, a CA bundle
and a short agent read timeout: the API key on every call (scopes: test_api_keys.py), hidden source tokens, the
body size limit, syncs from an agent over HTTPS with a self-signed certificate, and clear
4xx answers when the certificate is not trusted or an agent never answers."""

from __future__ import annotations

import random
import re
import socket
import sqlite3
import ssl

import httpx
import pytest

from service.app import create_app
from service.settings import ServiceSettings
from tests.support.oracle import keyed, normalize, run_rounds
from tests.support.tls import self_signed
from workloads.harness import Api, start_agent, start_service

pytestmark = pytest.mark.integration

API_KEY = "service-key-0c47e2aa19"
AGENT_TOKEN = "tls-agent-token-5e1f"
MUTATING = {"POST", "PUT", "PATCH", "DELETE"}
#: Seconds without a byte from an agent before the secure service gives up (default 600).
READ_TIMEOUT_S = 15
DEFAULT_MAX_BODY_BYTES = ServiceSettings.model_fields["max_body_bytes"].default


class Legacy:
    """A small SQLite legacy database, changed between syncs."""

    def __init__(self, path):
        self.path = path
        self.rng = random.Random(11)
        self.next_id = 0
        with sqlite3.connect(path) as c:
            c.execute("CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT, city TEXT)")
            self._add(c, 300)
        c.close()

    def _add(self, c, n: int) -> None:
        for _ in range(n):
            c.execute(
                "INSERT INTO people VALUES (?, ?, ?)",
                (self.next_id, f"person {self.next_id}", self.rng.choice(["Oslo", "Bergen", None])),
            )
            self.next_id += 1

    def change(self) -> None:
        with sqlite3.connect(self.path) as c:
            ids = [r[0] for r in c.execute("SELECT id FROM people")]
            for i in self.rng.sample(ids, 20):
                c.execute("UPDATE people SET city = ? WHERE id = ?", (self.rng.choice(["Tromsø", "Oslo", None]), i))
            for i in self.rng.sample(ids, 5):
                c.execute("DELETE FROM people WHERE id = ?", (i,))
            self._add(c, 7)
        c.close()

    def truth(self, sql: str, key: list[str], normalizers) -> dict:
        with sqlite3.connect(self.path) as c:
            cur = c.execute(sql)
            rows = keyed(normalize(cur.fetchall(), [d[0] for d in cur.description], normalizers), key)
        c.close()
        return rows


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    root = tmp_path_factory.mktemp("tls")
    # the agent's, one it is not trusted with, and the service's client certificate (mutual TLS)
    return self_signed(root, "agent"), self_signed(root, "impostor"), self_signed(root, "service", ("deltasieve",))


@pytest.fixture(scope="module")
def legacy(tmp_path_factory):
    return Legacy(tmp_path_factory.mktemp("tls-legacy") / "people.db")


@pytest.fixture(scope="module")
def tls_agent(legacy, certs, logs_dir):
    cert = certs[0]
    proc = start_agent(f"sqlite:///{legacy.path}", logs_dir, token=AGENT_TOKEN, tls=(cert.certfile, cert.keyfile))
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def secure(tmp_path_factory, logs_dir, certs):
    """The one service of this module: API key, the agent's certificate as CA bundle."""
    env = {
        "SERVICE_API_KEY": API_KEY,
        "SERVICE_AGENT_CA_BUNDLE": str(certs[0].certfile),
        # presented to an agent that asks for it (--ssl-ca-certs); the others do not look
        "SERVICE_AGENT_CLIENT_CERT": str(certs[2].certfile),
        "SERVICE_AGENT_CLIENT_KEY": str(certs[2].keyfile),
        "SERVICE_AGENT_READ_TIMEOUT_S": str(READ_TIMEOUT_S),
        "SERVICE_AGENT_RETRIES": "0",
    }
    proc = start_service(tmp_path_factory.mktemp("secure-warehouse"), logs_dir, env=env)
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def keyed_api(secure):
    client = Api(secure.url, headers={"X-API-Key": API_KEY})
    yield client
    client.close()


def operations(tmp_path) -> list[tuple[str, str]]:
    """(method, path with its parameters filled in) of every operation of the service's app.

    Read from the app's OpenAPI document, which FastAPI builds from its routes: an
    operation added later is covered without touching this test.
    """
    app = create_app(ServiceSettings(data_dir=tmp_path), start_spark=False)
    return [
        (method.upper(), re.sub(r"\{[^}]+\}", "nope", path))
        for path, item in app.openapi()["paths"].items()
        for method in item
    ]


# --- the API key ---------------------------------------------------------------------------


def test_every_mutating_endpoint_needs_the_api_key(secure, tmp_path):
    ops = operations(tmp_path)
    mutating = [(m, p) for m, p in ops if m in MUTATING]
    assert ("POST", "/v1/sources") in mutating and ("POST", "/v1/views/nope/syncs") in mutating
    wrong = [
        {},
        {"X-API-Key": "nope"},
        {"X-API-Key": API_KEY[:-1]},
        {"Authorization": "Bearer nope"},
        {"Authorization": f"Basic {API_KEY}"},
        {"Authorization": API_KEY},
    ]
    for method, path in mutating:
        for headers in wrong:
            for body in (b"{}", b"{not json"):  # the key is checked before the body is read
                r = httpx.request(
                    method, secure.url + path, headers={**headers, "Content-Type": "application/json"}, content=body
                )
                assert r.status_code == 401, (method, path, headers, body, r.status_code, r.text)
                assert "API key" in r.json()["detail"] and API_KEY not in r.text
        for headers in ({"X-API-Key": API_KEY}, {"Authorization": f"Bearer {API_KEY}"}):
            r = httpx.request(method, secure.url + path, headers=headers, json={})
            assert r.status_code != 401 and r.status_code < 500, (method, path, headers, r.text)
    for method, path in ops:
        if method not in MUTATING and path not in ("/health", "/ui"):  # reading needs the key too
            r = httpx.request(method, secure.url + path)
            assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer", (method, path, r.status_code)


def test_the_right_key_works_as_x_api_key_or_bearer(secure, tls_agent):
    for name, headers in (("by_header", {"X-API-Key": API_KEY}), ("by_bearer", {"Authorization": f"Bearer {API_KEY}"})):
        body = {"name": name, "url": tls_agent.url, "check": False}  # the key is what is tested, not the agent
        r = httpx.post(f"{secure.url}/v1/sources", json=body, headers=headers)
        assert r.status_code == 201, r.text
    assert httpx.post(f"{secure.url}/v1/sources", json={"name": "keyless", "url": tls_agent.url}).status_code == 401
    names = {s["name"] for s in httpx.get(f"{secure.url}/v1/sources", headers={"X-API-Key": API_KEY}).json()}
    assert {"by_header", "by_bearer"} <= names and "keyless" not in names


def test_source_tokens_are_never_shown(keyed_api, tls_agent, secure):
    created = keyed_api.add_source("tls", tls_agent.url, AGENT_TOKEN)
    assert created["has_token"] is True and AGENT_TOKEN not in str(created)
    listed = keyed_api.http.get("/v1/sources")
    one = keyed_api.http.get("/v1/sources/tls")
    for r in (listed, one):
        assert r.status_code == 200 and AGENT_TOKEN not in r.text
    assert one.json()["has_token"] is True
    assert [s["has_token"] for s in listed.json() if s["name"] == "by_header"] == [False]
    assert AGENT_TOKEN not in secure.log.read_text(errors="replace") and API_KEY not in secure.log.read_text(
        errors="replace"
    )


# --- TLS -----------------------------------------------------------------------------------


def test_syncs_over_https_with_a_trusted_self_signed_certificate_are_exact(keyed_api, tls_agent, legacy):
    assert tls_agent.url.startswith("https://")
    views = {
        "tls_people": ("SELECT p.id, p.name, p.city FROM tls.people p", "SELECT id, name, city FROM people", ["id"], {})
    }
    last = run_rounds(keyed_api, legacy, views, rounds=1)
    assert last["tls_people"]["metrics"]["bytes_from_agent"] > 0


def test_a_service_that_does_not_trust_the_certificate_says_so(api, tls_agent):
    """The shared service has no CA bundle: the self-signed certificate is refused, clearly."""
    checked = api.http.post("/v1/sources", json={"name": "tls_untrusted", "url": tls_agent.url, "token": AGENT_TOKEN})
    assert checked.status_code == 424, checked.text
    assert "certificate" in checked.json()["detail"] and "SERVICE_AGENT_CA_BUNDLE" in checked.json()["detail"]
    api.add_source("tls_untrusted", tls_agent.url, AGENT_TOKEN, check=False)
    r = api.http.post("/v1/views", json={"name": "tls_untrusted_v", "sql": "SELECT p.id FROM tls_untrusted.people p"})
    assert r.status_code == 424, r.text
    detail = r.json()["detail"]
    assert "certificate" in detail and "SERVICE_AGENT_CA_BUNDLE" in detail, detail


def test_a_certificate_changed_to_an_untrusted_one_fails_the_sync_clearly(
    keyed_api, tls_agent, legacy, certs, logs_dir
):
    """The agent comes back with a certificate the service was not told to trust."""
    port = tls_agent.port
    tls_agent.stop()
    impostor = certs[1]
    swapped = start_agent(
        f"sqlite:///{legacy.path}", logs_dir, token=AGENT_TOKEN, port=port, tls=(impostor.certfile, impostor.keyfile)
    )
    try:
        r = keyed_api.http.post("/v1/views/tls_people/syncs", params={"wait": "true"})
        assert r.status_code == 200, r.text
        sync = r.json()
        assert sync["status"] == "failed"
        assert "certificate" in sync["error"] and "SERVICE_AGENT_CA_BUNDLE" in sync["error"], sync["error"]
    finally:
        swapped.stop()


def test_an_agent_that_requires_client_certificates_takes_only_the_service_s(keyed_api, legacy, certs, logs_dir):
    """Mutual TLS: the agent's --ssl-ca-certs is the service's client certificate (its own CA)."""
    agent, impostor, client = certs
    mutual = start_agent(
        f"sqlite:///{legacy.path}",
        logs_dir,
        token=AGENT_TOKEN,
        tls=(agent.certfile, agent.keyfile),
        mutual=(client.certfile, client.keyfile),
    )
    try:
        for presented in (None, (str(impostor.certfile), str(impostor.keyfile))):
            context = ssl.create_default_context(cafile=str(agent.certfile))
            if presented is not None:
                context.load_cert_chain(*presented)
            with pytest.raises(httpx.TransportError):  # the handshake, or the first read after it, fails
                httpx.get(f"{mutual.url}/health", verify=context, timeout=10).raise_for_status()
        keyed_api.add_source("mtls", mutual.url, AGENT_TOKEN)  # checked: the agent answered the service
        keyed_api.add_view("mtls_people", "SELECT p.id, p.name FROM mtls.people p", destinations=[])
        sync = keyed_api.sync("mtls_people")
        assert sync["status"] == "succeeded", sync
        with sqlite3.connect(legacy.path) as c:
            expected = c.execute("SELECT count(*) FROM people").fetchone()[0]
        assert len(keyed_api.rows("mtls_people")) == expected > 0
    finally:
        mutual.stop()


# --- limits --------------------------------------------------------------------------------


def test_a_body_over_the_limit_is_413_whether_declared_or_streamed(keyed_api):
    big = b'{"name": "big", "url": "http://x", "token": "' + b"a" * DEFAULT_MAX_BODY_BYTES + b'"}'
    r = keyed_api.http.post("/v1/sources", content=big, headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and "SERVICE_MAX_BODY_BYTES" in r.json()["detail"]

    def chunks():  # no Content-Length: sent chunked, counted as it arrives
        for start in range(0, len(big), 65536):
            yield big[start : start + 65536]

    r = keyed_api.http.post("/v1/sources", content=chunks(), headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and "SERVICE_MAX_BODY_BYTES" in r.json()["detail"]
    # A body just under the limit is read (and judged on its content).
    r = keyed_api.http.post("/v1/views", json={"name": "long", "sql": "x" * 200_000})
    assert r.status_code == 422
    assert keyed_api.http.get("/v1/sources/big").status_code == 404


def test_an_agent_that_never_answers_fails_view_creation_with_a_timeout(keyed_api):
    """Outbound calls have timeouts: a host that accepts connections but never answers."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        keyed_api.add_source("silent", f"http://127.0.0.1:{silent.getsockname()[1]}", check=False)
        r = keyed_api.http.post("/v1/views", json={"name": "silent_v", "sql": "SELECT s.id FROM silent.t s"})
    assert r.status_code == 424, r.text
    assert "timed out" in r.json()["detail"]
