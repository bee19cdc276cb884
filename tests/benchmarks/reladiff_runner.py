"""The `reladiff` strategy: the real reladiff tool, outside the service.

The workload's table is copied into a throwaway PostgreSQL server twice: database `legacy`
is the source, kept in step with the SQLite source after every round of the simulator
(pgsource.py; those writes are the legacy application's, not counted); database `warehouse` holds the
warehouse's copy as of the previous round. A sync runs reladiff's hashdiff (key ranges with
checksums, bisected) between the two, over the view's columns and with the view's WHERE,
connecting to the source as the read-only role through a byte-counting TCP proxy: its
bytes and request turns are the strategy's cost, as the agent's sockets are for the
others. The diff is turned into the view's delta (a key on both sides: update; only in
the source: insert; only in the copy: delete) for the oracle to check, and the round's true
change is then applied to the copy, so the next round diffs against the previous state.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
from sqlglot import exp, parse_one

from deltasieve_protocol.types import Column
from service.jsonvalues import to_json_value
from tests.benchmarks.pgsource import create_table, postgres_ddl, replace_rows, replay_change, sqlite_rows
from tests.benchmarks.strategies import Skipped, SyncResult
from tests.benchmarks.tcpproxy import ByteCountingProxy
from workloads.generators import Change, TableShape

#: reladiff's own defaults, named here because the results depend on them: 32 segments per
#: bisection step, segments under 16,384 rows are downloaded and compared row by row, and
#: one connection (thread) per database, as its command line uses by default.
BISECTION_FACTOR = 32
BISECTION_THRESHOLD = 16_384
THREADS = 1
#: reladiff warns that text columns get no cross-database normalization; both sides are
#: PostgreSQL here, so the warning (once per column per round) is noise in the log.
QUIET_LOGGERS = ("hashdiff_tables",)


@dataclass(frozen=True)
class SourceContext:
    """What an external strategy needs of the workload: its SQLite source and scratch space."""

    db: Path
    shape: TableShape
    work_dir: Path


@dataclass(frozen=True)
class SiteShape:
    """The parts of a site query reladiff needs: table, key, compared columns, filter."""

    table: str
    key: str  # source column of the view's key
    source_columns: list[str]  # in view order
    view_columns: list[str]
    where: str | None  # PostgreSQL, unqualified

    @classmethod
    def parse(cls, sql: str, key: list[str]) -> SiteShape:
        """Read a single-table site query (the benchmark's workloads are all of that form).

        >>> s = SiteShape.parse('SELECT "s"."id" AS "id", "s"."x" AS "y" FROM "t" AS "s" WHERE "s"."on" = 1', ["id"])
        >>> s.table, s.key, s.source_columns, s.view_columns, s.where
        ('t', 'id', ['id', 'x'], ['id', 'y'], '"on" = 1')
        """
        tree = parse_one(sql, read="sqlite")
        tables = list(tree.find_all(exp.Table))
        if len(tables) != 1 or len(key) != 1:
            raise ValueError(f"reladiff runner: only single-table views with a one-column key, not {sql!r}")
        sources, outputs = [], []
        for projection in tree.expressions:
            column = projection.this if isinstance(projection, exp.Alias) else projection
            if not isinstance(column, exp.Column):
                raise ValueError(f"reladiff runner: {projection.sql()} is not a plain column")
            sources.append(column.name)
            outputs.append(projection.alias_or_name)
        where = tree.args.get("where")
        where_sql = None
        if where is not None:
            unqualified = where.this.transform(
                lambda n: exp.column(n.name, quoted=True) if isinstance(n, exp.Column) else n
            )
            where_sql = unqualified.sql("postgres")
        return cls(tables[0].name, sources[outputs.index(key[0])], sources, outputs, where_sql)


def _from_reladiff(value: str | None, column: Column):
    """A value as reladiff prints it (normalized text) -> the JSON form of the service's rows."""
    if value is None:
        return None
    kind = column.type.kind
    if kind == "int":
        return int(value)
    if kind == "float":
        return float(value)
    if kind == "date":
        return value[:10]  # reladiff prints dates as timestamps: 2001-02-03 00:00:00.000000
    return value


class ReladiffRunner:
    """reladiff between the PostgreSQL source and the warehouse's copy, through a proxy."""

    #: reladiff talks to the database, not to the agent: no agent memory to report.
    uses_agent = False

    def __init__(self, api, strategy, view: str, sql: str, source: SourceContext):
        self.api = api
        self.strategy = strategy
        self.view = view
        self.sql = sql
        self.definition: dict = {}
        self.source = source
        self.pg = None
        self.proxy: ByteCountingProxy | None = None
        self._diffs: dict[str, list[dict]] = {}
        self._touched: list | None = None  # None: the copy is empty, the first sync loads it
        self._rounds = 0

    # -- setup -----------------------------------------------------------------------------
    def prepare(self) -> dict:
        """Define the view in the service too (never synced): the same site query as the others."""
        from workloads.postgres import start_postgres

        try:
            import psycopg2  # noqa: F401  (reladiff's PostgreSQL driver)
            import reladiff  # noqa: F401
        except ImportError as exc:
            raise Skipped(f"reladiff cannot run: {exc} (pip install -e '.[bench]')") from None
        r = self.api.http.post("/v1/views", json={"name": self.view, "sql": self.sql})
        if r.status_code != 201:
            raise RuntimeError(f"view {self.view} not created: {r.status_code} {r.text}")
        self.definition = definition = r.json()
        site = definition["sites"][0]
        self.site = SiteShape.parse(site["sql"], site["key"])
        self.columns = [Column.from_json(c) for c in site["columns"]]
        try:
            self.pg = start_postgres(self.source.work_dir, dbname="legacy")
        except RuntimeError as exc:
            raise Skipped(f"no PostgreSQL server for reladiff: {exc}") from None
        self.warehouse_url = self.pg.owner_url.rsplit("/", 1)[0] + "/warehouse"
        with psycopg.connect(self.pg.owner_url, autocommit=True) as conn:
            conn.execute("CREATE DATABASE warehouse OWNER owner")
        create_table(self.pg.owner_url, self.source.shape, self.source.db)
        with psycopg.connect(self.warehouse_url, autocommit=True) as conn:
            conn.execute(postgres_ddl(self.source.shape.ddl))
        self.proxy = ByteCountingProxy(self.pg.host, self.pg.port)
        # The source as reladiff sees it: the read-only role, through the proxy.
        self.source_url = self.pg.reader_url.replace(
            f"@{self.pg.host}:{self.pg.port}/", f"@{self.proxy.host}:{self.proxy.port}/"
        )
        return definition

    def close(self) -> None:
        if self.proxy:
            self.proxy.close()
        if self.pg:
            self.pg.stop()

    # -- keeping the PostgreSQL copies in step (not counted) -------------------------------
    def on_change(self, change: Change) -> None:
        replay_change(self.pg.owner_url, self.source.shape, self.source.db, change)
        if self._touched is not None:  # before the first sync, the whole table is copied anyway
            self._touched += list(dict.fromkeys(change.touched()))

    def _apply_true_change(self) -> None:
        """The copy takes the source's current rows of the keys the round touched (all, at first)."""
        keys = self._touched
        replace_rows(self.warehouse_url, self.source.shape, keys, sqlite_rows(self.source.db, self.source.shape, keys))
        self._touched = []

    # -- a sync ------------------------------------------------------------------------------
    def sync(self) -> SyncResult:
        import reladiff

        self._rounds += 1
        for name in QUIET_LOGGERS:
            logging.getLogger(name).setLevel(logging.ERROR)
        sync_id = f"reladiff-{self._rounds}"
        extra = tuple(c for c in self.site.source_columns if c != self.site.key)
        before = self.proxy.traffic()
        started = time.perf_counter()
        try:
            copy = reladiff.connect_to_table(
                self.warehouse_url, self.source.shape.table, self.site.key, thread_count=THREADS
            )
            source = reladiff.connect_to_table(
                self.source_url, self.source.shape.table, self.site.key, thread_count=THREADS
            )
            with reladiff.diff_tables(
                copy,
                source,
                extra_columns=extra,
                where=self.site.where,
                algorithm="hashdiff",
                bisection_factor=BISECTION_FACTOR,
                bisection_threshold=BISECTION_THRESHOLD,
                allow_empty_tables=True,
            ) as diff:
                found = list(diff)
            copy.database.close()
            source.database.close()
        except Exception as exc:  # the tool's failure is this strategy's failed sync, not the run's
            return SyncResult(
                {"id": sync_id, "status": "failed", "error": f"reladiff: {type(exc).__name__}: {exc}", "metrics": {}},
                time.perf_counter() - started,
            )
        wall = time.perf_counter() - started
        traffic = self.proxy.since(before)
        delta = self._delta(found)
        self._diffs[sync_id] = delta
        self._apply_true_change()
        counts = {op: sum(1 for d in delta if d["op"] == op) for op in ("insert", "update", "delete")}
        metrics = {
            "bytes_to_agent": traffic.to_server,
            "bytes_from_agent": traffic.from_server,
            "round_trips": traffic.round_trips,
            "connections": traffic.connections,
            "wall_seconds": round(wall, 3),
            "rows_inserted": counts["insert"],
            "rows_updated": counts["update"],
            "rows_deleted": counts["delete"],
            "diff_rows": len(found),
        }
        return SyncResult({"id": sync_id, "status": "succeeded", "error": None, "metrics": metrics}, wall)

    def _delta(self, found: list) -> list[dict]:
        """reladiff's '-' (copy) and '+' (source) rows -> the view's {op, row} delta."""
        minus, plus = {}, {}
        for sign, values in found:
            row = {name: _from_reladiff(v, c) for name, v, c in zip(self.site.view_columns, values, self.columns)}
            (plus if sign == "+" else minus)[
                row[self.site.view_columns[self.site.source_columns.index(self.site.key)]]
            ] = row
        out = [{"op": "update" if k in minus else "insert", "row": row} for k, row in plus.items()]
        out += [{"op": "delete", "row": row} for k, row in minus.items() if k not in plus]
        return out

    def delta(self, result: SyncResult) -> Iterator[dict]:
        return iter(self._diffs.get(result.record["id"], []))

    def rows(self) -> Iterator[dict]:
        """The warehouse copy's rows of the view, after this round's change was applied."""
        where = f" WHERE {self.site.where}" if self.site.where else ""
        select = ", ".join(f"{s} AS {v}" for s, v in zip(self.site.source_columns, self.site.view_columns))
        with psycopg.connect(self.warehouse_url) as conn:
            for row in conn.execute(f"SELECT {select} FROM {self.source.shape.table}{where}"):
                yield {name: to_json_value(v) for name, v in zip(self.site.view_columns, row)}
