"""What a sync records: typed here, stored and served as JSON (the sync record's `metrics`).

Fields left at None were not measured by this sync (another strategy's counters, a failed
sync's counts) and are left out of the JSON, as they always were.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

#: Counters summed over the sites of a view.
SUMMED = (
    "bytes_to_agent",
    "bytes_from_agent",
    "round_trips",
    "groups_sent",
    "groups_identical",
    "groups_changed",
    "groups_regrouped",
    "groups_regrouped_changed",
    "tuples_grouped",
    "tuples_ungrouped",
    "rows_scanned",
    "rows_received",
    "full_ship_estimate_bytes",
    "expected_benefit_bytes",
    "body_bytes_to_agent",
    "body_bytes_from_agent",
)


def add_timings(total: dict[str, float] | None, more: dict | None) -> dict[str, float] | None:
    """Seconds per phase summed (an agent's `timings`, see remote_agent/timings.py).

    >>> add_timings({"read_s": 1.0}, {"read_s": 0.5, "hash_s": 0.25})
    {'read_s': 1.5, 'hash_s': 0.25}
    >>> add_timings(None, None) is None
    True
    """
    if not more:
        return total
    out = dict(total or {})
    for phase, seconds in more.items():
        if isinstance(seconds, int | float):
            out[phase] = round(out.get(phase, 0.0) + seconds, 4)
    return out


def _json(obj) -> dict:
    """The dataclass as a dict, without the fields left at None.

    >>> _json(Traffic(bytes_to_agent=3))
    {'bytes_to_agent': 3, 'bytes_from_agent': 0, 'round_trips': 0}
    """
    out = {}
    for f in fields(obj):
        value = getattr(obj, f.name)
        if value is None:
            continue
        out[f.name] = [v.to_json() if hasattr(v, "to_json") else v for v in value] if isinstance(value, list) else value
    return out


@dataclass
class Traffic:
    """Bytes and calls that crossed the link to the agents, both ways, headers included."""

    bytes_to_agent: int = 0
    bytes_from_agent: int = 0
    round_trips: int = 0


@dataclass
class SiteDetails:
    """What a site's strategy measured beyond the counters; a one-site view shows it at the top too."""

    #: The bytes of a tuple, a key and a group hash as encoded, measured on the snapshot.
    cost_model: dict[str, float | str] | None = None
    #: Bytes each strategy was expected to cost this sync, from the statistics.
    expected_bytes: dict[str, float | None] | None = None
    # group_hash
    planning: dict | None = None
    # strategies that call /v1/extract
    agent_seconds: float | None = None
    #: A full read that resumed after a failed attempt (strategies/resumable.py): the rows
    #: kept from the failed attempts (rows_received counts the last attempt's own).
    resumed_from_rows: int | None = None
    # range_checksum
    range_rounds: int | None = None
    ranges_shipped: int | None = None
    #: What each round read at the source: ranged_rounds (rounds that read only the ranges
    #: asked about), rows_per_round, intervals_per_round, full_scan_reasons (why a later
    #: round read the whole site query).
    range_reads: dict | None = None
    # sketch (and auto when it chose sketch)
    sketch_cells: int | None = None
    sketch_bytes: int | None = None
    #: Requests of the exchange: 1 when the first table peeled (the probe, or the main stage).
    sketch_stages: int | None = None
    #: The stored table could not serve (none, or a secret due): a new one was taken, either
    #: prepared in the background after the last commit or built inline, on the critical path.
    sketch_rebuilt: bool | None = None
    sketch_prepared: bool | None = None
    #: Seconds the sync spent building the table itself, and waiting for a background build.
    sketch_built_inline_s: float | None = None
    sketch_waited_s: float | None = None
    differences_expected: float | None = None
    differences_found: int | None = None
    peel_failed: bool | None = None
    #: Protocol 4 (sketch/columns.py): cells of updated rows received instead of their whole
    #: rows, and updated rows fetched whole (digests collided, or the agent lost the session).
    cells_received: int | None = None
    cells_fallback_rows: int | None = None
    #: The sketch asked for updated rows whole (few expected: a cells request would cost more than the digests save).
    updates_whole: bool | None = None
    #: The stored rows decoded while the agent answered (store/read_ahead.py), which the lookup
    #: of the touched rows took instead of decoding them: its `seconds` (beside the exchange,
    #: not after it), `row_groups` and `bytes` decoded.
    read_ahead: dict | None = None
    #: The strategy that stood in for the chosen one at this site ("group_hash" after a failed peel).
    fallback: str | None = None
    # auto
    chosen: str | None = None
    #: timestamp: watermark (the source's clock), read_from, lag_s, rows_read by the ranged
    #: read, keys_reconciled, keys_deleted, rows_fetched (new keys the ranged read missed), reconciled (a full reconciliation ran),
    #: reconciliation (its strategy), rows_missed (rows it found that the ranged read had not),
    #: index_used (an index on a timestamp serves the ranged read) and the query_plan
    timestamp: dict | None = None
    #: row_version: snapshot (the source's, read before the changed read), previous_snapshot,
    #: read_from_xmin, rows_read, fallback (why the snapshot could not serve), and the same
    #: key reconciliation and reconciliation fields as timestamp's
    row_version: dict | None = None
    #: snapshot_diff: algorithm, previous_dumps and dumps (table -> file), unchanged (the same
    #: dumps: nothing read), candidates (the agent's inserts, updates and deletes), records
    #: (old and new dump), useless_pairs (a key both deleted and inserted), cancelled (of
    #: them, equal to the stored row), split_updates (the others), keys_deleted, and
    #: reconciled / reconciliation / fallback when the previous dump could not serve
    snapshot_diff: dict | None = None
    #: The change token (pipeline/change_token.py): True when it proved that nothing changed
    #: at the site since the version synced from (nothing read, rows_scanned 0), False when
    #: it did not; None when the agent gives none, and change_token_reason says why.
    unchanged_by_token: bool | None = None
    change_token_reason: str | None = None
    #: The change token went with the exchange's first request instead of a request of its
    #: own (the statistics expected changes: pipeline/change_token.py `rides`).
    token_rode: bool | None = None
    #: How the new fragment was written: "whole", "overlay" (the touched tuples only, over the
    #: previous base; layers.py) or "carried" (unchanged, store/carried.py), and the overlay's rows after this sync.
    fragment_written: str | None = None
    overlay_rows: int | None = None


@dataclass
class SiteMetrics(SiteDetails, Traffic):
    """One site query's extraction and fragment maintenance."""

    source: str = ""
    groups_sent: int = 0
    groups_identical: int = 0
    groups_changed: int = 0
    groups_regrouped: int = 0
    groups_regrouped_changed: int = 0
    tuples_grouped: int = 0
    tuples_ungrouped: int = 0
    rows_scanned: int = 0
    rows_received: int = 0
    rows_before: int = 0
    rows_after: int = 0
    #: Seconds per step of the site's extraction.
    phases: dict[str, float] = field(default_factory=dict)
    #: Seconds the agent spent per phase of its answers (read_s, convert_s, hash_s, send_s,
    #: lookup_s; see remote_agent/timings.py), summed over the requests of the extraction.
    agent_timings: dict[str, float] | None = None
    #: The pacing of the agent's last scan of the site query (remote_agent/pacing.py): its
    #: settings, the chunks read and their sizes, seconds slept, rows read per second.
    agent_pacing: dict | None = None
    extract_started_at: str | None = None
    extract_finished_at: str | None = None
    expected_benefit_bytes: float | None = None
    # the fragment's own delta
    fragment_inserted: int | None = None
    fragment_updated: int | None = None
    fragment_deleted: int | None = None
    full_ship_estimate_bytes: int | None = None
    #: Of bytes_to_agent and bytes_from_agent, the requests' and answers' bodies (what the
    #: exchange itself moved, HTTP headers left out), and each call's share (agent_client.Call).
    body_bytes_to_agent: int | None = None
    body_bytes_from_agent: int | None = None
    calls: list[dict] | None = None
    #: Changes of the site's tables that the view's columns do not show (source_columns.py).
    schema_changes: list[dict] | None = None

    def to_json(self) -> dict:
        return _json(self)


@dataclass
class Attempt(Traffic):
    """A failed attempt at a site's extraction, before a retry or the sync's failure."""

    site: int = 0
    source: str = ""
    attempt: int = 0
    error: str = ""
    seconds: float = 0.0

    def to_json(self) -> dict:
        return {
            "site": self.site,
            "source": self.source,
            "attempt": self.attempt,
            "error": self.error,
            "seconds": self.seconds,
            **_json(Traffic(self.bytes_to_agent, self.bytes_from_agent, self.round_trips)),
        }


@dataclass
class SyncMetrics(SiteDetails, Traffic):
    """One sync of a view; the contract's fields are all here (see CONTRACT.md)."""

    strategy: str = ""
    hash_bits: int = 0
    mode: str | None = None  # "verify" for an audit sync
    phases: dict[str, float] = field(default_factory=dict)
    #: The sites' agent_timings, summed.
    agent_timings: dict[str, float] | None = None
    retries: int = 0
    attempts: list[Attempt] = field(default_factory=list)
    #: Columns whose type changed at the source, met by this sync: {table, column, old, new,
    #: action} each, action "widened" (taken in place) or "refused" (the sync failed with
    #: error_code schema_changed; pipeline/schema_policy.py), or "none" for a change of the
    #: site's tables the view's columns do not show (an unread column added or dropped,
    #: a declared type changed under the same logical type; pipeline/source_columns.py).
    schema_changes: list[dict] | None = None
    groups_sent: int | None = None
    groups_identical: int | None = None
    groups_changed: int | None = None
    groups_regrouped: int | None = None
    groups_regrouped_changed: int | None = None
    tuples_grouped: int | None = None
    tuples_ungrouped: int | None = None
    rows_scanned: int | None = None
    rows_received: int | None = None
    full_ship_estimate_bytes: int | None = None
    expected_benefit_bytes: float | None = None
    #: The sites' body bytes (SiteMetrics): the sync's traffic less HTTP's headers.
    body_bytes_to_agent: int | None = None
    body_bytes_from_agent: int | None = None
    rows_inserted: int | None = None
    rows_updated: int | None = None
    rows_deleted: int | None = None
    rows_in_view: int | None = None
    #: Of the updates, how many changed each non-key column of the view (a keyed view's sync
    #: after its load; deltas/changed_columns.py).
    columns_changed: dict[str, int] | None = None
    rows_before: int | None = None
    rows_after: int | None = None
    realized_benefit_bytes: int | None = None
    sites: list[SiteMetrics] | None = None
    #: A verify sync's comparison with a full read.
    verify: dict | None = None
    #: How a view over several sites got its delta (join_delta.py): method ("delta_rules",
    #: or "recompute" and the reason), joined_on ("driver": an assembly of equalities in
    #: Arrow; "spark"), delta_s and write_s (seconds of the rules, and of staging the delta
    #: and the view's rows), view_written ("overlay" or "whole"), overlay_rows.
    assembly: dict | None = None
    #: A multiset view with `match` (matching.py): vanished and appeared occurrences, the
    #: pairs made updates, the BestmatchJoin window's cases and its widest windows.
    match: dict | None = None
    #: A view with a sample (view_sample.py): its size and target, the candidates logged
    #: and expected, the final ones written and expected, the refresh used, the view
    #: rows read (a build) and the sample rows written, and the seconds it took.
    sample: dict | None = None
    #: A sync that applied a redefinition (pipeline/redefine.py): method ("projection": the
    #: stored rows projected, nothing read; "read": the new definition read in full and
    #: compared), the columns added and dropped, the new key if it changed, and for a read
    #: whether old rows matched new ones by key and the sites that kept their statistics.
    redefinition: dict | None = None
    #: What ran the sync's steps (pipeline/executor.py): "arrow", in the service's process,
    #: for a view whose stored rows and delta fit under SERVICE_SMALL_SYNC_ROWS; "spark" else.
    executor: str | None = None
    #: The Spark jobs the sync ran (its job group's): none on the Arrow executor.
    spark_jobs: int | None = None
    wall_seconds: float | None = None

    def to_json(self) -> dict:
        return _json(self)

    def add_sites(self, sites: list[SiteMetrics]) -> None:
        """Sum the sites' counters into the view's, and lift a lone site's details."""
        for name in SUMMED:
            setattr(self, name, sum(getattr(m, name) or 0 for m in sites))
        self.rows_before = sum(m.rows_before for m in sites)
        self.agent_timings = None
        for m in sites:
            self.agent_timings = add_timings(self.agent_timings, m.agent_timings)
        if len(sites) == 1:
            for name in (f.name for f in fields(SiteDetails)):
                setattr(self, name, getattr(sites[0], name))
        noticed = [change for m in sites for change in m.schema_changes or []]
        if noticed:  # after those the schema policy took (widened), if any
            self.schema_changes = [*(self.schema_changes or []), *noticed]
        self.sites = sites
