"""Choosing the compiled kernels: the extension built ahead of time only when it was built from
the kernels' source as it is, numba's JIT of that source otherwise, never another definition."""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys

import pytest

from deltasieve_protocol import compiled
from tests.conftest import ROOT


@pytest.fixture
def edited_sources(tmp_path):
    """A copy of the kernels' source with one constant changed, as after an edit since the build."""
    copy = tmp_path / "kernels"
    shutil.copytree(compiled._SOURCES, copy, ignore=shutil.ignore_patterns("__pycache__"))
    fold = copy / "iblt_fold.py"
    fold.write_text(fold.read_text().replace("PREFETCH_PAIRS = 32", "PREFETCH_PAIRS = 16"))
    return copy


def test_the_extension_in_place_is_built_from_the_source_and_loaded(tmp_path):
    copy = tmp_path / "kernels"
    shutil.copytree(compiled._SOURCES, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert compiled.source_digest(copy) == compiled.source_digest()
    found = compiled.load("aot", copy)
    assert set(found) == set(compiled.EXPORTS)
    assert all(type(f).__name__ == "builtin_function_or_method" for f in found.values())


def test_a_stale_extension_is_refused_by_aot_and_replaced_by_the_jit_in_auto(edited_sources, caplog):
    assert compiled.source_digest(edited_sources) != compiled.source_digest()
    with pytest.raises(compiled.KernelsUnavailable, match="stale: built from kernel sources of digest"):
        compiled.load("aot", edited_sources)
    with caplog.at_level(logging.WARNING, logger=compiled.log.name):
        found = compiled.load("auto", edited_sources)
    assert "stale" in caplog.text and "compiling the same source just in time" in caplog.text
    assert found["hash_slices"] is compiled.load("jit")["hash_slices"]  # numba's dispatcher of kernels/xxh3.py


def test_an_unknown_choice_is_refused():
    with pytest.raises(ValueError, match="DELTASIEVE_KERNELS must be one of auto, aot, jit"):
        compiled.load("fast")


def test_the_ahead_of_time_kernels_load_without_numba():
    code = (
        "import sys; from deltasieve_protocol.fingerprints import compile_kernels; print(compile_kernels()); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numba', 'llvmlite')))"
    )
    env = {"PYTHONPATH": str(ROOT), "DELTASIEVE_KERNELS": "aot", "PATH": "/usr/bin:/bin"}
    aot = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    jit = subprocess.run(
        [sys.executable, "-c", code], env={**env, "DELTASIEVE_KERNELS": "jit"}, capture_output=True, text=True
    )
    assert aot.stdout.splitlines()[1] == "[]"
    assert aot.stdout.splitlines()[0] == jit.stdout.splitlines()[0]  # one row of every kind, same fingerprint
