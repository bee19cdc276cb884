"""Every error of the agent carries a code of the contract, answered with that code's status,
and the agent's documentation lists every code."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from deltasieve_protocol import error_codes
from remote_agent import errors, policies
from remote_agent.errors import AgentError

ROOT = Path(__file__).resolve().parents[3]


def _error_classes() -> list[type[AgentError]]:
    found = []
    for module in (errors, policies):
        found += [c for _, c in inspect.getmembers(module, inspect.isclass) if issubclass(c, AgentError)]
    return sorted(set(found), key=lambda c: c.__name__)


def test_every_agent_error_has_a_code_of_the_contract_with_its_status():
    classes = _error_classes()
    assert len(classes) >= 14, [c.__name__ for c in classes]
    for cls in classes:
        assert cls.code in error_codes.STATUS, (
            f"{cls.__name__}.code = {cls.code!r} is not in deltasieve_protocol/error_codes.py"
        )
        if cls.code != error_codes.SOURCE_ERROR:  # a refused read keeps the status of what refused it
            assert cls.status == error_codes.STATUS[cls.code], (cls.__name__, cls.status, cls.code)


def test_the_agent_page_lists_every_code():
    page = (ROOT / "docs" / "sources" / "agent.md").read_text()
    table = page.split("## Error codes", 1)[1]
    listed = set(re.findall(r"^\| `([a-z_]+)`(?:, `([a-z_]+)`)?", table, re.M))
    names = {name for pair in listed for name in pair if name}
    assert names == set(error_codes.STATUS), sorted(names ^ set(error_codes.STATUS))
