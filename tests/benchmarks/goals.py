"""Where the goals stand: each measured goal of the performance and publishing issues, read from
the results files that measure it, with the distance when it is missed and what stands in the way.

    python -m tests.benchmarks.goals [--json]

Every figure is read from a committed results file (named in the row, with its date), never
typed here; a goal whose run has not been made says which command makes it. What stands in
the way is the one sentence per goal this module does carry: the reason found when the run
was studied (docs/benchmarks/notes.md has the longer story). `make docs` renders the page
(docs/benchmarks/results/goals.md) from the files as they are; this command prints it.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.benchmarks import compare, report, small_syncs
from tests.benchmarks.floors import steady_floor
from warehouse.spark import default_driver_memory

RESULTS = Path(__file__).resolve().parent / "results"


@dataclass(frozen=True)
class Goal:
    """One goal: at most `limit` of what `read` takes from the results file `file`."""

    name: str
    limit: float
    unit: str
    file: str
    read: Callable[[dict], float | None]
    command: str
    in_the_way: str
    #: The first date (ISO) of a run that measures it: a results file dated before holds no figure for it.
    since: str = ""


def auto(workload: str, figure: str) -> Callable[[dict], float | None]:
    """A steady-state figure of the default strategy on one workload of a benchmark run, as
    the before/after pages read it (compare.figures: "÷ floor", "× LB", "agent peak MiB")."""

    def read(results: dict) -> float | None:
        return compare.figures(results).get((workload, "auto"), {}).get(figure)

    return read


def first_and_quiet(workload: str, field: str) -> Callable[[dict], float | None]:
    """A figure of the default strategy's small and first syncs (small_syncs.rows): its
    first sync's bytes over full_ship's, or its no-change round's bodies both ways."""

    def read(results: dict) -> float | None:
        row = next((r for r in small_syncs.rows(results) if (r["workload"], r["strategy"]) == (workload, "auto")), {})
        value = row.get(field)
        return sum(value) if isinstance(value, tuple) else value

    return read


def quiet_over_floor(workload: str) -> Callable[[dict], float | None]:
    """The default strategy's no-change sync (one more sync after the last round, nothing
    changed at the source) over the steady rounds' floor on one workload of a benchmark run.

    >>> run = {"meta": {"rounds": 3}, "workloads": {"w": {"floor_rounds": [{}, {}, {"a": 2.0}, {"a": 2.0}],
    ...     "strategies": {"auto": {"rounds": [], "no_change": {"wall_s": 0.5}}}}}}
    >>> quiet_over_floor("w")(run)
    0.25
    """

    def read(results: dict) -> float | None:
        run = results["workloads"].get(workload, {})
        floor = steady_floor(run.get("floor_rounds", []), report.steady_rounds(results["meta"]["rounds"]))
        quiet = run.get("strategies", {}).get("auto", {}).get("no_change") or {}
        if not floor or quiet.get("error") or quiet.get("wall_s") is None:
            return None
        return quiet["wall_s"] / floor["seconds"]

    return read


def largest_over_smallest(source: str, figure: str) -> Callable[[dict], float | None]:
    """A per-row figure of the scale projection's largest sitting over its smallest (1.0: flat),
    read only when the largest holds 30M rows or more, the size the scale goal names.

    >>> doc = {"sittings": [{"source": "pg", "rows": 10**6, "s/M": 2.0}, {"source": "pg", "rows": 3 * 10**7, "s/M": 2.2}]}
    >>> round(largest_over_smallest("pg", "s/M")(doc), 2)
    1.1
    >>> largest_over_smallest("pg", "s/M")({"sittings": doc["sittings"][:1]}) is None
    True
    """

    def read(results: dict) -> float | None:
        sittings = sorted((s for s in results.get("sittings", []) if s["source"] == source), key=lambda s: s["rows"])
        if len(sittings) < 2 or sittings[-1]["rows"] < 30_000_000 or not sittings[0].get(figure):
            return None
        return sittings[-1][figure] / sittings[0][figure]

    return read


def small_sync_ms(rows: int, change: str) -> Callable[[dict], float | None]:
    """The in-process path's median service time (ms at the client) of a sync of a `rows`-row table
    with `change` ("none" or "1%") in the small-path run (tests/benchmarks/small_path.py).

    >>> run = {"cells": [{"path": "in-process", "rows": 1000, "change": "none", "client_ms": 41.5}]}
    >>> small_sync_ms(1000, "none")(run), small_sync_ms(1000, "1%")(run) is None
    (41.5, True)
    """

    def read(results: dict) -> float | None:
        found = [
            c["client_ms"]
            for c in results.get("cells", [])
            if (c["path"], c["rows"], c["change"]) == ("in-process", rows, change)
        ]
        return found[0] if found else None

    return read


def service_over_heap(source: str) -> Callable[[dict], float | None]:
    """The service's peak memory (its process, Spark's JVM and workers) in the scale projection's
    largest sitting of `source` over the Spark driver heap the service asks for by default on
    the machine that ran it (SERVICE_SPARK_DRIVER_MEMORY unset), read at 30M rows or more.

    >>> doc = {"machine": {"mem_total_kb": 24 * 2**20},
    ...        "sittings": [{"source": "pg", "rows": 3 * 10**7, "service peak MiB": 9216}]}
    >>> service_over_heap("pg")(doc)
    1.5
    """

    def read(results: dict) -> float | None:
        sittings = sorted((s for s in results.get("sittings", []) if s["source"] == source), key=lambda s: s["rows"])
        memory_kb = (results.get("machine") or {}).get("mem_total_kb")
        if not sittings or sittings[-1]["rows"] < 30_000_000 or not memory_kb:
            return None
        peak = sittings[-1].get("service peak MiB")
        heap = default_driver_memory("local[*]", memory_kb * 1024)  # "6144m"
        heap_mib = int(heap[:-1]) * (1024 if heap.endswith("g") else 1)
        return None if peak is None else peak / heap_mib

    return read


def summary(figure: str) -> Callable[[dict], float | None]:
    """A figure of a results file's flat summary.

    >>> summary("added_share")({"summary": {"added_share": 0.21}})
    0.21
    """
    return lambda results: (results.get("summary") or {}).get(figure)


def soak_late_percent(results: dict) -> float | None:
    """The tables soak's scheduled syncs that started later than its lateness bound (10 % of the
    period after they were due), in percent of its due syncs (soak_tables_summary.on_time).

    >>> soak_late_percent({"summary": {"lateness": {"syncs": 200, "on_time": 0.9712}}})
    2.88
    >>> soak_late_percent({"summary": {"lateness": {"syncs": 0, "on_time": None}}}) is None
    True
    """
    share = ((results.get("summary") or {}).get("lateness") or {}).get("on_time")
    return None if share is None else round(100 * (1 - share), 2)


def soak_growth_percent(figure: str) -> Callable[[dict], float | None]:
    """How much the tables soak's `figure` ("memory_kb" or "data_dir_bytes") grew over the run's
    second half, in percent (soak_summary.growth).

    >>> soak_growth_percent("memory_kb")({"summary": {"memory_kb": {"growth": 0.031}}})
    3.1
    """

    def read(results: dict) -> float | None:
        grew = ((results.get("summary") or {}).get(figure) or {}).get("growth")
        return None if grew is None else round(100 * grew, 2)

    return read


#: The runs that measure several goals each.
FLOORS_1M = (
    "python -m tests.benchmarks --full --workloads students --strategies auto --rows 1000000 --rounds 3 "
    "--out tests/benchmarks/results/floors-1m-read-ahead.json"
)
SQLITE_10M = (
    "python -m tests.benchmarks --10m --strategies auto --rounds 2 --out tests/benchmarks/results/10m-compiled.json"
)
GOALS = [
    Goal(
        "sync ÷ floor, SQLite, 1M rows",
        1.5,
        "×",
        "floors-1m-read-ahead.json",
        auto("students", "÷ floor"),
        FLOORS_1M,
        "the agent's read is most of the sync and runs a little slower than ADBC's SQLite driver alone, itself "
        "1.6× the sqlite3 shell's read of the same rows; the lookup by key and the main stage follow the read. Only a "
        "reader stepping SQLite's C API in compiled code, as the MariaDB reader does, would come near the floor",
    ),
    Goal(
        "sync ÷ floor, PostgreSQL, 1M rows",
        1.5,
        "×",
        "floors-1m-read-ahead.json",
        auto("students@postgres", "÷ floor"),
        FLOORS_1M,
        "the agent's read, binary COPY through ADBC in keyset chunks, is about 1.3× the floor (ADBC's decoding "
        "into Arrow); the key reconciliation's keys beside it, and the lookup of the changed rows after it",
    ),
    Goal(
        "sync ÷ floor, MariaDB, 1M rows",
        1.5,
        "×",
        "floors-1m-mariadb-read-ahead.json",
        auto("students@mariadb", "÷ floor"),
        "python -m tests.benchmarks --full --workloads students --strategies auto --rows 1000000 --rounds 3 "
        "--source mariadb --out tests/benchmarks/results/floors-1m-mariadb-read-ahead.json",
        "the agent's read, the C client's rows copied by a compiled loop and cast by Arrow, is about 1.9× the "
        "client's unconverted read of the whole table: each keyset chunk is its own statement and transaction, "
        "and the text protocol's values are parsed; the hash phase and the lookup by key after it",
    ),
    Goal(
        "sync ÷ floor, SQLite, 10M rows",
        1.5,
        "×",
        "10m-compiled.json",
        auto("students", "÷ floor"),
        SQLITE_10M,
        "as at 1M, the read through ADBC; this run's machine was busy with other work (its floor read 2.4× "
        "slower than a quiet run's), so the ratio is the same rounds' but the seconds are not a quiet machine's; "
        "the stored rows read ahead cover only the first 256 MiB of a 10M-row fragment",
    ),
    Goal(
        "sync ÷ floor, PostgreSQL, 10M rows",
        1.0,
        "×",
        "10m-postgres-read-ahead.json",
        auto("students@postgres", "÷ floor"),
        "python -m tests.benchmarks --10m --strategies auto --rounds 2 --source postgres --out "
        "tests/benchmarks/results/10m-postgres-read-ahead.json",
        "the sync is its agent's read, binary COPY through ADBC in keyset chunks, which takes about 1.9× the "
        "floor at 10M (1.3× at 1M): the hash overlaps it, but on two cores the reader's decoding and the hash "
        "share the CPU with PostgreSQL's own COPY process, which the floor has to itself; then the lookup and "
        "the service's own few seconds. Below 1× needs a sync that reads less than one export of the table: "
        "a change stamp (row_version reads only the changed rows), not a comparison of every row",
    ),
    Goal(
        "sync ÷ floor, MariaDB, 10M rows",
        1.5,
        "×",
        "10m-mariadb-read-ahead.json",
        auto("students@mariadb", "÷ floor"),
        "python -m tests.benchmarks --10m --strategies auto --rounds 2 --source mariadb --out "
        "tests/benchmarks/results/10m-mariadb-read-ahead.json",
        "the agent's read, the client's rows copied by a compiled loop in keyset chunks, takes about 1.8× the "
        "client's unconverted read of the whole table (each chunk its own statement, its values parsed from "
        "text, on two cores shared with the server and the hash); then the lookup of the changed rows by key, "
        "about half the floor at 10M, one statement per chunk of keys; and the warehouse's work on the cells "
        "after the agent's answer",
    ),
    Goal(
        "agent peak RSS at 10M rows",
        256,
        "MiB",
        "10m-compiled.json",
        auto("students", "agent peak MiB"),
        SQLITE_10M,
        "the agent's imports (~115 MiB RSS at start), its own sketch table (up to --sketch-table-mib) and the "
        "scan's working batches; the peak is the no-change or first sync's (docs/operations/memory.md)",
    ),
    Goal(
        "agent peak RSS at 1M rows",
        256,
        "MiB",
        "floors-1m-read-ahead.json",
        auto("students", "agent peak MiB"),
        FLOORS_1M,
        "",
    ),
    Goal(
        "bytes ÷ row-level lower bound, students at 1M rows",
        1.2,
        "×",
        "floors-1m-read-ahead.json",
        auto("students", "× LB"),
        FLOORS_1M,
        "the table sent to the agent is 0.9× the bound by itself (two pairs per updated row, 1.46 cells a pair "
        "at about 16 bytes); an update as one item, in cells chosen by key with sums modulo a prime from which "
        "a lone item's key divides out, estimates at 1.46× (cells of about 20 bytes that do not compress), and "
        "at 1.36× sized to the peeling threshold: 1.2× needs the table at half its bytes",
    ),
    Goal(
        "no-change sync ÷ floor, PostgreSQL, 1M rows",
        0.3,
        "×",
        "floors-1m-read-ahead.json",
        quiet_over_floor("students@postgres"),
        FLOORS_1M,
        "",
    ),
    Goal(
        "no-change sync ÷ floor, SQLite, 1M rows",
        0.3,
        "×",
        "floors-1m-read-ahead.json",
        quiet_over_floor("students"),
        FLOORS_1M,
        "",
    ),
    Goal(
        "sync time per row at 30M ÷ at 1M rows, PostgreSQL",
        1.1,
        "×",
        "scale-30m.json",
        largest_over_smallest("postgres", "sync s/M rows"),
        "python -m tests.benchmarks.scale run --rows 1000000,30000000 --sources postgres "
        "--dir tests/benchmarks/results/scale-30m --out tests/benchmarks/results/scale-30m.json",
        "finding the touched keys' old rows (read_touched): 0.08 s at 1M, 82 s at 30M for 400k keys scattered over "
        "every row group of a 1.2 GiB fragment, of which the read-ahead holds 256 MiB; it runs beside the exchange "
        "and outlasts the agent's answer (the agent's own read, hash and lookup stay flat per row)",
    ),
    Goal(
        "service peak memory at 30M rows ÷ its Spark driver heap, PostgreSQL",
        1.25,
        "×",
        "scale-30m.json",
        service_over_heap("postgres"),
        "python -m tests.benchmarks.scale run --rows 1000000,30000000 --sources postgres "
        "--dir tests/benchmarks/results/scale-30m --out tests/benchmarks/results/scale-30m.json",
        "the JVM keeps to its heap (a quarter of the machine's memory) and a little over; the service's own process "
        "holds the touched rows and the read-ahead in Arrow, and Spark's Python workers their buffers, which no heap "
        "setting bounds",
    ),
    Goal(
        "no-change sync, request and answer bodies",
        1024,
        "B",
        "small-syncs.json",
        first_and_quiet("students", "no_change_body_bytes"),
        "python -m tests.benchmarks --workloads students,churn-50 --strategies full_ship,auto --rows 200000",
        "",
    ),
    Goal(
        "first sync after the load, 50 % churn, × full_ship's bytes",
        1.1,
        "×",
        "small-syncs.json",
        first_and_quiet("churn-50", "over_full_ship"),
        "python -m tests.benchmarks --workloads students,churn-50 --strategies full_ship,auto --rows 200000",
        "",
    ),
    Goal(
        "publishing to Delta Lake and PostgreSQL, share added to a 1M-row sync",
        0.20,
        "",
        "publishing-1m.json",
        summary("added_share"),
        "make bench-publishing",
        "the Delta apply rewrites every file a scattered change touches (about 40 ms a file); "
        "deletion vectors would avoid it but raise the table's protocol past what Spark's file list reads. "
        "The run of 2026-11-30 doubled the Delta share of the quiet run of 2026-11-27 (0.14): it ran beside "
        "other test runs at low priority, and every row now carries the modes' two metadata columns; a quiet "
        "run is needed to tell the two apart",
    ),
    Goal(
        "no-change sync of a 1,000-row table, service time",
        50,
        " ms",
        "small-path.json",
        small_sync_ms(1000, "none"),
        "make bench-small",
        "the Spark path's fixed cost (its jobs, the Parquet staging, the version files, the Delta commit); "
        "a sync under SERVICE_SMALL_SYNC_ROWS takes the in-process path, which the run names per cell (executor)",
    ),
    Goal(
        "sync of a 1,000-row table with 1 % changed, service time",
        100,
        " ms",
        "small-path.json",
        small_sync_ms(1000, "1%"),
        "make bench-small",
        "as for the no-change sync, with the delta's build and its publishing to the default Delta table",
    ),
    Goal(
        "5,000 tables scheduled every 5 minutes: syncs starting over 10 % of the period late",
        5,
        " %",
        "soak-tables.json",
        soak_late_percent,
        "make soak",
        "the service syncs about half of what the schedules ask: its syncs' Python runs in one process, held "
        "to one core by the global lock (the agents answer in a few hundredths); "
        "syncing small views in more than one process, or a small sync's service cost cut to about 60 ms, is "
        "what 1,000 syncs a minute needs",
        since="2026-11-30",
    ),
    Goal(
        "5,000 tables: the service's memory growth over the soak's second half",
        5,
        " %",
        "soak-tables.json",
        soak_growth_percent("memory_kb"),
        "make soak",
        "memory held per view or per sync record",
        since="2026-11-30",
    ),
    Goal(
        "5,000 tables: the data directory's growth over the soak's second half",
        5,
        " %",
        "soak-tables.json",
        soak_growth_percent("data_dir_bytes"),
        "make soak",
        "retention not yet reached in 30 minutes: each view gets about three syncs and keeps 3, and each "
        "version of a large view writes its own copy of the sketch (about 12 bytes a row)",
        since="2026-11-30",
    ),
    Goal(
        "history ≤ 1.5× merge's publishing time at 1M rows (the worst of Delta Lake, PostgreSQL, Iceberg)",
        1.5,
        "×",
        "publishing-1m.json",
        summary("history_over_merge"),
        "make bench-publishing",
        "Delta Lake's merge applies a delta by rewriting the files it touches from the files kept in memory; "
        "soft_delete and history go through delta-rs's MERGE, about twice that. PostgreSQL's history closes the old "
        "versions and inserts the new in two statements where merge upserts in one. Iceberg's history is cheaper "
        "than its merge (appends beside an overwrite)",
        since="2026-11-30",
    ),
]


def _date(results: dict) -> str | None:
    return (results.get("meta") or {}).get("date") or results.get("date")


def standing(goal: Goal, results: dict | None) -> dict:
    """One goal's row: the figure measured, and whether it is met or by how much it is missed.

    >>> g = Goal("g", 1.5, "×", "f.json", lambda r: r["x"], "make bench", "the read")
    >>> standing(g, {"x": 3.0})["standing"], standing(g, {"x": 1.2})["standing"]
    ('missed: 2.0× the goal', 'met')
    >>> standing(g, None)["standing"]
    'not measured: make bench'
    """
    row = {"goal": f"≤ {goal.limit:g}{goal.unit}", "results": goal.file}
    value = None if results is None else goal.read(results)
    if value is None:
        return {**row, "measured": None, "date": None, "standing": f"not measured: {goal.command}", "in the way": ""}
    met = value <= goal.limit
    return {
        **row,
        "measured": round(value, 3),
        "date": (_date(results) or "")[:10] or None,
        "standing": "met" if met else f"missed: {value / goal.limit:.1f}× the goal",
        "in the way": "" if met else goal.in_the_way,
    }


def collect(results_dir: Path = RESULTS) -> dict:
    """{goal name: its row} over GOALS, each read from its results file when it exists."""
    rows = {}
    for goal in GOALS:
        path = results_dir / goal.file
        rows[goal.name] = standing(goal, json.loads(path.read_text()) if path.exists() else None)
    return rows


def markdown(rows: dict) -> str:
    """The page: how many goals are met, then one row per goal."""
    met = sum(r["standing"] == "met" for r in rows.values())
    measured = sum(r["measured"] is not None for r in rows.values())
    lines = [
        f"{met} of {len(rows)} goals met; {measured - met} missed; {len(rows) - measured} not measured yet. "
        "Each figure is the steady state of the results file named beside it (the date is the run's).",
        "",
        "| goal | limit | measured | standing | results | in the way |",
        "|---|---|---:|---|---|---|",
    ]
    for name, r in rows.items():
        measured_cell = "—" if r["measured"] is None else f"{r['measured']:g}"
        page = r["results"].removesuffix(".json").replace("/", "-")
        results = f"[{r['results']}]({page}.md) ({r['date']})" if r["date"] else f"{r['results']} (not there)"
        lines.append(f"| {name} | {r['goal']} | {measured_cell} | {r['standing']} | {results} | {r['in the way']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.goals", description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="print the rows as JSON instead of Markdown")
    args = parser.parse_args(argv)
    rows = collect()
    print(json.dumps(rows, indent=1, ensure_ascii=False) if args.json else markdown(rows), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
