"""Drive every strategy through the same rounds of the same workloads and record each sync.

For one workload on one source (a *leg*): build the legacy SQLite table (with `--source
postgres` or `--source mariadb`, copy it into a server of that engine started for the leg,
and replay every round's changes there: pgsource.py, mysqlsource.py), start an agent on
the source, define one view per strategy over the same SQL, then round 0 loads every view
and each later round applies one change of the simulator and syncs every strategy's view
in turn. The oracle gives the round's true delta (hence the lower bound) and checks every
sync: its metrics' counts and its delta against the true delta, and on the verified rounds
all of the view's rows against the source. Each round also measures the floor a sync is set
against: the engine's fastest bulk read of the same site query (floors.py). After the last round, a no-change round syncs
every strategy once more with nothing changed at the source (its delta must be empty); it
is kept apart from the rounds (`no_change` of the workload and of each strategy), so no
steady-state figure includes it. One service process serves all legs, so Spark starts
once; its memory (the service process and its Spark JVM) is sampled throughout.
"""

from __future__ import annotations

import secrets
import shutil
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from deltasieve_protocol.types import Column
from tests.benchmarks import floors, machine
from tests.benchmarks.mysqlsource import MariadbSource, MariadbTruth
from tests.benchmarks.oracle import PostgresTruth, SourceTruth, TrueDelta
from tests.benchmarks.pgsource import PostgresSource
from tests.benchmarks.reladiff_runner import SourceContext
from tests.benchmarks.strategies import STRATEGIES, Skipped, SyncResult, make_runner
from workloads import netns
from workloads.generators import WORKLOADS, Workload
from workloads.harness import Api, start_agent, start_service

#: Rows of the warm-up view: enough to run every step of a sync, too few to cost time.
WARM_UP_ROWS = 2_000
#: The engines a leg's source can be on; SQLite is the simulator's own file.
SOURCES = ("sqlite", "postgres", "mariadb")
#: The server engines: the server started for a leg and kept in step, and its truth reader.
SERVERS = {"postgres": (PostgresSource, PostgresTruth), "mariadb": (MariadbSource, MariadbTruth)}
#: Each engine's name in the log.
ENGINE_NAMES = {"sqlite": "SQLite", "postgres": "PostgreSQL", "mariadb": "MariaDB"}
#: Metrics of a sync record copied into each round as they are.
COPIED_METRICS = (
    "rows_scanned",
    "rows_received",
    "rows_inserted",
    "rows_updated",
    "rows_deleted",
    "rows_before",
    "rows_after",
    "groups_sent",
    "groups_identical",
    "groups_changed",
    "groups_regrouped",
    "groups_regrouped_changed",
    "tuples_grouped",
    "tuples_ungrouped",
    "expected_benefit_bytes",
    "full_ship_estimate_bytes",
    "realized_benefit_bytes",
    # of the bytes, those of the requests' and answers' bodies (HTTP's headers left out)
    "body_bytes_to_agent",
    "body_bytes_from_agent",
    "agent_seconds",
    "cost_model",
    "planning",
    "expected_bytes",
    "chosen",
    "sketch_cells",
    "sketch_bytes",
    "sketch_stages",
    "sketch_rebuilt",
    "sketch_prepared",
    "sketch_built_inline_s",
    "sketch_waited_s",
    "differences_expected",
    "differences_found",
    "peel_failed",
    "fallback",
    "phases",
    # the agent's own split of its seconds (read, convert, hash, send, lookup, wait), where the service reports it
    "agent_timings",
    "connections",
    # the change-stamp strategies' reports: rows of the ranged read, keys reconciled, index used
    "timestamp",
    "row_version",
    # the stored rows decoded beside the exchange (store/read_ahead.py): seconds, row groups, bytes
    "read_ahead",
)

#: Seconds between samples of the agent's process tree: a reader lives for one scan.
AGENT_TREE_INTERVAL_S = 0.2


@dataclass
class RunConfig:
    name: str
    rows: int
    rounds: int
    workloads: list[str]
    strategies: list[str]
    #: "every": all rows of every view checked every round; "ends": on round 0 and the last
    #: round only; "last": on the last round only (the others are checked through their deltas).
    verify: str
    work_dir: Path
    seed: int = 7
    keep_work: bool = False
    rows_by_workload: dict[str, int] = field(default_factory=dict)
    reductions: list[str] = field(default_factory=list)
    link_mbit: float | None = None
    warm_up: bool = True
    #: After the last round, sync every strategy once more with no change at the source.
    no_change_round: bool = True
    #: The source of every workload not in `sources_by_workload`.
    source: str = "sqlite"
    #: Workloads run on several sources, each a leg of its own, in this order.
    sources_by_workload: dict[str, list[str]] = field(default_factory=dict)
    #: Workloads that run fewer (or other) strategies than `strategies`.
    strategies_by_workload: dict[str, list[str]] = field(default_factory=dict)
    #: Why the profile's sizes are what they are (recorded in the results' meta).
    plan: str | None = None

    def rows_for(self, workload: str) -> int:
        return self.rows_by_workload.get(workload, self.rows)

    def legs(self) -> list[Leg]:
        """Every workload on each of its sources, with its rows and strategies."""
        return [
            Leg(w, source, self.rows_for(w), list(self.strategies_by_workload.get(w, self.strategies)))
            for w in self.workloads
            for source in self.sources_by_workload.get(w, [self.source])
        ]


@dataclass(frozen=True)
class Leg:
    """One workload on one source engine, with its size and its strategies."""

    workload: str
    source: str
    rows: int
    strategies: list[str]

    @property
    def key(self) -> str:
        """Its name in the results: the workload's, with the engine unless it is SQLite.

        >>> Leg("students", "sqlite", 10, ["auto"]).key, Leg("students", "postgres", 10, ["auto"]).key
        ('students', 'students@postgres')
        >>> Leg("students", "mariadb", 10, ["auto"]).key
        'students@mariadb'
        """
        return self.workload if self.source == "sqlite" else f"{self.workload}@{self.source}"


def _mib(n: float) -> str:
    return f"{n / 2**20:,.2f} MiB" if n >= 2**20 else f"{n / 1024:,.1f} KiB"


class WorkloadRun:
    """One leg: a workload's source, its agent, one runner per strategy, all rounds."""

    def __init__(self, config: RunConfig, api: Api, leg: Leg, work_dir: Path, log):
        self.config = config
        self.api = api
        self.leg = leg
        self.workload: Workload = WORKLOADS[leg.workload]
        self.dir = work_dir
        self.log = log
        self.slug = leg.key.replace("-", "_").replace("@", "_")
        self.link: netns.Link | None = None
        #: The leg's server (PostgreSQL or MariaDB), None on SQLite.
        self.server: PostgresSource | MariadbSource | None = None
        self.runners: list = []
        self.result: dict = {
            **self.workload.to_json(),
            "workload": leg.workload,
            "source": leg.source,
            "strategies_run": leg.strategies,
            "rows": leg.rows,
            "lower_bound_bytes": [],
            "column_lower_bound_bytes": [],
            "true_delta": [],
            "changes": [],
            "view_rows": [],
            # per round, each floor method's seconds (floors.py); methods that failed, and why
            "floor_rounds": [],
            "floor_failed": {},
            "strategies": {},
            "skipped": {},
        }

    def run(self) -> dict:
        wl, res = self.workload, self.result
        if self.leg.source in SERVERS and self.config.link_mbit:
            raise ValueError(
                f"a {ENGINE_NAMES[self.leg.source]} source listens on loopback: it cannot sit behind --link-mbit"
            )
        self.dir.mkdir(parents=True, exist_ok=True)
        db = self.dir / f"{self.slug}.db"
        sim = wl.simulator(db, seed=self.config.seed)
        started = time.perf_counter()
        sim.create(res["rows"])  # in batches: memory does not grow with the rows
        res["generate_s"] = round(time.perf_counter() - started, 2)
        res["source_bytes"] = db.stat().st_size
        self.log(
            f"[{self.leg.key}] {res['rows']:,} rows generated in {res['generate_s']:.1f} s ({res['source_bytes'] / res['rows']:.0f} B/row in SQLite)"
        )
        try:
            db_url = f"sqlite:///{db}"
            if self.leg.source in SERVERS:
                engine, name = self.leg.source, ENGINE_NAMES[self.leg.source]
                self.server = SERVERS[engine][0](wl.shape, db, self.dir)
                # postgres_load_s, postgres_bytes; mariadb_load_s, mariadb_bytes
                res[f"{engine}_load_s"] = round(self.server.load(), 2)
                res[f"{engine}_bytes"] = self.server.size_bytes()
                db_url = self.server.reader_url
                self.log(
                    f"[{self.leg.key}] copied into {name} in {res[f'{engine}_load_s']:.1f} s ({res[f'{engine}_bytes'] / res['rows']:.0f} B/row with its index)"
                )
            self._serve(sim, db_url)
        finally:
            if self.server:
                self.server.stop()
        return res

    def _serve(self, sim, db_url: str) -> None:
        """Start the agent on the source and play the rounds."""
        token = secrets.token_hex(16)  # hex: a token starting with "-" would read as a flag
        # with a link: the agent and its database on a legacy host behind a tbf rate limit
        with netns.legacy_host(self.config.link_mbit) if self.config.link_mbit else nullcontext() as link:
            self.link = link
            where = {"host": link.ns_ip, "prefix": link.prefix()} if link else {}
            agent = start_agent(db_url, self.dir, token=token, allow=[self.workload.shape.table], **where)
            # the agent's tree: its fork server and the reader process of each scan (readahead.py)
            self.agent_tree = machine.TreeRssSampler(agent.proc.pid, AGENT_TREE_INTERVAL_S, machine.pss_kb)
            try:
                self.result["agent_rss_at_start_kb"] = machine.peak_rss_kb(agent.proc.pid)
                self.result["agent_tree_pss_at_start_kb"] = self.agent_tree.sample()
                with self.agent_tree:
                    self._rounds(sim, agent, token)
            finally:
                for r in self.runners:
                    r.close()
                agent.stop()
                self.link = None

    def _prepare(self, sim, token: str, agent_url: str) -> list:
        source = f"src_{self.slug}"
        self.api.add_source(source, agent_url, token)
        sql = self.workload.shape.view_sql.format(source=source)
        self.result["view_sql"] = sql
        runners = self.runners
        context = SourceContext(sim.path, self.workload.shape, self.dir)
        for name in self.leg.strategies:
            runner = make_runner(
                self.api,
                STRATEGIES[name],
                f"{self.slug}_{name}",
                sql,
                source=context,
                options=self.workload.shape.view_options,
            )
            try:
                runners.append(runner)  # closed at the end even if prepare fails midway
                runner.prepare()
            except Skipped as exc:
                self.result["skipped"][name] = str(exc)
                self.log(f"[{self.leg.key}] {name}: skipped — {exc}")
                runners.remove(runner)
                runner.close()
                continue
        if not runners:
            raise RuntimeError(f"no strategy of {self.leg.strategies} can run")
        return runners

    def _rounds(self, sim, agent, token: str) -> None:
        res, cfg = self.result, self.config
        runners = self._prepare(sim, token, agent.url)
        site = runners[0].definition["sites"][0]
        for r in runners[1:]:
            if r.definition["sites"][0]["sql"] != site["sql"]:
                raise RuntimeError("strategies' views have different site queries")
        res["site_sql"] = site["sql"]
        columns = [Column.from_json(c) for c in site["columns"]]
        if self.server:
            truth = SERVERS[self.leg.source][1](self.server.reader_url, site["sql"], columns, site["key"])
        else:
            truth = SourceTruth(sim.path, site["sql"], columns, site["key"])
        per_sync_rss = machine.reset_peak_rss(agent.proc.pid)
        res["agent_peak_rss_scope"] = (
            "per sync (VmHWM reset before each)" if per_sync_rss else "agent lifetime, shared by all strategies"
        )
        live = {r.strategy.name: r for r in runners}
        for r in runners:
            res["strategies"][r.strategy.name] = {"description": r.strategy.description, "rounds": []}

        for rnd in range(cfg.rounds + 1):
            change = sim.change() if rnd else None
            if change and self.server:
                self.server.follow(change)  # the same round's work, on the agent's source
            if change:
                for runner in live.values():
                    runner.on_change(change)
            res["changes"].append(change.counts() if change else {"inserted": res["rows"], "updated": 0, "deleted": 0})
            floor = self._floor(truth)
            res["floor_rounds"].append(floor)
            delta = truth.load() if rnd == 0 else truth.advance(change.touched())
            full = rnd == cfg.rounds or cfg.verify == "every" or (rnd == 0 and cfg.verify == "ends")
            if full and rnd:
                fp = truth.rescan()
                if fp != truth.fingerprint:
                    raise RuntimeError(
                        f"oracle out of step with the source after round {rnd}: the simulator touched keys it did not report"
                    )
            res["lower_bound_bytes"].append(delta.lower_bound_bytes)
            res["column_lower_bound_bytes"].append(delta.column_lower_bound_bytes)
            res["true_delta"].append(delta.counts())
            res["view_rows"].append(truth.fingerprint.count)
            for name, runner in list(live.items()):
                record = self._sync(runner, agent, truth, delta, rnd, full, per_sync_rss)
                res["strategies"][name]["rounds"].append(record)
                self._progress(rnd, name, record, delta, floor)
                if record.get("error"):
                    res["strategies"][name]["failed"] = record["error"]
                    del live[name]  # its view is behind now; later rounds would only repeat the failure
            if not live:
                break
        if cfg.no_change_round and live:
            self._no_change_round(live, agent, truth, per_sync_rss)
        for entry in res["strategies"].values():
            syncs = [*entry["rounds"], *([entry["no_change"]] if "no_change" in entry else [])]
            for peak in ("agent_peak_rss_kb", "agent_tree_peak_pss_kb"):
                entry[peak] = max((r[peak] for r in syncs if r.get(peak)), default=None)

    def _floor(self, truth: SourceTruth) -> dict[str, float]:
        """This round's floor: each method's seconds reading the site query where the oracle reads it."""
        return floors.measure(self.leg.source, truth.db, self.result["site_sql"], self.result["floor_failed"])

    def _no_change_round(self, live: dict, agent, truth: SourceTruth, per_sync_rss: bool) -> None:
        """One more sync of every strategy still running, with nothing changed at the source.

        Recorded apart from the rounds, as the workload's `no_change` (true delta, lower
        bound, floor) and each strategy's `no_change` sync record (`"no_change": true`). It is
        checked like a round: its metrics' counts and its delta against the true delta, which
        is empty, and all of the view's rows with `--verify every`.
        """
        res, cfg = self.result, self.config
        rnd = cfg.rounds + 1
        floor = self._floor(truth)
        delta = truth.advance([])  # the simulator did nothing: no key was touched
        full = cfg.verify == "every"
        res["no_change"] = {
            "round": rnd,
            "changes": {"inserted": 0, "updated": 0, "deleted": 0},
            "true_delta": delta.counts(),
            "lower_bound_bytes": delta.lower_bound_bytes,
            "column_lower_bound_bytes": delta.column_lower_bound_bytes,
            "view_rows": truth.fingerprint.count,
            "floor": floor,
        }
        for name, runner in live.items():
            record = self._sync(runner, agent, truth, delta, rnd, full, per_sync_rss)
            record["no_change"] = True
            res["strategies"][name]["no_change"] = record
            self._progress(rnd, name, record, delta, floor, label="quiet")
            if record.get("error"):
                res["strategies"][name]["failed"] = record["error"]

    def _sync(
        self, runner, agent, truth: SourceTruth, delta: TrueDelta, rnd: int, full: bool, per_sync_rss: bool
    ) -> dict:
        rss_before = machine.rss_kb(agent.proc.pid)
        if per_sync_rss:
            machine.reset_peak_rss(agent.proc.pid)
        self.agent_tree.reset()
        counters = self.link.counters() if self.link else None
        result: SyncResult = runner.sync()
        rss = machine.peak_rss_kb(agent.proc.pid) if runner.uses_agent else None
        self.agent_tree.sample()
        tree, tree_split = self.agent_tree.peak_kb, self.agent_tree.peak_by_process
        m = result.record.get("metrics") or {}
        record = {
            "round": rnd,
            "bytes_to_agent": m.get("bytes_to_agent"),
            "bytes_from_agent": m.get("bytes_from_agent"),
            "bytes": (m.get("bytes_to_agent") or 0) + (m.get("bytes_from_agent") or 0),
            "round_trips": m.get("round_trips"),
            "wall_s": round(result.wall_s, 3),
            "sync_wall_s": m.get("wall_seconds"),
            "exact": False,
            "verified": "full" if full else "delta",
            "agent_peak_rss_kb": rss,
            "agent_rss_before_kb": rss_before,  # a reset peak starts here: memory the agent kept from earlier syncs
            # the agent with its fork server and reader processes: their summed PSS, sampled (each shared page counted once)
            "agent_tree_peak_pss_kb": tree if runner.uses_agent else None,
            "agent_tree_peak_pss_by_process_kb": tree_split if runner.uses_agent else None,
        }
        record.update({k: m[k] for k in COPIED_METRICS if k in m})
        record.update(site_timings(m.get("sites") or []))
        calls = [call for site in m.get("sites") or [] for call in site.get("calls") or []]
        if calls:  # each request's bytes, bodies and headers apart (agent_client.Call)
            record["calls"] = calls
        if counters is not None:
            seen = self.link.counters() - counters
            record["link_bytes_to_agent"], record["link_bytes_from_agent"] = seen.tx_bytes, seen.rx_bytes
        if not result.ok:
            record["error"] = result.record.get("error") or result.record.get("status")
            return record
        started = time.perf_counter()
        problems = self._check(runner, result, truth, delta, rnd, full)
        record["check_s"] = round(time.perf_counter() - started, 3)
        record["exact"] = not problems
        if problems:
            record["problems"] = problems[:10]
        return record

    def _check(
        self, runner, result: SyncResult, truth: SourceTruth, delta: TrueDelta, rnd: int, full: bool
    ) -> list[str]:
        m = result.record["metrics"]
        problems = []
        want, got = (
            delta.counts(),
            {"inserted": m.get("rows_inserted"), "updated": m.get("rows_updated"), "deleted": m.get("rows_deleted")},
        )
        if want != got:
            problems.append(f"metrics count {got}, true delta {want}")
        if rnd:  # round 0's delta is the whole view: the full check below covers it
            problems += truth.check_delta(runner.delta(result), delta)
        if full:
            found = truth.check_rows(runner.rows())
            if found:
                problems += found + truth.explain(runner.rows())
        return problems

    def _progress(self, rnd: int, name: str, r: dict, delta: TrueDelta, floor: dict, label: str | None = None) -> None:
        label = label or ("load" if rnd == 0 else f"{rnd}/{self.config.rounds}")
        lb, clb = delta.lower_bound_bytes, delta.column_lower_bound_bytes
        ratio = f"{r['bytes'] / lb:8.1f}x LB" if lb else " " * 11
        ratio += f" {r['bytes'] / clb:6.1f}x CLB" if clb else " " * 11
        status = (
            "exact"
            if r["exact"]
            else (
                "FAILED: " + str(r.get("error"))[:200]
                if r.get("error")
                else "NOT EXACT: " + "; ".join(r.get("problems", []))[:300]
            )
        )
        rss = f"{r['agent_peak_rss_kb'] / 1024:5.0f} MiB" if r.get("agent_peak_rss_kb") else "    ? MiB"
        if r.get("agent_tree_peak_pss_kb"):
            rss += f" (PSS with readers {r['agent_tree_peak_pss_kb'] / 1024:.0f} MiB)"
        self.log(
            f"[{self.leg.key}] round {label:>5} {name:<15} {_mib(r['bytes']):>12} {ratio} "
            f"(to {_mib(r['bytes_to_agent'] or 0)}, from {_mib(r['bytes_from_agent'] or 0)}, {r['round_trips']} rt)  "
            f"{r['wall_s']:6.1f} s = {_per_floor(r['wall_s'], floor)}  agent {rss}  {status}"
        )


def _per_floor(wall_s: float, floor: dict) -> str:
    """A sync's seconds over its round's floor, for the log: "2.1x floor (psql COPY text 0.61 s)".

    >>> _per_floor(1.22, {"psql COPY text": 0.61, "adbc": 0.9}), _per_floor(1.0, {})
    ('   2.0x floor (psql COPY text 0.61 s)', 'no floor')
    """
    best = floors.fastest(floor)
    if best is None:
        return "no floor"
    return f"{wall_s / best[1]:6.1f}x floor ({best[0]} {best[1]:.2f} s)"


def source_label(sources) -> str:
    """The engines of a run's legs, in the order of SOURCES: "sqlite", "postgres", "sqlite+postgres".

    >>> source_label(["postgres", "sqlite", "postgres"])
    'sqlite+postgres'
    >>> source_label(["mariadb"]), source_label(["mariadb", "sqlite", "postgres"])
    ('mariadb', 'sqlite+postgres+mariadb')
    """
    seen = set(sources)
    return "+".join(s for s in SOURCES if s in seen)


def site_timings(sites: list[dict]) -> dict:
    """The per-site timings of a sync's metrics, as they are, under the names a round keeps.

    >>> site_timings([{"phases": {"plan_groups": 0.5}, "agent_timings": {"read_s": 1.0}}])
    {'site_phases': [{'plan_groups': 0.5}], 'site_agent_timings': [{'read_s': 1.0}]}
    >>> site_timings([{"phases": {}}])
    {'site_phases': [{}]}
    """
    out = {}
    if sites:
        out["site_phases"] = [s.get("phases") or {} for s in sites]
    if any(s.get("agent_timings") for s in sites):
        out["site_agent_timings"] = [s.get("agent_timings") or {} for s in sites]
    return out


def _warm_up(api: Api, work_dir: Path, log) -> float:
    """Load and sync a tiny view twice, so the first measured sync does not pay for warming up the JVM."""
    started = time.perf_counter()
    workload = WORKLOADS["students"]
    sim = workload.simulator(work_dir / "warm-up.db")
    sim.create(WARM_UP_ROWS)
    token = secrets.token_hex(16)  # hex: a token starting with "-" would read as a flag
    agent = start_agent(f"sqlite:///{sim.path}", work_dir, token=token, allow=[workload.shape.table])
    try:
        api.add_source("warm_up", agent.url, token)
        # group_hash, named (auto is the default): the warm-up the published figures had
        api.add_view("warm_up", workload.shape.view_sql.format(source="warm_up"), strategy="group_hash")
        for rnd in range(2):
            if rnd:
                sim.change()
            if api.sync("warm_up")["status"] != "succeeded":
                raise RuntimeError(f"the warm-up sync failed; see the logs in {work_dir.parent}")
    finally:
        agent.stop()
    elapsed = time.perf_counter() - started
    log(f"warmed up in {elapsed:.1f} s")
    return round(elapsed, 1)


def run(config: RunConfig, log=print) -> dict:
    """Run every leg of `config`; returns the results (see `report.write`)."""
    legs = config.legs()
    unknown = [leg.workload for leg in legs if leg.workload not in WORKLOADS]
    unknown += [s for leg in legs for s in leg.strategies if s not in STRATEGIES]
    unknown += [leg.source for leg in legs if leg.source not in SOURCES]
    if unknown:
        raise ValueError(f"unknown workloads, strategies or sources: {unknown}")
    started = time.perf_counter()
    results = {
        "meta": {
            **machine.describe(),
            "name": config.name,
            "rows": config.rows,
            "rows_by_workload": {leg.key: leg.rows for leg in legs},
            "rounds": config.rounds,
            "seed": config.seed,
            "workloads": [leg.key for leg in legs],
            "strategies": config.strategies,
            "source": source_label(leg.source for leg in legs),
            "legs": {
                leg.key: {
                    "workload": leg.workload,
                    "source": leg.source,
                    "rows": leg.rows,
                    "strategies": leg.strategies,
                }
                for leg in legs
            },
            "plan": config.plan,
            "verify": config.verify,
            "warm_up": config.warm_up,
            "link_mbit": config.link_mbit,
            "no_change_round": config.no_change_round,
            "reductions": config.reductions,
            "definitions": {
                "bytes": "bytes_to_agent + bytes_from_agent of the sync: every byte on the agent's sockets, HTTP headers and framing included",
                "lower_bound_bytes": "zstd Arrow IPC frames (<= 16,384 rows each, as the agent frames rows) of the view's true delta: new and updated rows in full, deleted keys",
                "column_lower_bound_bytes": "the same, but each update ships only its key and the values it changed: new rows in full, then the updated keys beside each other column's changed values (null where unchanged, the null bitmap standing for a presence bitmap), deleted keys",
                "wall_s": "time of POST /syncs?wait=true as seen by the client",
                "floor_rounds": "per round, before the syncs, the seconds of each method reading every row of the view's site query at the source with the engine's own bulk path, once each, streamed: adbc-driver-sqlite into Arrow and the sqlite3 shell to /dev/null (SQLite); adbc-driver-postgresql (COPY binary) into Arrow, psycopg COPY (FORMAT binary) blocks and psql's COPY text to /dev/null (PostgreSQL); the mariadb client --quick --batch to /dev/null and mysqlclient's _mysql use_result without decoders (MariaDB). The round's floor is the fastest; floor = the median of the steady rounds' floors, the method fastest most often and each method's median; floor_failed = methods that could not run, and why",
                "source": "the engine the agent reads: sqlite (the simulator's file), postgres (a PostgreSQL server started for the leg, loaded by COPY from the SQLite file; each round's updates, deletes and inserts replayed there as UPDATE, DELETE and COPY) or mariadb (a MariaDB server started for the leg, InnoDB, loaded by multi-row INSERTs from the SQLite file; each round's work replayed there as UPDATE, DELETE and INSERT); a workload on another engine than SQLite is named workload@engine (students@postgres, students@mariadb)",
                "phases": "seconds of the sync's steps (extract_sites, build_fragments, assemble_view, commit), as the service times them; site_phases: per site, its extraction's steps (project_snapshot, plan_groups, exchange_units, regroup)",
                "agent_seconds": "the agent's own time answering the sync's extract requests, as it reports it; agent_timings / site_agent_timings: its split into reading, converting, hashing, sending and looking up, where the service reports it",
                "service_peak_rss_kb": "highest summed VmRSS of the service process and all its descendants (its Spark JVM and the JVM's forked Python workers, whose shared pages count in each; a vfork child that shares the JVM's memory until its exec is not counted twice), sampled every 0.5 s from /proc over the leg (per workload) and over the whole run (meta), warm-up included; service_peak_rss_by_process_kb splits the peak sample per command (a Python's -m module, else the program)",
                "reladiff": "the reladiff tool (hashdiff, its default bisection) between a PostgreSQL copy of the source and the warehouse's previous copy; bytes_to_agent/bytes_from_agent = bytes to/from the source database through a counting TCP proxy, round_trips = request turns summed over its connections",
                "exact": "the sync succeeded, its metrics' counts and its delta equal the true delta, and (on verified='full' rounds) the view's rows equal the source",
                "link_mbit": "with --link-mbit: the agent and its database run in a network namespace joined to the service's by a veth pair with a tc tbf limit of this rate on both ends, so wall_s includes the link; reladiff, which does not go through the agent, is not behind it",
                "no_change": "after the last round, one more sync of every strategy with no change at the source; each strategy's `no_change` record (flagged \"no_change\": true, round = rounds + 1) and the workload's `no_change` (its empty true delta) are kept apart from `rounds`, so no steady-state median includes them",
                "link_bytes_to_agent": "with --link-mbit: bytes of the Ethernet frames the link carried towards the agent during the sync (TCP/IP headers included); link_bytes_from_agent likewise",
            },
        },
        "workloads": {},
    }
    shutil.rmtree(config.work_dir, ignore_errors=True)
    config.work_dir.mkdir(parents=True)
    log(f"service starting (Spark takes a few seconds); work dir {config.work_dir}")
    service = start_service(config.work_dir / "warehouse", config.work_dir)
    api = Api(service.url, timeout=3600)
    failed = False
    memory = machine.TreeRssSampler(service.proc.pid)
    overall = 0
    try:
        with memory:
            results["meta"]["warm_up_s"] = _warm_up(api, config.work_dir / "warm-up", log) if config.warm_up else None
            for leg in legs:
                run_ = WorkloadRun(config, api, leg, config.work_dir / leg.key, log)
                results["workloads"][leg.key] = run_.result
                run_started = time.perf_counter()
                overall = max(overall, memory.reset() or 0)
                try:
                    run_.run()
                except Exception as exc:  # one broken workload should not cost the others' numbers
                    failed = True
                    run_.result["error"] = f"{type(exc).__name__}: {exc}"
                    log(f"[{leg.key}] ERROR {run_.result['error']}")
                finally:
                    run_.result["elapsed_s"] = round(time.perf_counter() - run_started, 1)
                    run_.result["service_peak_rss_kb"] = memory.peak_kb
                    run_.result["service_peak_rss_by_process_kb"] = memory.peak_by_process
                    # the source is not needed any more; at 1M wide rows it is a gigabyte
                    if not config.keep_work and not failed:
                        (config.work_dir / leg.key / f"{run_.slug}.db").unlink(missing_ok=True)
    finally:
        api.close()
        service.stop()
        results["meta"]["service_peak_rss_kb"] = max(overall, memory.peak_kb or 0) or None
        results["meta"]["service_rss_samples"] = memory.samples
        results["meta"]["elapsed_s"] = round(time.perf_counter() - started, 1)
        if config.keep_work or failed:
            log(f"work dir kept: {config.work_dir} (agent and service logs are there)")
        else:
            shutil.rmtree(config.work_dir, ignore_errors=True)
    return results
