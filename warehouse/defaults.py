"""Defaults of the warehouse's engine parts that the service's settings show, in a module
that imports nothing: the settings read them without loading Spark, Arrow or httpx.

The modules that use them (agent_client.py, destinations/, destinations/delta_file_cache.py,
strategies/sketch/prep.py) import them from here; the defaults of one sync's options are in
options.py, itself as light.
"""

from __future__ import annotations

#: Seconds without a byte from the agent before a call is abandoned (the agent scans the
#: whole site query before it can answer about changed groups): SERVICE_AGENT_READ_TIMEOUT_S.
READ_TIMEOUT_S = 600.0
#: Seconds one call to the agent may take in all, however steadily the agent trickles bytes:
#: SERVICE_AGENT_DEADLINE_S.
DEADLINE_S = 6 * 3600.0
#: Versions of a Delta table whose files vacuum keeps (SERVICE_DELTA_KEEP_VERSIONS): time travel
#: a few syncs back, and a disk of at most about this many tables' worth (delta_upkeep.py).
DEFAULT_KEEP_VERSIONS = 10
#: Bytes of rows the Delta file cache holds by default (SERVICE_DELTA_CACHE_MIB): a million rows
#: of a students-like view (about 170 MiB of Arrow) fit, a larger view's recently written files
#: are held as far as they fit.
DELTA_CACHE_BYTES = 256 * 2**20
#: Longest a sync waits for a running build of its sketch table before it cancels it and builds
#: the table itself (SERVICE_SKETCH_PREPARE_WAIT_S): several times what a build of 10M rows
#: takes here (23 s), so only a build that hangs is given up.
SKETCH_PREPARE_WAIT_S = 120.0
