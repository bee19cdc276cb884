"""Run a command and say where the machine's CPU went meanwhile, by kind of process.

    python scripts/cpu_by_process.py [--every 0.5] -- make test

Every `--every` seconds it reads each process's CPU time from /proc and adds what it used
since the last look to its kind, named as the benchmarks' memory figures name processes
(the module a Python runs with -m: service, remote_agent, pyspark.daemon; else the
program: java, postgres, mariadbd, python for the pytest workers and fork servers), and
the kernel's threads by their name; then the processes that used the most, one by one
(`--top`). A process that starts and ends between two looks is missed, so the sum is a
little under the machine's busy time, which is printed beside it (from /proc/stat). Linux
only; for finding where a test suite or a benchmark spends its CPU.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.benchmarks.machine import command_label  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def kind(cmdline: str, comm: str) -> str:
    """The kind of a process: the benchmarks' `command_label` of its command line
    (NUL-separated: the module a Python runs with -m, else the program), or the name of a
    kernel thread, which has none.

    >>> kind("/usr/lib/jvm/java-17/bin/java\\0-cp\\0spark", "java")
    'java'
    >>> kind("python\\0-m\\0remote_agent\\0--db-url\\0x", "python")
    'remote_agent'
    >>> kind("", "kworker/1:0H-kblockd")
    'kernel: kworker'
    """
    if not cmdline:
        return "kernel: " + comm.split("/")[0]
    return command_label([a for a in cmdline.split("\0") if a])


def _cpu_s(pid: str) -> float | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK
    except (OSError, IndexError, ValueError):
        return None


def _kind_of(pid: str) -> str | None:
    try:
        with open(f"/proc/{pid}/cmdline") as f:
            cmdline = f.read().rstrip("\0")
        with open(f"/proc/{pid}/comm") as f:
            comm = f.read().strip()
    except OSError:
        return None
    return kind(cmdline, comm)


def _busy_s() -> float:
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / TICK


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--every", type=float, default=0.5, help="seconds between looks at /proc")
    parser.add_argument("--top", type=int, default=10, help="processes listed one by one")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    seen: dict[str, tuple[str, float]] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):  # what ran before counts from now
        k, cpu = _kind_of(pid), _cpu_s(pid)
        if k is not None and cpu is not None:
            seen[pid] = (k, cpu)
    by_process: collections.Counter[tuple[str, str]] = collections.Counter()
    busy0, started = _busy_s(), time.monotonic()
    proc = subprocess.Popen(command)
    while proc.poll() is None:
        time.sleep(args.every)
        for pid in filter(str.isdigit, os.listdir("/proc")):
            cpu = _cpu_s(pid)
            if cpu is None:
                continue
            k = _kind_of(pid)  # looked up again each time: a process may exec another program
            if k is None:
                continue
            by_process[pid, k] += max(0.0, cpu - seen[pid][1]) if pid in seen else cpu
            seen[pid] = (k, cpu)
    wall, busy = time.monotonic() - started, _busy_s() - busy0
    used: collections.Counter[str] = collections.Counter()
    for (_, k), seconds in by_process.items():
        used[k] += seconds
    print(f"\n{wall:,.0f} s wall, {busy:,.0f} CPU-seconds busy ({busy / wall:.2f} cores on average)", file=sys.stderr)
    for k, seconds in used.most_common():
        if seconds >= 0.5:
            print(f"{seconds:10,.1f}  {seconds / busy:6.1%}  {k}", file=sys.stderr)
    print(f"\nthe {args.top} processes that used the most:", file=sys.stderr)
    for (pid, k), seconds in by_process.most_common(args.top):
        print(f"{seconds:10,.1f}  {seconds / busy:6.1%}  pid {pid}  {k}", file=sys.stderr)
    return proc.returncode


if __name__ == "__main__":
    raise SystemExit(main())
