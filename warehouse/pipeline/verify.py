"""A verify sync's report: where the view's own method and a full read of every site disagree."""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession

from warehouse.deltas.site_delta import DeltaResult, view_delta
from warehouse.deltas.touched_delta import TouchedDelta
from warehouse.names import CHANGED, OP
from warehouse.store import layers
from warehouse.store.versions import Version
from warehouse.viewdef import ViewDef

#: Divergent rows a verify sync quotes in its record.
VERIFY_EXAMPLES = 5


def compared(
    spark: SparkSession, view: ViewDef, staged: Version, checked: Version, results: list[DeltaResult | TouchedDelta]
) -> dict[str, Any]:
    """Rows compared and divergent per source, with a few examples: the method's fragments
    (`staged`) against the full reads' (`checked`, whose builds are `results`)."""
    report: dict[str, Any] = {"rows_compared": 0, "divergent_rows": 0, "examples": [], "sources": []}
    for i, (site, result) in enumerate(zip(view.sites, results, strict=True)):
        names = [c.name for c in site.columns]
        method = layers.frame(spark, staged, i, site.columns, site.key).select(*names)
        full = layers.frame(spark, checked, i, site.columns, site.key).select(*names)
        # what the method's result lacks to equal the full read: ops turn it into the truth
        diff = view_delta(method, full, names, site.key).cache()
        try:
            n = diff.count()
            report["rows_compared"] += result.inserted + result.updated + result.kept
            report["divergent_rows"] += n
            report["sources"].append({"source": site.source, "divergent_rows": n})
            for row in diff.limit(max(0, VERIFY_EXAMPLES - len(report["examples"]))).collect():
                d = row.asDict()
                d.pop(CHANGED, None)
                report["examples"].append(
                    {"source": site.source, "fix": d.pop(OP), "key": {k: d[k] for k in site.key}, "row": d}
                )
        finally:
            diff.unpersist()
    return report
