"""`python -m remote_agent --db-url URL [--host H] [--port P] [--token T] [--allow TABLE]... [--ssl-certfile CERT --ssl-keyfile KEY [--ssl-ca-certs CA]]`

The flags are the settings' fields (settings.py); `--help` lists them all.
"""

from __future__ import annotations

import copy
import os
import ssl
import sys

import uvicorn
import uvicorn.config

from remote_agent import without_dataframes

#: pyarrow's allocator in the agent and its readers (which inherit the environment): C's
#: malloc, whose freed memory freed_memory.release() hands back. pyarrow's default, mimalloc,
#: keeps freed pages for itself: a sketch stage answering 150,000 changed rows of 1M
#: students took the agent 116-122 MiB above its idle size with it, 85-87 MiB with malloc,
#: as fast (tests/benchmarks/sketch_memory.py). An ARROW_DEFAULT_MEMORY_POOL set by the user wins. Read once, before pyarrow is
#: first imported.
ALLOCATOR = "system"


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", ALLOCATOR)  # before pyarrow: the imports below load it
    without_dataframes.install()
    from remote_agent.app import create_app
    from remote_agent.errors import AgentError
    from remote_agent.settings import AgentSettings

    settings = AgentSettings.from_command_line(argv)
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
        log_config=log_config(settings.log_level),
        ssl_certfile=settings.ssl_certfile,
        ssl_keyfile=settings.ssl_keyfile,
        # with a CA, a client without a certificate it signed fails the TLS handshake
        ssl_ca_certs=settings.ssl_ca_certs,
        ssl_cert_reqs=ssl.CERT_REQUIRED if settings.ssl_ca_certs else ssl.CERT_NONE,
    )
    return 0


def log_config(level: str) -> dict:
    """uvicorn's logging, with the agent's own logger ("remote_agent") on uvicorn's handler at
    `level`: by itself it would have none, and its lines below WARNING would be dropped
    whatever --log-level says."""
    config = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    config["loggers"]["remote_agent"] = {
        "handlers": ["default"],
        "level": uvicorn.config.LOG_LEVELS[level.lower()],
        "propagate": False,
    }
    return config


if __name__ == "__main__":
    sys.exit(main())
