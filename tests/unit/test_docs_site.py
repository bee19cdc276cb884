"""The documentation site stays true: its generated reference pages name every CLI command,
every setting of both processes and every API route; every strategy has its page; the
README stays short, its links lead somewhere and its Layout names every top-level folder.
(`make docs` builds the site itself, strictly; this checks what a build cannot.)"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README_MAX_LINES = 300


@pytest.fixture(scope="module")
def docs_gen():
    spec = importlib.util.spec_from_file_location("docs_gen", ROOT / "scripts" / "docs_gen.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def reference(docs_gen) -> dict[str, str]:
    # without each process's --help: the tables alone must name every setting
    return docs_gen.reference_pages(with_help=False)


def test_every_row_of_the_type_matrix_is_on_its_page(docs_gen, reference):
    from workloads.type_matrix import ENGINES, ROWS

    page = reference["type-matrix.md"]
    sections = re.split(r"^## ", page, flags=re.M)[1:]
    assert len(sections) == len(ENGINES)
    for engine, section in zip(ENGINES, sections):
        lines = {line.split(" | ")[0].lstrip("| "): line for line in section.splitlines() if line.startswith("| ")}
        for row in (r for r in ROWS if r.engine == engine):
            assert row.family in lines, f"{row.id} is not on the page"
            line = lines[row.family]
            assert f"`{row.declared or '(none)'}`" in line, row.id
            for i, edge in enumerate(row.edges):
                assert edge.what in line, f"{row.id}: edge {edge.what!r} is not on the page"
                if i not in row.shown:
                    shown = str(edge.json) if row.refused else json.dumps(edge.json, ensure_ascii=False)
                    assert docs_gen.code(shown) in line, f"{row.id}: edge {edge.what!r}'s value is not on the page"
            status = "refused" if row.refused else "delivered"
            assert line.rstrip(" |").split(" | ")[-1].startswith(status), f"{row.id}: its status is not {status}"


def headings(page: str) -> set[str]:
    return {line[3:].strip() for line in page.splitlines() if line.startswith("## ")}


def test_every_cli_command_has_its_section(docs_gen, reference):
    paths = [" ".join(path) for path, _ in docs_gen.cli_commands()]
    assert {"deltasieve view add", "deltasieve changes", "deltasieve source list"} <= set(paths)
    missing = [p for p in paths if p not in headings(reference["cli.md"])]
    assert not missing, f"commands missing from the CLI reference: {missing}"


def test_every_option_of_every_command_is_listed(docs_gen, reference):
    page = reference["cli.md"]
    for _, command in docs_gen.cli_commands():
        for param in command.params:
            for opt in getattr(param, "opts", []):
                if opt.startswith("-"):
                    assert f"`{opt}`" in page, f"{opt} of {command.name} missing from the CLI reference"


def test_every_setting_of_both_processes_is_listed(docs_gen, reference):
    page = reference["settings.md"]
    names = [name for _, _, cls in docs_gen.settings_classes() for name in docs_gen.env_names(cls)]
    assert {"SERVICE_DATA_DIR", "SERVICE_API_KEY", "AGENT_DB_URL", "AGENT_TOKEN", "AGENT_ALLOW"} <= set(names)
    missing = [n for n in names if f"| `{n}` |" not in page]
    assert not missing, f"settings missing from the settings reference: {missing}"


def test_every_route_of_both_apps_is_listed(docs_gen, reference):
    page = reference["api.md"]
    count = 0
    for rel in docs_gen.API_DOCUMENTS.values():
        document = json.loads((ROOT / rel).read_text())
        for method, path, _ in docs_gen.routes(document):
            assert f"### {method} {path}" in page, f"{method} {path} ({rel}) missing from the API reference"
            count += 1
    assert count >= 20


def test_the_row_encoding_page_is_the_spec(reference):
    spec = (ROOT / "openapi" / "row-encoding.md").read_text()
    assert reference["row-encoding.md"].endswith(spec)


def test_every_strategy_has_a_page_in_the_nav():
    from warehouse.strategies import STRATEGIES

    nav = (ROOT / "mkdocs.yml").read_text()
    for name in STRATEGIES:
        assert (ROOT / "docs" / "strategies" / f"{name}.md").is_file(), f"no page for strategy {name}"
        assert f"strategies/{name}.md" in nav, f"strategy {name}'s page is not in mkdocs.yml's nav"


def test_benchmark_pages_come_from_every_results_file(docs_gen):
    pages = docs_gen.benchmark_pages()
    folder = ROOT / "tests" / "benchmarks" / "results"
    top = {p.stem for p in folder.glob("*.json")}
    below = {f"{p.parent.name}-{p.stem}" for p in folder.glob("*/*.json")}
    results = sorted(top | below)
    awaited = set(docs_gen.AWAITED) - set(results)  # linked by the docs, not run yet
    # goals: read from the results files by tests/benchmarks/goals.py, not a file of its own
    assert top and sorted(p[:-3] for p in pages if p != "index.md") == sorted({*results, *awaited, "goals"})
    assert "(goals.md)" in pages["index.md"] and "# Where the goals stand" in pages["goals.md"]
    for name in awaited:
        assert "has not been run yet" in pages[f"{name}.md"] and f"({name}.md)" in pages["index.md"]
    for name in results:
        page = pages[f"{name}.md"]
        assert "**Date**" in page and "**Machine**" in page and "**Command**" in page
        assert not re.search(r"commit [0-9a-f]{7}", page), f"{name}: a commit hash in its page"
        assert f"({name}.md)" in pages["index.md"]


def test_the_readme_is_short_and_its_links_lead_somewhere():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= README_MAX_LINES
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if "://" in target or target.startswith("mailto:"):
            continue
        assert (ROOT / target).exists(), f"README links to {target}, which does not exist"


def test_the_readme_layout_names_every_top_level_folder():
    text = (ROOT / "README.md").read_text()
    block = text.split("## Layout", 1)[1].split("```")[1]
    listed = {line.split()[0] for line in block.splitlines() if line.strip()}
    # the folders the repository holds: what git tracks (data/, site/, caches and egg-info are not)
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    folders = {path.split("/", 1)[0] + "/" for path in tracked.splitlines() if "/" in path and not path.startswith(".")}
    assert folders - listed == set(), "top-level folders missing from the README's Layout"
    assert listed - folders == set(), "the README's Layout names folders that do not exist"
