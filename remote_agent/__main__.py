"""`python -m remote_agent --db-url URL [--host H] [--port P] [--token T] [--allow TABLE]... [--ssl-certfile CERT --ssl-keyfile KEY]`"""

from __future__ import annotations

import argparse
import sys

import uvicorn

from remote_agent import without_pandas


def main(argv: list[str] | None = None) -> int:
    without_pandas.install()
    from remote_agent.app import create_app
    from remote_agent.errors import AgentError
    from remote_agent.settings import AgentSettings

    parser = argparse.ArgumentParser(
        prog="python -m remote_agent", description="Read-only deltasieve agent next to a legacy database."
    )
    parser.add_argument(
        "--db-url",
        help="sqlite:///ABSOLUTE/PATH.db, postgresql://USER[:PASSWORD]@HOST[:PORT]/DB, "
        "mysql://USER[:PASSWORD]@HOST[:PORT]/DB (mariadb:// alike), or file:///ABSOLUTE/DIR "
        "for a directory of dump files (env AGENT_DB_URL)",
    )
    parser.add_argument(
        "--cache-dir",
        help="where a directory of dumps keeps its current dumps converted to Parquet (default: under the "
        "system's temp dir; env AGENT_CACHE_DIR)",
    )
    parser.add_argument("--host", help="address to listen on (default 127.0.0.1; env AGENT_HOST)")
    parser.add_argument("--port", type=int, help="port (default 8765; env AGENT_PORT)")
    parser.add_argument(
        "--token", help="require 'Authorization: Bearer TOKEN' on every call but /health (env AGENT_TOKEN)"
    )
    parser.add_argument(
        "--allow",
        action="append",
        metavar="TABLE[:COL,...]",
        help="expose only these tables (repeatable; env AGENT_ALLOW, ';'-separated)",
    )
    parser.add_argument(
        "--statement-timeout-s",
        type=float,
        help="cancel a statement after this many seconds (env AGENT_STATEMENT_TIMEOUT_S)",
    )
    parser.add_argument(
        "--chunk-rows", type=int, help="rows read per short read-only transaction (default 50000; env AGENT_CHUNK_ROWS)"
    )
    parser.add_argument(
        "--target-chunk-s",
        type=float,
        help="size each chunk so that its read takes about this many seconds, up to --chunk-rows (default off; env AGENT_TARGET_CHUNK_S)",
    )
    parser.add_argument(
        "--max-rows-per-s",
        type=float,
        help="read the source at most this many rows per second on average, sleeping between chunks (default off; env AGENT_MAX_ROWS_PER_S)",
    )
    parser.add_argument(
        "--sketch-table-mib",
        type=int,
        help="memory for the agent's own table in a sketch exchange (default 64; env AGENT_SKETCH_TABLE_MIB)",
    )
    parser.add_argument(
        "--read-ahead",
        action=argparse.BooleanOptionalAction,
        help="read the site query in a reader process, overlapping the read with hashing (default on; env AGENT_READ_AHEAD)",
    )
    parser.add_argument(
        "--arrow-reads",
        action=argparse.BooleanOptionalAction,
        help="read scan chunks straight into Arrow where the adapter can: PostgreSQL through ADBC (default off; env AGENT_ARROW_READS)",
    )
    parser.add_argument(
        "--max-concurrent-extractions",
        type=int,
        help="extractions at once; more get 429 (env AGENT_MAX_CONCURRENT_EXTRACTIONS)",
    )
    parser.add_argument(
        "--max-body-bytes", type=int, help="largest request body; larger gets 413 (env AGENT_MAX_BODY_BYTES)"
    )
    parser.add_argument("--ssl-certfile", help="serve HTTPS with this PEM certificate (chain) (env AGENT_SSL_CERTFILE)")
    parser.add_argument("--ssl-keyfile", help="PEM private key of --ssl-certfile (env AGENT_SSL_KEYFILE)")
    parser.add_argument("--log-level", help="uvicorn log level (env AGENT_LOG_LEVEL)")
    args = parser.parse_args(argv)
    overrides = {k: v for k, v in vars(args).items() if v is not None}
    try:
        settings = AgentSettings(**overrides)
    except Exception as exc:
        parser.error(str(exc))
    if bool(settings.ssl_certfile) != bool(settings.ssl_keyfile):
        parser.error("--ssl-certfile and --ssl-keyfile go together")
    try:
        app = create_app(settings)
        app.state.agent.adapter.check()
    except AgentError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 2
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level.lower(),
        ssl_certfile=settings.ssl_certfile,
        ssl_keyfile=settings.ssl_keyfile,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
