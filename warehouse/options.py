"""Options of one sync, with their defaults defined once (the service's settings use them and
build a sync's options: `ServiceSettings.sync_options`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

# The service's settings take the sync defaults from this module: it loads no engine (no Spark,
# Arrow or httpx), so that reading the settings loads none either.
from deltasieve_protocol.defaults import DEFAULT_HASH_BITS
from warehouse.defaults import DEADLINE_S, READ_TIMEOUT_S
from warehouse.executor import DEFAULT_SMALL_SYNC_ROWS
from warehouse.planning.cost_model import DEFAULT_GROUPING
from warehouse.view_options import DEFAULT_STRATEGY, ViewOptions

#: "site": Beta prior at the site's observed update rate; "paper": updates seen over syncs seen, as Lu, Liu
#: and Hyland publish it.
DEFAULT_PRIOR_MODE: Final = "site"
#: Update probability assumed before any update has been observed.
DEFAULT_PRIOR = 0.05
#: Rows per Arrow frame the agent answers with: large enough to compress well, small
#: enough to keep a frame's memory modest on both sides.
DEFAULT_BATCH_ROWS = 16_384
#: Syncs a sketch table's secret serves before a new one is drawn and the table rebuilt:
#: the secret crosses the link with every sync, so it must not serve for long.
DEFAULT_SKETCH_SEED_ROTATION = 100
#: Extra attempts at a site's extraction after a transient failure (link, timeout, cut answer).
DEFAULT_AGENT_RETRIES = 2
#: Wait before the first retry; doubled before each next one.
DEFAULT_RETRY_BACKOFF_S = 2.0


@dataclass
class SyncOptions:
    strategy: str = DEFAULT_STRATEGY
    hash_bits: int = DEFAULT_HASH_BITS
    prior_mode: str = DEFAULT_PRIOR_MODE
    default_prior: float = DEFAULT_PRIOR
    plan_partitions: int = 0  # 0: Spark's default parallelism
    grouping: str = DEFAULT_GROUPING
    batch_rows: int = DEFAULT_BATCH_ROWS
    #: Seconds without a byte from the agent before a call fails.
    agent_read_timeout_s: float = READ_TIMEOUT_S
    #: Seconds one call to the agent may take in all.
    agent_deadline_s: float = DEADLINE_S
    agent_retries: int = DEFAULT_AGENT_RETRIES
    agent_retry_backoff_s: float = DEFAULT_RETRY_BACKOFF_S
    #: Syncs between two secrets of a sketch table (each new secret rebuilds the table).
    sketch_seed_rotation: int = DEFAULT_SKETCH_SEED_ROTATION
    #: Stored plus delta rows up to which a view is synced on Arrow, not Spark (executor.py).
    small_sync_rows: int = DEFAULT_SMALL_SYNC_ROWS
    #: Also read every site query in full and report where the result differs (audit mode).
    verify: bool = False
    #: The view's stored options (each strategy reads its own settings from them); by
    #: default those of a view defined without any (the sync reads no strategy from them).
    view_options: ViewOptions = field(default_factory=lambda: ViewOptions.from_stored({"strategy": DEFAULT_STRATEGY}))
