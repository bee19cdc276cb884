"""A view's options: what the catalog stores of a view besides its definition, typed.

The settings every strategy shares are fields of `ViewOptions`. Each family of strategies
adds the settings it reads: `TimestampSettings` (timestamp), `RowVersionSettings`
(row_version), `DumpSettings` (snapshot_diff), all three for auto (it counts those strategies
among its candidates), none for the differencing strategies. The view's `strategy` picks
the family's model (a discriminated union, `ViewOptions.from_stored`), so that a strategy
reads its own settings, typed (`timestamp_settings`, ...), and a view holds no setting its
strategy never reads: the view routes refuse one given with a value of its own
(`unread_settings`), and options stored with one do not load.

Validated once where they are made (the service's view routes) or read back (the catalog);
the sync and its strategies read their attributes. Stored as the JSON of `stored()`: the
keys given when the options were made, so that options load and store again unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Annotated, Any, ClassVar, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, RootModel, model_validator

#: The strategy of a new view that names none.
DEFAULT_STRATEGY = "auto"

#: Seconds subtracted from the watermark before each read: a row stamped just before the
#: watermark by a transaction that committed after it is still read.
DEFAULT_LAG_S = 5.0
#: Syncs between two full reconciliations (a differencing strategy over the whole site query).
DEFAULT_RECONCILE_EVERY = 24
#: What a sync does when a column the view reads changed at its source: "evolve" takes a
#: lossless widening in place (viewdef/widening.py) and fails on anything else; "freeze"
#: fails on every change. The default is not stored (ViewOptions.policed).
SchemaPolicy = Literal["evolve", "freeze"]
DEFAULT_SCHEMA_POLICY: SchemaPolicy = "evolve"


#: The differential algorithms of strategy snapshot_diff (remote_agent/strategies/snapshot_diff.py).
SnapshotDiffAlgorithm = Literal["window", "sort_merge", "partitioned_hash"]


class SnapshotDiffSettings(BaseModel):
    """How strategy snapshot_diff (auto too, on dump sources) compares two dumps, as a view gives it.

    The defaults: the window algorithm of Labio and Garcia-Molina's snapshot-differential
    paper, its two aging buffers of 100,000 records each (a key and a 64-bit hash apiece: a
    few MiB). Stored with the keys given (`ViewOptions.stored`).

    >>> SnapshotDiffSettings().algorithm, SnapshotDiffSettings(algorithm="sort_merge").model_dump(exclude_unset=True)
    ('window', {'algorithm': 'sort_merge'})
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    algorithm: SnapshotDiffAlgorithm = "window"
    aging_rows: int = Field(
        default=100_000,
        ge=1,
        le=100_000_000,
        description="records each aging buffer holds (sort_merge: per sorted run)",
    )
    block_rows: int = Field(default=1024, ge=1, le=1_000_000, description="records the window reads at a time")


class MatchSettings(BaseModel):
    """How a multiset view pairs vanished and appeared rows into updates (multisets/matching.py):
    along `order_by`, each epsilon column within its epsilon. Checked against the view by
    `matching.check_match`.

    >>> MatchSettings(order_by="at", epsilon={"at": 2, "v": 0.5}).model_dump()
    {'order_by': 'at', 'epsilon': {'at': 2, 'v': 0.5}}
    """

    model_config = ConfigDict(frozen=True)
    order_by: str
    #: int or float: a stored epsilon is stored back as it was written
    epsilon: dict[str, int | float]


@dataclass(frozen=True)
class StampSettings:
    """A view's timestamp, delete-flag, row_version and snapshot_diff settings as one value (tables
    written `source.table`): as a view is defined with them, checked against its sources
    (strategies/stamps.py check_settings) before `ViewOptions.of` keeps those its strategy reads."""

    timestamps: dict[str, str] = field(default_factory=dict)
    delete_flags: dict[str, str] = field(default_factory=dict)
    lag_s: float = DEFAULT_LAG_S
    reconcile_every: int = DEFAULT_RECONCILE_EVERY
    #: The tables (`source.table`) whose timestamp column is declared NOT NULL, found when the
    #: view is defined: their ranged read needs no `IS NULL` term, which would keep SQLite
    #: from reading the range through an index on the column.
    not_null: tuple[str, ...] = ()
    #: The view's sources on PostgreSQL, found when it is defined: auto may read their row
    #: versions (strategy row_version) there.
    versioned: tuple[str, ...] = ()
    #: The strategy snapshot_diff's settings.
    diff: SnapshotDiffSettings = field(default_factory=SnapshotDiffSettings)
    #: The view's sources on directories of dump files, found when it is defined: auto may
    #: compare their dumps there (strategy snapshot_diff).
    dumped: tuple[str, ...] = ()
    #: The tables (`source.table`) whose timestamp column is text read as a timestamp (the
    #: view's column_types): their ranged read compares the text (stamps.text_bound_condition).
    text_stamps: tuple[str, ...] = ()

    def to_options(self) -> dict:
        """The settings under the names the options store them with (every strategy's)."""
        text = {"timestamps_text": list(self.text_stamps)} if self.text_stamps else {}
        return {
            **text,
            "timestamps": dict(self.timestamps),
            "delete_flags": dict(self.delete_flags),
            "timestamp_lag_s": self.lag_s,
            "reconcile_every": self.reconcile_every,
            "timestamps_not_null": list(self.not_null),
            "row_version_sources": list(self.versioned),
            "snapshot_diff": self.diff.model_dump(exclude_unset=True),
            "dump_sources": list(self.dumped),
        }

    @classmethod
    def from_options(cls, options: dict) -> StampSettings:
        """The settings of a stored view (options without them: the defaults).

        >>> StampSettings.from_options({"strategy": "auto"}).reconcile_every
        24
        """
        return ViewOptions.from_stored(options).stamps

    def read_by(self, strategy: str) -> StampSettings:
        """These settings with those `strategy` does not read at their defaults (the delete
        flags, which every strategy reads, kept).

        >>> StampSettings({"s.a": "at"}, {"s.a": "gone"}, versioned=("s",)).read_by("sketch")
        ... # doctest: +ELLIPSIS
        StampSettings(timestamps={}, delete_flags={'s.a': 'gone'}, lag_s=5.0, ..., versioned=(), ...)
        """
        return ViewOptions.of(strategy, self).stamps


class Schedule(BaseModel):
    """When the service syncs a view by itself: `every_s` seconds after its last sync ended."""

    model_config = ConfigDict(frozen=True)
    every_s: int


#: The destinations of a new view that names none: its Delta Lake table at DATA_DIR/tables/<view>.
DEFAULT_DESTINATIONS: tuple[dict[str, str], ...] = ({"kind": "delta"},)


#: The start of a secret given by reference (service/secrets.py): read when used, never stored.
SECRET_REFERENCE = re.compile(r"^(env:[A-Za-z_][A-Za-z0-9_]*|file:/.+)$")


class IcebergCatalog(BaseModel):
    """An Iceberg destination's catalog (warehouse/destinations/iceberg_catalog.py): a SQL
    catalog (`uri`: sqlite:////PATH or postgresql://...; none: SQLite under DATA_DIR) or a
    REST catalog (`uri`: http(s)://...). A secret (a PostgreSQL password, a REST token) is
    given by reference, `env:NAME` or `file:/PATH`, never written in the options.

    >>> IcebergCatalog(type="rest", uri="http://cat:8181", token="env:CATALOG_TOKEN").type
    'rest'
    >>> IcebergCatalog(uri="postgresql://loader:pw@db/wh")
    Traceback (most recent call last):
    ...
    pydantic_core._pydantic_core.ValidationError: 1 validation error for IcebergCatalog
      Value error, an iceberg catalog's uri holds a password: give the uri as env:NAME or file:/PATH ...
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    type: Literal["sql", "rest"] = "sql"
    #: sql: sqlite:////ABSOLUTE/PATH or postgresql://USER@HOST/DB, or env:NAME / file:/PATH naming
    #: one; rest: the catalog's http(s):// address.
    uri: str | None = Field(default=None, max_length=2000)
    #: Where the tables' files go (an absolute path or a URI pyiceberg writes to); sql: by
    #: default DATA_DIR/iceberg/warehouse; rest: the catalog's own when left out.
    warehouse: str | None = Field(default=None, max_length=2000, pattern=r"^(/|[a-z][a-z0-9+.-]*://)[^\x00-\x1f]*$")
    #: rest: a bearer token, env:NAME or file:/PATH.
    token: str | None = None
    #: rest: an OAuth2 client credential CLIENT_ID:SECRET, env:NAME or file:/PATH.
    credential: str | None = None

    @model_validator(mode="after")
    def _fields_of_its_type(self) -> IcebergCatalog:
        uri = self.uri or ""
        for name, value in (("token", self.token), ("credential", self.credential)):
            if value is None:
                continue
            if self.type != "rest":
                raise ValueError(f'"{name}" is for a rest catalog')
            if not SECRET_REFERENCE.match(value):
                raise ValueError(f'a rest catalog\'s "{name}" is a secret: give it as env:NAME or file:/PATH')
        if SECRET_REFERENCE.match(uri):
            return self
        if self.type == "rest":
            if not re.match(r"^https?://[^\x00-\x20]+$", uri):
                raise ValueError(f"a rest catalog's uri is its http:// or https:// address: got {uri!r}")
            return self
        if self.uri is None or re.match(r"^sqlite:////[^\x00-\x1f]+$", uri):
            return self
        if not re.match(r"^postgres(ql)?://[^\x00-\x20]+$", uri):
            raise ValueError(
                "a sql catalog's uri is sqlite:////ABSOLUTE/PATH or postgresql://USER@HOST/DB (or env:NAME or "
                f"file:/PATH naming one): got {uri.split('@')[-1]!r}"
            )
        if "password=" in uri or re.match(r"^[a-z]+://[^/@]*:[^/@]*@", uri):
            raise ValueError(
                "an iceberg catalog's uri holds a password: give the uri as env:NAME or file:/PATH "
                "(read by the service each time it connects), never in the view's options"
            )
        return self


#: How a destination keeps what a sync changed (warehouse/destinations/modes.py): `merge` (the
#: view's rows as they are now), `soft_delete` (a deleted row stays, flagged), `history` (one
#: row per version of each row).
DestinationMode = Literal["merge", "soft_delete", "history"]
DEFAULT_MODE: DestinationMode = "merge"


#: A metadata column's name: a plain identifier every destination takes as it is (PostgreSQL's 63 bytes at most).
COLUMN_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,62}$"


class MetadataColumns(BaseModel):
    """The names of the columns a destination's mode adds to the view's (modes.py), each
    renamable per destination (say, to the names of the tool a team migrates from). Which
    of them a mode writes: modes.MODE_COLUMNS.

    >>> MetadataColumns(synced_at="_fivetran_synced").synced_at, MetadataColumns().current
    ('_fivetran_synced', '_deltasieve_current')
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    #: When the sync that last wrote the row committed (timestamp with time zone, UTC).
    synced_at: str = Field(default="_deltasieve_synced_at", pattern=COLUMN_NAME_PATTERN)
    #: The id of the sync that last wrote the row.
    sync_id: str = Field(default="_deltasieve_sync_id", pattern=COLUMN_NAME_PATTERN)
    #: soft_delete: whether the row was deleted from the view.
    deleted: str = Field(default="_deltasieve_deleted", pattern=COLUMN_NAME_PATTERN)
    #: soft_delete: when (the commit time of the sync that saw it gone); NULL while live.
    deleted_at: str = Field(default="_deltasieve_deleted_at", pattern=COLUMN_NAME_PATTERN)
    #: history: when this version of the row appeared (its sync's commit time).
    valid_from: str = Field(default="_deltasieve_valid_from", pattern=COLUMN_NAME_PATTERN)
    #: history: when it was replaced or deleted; NULL while it is the current version.
    valid_to: str = Field(default="_deltasieve_valid_to", pattern=COLUMN_NAME_PATTERN)
    #: history: whether this is the row's current version.
    current: str = Field(default="_deltasieve_current", pattern=COLUMN_NAME_PATTERN)


class StorageSpec(BaseModel):
    """The object store of a Delta destination on S3 or an S3-compatible server, as the
    catalog stores it (warehouse/destinations/object_storage.py): each credential an
    env:NAME or file:/PATH reference, or a literal sealed (`fernet:...`, service/secrets.py),
    never one in clear; resolved or opened each time the destination is applied."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    #: The server's URL (http[s]://HOST[:PORT]); None: AWS S3 itself.
    endpoint: str | None = None
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    session_token: str | None = None
    #: Further delta-rs storage options (object_store's `aws_*` keys), none a credential.
    options: dict[str, str] | None = None

    #: The fields that hold a credential: never stored or shown in clear.
    CREDENTIALS: ClassVar[tuple[str, ...]] = ("access_key_id", "secret_access_key", "session_token")


class DestinationSpec(BaseModel):
    """Where a view is published (warehouse/destinations/): a Delta Lake table (`uri`, by
    default DATA_DIR/tables/<view>; `storage` where it is on S3), a PostgreSQL table (`url`,
    `table` SCHEMA.TABLE) or an Iceberg table (`catalog`, `table` NAMESPACE.TABLE), in a mode
    (`mode`, modes.py) with its metadata columns named as `columns` says."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Literal["delta", "postgres", "iceberg"]
    mode: DestinationMode = DEFAULT_MODE
    #: The metadata columns' names where they are not the defaults (only those given are stored).
    columns: MetadataColumns = MetadataColumns()
    uri: str | None = None
    storage: StorageSpec | None = None
    #: A PostgreSQL URL without password, an env:NAME or file:/PATH reference to one, or
    #: the URL with its password masked when `sealed` holds the whole of it encrypted.
    url: str | None = None
    table: str | None = None
    #: The URL with its password, encrypted (service/secrets.py); None when `url` is all of it.
    sealed: str | None = None
    #: iceberg: the catalog the table is in (None: the embedded SQLite one under DATA_DIR).
    catalog: IcebergCatalog | None = None


# -- the settings of each family of strategies, under the names the options store them with --


class ReconcileSettings(BaseModel):
    """What the strategies that read the changed rows at the source share (strategies/changed_rows.py)."""

    model_config = ConfigDict(frozen=True)
    #: Syncs between two full reconciliations of the view.
    reconcile_every: int = DEFAULT_RECONCILE_EVERY


class TimestampSettings(ReconcileSettings):
    """Strategy timestamp's settings (strategies/timestamp.py), tables written `source.table`."""

    #: The last-modified column of each table.
    timestamps: dict[str, str] = {}
    #: Seconds read before the last watermark (DEFAULT_LAG_S).
    timestamp_lag_s: float = DEFAULT_LAG_S
    #: The tables whose timestamp column is declared NOT NULL, found when the view is defined:
    #: their ranged read needs no `IS NULL` term, which would keep SQLite from reading the
    #: range through an index on the column.
    timestamps_not_null: list[str] = []
    #: The tables whose timestamp column is text read as a timestamp (the view's column_types):
    #: their ranged read compares the text (stamps.text_bound_condition).
    timestamps_text: list[str] = []


class RowVersionSettings(ReconcileSettings):
    """Strategy row_version's settings (strategies/row_version/)."""

    #: The view's sources on PostgreSQL, found when it is defined: where row versions are read.
    row_version_sources: list[str] = []


class DumpSettings(BaseModel):
    """Strategy snapshot_diff's settings (strategies/snapshot_diff.py)."""

    model_config = ConfigDict(frozen=True)
    snapshot_diff: SnapshotDiffSettings = SnapshotDiffSettings()
    #: The view's sources on directories of dump files, found when it is defined: where dumps are compared.
    dump_sources: list[str] = []


# -- a view's options: the settings every strategy shares, and those of its strategy's family --


class ViewOptions(BaseModel):
    """A view's strategy and the settings its syncs read, as the catalog stores them: the
    settings every strategy shares here, its strategy's own in the family models below.
    Made by `from_stored` or `of`, which pick the family by the strategy."""

    # frozen: built once, then shared by the routes, the runner and the strategies; no key
    # but those of the view's strategy (below), so that storing again stores what was read
    model_config = ConfigDict(frozen=True, extra="forbid")
    #: Every view is stored with its strategy (DEFAULT_STRATEGY when it was defined without
    #: one); each family narrows it to the names of its strategies.
    strategy: str
    #: {TABLE: COLUMN} soft-delete markers: a row whose flag is set is not in the view (stamps.py).
    delete_flags: dict[str, str] = {}
    #: Columns read as a stronger type than their source declares, as the view gave them
    #: ({"table.column" or "source.table.column": logical type}; viewdef/column_types.py).
    column_types: dict[str, str] = {}
    #: A multiset view's pairing of vanished and appeared rows (multisets/matching.py), if any.
    match: MatchSettings | None = None
    #: Rows of the random sample the view keeps (0: none).
    sample_size: int = 0
    schedule: Schedule | None = None
    #: What a sync does when a column the view reads changed at its source (SchemaPolicy).
    on_schema_change: SchemaPolicy = DEFAULT_SCHEMA_POLICY
    #: Where the view is published after each sync that changed it; a view stored without
    #: destinations has none until it is given some.
    destinations: list[DestinationSpec] = []

    @model_validator(mode="before")
    @classmethod
    def _read_by_the_strategy(cls, data: Any) -> Any:
        """Refuse, by name, a setting of another family of strategies (`extra` refuses others)."""
        if isinstance(data, Mapping):
            unread = [k for k in data if k in _EVERY_SETTING and k not in cls.model_fields]
            if unread:
                raise ValueError(unread_detail(str(data.get("strategy")), unread))
        return data

    def model_post_init(self, context: Any, /) -> None:
        if type(self) is ViewOptions:
            raise TypeError(
                "a view's options are those of its strategy's family: made by ViewOptions.from_stored or .of"
            )

    @classmethod
    def from_stored(cls, stored: Mapping[str, Any] | str | bytes) -> ViewOptions:
        """The options stored as `stored` (their JSON, or its dict), typed by their strategy.

        >>> type(ViewOptions.from_stored('{"strategy": "sketch"}')).__name__
        'DifferencingOptions'
        >>> ViewOptions.from_stored({"strategy": "timestamp", "timestamps": {"s.a": "at"}}).timestamp_settings.timestamps
        {'s.a': 'at'}
        """
        if isinstance(stored, str | bytes):
            return StoredOptions.model_validate_json(stored).root
        return StoredOptions.model_validate(stored).root

    @classmethod
    def of(
        cls,
        strategy: str,
        stamps: StampSettings,
        match: MatchSettings | None = None,
        sample_size: int = 0,
        schedule: Schedule | dict | None = None,
        column_types: dict[str, str] | None = None,
        on_schema_change: str = DEFAULT_SCHEMA_POLICY,
    ) -> ViewOptions:
        """The options of a view defined with these checked settings: of `stamps`, those its
        strategy reads (the view routes refuse the others a request gives a value:
        `unread_settings`); match, sample, schedule and a schema policy other than the
        default only when it has them.

        >>> ViewOptions.of("auto", StampSettings(), sample_size=10).stored()["sample_size"]
        10
        >>> "match" in ViewOptions.of("auto", StampSettings()).stored()
        False
        >>> ViewOptions.of("auto", StampSettings(), MatchSettings(order_by="at", epsilon={"at": 1})).stored()["match"]
        {'order_by': 'at', 'epsilon': {'at': 1}}
        >>> ViewOptions.of("auto", StampSettings(), on_schema_change="freeze").on_schema_change
        'freeze'
        >>> ViewOptions.of("sketch", StampSettings({"s.a": "at"}, {"s.a": "gone"})).stored()
        {'strategy': 'sketch', 'delete_flags': {'s.a': 'gone'}}
        """
        family = OPTIONS[strategy].model_fields
        given: dict[str, Any] = {"strategy": strategy}
        given.update((k, v) for k, v in stamps.to_options().items() if k in family)
        if match:
            given["match"] = match.model_dump()
        if column_types:
            given["column_types"] = dict(column_types)
        return cls.from_stored(given).sized(sample_size).scheduled(schedule).policed(on_schema_change)

    @property
    def timestamp_settings(self) -> TimestampSettings | None:
        """Strategy timestamp's settings, when the view's strategy reads them (timestamp, auto)."""
        return self if isinstance(self, TimestampSettings) else None

    @property
    def row_version_settings(self) -> RowVersionSettings | None:
        """Strategy row_version's settings, when the view's strategy reads them (row_version, auto)."""
        return self if isinstance(self, RowVersionSettings) else None

    @property
    def dump_settings(self) -> DumpSettings | None:
        """Strategy snapshot_diff's settings, when the view's strategy reads them (snapshot_diff, auto)."""
        return self if isinstance(self, DumpSettings) else None

    @cached_property
    def stamps(self) -> StampSettings:
        """The timestamp, delete-flag, row_version and snapshot_diff settings as one value, those
        the view's strategy does not read at their defaults (what stamps.check_settings checks).

        >>> ViewOptions.from_stored({"strategy": "sketch"}).stamps == StampSettings()
        True
        """
        stamped = self.timestamp_settings or TimestampSettings()
        versioned = self.row_version_settings or RowVersionSettings()
        dumps = self.dump_settings or DumpSettings()
        return StampSettings(
            dict(stamped.timestamps),
            dict(self.delete_flags),
            stamped.timestamp_lag_s,
            (self.timestamp_settings or versioned).reconcile_every,
            tuple(stamped.timestamps_not_null),
            tuple(versioned.row_version_sources),
            dumps.snapshot_diff,
            tuple(dumps.dump_sources),
            tuple(stamped.timestamps_text),
        )

    def stored(self) -> dict[str, Any]:
        """The options as the catalog stores them (JSON): the keys they were given with.

        >>> ViewOptions.from_stored({"strategy": "sketch"}).stored()
        {'strategy': 'sketch'}
        """
        return self.model_dump(mode="json", exclude_unset=True)

    def sized(self, sample_size: int) -> ViewOptions:
        """These options with a sample of `sample_size` rows (0: without one)."""
        return self._with("sample_size", sample_size or None)

    def scheduled(self, schedule: Schedule | dict | None) -> ViewOptions:
        """These options with `schedule` (None: without one)."""
        return self._with("schedule", schedule)

    def policed(self, on_schema_change: str) -> ViewOptions:
        """These options with schema policy `on_schema_change` (the default is not stored).

        >>> ViewOptions.from_stored({"strategy": "sketch"}).policed("evolve").stored()
        {'strategy': 'sketch'}
        """
        return self._with("on_schema_change", None if on_schema_change == DEFAULT_SCHEMA_POLICY else on_schema_change)

    def published(self, destinations: list[DestinationSpec] | list[dict]) -> ViewOptions:
        """These options with `destinations` (stored also when empty: [] publishes nothing).

        >>> ViewOptions.from_stored({"strategy": "sketch"}).published([{"kind": "delta"}]).stored()
        {'strategy': 'sketch', 'destinations': [{'kind': 'delta'}]}
        """
        given = {k: v for k, v in self.stored().items() if k != "destinations"}
        specs = [DestinationSpec.model_validate(d) if isinstance(d, dict) else d for d in destinations]
        given["destinations"] = [d.model_dump(mode="json", exclude_defaults=True) for d in specs]
        return ViewOptions.from_stored(given)

    def _with(self, name: str, value: Any) -> ViewOptions:
        """These options with option `name` set to `value`, or left out for None."""
        given = {k: v for k, v in self.stored().items() if k != name}
        if value is not None:
            given[name] = value
        return ViewOptions.from_stored(given)


# The families: each names its settings before ViewOptions, so that its stored keys start with the shared ones.


class AutoOptions(TimestampSettings, RowVersionSettings, DumpSettings, ViewOptions):
    """auto's options: every family's settings, for the candidates they make (strategies/auto.py)."""

    strategy: Literal["auto"]


class DifferencingOptions(ViewOptions):
    """The options of the strategies that compare the whole site query: none of their own."""

    strategy: Literal["sketch", "group_hash", "tuple_hash", "range_checksum", "full_ship"]


class TimestampOptions(TimestampSettings, ViewOptions):
    strategy: Literal["timestamp"]


class RowVersionOptions(RowVersionSettings, ViewOptions):
    strategy: Literal["row_version"]


class SnapshotDiffOptions(DumpSettings, ViewOptions):
    strategy: Literal["snapshot_diff"]


#: The families, in the order of the strategies (warehouse/strategies/__init__.py STRATEGIES).
FAMILIES: tuple[type[ViewOptions], ...] = (
    AutoOptions,
    DifferencingOptions,
    TimestampOptions,
    RowVersionOptions,
    SnapshotDiffOptions,
)
#: Strategy name -> the model of its options.
OPTIONS: dict[str, type[ViewOptions]] = {
    name: family for family in FAMILIES for name in get_args(family.model_fields["strategy"].annotation)
}


class StoredOptions(
    RootModel[
        Annotated[
            AutoOptions | DifferencingOptions | TimestampOptions | RowVersionOptions | SnapshotDiffOptions,
            Field(discriminator="strategy"),
        ]
    ]
):
    """A view's options as stored, of the family its strategy names (ViewOptions.from_stored)."""


#: The settings only some strategies read (auto reads them all).
_EVERY_SETTING = frozenset(AutoOptions.model_fields) - frozenset(ViewOptions.model_fields)
#: Every setting at its default.
_DEFAULTS = AutoOptions(strategy="auto")


def readers(setting: str) -> list[str]:
    """The strategies that read `setting`, in the order of the strategies.

    >>> readers("reconcile_every"), readers("delete_flags")[:2]
    (['auto', 'timestamp', 'row_version'], ['auto', 'sketch'])
    """
    return [name for name, family in OPTIONS.items() if setting in family.model_fields]


def unread_settings(strategy: str, given: Mapping[str, Any]) -> list[str]:
    """The settings of `given` (named as stored) that `strategy` never reads and that have a
    value other than their default.

    >>> unread_settings("sketch", {"timestamps": {"a": "at"}, "timestamp_lag_s": 5, "delete_flags": {"a": "gone"}})
    ['timestamps']
    >>> unread_settings("row_version", {"reconcile_every": 2, "snapshot_diff": {"algorithm": "window"}})
    []
    """
    family = OPTIONS[strategy].model_fields
    return [k for k, v in given.items() if k not in family and k in _EVERY_SETTING and not _is_default(k, v)]


def unread_detail(strategy: str, settings: list[str]) -> str:
    """What a view is told of `settings` its strategy does not read.

    >>> unread_detail("sketch", ["timestamps"])
    'strategy sketch does not read timestamps (read by auto and timestamp): leave it out, or choose a strategy that reads it'
    """
    which = " or ".join(f"{s} (read by {_listed(readers(s))})" for s in settings)
    them = "it" if len(settings) == 1 else "them"
    return f"strategy {strategy} does not read {which}: leave {them} out, or choose a strategy that reads {them}"


def _is_default(setting: str, value: Any) -> bool:
    """Whether `value` of `setting` is its default (a model's by its fields: `{}` and the defaults given are alike)."""
    given = AutoOptions.model_validate({"strategy": "auto", setting: value})
    return given.model_dump(include={setting}) == _DEFAULTS.model_dump(include={setting})


def _listed(names: list[str]) -> str:
    """`names` as a sentence lists them.

    >>> _listed(["a"]), _listed(["a", "b"]), _listed(["a", "b", "c"])
    ('a', 'a and b', 'a, b and c')
    """
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
