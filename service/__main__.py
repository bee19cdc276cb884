"""`python -m service [--host H] [--port P] [--data-dir DIR]`"""

from __future__ import annotations

import argparse
import logging
import sys

import uvicorn

from .app import create_app
from .settings import ServiceSettings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m service", description="deltasieve warehouse service.")
    parser.add_argument("--host", help="address to listen on (default 127.0.0.1; env SERVICE_HOST)")
    parser.add_argument("--port", type=int, help="port (default 8000; env SERVICE_PORT)")
    parser.add_argument("--data-dir", help="catalog and stored views (default ./data; env SERVICE_DATA_DIR)")
    parser.add_argument("--spark-master", help="Spark master URL (default local[*]; env SERVICE_SPARK_MASTER)")
    parser.add_argument("--max-concurrent-syncs", type=int, help="syncs of different views at once (env SERVICE_MAX_CONCURRENT_SYNCS)")
    parser.add_argument("--log-level", help="log level (env SERVICE_LOG_LEVEL)")
    args = parser.parse_args(argv)
    overrides = {k: v for k, v in vars(args).items() if v is not None}
    try:
        settings = ServiceSettings(**overrides)
    except Exception as exc:
        parser.error(str(exc))
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level=settings.log_level.lower())
    return 0


if __name__ == "__main__":
    sys.exit(main())
