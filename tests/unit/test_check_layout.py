"""scripts/check_layout.py, which `make lint` runs: its examples hold, and its size report lists
the longest modules and functions without failing on their length."""

from __future__ import annotations

import doctest
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "check_layout.py"


def load():
    spec = importlib.util.spec_from_file_location("check_layout", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_its_docstring_examples_hold():
    result = doctest.testmod(load())
    assert result.attempted >= 5 and result.failed == 0


def test_it_reports_the_longest_modules_and_functions():
    out = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, cwd=ROOT).stdout
    modules_part, functions_part = out.split("longest functions (lines):")
    modules = re.findall(r"^ +(\d+)  ([\w.]+)$", modules_part, flags=re.M)
    functions = re.findall(r"^ +(\d+)  ([\w.]+):([\w.]+)$", functions_part, flags=re.M)
    assert len(modules) == len(functions) == load().REPORTED
    lengths = [int(n) for n, _ in modules]
    assert lengths == sorted(lengths, reverse=True)
    assert all(name.split(".")[0] in load().PACKAGES for _, name in modules)
