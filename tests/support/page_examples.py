"""The Python examples of a section of a docs page, run as written (the reading examples of
docs/results/destinations.md, each against a table a destination wrote)."""

from __future__ import annotations

import re
from pathlib import Path

#: The page whose reading examples the destination tests run.
DESTINATIONS_PAGE = Path(__file__).parents[2] / "docs" / "results" / "destinations.md"


def examples(page: Path, heading: str) -> list[str]:
    """The ```python blocks of the section `heading` (a `## ` line, without the hashes) of `page`."""
    section = page.read_text().split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def run(page: Path, example: str, **names) -> dict:
    """Run `example` with `names` defined; the names it left defined."""
    scope = dict(names)
    exec(compile(example, str(page), "exec"), scope)
    return scope
