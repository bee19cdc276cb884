"""The service API's answers to right and wrong requests, against real processes."""

from __future__ import annotations

import sqlite3
import time

import httpx
import pytest

from tests.support.oracle import CONTRACT_METRICS
from workloads.harness import free_port, start_agent

pytestmark = pytest.mark.integration

TOKEN = "s3cr3t-shop-token"


@pytest.fixture(scope="module")
def shop(tmp_path_factory, logs_dir):
    db = tmp_path_factory.mktemp("shop") / "shop.db"
    with sqlite3.connect(db) as c:
        c.execute("CREATE TABLE items (sku TEXT PRIMARY KEY, name TEXT, price DECIMAL(8,2), stock INTEGER)")
        c.execute("CREATE TABLE nokey (a INTEGER, b TEXT)")
        c.executemany(
            "INSERT INTO items VALUES (?, ?, ?, ?)",
            [(f"sku-{i:06d}", f"item {i}", i * 1.25, i % 17) for i in range(30_000)],
        )
    agent = start_agent(f"sqlite:///{db}", logs_dir, token=TOKEN)
    yield db, agent
    agent.stop()


def test_sources_register_once_and_hide_their_token(api, shop):
    _, agent = shop
    r = api.http.post("/v1/sources", json={"name": "shop", "url": agent.url, "token": TOKEN})
    assert r.status_code == 201 and r.json()["has_token"] is True
    assert TOKEN not in r.text
    assert api.http.post("/v1/sources", json={"name": "shop", "url": agent.url}).status_code == 409
    listed = api.http.get("/v1/sources")
    assert listed.status_code == 200 and TOKEN not in listed.text
    assert api.http.get("/v1/sources/shop").json()["url"] == agent.url
    assert api.http.get("/v1/sources/nope").status_code == 404
    for bad in (
        {"name": "bad name", "url": agent.url},
        {"name": "x", "url": "ftp://host"},
        {"name": "x"},
        {"name": "x", "url": agent.url, "extra": 1},
    ):
        r = api.http.post("/v1/sources", json=bad)
        assert r.status_code == 422, bad
        assert r.json()["detail"]
    assert (
        api.http.post("/v1/sources", content=b"{not json", headers={"content-type": "application/json"}).status_code
        == 422
    )


@pytest.mark.parametrize(
    "sql, words",
    [
        ("SELECT i.sku, count(*) FROM shop.items i GROUP BY i.sku", ["not supported"]),
        ("SELECT i.name FROM shop.items i", ["key", "sku"]),
        (
            "SELECT i.sku, j.sku AS jsku FROM shop.items i FULL OUTER JOIN shop.items j ON i.sku = j.sku",
            ["FULL OUTER JOIN is not supported"],
        ),
        ("SELECT DISTINCT i.sku FROM shop.items i", ["DISTINCT"]),
        ("SELECT i.sku FROM shop.items i LIMIT 5", ["LIMIT"]),
        ("SELECT i.sku FROM shop.missing i", ["missing", "items"]),
        ("SELECT i.sku, i.colour FROM shop.items i", ["colour"]),
        ("SELECT i.sku FROM other.items i", ["other", "not registered"]),
        ("DELETE FROM shop.items", ["SELECT"]),
        ("SELECT i.sku FROM shop.items i WHERE i.sku IN (SELECT sku FROM shop.items)", ["subquer"]),
        ("SELEC nonsense", []),
    ],
)
def test_views_the_service_cannot_maintain_get_a_422_that_says_why(api, shop, sql, words):
    r = api.http.post("/v1/views", json={"name": "bad_view", "sql": sql})
    assert r.status_code == 422, r.text
    detail = str(r.json()["detail"])
    for word in words:
        assert word.lower() in detail.lower(), detail
    assert api.http.get("/v1/views/bad_view").status_code == 404


def test_view_lifecycle_and_errors(api, shop):
    r = api.http.post(
        "/v1/views",
        json={"name": "items_v", "sql": "SELECT i.sku AS code, i.price, i.stock FROM shop.items i WHERE i.stock > 2"},
    )
    assert r.status_code == 201, r.text
    view = r.json()
    assert view["columns"] == ["code", "price", "stock"] and view["key"] == ["code"]
    assert view["sites"][0]["source"] == "shop" and view["sites"][0]["sql"].startswith("SELECT")
    # a new view that names no strategy gets auto; one that names a strategy keeps it
    assert view["strategy"] == "auto"
    assert api.http.get("/v1/views/items_v").json()["strategy"] == "auto"
    assert api.add_view("items_gh", "SELECT i.sku FROM shop.items i", strategy="group_hash")["strategy"] == "group_hash"
    assert api.http.get("/v1/views/items_gh").json()["strategy"] == "group_hash"
    assert (
        api.http.post("/v1/views", json={"name": "items_v", "sql": "SELECT i.sku FROM shop.items i"}).status_code == 409
    )
    assert api.http.get("/v1/views/items_v/rows").status_code == 409  # not loaded yet
    assert api.http.get("/v1/views/nope").status_code == 404
    assert api.http.post("/v1/views/nope/syncs").status_code == 404

    first = api.http.post("/v1/views/items_v/syncs")
    assert first.status_code == 202 and first.json()["status"] == "queued"
    second = api.http.post("/v1/views/items_v/syncs")
    assert second.status_code == 409, "a second sync of a busy view must be refused"
    sync_id = first.json()["id"]
    deadline = time.monotonic() + 300
    while True:
        record = api.http.get(f"/v1/views/items_v/syncs/{sync_id}").json()
        if record["status"] in ("succeeded", "failed") or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert record["status"] == "succeeded", record["error"]
    for metric in CONTRACT_METRICS:
        assert metric in record["metrics"], metric
    assert record["metrics"]["strategy"] == "auto"  # the first sync loads the view, whatever the strategy
    rows = api.rows("items_v")
    assert len(rows) == record["metrics"]["rows_inserted"] == sum(1 for i in range(30_000) if i % 17 > 2)
    assert rows[0].keys() == {"code", "price", "stock"} and isinstance(rows[0]["price"], str)
    assert api.http.get(f"/v1/views/items_v/syncs/{'0' * 32}").status_code == 404
    assert api.http.get(f"/v1/views/items_v/syncs/{'0' * 32}/delta").status_code == 404
    listed = api.http.get("/v1/views/items_v/syncs").json()
    assert listed[0]["id"] == sync_id
    stats = api.http.get("/v1/views/items_v/statistics").json()
    assert stats["sites"][0]["update_statistics"]["tuples"] == len(rows)


def test_unreachable_or_refusing_agent_is_a_4xx_at_view_creation(api, shop):
    _, agent = shop
    api.add_source("down", f"http://127.0.0.1:{free_port()}", check=False)  # stored as it is, then found down
    r = api.http.post("/v1/views", json={"name": "down_v", "sql": "SELECT i.sku FROM down.items i"})
    assert r.status_code == 424 and "down" in r.json()["detail"]
    api.add_source("wrongtok", agent.url, "not-the-token", check=False)
    r = api.http.post("/v1/views", json={"name": "wt_v", "sql": "SELECT i.sku FROM wrongtok.items i"})
    assert r.status_code == 424 and "401" in r.json()["detail"]
    assert "not-the-token" not in r.text


def test_agent_refuses_calls_without_its_token(shop):
    _, agent = shop
    assert httpx.get(f"{agent.url}/health").status_code == 200
    assert httpx.get(f"{agent.url}/v1/schema").status_code == 401
    assert httpx.get(f"{agent.url}/v1/schema", headers={"Authorization": "Bearer nope"}).status_code == 401
    assert httpx.get(f"{agent.url}/v1/schema", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    assert httpx.post(f"{agent.url}/v1/extract", content=b"garbage").status_code == 401
    r = httpx.post(f"{agent.url}/v1/extract", content=b"garbage", headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 400 and "detail" in r.json()


def test_a_failed_sync_leaves_the_view_untouched(api, tmp_path, logs_dir):
    db = tmp_path / "fragile.db"
    with sqlite3.connect(db) as c:
        c.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
        c.executemany("INSERT INTO t VALUES (?, ?)", [(i, f"v{i}") for i in range(100)])
    agent = start_agent(f"sqlite:///{db}", logs_dir)
    try:
        api.add_source("fragile", agent.url)
        api.add_view("fragile_v", "SELECT t.id, t.v FROM fragile.t t")
        assert api.sync("fragile_v")["status"] == "succeeded"
        before = api.rows("fragile_v")
        with sqlite3.connect(db) as c:  # the legacy schema changes under the view
            c.execute("ALTER TABLE t RENAME COLUMN v TO w")
            c.execute("UPDATE t SET w = 'changed'")
        failed = api.sync("fragile_v")
        assert failed["status"] == "failed" and failed["error"]
        assert "v" in failed["error"]
        assert api.rows("fragile_v") == before
        assert api.http.get(f"/v1/views/fragile_v/syncs/{failed['id']}/delta").status_code == 409
    finally:
        agent.stop()
