"""The compiled kernels (row encoding, XXH3-64, IBLT fold, MySQL result rows): built ahead of time at install, or just in time.

The kernels have one source, the numba functions of `deltasieve_protocol/kernels/`. `build`,
which `make install` and the Docker images run, compiles them ahead of time with numba's
`pycc` into an extension module beside this one (`_compiled_kernels`), with the digest of
that source in it. A process that then calls a kernel loads the extension: plain machine
code that needs neither numba nor its LLVM library, which numba loads even to run kernels
from its own cache (about 100 MiB of the agent's memory, docs/operations/memory.md).

An extension that is missing, or that was built from other files than the ones beside it
(a kernel edited since, a checkout moved to another commit), is not used: its digest tells.
The same functions are then compiled just in time by numba from the files as they are, with
a warning that says why and how to build. Both ways run the one definition; only the
memory and the start differ. `DELTASIEVE_KERNELS` chooses: `auto` (the default, as above),
`aot` (the extension or an error: `KernelsUnavailable`) or `jit` (numba always).

The extension is built for a generic CPU of the machine's architecture, so that a Docker
image runs on any host: on the hash benchmark (tests/benchmarks/hash_phase.py) a build for
the host's CPU was no faster. Its functions hold the GIL while they run, where the numba
versions release it; the agent hashes on one thread, the warehouse's executors are processes.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import importlib
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger("deltasieve_protocol.compiled")

#: The extension module `build` writes, in this package.
EXTENSION = "_compiled_kernels"
#: The environment variable that chooses the kernels, and its values.
CHOICE_VARIABLE = "DELTASIEVE_KERNELS"
CHOICES = ("auto", "aot", "jit")
#: The kernels the extension exports: name -> (module of `kernels/`, function, signature).
#: The fold is compiled once per table layout (iblt_fold.LAYOUTS); every array is the
#: writable C-contiguous kind the callers (xxh3.py, row_kernel.py, iblt_fold.py and the agent's
#: remote_agent/adapters/mysql_result.py, which passes the C client's addresses as integers) pass.
EXPORTS = {
    "hash_slices": ("xxh3", "hash_slices", "u8[::1](i8[::1], u1[::1], u8)"),
    "encode": (
        "row_encoding",
        "encode",
        "i8(i8[::1], i8[::1], i8[::1], i8[::1], i8[:, ::1], b1[:, ::1], i8[:, ::1], u1[::1], u1[::1], i8[::1])",
    ),
    "fold_full": (
        "iblt_fold",
        "fold",
        "void(i8[::1], u8[::1], u8[::1], u8[::1], u8[::1], i8, u8[::1], u8[::1], i8[::1], i8)",
    ),
    "fold_compact": (
        "iblt_fold",
        "fold",
        "void(u1[::1], u8[::1], u8[::1], u4[::1], u8[::1], i8, u8[::1], u8[::1], i8[::1], i8)",
    ),
    "mysql_column_bytes": ("mysql_rows", "column_bytes", "i8[::1](i8, i8, i8, i8, i8)"),
    "mysql_copy_rows": (
        "mysql_rows",
        "copy_rows",
        "i8[::1](i8, i8, i8, i8, i8, i8[::1], u1[::1], i4[:, ::1], u1[:, ::1])",
    ),
}
#: The exported function that returns the digest of the source the extension was built from.
_DIGEST_EXPORT = "source_digest"
_HERE = Path(__file__).resolve().parent
_SOURCES = _HERE / "kernels"


class KernelsUnavailable(RuntimeError):
    """The ahead-of-time kernels were asked for (`DELTASIEVE_KERNELS=aot`) and are missing or stale."""


def source_digest(sources: Path = _SOURCES) -> int:
    """A 63-bit digest of the kernels' source: every module of `sources`, and the exports.

    >>> source_digest() == source_digest() and 0 <= source_digest() < 2**63
    True
    """
    digest = hashlib.sha256(repr(sorted(EXPORTS.items())).encode())
    for path in sorted(sources.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return int.from_bytes(digest.digest()[:8], "big") >> 1


def kernel(name: str) -> Callable[..., Any]:
    """The compiled kernel `name` (a key of `EXPORTS`), as `DELTASIEVE_KERNELS` chooses."""
    return kernels(os.environ.get(CHOICE_VARIABLE, "auto"))[name]


@functools.cache
def kernels(choice: str = "auto") -> dict[str, Callable[..., Any]]:
    """Every kernel of `EXPORTS` by name, as `choice` says (see the module); once per process."""
    return load(choice)


def load(choice: str, sources: Path = _SOURCES) -> dict[str, Callable[..., Any]]:
    """Every kernel of `EXPORTS` by name: from the extension if it was built from `sources`
    (and `choice` is not `jit`), else compiled just in time, or `KernelsUnavailable` (`aot`)."""
    if choice not in CHOICES:
        raise ValueError(f"{CHOICE_VARIABLE} must be one of {', '.join(CHOICES)}, not {choice!r}")
    if choice == "jit":
        return _jit_kernels()
    found, why = _extension_kernels(sources)
    if found is not None:
        return found
    if choice == "aot":
        raise KernelsUnavailable(f"the ahead-of-time kernels are {why}; {_HOW_TO_BUILD}")
    log.warning(
        "the ahead-of-time kernels are %s: compiling the same source just in time instead (numba: "
        "~100 MiB more memory, and seconds at first use without numba's cache); %s",
        why,
        _HOW_TO_BUILD,
    )
    return _jit_kernels()


_HOW_TO_BUILD = "`make install` builds them (or `python -c 'from deltasieve_protocol.compiled import build; build()'`)"


def _extension_kernels(sources: Path) -> tuple[dict[str, Callable[..., Any]] | None, str]:
    """The extension's kernels if it was built from `sources`, or None and why not."""
    try:
        module = importlib.import_module(f"{__package__}.{EXTENSION}")
    except ImportError as exc:
        return None, f"not built ({exc})"
    built_from, source = getattr(module, _DIGEST_EXPORT)(), source_digest(sources)
    if built_from != source:
        return None, f"stale: built from kernel sources of digest {built_from:016x}, these are {source:016x}"
    return {name: getattr(module, name) for name in EXPORTS}, "built from these sources"


def _jit_kernels() -> dict[str, Callable[..., Any]]:
    """The kernels as numba compiles them at their first call (or loads from numba's cache)."""
    found = {}
    for name, (module, function, _) in EXPORTS.items():
        found[name] = getattr(importlib.import_module(f"{__package__}.kernels.{module}"), function)
    return found


def build(directory: Path = _HERE) -> Path:
    """Compile the kernels ahead of time into the extension module, unless one built from the
    same source is already in `directory`; return its path. Needs numba, setuptools and a C
    compiler (the one mysqlclient's build needs); about a minute on one core.

    Concurrent builds (test workers) wait for each other on a lock in `directory`; the module
    is written beside and renamed into place, so no process imports half of one.
    """
    digest = source_digest()
    with _locked(directory / f".{EXTENSION}.lock"):
        for existing in directory.glob(f"{EXTENSION}.*.so"):
            if _digest_of(existing) == digest:
                return existing
        from numba.pycc import CC  # noqa: PLC0415 - numba's ahead-of-time compiler, only to build

        staging = Path(tempfile.mkdtemp(prefix=f".{EXTENSION}-", dir=directory))
        try:
            cc = CC(EXTENSION)
            cc.output_dir = str(staging)
            cc.verbose = False
            for name, (module, function, signature) in EXPORTS.items():
                dispatcher = getattr(importlib.import_module(f"{__package__}.kernels.{module}"), function)
                cc.export(name, signature)(dispatcher.py_func)
            cc.export(_DIGEST_EXPORT, "i8()")(_constant(digest))
            cc.compile()
            (made,) = staging.glob(f"{EXTENSION}.*")
            for existing in directory.glob(f"{EXTENSION}.*.so"):
                existing.unlink()
            target = directory / made.name
            os.replace(made, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    kernels.cache_clear()
    log.info("built the ahead-of-time kernels: %s", target)
    return target


def _constant(value: int) -> Callable[[], int]:
    def constant() -> int:
        return value

    return constant


def _digest_of(extension: Path) -> int | None:
    """The source digest an extension file was built from, read in a child process (a module
    imported here could not be unloaded, nor a rebuilt one imported again)."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    probe = (
        "import importlib.util, sys; spec = importlib.util.spec_from_file_location(sys.argv[1], sys.argv[2]); "
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); print(m.source_digest())"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, f"{__package__}.{EXTENSION}", str(extension)], capture_output=True, text=True
    )
    return int(done.stdout) if done.returncode == 0 else None


@contextlib.contextmanager
def _locked(path: Path):
    with path.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
