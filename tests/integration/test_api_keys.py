"""API keys and their scopes, against one service process started with SERVICE_API_KEY (the
admin key) and keys made through POST /v1/keys: every route of the app × every kind of
caller, read from the app's routing table so that a route added later is covered; keys
listed without the key, revoked keys refused, limited keys' lists, and the CLI's commands.
"""

from __future__ import annotations

import json
import re
import sqlite3

import httpx
import pytest

from service.app import create_app
from service.keys import digest
from service.settings import ServiceSettings
from tests.integration.test_cli import deltasieve, failed, ok
from workloads.harness import Api, start_agent, start_service

pytestmark = pytest.mark.integration

ADMIN_KEY = "keys-admin-4d1c9e"
AGENT_TOKEN = "keys-agent-77a0"
SOURCE, VIEW, OTHER = "keysrc", "keys_people", "keys_other"
#: Callers of the matrix, in the order of its columns; each a key made by the fixture (or none).
CALLERS = ("none", "wrong", "read", "sync", "admin", "read@other")
#: The least scope each caller has (none and wrong have none).
RANK = {"read": 1, "sync": 2, "admin": 3, "read@other": 1}
MUTATING = {"POST", "PUT", "PATCH", "DELETE"}


@pytest.fixture(scope="module")
def keyed(tmp_path_factory, logs_dir):
    """The module's service (SERVICE_API_KEY set), an agent, a source, two views and two syncs."""
    db = tmp_path_factory.mktemp("keys-legacy") / "people.db"
    with sqlite3.connect(db) as c:
        c.execute("CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT, city TEXT)")
        c.executemany("INSERT INTO people VALUES (?, ?, ?)", [(i, f"p{i}", "Oslo") for i in range(50)])
    c.close()
    agent = start_agent(f"sqlite:///{db}", logs_dir, token=AGENT_TOKEN)
    data_dir = tmp_path_factory.mktemp("keys-warehouse")
    audit_file = tmp_path_factory.mktemp("keys-audit") / "audit.jsonl"
    proc = start_service(data_dir, logs_dir, env={"SERVICE_API_KEY": ADMIN_KEY, "SERVICE_AUDIT_FILE": str(audit_file)})
    admin = Api(proc.url, headers={"X-API-Key": ADMIN_KEY})
    admin.add_source(SOURCE, agent.url, AGENT_TOKEN)
    admin.add_view(VIEW, f"SELECT p.id, p.name, p.city FROM {SOURCE}.people p", sample_size=10)
    admin.add_view(OTHER, f"SELECT p.id, p.city FROM {SOURCE}.people p WHERE p.id < 10")
    admin.sync(VIEW)
    with sqlite3.connect(db) as c:
        c.execute("UPDATE people SET city = 'Bergen' WHERE id < 5")
    c.close()
    second = admin.sync(VIEW)
    keys = {"none": None, "wrong": "dsk_" + "x" * 43, "admin": ADMIN_KEY}
    for caller, body in (
        ("read", {"name": "k_read", "scope": "read"}),
        ("sync", {"name": "k_sync", "scope": "sync"}),
        ("read@other", {"name": "k_other", "scope": "read", "views": [OTHER]}),
    ):
        r = admin.http.post("/v1/keys", json=body)
        assert r.status_code == 201, r.text
        keys[caller] = r.json()["key"]
    yield {
        "proc": proc,
        "admin": admin,
        "keys": keys,
        "sync_id": second["id"],
        "data_dir": data_dir,
        "audit_file": audit_file,
    }
    admin.close()
    proc.stop()
    agent.stop()


def routes(tmp_path) -> list[tuple[str, str]]:
    """(method, path template) of every operation of the app, from its OpenAPI document."""
    app = create_app(ServiceSettings(data_dir=tmp_path), start_spark=False)
    return [(method.upper(), path) for path, item in app.openapi()["paths"].items() for method in item]


def expected(method: str, template: str, caller: str) -> str:
    """What a caller should get: "401", "403", or "ok" (neither; 2xx for a GET).

    Written out here from the contract rather than taken from service/auth.py, so that the
    test can disagree with it.
    """
    if template in ("/health", "/ui"):
        return "ok"
    if caller in ("none", "wrong"):
        return "401"
    if template.startswith(("/v1/keys", "/v1/audit")):
        need = 3
    elif method not in MUTATING:
        need = 1
    elif template.startswith("/v1/views/{name}/syncs") and method in ("POST", "DELETE"):
        need = 2
    elif (method, template) == ("DELETE", "/v1/syncs"):  # the queued syncs cancelled together
        need = 2
    else:
        need = 3
    if RANK[caller] < need:
        return "403"
    if caller == "read@other":
        # limited to OTHER: the matrix's view and source are outside; only the lists and the
        # API's description are open to it among the routes without a name
        if template.startswith(("/v1/views/{name}", "/v1/sources/{name}")):
            return "403"
        if (method, template) not in {("GET", "/v1/views"), ("GET", "/v1/sources")}:
            return "403"
    return "ok"


def filled(method: str, template: str, sync_id: str) -> str:
    """The path with its parameters: the fixture's view, source and sync for a read; names
    that do not exist for a change, so that an allowed one changes nothing (404 or 422)."""
    real = method not in MUTATING
    name = (VIEW if template.startswith("/v1/views") else SOURCE) if real else "nope"
    path = template.replace("{name}", name).replace("{sync_id}", sync_id if real else "nope")
    return re.sub(r"\{[^}]+\}", "nope", path)


def headers_of(key: str | None, bearer: bool) -> dict:
    if key is None:
        return {}
    return {"Authorization": f"Bearer {key}"} if bearer else {"X-API-Key": key}


def test_every_route_for_every_caller(keyed, tmp_path):
    url, keys = keyed["proc"].url, keyed["keys"]
    table, wrong = [], []
    ops = routes(tmp_path)
    assert ("POST", "/v1/keys") in ops and ("GET", "/v1/views/{name}/rows") in ops, "the routing table is not read"
    for n, (method, template) in enumerate(sorted(ops, key=lambda op: (op[1], op[0]))):
        path = filled(method, template, keyed["sync_id"])
        cells = []
        for caller in CALLERS:
            # alternate how the key is sent: both ways are accepted everywhere
            r = httpx.request(
                method, url + path, headers=headers_of(keys[caller], bearer=(n % 2 == 1)), json={}, timeout=120
            )
            want = expected(method, template, caller)
            got = r.status_code
            cells.append(str(got))
            good = (
                got == int(want)
                if want != "ok"
                else got not in (401, 403) and got < 500 and (method in MUTATING or 200 <= got < 300)
            )
            if want == "401":
                good = good and r.headers.get("www-authenticate") == "Bearer"
            if want in ("401", "403"):
                good = good and "detail" in r.json() and not any(k and k in r.text for k in keys.values())
            if not good:
                wrong.append(f"{method} {path} as {caller}: {got} (expected {want}) {r.text[:200]}")
        table.append(f"{method:6} {template:45} " + " ".join(f"{c:>10}" for c in cells))
    text = "\n".join([f"{'':6} {'route':45} " + " ".join(f"{c:>10}" for c in CALLERS), *table])
    (tmp_path / "route_scope_table.txt").write_text(text + "\n")
    print(f"\nroute × caller (status; written to {tmp_path / 'route_scope_table.txt'}):\n{text}")
    assert not wrong, "\n".join(wrong)


def test_keys_are_listed_without_the_key_and_stored_only_as_digests(keyed):
    admin, keys = keyed["admin"], keyed["keys"]
    listed = admin.http.get("/v1/keys")
    assert listed.status_code == 200
    scopes = {k["name"]: k["scope"] for k in listed.json()}
    assert {"k_read": "read", "k_sync": "sync", "k_other": "read"}.items() <= scopes.items()
    assert [k["views"] for k in listed.json() if k["name"] == "k_other"] == [[OTHER]]
    for key in (keys["read"], keys["sync"], keys["read@other"]):
        assert key not in listed.text and digest(key) not in listed.text
    catalog = sqlite3.connect(keyed["data_dir"] / "catalog.db")
    stored = {row[0]: row[1] for row in catalog.execute("SELECT name, digest FROM api_keys")}
    catalog.close()
    assert stored["k_read"] == digest(keys["read"])
    files = b"".join(p.read_bytes() for p in keyed["data_dir"].glob("catalog.db*"))
    assert keys["read"].encode() not in files and ADMIN_KEY.encode() not in files
    assert keyed["proc"].log.read_text(errors="replace").count(keys["read"]) == 0
    # SERVICE_API_KEY's name is taken; a name twice is a conflict
    assert admin.http.post("/v1/keys", json={"name": "admin", "scope": "read"}).status_code == 409
    assert admin.http.post("/v1/keys", json={"name": "k_read", "scope": "read"}).status_code == 409
    assert admin.http.post("/v1/keys", json={"name": "x", "scope": "root"}).status_code == 422


def test_a_revoked_key_is_refused(keyed):
    admin, url = keyed["admin"], keyed["proc"].url
    made = admin.http.post("/v1/keys", json={"name": "short_lived", "scope": "sync"}).json()
    assert httpx.get(f"{url}/v1/views", headers={"X-API-Key": made["key"]}).status_code == 200
    assert admin.http.delete("/v1/keys/short_lived").status_code == 204
    r = httpx.get(f"{url}/v1/views", headers={"X-API-Key": made["key"]})
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert admin.http.delete("/v1/keys/short_lived").status_code == 404
    assert "short_lived" not in {k["name"] for k in admin.http.get("/v1/keys").json()}


def test_a_limited_key_sees_only_its_views_and_sources(keyed):
    admin, url, keys = keyed["admin"], keyed["proc"].url, keyed["keys"]
    other = {"X-API-Key": keys["read@other"]}
    assert [v["name"] for v in httpx.get(f"{url}/v1/views", headers=other).json()] == [OTHER]
    assert httpx.get(f"{url}/v1/sources", headers=other).json() == []
    assert httpx.get(f"{url}/v1/views/{OTHER}", headers=other).status_code == 200
    assert httpx.get(f"{url}/v1/views/{VIEW}/rows", headers=other).status_code == 403
    # a key limited to a source reaches it and every view reading only it
    by_source = admin.http.post("/v1/keys", json={"name": "k_src", "scope": "read", "sources": [SOURCE]}).json()
    mine = {"X-API-Key": by_source["key"]}
    assert {v["name"] for v in httpx.get(f"{url}/v1/views", headers=mine).json()} == {VIEW, OTHER}
    assert [s["name"] for s in httpx.get(f"{url}/v1/sources", headers=mine).json()] == [SOURCE]
    assert httpx.get(f"{url}/v1/sources/{SOURCE}/tables", headers=mine).status_code == 200
    assert httpx.get(f"{url}/v1/sources/elsewhere", headers=mine).status_code == 403
    # an unknown view is 403 to a limited key, not 404: it learns nothing of views it may not see
    assert httpx.get(f"{url}/v1/views/unknown_v", headers=mine).status_code == 403
    assert httpx.get(f"{url}/v1/views/unknown_v", headers={"X-API-Key": keys["read"]}).status_code == 404


def test_the_cli_makes_lists_and_revokes_keys(keyed):
    url = keyed["proc"].url
    admin_env = {"DELTASIEVE_API_KEY": ADMIN_KEY}
    made = json.loads(
        ok(
            deltasieve("key", "add", "cli_k", "--scope", "sync", "--view", VIEW, "--json", url=url, env=admin_env)
        ).stdout
    )
    assert made["scope"] == "sync" and made["views"] == [VIEW] and made["key"].startswith("dsk_")
    human = ok(deltasieve("key", "add", "cli_h", url=url, env=admin_env))
    assert re.search(r"^dsk_\S+$", human.stdout, re.M) and "shown this once" in human.stderr
    listed = ok(deltasieve("key", "list", url=url, env=admin_env)).stdout
    assert "cli_k" in listed and "cli_h" in listed and made["key"] not in listed
    as_json = json.loads(ok(deltasieve("key", "list", "--json", url=url, env=admin_env)).stdout)
    assert {"cli_k", "cli_h"} <= {k["name"] for k in as_json} and all("key" not in k for k in as_json)
    # the new key works for what it may do, and not beyond
    mine = {"DELTASIEVE_API_KEY": made["key"]}
    assert [v["name"] for v in json.loads(ok(deltasieve("view", "list", "--json", url=url, env=mine)).stdout)] == [VIEW]
    failed(deltasieve("key", "list", url=url, env=mine), 1, "403")
    ok(deltasieve("key", "revoke", "cli_k", url=url, env=admin_env))
    failed(deltasieve("view", "list", url=url, env=mine), 1, "401")
    failed(deltasieve("key", "list", url=url), 1, "401", "DELTASIEVE_API_KEY")


def test_the_audit_log_names_who_read_and_changed_what(keyed):
    admin, url, keys = keyed["admin"], keyed["proc"].url, keyed["keys"]
    rows = httpx.get(f"{url}/v1/views/{VIEW}/rows", headers={"X-API-Key": keys["read"]})
    assert rows.status_code == 200
    refused = httpx.post(f"{url}/v1/views/{VIEW}/syncs", headers={"X-API-Key": keys["read"]})
    assert refused.status_code == 403
    httpx.get(f"{url}/v1/views/{VIEW}", headers={"X-API-Key": keys["read"]})  # a description: not data, not logged
    newest = admin.http.get("/v1/audit", params={"limit": 2}).json()
    assert [(e["key_name"], e["method"], e["route"], e["view"], e["status"]) for e in newest] == [
        ("k_read", "POST", f"/v1/views/{VIEW}/syncs", VIEW, 403),
        ("k_read", "GET", f"/v1/views/{VIEW}/rows", VIEW, 200),
    ]
    assert newest[1]["rows"] == len(rows.text.splitlines()) == 50
    everything = admin.http.get("/v1/audit", params={"limit": 10_000})
    assert any(e["route"] == "/v1/keys" and e["key_name"] == "admin" and e["status"] == 201 for e in everything.json())
    assert not any(k in everything.text for k in keys.values() if k)
    # the same entries, as JSON lines in SERVICE_AUDIT_FILE
    lines = [json.loads(line) for line in keyed["audit_file"].read_text().splitlines()]
    assert lines[-2:] == newest[::-1]
    assert not any(k in keyed["audit_file"].read_text() for k in keys.values() if k)
    # only an admin key reads it
    assert httpx.get(f"{url}/v1/audit", headers={"X-API-Key": keys["sync"]}).status_code == 403
    shown = json.loads(
        ok(deltasieve("audit", "--limit", "1", "--json", url=url, env={"DELTASIEVE_API_KEY": ADMIN_KEY})).stdout
    )
    assert shown == newest[:1]  # reading the log is neither a change nor a read of data: not logged


def test_the_dashboard_asks_for_a_key_and_keeps_it_in_the_session(keyed, tmp_path):
    """In a real Chromium: the page loads without a key, shows the key form on the 401, lists the
    views once a key is given, and keeps the key in sessionStorage only (never localStorage)."""
    from selenium.webdriver.common.by import By

    from tests.integration.test_dashboard import wait_for
    from workloads.browser import start_chromium

    driver = start_chromium(tmp_path / "chromium-profile")
    try:
        driver.get(f"{keyed['proc'].url}/ui")
        form = wait_for("the key form", lambda: driver.find_element(By.ID, "key-form").is_displayed())
        assert form and not driver.find_elements(By.CSS_SELECTOR, "#views tr[data-view]")
        driver.find_element(By.ID, "api-key").send_keys(keyed["keys"]["read"])
        driver.find_element(By.ID, "key-retry").click()
        rows = wait_for("the views", lambda: driver.find_elements(By.CSS_SELECTOR, "#views tr[data-view]"))
        assert VIEW in {r.get_attribute("data-view") for r in rows}
        assert driver.execute_script("return sessionStorage.getItem('deltasieve-api-key')") == keyed["keys"]["read"]
        assert driver.execute_script("return Object.keys(localStorage).length") == 0
    finally:
        driver.quit()
