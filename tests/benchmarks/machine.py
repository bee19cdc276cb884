"""What a result was measured on, the agent's peak memory and the service's."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _mem_total_kb() -> int | None:
    return _status_field(Path("/proc/meminfo"), "MemTotal")


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def describe() -> dict:
    # changes to tracked files outside the results: what the measured code could differ by
    status = _git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)tests/benchmarks/results")
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty": bool(status) if status is not None else None,
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpus": os.cpu_count(),
        "mem_total_kb": _mem_total_kb(),
        "load_avg_at_start": list(os.getloadavg()),
        "python": sys.version.split()[0],
        "sqlite": sqlite3.sqlite_version,
        "versions": {d: _version(d) for d in ("pyarrow", "pyspark", "fastapi", "uvicorn", "httpx")},
    }


def save(out: dict, args: argparse.Namespace, module: str, markdown: Callable[[dict], str]) -> None:
    """Write a benchmark's results to `args.out` as .json and .md, with the command that ran
    them (`python -m MODULE` and every option but --out) and the commit."""
    out["command"] = f"python -m {module} " + " ".join(
        f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k != "out"
    )
    out["commit"] = _git("rev-parse", "--short", "HEAD")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(out, indent=1))
    args.out.with_suffix(".md").write_text(markdown(out))
    print(markdown(out))


def _status_field(path: Path, name: str) -> int | None:
    try:
        for line in path.read_text().splitlines():
            if line.startswith(name + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def reset_peak_rss(pid: int) -> bool:
    """Reset a process's VmHWM to its current RSS (Linux `clear_refs` 5); False if not allowed."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def peak_rss_kb(pid: int) -> int | None:
    """Peak resident set size (VmHWM) of a process since it started or since the last reset."""
    return _status_field(Path(f"/proc/{pid}/status"), "VmHWM")


def rss_kb(pid: int) -> int | None:
    """Current resident set size (VmRSS) of a process."""
    return _status_field(Path(f"/proc/{pid}/status"), "VmRSS")


def cpu_seconds(pid: int) -> float | None:
    """CPU time (user and system, every thread) a process has used since it started, from
    Linux /proc; None if it is gone or /proc has no such file. Unlike wall time, it holds
    still while another program takes the machine's cores.
    """
    try:
        # the fields after the command's closing parenthesis; utime and stime are 14th and 15th
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def children(pid: int) -> list[int]:
    """The pids of a process's children (Linux /proc; empty if it is gone)."""
    try:
        return [int(c) for task in Path(f"/proc/{pid}/task").iterdir() for c in (task / "children").read_text().split()]
    except (OSError, ValueError):
        return []


def _statm(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/statm").read_text()
    except OSError:
        return None


def command_label(argv: list[str]) -> str:
    """A short name for a command line: the module a Python runs with -m, else the program's name.

    >>> command_label(["/v/bin/python", "-m", "pyspark.daemon"]), command_label(["/usr/bin/java", "-cp", "x"])
    ('pyspark.daemon', 'java')
    """
    if "-m" in argv[:-1]:
        return argv[argv.index("-m") + 1]
    return Path(argv[0]).name if argv else "?"


def process_label(pid: int) -> str | None:
    """`command_label` of a running process; None if it is gone."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return None
    return command_label([a for a in argv if a])


def pss_kb(pid: int) -> int | None:
    """Proportional set size of a process (kB): its private pages plus its share of pages
    it shares with others, so that summing it over processes counts each page once."""
    return _status_field(Path(f"/proc/{pid}/smaps_rollup"), "Pss")


def tree_rss(pid: int, measure=rss_kb) -> dict[str, int]:
    """Resident memory (kB) of a process and all its descendants, summed per `command_label`.

    Empty if the process is gone. Pages shared between processes (Spark's forked Python
    workers share their parent's) count in each, as RSS does; but a child whose memory
    figures equal its parent's to the page is skipped: the JVM starts commands (chmod) from
    a vfork child that shares the JVM's memory until its exec, and would count twice.
    """
    out: dict[str, int] = {}
    todo: list[tuple[int, str | None]] = [(pid, None)]
    while todo:
        member, parent_statm = todo.pop()
        statm = _statm(member)
        if statm is None:
            continue
        todo += [(child, statm) for child in children(member)]
        kb, name = measure(member), process_label(member)
        if statm != parent_statm and kb is not None and name is not None:
            out[name] = out.get(name, 0) + kb
    return out


class TreeRssSampler:
    """Samples a process tree's summed RSS in a thread; `peak_kb` is the highest seen.

    The service's Spark JVM is a child of the service process (spark-submit starts it), so
    the tree is what the service costs; VmHWM cannot be summed over processes, hence sampling.
    """

    #: Seconds between samples: a sync at 1M rows takes 10 s or more; reading /proc costs ~1 ms.
    INTERVAL_S = 0.5

    def __init__(self, pid: int, interval_s: float = INTERVAL_S, measure=rss_kb):
        self.pid = pid
        #: what is summed per process: `rss_kb`, or `pss_kb` to count shared pages once
        self.measure = measure
        self.interval_s = interval_s
        self.peak_kb: int | None = None
        #: The peak's split per command name ({"python3": ..., "java": ...}).
        self.peak_by_process: dict[str, int] = {}
        self.samples = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval_s)

    def sample(self) -> int | None:
        split = tree_rss(self.pid, self.measure)
        if not split:
            return None
        kb = sum(split.values())
        with self._lock:
            self.samples += 1
            if kb > (self.peak_kb or 0):
                self.peak_kb, self.peak_by_process = kb, split
        return kb

    def reset(self) -> int | None:
        """Forget the peak so far (a new phase starts); returns it."""
        with self._lock:
            peak, self.peak_kb, self.peak_by_process = self.peak_kb, None, {}
        self.sample()
        return peak

    def __enter__(self) -> TreeRssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
