"""A view's options: what the catalog stores of a view besides its definition, typed.

Validated once where they are made (the service's view routes) or read back (the catalog);
the sync and its strategies read their attributes. Stored as the JSON of `stored()`: the
keys given when the options were made, so that options load and store again unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

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
    """Strategy snapshot_diff's settings (auto's too, on dump sources), as a view gives them.

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
    """A view's timestamp settings as stored in its options (tables written `source.table`)."""

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
        return ViewOptions.model_validate(options).stamps


class Schedule(BaseModel):
    """When the service syncs a view by itself: `every_s` seconds after its last sync ended."""

    model_config = ConfigDict(frozen=True)
    every_s: int


#: The destinations of a new view that names none: its Delta Lake table at DATA_DIR/tables/<view>.
DEFAULT_DESTINATIONS: tuple[dict[str, str], ...] = ({"kind": "delta"},)


class DestinationSpec(BaseModel):
    """Where a view is published (warehouse/destinations/): a Delta Lake table (`uri`, by
    default DATA_DIR/tables/<view>) or a PostgreSQL table (`url`, `table` SCHEMA.TABLE)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Literal["delta", "postgres"]
    uri: str | None = None
    #: A PostgreSQL URL without password, an env:NAME or file:/PATH reference to one, or
    #: the URL with its password masked when `sealed` holds the whole of it encrypted.
    url: str | None = None
    table: str | None = None
    #: The URL with its password, encrypted (service/secrets.py); None when `url` is all of it.
    sealed: str | None = None


class ViewOptions(BaseModel):
    """A view's strategy and the settings its syncs read, as the catalog stores them."""

    # frozen: built once, then shared by the routes, the runner and the strategies;
    # extra keys (none today) are kept, so storing again never loses what was stored
    model_config = ConfigDict(frozen=True, extra="allow")
    #: Every view is stored with its strategy (DEFAULT_STRATEGY when it was defined without one).
    strategy: str
    timestamps: dict[str, str] = {}
    delete_flags: dict[str, str] = {}
    timestamp_lag_s: float = DEFAULT_LAG_S
    reconcile_every: int = DEFAULT_RECONCILE_EVERY
    timestamps_not_null: list[str] = []
    row_version_sources: list[str] = []
    snapshot_diff: SnapshotDiffSettings = SnapshotDiffSettings()
    dump_sources: list[str] = []
    timestamps_text: list[str] = []
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
        """The options of a view defined with these checked settings (match, sample, schedule
        and a schema policy other than the default stored only when it has them).

        >>> ViewOptions.of("auto", StampSettings(), sample_size=10).stored()["sample_size"]
        10
        >>> "match" in ViewOptions.of("auto", StampSettings()).stored()
        False
        >>> ViewOptions.of("auto", StampSettings(), MatchSettings(order_by="at", epsilon={"at": 1})).stored()["match"]
        {'order_by': 'at', 'epsilon': {'at': 1}}
        >>> ViewOptions.of("auto", StampSettings(), on_schema_change="freeze").on_schema_change
        'freeze'
        """
        given: dict[str, Any] = {"strategy": strategy, **stamps.to_options()}
        if match:
            given["match"] = match.model_dump()
        if column_types:
            given["column_types"] = dict(column_types)
        return cls.model_validate(given).sized(sample_size).scheduled(schedule).policed(on_schema_change)

    @cached_property
    def stamps(self) -> StampSettings:
        """The timestamp, delete-flag and snapshot_diff settings, as one value."""
        return StampSettings(
            dict(self.timestamps),
            dict(self.delete_flags),
            self.timestamp_lag_s,
            self.reconcile_every,
            tuple(self.timestamps_not_null),
            tuple(self.row_version_sources),
            self.snapshot_diff,
            tuple(self.dump_sources),
            tuple(self.timestamps_text),
        )

    def stored(self) -> dict[str, Any]:
        """The options as the catalog stores them (JSON): the keys they were given with.

        >>> ViewOptions.model_validate({"strategy": "sketch"}).stored()
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

        >>> ViewOptions.model_validate({"strategy": "sketch"}).policed("evolve").stored()
        {'strategy': 'sketch'}
        """
        return self._with("on_schema_change", None if on_schema_change == DEFAULT_SCHEMA_POLICY else on_schema_change)

    def published(self, destinations: list[DestinationSpec] | list[dict]) -> ViewOptions:
        """These options with `destinations` (stored also when empty: [] publishes nothing).

        >>> ViewOptions.model_validate({"strategy": "sketch"}).published([{"kind": "delta"}]).stored()
        {'strategy': 'sketch', 'destinations': [{'kind': 'delta'}]}
        """
        given = {k: v for k, v in self.stored().items() if k != "destinations"}
        specs = [DestinationSpec.model_validate(d) if isinstance(d, dict) else d for d in destinations]
        given["destinations"] = [d.model_dump(mode="json", exclude_none=True) for d in specs]
        return ViewOptions.model_validate(given)

    def _with(self, name: str, value: Any) -> ViewOptions:
        """These options with option `name` set to `value`, or left out for None."""
        given = {k: v for k, v in self.stored().items() if k != name}
        if value is not None:
            given[name] = value
        return ViewOptions.model_validate(given)
