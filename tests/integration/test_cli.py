"""The `deltasieve` command, run as a real process (`python -m deltasieve_cli`) against the
session's service and a real agent on a small SQLite database.

One source, one view and its syncs are shared by the module's tests (module fixtures), so
the module stays short: each test reads what the fixtures made, or adds a sync of its own.
"""

from __future__ import annotations

import contextlib
import csv
import http.server
import io
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from decimal import Decimal
from pathlib import Path

import httpx
import pyarrow.parquet as pq
import pytest
import yaml

from workloads.harness import free_port, start_agent

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "cli-shop-token"
SOURCE, VIEW = "cli_shop", "cli_items"
VIEW_SQL = f"SELECT i.sku, i.name, i.price, i.stock, i.added FROM {SOURCE}.items i WHERE i.stock > 2"
ITEMS = 300


def deltasieve(
    *args: str, url: str | None, env: dict | None = None, timeout: float = 180
) -> subprocess.CompletedProcess:
    """The command as a user runs it: a process of its own, the service's URL in DELTASIEVE_URL."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("DELTASIEVE_")}
    full_env["COLUMNS"] = "250"  # rich wraps tables to the terminal's width; no terminal here
    if url is not None:
        full_env["DELTASIEVE_URL"] = url
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "deltasieve_cli", *args],
        cwd=ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def started(*args: str, url: str, env: dict | None = None) -> subprocess.Popen:
    """The command as a process that runs on while the test acts (`watch`, `changes --follow`)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("DELTASIEVE_")}
    return subprocess.Popen(
        [sys.executable, "-m", "deltasieve_cli", "--url", url, *args],
        cwd=ROOT,
        env={**full_env, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def ok(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert result.returncode == 0, f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert "Traceback" not in result.stderr
    return result


def failed(result: subprocess.CompletedProcess, code: int, *words: str) -> str:
    """Assert the exit status and that stderr says each of `words`, with no traceback."""
    assert result.returncode == code, f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert "Traceback" not in result.stderr, result.stderr
    for word in words:
        assert word.lower() in result.stderr.lower(), result.stderr
    return result.stderr


def ndjson(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def run(service):
    return lambda *args, **kw: deltasieve(*args, url=service.url, **kw)


@pytest.fixture(scope="module")
def shop(tmp_path_factory, logs_dir):
    db = tmp_path_factory.mktemp("cli_shop") / "shop.db"
    with sqlite3.connect(db) as c:
        c.execute("CREATE TABLE items (sku TEXT PRIMARY KEY, name TEXT, price DECIMAL(8,2), stock INTEGER, added DATE)")
        c.executemany(
            "INSERT INTO items VALUES (?, ?, ?, ?, ?)",
            [(f"sku-{i:04d}", f"item {i}", i * 1.25, i % 17, f"2025-01-{i % 28 + 1:02d}") for i in range(ITEMS)],
        )
    agent = start_agent(f"sqlite:///{db}", logs_dir, token=TOKEN)
    yield db, agent
    agent.stop()


@pytest.fixture(scope="module")
def registered(run, shop):
    """The source, registered through the command."""
    _, agent = shop
    return json.loads(ok(run("source", "add", SOURCE, agent.url, "--token", TOKEN, "--json")).stdout)


@pytest.fixture(scope="module")
def view(run, registered):
    """The view, defined through the command."""
    return json.loads(ok(run("--json", "view", "add", VIEW, VIEW_SQL, "--strategy", "group_hash")).stdout)


@pytest.fixture(scope="module")
def synced(run, view, shop):
    """The load (human output), then a sync in verify mode (--json) after changes at the source."""
    db, _ = shop
    load = ok(run("sync", VIEW))
    with sqlite3.connect(db) as c:
        c.execute("UPDATE items SET price = price + 1 WHERE sku IN ('sku-0003', 'sku-0004', 'sku-0005')")
        c.execute("DELETE FROM items WHERE sku IN ('sku-0006', 'sku-0007')")
        c.executemany(
            "INSERT INTO items VALUES (?, ?, ?, ?, ?)",
            [(f"new-{i}", f"new item {i}", 9.99, 5, "2025-02-01") for i in range(4)],
        )
    second = json.loads(ok(run("sync", VIEW, "--verify", "--json")).stdout)
    return load, second


def expected_rows(db: Path) -> int:
    with sqlite3.connect(db) as c:
        return c.execute("SELECT count(*) FROM items WHERE stock > 2").fetchone()[0]


def test_source_commands(run, registered, shop):
    _, agent = shop
    assert registered["name"] == SOURCE and registered["has_token"] is True
    assert TOKEN not in json.dumps(registered)
    listed = json.loads(ok(run("source", "list", "--json")).stdout)
    assert SOURCE in [s["name"] for s in listed]
    shown = ok(run("source", "show", SOURCE)).stdout
    assert agent.url in shown and "has_token" in shown
    assert json.loads(ok(run("--json", "source", "show", SOURCE)).stdout)["url"] == agent.url
    failed(run("source", "add", SOURCE, agent.url), 1, "409", "exists")
    failed(run("source", "show", "cli_nope"), 1, "404", "cli_nope")
    failed(run("source", "add", "bad name", agent.url), 1, "422", "name")


def test_view_commands(run, view):
    assert view["key"] == ["sku"] and view["strategy"] == "group_hash"
    assert view["columns"] == ["sku", "name", "price", "stock", "added"]
    assert [v["name"] for v in json.loads(ok(run("view", "list", "--json")).stdout)].count(VIEW) == 1
    listed = ok(run("view", "list")).stdout
    assert VIEW in listed and "group_hash" in listed
    shown = ok(run("view", "show", VIEW)).stdout
    assert view["sites"][0]["sql"] in shown and "price decimal(8,2)" in shown
    # every option of the body reaches the service: sample size, and a 422 it explains
    other = json.loads(
        ok(
            run("view", "add", "cli_other", f"SELECT i.sku FROM {SOURCE}.items i", "--sample-size", "7", "--json")
        ).stdout
    )
    assert other["sample_size"] == 7 and other["strategy"] == "auto"
    failed(run("view", "add", "cli_other", f"SELECT i.sku FROM {SOURCE}.items i"), 1, "409", "already exists")
    ok(run("view", "rm", "cli_other"))
    failed(run("view", "show", "cli_other"), 1, "404")
    failed(run("view", "rm", "cli_other"), 1, "404")
    failed(run("view", "add", "cli_bad", f"SELECT DISTINCT i.sku FROM {SOURCE}.items i"), 1, "422", "DISTINCT")
    failed(run("view", "add", "cli_bad", f"SELECT i.sku FROM {SOURCE}.items i", "--strategy", "magic"), 1, "422")
    failed(
        run("view", "add", "cli_bad", f"SELECT i.sku, i.added FROM {SOURCE}.items i", "--timestamp", "items=name"),
        1,
        "422",
        "timestamp",
    )


def test_sync_prints_a_summary_and_its_json_record(synced, shop):
    load, second = synced
    assert "succeeded" in load.stdout and "inserted" in load.stdout and "bytes to agent" in load.stdout
    assert f" {expected_rows(shop[0]) - 2:,} " in load.stdout  # the load inserted the rows before the changes
    # off a terminal the progress comes as phase lines on stderr, labelled with the view
    assert VIEW in load.stderr
    assert second["status"] == "succeeded" and second["view"] == VIEW
    m = second["metrics"]
    assert (m["rows_inserted"], m["rows_updated"], m["rows_deleted"]) == (4, 3, 2)
    assert m["mode"] == "verify" and m["verify"]["divergent_rows"] == 0


def test_syncs_lists_them_newest_first(run, synced):
    load, second = synced
    listed = json.loads(ok(run("syncs", VIEW, "--json")).stdout)
    assert listed[0]["id"] == second["id"] and len(listed) >= 2
    assert [s["id"] for s in json.loads(ok(run("syncs", VIEW, "--limit", "1", "--json")).stdout)] == [second["id"]]
    table = ok(run("syncs", VIEW)).stdout
    assert second["id"][:12] in table and "succeeded" in table and "from agent" in table


def _as_text(value) -> str:
    return "" if value is None else str(value)


def test_delta_in_ndjson_csv_and_parquet(run, synced, tmp_path):
    _, second = synced
    lines = ndjson(ok(run("delta", VIEW)).stdout)  # default: the last succeeded sync
    assert ndjson(ok(run("delta", VIEW, second["id"], "--json")).stdout) == lines
    assert ndjson(ok(run("delta", VIEW, second["id"][:12])).stdout) == lines  # as `deltasieve syncs` shows it
    failed(run("delta", VIEW, "not-an-id"), 1, "404", "not-an-id")
    assert sorted(line["op"] for line in lines) == ["delete"] * 2 + ["insert"] * 4 + ["update"] * 3
    flat = [{"op": line["op"], "changed": line.get("changed"), **line["row"]} for line in lines]
    columns = ["op", "changed", "sku", "name", "price", "stock", "added"]

    summary = json.loads(
        ok(run("delta", VIEW, "--format", "parquet", "-o", str(tmp_path / "d.parquet"), "--json")).stdout
    )
    assert summary["records"] == len(lines)
    table = pq.read_table(tmp_path / "d.parquet")
    assert table.column_names == columns  # no count nor old.* columns: the view has a key
    assert (
        str(table.schema.field("price").type) == "decimal128(8, 2)"
        and str(table.schema.field("added").type) == "date32[day]"
    )
    read_back = [{k: _as_text(v) for k, v in r.items()} for r in table.to_pylist()]
    assert read_back == [{k: _as_text(r.get(k)) for k in columns} for r in flat]
    assert all(isinstance(r["price"], Decimal) for r in table.to_pylist() if r["price"] is not None)

    ok(run("delta", VIEW, "--format", "csv", "-o", str(tmp_path / "d.csv")))
    with open(tmp_path / "d.csv", newline="") as f:
        from_csv = list(csv.DictReader(f))
    assert [{k: v.strip('"') for k, v in r.items()} for r in from_csv] == [
        {k: "|".join(r[k] or []) if k == "changed" else _as_text(r.get(k)) for k in columns} for r in flat
    ]


def test_rows_in_each_format(run, synced, shop, tmp_path):
    lines = ndjson(ok(run("rows", VIEW)).stdout)
    assert len(lines) == expected_rows(shop[0])
    ok(run("rows", VIEW, "--format", "parquet", "-o", str(tmp_path / "r.parquet")))
    table = pq.read_table(tmp_path / "r.parquet").to_pylist()
    assert [{k: _as_text(v) for k, v in r.items()} for r in table] == [
        {k: _as_text(v) for k, v in r.items()} for r in lines
    ]
    from_csv = list(csv.DictReader(io.StringIO(ok(run("rows", VIEW, "--format", "csv")).stdout)))
    assert [r["sku"] for r in from_csv] == [r["sku"] for r in lines]


def test_view_set_changes_the_schedule_and_keeps_the_data(run, service, synced):
    """PATCH through `view set`: the schedule comes and goes, the rows and the history stay."""
    api = httpx.Client(base_url=service.url, timeout=30)
    rows_before = api.get(f"/v1/views/{VIEW}/rows")
    syncs_before = [s["id"] for s in api.get(f"/v1/views/{VIEW}/syncs").json()]
    shown = ok(run("view", "set", VIEW, "--every-s", "3600")).stdout  # an hour: not due in this test
    assert "every 3,600 s" in shown and "next run (UTC)" in shown
    found = api.get(f"/v1/views/{VIEW}").json()
    assert found["schedule"] == {"every_s": 3600} and found["next_run_at"]
    assert "every 3,600 s" in ok(run("view", "list")).stdout
    assert json.loads(ok(run("view", "show", VIEW, "--json")).stdout)["schedule"] == {"every_s": 3600}
    unset = json.loads(ok(run("view", "set", VIEW, "--no-schedule", "--json")).stdout)
    assert unset["schedule"] is None and unset["next_run_at"] is None
    assert api.get(f"/v1/views/{VIEW}").json()["schedule"] is None
    assert [s["id"] for s in api.get(f"/v1/views/{VIEW}/syncs").json()] == syncs_before
    rows_after = api.get(f"/v1/views/{VIEW}/rows")
    assert rows_after.headers["x-last-sync"] == rows_before.headers["x-last-sync"] == syncs_before[0]
    assert rows_after.text == rows_before.text
    failed(run("view", "set", "cli_nope", "--sample-size", "3"), 1, "404")
    assert "api" in ok(run("syncs", VIEW)).stdout  # the trigger column


def test_changes_is_the_deltas_concatenated(run, synced, tmp_path):
    listed = json.loads(ok(run("syncs", VIEW, "--json")).stdout)
    succeeded = [s["id"] for s in reversed(listed) if s["status"] == "succeeded"]  # oldest first
    load, later = succeeded[0], succeeded[1:]
    expected = [{"sync": s, **line} for s in later for line in ndjson(ok(run("delta", VIEW, s)).stdout)]
    result = ok(run("changes", VIEW, "--after", load[:12]))  # as `deltasieve syncs` shows it
    assert ndjson(result.stdout) == expected and len(expected) >= 9
    assert f"--after {later[-1]}" in result.stderr  # where to resume
    # --json: the lines alone on stdout, the resume point a JSON object on stderr
    result = ok(run("changes", VIEW, "--after", load, "--limit-syncs", "1", "--json"))
    assert ndjson(result.stdout) == [line for line in expected if line["sync"] == later[0]]
    resume = json.loads(result.stderr.strip().splitlines()[-1])
    assert resume == {"last_sync": later[0], "syncs": 1, "more_syncs": len(later) > 1}
    caught_up = ok(run("changes", VIEW, "--after", later[-1], "--json"))
    assert caught_up.stdout == "" and json.loads(caught_up.stderr)["last_sync"] == later[-1]
    failed(run("changes", "cli_nope"), 1, "404")
    # parquet: a sync column, then the delta's
    ok(run("changes", VIEW, "--after", load, "--format", "parquet", "-o", str(tmp_path / "c.parquet")))
    table = pq.read_table(tmp_path / "c.parquet")
    assert table.column_names == ["sync", "op", "changed", "sku", "name", "price", "stock", "added"]
    assert str(table.schema.field("price").type) == "decimal128(8, 2)"
    assert [{k: _as_text(v) for k, v in r.items()} for r in table.to_pylist()] == [
        {
            k: _as_text(v)
            for k, v in {"sync": line["sync"], "op": line["op"], "changed": line.get("changed"), **line["row"]}.items()
        }
        for line in expected
    ]
    # --with-before: each update with the row it replaced (the fixture's updates raised the price by 1)
    before = ndjson(ok(run("changes", VIEW, "--after", load, "--limit-syncs", "1", "--with-before")).stdout)
    assert ndjson(ok(run("delta", VIEW, later[0], "--with-before")).stdout) == [
        {k: v for k, v in line.items() if k != "sync"} for line in before
    ]
    updates = [line for line in before if line["op"] == "update"]
    assert len(updates) == 3 and all(Decimal(u["row"]["price"]) - Decimal(u["before"]["price"]) == 1 for u in updates)
    assert [{k: v for k, v in line.items() if k != "before"} for line in before] == ndjson(result.stdout)


def test_changes_follow_resumes_until_ctrl_c(service, synced):
    first = json.loads(ok(deltasieve("syncs", VIEW, "--json", url=service.url)).stdout)[-1]["id"]  # the load
    follower = started("--json", "changes", VIEW, "--after", first, "--follow", url=service.url)
    try:
        resume = json.loads(follower.stderr.readline())  # after the first answer, which held syncs
        assert resume["syncs"] >= 1 and resume["last_sync"] != first
        follower.send_signal(signal.SIGINT)
        out, err = follower.communicate(timeout=30)
    finally:
        follower.kill()
    assert follower.returncode == 130, err
    assert {line["sync"] for line in ndjson(out)} and json.loads(err.strip().splitlines()[-1]) == {
        **resume,
        "syncs": 0,
        "more_syncs": False,
    }


def test_stats(run, synced):
    found = json.loads(ok(run("stats", VIEW, "--json")).stdout)
    assert found["sites"][0]["source"] == SOURCE and found["sites"][0]["update_statistics"]["tuples"] > 0
    shown = ok(run("stats", VIEW)).stdout
    assert "update_statistics.tuples" in shown and SOURCE in shown


def test_watch_follows_the_sync_that_starts(run, service, synced):
    failed(run("watch", VIEW, "--timeout", "0.5"), 1, "no sync of view")
    failed(run("watch", "cli_nope", "--timeout", "0.5"), 1, "404")
    watcher = started("watch", VIEW, "--json", "--timeout", "60", url=service.url)
    try:
        assert "waiting" in watcher.stderr.readline()  # it saw no sync under way, and polls
        queued = json.loads(ok(run("sync", VIEW, "--no-wait", "--json")).stdout)
        assert queued["status"] == "queued"
        out, err = watcher.communicate(timeout=120)
    finally:
        watcher.kill()
    assert watcher.returncode == 0, err
    records = ndjson(out)
    assert {r["id"] for r in records} == {queued["id"]}
    assert records[-1]["status"] == "succeeded" and all(r["status"] != "succeeded" for r in records[:-1])
    # without --json, --no-wait prints the id alone on stdout, and watch ends with the summary
    watcher = started("watch", VIEW, url=service.url, env={"COLUMNS": "250"})
    try:
        assert "waiting" in watcher.stderr.readline()
        sync_id = ok(run("sync", VIEW, "--no-wait")).stdout.strip()
        out, err = watcher.communicate(timeout=120)
    finally:
        watcher.kill()
    assert watcher.returncode == 0, err
    assert len(sync_id) == 32 and sync_id in out and "succeeded" in out and "bytes to agent" in out


def test_the_live_bar_on_a_terminal(run, synced):
    """With a terminal (rich's TTY_COMPATIBLE / TTY_INTERACTIVE stand in for one), the bar
    is drawn on stderr and ends on the sync's status; stdout still gets the summary."""
    result = ok(run("sync", VIEW, env={"TTY_COMPATIBLE": "1", "TTY_INTERACTIVE": "1"}))
    assert VIEW in result.stderr and "succeeded" in result.stderr and "↑" in result.stderr
    assert "inserted" in result.stdout


def test_a_failed_sync_exits_1_with_its_error(run, tmp_path_factory, logs_dir):
    """A sync that fails (its table renamed at the source since the view was defined: the
    agent refuses the site query, a failure not retried) ends the command with 1 and its error."""
    db = tmp_path_factory.mktemp("cli_gone") / "gone.db"
    with sqlite3.connect(db) as c:
        c.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
        c.execute("INSERT INTO t VALUES (1, 'a')")
    agent = start_agent(f"sqlite:///{db}", logs_dir)
    try:
        ok(run("source", "add", "cli_gone", agent.url))
        ok(run("view", "add", "cli_gone_v", "SELECT t.id, t.v FROM cli_gone.t t"))
        with sqlite3.connect(db) as c:
            c.execute("ALTER TABLE t RENAME TO t_old")
        stderr = failed(run("sync", "cli_gone_v"), 1, "failed", "cli_gone_v")
        record = json.loads(ok(run("syncs", "cli_gone_v", "--json")).stdout)[0]
        assert record["status"] == "failed" and record["error"] in stderr.replace("\n", "")
        again = run("sync", "cli_gone_v", "--json")
        failed(again, 1, "failed")
        assert json.loads(again.stdout)["status"] == "failed"  # the record on stdout, the error on stderr
        failed(run("delta", "cli_gone_v", record["id"]), 1, "409", "failed")
        failed(run("delta", "cli_gone_v"), 1, "no succeeded sync")
    finally:
        agent.stop()


@pytest.mark.parametrize(
    "args",
    [
        ["frobnicate"],
        ["sync"],
        ["source", "add", "only_a_name"],
        ["view", "add", "v", "SELECT 1", "--sample-size", "many"],
        ["view", "add", "v", "SELECT 1", "--sample-size", "-1"],
        ["view", "add", "v", "SELECT 1", "--timestamp", "no_equals_sign"],
        ["delta", "v", "--format", "xml"],
        ["syncs", "v", "--limit", "0"],
        ["watch", "v", "--timeout", "soon"],
        ["view", "set", "v"],
        ["view", "set", "v", "--every-s", "60", "--no-schedule"],
        ["view", "set", "v", "--every-s", "0"],
        ["changes", "v", "--limit-syncs", "0"],
        ["changes", "v", "--format", "csv", "--follow"],
    ],
)
def test_bad_usage_exits_2(args):
    result = deltasieve(*args, url="http://127.0.0.1:9")
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr and "Usage:" in result.stderr


def test_an_unreachable_service_exits_3():
    url = f"http://127.0.0.1:{free_port()}"
    for args in (["source", "list"], ["sync", "v"], ["--json", "rows", "v"]):
        failed(deltasieve(*args, url=url), 3, "cannot reach", url, "DELTASIEVE_URL")
    failed(deltasieve("--url", url, "view", "list", url=None), 3, url)


class _StandIn(http.server.BaseHTTPRequestHandler):
    """A stand-in service: `reply` answers with a JSON document."""

    def reply(self, status: int, document: object) -> None:
        body = json.dumps(document).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def stand_in(handler: type[_StandIn]):
    """The URL of a stand-in service answering with `handler`, for the block's time."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


class _KeyedService(_StandIn):
    """Wants X-API-Key: k on GET /v1/sources."""

    def do_GET(self):
        good = self.headers.get("X-API-Key") == "k"
        self.reply(200, []) if good else self.reply(401, {"detail": "missing or wrong API key"})


def test_the_api_key_goes_as_x_api_key():
    with stand_in(_KeyedService) as url:
        assert (
            json.loads(ok(deltasieve("source", "list", "--json", url=url, env={"DELTASIEVE_API_KEY": "k"})).stdout)
            == []
        )
        assert json.loads(ok(deltasieve("--api-key", "k", "source", "list", "--json", url=url)).stdout) == []
        failed(deltasieve("source", "list", url=url), 1, "401", "missing or wrong API key")


class _RecordingService(_StandIn):
    """Answers POST /v1/views and PATCH /v1/views/{name} with a view, and keeps each
    request's method, path and body."""

    calls: list = []

    def _answer(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        self.calls.append((self.command, self.path, body))
        view = {"name": "v", "columns": ["a"], "key": ["a"], "sites": [], "strategy": "auto"}
        self.reply(200, {**view, "schedule": body.get("schedule"), "next_run_at": None})

    do_POST = do_PATCH = _answer


def test_view_add_and_set_send_only_what_is_given():
    """A scheduled view would be synced at once by a real service: the bodies are checked on a stand-in."""
    with stand_in(_RecordingService) as url:
        assert "every 90 s" in ok(deltasieve("view", "add", "v", "SELECT 1", "--every-s", "90", url=url)).stdout
        ok(deltasieve("view", "set", "v", "--sample-size", "5", url=url))
        ok(deltasieve("view", "set", "v", "--no-schedule", url=url))
    assert _RecordingService.calls == [
        ("POST", "/v1/views", {"name": "v", "sql": "SELECT 1", "schedule": {"every_s": 90}}),
        ("PATCH", "/v1/views/v", {"sample_size": 5}),
        ("PATCH", "/v1/views/v", {"schedule": None}),
    ]


def test_dbt_sources_names_the_views_published_table(run, view, tmp_path):
    """`dbt sources` writes the file for the view's Delta table as the service shows it."""
    target = tmp_path / "sources.yml"
    ok(run("dbt", "sources", VIEW, "-o", str(target), "--warn-after", "6h"))
    document = yaml.safe_load(target.read_text())
    (source,) = document["sources"]
    (table,) = source["tables"]
    shown = json.loads(ok(run("--json", "view", "show", VIEW)).stdout)
    (delta,) = shown["destinations"]
    assert (source["name"], table["name"], table["external"]["location"]) == ("deltasieve_delta", VIEW, delta["uri"])
    assert [c["name"] for c in table["columns"]] == [*shown["columns"], "_deltasieve_synced_at", "_deltasieve_sync_id"]
    assert table["columns"][0] == {
        "name": "sku",
        "description": "key column, text",
        "data_tests": ["not_null", "unique"],
    }
    assert table["config"]["freshness"]["warn_after"] == {"count": 6, "period": "hour"}
    failed(run("dbt", "sources", "no_such_view"), 2, "no_such_view")
