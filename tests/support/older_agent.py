"""An agent that predates the sketch request's later fields, for the tests that an older agent still syncs.

    python -m tests.support.older_agent PYTHON -m remote_agent ARGS...

(`start_agent(..., prefix=older_agent.PREFIX)`) runs the agent with ARGS as it is, but for
its sketch request's control model: the fields in NEWER are dropped from each request before
it is read, so that they keep their defaults whatever the warehouse sent, as in an agent
written before them (pydantic leaves unknown fields unread). Everything else is the real agent.
"""

from __future__ import annotations

import sys
from typing import Any

from pydantic import BaseModel, model_validator

from deltasieve_protocol import models

#: The fields of SketchControl an older agent does not know.
NEWER = ("updated_rows", "change_token")
#: The prefix of start_agent's command that runs the agent older.
PREFIX = [sys.executable, "-m", "tests.support.older_agent"]


def older(model: type[BaseModel], fields: tuple[str, ...]) -> type[BaseModel]:
    """`model`, under its name, reading every message as if it held none of `fields`."""

    class Older(model):  # type: ignore[valid-type, misc]
        @model_validator(mode="before")
        @classmethod
        def _unread(cls, data: Any) -> Any:
            return {k: v for k, v in data.items() if k not in fields} if isinstance(data, dict) else data

    Older.__name__ = Older.__qualname__ = model.__name__
    return Older


def main(argv: list[str]) -> int:
    _python, module_flag, module, *args = argv
    if (module_flag, module) != ("-m", "remote_agent"):
        raise SystemExit(f"usage: {__doc__.splitlines()[2].strip()}")
    models.SketchControl = older(models.SketchControl, NEWER)  # before the agent's modules import it
    from remote_agent.__main__ import main as agent_main

    return agent_main(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
