"""The life of a source: checked at registration, its token rotated, its tables listed, removed.

A source is the address of an agent and its token. Registering one asks the agent for its
schema first, so a wrong URL or token is a 424 that stores nothing; a rotated token is
entered with PATCH and the views over the source keep their rows and history; a source is
removed only once no view reads it. All against real agent processes and the shared service.
"""

from __future__ import annotations

import sqlite3

import pytest

from tests.integration.test_cli import deltasieve, failed, ok
from workloads.harness import start_agent

pytestmark = pytest.mark.integration

OLD_TOKEN, NEW_TOKEN = "src-old-token", "src-new-token"
SOURCE, VIEW = "lifecycle", "lifecycle_items"


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    db = tmp_path_factory.mktemp("sources") / "shop.db"
    with sqlite3.connect(db) as c:
        c.execute("CREATE TABLE items (sku TEXT PRIMARY KEY, name TEXT NOT NULL, stock INTEGER)")
        c.execute("CREATE TABLE notes (body TEXT)")
        c.executemany("INSERT INTO items VALUES (?, ?, ?)", [(f"s{i:03d}", f"item {i}", i % 7) for i in range(120)])
    return db


def test_registration_asks_the_agent_and_stores_nothing_it_refuses(api, shop, logs_dir):
    agent = start_agent(f"sqlite:///{shop}", logs_dir, token=OLD_TOKEN)
    try:
        unreachable = api.http.post("/v1/sources", json={"name": "src_gone", "url": "http://127.0.0.1:9"})
        assert unreachable.status_code == 424, unreachable.text
        assert "src_gone" in unreachable.json()["detail"] and '"check": false' in unreachable.json()["detail"]
        refused = api.http.post("/v1/sources", json={"name": "src_bad", "url": agent.url, "token": "wrong"})
        assert refused.status_code == 424 and "401" in refused.json()["detail"], refused.text
        assert {s["name"] for s in api.http.get("/v1/sources").json()}.isdisjoint({"src_gone", "src_bad"})
        unchecked = api.http.post(
            "/v1/sources", json={"name": "src_later", "url": "http://127.0.0.1:9", "check": False}
        )
        assert unchecked.status_code == 201, unchecked.text
        assert api.http.delete("/v1/sources/src_later").status_code == 204
        assert api.http.get("/v1/sources/src_later").status_code == 404
    finally:
        agent.stop()


def test_tables_token_rotation_and_removal(api, shop, logs_dir, service):
    old = start_agent(f"sqlite:///{shop}", logs_dir, token=OLD_TOKEN)
    new = None
    try:
        api.add_source(SOURCE, old.url, OLD_TOKEN)
        tables = api.http.get(f"/v1/sources/{SOURCE}/tables").json()
        by_name = {t["name"]: t for t in tables["tables"]}
        assert tables["dialect"] == "sqlite" and set(by_name) == {"items", "notes"}
        assert by_name["items"]["primary_key"] == ["sku"] and by_name["notes"]["primary_key"] == []
        assert [(c["name"], c["type"]) for c in by_name["items"]["columns"]] == [
            ("sku", "text"),
            ("name", "text"),
            ("stock", "int"),
        ]
        api.add_view(VIEW, f"SELECT i.sku, i.name, i.stock FROM {SOURCE}.items i WHERE i.stock > 2")
        assert api.sync(VIEW)["status"] == "succeeded"

        # the agent moves and its token is rotated: syncs fail until the source is told
        old.stop()
        new = start_agent(f"sqlite:///{shop}", logs_dir, token=NEW_TOKEN)
        assert api.sync(VIEW)["status"] == "failed"
        wrong = api.http.patch(f"/v1/sources/{SOURCE}", json={"url": new.url, "token": OLD_TOKEN})
        assert wrong.status_code == 424, wrong.text
        assert api.http.get(f"/v1/sources/{SOURCE}").json()["url"] == old.url  # nothing changed
        changed = api.http.patch(f"/v1/sources/{SOURCE}", json={"url": new.url, "token": NEW_TOKEN})
        assert changed.status_code == 200 and changed.json()["has_token"], changed.text
        with sqlite3.connect(shop) as c:
            c.execute("UPDATE items SET stock = 6 WHERE sku = 's000'")
        sync = api.sync(VIEW)
        assert sync["status"] == "succeeded" and sync["metrics"]["rows_inserted"] == 1, sync
        assert len(api.http.get(f"/v1/views/{VIEW}/syncs").json()) == 3  # the history kept

        # removed only once no view reads it
        busy = api.http.delete(f"/v1/sources/{SOURCE}")
        assert busy.status_code == 409 and VIEW in busy.json()["detail"], busy.text
        assert api.http.patch("/v1/sources/nosuch", json={"token": "x"}).status_code == 404
        assert api.http.patch(f"/v1/sources/{SOURCE}", json={"url": "ftp://x"}).status_code == 422

        # the same from the command line
        listed = ok(deltasieve("source", "tables", SOURCE, url=service.url)).stdout
        assert "items" in listed and "sku text" in listed and "notes" in listed
        failed(deltasieve("source", "rm", SOURCE, url=service.url), 1, VIEW)
        ok(deltasieve("source", "set", SOURCE, "--token", NEW_TOKEN, url=service.url))
        failed(deltasieve("source", "set", SOURCE, "--token", "wrong", url=service.url), 1, "401")
        ok(deltasieve("view", "rm", VIEW, url=service.url))
        ok(deltasieve("source", "rm", SOURCE, url=service.url))
        assert api.http.get(f"/v1/sources/{SOURCE}").status_code == 404
    finally:
        for agent in (old, new):
            if agent is not None:
                agent.stop()
