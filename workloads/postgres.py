"""A throwaway PostgreSQL server for tests and benchmarks, started from the Debian packages' binaries.

The test suite starts one per session (tests/conftest.py) and gives each module a database
of its own in it (`PostgresServer.create_database`); the reladiff benchmark starts its own.
PostgreSQL refuses to run as root, so when the suite runs as root (as in CI) the server
runs as the `postgres` system user via `runuser`, in a directory that user owns.
"""

from __future__ import annotations

import contextlib
import glob
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import psycopg

from workloads.debian import ensure_file

#: Where Debian's postgresql-NN packages put the server binaries.
BIN_GLOB = "/usr/lib/postgresql/*/bin"
#: Seconds allowed for initdb, start and stop; a healthy start takes one or two.
COMMAND_TIMEOUT_S = 60
#: Unix socket paths are limited to 107 bytes; leave room for `/.s.PGSQL.NNNNN`.
MAX_SOCKET_DIR_LEN = 80
SYSTEM_USER = "postgres"


@dataclass
class PostgresServer:
    """A running server: roles `owner` (superuser, writes the data) and `reader` (SELECT only).

    `owner_url` and `reader_url` reach the database `start_postgres` created, if any.
    """

    host: str
    port: int
    datadir: Path
    logfile: Path
    owner_url: str
    reader_url: str
    _root: Path
    _bindir: Path
    _as_postgres: bool
    _owner_password: str = field(default="", repr=False)
    _reader_password: str = field(default="", repr=False)

    @property
    def socket_dir(self) -> Path:
        """Directory of the server's unix socket (trusted local connections, no network)."""
        return self._root

    def create_database(self, name: str) -> PostgresDatabase:
        """A new database `name` owned by `owner`, whose tables `reader` may only SELECT.

        Nothing is granted to PUBLIC (no TEMP, no CONNECT): the reader gets exactly what is granted.
        """
        admin = f"host={self._root} port={self.port} user=owner"
        with psycopg.connect(f"{admin} dbname=postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}" OWNER owner')
            conn.execute(f'REVOKE ALL ON DATABASE "{name}" FROM PUBLIC')
            conn.execute(f'GRANT CONNECT ON DATABASE "{name}" TO reader')
        with psycopg.connect(f"{admin} dbname={name}", autocommit=True) as conn:
            conn.execute("REVOKE ALL ON SCHEMA public FROM PUBLIC")
            conn.execute("GRANT USAGE ON SCHEMA public TO reader")
            conn.execute("GRANT SELECT ON ALL TABLES IN SCHEMA public TO reader")
            conn.execute("ALTER DEFAULT PRIVILEGES FOR ROLE owner IN SCHEMA public GRANT SELECT ON TABLES TO reader")
        return self.database(name)

    def database(self, name: str) -> PostgresDatabase:
        """The URLs of the existing database `name` (on a standby: the primary's, replicated)."""
        return PostgresDatabase(
            name=name,
            owner_url=f"postgresql://owner:{self._owner_password}@{self.host}:{self.port}/{name}",
            reader_url=f"postgresql://reader:{self._reader_password}@{self.host}:{self.port}/{name}",
            host=self.host,
            port=self.port,
            logfile=self.logfile,
            socket_dir=self.socket_dir,
        )

    def tool(self, program: str, *args: str) -> None:
        """Run one of the server's programs (pg_ctl, pg_resetwal, pg_dump, psql...) as the server's user."""
        _run(self._bindir, self._as_postgres, self._root, program, *args)

    def own(self, path: Path) -> None:
        """Give a file made for the server to the server's user."""
        if self._as_postgres:
            shutil.chown(path, SYSTEM_USER, SYSTEM_USER)

    def _init_and_start(self, prepare: Callable[[PostgresServer], None] | None = None) -> None:
        """initdb, this server's settings, `prepare`, start, and the two roles."""
        datadir = self.datadir
        self.tool(
            "initdb",
            "-D",
            str(datadir),
            "-U",
            "owner",
            "-E",
            "UTF8",
            "--locale=C",
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            "--no-sync",
        )
        settings = {
            "listen_addresses": "'127.0.0.1'",
            "port": str(self.port),
            "unix_socket_directories": f"'{self._root}'",
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            "log_statement": "'all'",
            "log_line_prefix": "'%m [%p] %u@%d '",
            "logging_collector": "off",
        }
        with open(datadir / "postgresql.conf", "a", encoding="utf-8") as conf:
            conf.write("\n# test server\n" + "".join(f"{k} = {v}\n" for k, v in settings.items()))
        if prepare is not None:
            prepare(self)
        self.start()
        _create_roles(self._root, self.port, self._owner_password, self._reader_password)

    def start(self) -> None:
        """Start the (stopped) server and wait until it accepts connections."""
        self.tool(
            "pg_ctl", "start", "-D", str(self.datadir), "-l", str(self.logfile), "-w", "-t", str(COMMAND_TIMEOUT_S)
        )

    def halt(self) -> None:
        """Stop the server (fast shutdown), keeping its files."""
        self.tool("pg_ctl", "stop", "-D", str(self.datadir), "-m", "fast", "-w")

    def reinit(self) -> None:
        """Replace the cluster by a new one in the same place: same port, same roles and
        passwords, no databases (as a restore onto a new server would start)."""
        self.halt()
        shutil.rmtree(self.datadir)
        self._init_and_start()

    def stop(self) -> None:
        """Stop the server at once and remove its files; safe to call twice."""
        if self.datadir.exists():
            try:
                self.tool("pg_ctl", "stop", "-D", str(self.datadir), "-m", "immediate", "-w")
            except (subprocess.SubprocessError, OSError, RuntimeError):
                _kill_postmaster(self.datadir)
        shutil.rmtree(self._root, ignore_errors=True)


@dataclass(frozen=True)
class PostgresDatabase:
    """One database of a running server: `owner` writes it, `reader` may only SELECT."""

    name: str
    owner_url: str
    reader_url: str
    host: str
    port: int
    #: The server's statement log, shared by every database (lines say `user@database`).
    logfile: Path
    #: The server's unix socket directory (trusted local connections, no network).
    socket_dir: Path


def start_postgres(
    tmpdir: Path, dbname: str | None = "legacy", prepare: Callable[[PostgresServer], None] | None = None
) -> PostgresServer:
    """Initialise and start a server on 127.0.0.1 with both roles and, unless None, database `dbname`.

    Settings: `fsync=off` (speed), `log_statement=all` with each line prefixed by
    `user@database`, logged to `<datadir>/postgres.log`. Local socket connections are
    trusted; TCP connections must give the role's password. `prepare`, if given, runs
    between initdb and the first start (e.g. pg_resetwal; `PostgresServer.tool` runs it).
    """
    bindir = _find_bindir()
    as_postgres = os.geteuid() == 0
    root = _server_root(Path(tmpdir), as_postgres)
    datadir, logfile = root / "data", root / "data" / "postgres.log"
    port = _free_port()
    server = PostgresServer(
        host="127.0.0.1",
        port=port,
        datadir=datadir,
        logfile=logfile,
        owner_url="",
        reader_url="",
        _root=root,
        _bindir=bindir,
        _as_postgres=as_postgres,
    )
    server._owner_password, server._reader_password = secrets.token_hex(12), secrets.token_hex(12)
    try:
        server._init_and_start(prepare)
        if dbname is not None:
            database = server.create_database(dbname)
            server.owner_url, server.reader_url = database.owner_url, database.reader_url
    except BaseException:
        server.stop()
        raise
    return server


#: The role standbys stream the primary's WAL as (REPLICATION, no superuser), trusted on the socket.
REPLICATION_ROLE = "replicator"
#: A primary's settings for streaming replicas (PostgreSQL 15's defaults, stated: the test relies on them).
PRIMARY_SETTINGS = {"wal_level": "replica", "max_wal_senders": "4"}
#: A standby's: queries allowed (hot standby), and replay waits for the ones it conflicts
#: with instead of cancelling them once 30 s behind (the default), which a paused replay
#: reaches at once when resumed: a test's reads are short, a cancelled one fails it at random.
STANDBY_SETTINGS = {"hot_standby": "on", "max_standby_streaming_delay": "-1"}


def start_primary(tmpdir: Path, dbname: str = "legacy") -> PostgresServer:
    """`start_postgres`, with WAL for streaming replicas and a replication role that local
    connections may use (`start_standby`)."""

    def prepare(server: PostgresServer) -> None:
        with open(server.datadir / "postgresql.conf", "a", encoding="utf-8") as conf:
            conf.write("".join(f"{k} = {v}\n" for k, v in PRIMARY_SETTINGS.items()))
        hba = server.datadir / "pg_hba.conf"  # the first matching line wins: ours first
        hba.write_text(f"local replication {REPLICATION_ROLE} trust\n" + hba.read_text())

    server = start_postgres(tmpdir, dbname=dbname, prepare=prepare)
    with psycopg.connect(
        f"host={server.socket_dir} port={server.port} user=owner dbname=postgres", autocommit=True
    ) as conn:
        conn.execute(f"CREATE ROLE {REPLICATION_ROLE} REPLICATION LOGIN")
    return server


def start_standby(primary: PostgresServer, tmpdir: Path, dbname: str = "legacy") -> PostgresServer:
    """A hot standby of `primary` (made by `start_primary`) on a port of its own: `pg_basebackup -R`
    (the standby signal and the primary's conninfo), streaming from then on. Same roles and
    passwords; `owner_url` and `reader_url` reach `dbname` on the standby; `stop` removes it."""
    root = _server_root(Path(tmpdir), primary._as_postgres)
    datadir = root / "data"
    standby = replace(primary, port=_free_port(), datadir=datadir, logfile=root / "postgres.log", _root=root)
    database = standby.database(dbname)
    standby.owner_url, standby.reader_url = database.owner_url, database.reader_url
    try:
        standby.tool(
            "pg_basebackup",
            *("-D", str(datadir), "-h", str(primary.socket_dir), "-p", str(primary.port), "-U", REPLICATION_ROLE),
            *("-R", "-X", "stream", "--checkpoint=fast", "--no-sync"),
        )
        with open(datadir / "postgresql.conf", "a", encoding="utf-8") as conf:  # later lines win
            settings = {"port": str(standby.port), "unix_socket_directories": f"'{root}'", **STANDBY_SETTINGS}
            conf.write("\n# standby\n" + "".join(f"{k} = {v}\n" for k, v in settings.items()))
        standby.start()
    except BaseException:
        standby.stop()
        raise
    return standby


def _find_bindir() -> Path:
    candidates = sorted(
        glob.glob(BIN_GLOB), key=lambda p: int(Path(p).parent.name) if Path(p).parent.name.isdigit() else 0
    )
    for bindir in reversed(candidates):
        if (Path(bindir) / "initdb").is_file() and (Path(bindir) / "pg_ctl").is_file():
            return Path(bindir)
    raise RuntimeError(
        f"no PostgreSQL server binaries match {BIN_GLOB}; install the postgresql (server) package, e.g. `apt-get install postgresql-15`"
    )


def _server_root(tmpdir: Path, as_postgres: bool) -> Path:
    """A fresh directory for the server's files, which the server's user can reach."""
    parent = tmpdir
    # pytest's tmp dirs live under a 0700 directory of the current user, which the
    # `postgres` user cannot enter; long paths would also break the unix socket.
    if (as_postgres and not _reachable_by_others(tmpdir)) or len(str(tmpdir)) > MAX_SOCKET_DIR_LEN - 20:
        parent = Path(tempfile.gettempdir())
    root = Path(tempfile.mkdtemp(prefix="pg-", dir=parent))
    if as_postgres:
        shutil.chown(root, SYSTEM_USER, SYSTEM_USER)
    return root


def _reachable_by_others(path: Path) -> bool:
    """Whether every directory from / down to `path` lets other users pass through."""
    path = path.resolve()
    return all(os.stat(p).st_mode & 0o001 for p in [path, *path.parents])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(bindir: Path, as_postgres: bool, cwd: Path, program: str, *args: str) -> None:
    command = [str(bindir / program), *args]
    if as_postgres:
        command = ["runuser", "-u", SYSTEM_USER, "--", *command]
    # cwd: the `postgres` user may not be allowed into the caller's working directory.
    result = subprocess.run(
        command, cwd=cwd, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, env={**os.environ, "LC_ALL": "C"}
    )
    if result.returncode != 0:
        raise RuntimeError(f"{program} failed ({result.returncode}): {result.stdout}\n{result.stderr}")


def _kill_postmaster(datadir: Path) -> None:
    """Last resort when pg_ctl cannot stop the server: SIGQUIT (immediate) to its postmaster."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        pid = int((datadir / "postmaster.pid").read_text().splitlines()[0])
        os.kill(pid, signal.SIGQUIT)
        for _ in range(50):
            os.kill(pid, 0)  # raises once the process is gone
            time.sleep(0.1)


def _create_roles(socket_dir: Path, port: int, owner_password: str, reader_password: str) -> None:
    with psycopg.connect(f"host={socket_dir} port={port} user=owner dbname=postgres", autocommit=True) as conn:
        conn.execute("SET log_statement = 'none'")  # keep the passwords out of the statement log
        conn.execute(f"ALTER ROLE owner PASSWORD '{owner_password}'")
        conn.execute(f"CREATE ROLE reader LOGIN PASSWORD '{reader_password}'")


def ensure_postgis() -> Path:
    """PostGIS for the server binaries `start_postgres` uses (Debian's postgresql-<major>-postgis-3,
    installed when missing): the control file `CREATE EXTENSION postgis` reads."""
    major = _find_bindir().parent.name
    return ensure_file(
        Path(f"/usr/share/postgresql/{major}/extension/postgis.control"), f"postgresql-{major}-postgis-3"
    )
