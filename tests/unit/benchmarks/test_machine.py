"""The service's memory: a process tree's summed RSS, sampled in a thread."""

from __future__ import annotations

import os
import subprocess
import time

from tests.benchmarks import machine


def test_a_process_tree_is_summed_per_command_and_its_peak_kept():
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        deadline = time.monotonic() + 10
        while machine.process_label(sleeper.pid) != "sleep" and time.monotonic() < deadline:
            time.sleep(0.01)  # until its exec: a vfork child shares our memory and is not counted
        split = machine.tree_rss(os.getpid())
        assert split["sleep"] > 0 and sum(split.values()) > machine.rss_kb(os.getpid())
        with machine.TreeRssSampler(os.getpid(), interval_s=0.01) as sampler:
            sampler.sample()
        assert sampler.samples >= 1 and sampler.peak_kb >= machine.rss_kb(os.getpid()) // 2
        assert "sleep" in sampler.peak_by_process
        assert sampler.reset() is not None and sampler.peak_kb is not None  # the next phase starts at a sample
    finally:
        sleeper.kill()
        sleeper.wait()
    assert machine.tree_rss(sleeper.pid) == {}
