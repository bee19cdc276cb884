"""Settings of the agent: flags on the command line, or AGENT_* environment variables."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, CliSettingsSource, NoDecode, SettingsConfigDict

from deltasieve_protocol.defaults import DIGEST_BITS
from remote_agent.pacing import Pacer, Pacing

DEFAULT_PORT = 8765
#: Rows per chunk: large enough that a chunk costs little more than its rows, small
#: enough that its transaction is short and its rows (held in memory as Python objects,
#: ~1.4 KB a students row) few. Measured on SQLite, students: 50,000 held 58 MiB more
#: in the reader process than 10,000, for no faster scan.
DEFAULT_CHUNK_ROWS = 10_000
#: MiB for the agent's own table in a sketch exchange: 42 MiB hold 2M cells (21 bytes
#: each: deltasieve_protocol/iblt.py's compact layout), 16 times the main stage the statistics size
#: for ~90,000 differing pairs.
DEFAULT_SKETCH_TABLE_MIB = 42
#: Rows the warehouse expects of a scan (a request's `expected_rows`) up to which it is read
#: in the answer's own thread, not a reader process: starting a reader and its connection
#: costs about a tenth of a second of the answer's (measured on SQLite, 1,000 rows: 0.15 s
#: of waiting against 0.004 s of reading in the thread), which the overlap wins back only
#: once the scan itself takes longer than that.
DEFAULT_READ_AHEAD_MIN_ROWS = 50_000


@dataclass(frozen=True)
class ScanSettings:
    """How an answer reads the site query: rows per chunk, in a reader process or not, paced how."""

    chunk_rows: int = DEFAULT_CHUNK_ROWS
    read_ahead: bool = False
    pacing: Pacing = field(default_factory=Pacing)

    def pacer(self) -> Pacer:
        """A new pacer of one scan under these settings (pacing.py).

        >>> ScanSettings(chunk_rows=500).pacer().next_rows()
        500
        """
        return Pacer(self.chunk_rows, self.pacing)


@dataclass(frozen=True)
class SketchSettings:
    """What the agent's settings say of a sketch exchange (strategies/sketch.py).

    `table_bytes` bounds the agent's own table (None: as wide as asked); `digest_bits`
    sends updated rows as column digests of that many bits (protocol 4; None: whole), each
    with `row_check_bits` of its row hash (the request's `row_check_bits`);
    `spill_dir` holds the spilled keys (None: the system's temp dir).
    """

    scan: ScanSettings = field(default_factory=ScanSettings)
    table_bytes: int | None = None
    digest_bits: int | None = None
    row_check_bits: int = 64
    spill_dir: str | None = None


#: Placeholders the command line's help shows for values that are not a plain word.
METAVARS = {
    "--db-url": "URL",
    "--cache-dir": "DIR",
    "--host": "H",
    "--port": "P",
    "--token": "T",
    "--allow": "[SCHEMA.]TABLE[:COL,...]",
    "--hash": "[SCHEMA.]TABLE.COLUMN",
    "--block": "[SCHEMA.]TABLE.COLUMN",
    "--ssl-certfile": "CERT",
    "--ssl-keyfile": "KEY",
    "--ssl-ca-certs": "CA",
}


#: What `python -m remote_agent --help` says before the flags.
DESCRIPTION = (
    "Read-only deltasieve agent next to a legacy database.\n\n"
    "Every flag is also an AGENT_* environment variable (AGENT_DB_URL, ...; AGENT_ALLOW\n"
    "holds its rules separated by ';'); a flag wins."
)


class AgentSettings(BaseSettings):
    """The agent's settings: flags on the command line (`from_command_line`), or AGENT_* variables."""

    model_config = SettingsConfigDict(
        env_prefix="AGENT_",
        extra="ignore",
        cli_prog_name="python -m remote_agent",
        cli_kebab_case=True,
        cli_implicit_flags=True,
        cli_hide_none_type=True,
        cli_avoid_json=True,
        json_schema_extra={"description": DESCRIPTION},
    )

    db_url: str = Field(
        description="sqlite:///ABSOLUTE/PATH.db, postgresql://USER[:PASSWORD]@HOST[:PORT]/DB, "
        "mysql://USER[:PASSWORD]@HOST[:PORT]/DB (mariadb:// alike) or file:///ABSOLUTE/DIR (a directory of dump files)"
    )
    #: Never in the dump directory itself; None: a directory under the system's temp dir.
    cache_dir: str | None = Field(
        default=None,
        description="where a directory of dumps keeps its current dumps converted to Parquet (none: a "
        "directory under the system's temp dir)",
    )
    host: str = Field(default="127.0.0.1", description="address to listen on")
    port: int = Field(default=DEFAULT_PORT, description="port")
    token: SecretStr | None = Field(
        default=None, description="require 'Authorization: Bearer TOKEN' on every call but /health"
    )
    allow: Annotated[list[str], NoDecode] = Field(
        default=[],
        description="expose only these tables, as TABLE or TABLE:COL1,COL2 (repeatable; env: ';'-separated); "
        "none exposes every readable table of the default schema. On PostgreSQL and MySQL/MariaDB, SCHEMA.TABLE "
        "exposes a table of another schema (database) and SCHEMA.* all of its tables, named SCHEMA.TABLE",
    )
    hash: Annotated[list[str], NoDecode] = Field(
        default=[],
        description="always hash this column (TABLE.COLUMN, repeatable; env: ';'-separated): exposed as text, "
        "each value read replaced by its HMAC-SHA-256 under --hash-key, whatever a view asks; needs --hash-key",
    )
    block: Annotated[list[str], NoDecode] = Field(
        default=[],
        description="never expose this column (TABLE.COLUMN, repeatable; env: ';'-separated): no view can read it",
    )
    hash_key: SecretStr | None = Field(
        default=None,
        description='the secret keying the HMAC-SHA-256 of hashed columns (--hash and views\' "hash" policies); '
        "without it, a request to hash is refused (422, hash_key_missing)",
    )
    #: The legacy database comes first.
    statement_timeout_s: float = Field(default=300.0, description="cancel a statement after this many seconds")
    #: Each chunk in a short read-only transaction of its own (keyset pagination on the
    #: key): bounds how long a read holds a snapshot or lock.
    chunk_rows: int = Field(default=DEFAULT_CHUNK_ROWS, ge=1, description="rows read per short read-only transaction")
    #: Pacing (pacing.py), both off by default.
    target_chunk_s: float | None = Field(
        default=None,
        gt=0,
        description="size each chunk so that its read takes about this many seconds, up to --chunk-rows",
    )
    max_rows_per_s: float | None = Field(
        default=None,
        gt=0,
        description="read the source at most this many rows per second on average, sleeping between chunks",
    )
    #: The warehouse asks for a table a few times wider than it sends, so that a later
    #: stage needs no new read; a narrower one is built when that would take more (a later
    #: stage may then need a fall-back read). Kept tables count once each, up to 2 per
    #: extraction slot.
    sketch_table_mib: int = Field(
        default=DEFAULT_SKETCH_TABLE_MIB, ge=1, description="memory for the agent's own table in a sketch exchange"
    )
    sketch_digest_bits: int = Field(
        default=DIGEST_BITS,
        ge=0,
        le=DIGEST_BITS,
        description="bits of each column digest of an updated row a peeled sketch sends (protocol 4): fewer send "
        "more updated rows whole after their check fails; 0 makes every updated row take that path",
    )
    #: So that the database's read and the conversion to Arrow overlap with hashing and
    #: sending (readahead.py): a scan takes about as long as the slower half, not both;
    #: off reads in the answer's thread.
    read_ahead: bool = Field(
        default=True, description="read the site query in a reader process, overlapping the read with hashing"
    )
    read_ahead_min_rows: int = Field(
        default=DEFAULT_READ_AHEAD_MIN_ROWS,
        ge=0,
        description="read a scan the warehouse expects to hold at most this many rows in the answer's own thread, "
        "not a reader process (0: every scan, when --read-ahead)",
    )
    #: About 1.6x faster than psycopg at 1M rows (adapters/postgres_arrow.py); MySQL's and
    #: MariaDB's about twice their reader before, Python rows of bytes (adapters/mysql_result.py).
    #: A chunk either cannot read exactly goes through the driver's converters instead.
    #: SQLite's chunks follow `sqlite_arrow_reads`.
    arrow_reads: bool = Field(
        default=True,
        description="read PostgreSQL scan chunks (by binary COPY) and lookups by key straight into Arrow through "
        "ADBC, MySQL/MariaDB chunks through compiled code over the C client's result; off: the drivers' rows "
        "(psycopg's through a server-side cursor)",
    )
    #: The C reader of adbc-driver-sqlite builds the Arrow columns of a chunk without a
    #: Python object per value (adapters/sqlite_arrow.py); a chunk whose values it would not
    #: read exactly as sqlite3 and the converters do is read through sqlite3 instead.
    sqlite_arrow_reads: bool = Field(
        default=True,
        description="read SQLite scan chunks straight into Arrow through adbc-driver-sqlite; off: Python's sqlite3 rows",
    )
    #: A token that changes with every commit lets a sync that finds nothing changed skip its
    #: read (change_tokens.py); off, every sync reads, as before.
    change_token: bool = Field(
        default=True,
        description="answer change-token requests, so that a sync with nothing committed at the source since the "
        "last one reads no row (PostgreSQL primaries and SQLite); --no-change-token: every sync reads",
    )
    max_concurrent_extractions: int = Field(
        default=2, ge=1, description="extractions at once; more get 429 with Retry-After"
    )
    #: Unit key sets grow with the snapshot.
    max_body_bytes: int = Field(
        default=1024 * 1024 * 1024, ge=1024, description="largest request body; larger gets 413"
    )
    ssl_certfile: str | None = Field(default=None, description="serve HTTPS with this PEM certificate (chain)")
    ssl_keyfile: str | None = Field(default=None, description="PEM private key of --ssl-certfile")
    ssl_ca_certs: str | None = Field(
        default=None,
        description="mutual TLS: require every client to present a certificate signed by one of these CA "
        "certificates (PEM); needs --ssl-certfile",
    )
    log_level: str = Field(default="info", description="uvicorn log level")

    @classmethod
    def from_command_line(cls, argv: Sequence[str] | None = None) -> AgentSettings:
        """The settings from the flags in `argv` (default: the process's), over AGENT_* variables.

        Bad flags or values print the usage and exit with status 2, as argparse does.
        """
        source: CliSettingsSource[argparse.ArgumentParser] = CliSettingsSource(
            cls, parse_args_method=_parse_flags, add_argument_method=_add_flag
        )
        try:
            # BaseSettings takes the source as an init argument the pydantic plugin's signature omits
            settings = cls(_cli_settings_source=source(args=sys.argv[1:] if argv is None else list(argv)))  # type: ignore[call-arg]
        except ValidationError as exc:
            source.root_parser.error(str(exc))
        if settings.hash and not settings.hash_key:
            source.root_parser.error("--hash needs --hash-key (AGENT_HASH_KEY): the secret the hash is keyed with")
        if bool(settings.ssl_certfile) != bool(settings.ssl_keyfile):
            source.root_parser.error("--ssl-certfile and --ssl-keyfile go together")
        if settings.ssl_ca_certs and not settings.ssl_certfile:
            source.root_parser.error("--ssl-ca-certs asks clients for certificates over HTTPS: give --ssl-certfile too")
        return settings

    def pacing(self) -> Pacing:
        return Pacing(target_chunk_s=self.target_chunk_s, max_rows_per_s=self.max_rows_per_s)

    def scan(self, expected_rows: int | None = None) -> ScanSettings:
        """How answers read the site query, as these settings say; `expected_rows`: the rows
        the warehouse expects the scan to hold (None: unknown), read in the answer's thread
        when no more than `read_ahead_min_rows`.

        >>> s = AgentSettings(db_url="sqlite:///x.db")
        >>> s.scan().read_ahead, s.scan(1_000).read_ahead, s.scan(10**6).read_ahead
        (True, False, True)
        """
        small = expected_rows is not None and expected_rows <= self.read_ahead_min_rows
        return ScanSettings(self.chunk_rows, self.read_ahead and not small, self.pacing())

    def sketch(self, *, digests: bool, row_check_bits: int = 64, expected_rows: int | None = None) -> SketchSettings:
        """How answers of /v1/sketch read and build, as these settings say; `digests`: the
        request's protocol sends updated rows as column digests (4 and later), each with
        `row_check_bits` of its row hash; `expected_rows` as for `scan`."""
        return SketchSettings(
            self.scan(expected_rows),
            self.sketch_table_mib * 2**20,
            self.sketch_digest_bits if digests else None,
            row_check_bits=row_check_bits,
        )

    @field_validator("allow", "hash", "block", mode="before")
    @classmethod
    def _split_allow(cls, value):
        if isinstance(value, str):
            return [part.strip() for part in value.split(";") if part.strip()]
        return value

    @field_validator("token", "hash_key", mode="before")
    @classmethod
    def _empty_token_is_none(cls, value):
        return None if value in ("", None) else value


def _add_flag(parser: argparse.ArgumentParser, *names: str, **kwargs: Any) -> argparse.Action:
    """`add_argument`, with the placeholder of METAVARS where the flag has one."""
    metavar = next((METAVARS[n] for n in names if n in METAVARS), None)
    if metavar is not None:
        kwargs["metavar"] = metavar
    return parser.add_argument(*names, **kwargs)


def _parse_flags(parser: argparse.ArgumentParser, args: Sequence[str]) -> argparse.Namespace:
    """`parse_args`, with the repeated --allow rules joined as AGENT_ALLOW writes them.

    The command line's own list syntax would cut TABLE:COL1,COL2 at its commas.
    """
    parsed = parser.parse_args(args)
    for name in ("allow", "hash", "block"):
        if isinstance(getattr(parsed, name, None), list):
            setattr(parsed, name, ";".join(getattr(parsed, name)))
    return parsed


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


def allowed_rule(allow: dict[str, set[str] | None], name: str, schema: str | None) -> tuple[bool, set[str] | None]:
    """Whether the rules expose the table `name` (of `schema`, None: the default one), and its columns (None: all).

    A table outside the default schema is exposed by its own rule (`erp.orders`) or its
    schema's (`erp.*`).

    >>> rules = parse_allow(["orders", "erp.*", "erp.items:id,qty"])
    >>> allowed_rule(rules, "orders", None), allowed_rule(rules, "erp.orders", "erp"), allowed_rule(rules, "x", None)
    ((True, None), (True, None), (False, None))
    >>> sorted(allowed_rule(rules, "erp.items", "erp")[1])
    ['id', 'qty']
    """
    if name in allow:
        return True, allow[name]
    if schema is not None and f"{schema}.*" in allow:
        return True, allow[f"{schema}.*"]
    return False, None


def named_schemas(allow: dict[str, set[str] | None]) -> list[str]:
    """The schemas (databases) outside the default one the rules name tables of: what comes before a dot.

    >>> named_schemas(parse_allow(["orders", "erp.orders", "erp.items", "sales.*"]))
    ['erp', 'sales']
    """
    return sorted({table.partition(".")[0] for table in allow if "." in table})
