"""Summaries of a view's stored statistics: update statistics (ω±) and deletion statistics (ω−) per site."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from . import layers
from .planning import deletion_probability
from .storage import TNO, UNO, Version
from .viewdef import ViewDef

#: Buckets of the update-probability histogram, each 1/HISTOGRAM_BUCKETS wide (P = 1 falls in the last).
HISTOGRAM_BUCKETS = 10


def view_statistics(spark: SparkSession, definition: ViewDef, version: Version) -> dict:
    """The statistics of every site of `version`, summarized (aggregations run on Spark).

    Returns:
        {"version": N, "sites": [{"source", "update_statistics", "deletion_statistics"}, ...]}
    """
    sites = []
    for i, site in enumerate(definition.sites):
        deletions = [r.asDict() for r in spark.read.parquet(str(version.deletions(i))).collect()]
        sites.append(
            {
                "source": site.source,
                "update_statistics": _update_statistics(layers.frame(spark, version, i, site.columns, site.key)),
                "deletion_statistics": {
                    "syncs": [{"sync": d["__sync"], "tno": d["tno"], "dno": d["dno"]} for d in deletions],
                    "deletion_probability": deletion_probability([(d["tno"], d["dno"]) for d in deletions]),
                },
            }
        )
    return {"version": version.number, "sites": sites}


def _update_statistics(fragment: DataFrame) -> dict:
    """Counts over the fragment's ω± columns and the histogram of P(update) = uno/tno."""
    agg = fragment.agg(
        F.count(F.lit(1)).alias("tuples"),
        F.avg(TNO).alias("mean_tno"),
        F.max(TNO).alias("max_tno"),
        F.sum(F.col(UNO) - 1).alias("updates_observed"),
        F.sum(F.col(TNO) - 1).alias("observations"),
        F.sum(F.when(F.col(UNO) > 1, 1).otherwise(0)).alias("tuples_ever_updated"),
    ).collect()[0]
    p = F.col(UNO) / F.col(TNO)
    buckets = (
        fragment.select(F.least(F.floor(p * HISTOGRAM_BUCKETS), F.lit(HISTOGRAM_BUCKETS - 1)).alias("b"))
        .groupBy("b")
        .count()
        .collect()
    )
    histogram = [0] * HISTOGRAM_BUCKETS
    for row in buckets:
        histogram[int(row["b"])] = row["count"]
    return {
        "tuples": agg["tuples"],
        "mean_tno": agg["mean_tno"],
        "max_tno": agg["max_tno"],
        "updates_observed": agg["updates_observed"] or 0,
        "observations": agg["observations"] or 0,
        "tuples_ever_updated": agg["tuples_ever_updated"] or 0,
        "update_probability_histogram": {"bucket_width": 1 / HISTOGRAM_BUCKETS, "counts": histogram},
    }
