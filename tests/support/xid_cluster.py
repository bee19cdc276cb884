"""PostgreSQL clusters whose transaction counter is where a test needs it.

`start_near_wraparound` makes a cluster whose 32-bit transaction ids are a little below
2^32 (epoch 1), so that a test's own transactions carry them across the wraparound;
`burn_xids` spends ids up to a given point; `jump_xids` moves the counter far ahead;
`restore_in_place` dumps a database, replaces the cluster by a new one on the same port (a
restore onto another server) and restores it.
"""

from __future__ import annotations

from pathlib import Path

import psycopg

from workloads.postgres import PostgresServer, start_postgres

#: Transaction ids per pg_xact segment file (32 pages of 8 KiB, four ids a byte), and its size.
XIDS_PER_SEGMENT = 1_048_576
SEGMENT_BYTES = 256 * 1024
#: The longest jump of the counter in one step: well below 2^31, the reach of 32-bit comparisons.
MAX_STEP = 2**31 - 2**28


def _admin(server: PostgresServer, dbname: str) -> str:
    return f"host={server.socket_dir} port={server.port} user=owner dbname={dbname}"


def start_near_wraparound(tmpdir: Path, below: int, dbname: str = "legacy") -> PostgresServer:
    """A cluster whose next transaction id is `below` short of 2^32, in epoch 1 (see `jump_xids`)."""

    def prepare(server: PostgresServer) -> None:
        server.start()
        _jump(server, 2**32 - below, ("postgres", "template1"))
        server.halt()
        # the epoch is no part of what is stored: it may change alone
        server.tool("pg_resetwal", "-e", "1", "-D", str(server.datadir))

    return start_postgres(tmpdir, dbname=dbname, prepare=prepare)


def jump_xids(server: PostgresServer, by: int, databases: tuple[str, ...]) -> None:
    """Move the running server's counter `by` transaction ids ahead, with pg_resetwal.

    A row written with a normal id that the jump leaves 2^31 or more behind would lie "in
    the future" and vanish, and so would each table's freeze horizon (relfrozenxid), which
    VACUUM then reports as corruption. So every database is frozen before each step (frozen
    rows are visible whatever their id, and the freeze moves the horizons up), and no step
    goes further than `MAX_STEP`; the server restarts once a step. The commit log needs the
    zero-filled segment file of the new id, which pg_resetwal does not create.
    """
    _jump(server, next_xid(_admin(server, "postgres")) + by, ("postgres", "template1", *databases))


def _jump(server: PostgresServer, target: int, databases: tuple[str, ...]) -> None:
    start = next_xid(_admin(server, "postgres"))
    steps = -(-(target - start) // MAX_STEP)
    for step in range(1, steps + 1):
        _freeze(server, databases)
        server.halt()
        epoch, xid = divmod(start + (target - start) * step // steps, 2**32)
        xid = max(xid, 3)  # 0, 1 and 2 are reserved
        server.tool("pg_resetwal", "-e", str(epoch), "-x", str(xid), "-D", str(server.datadir))
        segment = server.datadir / "pg_xact" / f"{xid // XIDS_PER_SEGMENT:04X}"
        if not segment.exists():
            segment.write_bytes(bytes(SEGMENT_BYTES))
            server.own(segment)
        server.start()


def _freeze(server: PostgresServer, databases: tuple[str, ...]) -> None:
    """VACUUM FREEZE `databases` and template0, which takes no connection unless told to
    (left behind, its horizon would stop the server once the counter nears it from behind)."""
    with psycopg.connect(_admin(server, "postgres"), autocommit=True) as conn:
        conn.execute("ALTER DATABASE template0 ALLOW_CONNECTIONS true")
        try:
            for db in ("template0", *databases):
                with psycopg.connect(_admin(server, db), autocommit=True) as frozen:
                    frozen.execute("VACUUM FREEZE")
        finally:
            conn.execute("ALTER DATABASE template0 ALLOW_CONNECTIONS false")


def next_xid(url: str) -> int:
    """The cluster's next transaction id (xid8, with its epoch)."""
    with psycopg.connect(url, autocommit=True) as conn:
        return int(conn.execute("SELECT pg_snapshot_xmax(pg_current_snapshot())::text").fetchone()[0])


def burn_xids(url: str, until: int) -> None:
    """Spend transaction ids (one per autocommitted statement) until the next one is `until` (an xid8)."""
    with psycopg.connect(url, autocommit=True) as conn:
        while int(conn.execute("SELECT pg_current_xact_id()::text").fetchone()[0]) < until - 1:
            pass


def restore_in_place(server: PostgresServer, dbname: str) -> None:
    """pg_dump `dbname`, replace the cluster by a new one on the same port (same roles and
    passwords), create the database again and restore the dump into it."""
    dump = server.socket_dir / f"{dbname}.sql"
    admin = ["-h", str(server.socket_dir), "-p", str(server.port), "-U", "owner", "-d", dbname]
    server.tool("pg_dump", *admin, "-f", str(dump))
    server.reinit()  # the dump lies beside the data directory, not in it
    server.create_database(dbname)
    server.tool("psql", *admin, "-q", "-v", "ON_ERROR_STOP=1", "-f", str(dump))
