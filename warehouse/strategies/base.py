"""What every strategy provides, and what it is given to work with.

A strategy is one way of finding a site query's delta by talking to the site's agent. Each
is a class in a module of its own, registered by name in `strategies/__init__.py`; the
site's sync (`site_sync.SiteRun`) runs the same steps whatever the strategy:

    plan        decide what to send, from the stored snapshot (staging files, metrics)
    exchange    send it and file the answer: returned rows, deleted keys
    follow_up   any further round the answer calls for (the group-hash regroup)
    fragment_build  what became of the keys the answer left out (FragmentBuild)
    delta_inputs  what the exact delta is built from (rows, deleted keys, keys vouched for)
    stage       keep its own state beside the new fragment, given how it was built

A strategy is created with what the sync knows when it starts (`SiteContext`: the sync's
own context, `SyncContext` of sync_context.py, and the site's share of it) and what
planning found of the stored snapshot (`Snapshot`); both are frozen, and each step hands
on what it gives (an `Answer`, a `Built`) rather than writing it into either. Each also
says what a sync would cost it in bytes, given the statistics, so that a choice
between strategies can compare them before any of them runs.
"""

from __future__ import annotations

import contextlib
import itertools
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Final, Literal

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from deltasieve_protocol import frames
from deltasieve_protocol.models import (
    ChangedSince,
    ChangeTokenOut,
    ExtractControl,
    FetchControl,
    SiteColumn,
    SiteSpec,
)
from deltasieve_protocol.types import Column, arrow_schema
from deltasieve_protocol.wire import COUNT, HASH, UID
from warehouse import faults
from warehouse.agent_client import AgentClient
from warehouse.executor import ARROW, ExecutorName
from warehouse.metrics import SiteMetrics, add_timings
from warehouse.names import spark_schema
from warehouse.planning.cost_model import CostModel
from warehouse.store.read_ahead import ReadAhead
from warehouse.store.sinks import Sink
from warehouse.store.versions import Version
from warehouse.strategies.sync_context import SyncContext
from warehouse.viewdef import SiteQuery

if TYPE_CHECKING:
    from warehouse.deltas.site_delta import DeltaResult
    from warehouse.deltas.touched_delta import TouchedDelta
    from warehouse.store.read_so_far import ReadSoFar

    #: A sync's classified tuples of a site, whichever way its fragment was built.
    ClassifiedTuples = DeltaResult | TouchedDelta

#: Rows per Arrow frame sent to the agent.
SEND_BATCH_ROWS = 65_536
#: Width of the per-tuple hashes of the tuple_hash strategy: b = 64 in the compressed record
#: ⟨K, b⟩ (key K, b-bit hash) of Labio and Garcia-Molina's snapshot-differential paper. A
#: miss needs a 64-bit collision under a per-sync seed, and a wider hash would double what
#: most of its request weighs.
TUPLE_HASH_BITS: Final = 64


def wire_hash_bits(bits: int) -> Literal[64, 128]:
    """`bits` (the view's hash width, validated with its options) as the wire names it.

    >>> wire_hash_bits(128)
    128
    """
    if bits == 64:
        return 64
    if bits == 128:
        return 128
    raise ValueError(f"hash_bits must be 64 or 128, not {bits}")


@dataclass(frozen=True)
class SiteEstimate:
    """What the statistics predict for the next sync of a site, as a strategy's cost needs it.

    >>> from warehouse.planning.cost_model import CostModel
    >>> est = SiteEstimate(1000, 0.01, 0.02, CostModel(50, 4, 16), 128, updates=10.0, updates_variance=9.9, inserts=20.0)
    >>> est.differences, est.deletes
    (60.0, 20.0)
    """

    rows: int  # tuples in the snapshot
    p_update: float  # mean chance that a tuple is updated before the next sync
    p_delete: float  # chance that a tuple is deleted before the next sync (deletion statistics)
    cost: CostModel  # measured bytes of a tuple, a key and a group hash
    hash_bits: int
    #: Σ over tuples of P(update t), and of P(update t)(1 − P(update t)) (update statistics); NaN: from
    #: `rows` and `p_update`, as Bernoulli updates.
    updates: float = math.nan
    updates_variance: float = math.nan
    #: Rows inserted per sync, on average (the deletion statistics' insert counts); NaN: taken equal to the deletes.
    inserts: float = math.nan
    #: Whether the update statistics hold observations (False on the first sync after a
    #: load: `updates` is then the prior's guess).
    observed: bool = True

    def __post_init__(self) -> None:
        if math.isnan(self.updates):
            object.__setattr__(self, "updates", self.rows * self.p_update)
            object.__setattr__(self, "updates_variance", self.rows * self.p_update * (1 - self.p_update))
        if math.isnan(self.inserts):
            object.__setattr__(self, "inserts", self.deletes)

    @property
    def deletes(self) -> float:
        return self.rows * self.p_delete

    @property
    def changes(self) -> float:
        """Expected changed tuples: updates, deletes and inserts."""
        return self.updates + self.deletes + self.inserts

    @property
    def differences(self) -> float:
        """Expected pairs (key, row hash) found on one side only: two per update, one per delete or insert."""
        return 2 * self.updates + self.deletes + self.inserts

    @property
    def differences_variance(self) -> float:
        """Their variance: Bernoulli updates (each worth two pairs) and deletes, Poisson inserts."""
        return 4 * self.updates_variance + self.rows * self.p_delete * (1 - self.p_delete) + self.inserts

    @property
    def full_bytes(self) -> float:
        """The whole site query on the wire (inserts and deletes taken as balancing)."""
        return self.rows * self.cost.tuple_bytes


def site_columns(columns: list[Column]) -> list[SiteColumn]:
    """Columns as a request's site query names them.

    >>> from deltasieve_protocol.types import LogicalType
    >>> site_columns([Column("id", LogicalType.parse("int"))])
    [SiteColumn(name='id', type='int')]
    """
    return [SiteColumn(name=c.name, type=str(c.type)) for c in columns]


@dataclass(frozen=True)
class Snapshot:
    """What the planning step found of a site's stored snapshot: the fragment and its statistics.

    A strategy is created with it (its steps read it, none writes it); a load has no
    fragment and no statistics but the assumed cost model.
    """

    cost: CostModel  # measured bytes of a tuple, a key and a group hash (assumed on a load)
    #: Makes the stored fragment with its update statistics columns as a Spark frame (`frame`),
    #: when a step first needs it: an exchange that reads the touched rows with Arrow never does,
    #: and making it costs a fifth of a second of calls into Spark; None on a load.
    read: Callable[[], DataFrame] | None = None
    estimate: SiteEstimate | None = None
    #: Σ(tno − 1) and Σ(uno − 1) over the snapshot: observations and updates seen.
    observed: tuple[int, int] = (0, 0)
    #: (tno, dno) of each sync in deletion statistics: tuples before it and tuples it deleted.
    history: tuple[tuple[int, int], ...] = ()
    #: Reads the same fragment as an Arrow table in this process, for the steps the Arrow
    #: executor runs (warehouse/executor.py); None on a load.
    read_table: Callable[[], pa.Table] | None = None

    @cached_property
    def frame(self) -> DataFrame | None:
        """The stored fragment with its update statistics columns (made once); None on a load."""
        return self.read() if self.read is not None else None

    @property
    def stored(self) -> DataFrame:
        """The fragment, which every step after a load's reads (a load has none)."""
        assert self.frame is not None, "a load has no stored fragment"
        return self.frame

    @cached_property
    def table(self) -> pa.Table:
        """The fragment read with Arrow (once), for a step on the Arrow executor (a load has none)."""
        assert self.read_table is not None, "a load has no stored fragment"
        return self.read_table()

    def on(self, executor: ExecutorName) -> DataFrame | pa.Table:
        """The fragment as `executor` works on it: an Arrow table in this process, or a Spark frame."""
        return self.table if executor == ARROW else self.stored

    @property
    def statistics(self) -> SiteEstimate:
        """The estimate, which every sync after a load has."""
        assert self.estimate is not None, "a load has no statistics"
        return self.estimate


class FragmentBuild(Enum):
    """How a site's next fragment is built from an answer: what the snapshot keys the
    answer neither returned nor reported deleted (the untouched ones) have become."""

    #: Untouched keys are found by comparing the whole snapshot (in Spark, or with
    #: Arrow on the driver of a small load).
    WHOLE = "whole"
    #: Every untouched key is unchanged: the touched tuples alone are compared, and the
    #: fragment may grow an overlay.
    TOUCHED = "touched"
    #: Every untouched key is gone (a full read): whole, on the driver when small.
    UNTOUCHED_GONE = "untouched_gone"


@dataclass(frozen=True)
class SiteContext:
    """One site's share of a sync, as a strategy sees it: the sync's context (Spark, the
    options, the seed of its hashes, its progress and traffic, the background builds of
    sketch tables) and what is the site's own."""

    sync: SyncContext
    index: int
    site: SiteQuery
    client: AgentClient
    staging: Path  # the site's folder in the sync's staging, made afresh for each attempt
    current: Version | None  # the version the site syncs from (None: a load)
    metrics: SiteMetrics  # the site's record (the sync's is `sync.metrics`)
    #: Sources on dump files: the dump of each table every request of this sync reads, once
    #: a strategy fixed them (snapshot_diff: those it compared, in a context of its own
    #: made with `replace`); None: each request reads the newest.
    dumps: dict[str, str] | None = None
    #: The rows a full read of the site received in the sync's failed attempts, kept to
    #: resume after (resumable.py); None: no attempt keeps rows for the next.
    resume: ReadSoFar | None = None

    def spec(self) -> SiteSpec:
        """The site query as the agent's requests carry it."""
        return SiteSpec(
            sql=self.site.sql,
            key=self.site.key,
            columns=site_columns(self.site.columns),
            dumps=self.dumps,
            read_from=self.site.read_from or None,
            policies=self.site.policies or None,  # type: ignore[arg-type]
            blocked=self.site.blocked or None,
        )

    def key_columns(self) -> list[Column]:
        return self.site.key_columns()

    def rows_schema(self) -> pa.Schema:
        return arrow_schema(self.site.columns)

    def key_schema(self) -> pa.Schema:
        """The Arrow schema of the site's key columns, in key order."""
        return self.site.key_schema()

    def deleted_schema(self) -> pa.Schema:
        return pa.schema([pa.field(UID, pa.int64()), *arrow_schema(self.key_columns())])

    def stored_rows(self, keys: pa.Table, snapshot: Snapshot, ahead: ReadAhead | None = None) -> pa.Table:
        """The `snapshot`'s stored rows (with update statistics) of `keys` (a table of the key columns). On the
        Arrow executor (warehouse/executor.py: a local master, whose driver is the only executor), Arrow reads the row groups whose key range holds
        one of the keys (layers.lookup; a fraction of a second at 1M rows, where a Spark job over the
        fragment took 1.6 s), taking those `ahead` decoded already (`read_ahead`); on a cluster, a
        broadcast semi-join on the executors."""
        from warehouse.store import layers  # layers reads fragments with this module's schemas

        if self.sync.executor == ARROW:
            assert self.current is not None, "a load has no stored rows"
            held = ahead.take() if ahead is not None else None
            if ahead is not None:
                self.metrics.read_ahead = ahead.report()
            return layers.lookup(self.current, self.index, self.site.columns, self.site.key, keys, held)
        probe = self.staging / "touched-keys.parquet"
        pq.write_table(keys, probe)
        probed = self.sync.spark.read.schema(spark_schema(self.key_columns())).parquet(str(probe))
        return snapshot.stored.join(F.broadcast(probed), self.site.key, "left_semi").toArrow()

    @contextlib.contextmanager
    def read_ahead(self, wanted: bool = True) -> Iterator[ReadAhead | None]:
        """The stored rows a later `stored_rows` will read, decoded from now on while the agent
        answers (store/read_ahead.py), to pass to `stored_rows`, and dropped on leaving; None
        unless `wanted`, where `stored_rows` reads with Spark, or where there is no fragment."""
        from warehouse.store import layers

        ahead = None
        if wanted and self.current is not None and self.sync.executor == ARROW:
            ahead = layers.read_ahead(self.current, self.index, self.site.columns)
        try:
            yield ahead
        finally:
            if ahead is not None:
                ahead.close()

    def tick(self, rows_received: int) -> None:
        """Report the exchange's progress, and let fault injection strike mid-answer."""
        said = {"phase": "exchange_units", "site": self.index, "rows_received": rows_received}
        self.sync.progress({**said, **self.sync.traffic()})
        faults.checkpoint("exchange_units")


@dataclass
class Answer:
    """Where an exchange filed the agent's answer (Parquet files in the site's staging)."""

    returned: list[Path]  # rows to compare with the snapshot: new, changed, shipped
    deleted: Path | None = None  # keys the agent reported gone (with their uid)
    summary: dict = field(default_factory=dict)  # the agent's summary frame
    #: The stored rows (with update statistics) of a superset of the keys the answer touched, when the
    #: strategy read them during its exchange (the delta is then built from them); None:
    #: site_sync reads them if it builds the delta from the touched keys alone.
    touched_rows: pa.Table | None = None
    #: The agent's answer to the change token that rode on the exchange's first request
    #: (`Strategy.exchange_carrying`); None when none rode, or the agent predates the field.
    change_token: ChangeTokenOut | None = None

    @property
    def unchanged(self) -> bool:
        """Whether the token that rode proved nothing changed: the agent read nothing, and
        the answer holds no row."""
        return self.change_token is not None and self.change_token.proves_unchanged


@dataclass
class DeltaInputs:
    """What the exact delta of a site is built from (see delta.build_delta)."""

    returned: DataFrame
    deleted_keys: DataFrame
    unchanged_keys: DataFrame  # snapshot keys the answer vouches for without returning them


@dataclass(frozen=True)
class Built:
    """What building a site's next fragment gave, for the strategy to stage what it keeps."""

    result: ClassifiedTuples  # the sync's classified tuples of the site
    #: The stored rows (with update statistics) of the keys the answer touched, when they were read (by the
    #: strategy during its exchange, or to build the delta from the touched keys alone);
    #: None: the delta was built over the snapshot without them.
    touched_rows: pa.Table | None = None


class Strategy(ABC):
    """One way to find a site query's delta; see the module's docstring."""

    name: ClassVar[str]

    def __init__(self, ctx: SiteContext, snapshot: Snapshot):
        self.ctx = ctx
        self.snapshot = snapshot

    @classmethod
    def create(cls, ctx: SiteContext, snapshot: Snapshot) -> Strategy:
        """The strategy that runs this site's sync (auto answers with the one it chose)."""
        return cls(ctx, snapshot)

    @classmethod
    def applies(cls, ctx: SiteContext) -> bool:
        """Whether this strategy can serve the site at all (auto's conditional candidates ask)."""
        return True

    @classmethod
    def create_load(cls, ctx: SiteContext, snapshot: Snapshot) -> Strategy | None:
        """The strategy of the view's first load when it must keep state of its own; None: the shared LOAD."""
        return None

    @abstractmethod
    def plan(self) -> None:
        """Prepare what to send from the snapshot (None on a first load)."""

    @abstractmethod
    def exchange(self) -> Answer:
        """Send the request(s) and file the answer."""

    def carries_token(self) -> bool:
        """Whether the exchange, as planned, can carry the change token on its first request
        (`exchange_carrying`); by default not: the token is asked on its own."""
        return False

    def exchange_carrying(self, since: str) -> Answer:
        """The exchange, its first request carrying the change token kept (`since`): the
        answer holds the agent's answer to it (`Answer.change_token`) and, when it is the
        same (`Answer.unchanged`), no row. Only where `carries_token`."""
        raise NotImplementedError(f"{self.name}'s first request does not carry the change token")

    def follow_up(self, answer: Answer) -> Answer:
        """A further round the answer calls for; none by default."""
        return answer

    def unchanged_keys(self) -> DataFrame | None:
        """Snapshot keys found unchanged without their rows travelling; None: no such keys."""
        return None

    def fragment_build(self) -> FragmentBuild:
        """What the untouched snapshot keys have become, after the exchange: so how the next
        fragment is built (by default, by comparing the whole snapshot)."""
        return FragmentBuild.WHOLE

    @classmethod
    @abstractmethod
    def expected_bytes(cls, estimate: SiteEstimate) -> float:
        """Bytes both ways a sync is expected to cost, given the statistics."""

    def stage(self, staged: Version, built: Built) -> None:  # noqa: B027 (optional hook: most strategies keep nothing)
        """Stage what the strategy keeps between syncs beside the new fragment, given how it
        was built; nothing by default."""

    def delta_inputs(self, answer: Answer) -> DeltaInputs:
        ctx, spark = self.ctx, self.ctx.sync.spark
        returned = spark.read.schema(spark_schema(ctx.site.columns)).parquet(*[str(p) for p in answer.returned])
        key_schema = spark_schema(ctx.key_columns())
        if answer.deleted is not None:
            deleted = spark.read.schema(key_schema).parquet(str(answer.deleted))
        else:
            deleted = spark.createDataFrame([], key_schema)
        unchanged = self.unchanged_keys()
        if unchanged is None:
            unchanged = spark.createDataFrame([], key_schema)
        return DeltaInputs(returned, deleted, unchanged)


@dataclass(frozen=True)
class Asks:
    """What an extract asks of the agent besides the rows (the change-stamp strategies' reads)."""

    source_clock: bool = False  # the database's clock
    query_plan: bool = False  # the database's plan of the query
    source_snapshot: bool = False  # its current snapshot
    changed_since: int | None = None  # an xid8: only the rows written since


#: An extract that asks for the rows alone.
ROWS_ONLY = Asks()


def extract_exchange(
    ctx: SiteContext,
    data: Iterable[bytes] = (),
    *,
    spec: SiteSpec | None = None,
    prefix: str = "",
    asks: Asks = ROWS_ONLY,
    resume_after: list | None = None,
) -> Answer:
    """One POST /v1/extract: the control frame, then the `data` frames; files the answer's frames.

    Broken units (units that lost tuples) go to `broken.parquet` for the group-hash follow-up.
    `spec` replaces the site query (e.g. narrowed to a range, or to its keys), `prefix` the
    staging files' names, and `asks` says what else the agent is asked for; `resume_after`
    asks a full read for the rows after that key only (strategies/resumable.py).
    """
    spec = spec or ctx.spec()
    control = ExtractControl(
        site=spec,
        seed=ctx.sync.seed,
        hash_bits=wire_hash_bits(ctx.sync.options.hash_bits),
        batch_rows=ctx.sync.options.batch_rows,
        tuple_hash_bits=TUPLE_HASH_BITS,
        source_clock=asks.source_clock,
        query_plan=asks.query_plan,
        source_snapshot=asks.source_snapshot,
        changed_since=None if asks.changed_since is None else ChangedSince(xmin=asks.changed_since),
        resume_after=resume_after,
        expected_rows=ctx.metrics.rows_before,
    )
    body = itertools.chain([frames.json_frame(frames.CONTROL, _control_fields(control))], data)
    answer, rows_received = _file_extract_answer(ctx, body, spec, prefix)
    _record_extract_summary(ctx.metrics, answer.summary, rows_received)
    return answer


#: Requests of an extract left out of its control frame when off, as an agent older than
#: them is sent.
OPTIONAL_REQUESTS = (
    "source_clock",
    "query_plan",
    "source_snapshot",
    "changed_since",
    "resume_after",
    "expected_rows",
)


def _control_fields(control: ExtractControl) -> dict:
    """The control frame's fields, without the optional requests that are off."""
    fields = control.model_dump()
    for name in OPTIONAL_REQUESTS:
        if not fields[name]:
            del fields[name]
    return fields


def _file_extract_answer(ctx: SiteContext, body: Iterable[bytes], spec: SiteSpec, prefix: str) -> tuple[Answer, int]:
    """Send `body` to POST /v1/extract and file the answer's frames in the staging (rows,
    deleted keys, broken units); the answer and the rows it returned."""
    returned_path, deleted_path = ctx.staging / f"{prefix}returned.parquet", ctx.staging / f"{prefix}deleted.parquet"
    hash_bits = ctx.sync.options.hash_bits
    broken_schema = pa.schema(
        [pa.field(UID, pa.int64()), pa.field(HASH, pa.binary(hash_bits // 8)), pa.field(COUNT, pa.int64())]
    )
    by_name = {c.name: c for c in ctx.site.columns}
    rows_schema = arrow_schema([by_name[c.name] for c in spec.columns])
    summary: dict = {}
    with (
        Sink(returned_path, rows_schema) as returned,
        Sink(deleted_path, ctx.deleted_schema()) as deleted,
        Sink(ctx.staging / f"{prefix}broken.parquet", broken_schema) as broken,
    ):
        sinks = {
            frames.UNGROUPED_ROWS: returned,
            frames.CHANGED_ROWS: returned,
            frames.DELETED_KEYS: deleted,
            frames.BROKEN_UNITS: broken,
        }
        for frame in ctx.client.exchange("/v1/extract", body):
            if frame.kind == frames.SUMMARY:
                summary = frame.json()
                continue
            sink = sinks.get(frame.kind)
            if sink is None:
                continue  # a newer agent's extra frame kinds are ignored
            sink.write(frame.batch())
            ctx.tick(returned.rows)
    return Answer([returned_path], deleted_path, summary), returned.rows


def _record_extract_summary(m: SiteMetrics, summary: dict, rows_received: int) -> None:
    """Copy what the agent's summary of an extract says into the site's metrics."""
    m.rows_scanned = summary.get("rows_scanned", 0)
    m.rows_received = rows_received
    m.groups_identical = summary.get("units_identical", 0)
    m.groups_changed = summary.get("units_changed", 0)
    m.groups_regrouped = summary.get("units_broken", 0)
    m.agent_seconds = summary.get("elapsed_s")
    m.agent_timings = add_timings(m.agent_timings, summary.get("timings"))
    m.agent_pacing = summary.get("pacing") or m.agent_pacing


def fetch_exchange(ctx: SiteContext, key_table: pa.Table, path: Path) -> int:
    """One POST /v1/fetch: the current rows of the keys of `key_table`, filed at `path`; how many came."""
    control = FetchControl(site=ctx.spec(), batch_rows=ctx.sync.options.batch_rows)

    def body() -> Iterator[bytes]:
        yield frames.json_frame(frames.CONTROL, control.model_dump())
        for batch in key_table.to_batches(max_chunksize=SEND_BATCH_ROWS):
            yield frames.arrow_frame(frames.FETCH_KEYS, batch)

    with Sink(path, ctx.rows_schema()) as sink:
        for frame in ctx.client.exchange("/v1/fetch", body()):
            if frame.kind == frames.ROWS:
                sink.write(frame.batch())
    return sink.rows
