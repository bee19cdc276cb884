"""Summaries of a view's stored statistics: update statistics and deletion statistics per site.

The response keeps the stored names: `tno` for syncs seen (or tuples before a sync), `dno`
for tuples deleted.
"""

from __future__ import annotations

import math
from dataclasses import asdict

from warehouse.planning import update_counts
from warehouse.planning.cost_model import deletion_probability
from warehouse.planning.deletions import read_deletions
from warehouse.sample import view_sample
from warehouse.store.versions import Version
from warehouse.viewdef import ViewDef

#: Buckets of the update-probability histogram, each 1/HISTOGRAM_BUCKETS wide (P = 1 falls in the last);
#: tuples never updated are counted apart (`never_updated`), not in the first bucket.
HISTOGRAM_BUCKETS = 10


def view_statistics(definition: ViewDef, version: Version) -> dict:
    """The statistics of every site of `version`, summarized (from the kept update-statistics histogram).

    Returns:
        {"version": N, "sites": [{"source", "update_statistics", "deletion_statistics"}, ...]}
    """
    sites = []
    for i, site in enumerate(definition.sites):
        deletions = read_deletions(version, i)
        sites.append(
            {
                "source": site.source,
                "update_statistics": _update_statistics(update_counts.load(version.site_dir(i))),
                "deletion_statistics": {
                    "syncs": [{"sync": d["__sync"], "tno": d["tno"], "dno": d["dno"]} for d in deletions],
                    "deletion_probability": deletion_probability([(d["tno"], d["dno"]) for d in deletions]),
                },
            }
        )
    out = {"version": version.number, "sites": sites}
    sample = view_sample.state_of(version)
    if sample is not None:  # the view's random sample and how its last sync kept it
        out["sample"] = asdict(sample)
    return out


def _update_statistics(hist: update_counts.Histogram) -> dict:
    """Counts over the fragment's update statistics and the histogram of the observed update
    rate, from the histogram of (syncs seen, updates seen), both counting the tuple's entry as
    one: a tuple updated at least once falls in the bucket of (updates seen - 1) / (syncs
    seen - 1), the share of the syncs since its entry that updated it; a tuple never updated
    is counted apart (`never_updated`), since its stored ratio 1 / syncs seen is the prior's
    trace, not an update it had (it put every such tuple seen at 5 syncs in the 0.2 bucket).

    >>> from collections import Counter
    >>> out = _update_statistics(Counter({(1, 1): 2, (5, 1): 3, (4, 2): 1, (2, 2): 1}))
    >>> out["tuples"], out["max_tno"], out["tuples_ever_updated"]
    (7, 5, 2)
    >>> out["update_probability_histogram"]
    {'bucket_width': 0.1, 'counts': [0, 0, 0, 1, 0, 0, 0, 0, 0, 1], 'never_updated': 5}
    """
    tuples = sum(hist.values())
    histogram = [0] * HISTOGRAM_BUCKETS
    never = 0
    for (syncs, updates), count in hist.items():
        if updates <= 1 or syncs <= 1:
            never += count
            continue
        rate = (updates - 1) / (syncs - 1)
        histogram[min(math.floor(rate * HISTOGRAM_BUCKETS), HISTOGRAM_BUCKETS - 1)] += count
    return {
        "tuples": tuples,
        "mean_tno": sum(syncs * count for (syncs, _), count in hist.items()) / tuples if tuples else None,
        "max_tno": max((syncs for syncs, _ in hist), default=None),
        "updates_observed": sum((updates - 1) * count for (_, updates), count in hist.items()),
        "observations": sum((syncs - 1) * count for (syncs, _), count in hist.items()),
        "tuples_ever_updated": sum(count for (_, updates), count in hist.items() if updates > 1),
        "update_probability_histogram": {
            "bucket_width": 1 / HISTOGRAM_BUCKETS,
            "counts": histogram,
            "never_updated": never,
        },
    }
