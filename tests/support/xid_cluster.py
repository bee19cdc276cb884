"""PostgreSQL clusters whose transaction counter is where a test needs it.

`start_near_wraparound` makes a cluster whose 32-bit transaction ids are a little below
2^32 (epoch 1), so that a test's own transactions carry them across the wraparound;
`burn_xids` spends ids up to a given point; `restore_in_place` dumps a database, replaces
the cluster by a new one on the same port (a restore onto another server) and restores it.
"""

from __future__ import annotations

from pathlib import Path

import psycopg

from workloads.postgres import PostgresServer, start_postgres

#: Transaction ids per pg_xact segment file (32 pages of 8 KiB, four ids a byte), and its size.
XIDS_PER_SEGMENT = 1_048_576
SEGMENT_BYTES = 256 * 1024


def _admin(server: PostgresServer, dbname: str) -> str:
    return f"host={server.socket_dir} port={server.port} user=owner dbname={dbname}"


def start_near_wraparound(tmpdir: Path, below: int, dbname: str = "legacy") -> PostgresServer:
    """A cluster whose next transaction id is `below` short of 2^32, in epoch 1.

    pg_resetwal sets the counter of a cleanly stopped cluster. Rows written before it with a
    normal id would then lie "in the future" and vanish, so every database initdb made is
    frozen first (frozen rows are visible whatever their id); and the commit log needs the
    zero-filled segment file of the new id, which pg_resetwal does not create.
    """
    xid = 2**32 - below

    def prepare(server: PostgresServer) -> None:
        server.start()
        for db in ("postgres", "template1"):
            with psycopg.connect(_admin(server, db), autocommit=True) as conn:
                conn.execute("VACUUM FREEZE")
        server.halt()
        server.tool("pg_resetwal", "-e", "1", "-x", str(xid), "-D", str(server.datadir))
        segment = server.datadir / "pg_xact" / f"{xid // XIDS_PER_SEGMENT:04X}"
        segment.write_bytes(bytes(SEGMENT_BYTES))
        server.own(segment)

    return start_postgres(tmpdir, dbname=dbname, prepare=prepare)


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
