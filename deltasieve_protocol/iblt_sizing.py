"""How many cells an IBLT (iblt.py) needs to peel a difference of a given size.

The sketch strategy sizes each table it sends from the number of differing pairs the
statistics expect and their variance (`cells_for`); the figures below were measured with
scripts/iblt_sizing.py.
"""

from __future__ import annotations

import math
from statistics import NormalDist

MIN_DIFFERENCES = 4
"""Fewest differences a table is sized for: a few dozen cells cost nothing on the wire."""

_PEELING = {3: (1.222, 5.0), 4: (1.295, 5.0)}
"""Per number of hashes: cells per pair at the peeling threshold as pairs grow without bound,
and the measured finite-size term a in (threshold + a / sqrt(n)) cells per pair (see cells_for)."""


def cells_for(expected: float, variance: float, failure: float = 0.01, hashes: int = 3) -> int:
    """Cells for a table that peels completely with probability at least 1 - failure.

    The number of differences is taken at a one-sided normal bound, n = expected + z * sd
    (at least MIN_DIFFERENCES), which it exceeds with probability failure / 2; the table is
    then sized for n differences to fail to peel with probability at most failure / 2.

    That takes two terms (w is the width of one of the `hashes` sub-tables):
    - near the peeling threshold (many differences) w = (t + a / sqrt(n)) * n / hashes: t
      is the asymptotic threshold (1.222 cells per pair for 3 hashes, 1.295 for 4) and a is
      measured;
    - for few differences, the peel fails mostly when two pairs share all their cells,
      with probability about C(n, 2) / w**hashes; w = (2 n (n-1) / failure)**(1/hashes) keeps
      that under failure / 4. This term dominates below about a thousand differences.

    With a = 5 (chosen from a grid: at 3,000 pairs 1.27 cells per pair failed 1 peel in 150,
    1.32 none), scripts/iblt_sizing.py measures, for 3 hashes and variance 0:

    =======  ======  ======  ========  =======  =======
    failure  pairs   cells   per pair  trials   failed
    =======  ======  ======  ========  =======  =======
    0.01     0       42      -         200      0
    0.01     1       42      42        2000     0
    0.01     5       48      9.6       20000    61 (0.31%)
    0.01     20      129     6.45      20000    50 (0.25%)
    0.01     100     378     3.78      10000    20 (0.20%)
    0.01     1000    1755    1.75      3000     8 (0.27%)
    0.01     10000   12720   1.27      500      0
    0.001    5       105     21        20000    7 (0.035%)
    0.001    20      276     13.8      20000    4 (0.02%)
    0.001    100     813     8.13      10000    1 (0.01%)
    0.001    1000    3780    3.78      3000     0
    =======  ======  ======  ========  =======  =======

    every one under the failure / 2 the peel is allowed. Strict targets for few pairs
    cost many cells with 3 hashes; 4 hashes need fewer there (the two-pair term falls as
    w**-4), more for many pairs: at failure 0.01 they take 32, 68, 180, 1456 and 13452
    cells for 5, 20, 100, 1000 and 10000 pairs, of which 0.25%, 0.19%, 0.14%, 0 and 0
    failed to peel (20000 to 300 trials).

    >>> cells_for(0, 0), cells_for(20, 0), cells_for(1000, 0), cells_for(1000, 1000), cells_for(100_000, 0)
    (42, 129, 1755, 1851, 123783)
    """
    if not (math.isfinite(expected) and expected >= 0):
        raise ValueError(f"expected must be a finite number >= 0, got {expected!r}")
    if not (math.isfinite(variance) and variance >= 0):
        raise ValueError(f"variance must be a finite number >= 0, got {variance!r}")
    if not 0 < failure < 1:
        raise ValueError(f"failure must be in (0, 1), got {failure!r}")
    if hashes not in _PEELING:
        raise ValueError(f"no measured sizing for {hashes} hashes; use one of {sorted(_PEELING)}")
    z = NormalDist().inv_cdf(1 - failure / 2)
    n = max(MIN_DIFFERENCES, math.ceil(expected + z * math.sqrt(variance)))
    threshold, finite = _PEELING[hashes]
    width = max((threshold + finite / math.sqrt(n)) * n / hashes, (2 * n * (n - 1) / failure) ** (1 / hashes))
    return hashes * math.ceil(width)
