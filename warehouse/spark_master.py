"""Spark master URLs: which forms Spark takes, checked without loading Spark.

The service's settings check SERVICE_SPARK_MASTER at start with `check_master`; spark.py,
which starts the session, imports pyspark and is not needed for that.
"""

from __future__ import annotations

import re

#: The forms of master URL Spark takes (spark:// may list several masters, for standby ones).
MASTER_URL = re.compile(
    r"local(\[(\*|\d+)(,\d+)?\])?"
    r"|local-cluster\[\d+,\d+,\d+\]"
    r"|spark://([\w.-]+|\[[0-9a-fA-F:]+\]):\d+(,([\w.-]+|\[[0-9a-fA-F:]+\]):\d+)*"
    r"|yarn"
    r"|k8s://\S+"
)


def check_master(master: str) -> str:
    """`master` when Spark can take it as a master URL; else a ValueError naming the forms it takes.

    >>> check_master("local[*]"), check_master("spark://10.0.0.5:7077,10.0.0.6:7077")
    ('local[*]', 'spark://10.0.0.5:7077,10.0.0.6:7077')
    >>> check_master("10.0.0.5:7077")
    Traceback (most recent call last):
    ...
    ValueError: '10.0.0.5:7077' is not a Spark master URL: use local[*], local[N], spark://HOST:PORT (a standalone cluster), yarn or k8s://...
    """
    if not MASTER_URL.fullmatch(master):
        raise ValueError(
            f"{master!r} is not a Spark master URL: use local[*], local[N], spark://HOST:PORT (a standalone cluster), yarn or k8s://..."
        )
    return master
