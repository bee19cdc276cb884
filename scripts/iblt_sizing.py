"""Measure how often an IBLT sized by cells_for peels completely; prints a Markdown table.

Each trial draws d random (key, row hash) pairs, folds half with sign +1 and half with -1
into a table of cells_for(d, 0) cells (a fresh seed per trial), peels it and checks that it
recovered exactly the pairs folded in. Run: PYTHONPATH=. python scripts/iblt_sizing.py [hashes] [failure]
"""

from __future__ import annotations

import sys
import time

import numpy as np

from deltasieve_protocol.iblt import Iblt
from deltasieve_protocol.iblt_sizing import cells_for

TRIALS = {0: 200, 1: 2000, 5: 4000, 20: 4000, 100: 2000, 1000: 600, 10_000: 100}


def trial(d: int, cells: int, hashes: int, seed: int, rng: np.random.Generator) -> bool:
    keys, row_hashes = rng.integers(0, 2**64, (2, d), dtype=np.uint64)
    table = Iblt(cells, hashes, seed)
    half = d // 2
    table.add(keys[:half], row_hashes[:half])
    table.add(keys[half:], row_hashes[half:], sign=-1)
    peeled = table.peel()
    found = set(zip(peeled.plus_keys.tolist(), peeled.plus_hashes.tolist()))
    lost = set(zip(peeled.minus_keys.tolist(), peeled.minus_hashes.tolist()))
    if not found <= set(zip(keys[:half].tolist(), row_hashes[:half].tolist())) or not lost <= set(
        zip(keys[half:].tolist(), row_hashes[half:].tolist())
    ):
        raise AssertionError(f"peel invented a pair (d={d}, seed={seed})")
    return peeled.complete and len(found) + len(lost) == d


def main(hashes: int = 3, failure: float = 0.01) -> None:
    rng = np.random.default_rng(20261125)
    print(f"hashes={hashes}, failure={failure}\n")
    print("| d | cells | cells/d | trials | failed | success | s/trial |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for d, trials in TRIALS.items():
        cells = cells_for(d, 0, failure, hashes)
        start = time.perf_counter()
        failed = sum(not trial(d, cells, hashes, seed, rng) for seed in range(trials))
        per = (time.perf_counter() - start) / trials
        ratio = f"{cells / d:.2f}" if d else "-"
        print(f"| {d} | {cells} | {ratio} | {trials} | {failed} | {1 - failed / trials:.2%} | {per:.4f} |", flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    main(int(args[0]) if args else 3, float(args[1]) if len(args) > 1 else 0.01)
