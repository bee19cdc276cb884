"""Publishing's cost per sync (#37): a view published to Delta Lake and PostgreSQL beside the same view unpublished.

    python -m tests.benchmarks.publishing [--rows 1000000] [--rounds 5] [--many-syncs 60] [--out PATH]

The students workload (workloads/generators.py) in a SQLite file, behind one agent, and two
views of the same query: `pub_plain` with `destinations: []` (the baseline) and `pub_both`
published to its default Delta Lake table and to a table of a PostgreSQL warehouse this
benchmark starts (workloads/postgres.py; a role owning its schema, with TEMPORARY on the
database, as docs/views/destination-postgres.md asks).

Rounds: the load; ROUNDS rounds of the workload's own rates (1 % of the rows updated, 0.1 %
deleted, 0.5 % inserted; the students' keys are scattered, so these changes fall on every
key range of the Delta table's files); one round of ten times those rates (the PostgreSQL
apply should take ten times as long, not the table's time); one round of recent changes
(as many updates, all among the highest twentieth of the keys, as where keys grow with time:
the Delta apply should rewrite only the files holding those keys). Each round syncs the baseline, then the
published view, then waits until both destinations hold the sync (GET /v1/views: their
`applied_sync` is it, `lag_syncs` 0) before the next round, so that the publisher never runs
beside a sync. Per round: each sync's own wall time (its record's `wall_seconds`), its delta's
lines, each destination's apply (the service's `deltasieve_publish_seconds`, what the
publisher measures around one apply: reading the stored delta, the commit, the Delta table's
maintenance), the Delta commit's files rewritten, and the time from the view's commit (the
sync record's `finished_at`, on this machine's clock) until each destination held it (the destinations are applied side by side, each by its own worker:
the later of the two is when both hold it). When a destination held it is its own stamp: the
Delta table's newest commit once it holds the sync (the sync's commit, or the upkeep after
it, which the same turn of the worker writes), the PostgreSQL table's `applied_at` of the
sync in `deltasieve_applied`. The service's API is polled every POLL_S only to learn that
both are done (`until_noticed_s`: when the poll saw it, up to POLL_S later, beside). Publishing
added ÷ sync time is the later stamp over the sync's wall time; the goal of #37 is at most GOAL.

Then, the published view alone, small rounds (a twentieth of the rates) until the Delta table
has been compacted (every OPTIMIZE_EVERY table versions) and a few syncs after: per sync, the
table's version, its files and bytes (those of the current version, and every Parquet file
on disk: vacuum keeps the files of the last SERVICE_DELTA_KEEP_VERSIONS view versions,
DEFAULT_KEEP_VERSIONS here, so the disk stays within about twice that many versions' files).

Modes (#51): three more views of the same query, one per kind (`pub_modes_delta`, a local
Delta table; `pub_modes_postgres`; `pub_modes_iceberg`, in the service's embedded SQLite
catalog), each published to a table in each mode, `merge`, `soft_delete` and `history`, are
synced in each of the rounds above after the published view, one after the other, each
waited for until its three tables hold the sync. Per round and table, the publisher's apply
(`deltasieve_publish_seconds`); the service runs with SERVICE_PUBLISH_WORKERS=1, so a view's
three tables are applied one after the other: no two applies share the machine's cores. The figures: each mode's median apply
over the change rounds, and its ratio to `merge`'s of the same kind; the goal of #51 is
`history` at most MODES_GOAL × `merge` for every kind.

At the end the keys of both destinations, and of each mode's table (a soft_delete table's rows
not deleted, a history table's current versions), are checked against the source's.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sqlite3
import statistics
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable
from prometheus_client.parser import text_string_to_metric_families

from tests.benchmarks import machine
from warehouse.destinations import DEFAULT_KEEP_VERSIONS
from warehouse.destinations.delta_upkeep import MAINTENANCE, OPTIMIZE_EVERY, SYNC_ID
from warehouse.view_options import MetadataColumns
from workloads.generators import NOW_SQL, STUDENTS, WORKLOADS, Simulator
from workloads.harness import Api, start_agent, start_service
from workloads.postgres import start_postgres
from workloads.published import wait_published

HERE = Path(__file__).resolve().parent
SOURCE, PLAIN, PUBLISHED = "pubsrc", "pub_plain", "pub_both"
ROLE, PASSWORD, SCHEMA = "publisher", "pub-bench", "wh"
TABLE = f"{SCHEMA}.{STUDENTS.table}"
#: The goal of #37: publishing adds at most this share to a sync's time.
GOAL = 0.20
#: How often the destinations' state is polled after a sync (seconds).
POLL_S = 0.1
#: The longest wait for the destinations to catch up after one sync.
CATCH_UP_S = 900
#: The large round's rates, as a multiple of the workload's; the small rounds' as a fraction.
LARGE, SMALL = 10, 0.05
#: Syncs after the Delta table's first compaction in the many-syncs phase.
AFTER_COMPACTION = 3
#: The recent round's updates fall among this share of the keys, the highest.
RECENT_KEYS = 0.05
#: The modes measured, the kinds, and the view of each kind published in every mode (a view
#: has at most 8 destinations).
MODES = ("merge", "soft_delete", "history")
MODE_KINDS = ("delta", "postgres", "iceberg")
MODES_VIEWS = {kind: f"pub_modes_{kind}" for kind in MODE_KINDS}
#: The goal of #51: a history table's apply takes at most this many times a merge table's.
MODES_GOAL = 1.5


def warehouse(work: Path):
    """A PostgreSQL server and the destination's URL: a role owning schema `wh`, TEMPORARY on the database."""
    (work / "pg").mkdir(exist_ok=True)
    server = start_postgres(work / "pg", dbname="warehouse")
    with psycopg.connect(server.owner_url, autocommit=True) as owner:
        owner.execute(f"CREATE ROLE {ROLE} LOGIN PASSWORD '{PASSWORD}'")
        for schema in (SCHEMA, *(f"{SCHEMA}_{mode}" for mode in MODES)):  # a schema per mode (models.py)
            owner.execute(f"CREATE SCHEMA {schema} AUTHORIZATION {ROLE}")
        owner.execute(f"GRANT CONNECT, TEMPORARY ON DATABASE warehouse TO {ROLE}")
    parts = urlsplit(server.owner_url)
    url = urlunsplit(parts._replace(netloc=f"{ROLE}:{PASSWORD}@{parts.hostname}:{parts.port}"))
    return server, url


def publish_seconds(api: Api, view: str) -> dict[str, float]:
    """Seconds spent applying syncs so far, per destination kind of the view (from /metrics)."""
    text = api.http.get("/metrics").text
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != "deltasieve_publish_seconds":
            continue
        for sample in family.samples:
            if sample.name.endswith("_sum") and sample.labels.get("view") == view:
                kind = sample.labels["destination"].split(" ", 1)[0]
                out[kind] = out.get(kind, 0.0) + sample.value
    return out


def caught_up(api: Api, view: str, sync_id: str, since: float) -> dict[str, float]:
    """Seconds from `since` (a time.time(): the view's commit) until each destination of the view
    held `sync_id`, nothing left to apply, as GET /v1/views/{view} shows it."""
    reached: dict[str, float] = {}
    deadline = time.monotonic() + CATCH_UP_S
    while True:
        now = time.time()
        for d in api.http.get(f"/v1/views/{view}").json()["destinations"]:
            if d["kind"] not in reached and d["applied_sync"] == sync_id and d["lag_syncs"] == 0:
                reached[d["kind"]] = round(now - since, 3)
            if d.get("error"):
                raise AssertionError(f"destination {d['kind']} failed: {d['error']}")
        if len(reached) == 2:
            return reached
        if time.monotonic() > deadline:
            raise AssertionError(f"the destinations did not catch up to {sync_id} in {CATCH_UP_S} s: {reached}")
        time.sleep(POLL_S)


def mode_destinations(work: Path, pg_url: str, kind: str) -> list[dict]:
    """The destinations of the modes view of `kind`: a table in each mode, named `students_MODE`
    (PostgreSQL's `students` in schema `wh_MODE`: a view's tables are each in a schema of their own)."""
    out = []
    for mode in MODES:
        name = f"{STUDENTS.table}_{mode}"
        out.append(
            {
                "delta": {"kind": "delta", "uri": str(work / "modes" / name), "mode": mode},
                "postgres": {
                    "kind": "postgres",
                    "url": pg_url,
                    "table": f"{SCHEMA}_{mode}.{STUDENTS.table}",
                    "mode": mode,
                },
                "iceberg": {"kind": "iceberg", "table": f"{SCHEMA}.{name}", "mode": mode},
            }[kind]
        )
    return out


def label_mode(label: str) -> tuple[str, str]:
    """(kind, mode) of a modes destination from its /metrics label, which names `_MODE` in its table's name.

    >>> label_mode("iceberg wh.students_soft_delete"), label_mode("postgres postgresql://h/w wh_merge.students")
    (('iceberg', 'soft_delete'), ('postgres', 'merge'))
    """
    (mode,) = [m for m in MODES if f"_{m}" in label.rsplit("/", 1)[-1]]
    return label.split(" ", 1)[0], mode


def applies(api: Api, view: str) -> dict[str, float]:
    """Seconds spent applying syncs so far, per destination label of the view (from /metrics)."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(api.http.get("/metrics").text):
        if family.name == "deltasieve_publish_seconds":
            for sample in family.samples:
                if sample.name.endswith("_sum") and sample.labels.get("view") == view:
                    out[sample.labels["destination"]] = sample.value
    return out


def modes_sync(api: Api) -> dict:
    """Sync each kind's modes view in turn, waiting for its three tables before the next: the
    syncs' seconds and lines, and each table's apply in seconds, {kind: {mode: s}}."""
    out: dict = {"seconds": {}, "lines": 0, "apply_s": {}}
    for kind, view in MODES_VIEWS.items():
        before = applies(api, view)
        sync = api.sync(view)
        summary = sync_summary(sync)
        if summary["status"] != "succeeded":
            raise AssertionError(f"sync of {view} failed: {sync}")
        wait_published(api, view, sync["id"], CATCH_UP_S)
        out["seconds"][kind], out["lines"] = summary["seconds"], summary["lines"]
        out["apply_s"][kind] = {}
        for label, seconds in applies(api, view).items():
            table_kind, mode = label_mode(label)
            out["apply_s"][table_kind][mode] = round(seconds - before.get(label, 0.0), 3)
    return out


def sync_version(commits: list[dict], sync_id: str) -> int:
    """The Delta table version whose commit carries `sync_id`, among `commits` (its history).

    >>> sync_version([{"version": 4, "deltasieve.sync_id": "b"}, {"version": 3, "deltasieve.sync_id": "a"}], "a")
    3
    """
    (version,) = [int(c["version"]) for c in commits if c.get(SYNC_ID) == sync_id]
    return version


def held_at(commits: list[dict], pg_url: str, sync_id: str) -> dict[str, float]:
    """When each destination held `sync_id`, as a time.time(), by its own stamp: the Delta
    table's newest commit from the sync's on (`commits`: its history), PostgreSQL's `applied_at` of it."""
    version = sync_version(commits, sync_id)
    delta = max(int(c["timestamp"]) for c in commits if int(c["version"]) >= version) / 1000
    with psycopg.connect(pg_url) as conn:
        (postgres,) = conn.execute(
            f"SELECT extract(epoch FROM applied_at) FROM {SCHEMA}.deltasieve_applied WHERE view = %s AND sync_id = %s",
            (PUBLISHED, sync_id),
        ).fetchone()
    return {"delta": delta, "postgres": float(postgres)}


def committed_at(sync: dict) -> float:
    """When the sync committed the view's version, as a time.time() (its record's `finished_at`:
    the catalog marks it succeeded right after the view's commit, and only then is it
    published; the service runs on this machine, on the same clock)."""
    return dt.datetime.fromisoformat(sync["finished_at"]).timestamp()


def sync_summary(sync: dict) -> dict:
    m = sync["metrics"]
    rows = [m.get("rows_inserted") or 0, m.get("rows_updated") or 0, m.get("rows_deleted") or 0]
    return {"status": sync["status"], "seconds": m.get("wall_seconds"), "lines": sum(rows), "rows_iud": rows}


def recent_change(sim: Simulator, updates: int) -> dict:
    """`updates` rows updated, all among the highest RECENT_KEYS of the keys (rows added lately
    where keys grow with time), committed to the source as the simulator does."""
    shape = sim.shape
    recent = sorted(sim.alive)[-max(1, round(len(sim.alive) * RECENT_KEYS)) :]
    chosen = sim.rng.sample(recent, min(len(recent), updates))
    edit = shape.edits[0]
    stamp = f", {shape.stamp} = {NOW_SQL}" if shape.stamp else ""
    with sqlite3.connect(sim.path) as conn:
        conn.executemany(
            f"UPDATE {shape.table} SET {edit.assign}{stamp} WHERE {shape.key} = ?",
            [(*edit.values(sim.rng), key) for key in chosen],
        )
    return {"updated": len(chosen), "deleted": 0, "inserted": 0}


def rewritten(uri: str, version: int) -> dict:
    """The Delta table's files its commit `version` removed and added, from the files of the
    table before and after it (whatever wrote the commit: a MERGE, a rewrite of the touched files)."""
    after = set(DeltaTable(uri, version=version).file_uris())
    before = set(DeltaTable(uri, version=version - 1).file_uris()) if version else set()
    return {"removed": len(before - after), "added": len(after - before)}


def delta_files(uri: str) -> dict:
    """The Delta table's version, its current files and bytes, and every Parquet file on disk."""
    table = DeltaTable(uri)
    current = [Path(f.removeprefix("file://")) for f in table.file_uris()]
    on_disk = list(Path(uri).rglob("*.parquet"))
    log = list((Path(uri) / "_delta_log").iterdir())
    return {
        "version": table.version(),
        "files": len(current),
        "bytes": sum(p.stat().st_size for p in current),
        "files_on_disk": len(on_disk),
        "bytes_on_disk": sum(p.stat().st_size for p in on_disk),
        "log_bytes": sum(p.stat().st_size for p in log if p.is_file()),
        "compactions": sum(1 for c in table.history() if c.get(MAINTENANCE) == "compact"),
        "vacuums": sum(1 for c in table.history() if c.get(MAINTENANCE) == "vacuum" and c["operation"] == "VACUUM END"),
    }


def postgres_size(url: str) -> dict:
    with psycopg.connect(url) as conn:
        rows, size = conn.execute(f"SELECT count(*), pg_total_relation_size('{TABLE}') FROM {TABLE}").fetchone()
    return {"rows": rows, "bytes": size}


def one_sync(api: Api, view: str, uri: str, pg_url: str) -> tuple[dict, dict]:
    """Sync the published view and wait for its destinations (the Delta table at `uri`, the
    PostgreSQL warehouse at `pg_url`): (the sync, what publishing took)."""
    before = publish_seconds(api, view)
    sync = api.sync(view)
    summary = sync_summary(sync)
    if summary["status"] != "succeeded":
        raise AssertionError(f"sync of {view} failed: {sync}")
    since = committed_at(sync)
    noticed = caught_up(api, view, sync["id"], since)
    commits = DeltaTable(uri).history(40)
    held = {kind: round(at - since, 3) for kind, at in held_at(commits, pg_url, sync["id"]).items()}
    after = publish_seconds(api, view)
    applied = {kind: round(after.get(kind, 0.0) - before.get(kind, 0.0), 3) for kind in after}
    added = max(held.values())
    return summary, {
        "apply_s": applied,
        "until_applied_s": held,
        "until_noticed_s": noticed,
        "delta_rewritten": rewritten(uri, sync_version(commits, sync["id"])),
        "added_share": round(added / summary["seconds"], 3),
        **{f"{kind}_share": round(applied[kind] / summary["seconds"], 3) for kind in applied},
    }


def round_entry(api: Api, number: int, kind: str, pg_url: str, changed: dict | None, modes: bool) -> dict:
    plain = sync_summary(api.sync(PLAIN))
    uri = destination_uri(api)
    published, publishing = one_sync(api, PUBLISHED, uri, pg_url)
    moded = modes_sync(api) if modes else None
    entry = {
        "round": number,
        "kind": kind,
        "source_changes": changed or {},
        "plain": plain,
        "published": published,
        "publishing": publishing,
        "delta_table": delta_files(uri),
        "postgres_table": postgres_size(pg_url),
        **({"modes": moded} if moded else {}),
    }
    print(
        f"round {number} ({kind}): plain {plain['seconds']} s, published {published['seconds']} s "
        f"({published['lines']:,} lines), apply {publishing['apply_s']}, held after {publishing['until_applied_s']}, "
        f"Delta files rewritten {publishing['delta_rewritten']}"
        + (f"; modes: sync {moded['seconds']} s, apply {moded['apply_s']}" if moded else ""),
        flush=True,
    )
    return entry


def destination_uri(api: Api) -> str:
    found = {d["kind"]: d for d in api.http.get(f"/v1/views/{PUBLISHED}").json()["destinations"]}
    return found["delta"]["uri"]


def many_syncs(api: Api, sim: Simulator, pg_url: str, limit: int, deadline: float) -> list[dict]:
    """Small rounds on the published view until its Delta table's compaction was due, and a few after
    (at most `limit` of them, none begun after `deadline`, a time.monotonic())."""
    out: list[dict] = []
    uri = destination_uri(api)
    after_compaction = 0
    base = sim.profile
    sim.profile = replace(base, update=base.update * SMALL, delete=base.delete * SMALL, insert=base.insert * SMALL)
    try:
        for i in range(limit):
            if time.monotonic() > deadline:
                break
            sim.change()
            summary, publishing = one_sync(api, PUBLISHED, uri, pg_url)
            files = delta_files(uri)
            out.append({"sync": i + 1, **summary, **publishing, "delta_table": files})
            print(f"sync {i + 1}: {summary['seconds']} s, apply {publishing['apply_s']}, table {files}", flush=True)
            if files["compactions"] or files["version"] >= OPTIMIZE_EVERY:  # a compaction was due
                after_compaction += 1
                if after_compaction > AFTER_COMPACTION:
                    break
    finally:
        sim.profile = base
    return out


def check(api: Api, db: Path, pg_url: str, work: Path | None) -> dict:
    """Each destination's keys (the modes tables' too, with `work`) against those of the view's
    query run by SQLite on the source's file."""
    key = STUDENTS.key
    with sqlite3.connect(db) as conn:
        view = STUDENTS.view_sql.format(source="main")  # the view's own query, run by SQLite
        truth = {r[0] for r in conn.execute(f"SELECT {key} FROM ({view})")}
    delta = set(DeltaTable(destination_uri(api)).to_pyarrow_table(columns=[key]).column(key).to_pylist())
    with psycopg.connect(pg_url) as conn:
        pg = {r[0] for r in conn.execute(f"SELECT {key} FROM {TABLE}")}
    found = {"delta": delta, "postgres": pg, **(modes_keys(work, pg_url) if work else {})}
    return {name: "same keys" if keys == truth else f"{len(keys ^ truth)} keys differ" for name, keys in found.items()}


def modes_keys(work: Path, pg_url: str) -> dict[str, set]:
    """The view's keys each modes table holds: a soft_delete table's rows not deleted, a history
    table's current versions (read with deltalake, psycopg and pyiceberg)."""
    from pyiceberg.catalog import load_catalog

    from warehouse.destinations.iceberg_catalog import CATALOG_NAME, properties

    key, columns = STUDENTS.key, MetadataColumns()
    alive = {"merge": None, "soft_delete": (columns.deleted, False), "history": (columns.current, True)}
    catalog = load_catalog(CATALOG_NAME, **properties(None, work / "data"))
    out: dict[str, set] = {}
    for spec in [d for kind in MODE_KINDS for d in mode_destinations(work, pg_url, kind)]:
        if spec["kind"] == "delta":
            rows = DeltaTable(spec["uri"]).to_pyarrow_table()
        elif spec["kind"] == "postgres":
            with psycopg.connect(pg_url) as conn:
                cur = conn.execute(f"SELECT * FROM {spec['table']}")
                names = [d.name for d in cur.description]
                rows = pa.Table.from_pylist([dict(zip(names, r)) for r in cur.fetchall()])
        else:
            rows = catalog.load_table(tuple(spec["table"].split("."))).scan().to_arrow()
        which = alive[spec["mode"]]
        if which is not None:
            rows = rows.filter(pc.equal(rows.column(which[0]), which[1]))
        out[f"{spec['kind']} {spec['mode']}"] = set(rows.column(key).to_pylist())
    return out


def run(args: argparse.Namespace) -> dict:
    work = HERE / "work" / "publishing"
    subprocess.run(["rm", "-rf", str(work)], check=True)
    (work / "logs").mkdir(parents=True)
    sim = WORKLOADS["students"].simulator(work / "students.db", seed=args.seed)
    started = time.monotonic()
    sim.create(args.rows)
    out: dict = {
        "rows": args.rows,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine.describe(),
        "generated_s": round(time.monotonic() - started, 1),
        "rounds": [],
    }
    server, pg_url = warehouse(work)
    out["keep_versions"] = args.keep_versions
    modes = out["modes"] = args.modes == "on"
    env = {"SERVICE_DELTA_KEEP_VERSIONS": str(args.keep_versions)}
    if modes:  # a kind's modes tables applied one after the other (see the module)
        env["SERVICE_PUBLISH_WORKERS"] = "1"
    service = start_service(work / "data", work / "logs", env=env)
    agent = start_agent(f"sqlite:///{sim.path}", work / "logs")
    api = Api(service.url, timeout=3600)
    try:
        api.add_source(SOURCE, agent.url)
        sql = STUDENTS.view_sql.format(source=SOURCE)
        api.add_view(PLAIN, sql, destinations=[])
        api.add_view(
            PUBLISHED, sql, destinations=[{"kind": "delta"}, {"kind": "postgres", "url": pg_url, "table": TABLE}]
        )
        if modes:
            for kind, view in MODES_VIEWS.items():
                api.add_view(view, sql, destinations=mode_destinations(work, pg_url, kind))
        out["rounds"].append(round_entry(api, 0, "load", pg_url, None, modes))
        for number in range(1, args.rounds + 1):
            out["rounds"].append(round_entry(api, number, "change", pg_url, sim.change().counts(), modes))
        base = sim.profile
        sim.profile = replace(base, update=base.update * LARGE, delete=base.delete * LARGE, insert=base.insert * LARGE)
        changed = sim.change().counts()
        sim.profile = base
        out["rounds"].append(round_entry(api, args.rounds + 1, f"{LARGE}x change", pg_url, changed, modes))
        updates = round(statistics.median(r["published"]["lines"] for r in out["rounds"] if r["kind"] == "change"))
        changed = recent_change(sim, updates)
        out["rounds"].append(round_entry(api, args.rounds + 2, "recent change", pg_url, changed, modes))
        out["syncs"] = many_syncs(api, sim, pg_url, args.many_syncs, started + 60 * args.budget_min)
        if modes:  # the modes views synced once more, to the source the published view's last sync read
            out["modes_last"] = modes_sync(api)
        out["check"] = check(api, sim.path, pg_url, work if modes else None)
    finally:
        api.close()
        agent.stop()
        service.stop()
        server.stop()
    out["summary"] = summarize(out)
    out["findings"] = findings(out)
    return out


def _median(values) -> float:
    return round(statistics.median(values), 3)


def summarize(out: dict) -> dict:
    """The headline figures: medians over the change rounds, the load, the large round, the table after all syncs."""
    changes = [r for r in out["rounds"] if r["kind"] == "change"]
    load = out["rounds"][0]
    large = next(r for r in out["rounds"] if r["kind"] == f"{LARGE}x change")
    recent = next((r for r in out["rounds"] if r["kind"] == "recent change"), None)
    sync_s = _median(r["published"]["seconds"] for r in changes)
    s = {
        "change rounds": len(changes),
        "sync_s": sync_s,
        "plain_sync_s": _median(r["plain"]["seconds"] for r in changes),
        "lines": _median(r["published"]["lines"] for r in changes),
        "delta_apply_s": _median(r["publishing"]["apply_s"]["delta"] for r in changes),
        "postgres_apply_s": _median(r["publishing"]["apply_s"]["postgres"] for r in changes),
        "delta_share": _median(r["publishing"]["delta_share"] for r in changes),
        "postgres_share": _median(r["publishing"]["postgres_share"] for r in changes),
        "added_share": _median(r["publishing"]["added_share"] for r in changes),
        "goal": GOAL,
    }
    s["goal_met"] = s["added_share"] <= GOAL
    s["load_sync_s"] = load["published"]["seconds"]
    s["load_delta_apply_s"] = load["publishing"]["apply_s"]["delta"]
    s["load_postgres_apply_s"] = load["publishing"]["apply_s"]["postgres"]
    s["load_added_share"] = load["publishing"]["added_share"]
    s["large_lines"] = large["published"]["lines"]
    s["large_postgres_apply_s"] = large["publishing"]["apply_s"]["postgres"]
    s["large_delta_apply_s"] = large["publishing"]["apply_s"]["delta"]
    s["postgres_s_per_1k_lines"] = round(1000 * s["postgres_apply_s"] / s["lines"], 4)
    s["large_postgres_s_per_1k_lines"] = round(1000 * s["large_postgres_apply_s"] / s["large_lines"], 4)
    s["delta_rewritten"] = _median(r["publishing"].get("delta_rewritten", {}).get("removed", 0) for r in changes)
    s["delta_files_at_changes"] = _median(r["delta_table"]["files"] for r in changes)
    if recent is not None:
        s["recent_lines"] = recent["published"]["lines"]
        s["recent_delta_apply_s"] = recent["publishing"]["apply_s"]["delta"]
        s["recent_delta_rewritten"] = recent["publishing"].get("delta_rewritten", {}).get("removed", 0)
    last = out["syncs"][-1]["delta_table"] if out.get("syncs") else large["delta_table"]
    s["delta_table_versions"] = last["version"]
    s["delta_compactions"] = last["compactions"]
    s["delta_files"], s["delta_bytes"] = last["files"], last["bytes"]
    s["delta_files_on_disk"], s["delta_bytes_on_disk"] = last["files_on_disk"], last["bytes_on_disk"]
    s["delta_vacuums"] = last.get("vacuums", 0)
    syncs = out.get("syncs") or []
    s["delta_peak_bytes_on_disk"] = max(
        (x["delta_table"]["bytes_on_disk"] for x in syncs), default=last["bytes_on_disk"]
    )
    s["delta_keep_versions"] = out.get("keep_versions", DEFAULT_KEEP_VERSIONS)
    s.update(modes_summary(out["rounds"]))
    return s


#: The kinds as the results name them.
KIND_NAMES = {"delta": "Delta Lake", "postgres": "PostgreSQL", "iceberg": "Iceberg"}


def modes_summary(rounds: list[dict]) -> dict:
    """Each kind's and mode's median apply over the change rounds, its ratio to the kind's
    `merge`, and the goal of #51 (`history_over_merge`: the largest history ÷ merge of the kinds).

    >>> r = [{"kind": "change", "modes": {"seconds": {"delta": 2.0, "postgres": 2.1, "iceberg": 2.2}, "apply_s": {k: {"merge": 1.0, "soft_delete": 1.1, "history": h}
    ...     for k, h in (("delta", 1.2), ("postgres", 1.6), ("iceberg", 1.4))}}}]
    >>> s = modes_summary(r)
    >>> s["postgres_history_over_merge"], s["history_over_merge"], s["history_over_merge_kind"], s["modes_goal_met"]
    (1.6, 1.6, 'postgres', False)
    """
    changes = [r for r in rounds if r["kind"] == "change" and "modes" in r]
    if not changes:
        return {}
    s: dict = {}
    for kind in MODE_KINDS:
        for mode in MODES:
            s[f"{kind}_{mode}_apply_s"] = _median(r["modes"]["apply_s"][kind][mode] for r in changes)
        merge = max(s[f"{kind}_merge_apply_s"], 0.001)
        for mode in MODES[1:]:
            s[f"{kind}_{mode}_over_merge"] = round(s[f"{kind}_{mode}_apply_s"] / merge, 2)
    worst = max(MODE_KINDS, key=lambda kind: s[f"{kind}_history_over_merge"])
    s["history_over_merge"], s["history_over_merge_kind"] = s[f"{worst}_history_over_merge"], worst
    s["modes_goal"], s["modes_goal_met"] = MODES_GOAL, s["history_over_merge"] <= MODES_GOAL
    s["modes_sync_s"] = _median(r["modes"]["seconds"][kind] for r in changes for kind in MODE_KINDS)
    return s


def modes_findings(s: dict) -> list[str]:
    """What the modes' figures say, in a sentence made from them (none without the modes view)."""
    if "history_over_merge" not in s:
        return []
    parts = [
        f"{KIND_NAMES[kind]} merge {s[f'{kind}_merge_apply_s']} s, soft_delete {s[f'{kind}_soft_delete_apply_s']} s "
        f"({s[f'{kind}_soft_delete_over_merge']}×), history {s[f'{kind}_history_apply_s']} s "
        f"({s[f'{kind}_history_over_merge']}×)"
        for kind in MODE_KINDS
    ]
    verdict = (
        f"met (≤ {MODES_GOAL}×)"
        if s["modes_goal_met"]
        else f"not met: {s['history_over_merge']}× for {KIND_NAMES[s['history_over_merge_kind']]}, against ≤ {MODES_GOAL}×"
    )
    return [
        "Each mode's apply over the change rounds (median; a view per kind with a table in each mode, synced "
        f"in turn, its tables applied one after the other; a sync {s['modes_sync_s']} s): "
        + "; ".join(parts)
        + f". History ≤ {MODES_GOAL}× "
        f"merge, every kind: {verdict}."
    ]


def findings(out: dict) -> list[str]:
    """What the figures say, in sentences made from them."""
    s = out["summary"]
    lines_x = s["large_lines"] / s["lines"]
    pg_x = s["large_postgres_apply_s"] / s["postgres_apply_s"] if s["postgres_apply_s"] else float("nan")
    delta_x = s["large_delta_apply_s"] / s["delta_apply_s"] if s["delta_apply_s"] else float("nan")
    verdict = (
        f"met (≤ {100 * GOAL:.0f} %)"
        if s["goal_met"]
        else f"not met: {100 * s['added_share']:.1f} % against ≤ {100 * GOAL:.0f} %, "
        f"{100 * (s['added_share'] - GOAL):.1f} points over"
    )
    follows = (
        " — it follows the table more than the delta: its commit rewrites every file that holds a touched key"
        if delta_x < lines_x / 2
        else ""
    )
    syncs = out.get("syncs") or []
    peak_files = max((x["delta_table"]["files"] for x in syncs), default=0)
    recent = (
        f" A round of {s['recent_lines']:,} updates among the newest {100 * RECENT_KEYS:.0f} % of the keys: the "
        f"Delta apply rewrote {s['recent_delta_rewritten']} of the table's files in {s['recent_delta_apply_s']} s, "
        f"against {s['delta_rewritten']:.0f} of {s['delta_files_at_changes']:.0f} in {s['delta_apply_s']} s for "
        "the workload's changes, which fall on every key range."
        if "recent_lines" in s
        else ""
    )
    return [
        f"Over the {s['change rounds']} rounds of the workload's rates ({s['lines']:,.0f} delta lines, median), the "
        f"published view's sync took {s['sync_s']} s (the unpublished one {s['plain_sync_s']} s); publishing it "
        f"until both destinations held it added {100 * s['added_share']:.1f} % of that: goal {verdict}. "
        f"The Delta table's apply alone is {100 * s['delta_share']:.1f} % ({s['delta_apply_s']} s), "
        f"PostgreSQL's {100 * s['postgres_share']:.1f} % ({s['postgres_apply_s']} s); each is applied by its "
        "own worker, side by side, after the sync's answer, never delaying it: both hold the sync when the "
        f"slower of the two does.{recent}",
        f"The load: the sync {s['load_sync_s']} s, Delta {s['load_delta_apply_s']} s, PostgreSQL "
        f"{s['load_postgres_apply_s']} s (COPY of every row); both held it {100 * s['load_added_share']:.0f} % "
        "of the load's time after it.",
        f"The round of {LARGE}× the changes ({lines_x:.1f}× the lines): PostgreSQL's apply took {pg_x:.1f}× as "
        f"long ({s['postgres_s_per_1k_lines']} s per 1,000 lines before, {s['large_postgres_s_per_1k_lines']} "
        f"after), the Delta table's {delta_x:.1f}×{follows}.",
        f"After {s['delta_table_versions']} Delta table versions, {s['delta_compactions']} compaction(s) "
        f"(due every {OPTIMIZE_EVERY} versions) and {s['delta_vacuums']} vacuum(s) (keeping the last "
        f"{s['delta_keep_versions']} view versions): {s['delta_files']} current files, {s['delta_bytes']:,} bytes "
        f"(at most {peak_files} current files during the small rounds); {s['delta_files_on_disk']} Parquet files "
        f"on disk, {s['delta_bytes_on_disk']:,} bytes, at most {s['delta_peak_bytes_on_disk']:,} during the small "
        f"rounds: {s['delta_peak_bytes_on_disk'] / max(1, s['delta_bytes']):.1f}× the table.",
        *modes_findings(s),
    ]


def markdown(out: dict) -> str:
    lines = [
        f"# Publishing students ({out['rows']:,} rows) to Delta Lake and PostgreSQL, beside the sync",
        "",
        f"Command: `{out['command']}` at commit {out['commit']}, {out['date']}. Keys of the destinations "
        f"against the source at the end: {out.get('check')}.",
        "",
        *(f"- {f}" for f in out["findings"]),
        "",
        "| round | lines | plain sync s | published sync s | Delta apply s | PostgreSQL apply s | held after s "
        "(Delta, PostgreSQL) | added ÷ sync | Delta files / bytes | Delta files rewritten | PostgreSQL bytes |",
        "|---|---:|---:|---:|---:|---:|---|---:|---|---:|---:|",
    ]
    for r in out["rounds"]:
        p, d = r["publishing"], r["delta_table"]
        held = ", ".join(str(p["until_applied_s"].get(k)) for k in ("delta", "postgres"))
        lines.append(
            f"| {r['round']} ({r['kind']}) | {r['published']['lines']:,} | {r['plain']['seconds']} | "
            f"{r['published']['seconds']} | {p['apply_s'].get('delta')} | {p['apply_s'].get('postgres')} | {held} | "
            f"{100 * p['added_share']:.0f} % | {d['files']} / {d['bytes']:,} | "
            f"{p.get('delta_rewritten', {}).get('removed', '')} | {r['postgres_table']['bytes']:,} |"
        )
    lines += modes_table(out)
    lines += ["", "Small rounds (the published view alone):", ""]
    lines += [
        "| sync | lines | sync s | Delta apply s | PostgreSQL apply s | table version | files / bytes | on disk |",
        "|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for x in out.get("syncs", []):
        d = x["delta_table"]
        lines.append(
            f"| {x['sync']} | {x['lines']:,} | {x['seconds']} | {x['apply_s'].get('delta')} | "
            f"{x['apply_s'].get('postgres')} | {d['version']} | {d['files']} / {d['bytes']:,} | "
            f"{d['files_on_disk']} / {d['bytes_on_disk']:,} |"
        )
    return "\n".join(lines) + "\n"


def modes_table(out: dict) -> list[str]:
    """The modes view's applies per round, each kind and mode, with its ratio to the kind's merge."""
    rounds = [r for r in out["rounds"] if "modes" in r]
    if not rounds:
        return []
    lines = [
        "",
        "Modes: a view of each kind (" + ", ".join(f"`{v}`" for v in MODES_VIEWS.values()) + ") published to a "
        "table in each mode, synced in the same rounds; each table's apply in seconds, and ÷ the same kind's merge "
        "table's:",
        "",
        "| round | lines | sync s ("
        + ", ".join(KIND_NAMES[k] for k in MODE_KINDS)
        + ") | "
        + " | ".join(f"{KIND_NAMES[k]} {m}" for k in MODE_KINDS for m in MODES)
        + " |",
        "|---|---:|---:|" + "---:|" * (len(MODE_KINDS) * len(MODES)),
    ]
    for r in rounds:
        applied = r["modes"]["apply_s"]
        cells = []
        for kind in MODE_KINDS:
            merge = max(applied[kind]["merge"], 0.001)
            cells += [str(applied[kind]["merge"])]
            cells += [f"{applied[kind][m]} ({applied[kind][m] / merge:.2f}×)" for m in MODES[1:]]
        lines.append(
            f"| {r['round']} ({r['kind']}) | {r['modes']['lines']:,} | "
            + ", ".join(str(r["modes"]["seconds"][k]) for k in MODE_KINDS)
            + " | "
            + " | ".join(cells)
            + " |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5, help="rounds of the workload's rates after the load")
    parser.add_argument(
        "--many-syncs",
        type=int,
        default=OPTIMIZE_EVERY + 10,
        help="at most this many small rounds, until the Delta table was compacted (0: none)",
    )
    parser.add_argument(
        "--budget-min", type=float, default=14, help="no small round begins this many minutes after the start"
    )
    parser.add_argument(
        "--keep-versions", type=int, default=DEFAULT_KEEP_VERSIONS, help="the service's SERVICE_DELTA_KEEP_VERSIONS"
    )
    parser.add_argument(
        "--modes",
        choices=("on", "off"),
        default="on",
        help="off: leave out the modes views (merge, soft_delete, history)",
    )
    parser.add_argument("--seed", type=int, default=37)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "publishing-1m")
    args = parser.parse_args()
    machine.save(run(args), args, "tests.benchmarks.publishing", markdown)


if __name__ == "__main__":
    main()
