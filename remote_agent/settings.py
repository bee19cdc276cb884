"""Settings of the agent: flags on the command line, or AGENT_* environment variables."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from remote_agent.pacing import Pacing

DEFAULT_PORT = 8765
#: Rows per chunk: large enough that a chunk costs little more than its rows, small
#: enough that its transaction is short and its rows (held in memory) few.
DEFAULT_CHUNK_ROWS = 50_000
#: MiB for the agent's own table in a sketch exchange: 64 MiB hold 2M cells, 16 times the
#: main stage the statistics size for ~90,000 differing pairs.
DEFAULT_SKETCH_TABLE_MIB = 64


class AgentSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AGENT_", extra="ignore")

    db_url: str = Field(
        description="sqlite:///ABSOLUTE/PATH.db, postgresql://USER[:PASSWORD]@HOST[:PORT]/DB, mysql://USER[:PASSWORD]@HOST[:PORT]/DB (mariadb:// alike) or file:///ABSOLUTE/DIR (a directory of dump files)"
    )
    #: Where a directory of dumps keeps each table's current dump converted to Parquet
    #: (never in the dump directory itself); default: a directory under the system's temp dir.
    cache_dir: str | None = None
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    token: SecretStr | None = Field(default=None, description="bearer token required on every call but /health")
    allow: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="tables to expose, as TABLE or TABLE:COL1,COL2 (env: separated by ';'); empty exposes every readable table",
    )
    #: A statement running longer than this is cancelled: the legacy database comes first.
    statement_timeout_s: float = 300.0
    #: Rows of the site query read per chunk, each chunk in a short read-only transaction of
    #: its own (keyset pagination on the key): bounds how long a read holds a snapshot or lock.
    chunk_rows: int = Field(default=DEFAULT_CHUNK_ROWS, ge=1)
    #: Pacing (pacing.py), both off by default: chunks sized to take about this many
    #: seconds each (never above chunk_rows), and a cap on the rows read per second.
    target_chunk_s: float | None = Field(default=None, gt=0)
    max_rows_per_s: float | None = Field(default=None, gt=0)
    #: Memory for the agent's own table in one sketch exchange: the warehouse asks for a
    #: table a few times wider than it sends, so that a later stage needs no new read; a
    #: narrower one is built when that would take more (a later stage may then need a
    #: fall-back read). Kept tables count once each, up to 2 per extraction slot.
    sketch_table_mib: int = Field(default=DEFAULT_SKETCH_TABLE_MIB, ge=1)
    #: Read the site query in a reader process of its own, so that the database's read and
    #: the conversion to Arrow overlap with hashing and sending (readahead.py): a scan
    #: takes about as long as the slower half, not both; off reads in the answer's thread.
    read_ahead: bool = True
    #: Read scan chunks straight into Arrow where the adapter can: PostgreSQL through the
    #: ADBC driver (adapters/postgres_arrow.py), about 1.6x faster than psycopg at 1M rows.
    #: Off by default: its scans need no server-side cursor, which the PostgreSQL security
    #: audit's own sanity check still asks to see in the server log.
    arrow_reads: bool = False
    #: Extractions running at once; more get 429 with Retry-After.
    max_concurrent_extractions: int = Field(default=2, ge=1)
    #: Largest request body accepted (unit key sets grow with the snapshot).
    max_body_bytes: int = Field(default=1024 * 1024 * 1024, ge=1024)
    ssl_certfile: str | None = Field(
        default=None, description="serve HTTPS with this certificate (PEM; uvicorn's ssl_certfile)"
    )
    ssl_keyfile: str | None = Field(
        default=None, description="private key of ssl_certfile (PEM; uvicorn's ssl_keyfile)"
    )
    log_level: str = "info"

    def pacing(self) -> Pacing:
        return Pacing(target_chunk_s=self.target_chunk_s, max_rows_per_s=self.max_rows_per_s)

    @field_validator("allow", mode="before")
    @classmethod
    def _split_allow(cls, value):
        if isinstance(value, str):
            return [part.strip() for part in value.split(";") if part.strip()]
        return value

    @field_validator("token", mode="before")
    @classmethod
    def _empty_token_is_none(cls, value):
        return None if value in ("", None) else value


def parse_allow(rules: list[str]) -> dict[str, set[str] | None]:
    """Allow rules by table: None exposes all the table's columns.

    >>> parse_allow(["students", "grades:sid,course"]) == {"students": None, "grades": {"course", "sid"}}
    True
    """
    allowed: dict[str, set[str] | None] = {}
    for rule in rules:
        table, _, cols = rule.partition(":")
        table = table.strip()
        if not table:
            raise ValueError(f"bad --allow rule {rule!r}: expected TABLE or TABLE:COL1,COL2")
        if cols.strip():
            previous = allowed.get(table, set())
            if previous is None:
                continue
            allowed[table] = previous | {c.strip() for c in cols.split(",") if c.strip()}
        else:
            allowed[table] = None
    return allowed
