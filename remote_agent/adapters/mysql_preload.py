"""Imported by the readers' fork server of a MySQL/MariaDB agent (`MysqlAdapter.reader_preload`).

The compiled reader's loops (mysql_result.py: the kernels' extension built ahead of time, or
numba's compilation of them where that build is missing or stale) are loaded here once, so
that a reader forked for a scan finds them loaded instead of loading them at its first
chunk. The loaded objects are then frozen out of the garbage collector's sweeps, as
reader_server.py does with the server's own.
"""

import gc

from remote_agent.adapters import mysql, mysql_result  # noqa: F401 - mysql: the adapter a reader unpickles

mysql_result.load_reader()
gc.freeze()
