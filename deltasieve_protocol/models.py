"""JSON control messages of the agent's API (bulk data travels in Arrow frames)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from deltasieve_protocol.defaults import DEFAULT_HASH_BITS, ROW_CHECK_BITS

#: 4: a peeled sketch sends updated rows as column digests, then only their changed cells
#: (POST /v1/sketch/cells); an agent of version 4 still answers requests of version 3 as
#: version 3 did (whole rows), and refuses any other with a 400 that names both versions.
PROTOCOL_VERSION = 4
#: Versions an agent answers (deps.version_mismatch).
SUPPORTED_PROTOCOLS = frozenset({3, 4})
#: Widest table (cells per sub-table) an agent builds for a sketch exchange: 2**21 cells in
#: each of three sub-tables take 126 MiB at an agent (21 bytes a cell); the widest a
#: fragment of 23 million rows stores.
MAX_SKETCH_WIDTH = 2**21


class SiteColumn(BaseModel):
    """One output column of the site query as the warehouse expects it."""

    name: str
    type: str = Field(description="logical type, as the agent's GET /v1/schema names it")


class SiteSpec(BaseModel):
    """The site query as the warehouse wants it run."""

    sql: str = Field(description="SELECT in the agent's dialect; the agent re-parses and validates it")
    key: list[str] = Field(min_length=1, description="output columns forming the key")
    columns: list[SiteColumn] = Field(
        description="expected output columns [{name, type}]; a mismatch fails the request"
    )
    dumps: dict[str, str] | None = Field(
        default=None,
        description="agents on a directory of dump files: the dump file to read for each named table (default: "
        "each table's newest); 410 when a named dump is gone. Agents on a database refuse it (400)",
    )
    read_from: dict[str, str] | None = Field(
        default=None,
        description="output columns the view reads as a stronger type than the source declares (its column_types): "
        "output column -> the logical type the source declares; `columns` gives the type to read it as "
        "(deltasieve_protocol/column_types.py names the pairs allowed). The agent reads such a value strictly: one that does "
        "not read as the asked type fails the request (409) naming its row's key. An agent that predates this "
        "field ignores it and refuses the request (409: the column's type differs from the one registered)",
    )

    policies: dict[str, Literal["hash", "mask"]] | None = Field(
        default=None,
        description="the view's column policies on output columns (output column -> policy), applied by the agent "
        "to each value it reads: `hash` (HMAC-SHA-256 under the agent's AGENT_HASH_KEY, hex text; `columns` gives "
        "the column as text) or `mask` (text: all but the last four characters replaced by '*'). An agent without "
        "AGENT_HASH_KEY refuses a hash (422, code hash_key_missing); a key column cannot have one (422)",
    )
    blocked: list[str] | None = Field(
        default=None,
        description="columns the view blocks, as `table.column` of the agent's names: the agent reads the request "
        "as if it did not expose them, so a query that names one is refused (403)",
    )

    @model_serializer(mode="wrap")
    def _without_read_from(self, handler: SerializerFunctionWrapHandler) -> dict:
        """Leave `read_from`, `policies` and `blocked` out when unused: a request as an older warehouse sent it."""
        data = handler(self)
        for name in ("read_from", "policies", "blocked"):
            if data.get(name) is None:
                data.pop(name, None)
        return data


class ChangedSince(BaseModel):
    """The rows a PostgreSQL source wrote since a snapshot (the row_version strategy)."""

    xmin: int = Field(
        ge=0,
        lt=2**63,
        description="the previous snapshot's xmin as a 64-bit transaction id (xid8, epoch included): the agent "
        "keeps the rows whose xmin (modulo 2^32) lies at or after it and before its current snapshot's xmax",
    )


class ExtractControl(BaseModel):
    """First frame of POST /v1/extract."""

    protocol: int = PROTOCOL_VERSION
    site: SiteSpec
    seed: int = Field(ge=0, lt=2**64, description="per-sync hash seed")
    hash_bits: Literal[64, 128] = DEFAULT_HASH_BITS
    batch_rows: int = Field(default=16_384, ge=1, le=1_000_000, description="rows per returned data frame")
    tuple_hash_bits: Literal[64, 128] = Field(default=64, description="width of the per-tuple hashes of T frames")
    source_clock: bool = Field(
        default=False,
        description="read the database's own clock before the scan and report it in the summary (source_clock): "
        "the timestamp strategy's watermark",
    )
    query_plan: bool = Field(
        default=False, description="report the database's plan of the site query (EXPLAIN, not run) in the summary"
    )
    source_snapshot: bool = Field(
        default=False,
        description="read the database's current snapshot before the scan and report it in the summary "
        "(source_snapshot: xmin, xmax and xip as 64-bit transaction ids, system_identifier, and the WAL positions "
        "wal_lsn and, on a standby, replayed_lsn): the row_version "
        "strategy's state. PostgreSQL only: other databases answer 422",
    )
    changed_since: ChangedSince | None = Field(
        default=None,
        description="narrow the site query to the rows of any of its tables written since the given snapshot's "
        "xmin (a predicate on the system column xmin that the agent builds itself). PostgreSQL only: other "
        "databases answer 422",
    )
    resume_after: list[int | str] | None = Field(
        default=None,
        max_length=64,
        description="a full read's retry (no units, no tuple hashes): read only the rows whose key comes strictly "
        "after this one (one value per key column, integers and text only), compared by the database as between "
        "two chunks; an answer that does so names it in the X-Resumed-After header, any other read from the start "
        "(deltasieve_protocol/resume.py). Left out when unused",
    )
    expected_rows: int | None = Field(
        default=None,
        ge=0,
        description="rows the warehouse expects the site query to hold (its stored fragment's): an agent reads a "
        "scan expected to be small in the answer's own thread rather than a reader process. A hint only; left out "
        "when unknown",
    )


class RangesControl(BaseModel):
    """First frame of POST /v1/ranges: range checksums (the range-checksum strategy)."""

    protocol: int = PROTOCOL_VERSION
    site: SiteSpec
    seed: int = Field(ge=0, lt=2**64)
    hash_bits: Literal[64, 128] = DEFAULT_HASH_BITS
    batch_rows: int = Field(default=16_384, ge=1, le=1_000_000)


class TokenCheck(BaseModel):
    """A change-token request inside another request's control message (SketchControl.change_token)."""

    since: str | None = Field(default=None, max_length=512, description="as ChangeTokenControl.since")


class SketchControl(BaseModel):
    """First frame of POST /v1/sketch: set reconciliation of the site query (the sketch strategy)."""

    protocol: int = PROTOCOL_VERSION
    site: SiteSpec
    seed: int = Field(
        ge=0, lt=2**64, description="the table's secret: seeds key fingerprints (seed), row hashes (seed + 1) and cells"
    )
    batch_rows: int = Field(default=16_384, ge=1, le=1_000_000)
    width: int | None = Field(
        default=None,
        ge=1,
        le=MAX_SKETCH_WIDTH,
        description="cells per sub-table of the agent's own table, a multiple of the sent table's width (default: "
        "the sent width). When wider, a table that does not peel is kept under a session id, and a wider table may follow",
    )
    session: str | None = Field(
        default=None,
        max_length=64,
        description="continue the exchange kept under this id (a failed stage's summary gives it): "
        "no new read of the site query; 410 once the agent no longer holds it",
    )
    row_check_bits: Literal[16, 64] = Field(
        default=64,
        description=f"bits of each updated row's row hash in UPDATED_DIGESTS frames: 64, or its low {ROW_CHECK_BITS} "
        "with the XOR of the whole ones in the summary (row_hash_xor). An agent that does not know this field sends "
        "64; the frame's column type says which came",
    )
    expected_rows: int | None = Field(
        default=None,
        ge=0,
        description="rows the warehouse expects the site query to hold, as in an extract request (a hint; left out "
        "when unknown)",
    )
    updated_rows: Literal["digests", "whole"] = Field(
        default="digests",
        description="how a stage that peels sends the rows updated on both sides: as column digests that a cells "
        "request (POST /v1/sketch/cells) completes, or whole in ROWS frames, as protocol 3 does: one request fewer, "
        "which the warehouse asks for when it expects few updated rows. An agent that does not know this field "
        "sends digests",
    )
    change_token: TokenCheck | None = Field(
        default=None,
        description="the change-token request riding on the first stage (no session): the agent reads the token "
        "before the site query and answers it in the summary (`change_token`, as POST /v1/change_token answers); "
        "when it equals `since` it ends there, reading no row (the summary's `unchanged`). An agent that does not "
        "know this field reads and answers without it: a summary without `change_token`",
    )


class SketchCellsControl(BaseModel):
    """First frame of POST /v1/sketch/cells: the cells of the updated rows a peeled sketch named."""

    protocol: int = PROTOCOL_VERSION
    site: SiteSpec
    seed: int = Field(ge=0, lt=2**64, description="the sketch's secret, as in the sketch request")
    session: str = Field(
        max_length=64,
        description="the session the sketch answer's summary named with its updated rows; 410 once not held",
    )


class FetchControl(BaseModel):
    """First frame of POST /v1/fetch: current rows for a set of keys."""

    protocol: int = PROTOCOL_VERSION
    site: SiteSpec
    batch_rows: int = Field(default=16_384, ge=1, le=1_000_000)


class SnapshotDiffControl(BaseModel):
    """First frame of POST /v1/snapshot_diff: the change between two dumps (agents on dump files)."""

    protocol: int = PROTOCOL_VERSION
    site: SiteSpec
    previous: dict[str, str] = Field(
        description="for each table of the site query, the dump file the warehouse's copy was made from; the "
        "current dumps are those of site.dumps, else the newest"
    )
    algorithm: Literal["window", "sort_merge", "partitioned_hash"] = Field(
        default="window",
        description="window: one pass over each dump in file order with aging buffers (bounded memory; records "
        "moved further than the buffers reach come as a delete and an insert of one key); sort_merge and "
        "partitioned_hash: exact outer joins whatever the order, spilling to the agent's cache directory",
    )
    block_rows: int = Field(
        default=1024, ge=1, le=1_000_000, description="window: records read from each dump at a time"
    )
    aging_rows: int = Field(
        default=100_000,
        ge=1,
        le=100_000_000,
        description="window: records each aging buffer holds; sort_merge: records sorted in memory per run",
    )
    batch_rows: int = Field(default=16_384, ge=1, le=1_000_000)


class ChangeTokenControl(BaseModel):
    """The only frame of POST /v1/change_token: has anything the site query reads changed since a token?

    The answer is one summary frame (`ChangeTokenOut`): the source's change token now, read
    before any row, and whether it equals `since` (remote_agent/change_tokens.py says what a
    token is on each engine). An agent that predates the endpoint answers 404: the warehouse
    then syncs as it always did.
    """

    protocol: int = PROTOCOL_VERSION
    site: SiteSpec
    since: str | None = Field(
        default=None,
        max_length=512,
        description="the token the agent gave before the read of the view version the warehouse holds; "
        "None: it holds none. When the agent's token now equals it, no committed write since could have "
        "changed what the site query reads, and the answer says so (`unchanged`) without reading a row",
    )


class ChangeTokenOut(BaseModel):
    """The summary frame answering POST /v1/change_token."""

    change_token: str | None = Field(
        default=None,
        description="the source's change token, read now (before any read that follows); None: this source gives "
        "none (`reason` says why), and every sync reads",
    )
    unchanged: bool = Field(default=False, description="whether the token equals the request's `since`")
    reason: str | None = Field(
        default=None, description="why there is no token (a dump directory, MariaDB, a standby, ...)"
    )
    elapsed_s: float = 0.0

    @property
    def proves_unchanged(self) -> bool:
        """Whether the answer proves that nothing changed since `since`: a token read, and equal to it.

        >>> ChangeTokenOut(change_token="a/1", unchanged=True).proves_unchanged, ChangeTokenOut(unchanged=True).proves_unchanged
        (True, False)
        """
        return self.unchanged and self.change_token is not None


class ColumnSampleRequest(BaseModel):
    """POST /v1/column_sample: read a bounded sample of one column as a stronger type (a view's column_types)."""

    protocol: int = PROTOCOL_VERSION
    table: str = Field(max_length=1000)
    column: str = Field(max_length=1000)
    read_from: str = Field(max_length=40, description="the logical type the source declares for the column")
    type: str = Field(max_length=40, description="the logical type to read it as")
    rows: int = Field(
        default=1000, ge=1, le=10_000, description="rows read at most: half the first in key order, half the last"
    )


class BadValue(BaseModel):
    """A value that does not read as the asked type, and the key of its row."""

    value: str = Field(description="the raw value, quoted (cut to 200 characters)")
    key: dict[str, str] = Field(description="the key of its row (primary key, else a unique key), values quoted")
    reason: str


class ColumnSampleOut(BaseModel):
    """What a column's sample held: values read, NULLs, and the first value that does not read."""

    rows_read: int
    nulls: int
    bad: BadValue | None = None


class ColumnOut(BaseModel):
    name: str
    type: str
    nullable: bool
    declared: str
    read_as: str | None = None
    policy: str | None = Field(
        default=None,
        description="the agent hashes every value of this column it reads (its --hash): the column is text, "
        "HMAC-SHA-256 hex digests (docs/operations/security.md)",
    )


#: What a relation an agent exposes is at the source (TableOut.kind).
TableKind = Literal["table", "partition", "view", "materialized view"]


class TableOut(BaseModel):
    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)
    name: str
    columns: list[ColumnOut]
    primary_key: list[str]
    unique_keys: list[list[str]] = []
    #: left out in the default schema, so that the answer for those tables is as it was
    schema_: str | None = Field(
        default=None,
        alias="schema",
        exclude_if=lambda v: v is None,
        description="the schema (PostgreSQL) or database (MySQL) of a table outside the connection's default one, "
        "whose name is then schema.table; left out in the default one",
    )
    #: left out for a table, so that the answer for tables is as it was
    kind: TableKind = Field(
        default="table",
        exclude_if=lambda v: v == "table",
        description="what the relation is at the source: a table (the default, left out), a partition of another "
        "table, a view or a materialized view; a mirror makes views of tables only",
    )
    parent: str | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="the table (as the agent names it) whose reads hold this one's rows: the root of a partitioned "
        "table, or the table this one inherits from; left out when none",
    )


class SchemaOut(BaseModel):
    dialect: str
    tables: list[TableOut]


class Health(BaseModel):
    status: Literal["ok"] = "ok"


class SchemaChangeOut(BaseModel):
    """A column of a site query whose type at the source is no longer the registered one."""

    #: The source table and column it is read from (table None: not known, e.g. gone).
    table: str | None
    column: str
    #: Logical types (deltasieve_protocol/types.py): when the view was registered, and now (None: gone).
    old: str
    new: str | None


class ErrorOut(BaseModel):
    """The body of every error answer: what went wrong and what to fix.

    `code` says what kind of error it is; the warehouse acts on it, never on `detail`'s words.
    """

    detail: str
    code: str | None = Field(
        default=None,
        description="what kind of error, for programs (deltasieve_protocol/error_codes.py; every error answer carries one): "
        "schema_changed (409; `changes` lists them); source_error (the database refused the read: `table`, "
        "`column` and `source_message` say where and what); unknown_site, busy, forbidden, unsupported_query, ...",
    )
    changes: list[SchemaChangeOut] | None = Field(
        default=None, description="schema_changed: the site query's columns whose type changed or that are gone"
    )
    table: str | None = Field(default=None, description="source_error: the table of the refused read, when known")
    column: str | None = Field(default=None, description="source_error: the column the database named, when it did")
    source_message: str | None = Field(default=None, description="source_error: the database's own message")
