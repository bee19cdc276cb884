"""Dump files at 1M rows: snapshot_diff beside the other strategies, and the window's quality curve (#18).

    python -m tests.benchmarks.dumps [--rows 1000000] [--rounds 3] [--out PATH]

A legacy system dumps its `students` table as CSV into a directory, the agent reads it
(`--db-url file:///DIR`). Each round updates 1 % of the rows, deletes and inserts 0.1 %,
and writes a new dump the way a heap table is dumped: rows in storage order, an updated
row moved to the end half of the time, inserts at the end. Views over the dump, synced one
after the other per round: snapshot_diff with each of paper 000's algorithms (the window
with its default buffers, sort-merge, partitioned hash), sketch, and full_ship. Per sync:
seconds and bytes both ways, against the lower bound (zstd Arrow frames of the true
changes), the gzipped dump (what copying the file moves) and a bare scan of the dump
(DuckDB reading it into Arrow, the engine the agent reads with). At the end each view is
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
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from remote_agent.adapters.files import FileAdapter
from remote_agent.differential import DELETE, INSERT
from remote_agent.differential.partitioned_hash import partitioned_hash
from remote_agent.differential.sort_merge import sort_merge
from remote_agent.differential.window import window
from remote_agent.protocol import frames
from remote_agent.protocol.encoding import row_hashes
from remote_agent.protocol.types import Column, LogicalType
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
    "sketch": {"strategy": "sketch"},
    "full_ship": {"strategy": "full_ship"},
}
UPDATE_SHARE, INSERT_SHARE, DELETE_SHARE = 0.01, 0.001, 0.001
#: Share of the updated rows the dump writes at the end (a heap update that did not fit in place).
MOVED_SHARE = 0.5
CITIES = np.array(["Lyon", "Oslo", "Graz", "Turku", "Porto", "Brno", "Gent", "Split"])
BUFFERS = (1_000, 3_000, 10_000, 30_000, 100_000, 300_000)
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
    """Seconds DuckDB takes to read the dump into Arrow (the agent's engine, no strategy)."""
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


def records(folder: Path, name: str) -> list:
    """The dump as the agent's <K, b> records, in file order."""
    adapter = FileAdapter(f"file://{folder}", statement_timeout_s=600).pinned({"students": name})
    columns = [Column(c["name"], LogicalType.parse(c["type"])) for c in DESCRIPTION["columns"]]
    out = []
    for batch in adapter.in_file_order('SELECT * FROM "students"', SCHEMA, 65_536):
        out.extend(zip(batch.column("id").to_pylist(), row_hashes(batch, columns, 0, 64)))
    return out


def quality(folder: Path, old: str, new: str, updates_moved: int) -> dict:
    """The window with buffers of each size against the exact algorithms, on the same records."""
    a, b = records(folder, old), records(folder, new)
    (folder.parent / "spill").mkdir(exist_ok=True)
    out = {"records": [len(a), len(b)], "updates_moved": updates_moved, "runs": []}
    runs = [("window", n) for n in BUFFERS] + [("sort_merge", 500_000), ("partitioned_hash", None)]
    for algorithm, buffer in runs:
        t0 = time.monotonic()
        if algorithm == "window":
            changes = list(window(a, b, aging_rows=buffer))
        elif algorithm == "sort_merge":
            changes = list(sort_merge(a, b, run_records=buffer, spill_dir=folder.parent / "spill"))
        else:
            changes = list(partitioned_hash(a, b, spill_dir=folder.parent / "spill"))
        seconds = time.monotonic() - t0
        deleted = {c.key for c in changes if c.op == DELETE}
        inserted = {c.key for c in changes if c.op == INSERT}
        run = {
            "algorithm": algorithm,
            "aging_rows": buffer if algorithm == "window" else None,
            "seconds": round(seconds, 2),
            "changes": len(changes),
            "useless_pairs": len(deleted & inserted),
            "records_held_at_most": 2 * (1024 + buffer) if algorithm == "window" else None,
        }
        out["runs"].append(run)
        print(f"quality {algorithm} {buffer}: {run['useless_pairs']} useless pairs, {seconds:.1f} s", flush=True)
    return out


def plot(q: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    wins = [r for r in q["runs"] if r["algorithm"] == "window"]
    fig, ax = plt.subplots(figsize=(6.5, 4))
    ax.plot([r["aging_rows"] for r in wins], [r["useless_pairs"] for r in wins], "o-", label="window: useless pairs")
    ax.axhline(q["updates_moved"], color="grey", ls="--", label="updated rows the dump moved to its end")
    ax.set_xscale("log")
    ax.set_xlabel("aging buffer (records each)")
    ax.set_ylabel("useless delete+insert pairs")
    ax2 = ax.twinx()
    ax2.plot(
        [r["aging_rows"] for r in wins], [r["seconds"] for r in wins], "s:", color="tab:red", label="window: seconds"
    )
    for r in q["runs"]:
        if r["algorithm"] != "window":
            ax2.axhline(
                r["seconds"],
                color="tab:green" if r["algorithm"] == "sort_merge" else "tab:purple",
                ls=":",
                label=f"{r['algorithm']}: seconds",
            )
    ax2.set_ylabel("seconds (algorithm alone)")
    lines = ax.get_legend_handles_labels()
    lines2 = ax2.get_legend_handles_labels()
    ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], fontsize=7, loc="upper right")
    ax.set_title(f"Window algorithm on two dumps of {q['records'][1]:,} rows")
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
                entry[view] = summary(api.sync(view))
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
        "| round | view | sync s | × bare scan | bytes | × lower bound | × gz dump | useless pairs (cancelled / split) |",
        "|---|---|---|---|---|---|---|---|",
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
                f"{v['bytes']:,} | {lb} | {v['bytes'] / r['dump_gz_bytes']:.3f}× | {pairs} |"
            )
    lines += [
        "",
        "Median over the rounds with changes:",
        "",
        "| view | sync s | × bare scan | bytes | × lower bound | × gz dump |",
        "|---|---|---|---|---|---|",
    ]
    for view, s in out["summary"].items():
        lines.append(
            f"| {view} | {s['seconds']:.2f} | {s['x_bare_scan']:.1f}× | {s['bytes']:,.0f} | {s['x_lower_bound']:.2f}× | {s['x_dump_gz']:.3f}× |"
        )
    q = out["quality"]
    lines += [
        "",
        f"Window quality on the last two dumps ({q['records'][0]:,} → {q['records'][1]:,} records; "
        f"{q['updates_moved']:,} updated rows moved to the dump's end), the algorithm alone on the agent's <K,b> records:",
        "",
        "| algorithm | aging buffer | seconds | changes | useless pairs | records held at most |",
        "|---|---|---|---|---|---|",
    ]
    for r in q["runs"]:
        lines.append(
            f"| {r['algorithm']} | {r['aging_rows'] or ''} | {r['seconds']} | {r['changes']:,} | {r['useless_pairs']:,} | "
            f"{r['records_held_at_most'] or 'all (spilled to disk)'} |"
        )
    lines += ["", "![window quality](dumps-1m-quality.png)", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=18)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "dumps-1m")
    args = parser.parse_args()
    out = run(args)
    out["command"] = "python -m tests.benchmarks.dumps " + " ".join(
        f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k != "out"
    )
    out["commit"] = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(out, indent=1))
    args.out.with_suffix(".md").write_text(markdown(out))
    plot(out["quality"], args.out.parent / f"{args.out.name}-quality.png")
    print(markdown(out))


if __name__ == "__main__":
    main()
