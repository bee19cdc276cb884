"""Settings of the warehouse service: flags on the command line, or SERVICE_* variables."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from service import retention_policy
from service.secrets import Secrets
from warehouse import defaults as warehouse_defaults
from warehouse import options as sync_defaults
from warehouse.options import SyncOptions
from warehouse.spark_master import check_master
from warehouse.view_options import ViewOptions

# Every default and validator comes from a module that loads no engine (no Spark, Arrow,
# pandas or database driver): tests/unit/service/test_settings_imports.py.

DEFAULT_PORT = 8000
#: Seconds between two checks of every agent (source_health.py): slow, a check costs the agent a schema read.
SOURCE_CHECK_INTERVAL_S = 300.0


class ServiceSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SERVICE_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    data_dir: Path = Path("./data")
    spark_master: str = Field(default="local[*]", description="local[*] or a cluster master URL")
    spark_driver_memory: str | None = Field(
        default=None,
        description="Spark driver heap, e.g. 8g; default: a quarter of the machine's memory (2g to 16g) on a local master, 2g with a cluster",
    )
    spark_conf: dict[str, str] = Field(
        default_factory=dict, description='extra Spark properties, as JSON: {"spark.executor.memory": "8g"}'
    )
    spark_ship_code: bool = Field(
        default=True,
        description="with a cluster master, send the code Python tasks import to the executors; false when deltasieve is installed on the workers",
    )
    #: Syncs of different views that may run at once (Spark shares the machine between them).
    max_concurrent_syncs: int = Field(
        default=2,
        ge=1,
        description="syncs at once (the pool); more wait in the queue, sources in turn, oldest due first within each",
    )
    #: A gentle hand on a legacy database: its agent serves this many syncs at once.
    max_syncs_per_source: int = Field(
        default=1,
        ge=1,
        description="syncs at once that read one source (a sync takes a slot on each source its view reads); keep it within the agent's AGENT_MAX_CONCURRENT_EXTRACTIONS",
    )
    #: A view this large takes seconds to minutes a sync: it keeps to a share of the pool (fair_share.py).
    large_sync_rows: int = Field(
        default=500_000,
        ge=1,
        description="a view whose latest sync left at least this many rows is large: large syncs keep to SERVICE_LARGE_SYNC_SHARE of the pool, so small views always have a slot",
    )
    large_sync_share: float = Field(
        default=0.5,
        ge=0.0,
        le=1.0,
        description="the share of the pool large syncs may hold at once (at least one, and one slot less than the pool when it has two or more)",
    )
    api_key: SecretStr | None = Field(
        default=None,
        description="the admin key: when set (or once a key is made with POST /v1/keys), every call but GET /health needs a key (X-API-Key or Bearer)",
    )
    audit_file: Path | None = Field(
        default=None,
        description="also append the audit log (GET /v1/audit) to this file, one JSON object per line",
    )
    metrics_open: bool = Field(
        default=False, description="serve GET /metrics without a key (a Prometheus scraper inside a trusted network)"
    )
    secret_key: SecretStr | None = Field(
        default=None,
        description="the Fernet key (32 url-safe base64 bytes) literal secrets are stored encrypted under: a "
        "source's token, a destination URL's password; without it only env:NAME and file:/PATH references are "
        'taken. Make one with `python -c "from cryptography.fernet import Fernet; '
        'print(Fernet.generate_key().decode())"`',
    )
    hash_bits: Literal[64, 128] = Field(
        default=sync_defaults.DEFAULT_HASH_BITS, description="width of the group hashes in bits (64 or 128)"
    )
    prior_mode: Literal["site", "paper"] = Field(
        default=sync_defaults.DEFAULT_PRIOR_MODE,
        description="how update probabilities treat a tuple's entry (site: a Beta prior at the site's update rate; paper: uno/tno)",
    )
    default_prior: float = Field(
        default=sync_defaults.DEFAULT_PRIOR,
        ge=0.0,
        le=1.0,
        description="update probability assumed before any update was observed",
    )
    grouping: Literal["per_tuple", "group"] = Field(
        default=sync_defaults.DEFAULT_GROUPING,
        description="grow a group while it raises EB per tuple, or the group's EB (Lu, Liu and Hyland's rule)",
    )
    plan_partitions: int = Field(
        default=0, ge=0, description="partitions for group planning; 0 = Spark's default parallelism"
    )
    agent_read_timeout_s: float = Field(
        default=warehouse_defaults.READ_TIMEOUT_S,
        gt=0,
        description="seconds without a byte from an agent before a call fails",
    )
    agent_deadline_s: float = Field(
        default=warehouse_defaults.DEADLINE_S, gt=0, description="seconds one call to an agent may take in all"
    )
    agent_retries: int = Field(
        default=sync_defaults.DEFAULT_AGENT_RETRIES,
        ge=0,
        le=10,
        description="extra attempts at a site's extraction after a transient failure (link, timeout, cut answer)",
    )
    agent_retry_backoff_s: float = Field(
        default=sync_defaults.DEFAULT_RETRY_BACKOFF_S,
        ge=0,
        le=600,
        description="pause before the first retry, doubled before each next one",
    )
    sketch_seed_rotation: int = Field(
        default=sync_defaults.DEFAULT_SKETCH_SEED_ROTATION,
        ge=1,
        description="syncs a sketch table's secret serves before a new one is drawn and the table rebuilt",
    )
    small_sync_rows: int = Field(
        default=sync_defaults.DEFAULT_SMALL_SYNC_ROWS,
        ge=0,
        description="stored rows plus delta rows up to which a view is synced in the service's process with Arrow "
        "(no Spark job: a 1,000-row no-change sync costs tens of milliseconds) rather than by Spark jobs (a fixed "
        "cost of hundreds of milliseconds to seconds a sync); a view moves between the two as it grows and shrinks. "
        "The default is where the Arrow build of a whole fragment still takes a fraction of a second and tens of MiB; "
        "0 syncs every view with Spark. A Spark master other than local[...] always uses Spark",
    )
    sketch_prepare_wait_s: float = Field(
        default=warehouse_defaults.SKETCH_PREPARE_WAIT_S,
        ge=0,
        description="seconds a sync waits for the background build of its sketch table before it cancels it and builds the table itself",
    )
    retry_interrupted: bool = Field(
        default=True,
        description="retry once, after a restart, a sync the service's stop or death interrupted while it ran "
        "(a new sync with trigger retry and retry_of naming it; a retry that is interrupted too is not retried)",
    )
    agent_ca_bundle: Path | None = Field(default=None, description="CA certificate(s) to trust for https:// agents")
    agent_client_cert: Path | None = Field(
        default=None,
        description="mutual TLS: the certificate (PEM) the service presents to https:// agents started with "
        "--ssl-ca-certs; with SERVICE_AGENT_CLIENT_KEY",
    )
    agent_client_key: Path | None = Field(
        default=None, description="the private key (PEM) of SERVICE_AGENT_CLIENT_CERT"
    )
    #: Largest request body accepted; the biggest legitimate one is a view of 100,000 characters.
    max_body_bytes: int = Field(
        default=1024 * 1024, ge=1024, description="largest request body in bytes; larger gets 413"
    )
    ssl_certfile: str | None = Field(
        default=None, description="serve HTTPS with this certificate (PEM; uvicorn's ssl_certfile)"
    )
    ssl_keyfile: str | None = Field(
        default=None, description="private key of ssl_certfile (PEM; uvicorn's ssl_keyfile)"
    )
    scheduler: bool = Field(
        default=True,
        description="run the views' scheduled syncs; false (e.g. for maintenance) leaves schedules stored but runs none",
    )
    keep_deltas: str = Field(
        default=retention_policy.DEFAULT_KEEP,
        description="retention of each view's syncs (records and deltas): a duration (30d, 12h, 45m, 90s, 2w) keeps "
        "the syncs that finished within it, a count (1000) the newest syncs; never removed: the current version's "
        "sync and later ones, the newest record; a removed sync answers 410",
    )
    retention_interval_s: float = Field(
        default=retention_policy.DEFAULT_INTERVAL_S,
        gt=0,
        description="seconds between two rounds of removing what keep_deltas lets go",
    )
    publish_workers: int = Field(
        default=4,
        ge=1,
        le=64,
        description="destinations applied at once per kind (Delta tables, PostgreSQL tables), never two on one "
        "destination: a view's destinations are applied side by side, and a slow warehouse holds only its own kind",
    )
    delta_keep_versions: int = Field(
        default=warehouse_defaults.DEFAULT_KEEP_VERSIONS,
        ge=1,
        description="versions of each Delta table whose files are kept (time travel to them works): older files are "
        "vacuumed at each compaction, so a table's disk is at most about this many versions' worth of its files",
    )
    iceberg_keep_snapshots: int = Field(
        default=warehouse_defaults.DEFAULT_KEEP_VERSIONS,
        ge=1,
        description="syncs of each Iceberg table whose snapshots are kept (time travel to them works): once a table "
        "holds twice as many snapshots, older ones are expired and the files only they read deleted",
    )
    delta_cache_mib: int = Field(
        default=warehouse_defaults.DELTA_CACHE_BYTES // 2**20,
        ge=0,
        description="MiB of memory holding the rows of the Delta files the service last wrote, so that the next "
        "sync's rewrite of a file takes them instead of reading it back (a million students-like rows take about "
        "170 MiB; 0 reads every file): a scattered apply takes about a quarter less time",
    )
    source_check_interval_s: float = Field(
        default=SOURCE_CHECK_INTERVAL_S,
        gt=0,
        description="seconds between two checks of each source's agent (reachable, token taken): a source's health",
    )
    openlineage_transport: Literal["none", "http", "file", "console", "config"] | None = Field(
        default=None,
        description="where each sync's OpenLineage run events go (START, COMPLETE, FAIL, and OTHER once a destination "
        "applied it): http (SERVICE_OPENLINEAGE_URL), file (SERVICE_OPENLINEAGE_FILE, one event per line), console "
        "(the service's log), config (the OpenLineage client's own configuration: OPENLINEAGE_CONFIG, openlineage.yml, "
        "OPENLINEAGE_URL or OPENLINEAGE__TRANSPORT__* variables), none; unset: http when SERVICE_OPENLINEAGE_URL is "
        "set, file when SERVICE_OPENLINEAGE_FILE is, else none",
    )
    openlineage_url: str | None = Field(
        default=None, description="the OpenLineage HTTP endpoint's base URL, e.g. http://marquez:5000"
    )
    openlineage_endpoint: str = Field(
        default="api/v1/lineage", description="the path under SERVICE_OPENLINEAGE_URL events are posted to"
    )
    openlineage_api_key: SecretStr | None = Field(
        default=None, description="sent as a Bearer token with each event posted to SERVICE_OPENLINEAGE_URL"
    )
    openlineage_file: Path | None = Field(
        default=None, description="the file the events are appended to, one JSON document per line"
    )
    openlineage_namespace: str = Field(
        default="deltasieve",
        min_length=1,
        description="the OpenLineage job namespace of the syncs (each view is a job of it)",
    )
    openlineage_timeout_s: float = Field(
        default=5.0, gt=0, description="seconds one event may take to be posted before it counts as failed"
    )
    log_level: str = "info"

    @field_validator("api_key", "secret_key", "openlineage_api_key", mode="before")
    @classmethod
    def _empty_is_none(cls, value):
        return None if value in ("", None) else value

    @field_validator("keep_deltas")
    @classmethod
    def _keep_policy(cls, value: str) -> str:
        retention_policy.Keep.parse(value)
        return value.strip()

    @field_validator("secret_key")
    @classmethod
    def _fernet_key(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            Secrets(value.get_secret_value())  # refused at start, not at the first secret
        return value

    def sync_options(self, view: ViewOptions, *, verify: bool = False) -> SyncOptions:
        """The options of one sync of a view with these options: its strategy, and the sync
        settings of the service (`verify`: also read every site query in full, audit mode).

        >>> options = ServiceSettings(hash_bits=64).sync_options(ViewOptions.from_stored({"strategy": "sketch"}), verify=True)
        >>> options.strategy, options.hash_bits, options.verify
        ('sketch', 64, True)
        """
        return SyncOptions(
            strategy=view.strategy,
            hash_bits=self.hash_bits,
            prior_mode=self.prior_mode,
            default_prior=self.default_prior,
            plan_partitions=self.plan_partitions,
            grouping=self.grouping,
            agent_read_timeout_s=self.agent_read_timeout_s,
            agent_deadline_s=self.agent_deadline_s,
            agent_retries=self.agent_retries,
            agent_retry_backoff_s=self.agent_retry_backoff_s,
            sketch_seed_rotation=self.sketch_seed_rotation,
            small_sync_rows=self.small_sync_rows,
            verify=verify,
            view_options=view,
        )

    def keep_versions(self, kind: str) -> int:
        """How many of its own versions a destination of `kind` keeps (Delta versions, Iceberg snapshots)."""
        return self.iceberg_keep_snapshots if kind == "iceberg" else self.delta_keep_versions

    def secrets(self) -> Secrets:
        """What seals secrets for the catalog and reveals them for use (service/secrets.py)."""
        return Secrets(self.secret_key.get_secret_value() if self.secret_key else None)

    def keep_policy(self) -> retention_policy.Keep:
        """The retention policy keep_deltas says."""
        return retention_policy.Keep.parse(self.keep_deltas)

    @field_validator("spark_master")
    @classmethod
    def _master_url(cls, value: str) -> str:
        return check_master(value)

    @field_validator("hash_bits", mode="before")
    @classmethod
    def _bits_from_text(cls, value):
        # an environment variable arrives as text, which a Literal of ints never equals
        return int(value) if isinstance(value, str) and value.strip().isdigit() else value

    @model_validator(mode="after")
    def _client_pair(self):
        if (self.agent_client_cert is None) != (self.agent_client_key is None):
            raise ValueError("SERVICE_AGENT_CLIENT_CERT and SERVICE_AGENT_CLIENT_KEY go together")
        return self

    @model_validator(mode="after")
    def _lineage_transport(self):
        if self.openlineage_transport is None:
            if self.openlineage_url and self.openlineage_file:
                raise ValueError(
                    "SERVICE_OPENLINEAGE_URL and SERVICE_OPENLINEAGE_FILE: set SERVICE_OPENLINEAGE_TRANSPORT to say which"
                )
            self.openlineage_transport = "http" if self.openlineage_url else "file" if self.openlineage_file else "none"
        if self.openlineage_transport == "http" and not self.openlineage_url:
            raise ValueError("SERVICE_OPENLINEAGE_TRANSPORT=http needs SERVICE_OPENLINEAGE_URL")
        if self.openlineage_transport == "file" and not self.openlineage_file:
            raise ValueError("SERVICE_OPENLINEAGE_TRANSPORT=file needs SERVICE_OPENLINEAGE_FILE")
        return self

    def agent_verify(self) -> ssl.SSLContext | bool:
        """How to check an https:// agent's certificate: the CA bundle if set, else the system's CAs;
        with a client certificate, the context also presents it (mutual TLS)."""
        if self.agent_ca_bundle or self.agent_client_cert:
            context = ssl.create_default_context(cafile=str(self.agent_ca_bundle) if self.agent_ca_bundle else None)
            if self.agent_client_cert and self.agent_client_key:
                context.load_cert_chain(str(self.agent_client_cert), str(self.agent_client_key))
            return context
        return True
