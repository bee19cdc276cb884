"""`python -m service [--host H] [--port P] [--data-dir DIR] [--ssl-certfile CERT --ssl-keyfile KEY]`"""

from __future__ import annotations

import argparse
import logging
import sys

import uvicorn

from service.app import create_app
from service.settings import ServiceSettings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m service", description="deltasieve warehouse service.")
    parser.add_argument("--host", help="address to listen on (default 127.0.0.1; env SERVICE_HOST)")
    parser.add_argument("--port", type=int, help="port (default 8000; env SERVICE_PORT)")
    parser.add_argument("--data-dir", help="catalog and stored views (default ./data; env SERVICE_DATA_DIR)")
    parser.add_argument("--spark-master", help="Spark master URL (default local[*]; env SERVICE_SPARK_MASTER)")
    parser.add_argument(
        "--max-concurrent-syncs",
        type=int,
        help="syncs of different views at once (default 2; env SERVICE_MAX_CONCURRENT_SYNCS)",
    )
    parser.add_argument(
        "--max-syncs-per-source",
        type=int,
        help="syncs at once that read one source (default 1; env SERVICE_MAX_SYNCS_PER_SOURCE)",
    )
    parser.add_argument(
        "--max-body-bytes",
        type=int,
        help="largest request body; larger gets 413 (default 1 MiB; env SERVICE_MAX_BODY_BYTES)",
    )
    parser.add_argument(
        "--ssl-certfile", help="serve HTTPS with this PEM certificate (chain) (env SERVICE_SSL_CERTFILE)"
    )
    parser.add_argument("--ssl-keyfile", help="PEM private key of --ssl-certfile (env SERVICE_SSL_KEYFILE)")
    parser.add_argument("--log-level", help="log level (env SERVICE_LOG_LEVEL)")
    args = parser.parse_args(argv)
    overrides = {k: v for k, v in vars(args).items() if v is not None}
    try:
        settings = ServiceSettings(**overrides)
    except Exception as exc:
        parser.error(str(exc))
    if bool(settings.ssl_certfile) != bool(settings.ssl_keyfile):
        parser.error("--ssl-certfile and --ssl-keyfile go together")
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level.lower(),
        ssl_certfile=settings.ssl_certfile,
        ssl_keyfile=settings.ssl_keyfile,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
