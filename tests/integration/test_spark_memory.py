"""The service's Spark JVM gets the heap the settings promise.

On a local master the driver runs every task, and 2g ran out of heap on a 1M-row view of
1 KB rows; the default is now a quarter of the machine. Checked on the real JVM's command
line, the only place the heap size takes effect. A heap set by SERVICE_SPARK_DRIVER_MEMORY
is checked on test_spark_engine.py's service (and on the JVM that replaces a dead one).
"""

from __future__ import annotations

import pytest

from tests.support.jvm import java_heap
from warehouse.spark import default_driver_memory, machine_memory_bytes

pytestmark = pytest.mark.integration


def test_the_default_heap_is_a_quarter_of_the_machine(service):
    expected = default_driver_memory("local[*]", machine_memory_bytes())
    assert java_heap(service.proc.pid) == expected
    assert int(expected.removesuffix("m")) >= 2048
