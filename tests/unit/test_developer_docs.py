"""The developer pages name code that exists: every path, module, class and method they cite
in backticks is checked against the repository, so a rename or a removal fails here instead of
leaving a page that sends a contributor after something gone.

The rules, applied to each inline code span (fenced blocks are left out), first match wins:

1. A path: letters, digits, `_`, `.`, `-` and `/` only, with a `/` or a file suffix
   (`.py`, `.md`, …). It must exist from the repository's root if its first part is a
   top-level entry or it is a file in a folder (`warehouse/strategies/base.py`); a bare file
   name (`site_sync.py`) or a folder inside another (`adapters/`, named in its parent's row)
   must end some path in the repository. A trailing `/` names a folder.
2. A dotted name, `a.b.c` (a call's parentheses allowed). If `a` is a product package it must
   import and resolve (importlib, then getattr); on a page with namespaces (`PAGES`), `a` must
   be found in one of them and the rest resolve from it.
3. On a page with namespaces, a bare name must be found in one of them when it is a call
   (`plan()`), a CamelCase or UPPER_CASE name (`Strategy`, `ADAPTERS`), or in a table's first
   column (the page's list of methods and attributes).

Anything else (shell commands, options, SQL, JSON, plain words such as a strategy's name)
is prose to these rules.
"""

from __future__ import annotations

import doctest
import importlib
import os
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"deltasieve_protocol", "remote_agent", "service", "warehouse", "deltasieve_cli", "deltasieve"}
#: Page -> where its bare names are looked up: modules or classes, by dotted name.
PAGES: dict[str, tuple[str, ...]] = {
    "docs/development/adding-a-strategy.md": (
        "warehouse.strategies.base.Strategy",
        "warehouse.strategies.base.FragmentBuild",
        "warehouse.strategies.base.SiteContext",
        "warehouse.strategies.sync_context.SyncContext",
        "warehouse.strategies.base",
        "warehouse.strategies",
        "warehouse.strategies.auto",
        "warehouse.strategies.cheapest",
        "warehouse.metrics",
        "warehouse.view_options",
        "deltasieve_protocol.models",
    ),
    "docs/development/adding-an-adapter.md": (
        "remote_agent.adapters.base.Adapter",
        "remote_agent.adapters",
        "remote_agent.errors",
        "tests.support.sources",
    ),
    "docs/concepts/how-a-sync-works.md": (),
    "docs/development/architecture.md": (),
    "docs/development/tests.md": (),
    "docs/development/one-sync.md": (),
}
SUFFIXES = (".py", ".md", ".json", ".yml", ".yaml", ".toml", ".sh", ".html", ".js", ".css")
PATH = re.compile(r"[\w.-]+(?:/[\w.-]+)*/?")
DOTTED = re.compile(r"([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?:\(.*\))?")
BARE = re.compile(r"([A-Za-z_]\w*)(\(.*\))?")
#: Not walked for the paths that exist: caches, the built site, data a run leaves behind.
NOT_WALKED = {"__pycache__", "site", "data", "demo-data", "node_modules", "work"}


def code_spans(text: str) -> list[tuple[str, bool]]:
    """The inline code spans of a Markdown text outside fenced blocks, each with whether it
    stands in the first column of a table.

    >>> code_spans("| `a()` | `b` |\\n\\nsee `c.d`\\n```\\n`e`\\n```\\n")
    [('a()', True), ('b', False), ('c.d', False)]
    """
    text = re.sub(r"^```.*?^```[^\n]*$", "", text, flags=re.S | re.M)
    first = {
        m for line in text.splitlines() if line.startswith("|") for m in re.findall(r"`([^`]+)`", line.split("|")[1])
    }
    return [(" ".join(s.split()), s in first) for s in re.findall(r"`([^`]+)`", text)]


def repository_paths() -> set[str]:
    """Every file and folder of the repository, relative to it (folders with a trailing `/`)."""
    found = set()
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in NOT_WALKED]
        rel = Path(folder).relative_to(ROOT).as_posix()
        prefix = "" if rel == "." else rel + "/"
        found |= {prefix + d + "/" for d in dirs} | {prefix + f for f in files}
    return found


def resolve(dotted: str, namespaces: tuple[str, ...] = ()) -> object:
    """The object `dotted` names: a module of ours and attributes of it, or else attributes
    of the first namespace that has its first part; LookupError if none.

    >>> resolve("deltasieve_protocol.models.PROTOCOL_VERSION") >= 1
    True
    >>> resolve("ExtractControl.protocol", ("deltasieve_protocol.models",))  # a pydantic field: declared, no value
    >>> resolve("ExtractControl.nope", ("deltasieve_protocol.models",))
    Traceback (most recent call last):
    LookupError: ExtractControl.nope
    """
    parts = dotted.split(".")
    if parts[0] in PACKAGES:
        return load(dotted)
    for namespace in namespaces:
        home = load(namespace)
        try:
            return _attributes(home, parts, dotted)
        except LookupError:
            continue
    raise LookupError(dotted)


def load(dotted: str) -> object:
    """The object at `dotted`: its longest prefix that imports as a module, then attributes."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        return _attributes(module, parts[i:], dotted)
    raise LookupError(dotted)


def _attributes(obj: object, names: list[str], dotted: str) -> object:
    for name in names:
        if hasattr(obj, name):
            obj = getattr(obj, name)
        elif isinstance(obj, type) and any(name in vars(c).get("__annotations__", {}) for c in obj.__mro__):
            obj = None  # a field declared without a class-level value (dataclass, pydantic, ClassVar)
        else:
            raise LookupError(dotted)
    return obj


def problems(text: str, namespaces: tuple[str, ...], paths: set[str]) -> list[str]:
    """What the rules (the module's docstring) find wrong with the code spans of a page."""
    top = {p.split("/")[0] for p in paths}
    found = []
    for span, first_column in code_spans(text):
        if PATH.fullmatch(span) and ("/" in span or span.endswith(SUFFIXES)):
            named = {span, span + "/"}  # a folder may be named without its trailing slash
            if span.split("/")[0] in top or ("/" in span and not span.endswith("/")):
                ok = bool(named & paths)
            else:
                ok = any(p in named or p.endswith(tuple("/" + n for n in named)) for p in paths)
            if not ok:
                found.append(f"`{span}`: no such path in the repository")
            continue
        dotted, bare = DOTTED.fullmatch(span), BARE.fullmatch(span)
        if dotted and (dotted.group(1).split(".")[0] in PACKAGES or namespaces):
            name = dotted.group(1)
        elif bare and namespaces:
            name, call = bare.groups()
            if not (call or first_column or name[0].isupper()):
                continue
        else:
            continue
        try:
            resolve(name, namespaces)
        except LookupError:
            where = ", ".join(namespaces) if name.split(".")[0] not in PACKAGES else "the product packages"
            found.append(f"`{span}`: {name} is not found in {where}")
    return found


@pytest.fixture(scope="module")
def paths() -> set[str]:
    return repository_paths()


@pytest.mark.parametrize("page", sorted(PAGES))
def test_the_page_names_only_code_that_exists(page, paths):
    found = problems((ROOT / page).read_text(), PAGES[page], paths)
    assert not found, f"{page}:\n" + "\n".join(found)


def test_the_rules_catch_what_is_gone(paths):
    page = """
| method | does |
|---|---|
| `plan()` | kept |
| `vouches_for_untouched()` | removed |
| `dialect` | not an attribute of a strategy |

In `strategies/group_hash.py`, now a package; `warehouse/strategies/group_hash/` is one;
`warehouse.strategies.base.Strategy.stage` is there, `warehouse.strategies.base.Strategy.nope` is
not, nor is `NoSuchClass`; `make lint`, `--allow`, `auto` and `{"a": 1}` are prose.
"""
    found = problems(page, PAGES["docs/development/adding-a-strategy.md"], paths)
    assert [f.split(":")[0] for f in found] == [
        "`vouches_for_untouched()`",
        "`dialect`",
        "`strategies/group_hash.py`",
        "`warehouse.strategies.base.Strategy.nope`",
        "`NoSuchClass`",
    ]


def test_its_examples_hold():
    result = doctest.testmod(sys.modules[__name__])
    assert result.attempted >= 3 and result.failed == 0
