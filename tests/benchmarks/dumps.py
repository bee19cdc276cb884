"""Dump files at 1M rows: snapshot_diff beside the other strategies, and the window's quality curve (#18).

    python -m tests.benchmarks.dumps [--rows 1000000] [--rounds 3] [--out PATH]

A legacy system dumps its `students` table as CSV into a directory, the agent reads it
(`--db-url file:///DIR`). Each round updates 1 % of the rows, deletes and inserts 0.1 %,
and writes a new dump the way a heap table is dumped: rows in storage order, an updated
row moved to the end half of the time, inserts at the end. Views over the dump, synced one
after the other per round: snapshot_diff with each of paper 000's algorithms (the window
with its default buffers, sort-merge, partitioned hash), sketch, and full_ship. Per sync:
seconds and bytes both ways, against the lower bound (zstd Arrow frames of the true
changes), the gzipped dump (what copying the file moves) and the floor: the dump read into
Arrow by DuckDB, the engine the agent reads with (stored as `bare_scan_s`, its old name). At the end each view is
compared with the newest dump, and the window's quality is measured on the last two dumps
with buffers from 1,000 to 300,000 records: useless pairs, time and memory, plotted
(results/dumps-1m-quality.png) beside the exact algorithms.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import subprocess
import time
import tracemalloc
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from deltasieve_protocol import frames
from remote_agent.adapters.files import FileAdapter
from remote_agent.differential import DELETE, INSERT
from remote_agent.differential.partitioned_hash import partitioned_hash
from remote_agent.differential.sort_merge import sort_merge
from remote_agent.differential.window import window_blocks
from remote_agent.sitequery import validate_site_query
from remote_agent.strategies.snapshot_diff import record_arrays
from remote_agent.timings import Timings
from tests.benchmarks.machine import peak_rss_kb, reset_peak_rss
from workloads.harness import Api, start_agent, start_service

HERE = Path(__file__).resolve().parent
DESCRIPTION = {
    "format": "csv",
    "key": ["id"],
    "columns": [
        {"name": "id", "type": "int", "nullable": False},
        {"name": "name", "type": "text"},
        {"name": "email", "type": "text"},
        {"name": "score", "type": "decimal(6,2)"},
        {"name": "city", "type": "text"},
        {"name": "enrolled", "type": "date"},
    ],
}
VIEW = "SELECT s.id, s.name, s.email, s.score, s.city, s.enrolled FROM bd.students s"
VIEWS = {
    "diff_window": {"strategy": "snapshot_diff"},
    "diff_sort_merge": {"strategy": "snapshot_diff", "snapshot_diff": {"algorithm": "sort_merge"}},
    "diff_partitioned_hash": {"strategy": "snapshot_diff", "snapshot_diff": {"algorithm": "partitioned_hash"}},
    "auto": {},
    "sketch": {"strategy": "sketch"},
    "full_ship": {"strategy": "full_ship"},
}
UPDATE_SHARE, INSERT_SHARE, DELETE_SHARE = 0.01, 0.001, 0.001
#: Share of the updated rows the dump writes at the end (a heap update that did not fit in place).
MOVED_SHARE = 0.5
CITIES = np.array(["Lyon", "Oslo", "Graz", "Turku", "Porto", "Brno", "Gent", "Split"])
BUFFERS = (1_000, 2_000, 4_000, 6_000, 8_000, 10_000, 30_000, 100_000, 300_000)
#: Records moved to the new dump's end on top of the round's own moves (controlled displacement).
EXTRA_MOVED = (0, 10_000, 40_000)
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("name", pa.string()),
        ("email", pa.string()),
        ("score", pa.decimal128(6, 2)),
        ("city", pa.string()),
        ("enrolled", pa.date32()),
    ]
)


def students(rng: np.random.Generator, ids: np.ndarray) -> pa.Table:
    n = len(ids)
    names = pa.array([f"student {i}" for i in rng.integers(0, 10**9, n)])
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": names,
            "email": pc.binary_join_element_wise(names, pa.scalar("@uni.example"), ""),
            "score": pa.array(rng.integers(0, 10_000, n) / 100).cast(pa.decimal128(6, 2)),
            "city": pa.array(CITIES[rng.integers(0, len(CITIES), n)]),
            "enrolled": pa.array(rng.integers(15_000, 20_000, n).astype("int32"), pa.int32()).cast(pa.date32()),
        },
        schema=SCHEMA,
    )


def write_dump(folder: Path, table: pa.Table, stamp: str) -> Path:
    path = folder / f"students.{stamp}.csv"
    partial = path.with_suffix(".csv.part")
    pacsv.write_csv(table, partial, pacsv.WriteOptions(quoting_style="needed"))
    partial.rename(path)
    return path


def change(table: pa.Table, rng: np.random.Generator, next_id: int) -> tuple[pa.Table, int, int, int]:
    """One round: the new dump's rows in storage order; the lower bound; rows moved; the next id."""
    n = table.num_rows
    picked = rng.choice(n, int(n * (UPDATE_SHARE + DELETE_SHARE)), replace=False)
    updated, deleted = picked[: int(n * UPDATE_SHARE)], picked[int(n * UPDATE_SHARE) :]
    fresh = students(rng, table.column("id").to_numpy()[updated])
    new_score = fresh.column("score")
    moved = updated[rng.random(len(updated)) < MOVED_SHARE]
    keep = np.ones(n, bool)
    keep[deleted] = False
    keep[moved] = False
    scores = table.column("score").to_pylist()
    for i, s in zip(updated, new_score.to_pylist()):
        scores[i] = s
    changed = table.set_column(3, "score", pa.array(scores, SCHEMA.field("score").type))
    inserted = students(rng, np.arange(next_id, next_id + int(n * INSERT_SHARE)))
    new = pa.concat_tables([changed.filter(pa.array(keep)), changed.take(pa.array(moved)), inserted])
    bound = frame_bytes(pa.concat_tables([changed.take(pa.array(updated)), inserted]), frames.CHANGED_ROWS)
    bound += frame_bytes(table.take(pa.array(deleted)).select(["id"]), frames.DELETED_KEYS)
    return new, bound, len(moved), next_id + inserted.num_rows


def frame_bytes(table: pa.Table, kind: bytes) -> int:
    return sum(len(frames.arrow_frame(kind, b)) for b in table.to_batches(max_chunksize=16_384))


def bare_scan(path: Path) -> float:
    """Seconds DuckDB takes to read the dump into Arrow (the agent's engine, no strategy): the floor."""
    types = ", ".join(
        f"'{c['name']}': '{t}'"
        for c, t in zip(DESCRIPTION["columns"], ["BIGINT", "VARCHAR", "VARCHAR", "DECIMAL(6,2)", "VARCHAR", "DATE"])
    )
    conn = duckdb.connect()
    t0 = time.monotonic()
    conn.sql(f"SELECT * FROM read_csv('{path}', header=true, auto_detect=false, columns={{{types}}})").to_arrow_table()
    return time.monotonic() - t0


def summary(sync: dict) -> dict:
    m = sync["metrics"]
    report = m.get("snapshot_diff") or {}
    return {
        "status": sync["status"],
        "seconds": m.get("wall_seconds"),
        "bytes": m["bytes_to_agent"] + m["bytes_from_agent"],
        "agent_seconds": m.get("agent_seconds"),
        "phases": m.get("phases"),
        "rows": [m.get("rows_inserted"), m.get("rows_updated"), m.get("rows_deleted")],
        "useless_pairs": report.get("useless_pairs"),
        "cancelled": report.get("cancelled"),
        "split_updates": report.get("split_updates"),
    }


def check(api: Api, table: pa.Table, view: str) -> str:
    truth = {r["id"]: r for r in table.to_pylist()}
    rows = {r["id"]: r for r in api.rows(view)}
    differ = len(truth.keys() ^ rows.keys())
    for k, row in rows.items():
        t = truth.get(k)
        if t is not None and (row["score"], row["city"], row["name"]) != (str(t["score"]), t["city"], t["name"]):
            differ += 1
    return "exact" if not differ else f"{differ} rows differ"


def arrays(folder: Path, name: str) -> tuple[np.ndarray, np.ndarray]:
    """The dump as the agent reads it for the window: keys and DuckDB row hashes, in file order."""
    adapter = FileAdapter(f"file://{folder}", statement_timeout_s=600).pinned({"students": name})
    tables = {t.name: t for t in adapter.describe()}
    query = validate_site_query(
        'SELECT "s"."id" AS "id", "s"."name" AS "name", "s"."email" AS "email", "s"."score" AS "score", '
        '"s"."city" AS "city", "s"."enrolled" AS "enrolled" FROM "students" AS "s"',
        ["id"],
        tables,
        "duckdb",
    )
    parts = list(record_arrays(adapter, query, 65_536, Timings(), {"q": 0}, "q"))
    return np.concatenate([k for k, _ in parts]), np.concatenate([v for _, v in parts])


def displaced(keys: np.ndarray, values: np.ndarray, extra: int, rng: np.random.Generator):
    """The new dump with `extra` more records moved to its end (controlled displacement)."""
    if not extra:
        return keys, values
    moved = rng.choice(len(keys), extra, replace=False)
    order = np.concatenate([np.delete(np.arange(len(keys)), moved), moved])
    return keys[order], values[order]


def measured(run) -> tuple[list, float, int]:
    """The run's changes, its seconds, and (a second run under tracemalloc) its peak bytes."""
    t0 = time.monotonic()
    changes = list(run())
    seconds = time.monotonic() - t0
    del changes
    tracemalloc.start()
    changes = list(run())
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return changes, seconds, peak


def exact(algorithm: str, ka, va, kb, vb, buffer: int | None, spill: Path):
    """A run of sort-merge or partitioned hash over the arrays as records, as the agent runs them."""
    a = list(zip(ka.tolist(), va.tolist()))
    b = list(zip(kb.tolist(), vb.tolist()))
    if algorithm == "sort_merge":
        return lambda: sort_merge(a, b, run_records=buffer, spill_dir=spill)
    return lambda: partitioned_hash(a, b, spill_dir=spill)


def quality(folder: Path, old: str, new: str, updates_moved: int) -> dict:
    """The window with buffers of each size, at three displacements, against the exact algorithms."""
    rng = np.random.default_rng(0)
    ka, va = arrays(folder, old)
    kb, vb = arrays(folder, new)
    (folder.parent / "spill").mkdir(exist_ok=True)
    out = {"records": [len(ka), len(kb)], "updates_moved": updates_moved, "runs": []}
    for extra in EXTRA_MOVED:
        extra = min(extra, len(kb) // 4)
        kd, vd = displaced(kb, vb, extra, rng)
        plans = [("window", n) for n in BUFFERS]
        if extra == 0:
            plans += [("sort_merge", 500_000), ("partitioned_hash", None)]
        for algorithm, buffer in plans:
            if algorithm == "window":
                run = lambda n=buffer, kd=kd, vd=vd: window_blocks([(ka, va)], [(kd, vd)], aging_rows=n)  # noqa: E731
            else:
                run = exact(algorithm, ka, va, kd, vd, buffer, folder.parent / "spill")
            changes, seconds, peak = measured(run)
            deleted = {c.key for c in changes if c.op == DELETE}
            inserted = {c.key for c in changes if c.op == INSERT}
            entry = {
                "algorithm": algorithm,
                "moved": updates_moved + extra,
                "aging_rows": buffer if algorithm == "window" else None,
                "seconds": round(seconds, 2),
                "peak_mib": round(peak / 2**20, 1),
                "changes": len(changes),
                "useless_pairs": len(deleted & inserted),
            }
            out["runs"].append(entry)
            print(
                f"quality {algorithm} {buffer} moved {entry['moved']}: {entry['useless_pairs']} useless, {seconds:.2f} s, {entry['peak_mib']} MiB",
                flush=True,
            )
    return out


def plot(q: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for moved in sorted({r["moved"] for r in q["runs"]}):
        wins = [r for r in q["runs"] if r["algorithm"] == "window" and r["moved"] == moved]
        xs, ys = [r["aging_rows"] for r in wins], [max(r["useless_pairs"], 0.8) for r in wins]
        ax.plot(xs, ys, "o-", label=f"{moved:,} rows moved to the dump's end")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(bottom=0.5)
    ax.set_xlabel("aging buffer (records each)")
    ax.set_ylabel("useless delete+insert pairs (0 drawn at the bottom)")
    ax.set_title(f"Window algorithm, two dumps of {q['records'][1]:,} rows")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def run(args: argparse.Namespace) -> dict:
    work = HERE / "work" / "dumps"
    subprocess.run(["rm", "-rf", str(work)], check=True)
    folder = work / "dir"
    folder.mkdir(parents=True)
    (folder / "students.table.json").write_text(json.dumps(DESCRIPTION))
    rng = np.random.default_rng(args.seed)
    t0 = time.monotonic()
    table = students(rng, np.arange(1, args.rows + 1))
    names = [write_dump(folder, table, "r00").name]
    out: dict = {"rows": args.rows, "rounds": [], "generated_s": round(time.monotonic() - t0, 1)}
    logs = work / "logs"
    logs.mkdir()
    service = start_service(work / "warehouse", logs)
    agent = start_agent(f"file://{folder}", logs, extra=["--cache-dir", str(work / "cache")])
    api = Api(service.url, timeout=3600)
    moved = 0
    try:
        api.add_source("bd", agent.url)
        for view, options in VIEWS.items():
            api.add_view(view, VIEW, **options)
        next_id = args.rows + 1
        for rnd in range(args.rounds + 2):  # the load, a sync without a new dump, the rounds
            bound = 0
            if rnd >= 2:
                table, bound, moved, next_id = change(table, rng, next_id)
                names.append(write_dump(folder, table, f"r{rnd:02d}").name)
            path = folder / names[-1]
            entry = {
                "round": rnd,
                "kind": ["load", "no new dump", "change"][min(rnd, 2)],
                "lower_bound_bytes": bound,
                "dump_gz_bytes": len(gzip.compress(path.read_bytes(), 6)),
                "bare_scan_s": round(bare_scan(path), 3),
                "updates_moved": moved if rnd >= 2 else 0,
            }
            for view in VIEWS:
                reset_peak_rss(agent.proc.pid)
                entry[view] = summary(api.sync(view))
                entry[view]["agent_peak_rss_mib"] = round((peak_rss_kb(agent.proc.pid) or 0) / 1024, 1)
                print(f"round {rnd} {view}: {entry[view]['seconds']} s, {entry[view]['bytes']:,} B", flush=True)
            out["rounds"].append(entry)
        out["check"] = {view: check(api, table, view) for view in VIEWS}
    finally:
        api.close()
        agent.stop()
        service.stop()
    out["quality"] = quality(folder, names[-2], names[-1], moved)
    changed = [r for r in out["rounds"] if r["kind"] == "change"]
    out["summary"] = {
        view: {
            "seconds": statistics.median(r[view]["seconds"] for r in changed),
            "x_bare_scan": statistics.median(r[view]["seconds"] / r["bare_scan_s"] for r in changed),
            "bytes": statistics.median(r[view]["bytes"] for r in changed),
            "x_lower_bound": statistics.median(r[view]["bytes"] / r["lower_bound_bytes"] for r in changed),
            "x_dump_gz": statistics.median(r[view]["bytes"] / r["dump_gz_bytes"] for r in changed),
            "agent_peak_rss_mib": max(r[view]["agent_peak_rss_mib"] for r in changed),
        }
        for view in VIEWS
    }
    return out


def markdown(out: dict) -> str:
    lines = [
        f"# Dump files: {out['rows']:,} students rows as CSV, snapshot_diff beside the other strategies",
        "",
        f"Command: `{out['command']}` at commit {out['commit']}. Every view compared with the newest dump at the "
        f"end: {', '.join(f'{v} {c}' for v, c in out['check'].items())}.",
        "",
        "| round | view | sync s | ÷ floor (DuckDB into Arrow) | bytes | × lower bound | × gz dump | useless pairs (cancelled / split) | agent peak RSS MiB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in out["rounds"]:
        for view in VIEWS:
            v = r[view]
            lb = f"{v['bytes'] / r['lower_bound_bytes']:.2f}×" if r["lower_bound_bytes"] else ""
            pairs = (
                "" if v["useless_pairs"] is None else f"{v['useless_pairs']} ({v['cancelled']} / {v['split_updates']})"
            )
            lines.append(
                f"| {r['round']} ({r['kind']}) | {view} | {v['seconds']:.2f} | {v['seconds'] / r['bare_scan_s']:.1f}× | "
                f"{v['bytes']:,} | {lb} | {v['bytes'] / r['dump_gz_bytes']:.3f}× | {pairs} | {v.get('agent_peak_rss_mib', '')} |"
            )
    lines += [
        "",
        "Median over the rounds with changes (the agent's peak RSS: the highest of those rounds, its main process; "
        "the read-ahead readers of the other strategies not counted):",
        "",
        "| view | sync s | ÷ floor (DuckDB into Arrow) | bytes | × lower bound | × gz dump | agent peak RSS MiB |",
        "|---|---|---|---|---|---|---|",
    ]
    for view, s in out["summary"].items():
        lines.append(
            f"| {view} | {s['seconds']:.2f} | {s['x_bare_scan']:.1f}× | {s['bytes']:,.0f} | {s['x_lower_bound']:.2f}× | "
            f"{s['x_dump_gz']:.3f}× | {s.get('agent_peak_rss_mib', '')} |"
        )
    q = out["quality"]
    quality_at = f"; measured at commit {out['quality_commit']}" if out.get("quality_commit") else ""
    lines += [
        "",
        f"Window quality on the last two dumps ({q['records'][0]:,} → {q['records'][1]:,} records; "
        f"{q['updates_moved']:,} updated rows moved to the dump's end by the round, and 10,000 or 40,000 more moved "
        "in two displaced variants), each algorithm alone on the agent's ⟨K,b⟩ arrays (DuckDB row hashes); "
        f"peak: Python memory the run allocated (tracemalloc, a second run){quality_at}:",
        "",
        "| algorithm | rows moved | aging buffer | seconds | peak MiB | changes | useless pairs |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in q["runs"]:
        lines.append(
            f"| {r['algorithm']} | {r['moved']:,} | {r['aging_rows'] or ''} | {r['seconds']} | {r['peak_mib']} | "
            f"{r['changes']:,} | {r['useless_pairs']:,} |"
        )
    lines += ["", "![window quality](dumps-1m-quality.png)", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=18)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "dumps-1m")
    parser.add_argument(
        "--quality-only",
        action="store_true",
        help="measure the window's quality again on the last two dumps of the previous run (its work directory), "
        "keeping that run's syncs",
    )
    args = parser.parse_args()
    if args.quality_only:
        out = json.loads(args.out.with_suffix(".json").read_text())
        folder = HERE / "work" / "dumps" / "dir"
        old, new = sorted(p.name for p in folder.glob("students.*.csv"))[-2:]
        out["quality"] = quality(folder, old, new, out["rounds"][-1]["updates_moved"])
        out["quality_commit"] = _commit()
        write(out, args.out)
        return
    out = run(args)
    out["command"] = "python -m tests.benchmarks.dumps " + " ".join(
        f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k not in ("out", "quality_only")
    )
    out["commit"] = _commit()
    write(out, args.out)


def _commit() -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()


def write(out: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.with_suffix(".json").write_text(json.dumps(out, indent=1))
    path.with_suffix(".md").write_text(markdown(out))
    plot(out["quality"], path.parent / f"{path.name}-quality.png")
    print(markdown(out))


if __name__ == "__main__":
    main()
