"""`python -m remote_agent --db-url URL [--host H] [--port P] [--token T] [--allow TABLE]... [--ssl-certfile CERT --ssl-keyfile KEY]`

The flags are the settings' fields (settings.py); `--help` lists them all.
"""

from __future__ import annotations

import sys

import uvicorn

from remote_agent import without_dataframes


def main(argv: list[str] | None = None) -> int:
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
        ssl_certfile=settings.ssl_certfile,
        ssl_keyfile=settings.ssl_keyfile,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
