"""What a result was measured on, and the agent's peak memory."""

from __future__ import annotations

import datetime as dt
import os
import platform
import sqlite3
import subprocess
import sys
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
