"""Request and response models of the service API."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from warehouse.destinations import available
from warehouse.destinations.object_storage import on_object_store, refused_option
from warehouse.strategies import STRATEGIES
from warehouse.view_options import (
    DEFAULT_DESTINATIONS,
    DEFAULT_LAG_S,
    DEFAULT_MODE,
    DEFAULT_RECONCILE_EVERY,
    DEFAULT_SCHEMA_POLICY,
    DEFAULT_STRATEGY,
    DestinationMode,
    IcebergCatalog,
    MetadataColumns,
    SchemaPolicy,
    SnapshotDiffSettings,
)

#: The longest name of a source or a view.
NAME_MAX_LENGTH = 63
NAME_PATTERN = rf"^[A-Za-z_][A-Za-z0-9_]{{0,{NAME_MAX_LENGTH - 1}}}$"


#: The names of warehouse/strategies, in their order: the API accepts exactly these. The type
#: checker sees a str (it cannot read a Literal built at run time); pydantic and the OpenAPI
#: document see the Literal.
if TYPE_CHECKING:
    Strategy = str
else:
    Strategy = Literal[tuple(STRATEGIES)]


STRATEGY_HELP = "how syncs find changes: auto (the default for new views: per site and per sync, whichever of sketch, group_hash and full_ship the statistics expect to move the fewest bytes), sketch (set reconciliation of (key, row hash) pairs with an IBLT sized from the statistics), group_hash (Lu, Liu and Hyland's delta extraction: groups of stable tuples with one hash each), tuple_hash (one 64-bit hash per tuple), range_checksum (key ranges with checksums, bisected), full_ship (the whole site query), timestamp (the rows stamped since the last sync's watermark, the source's clock, minus timestamp_lag_s, plus a key-only reconciliation for deletes, and a full reconciliation every reconcile_every syncs; needs timestamps for every table), row_version (PostgreSQL sources only: the rows written since the last sync's snapshot, by their xmin, plus the same key reconciliation and full reconciliations), snapshot_diff (sources that are directories of dump files: the agent compares the current dump with the one the view was last synced from and ships only the differential; settings in snapshot_diff). Whatever the strategy, the first sync of a view is a load (the site queries shipped whole)"


#: What a strategy does with a setting of another family of strategies (warehouse/view_options.py).
UNREAD_HELP = "another strategy answers it with 422 unless it is left at its default"
TIMESTAMPS_HELP = f"{{TABLE: COLUMN}}: the last-modified column of each table (TABLE as `table` or `source.table`), of a timestamp type; read by strategy timestamp, where a NULL timestamp counts as changed at every sync, and by auto (timestamp is its candidate where every table has one); {UNREAD_HELP}"
COLUMN_TYPES_HELP = (
    "{COLUMN: TYPE}: read a source column as a stronger logical type than it is declared with, e.g. "
    '{"orders.updated_at": "timestamp"} for ISO text in a SQLite TEXT column. COLUMN is `table.column`, or '
    "`source.table.column` where the table comes from several sources; the column must be selected and not part of "
    "the key. Allowed (declared -> asked): text -> int, decimal(p,s), bool, date, timestamp, timestamptz; "
    "int -> bool; decimal(p,s) -> int; timestamps as text in UTC, written YYYY-MM-DD HH:MM:SS[.ffffff] or with a T, "
    "no zone, Z or +00:00. Checked when the view is defined on a sample of the values (422 quoting one that does "
    "not read, with its row's key); a value that does not read later fails the sync, naming its row's key"
)
DELETE_FLAGS_HELP = "{TABLE: COLUMN}: a soft-delete marker; a row whose flag is set (not NULL, not FALSE, not 0) is left out of the view, whatever the strategy"
LAG_HELP = f"seconds the timestamp strategy (and auto) reads before the last watermark, for rows committed after it with an older stamp; {UNREAD_HELP}"
RECONCILE_HELP = f"the timestamp and row_version strategies (and auto) reconcile the view in full (with the strategy auto would choose) every this many syncs; {UNREAD_HELP}"
SNAPSHOT_DIFF_HELP = f"strategy snapshot_diff (and auto on dump sources): the differential algorithm the agent runs over the previous and the current dump — window (Labio and Garcia-Molina's window algorithm: one pass in file order with two aging buffers of aging_rows records; records moved further come as useless delete+insert pairs, which the warehouse folds), sort_merge or partitioned_hash (exact whatever the order, spilling to disk); {UNREAD_HELP}"


class SnapshotDiffIn(SnapshotDiffSettings):
    # the settings as the view stores them (warehouse/view_options.py): the same fields, defaults and bounds
    model_config = ConfigDict(extra="forbid")


#: Longest timestamp_lag_s accepted: a day.
MAX_LAG_S = 86_400


#: The largest sample a view may keep (its rows are held in memory while a sync keeps it).
MAX_SAMPLE_SIZE = 1_000_000
SCHEMA_POLICY_HELP = (
    "what a sync does when a column the view reads changed at its source: evolve (a lossless widening such as "
    "decimal(14,2) to decimal(16,4) is taken in place, the stored rows cast, no reload; anything else fails the "
    "sync with error_code schema_changed) or freeze (every such change fails the sync so). Changes invisible at "
    "the view's logical types (int to bigint, real to double precision, varchar(n) to text) pass under both"
)
SAMPLE_HELP = (
    "keep a uniform random sample of at most this many of the view's rows (0: none), maintained from each "
    "sync's delta (Gemulla and Lehner's deferred maintenance: candidate log, stack/nomem refresh) and "
    "committed with the view's version; GET /v1/views/{name}/sample reads it"
)


MATCH_HELP = (
    "a view over tables without a key (a multiset) only: at each sync the rows that vanished and the rows that "
    "appeared are paired by the constrained left-outer BestmatchJoin (the window algorithm of TU München, rows "
    "in order_by order): a pair qualifies when every epsilon column differs by at most its epsilon, and is kept "
    "unless another qualifying row is closer in one column and no farther in any; each pair is an update "
    '(its old row in "old"), the rest stay deletes and inserts'
)


class MatchIn(BaseModel):
    """How a multiset view pairs vanished and appeared rows into updates."""

    model_config = ConfigDict(extra="forbid")
    order_by: str = Field(description="the numeric column the window moves along; one of the epsilon columns")
    epsilon: dict[str, float] = Field(
        max_length=64, description="{COLUMN: NUMBER}: numeric columns and how far a pair may differ in each (>= 0)"
    )


#: The shortest schedule period (short ones serve tests; a sync of a real view takes longer).
MIN_EVERY_S = 1
#: The longest schedule period: a year.
MAX_EVERY_S = 366 * 86_400
SCHEDULE_HELP = (
    "run the view's syncs on a schedule: a sync starts every_s seconds after the view's last sync ended, "
    "whatever started it (a view never synced is due at once); syncs of a view never overlap, runs missed "
    "while the service was down make one sync when it starts, and a failed sync is retried a period later. "
    "null: no schedule"
)


class ScheduleIn(BaseModel):
    """When the service syncs a view by itself."""

    model_config = ConfigDict(extra="forbid")
    every_s: int = Field(
        ge=MIN_EVERY_S,
        le=MAX_EVERY_S,
        strict=True,
        description=f"seconds from the end of one sync of the view to the start of the next scheduled one, a whole number from {MIN_EVERY_S} to {MAX_EVERY_S} (a year)",
    )


#: What `sql` and `table` of a view are, for the API's documentation.
SQL_HELP = (
    "the view's SELECT, tables written source.table (source.schema.table outside the connection's default "
    "schema); exactly one of sql and table"
)
TABLE_HELP = (
    "a table view: every column of this table, written source.table (source.schema.table outside the "
    "connection's default schema), keyed by its primary key, else a unique key over NOT NULL columns, else "
    "none (a multiset view); exactly one of sql and table"
)


#: Most columns a table view or a mirror may leave out (exclude_columns).
MAX_EXCLUDED_COLUMNS = 1_000
#: Most column policies and row filters of one view or mirror.
MAX_POLICIES = 1_000
POLICY_COLUMNS_HELP = (
    'column policies the agent applies inside the read: {"table.column" (or "source.table.column"): "block" | '
    '"hash" | "mask"}. block: never read (a table view leaves it out; a view given as SQL may not read it); hash: '
    "HMAC-SHA-256 under the agent's AGENT_HASH_KEY, as 64 hex characters (a text column; deterministic, so joins "
    'on it hold); mask: a text column\'s last four characters kept, the others replaced by "*". Not on a key column. '
    "In a PUT, left out: kept"
)
ROW_FILTER_HELP = (
    'rows the agent reads at all, per table: {"table" (or "source.table"): "predicate"}, a predicate in the grammar '
    "of a view's WHERE on that table's columns; the agent adds it to the source query, so other rows never leave "
    "the source. In a PUT, left out: kept"
)
PolicyName = Literal["block", "hash", "mask"]


class ViewSource(BaseModel):
    """What a view is: its SQL, or the table it is every column of (exactly one of the two)."""

    sql: str | None = Field(default=None, min_length=1, max_length=100_000, description=SQL_HELP)
    table: str | None = Field(default=None, min_length=3, max_length=400, description=TABLE_HELP)
    exclude_columns: list[Annotated[str, Field(min_length=1, max_length=200)]] | None = Field(
        default=None,
        max_length=MAX_EXCLUDED_COLUMNS,
        description="a table view's columns to leave out (one the tool cannot read, or one the warehouse should not "
        "hold); not a key column; only with table",
    )
    columns: dict[Annotated[str, Field(min_length=3, max_length=400)], PolicyName] | None = Field(
        default=None, max_length=MAX_POLICIES, description=POLICY_COLUMNS_HELP
    )
    row_filter: (
        dict[Annotated[str, Field(min_length=1, max_length=400)], Annotated[str, Field(max_length=10_000)]] | None
    ) = Field(default=None, max_length=MAX_POLICIES, description=ROW_FILTER_HELP)

    @model_validator(mode="after")
    def _one_of_sql_and_table(self):
        if (self.sql is None) == (self.table is None):
            problem = "both are given" if self.sql is not None else "both are missing"
            raise ValueError(
                f'give exactly one of "sql" (the view\'s SELECT) and "table" (a table view: source.table, every '
                f"column of it); {problem}"
            )
        if self.exclude_columns and self.table is None:
            raise ValueError(
                '"exclude_columns" leaves columns out of a table view (one given as "table"); a view given as SQL '
                "selects the columns it wants"
            )
        return self


DESTINATIONS_HELP = (
    "where the view is published after each sync that changed it, each applied exactly once and in order after "
    'the view\'s commit: {"kind": "delta"} (a Delta Lake table at DATA_DIR/tables/<view>; "uri": a path or a '
    'URI delta-rs writes to, s3://BUCKET/PATH with "storage": the server and credentials), {"kind": "postgres", '
    '"url": "postgresql://...", "table": "SCHEMA.TABLE"} (a table in a PostgreSQL warehouse), {"kind": "iceberg", '
    '"table": "NAMESPACE.TABLE", "catalog"?: {...}} (an Iceberg table, by default in the embedded SQLite catalog '
    "under DATA_DIR); [] publishes nothing"
)
MODE_HELP = (
    "how the table keeps what a sync changed: merge (the view's rows as they are), soft_delete (a deleted row "
    "stays, _deltasieve_deleted true and _deltasieve_deleted_at its sync's time), history (one row per version: "
    "_deltasieve_valid_from, _deltasieve_valid_to (null while current), _deltasieve_current); every mode adds "
    "_deltasieve_synced_at (the commit time of the sync that last wrote the row, UTC) and _deltasieve_sync_id"
)
METADATA_HELP = (
    'other names for the metadata columns, e.g. {"synced_at": "_fivetran_synced", "current": '
    '"_fivetran_active"}: keys synced_at, sync_id, deleted, deleted_at (soft_delete), valid_from, valid_to, '
    "current (history); names must differ from each other and from the view's columns"
)
#: A PostgreSQL destination's table: SCHEMA.TABLE, plain identifiers.
PG_TABLE_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,62}\.[A-Za-z_][A-Za-z0-9_]{0,62}$"
MAX_DESTINATIONS = 8


#: A credential of a Delta destination's storage: no control characters (references: `_credential`).
CREDENTIAL_PATTERN = r"^[^\x00-\x1f]+$"
CREDENTIAL_HELP = (
    "env:NAME (the service's environment variable NAME) or file:/PATH (a file the service reads), resolved each "
    "time the destination is applied; or the literal, stored encrypted under SERVICE_SECRET_KEY (refused without "
    "it) and never shown back"
)


class StorageIn(BaseModel):
    """Where a Delta destination's S3 or S3-compatible store is and how to sign in to it."""

    model_config = ConfigDict(extra="forbid")
    endpoint: str | None = Field(
        default=None,
        max_length=500,
        pattern=r"^https?://[^\s/?#@]+/?$",
        description="the S3-compatible server, http[s]://HOST[:PORT] (http:// allows plain HTTP); left out: AWS S3",
    )
    region: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.-]{1,64}$", description="the bucket's region")
    access_key_id: str | None = Field(
        default=None, min_length=1, max_length=4000, pattern=CREDENTIAL_PATTERN, description=CREDENTIAL_HELP
    )
    secret_access_key: str | None = Field(
        default=None, min_length=1, max_length=4000, pattern=CREDENTIAL_PATTERN, description=CREDENTIAL_HELP
    )
    session_token: str | None = Field(
        default=None, min_length=1, max_length=4000, pattern=CREDENTIAL_PATTERN, description=CREDENTIAL_HELP
    )
    options: (
        dict[Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_.]{0,99}$")], Annotated[str, Field(max_length=1000)]]
        | None
    ) = Field(
        default=None,
        max_length=32,
        description="further delta-rs storage options (e.g. aws_virtual_hosted_style_request); not a credential "
        "(those have fields of their own), not one that makes commits unsafe (aws_s3_allow_unsafe_rename)",
    )

    @field_validator("access_key_id", "secret_access_key", "session_token")
    @classmethod
    def _credential(cls, value: str | None) -> str | None:
        if value is not None and value.startswith("env:") and not re.fullmatch(r"env:[A-Za-z_][A-Za-z0-9_]*", value):
            raise ValueError(f"{value!r}: an env: reference names an environment variable (env:S3_SECRET)")
        if value is not None and value.startswith("file:") and not value.startswith("file:/"):
            raise ValueError(f"{value!r}: a file: reference takes an absolute path (file:/run/secrets/s3)")
        return value

    @model_validator(mode="after")
    def _no_credential_in_options(self):
        for key in self.options or {}:
            reason = refused_option(key)
            if reason is not None:
                raise ValueError(f"storage.options: {reason}")
        if (self.access_key_id is None) != (self.secret_access_key is None):
            raise ValueError("storage takes access_key_id and secret_access_key together (or neither)")
        if self.session_token is not None and self.access_key_id is None:
            raise ValueError("storage.session_token goes with access_key_id and secret_access_key")
        return self


class DestinationIn(BaseModel):
    """One destination of a view, as a request gives it."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["delta", "postgres", "iceberg"] = Field(
        description="delta (a Delta Lake table), postgres (a table) or iceberg (an Apache Iceberg table)"
    )
    uri: str | None = Field(
        default=None,
        max_length=2000,
        pattern=r"^(/|[a-z][a-z0-9+.-]*://)[^\x00-\x1f]*$",
        description="delta: where the table is (an absolute path, file://, or an object store URI delta-rs "
        "supports, such as s3://BUCKET/PATH); left out: DATA_DIR/tables/<view>",
    )
    url: str | None = Field(
        default=None,
        max_length=2000,
        pattern=r"^(postgres(ql)?://|env:[A-Za-z_][A-Za-z0-9_]*$|file:/)",
        description="postgres: the warehouse's postgresql://USER[:PASSWORD]@HOST[:PORT]/DB (a password is stored "
        "encrypted under SERVICE_SECRET_KEY, refused without it, and never shown back), or env:NAME or file:/PATH "
        "naming where the service reads that URL each time it connects",
    )
    table: str | None = Field(
        default=None,
        pattern=PG_TABLE_PATTERN,
        description="postgres: the table, SCHEMA.TABLE; iceberg: NAMESPACE.TABLE (created if missing)",
    )
    catalog: IcebergCatalog | None = Field(
        default=None,
        description='iceberg: the catalog, {"type": "sql", "uri": "postgresql://USER@HOST/DB" or "sqlite:////PATH", '
        '"warehouse"?: where the files go} or {"type": "rest", "uri": "https://...", "warehouse"?, "token"?, '
        '"credential"?}; secrets as env:NAME or file:/PATH; left out: the embedded SQLite catalog under DATA_DIR',
    )
    mode: DestinationMode = Field(default=DEFAULT_MODE, description=MODE_HELP)
    columns: MetadataColumns = Field(default_factory=MetadataColumns, description=METADATA_HELP)
    storage: StorageIn | None = Field(
        default=None,
        description="delta with an s3:// uri: the S3 or S3-compatible server and the credentials to sign in with "
        "(left out: those of the service's environment, as delta-rs reads them)",
    )

    @model_validator(mode="after")
    def _fields_of_its_kind(self):
        if self.kind != "iceberg" and self.catalog is not None:
            raise ValueError('"catalog" is for an iceberg destination')
        if self.kind == "delta" and (self.url is not None or self.table is not None):
            raise ValueError('a delta destination takes "uri" and "storage" (url and table are for kind postgres)')
        if self.storage is not None and not on_object_store(self.uri):
            raise ValueError(
                'storage describes an S3 or S3-compatible store: it goes with a delta destination whose "uri" is '
                "s3://BUCKET/PATH"
            )
        if self.kind == "postgres":
            if self.uri is not None or self.storage is not None or self.url is None or self.table is None:
                raise ValueError('a postgres destination takes "url" (postgresql://...) and "table" (SCHEMA.TABLE)')
            if not available("postgres"):
                raise ValueError("postgres destinations are not available in this installation")
        if self.kind == "iceberg":
            if self.uri is not None or self.url is not None or self.table is None:
                raise ValueError(
                    'an iceberg destination takes "table" (NAMESPACE.TABLE) and, if not the embedded one, "catalog"'
                )
            if not available("iceberg"):
                raise ValueError(
                    "iceberg destinations need pyiceberg, which this installation lacks: install deltasieve[iceberg]"
                )
        return self


def distinct_destinations(destinations: list[DestinationIn] | None) -> list[DestinationIn] | None:
    """`destinations`, refused when two name the same place."""
    if destinations is not None:
        places = [(d.kind, d.uri, d.url, d.table, d.catalog) for d in destinations]
        if len(set(places)) != len(places):
            raise ValueError("the same destination is given twice")
    return destinations


#: Where a request says to publish a view: at most MAX_DESTINATIONS, none named twice.
Destinations = Annotated[list[DestinationIn], Field(max_length=MAX_DESTINATIONS), AfterValidator(distinct_destinations)]


def default_destinations() -> list[DestinationIn]:
    """What a new view publishes to when its request names nothing: a Delta Lake table."""
    return [DestinationIn.model_validate(d) for d in DEFAULT_DESTINATIONS]


class ViewIn(ViewSource):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=NAME_PATTERN)
    strategy: Strategy = Field(default=DEFAULT_STRATEGY, description=STRATEGY_HELP)
    timestamps: dict[str, str] = Field(default_factory=dict, max_length=64, description=TIMESTAMPS_HELP)
    delete_flags: dict[str, str] = Field(default_factory=dict, max_length=64, description=DELETE_FLAGS_HELP)
    timestamp_lag_s: float = Field(default=DEFAULT_LAG_S, ge=0, le=MAX_LAG_S, description=LAG_HELP)
    reconcile_every: int = Field(default=DEFAULT_RECONCILE_EVERY, ge=1, le=1_000_000, description=RECONCILE_HELP)
    snapshot_diff: SnapshotDiffIn = Field(default_factory=SnapshotDiffIn, description=SNAPSHOT_DIFF_HELP)
    match: MatchIn | None = Field(default=None, description=MATCH_HELP)
    sample_size: int = Field(default=0, ge=0, le=MAX_SAMPLE_SIZE, description=SAMPLE_HELP)
    schedule: ScheduleIn | None = Field(default=None, description=SCHEDULE_HELP)
    column_types: dict[str, str] = Field(default_factory=dict, max_length=64, description=COLUMN_TYPES_HELP)
    on_schema_change: SchemaPolicy = Field(default=DEFAULT_SCHEMA_POLICY, description=SCHEMA_POLICY_HELP)
    destinations: Destinations = Field(
        default_factory=default_destinations, description=f'{DESTINATIONS_HELP}. Left out: [{{"kind": "delta"}}]'
    )


class ViewRedefine(ViewSource):
    """A new definition for an existing view (PUT /v1/views/{name}): new SQL, or the table it is every column of."""

    model_config = ConfigDict(extra="forbid")
    strategy: Strategy | None = Field(
        default=None, description=f"{STRATEGY_HELP}. Left out (or null), the view keeps the strategy it has"
    )
    timestamps: dict[str, str] | None = Field(
        default=None, max_length=64, description=f"{TIMESTAMPS_HELP}. Left out: kept"
    )
    delete_flags: dict[str, str] | None = Field(
        default=None, max_length=64, description=f"{DELETE_FLAGS_HELP}. Left out: kept"
    )
    timestamp_lag_s: float | None = Field(default=None, ge=0, le=MAX_LAG_S, description=f"{LAG_HELP}. Left out: kept")
    reconcile_every: int | None = Field(
        default=None, ge=1, le=1_000_000, description=f"{RECONCILE_HELP}. Left out: kept"
    )
    snapshot_diff: SnapshotDiffIn | None = Field(default=None, description=f"{SNAPSHOT_DIFF_HELP}. Left out: kept")
    match: MatchIn | None = Field(default=None, description=f"{MATCH_HELP}. Left out: kept")
    sample_size: int | None = Field(
        default=None,
        ge=0,
        le=MAX_SAMPLE_SIZE,
        description=f"{SAMPLE_HELP}. Left out: kept. A PUT that changes nothing but this keeps the view's rows: the next sync resizes the sample",
    )
    schedule: ScheduleIn | None = Field(
        default=None,
        description=f"{SCHEDULE_HELP}. Left out: kept (null removes it). A PUT that changes nothing but this and sample_size keeps the view's rows",
    )
    column_types: dict[str, str] | None = Field(
        default=None, max_length=64, description=f"{COLUMN_TYPES_HELP}. Left out: kept"
    )
    on_schema_change: SchemaPolicy | None = Field(
        default=None,
        description=f"{SCHEMA_POLICY_HELP}. Left out (or null): kept; changing it alone keeps the view's rows",
    )
    destinations: Destinations | None = Field(
        default=None,
        description=f"{DESTINATIONS_HELP}. Left out (or null): kept; changing it alone keeps the view's rows",
    )


class ViewSettings(BaseModel):
    """Settings of a view that leave its rows as they are (PATCH /v1/views/{name}); left out: kept."""

    model_config = ConfigDict(extra="forbid")
    sample_size: int | None = Field(default=None, ge=0, le=MAX_SAMPLE_SIZE, description=SAMPLE_HELP)
    schedule: ScheduleIn | None = Field(default=None, description=f"{SCHEDULE_HELP}. Left out: kept (null removes it)")
    on_schema_change: SchemaPolicy | None = Field(default=None, description=f"{SCHEMA_POLICY_HELP}. Left out: kept")
    destinations: Destinations | None = Field(
        default=None,
        description=f"{DESTINATIONS_HELP}. Left out: kept; a new one is built from the view's current rows",
    )


class DestinationOut(BaseModel):
    """A destination of a view and how far it has caught up."""

    kind: Literal["delta", "postgres", "iceberg"]
    uri: str | None = Field(default=None, description="delta: where the table is")
    catalog: dict[str, Any] | None = Field(
        default=None, description="iceberg: its catalog as given, a URL's password masked"
    )
    storage: dict[str, Any] | None = Field(
        default=None,
        description="delta on S3: its server and credentials as given, a literal credential shown as ***",
    )
    url: str | None = Field(default=None, description="postgres: the warehouse's URL, its password masked")
    table: str | None = Field(default=None, description="postgres: SCHEMA.TABLE; iceberg: NAMESPACE.TABLE")
    mode: DestinationMode = Field(default=DEFAULT_MODE, description=MODE_HELP)
    columns: dict[str, str] = Field(
        default={}, description="the metadata columns the mode writes: their role (synced_at, ...) -> their name"
    )
    applied_sync: str | None = Field(
        default=None,
        description="the latest sync whose changes the destination holds (moved on by syncs with no change too); "
        "null before the first is applied",
    )
    lag_syncs: int = Field(default=0, description="succeeded syncs that changed the view and are not applied yet")
    error: str | None = Field(
        default=None, description="why the last attempt to apply failed (it is retried); null when it is caught up"
    )


class SiteOut(BaseModel):
    source: str
    sql: str
    columns: list[dict]
    key: list[str]


class KeyPartOut(BaseModel):
    table: str
    key: list[str]
    in_view_key: bool
    reason: str


class ViewOut(BaseModel):
    name: str
    sql: str = Field(description="the view's SELECT; for a table view, the SELECT it stands for")
    table: str | None = Field(
        default=None,
        description="a table view's table, source.table as its agent names it; null for a view given as SQL",
    )
    exclude_columns: list[str] = Field(default=[], description="the columns of a table view's table it leaves out")
    policies: dict = Field(
        default={},
        description='the view\'s column policies as given: {"columns": {...}, "row_filter": {...}} (empty: none)',
    )
    columns: list[str]
    column_types: dict[str, str]
    key: list[str]
    #: per table of the view: its key, whether the view's key holds it, and why (empty for a
    #: view defined before keys were derived: its key holds every table's)
    key_derivation: list[KeyPartOut] = []
    sites: list[SiteOut]
    strategy: str
    timestamps: dict[str, str] = {}
    delete_flags: dict[str, str] = {}
    timestamp_lag_s: float = DEFAULT_LAG_S
    reconcile_every: int = DEFAULT_RECONCILE_EVERY
    snapshot_diff: dict = {}
    #: a multiset view's pairing of vanished and appeared rows, if it has one
    match: dict | None = None
    source_column_types: dict[str, str] = Field(
        default={},
        description="the view's column_types as given: source columns read as a stronger type than declared "
        "(`column_types` holds the types of the view's own columns)",
    )
    #: the size of the random sample the view keeps (0: none)
    sample_size: int = 0
    schedule: ScheduleIn | None = Field(
        default=None, description="when the service syncs the view by itself (null: never)"
    )
    on_schema_change: SchemaPolicy = Field(default=DEFAULT_SCHEMA_POLICY, description=SCHEMA_POLICY_HELP)
    next_run_at: str | None = Field(
        default=None,
        description="when the next scheduled sync is due (ISO 8601, UTC; in the past: due now, the scheduler "
        "queues it within a second); null without a schedule, while a sync of the view is queued or running (the "
        "next is due every_s after it ends), or with the service's scheduler off (SERVICE_SCHEDULER=false)",
    )
    redefinition_pending: bool = Field(
        default=False,
        description="true after a PUT gave the view a new definition (shown here) that its stored rows do not "
        "follow yet: until the view's next sync applies it (trigger redefine), the rows endpoints serve the old rows",
    )
    data_as_of: str | None = Field(
        default=None,
        description="how fresh the view's rows are: the start of its last succeeded sync, the moment of the "
        "sources' state they hold (ISO 8601, UTC); null before its first sync succeeded",
    )
    destinations: list[DestinationOut] = Field(
        default=[],
        description="where the view is published after its syncs (the destinations option), each with how far it has caught up",
    )
    created_at: str


class SyncOut(BaseModel):
    id: str
    view: str
    status: Literal["queued", "running", "succeeded", "failed"]
    error: str | None
    error_code: str | None = Field(
        default=None,
        description="what kind of failure, for programs: schema_changed (a column the view reads changed at its "
        "source in a way the view's on_schema_change does not take; `error` names table, column, old and new type "
        "and the ways out); cancelled (DELETE /v1/views/{name}/syncs/{id} stopped it; the view is unchanged); "
        "interrupted (the service stopped or died before it finished); agent_unreachable (an agent could not be "
        "reached or broke its answer off, after the retries); agent_refused (an agent did not take the source's "
        "token); source_error (the source's database refused the read: a value or type it cannot cast, a privilege, "
        "SQL it does not take; `error` names the table, the column when known, the database's message and the ways "
        "out; not retried); engine_lost (the warehouse's Spark engine died under it and was restarted); "
        "null for other failures and for syncs that did not fail",
    )
    queued_s: float | None = Field(
        default=None,
        description="seconds the sync waited in the queue for a slot of the pool and of its sources before it ran "
        "(null while queued, and for a sync cancelled before it ran)",
    )
    created_at: str
    started_at: str | None
    finished_at: str | None
    metrics: dict[str, Any]
    progress: dict[str, Any] | None = None
    trigger: Literal["api", "schedule", "redefine", "retry"] = Field(
        default="api",
        description="what started the sync: POST /v1/views/{name}/syncs (api) or the view's schedule; redefine: whatever started it, the sync applies the view's redefinition (PUT /v1/views/{name}); retry: the service retried, after a restart, a sync its stop interrupted (retry_of; a retry that applies a redefinition says redefine)",
    )
    retry_of: str | None = Field(
        default=None,
        description="the sync this one retries (trigger retry): a sync that was running when the service stopped "
        "or died, settled as interrupted; retried once",
    )


class SyncQueued(BaseModel):
    id: str
    status: Literal["queued"]


class SyncsCancelled(BaseModel):
    """The answer of a bulk cancel (DELETE /v1/syncs?status=queued)."""

    #: how many queued syncs were cancelled
    cancelled: int


class Health(BaseModel):
    status: Literal["ok"] = "ok"


class FieldError(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class ErrorOut(BaseModel):
    """The body of every error answer: what is wrong and what to fix (per field for a malformed request)."""

    detail: str | list[FieldError]


#: What each error status of the API means, for the OpenAPI document.
ERROR_STATUSES = {
    401: "missing or wrong API key (when the service has one: X-API-Key or Authorization: Bearer)",
    403: "the key's scope or its view and source limits do not cover the call",
    404: "no such source, view or sync",
    409: "conflicts with the current state (exists already, not loaded yet, a sync under way, sync not succeeded)",
    410: "what was asked for is no longer kept (a sync's delta); detail says what to do instead",
    422: "the request is malformed, or the view cannot be maintained; detail says why",
    424: "an agent the request needs cannot be reached or refused the call",
}


def error_responses(*statuses: int) -> dict:
    """OpenAPI `responses` for the error statuses an endpoint may answer with."""
    return {status: {"model": ErrorOut, "description": ERROR_STATUSES[status]} for status in statuses}
