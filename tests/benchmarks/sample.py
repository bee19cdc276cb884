"""A view's random sample at 1M rows and M = 10,000: the cost of keeping it per sync (#19).

    python -m tests.benchmarks.sample [--rows 1000000] [--sample 10000] [--out PATH]

The view is 1M `students` rows stored as the warehouse stores a view (Parquet); each sync
changes it by a delta staged as a sync stages it (Parquet, OP and the view's columns):
updates, deletes and inserts at the rates of each round below. Per sync, three ways of
keeping the sample exact for the new version, on the same delta and view:

- deferred (what a sync runs, view_sample.from_delta): deletes and updates of sampled
  rows, the inserts through the acceptance test into the candidate log, one refresh
  (stack or nomem, as chosen) writing the final candidates only;
- from scratch: draw M rows anew from the whole new view (one scan of it);
- immediate: each operation of the delta applied to the sample as it comes, the stored
  sample rewritten after every operation that changed it (so it is current after each
  one, the reading of "immediate" maintenance for a sample kept on disk).

Reported per sync: seconds, rows read (delta, view, log) and written (sample rows changed,
rows rewritten on disk), the candidate log's length against E(|C|) = Σ M / (N + i) and the
final candidates Ψ against E(Ψ) = M (1 - (1 - 1/M)^|C|); and the refreshes' own CPU time on
that log (array, stack, nomem). Every method's sample is checked against the view.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from deltasieve_protocol.types import Column, LogicalType
from warehouse.names import DELETE, INSERT, OP, UPDATE
from warehouse.sample import refresh as sample_refresh
from warehouse.sample import view_sample
from warehouse.viewdef import SiteQuery, ViewDef

HERE = Path(__file__).resolve().parent
WORK = HERE / "work" / "sample"
COLUMNS = [
    Column("id", LogicalType.parse("int")),
    Column("name", LogicalType.parse("text")),
    Column("city", LogicalType.parse("text")),
    Column("score", LogicalType.parse("float")),
]
VIEW = ViewDef("SELECT ...", COLUMNS, ["id"], [SiteQuery("s", "", COLUMNS, ["id"])])
SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("city", pa.string()), ("score", pa.float64())])
CITIES = np.array(["Lyon", "Oslo", "Graz", "Turku", "Porto", "Brno", "Gent", "Split"])
#: (updates, deletes, inserts) as shares of the view, per sync: a quiet day, a usual one, a bulk load.
ROUNDS = [(0.001, 0.0001, 0.0005), (0.01, 0.001, 0.005), (0.01, 0.001, 0.005), (0.02, 0.002, 0.1), (0.01, 0.001, 0.005)]
BATCH = 65_536


def rows_of(rng: np.random.Generator, ids: np.ndarray, tag: int) -> pa.Table:
    n = len(ids)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": pa.array([f"student {i} v{tag}" for i in ids]),
            "city": pa.array(CITIES[rng.integers(0, len(CITIES), n)]),
            "score": pa.array(rng.random(n) * 100),
        },
        schema=SCHEMA,
    )


def write(rows: pa.Table, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    pq.write_table(rows, directory / "part-0.zstd.parquet", compression="zstd")
    return directory


def view_batches(path: Path):
    return lambda: iter(ds.dataset(path, format="parquet").to_batches(batch_size=BATCH))


def immediate(previous: pa.Table, target: int, n_before: int, delta: pa.Table, path: Path, rng) -> dict:
    """Per operation: deletes, updates, inserts (each insert's acceptance test, a candidate
    written over a random position at once), the sample rewritten after each change."""
    rows = previous
    writes = rows_changed = 0
    t0 = time.monotonic()

    def persist() -> None:
        nonlocal writes, rows
        rows = rows.combine_chunks()  # one chunk, as a fresh read of the sample would be
        pq.write_table(rows, path / "sample.parquet", compression="zstd")
        writes += 1

    keys = {k: i for i, k in enumerate(rows.column("id").to_pylist())}
    ops = delta.column(OP).to_pylist()
    ids = delta.column("id").to_pylist()
    n = n_before
    for j, (op, k) in enumerate(zip(ops, ids, strict=True)):
        if op == DELETE:
            n -= 1
            if k in keys:
                rows = rows.filter(pc.not_equal(rows.column("id"), k))
                keys = {key: i for i, key in enumerate(rows.column("id").to_pylist())}
                rows_changed += 1
                persist()
        elif op == UPDATE and k in keys:
            i = keys[k]
            rows = pa.concat_tables([rows.slice(0, i), delta.slice(j, 1).select(SCHEMA.names), rows.slice(i + 1)])
            rows_changed += 1
            persist()
        elif op == INSERT:
            n += 1
            if rng.random() < rows.num_rows / n:
                i = int(rng.integers(rows.num_rows))
                del keys[rows.column("id")[i].as_py()]
                rows = pa.concat_tables([rows.slice(0, i), delta.slice(j, 1).select(SCHEMA.names), rows.slice(i + 1)])
                keys[k] = i
                rows_changed += 1
                persist()
    return {"seconds": time.monotonic() - t0, "rows": rows, "rows_written": rows_changed, "sample_writes": writes}


def run(args: argparse.Namespace) -> dict:
    rng = np.random.default_rng(2026)
    WORK.mkdir(parents=True, exist_ok=True)
    n, m = args.rows, args.sample
    view = rows_of(rng, np.arange(n), 0)
    view_path = write(view, WORK / "view-0")
    next_id = n
    built = view_sample.maintain(
        None,
        view_sample.SampleSettings(m, ["id"], SCHEMA),
        view_sample.ViewChange(0, n, 0, lambda: iter([])),
        view_batches(view_path),
        np.random.default_rng(1),
    )
    sample = (built.rows, built.state)
    immediate_rows = built.rows
    syncs = []
    for r, (u, d, i) in enumerate(ROUNDS, start=1):
        ids = view.column("id").to_numpy()
        chosen = rng.choice(len(ids), size=int(n * (u + d)), replace=False)
        upd_ids, del_ids = ids[chosen[: int(n * u)]], ids[chosen[int(n * u) :]]
        ins_ids = np.arange(next_id, next_id + int(n * i))
        next_id += len(ins_ids)
        updated, inserted = rows_of(rng, upd_ids, r), rows_of(rng, ins_ids, r)
        deleted = view.filter(pc.is_in(view.column("id"), pa.array(del_ids)))
        delta = pa.concat_tables(
            [
                deleted.add_column(0, OP, pa.array([DELETE] * deleted.num_rows)),
                updated.add_column(0, OP, pa.array([UPDATE] * updated.num_rows)),
                inserted.add_column(0, OP, pa.array([INSERT] * inserted.num_rows)),
            ]
        )
        delta_path = write(delta, WORK / f"delta-{r}")
        gone = pa.array(np.concatenate([upd_ids, del_ids]))
        before = view.num_rows
        view = pa.concat_tables([view.filter(pc.invert(pc.is_in(view.column("id"), gone))), updated, inserted])
        view_path = write(view, WORK / f"view-{r}")
        truth = dict(zip(view.column("id").to_pylist(), view.column("name").to_pylist(), strict=True))

        t0 = time.monotonic()
        kept = view_sample.from_delta(
            sample, m, VIEW, delta_path, before, view.num_rows, len(del_ids), view_batches(view_path),
            np.random.default_rng(r),
        )  # fmt: skip
        deferred_s = time.monotonic() - t0
        t0 = time.monotonic()
        write(kept.rows, WORK / "deferred")
        deferred_s += time.monotonic() - t0
        sample = (kept.rows, kept.state)

        t0 = time.monotonic()
        scratch, read = view_sample.drawn(view_batches(view_path)(), m, None, ["id"], np.random.default_rng(r))
        write(scratch, WORK / "scratch")
        scratch_s = time.monotonic() - t0

        (WORK / "immediate").mkdir(exist_ok=True)
        imm = immediate(immediate_rows, m, before, delta, WORK / "immediate", np.random.default_rng(r))
        immediate_rows = imm["rows"]

        for name, rows in (("deferred", kept.rows), ("scratch", scratch), ("immediate", immediate_rows)):
            got = dict(zip(rows.column("id").to_pylist(), rows.column("name").to_pylist(), strict=True))
            assert all(truth.get(k) == v for k, v in got.items()), f"round {r}: the {name} sample is not the view's"
        refresh_cpu = {}
        for method in ("array", "stack", "nomem"):
            t0 = time.monotonic()
            sample_refresh.refresh(method, kept.rows.num_rows, kept.state.log_length, np.random.default_rng(7))
            refresh_cpu[method] = round(time.monotonic() - t0, 4)
        s = kept.state
        syncs.append(
            {
                "round": r,
                "view_rows": view.num_rows,
                "updates": len(upd_ids),
                "deletes": len(del_ids),
                "inserts": len(ins_ids),
                "deferred": {
                    "seconds": round(deferred_s, 3),
                    "view_rows_read": s.view_rows_read,
                    "log_length": s.log_length,
                    "expected_log_length": s.expected_log_length,
                    "displaced": s.displaced,
                    "expected_displaced": s.expected_displaced,
                    "method": s.method,
                    "rows_written": s.rows_written,
                    "size": s.size,
                },
                "scratch": {"seconds": round(scratch_s, 3), "view_rows_read": read, "rows_written": scratch.num_rows},
                "immediate": {
                    "seconds": round(imm["seconds"], 3),
                    "rows_written": imm["rows_written"],
                    "sample_writes": imm["sample_writes"],
                },
                "refresh_cpu_s": refresh_cpu,
            }
        )
        print(json.dumps(syncs[-1]), flush=True)
    return {"rows": n, "sample": m, "syncs": syncs}


def markdown(result: dict) -> str:
    out = [
        f"# Keeping a random sample: {result['rows']:,} rows, M = {result['sample']:,}",
        "",
        "Written by `python -m tests.benchmarks.sample` (`make bench-sample`). Per sync: the change, then each",
        "method's seconds and rows; the candidate log against E(|C|) and the final candidates Ψ against E(Ψ).",
        "",
        "| sync | change (upd / del / ins) | deferred s | log \\|C\\| (E) | Ψ (E) | refresh | rows written | from scratch s | view rows read | immediate s | sample rewrites |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in result["syncs"]:
        d, f, i = s["deferred"], s["scratch"], s["immediate"]
        out.append(
            f"| {s['round']} | {s['updates']:,} / {s['deletes']:,} / {s['inserts']:,} | {d['seconds']} | "
            f"{d['log_length']:,} ({d['expected_log_length']:,.1f}) | {d['displaced']:,} ({d['expected_displaced']:,.1f}) | "
            f"{d['method']} | {d['rows_written']:,} | {f['seconds']} | {f['view_rows_read']:,} | {i['seconds']} | "
            f"{i['sample_writes']:,} |"
        )
    deferred = statistics.median(s["deferred"]["seconds"] for s in result["syncs"])
    scratch = statistics.median(s["scratch"]["seconds"] for s in result["syncs"])
    immediate_s = statistics.median(s["immediate"]["seconds"] for s in result["syncs"])
    out += [
        "",
        f"Medians: deferred {deferred} s, from scratch {scratch} s, immediate {immediate_s} s per sync.",
        "",
        "Refreshes' CPU seconds on each sync's log (array / stack / nomem): "
        + "; ".join(
            f"sync {s['round']}: {s['refresh_cpu_s']['array']} / {s['refresh_cpu_s']['stack']} / {s['refresh_cpu_s']['nomem']}"
            for s in result["syncs"]
        ),
        "",
    ]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--sample", type=int, default=10_000)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "sample-1m")
    args = parser.parse_args()
    result = run(args)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1))
    args.out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
