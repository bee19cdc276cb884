"""Check the product packages' layout: no module imports in a circle, and no two test modules
share a basename (pytest then refuses to collect the whole suite); report their sizes.

An import counts wherever it stands (at the top, inside a function, under TYPE_CHECKING):
each is a dependency a reader must hold in mind. `from package import module` depends on
that module, not on the package's own `__init__`. Run by `make lint`; exits 1 and lists
what it found otherwise.

Size is reported, not enforced: the longest modules and the longest functions (found with
`ast`) are printed on every run, so that a long file prompts a split by concern where there
is one, and no split is made only to get under a number.

    python scripts/check_layout.py [--rooms]   # --rooms also prints the subpackage graph
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("deltasieve_protocol", "remote_agent", "warehouse", "service", "deltasieve_cli", "deltasieve")
#: How many of the longest modules, and of the longest functions, the report lists.
REPORTED = 10


def module_name(path: Path) -> str:
    """The dotted name of the module at `path` (relative to the repository).

    >>> module_name(Path("warehouse/store/__init__.py")), module_name(Path("deltasieve_protocol/iblt.py"))
    ('warehouse.store', 'deltasieve_protocol.iblt')
    """
    parts = list(path.with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[module_name(path.relative_to(ROOT))] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The product modules that the module `name` imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in known}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([node.module] if node.module else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in known:
                    found.add(sub)
                elif base in known:
                    found.add(base)
    found.discard(name)
    return found


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative).

    >>> circles({"a": {"b"}, "b": {"a"}, "c": {"a"}})
    [['a', 'b']]
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph.get(succ, ())))))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def rooms(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph between subpackages (two levels of name: `warehouse.store`, `deltasieve_protocol.iblt`)."""
    room = {}
    for name, targets in graph.items():
        mine = ".".join(name.split(".")[:2])
        room.setdefault(mine, set()).update(".".join(t.split(".")[:2]) for t in targets)
        room[mine].discard(mine)
    return room


def same_basenames(tests: Path) -> list[list[Path]]:
    """Test modules under `tests` that share a file name, each group sorted.

    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> for p in ("unit/test_a.py", "integration/test_a.py", "unit/test_b.py"):
    ...     (root / p).parent.mkdir(parents=True, exist_ok=True); (root / p).touch()
    >>> [[str(p.relative_to(root)) for p in group] for group in same_basenames(root)]
    [['integration/test_a.py', 'unit/test_a.py']]
    """
    groups: dict[str, list[Path]] = {}
    for path in sorted(tests.rglob("test_*.py")):
        groups.setdefault(path.name, []).append(path)
    return [group for _, group in sorted(groups.items()) if len(group) > 1]


def function_lengths(module: str, source: str) -> dict[str, int]:
    """The length in lines of every function in `source` (from its `def` to its last line,
    decorators left out), named `module:qualified.name`; a method and a nested function are
    named through what encloses them.

    >>> source = '''
    ... def f():
    ...     def g():
    ...         return 1
    ...     return g
    ... class C:
    ...     async def m(self):
    ...         pass
    ... '''
    >>> function_lengths("pkg.mod", source)
    {'pkg.mod:f': 4, 'pkg.mod:f.g': 2, 'pkg.mod:C.m': 2}
    """
    found: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = prefix + child.name
                found[f"{module}:{name}"] = (child.end_lineno or child.lineno) - child.lineno + 1
                visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return found


def longest(lengths: dict[str, int], count: int = REPORTED) -> list[tuple[str, int]]:
    """The `count` longest entries of `lengths`, longest first (a tie in name order).

    >>> longest({"a": 3, "b": 9, "c": 3, "d": 1}, 3)
    [('b', 9), ('a', 3), ('c', 3)]
    """
    return sorted(lengths.items(), key=lambda item: (-item[1], item[0]))[:count]


def size_report(module_lines: dict[str, int], function_lines: dict[str, int]) -> list[str]:
    r"""The report's lines: the longest modules, then the longest functions, with their lengths.

    >>> print("\n".join(size_report({"p.big": 620, "p.small": 40}, {"p.big:run": 88})))
    longest modules (lines):
        620  p.big
         40  p.small
    longest functions (lines):
         88  p.big:run
    """
    lines = ["longest modules (lines):"]
    lines += [f"{length:>7}  {name}" for name, length in longest(module_lines)]
    lines.append("longest functions (lines):")
    lines += [f"{length:>7}  {name}" for name, length in longest(function_lines)]
    return lines


def main() -> int:
    known = modules()
    graph = {name: imports(name, path, known) for name, path in known.items()}
    problems = [f"import circle: {' <-> '.join(c)}" for c in circles(graph)]
    sources = {name: path.read_text() for name, path in known.items()}
    module_lines = {name: len(source.splitlines()) for name, source in sources.items()}
    function_lines = {f: n for name, source in sources.items() for f, n in function_lengths(name, source).items()}
    for group in same_basenames(ROOT / "tests"):
        problems.append(f"test modules of one name: {', '.join(str(p.relative_to(ROOT)) for p in group)}")
    if "--rooms" in sys.argv:
        for name, targets in sorted(rooms(graph).items()):
            print(f"{name} -> {', '.join(sorted(targets)) or '-'}")
    print("\n".join(size_report(module_lines, function_lines)))
    for problem in problems:
        print(problem, file=sys.stderr)
    print(f"{len(known)} modules, {sum(map(len, graph.values()))} imports between them, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
