"""The benchmark suite: bytes on the wire and time per sync, per strategy and workload.

Run with `python -m tests.benchmarks --quick` or `--full` (`make bench-quick`, `make bench`);
never part of `make test`. See `__main__.py` for the options.
"""
