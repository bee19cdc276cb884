"""A throwaway MariaDB server for tests and benchmarks, started from Debian's `mariadb-server`.

The test suite starts one per session (tests/conftest.py) and gives each module a database
of its own in it (`MariadbServer.create_database`), as it does with PostgreSQL. The server
is initialised in a temporary directory with `mariadb-install-db`, listens on 127.0.0.1 and
a unix socket of its own, and logs every statement (the general log) so that tests can
read what the agent ran. As root it runs as the `mysql` system user, which the package
creates. Roles: `owner` writes the test databases; `reader` may only SELECT.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

#: Seconds allowed for the initialisation and the start; a healthy start takes one or two.
COMMAND_TIMEOUT_S = 60
SYSTEM_USER = "mysql"
#: The server's character set and collation (Debian's defaults, stated: tests rely on them).
CHARSET, COLLATION = "utf8mb4", "utf8mb4_general_ci"


@dataclass
class MariadbServer:
    """A running server; `admin()` connects as its superuser over the unix socket."""

    host: str
    port: int
    socket: Path
    datadir: Path
    #: The general log: one line per statement, with the connection's id.
    general_log: Path
    error_log: Path
    _root: Path
    _process: subprocess.Popen | None = field(default=None, repr=False)
    _owner_password: str = field(default="", repr=False)
    _reader_password: str = field(default="", repr=False)

    def admin(self, database: str | None = None):
        """A connection as the server's superuser (MySQLdb, autocommit)."""
        import MySQLdb

        conn = MySQLdb.connect(unix_socket=str(self.socket), user="root", database=database or "", charset="utf8mb4")
        conn.autocommit(True)
        return conn

    def create_database(self, name: str) -> MariadbDatabase:
        """A new database `name`: `owner` may do anything in it, `reader` only SELECT."""
        conn = self.admin()
        try:
            cur = conn.cursor()
            cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET {CHARSET} COLLATE {COLLATION}")
            cur.execute(f"GRANT ALL ON `{name}`.* TO 'owner'@'%'")
            cur.execute(f"GRANT SELECT ON `{name}`.* TO 'reader'@'%'")
        finally:
            conn.close()
        return self.database(name)

    def sole_reader(self, name: str) -> str:
        """The URL of a login of its own that may SELECT in database `name` and nowhere else
        (`reader` may read every database the server made): what an agent without --allow
        is given to expose that database only."""
        user, password = f"r_{name}"[:80], secrets.token_hex(12)
        conn = self.admin()
        try:
            cur = conn.cursor()
            cur.execute(f"CREATE USER '{user}'@'%' IDENTIFIED BY '{password}'")
            cur.execute(f"GRANT SELECT ON `{name}`.* TO '{user}'@'%'")
        finally:
            conn.close()
        return f"mysql://{user}:{password}@{self.host}:{self.port}/{name}"

    def database(self, name: str) -> MariadbDatabase:
        return MariadbDatabase(
            name=name,
            owner_url=f"mysql://owner:{self._owner_password}@{self.host}:{self.port}/{name}",
            reader_url=f"mysql://reader:{self._reader_password}@{self.host}:{self.port}/{name}",
            host=self.host,
            port=self.port,
            general_log=self.general_log,
        )

    def stop(self) -> None:
        """Stop the server at once and remove its files; safe to call twice."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGKILL)  # its files are thrown away: no clean shutdown needed
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=COMMAND_TIMEOUT_S)
        shutil.rmtree(self._root, ignore_errors=True)


@dataclass(frozen=True)
class MariadbDatabase:
    """One database of a running server: `owner` writes it, `reader` may only SELECT."""

    name: str
    owner_url: str
    reader_url: str
    host: str
    port: int
    #: The server's general log, shared by every database.
    general_log: Path

    def owner(self):
        """A connection as `owner` to this database (MySQLdb, autocommit)."""
        return connect(self.owner_url)


def connect(url: str):
    """A MySQLdb connection (autocommit, utf8mb4) from a mysql:// URL: the legacy application's."""
    import MySQLdb

    parts = urlsplit(url)
    conn = MySQLdb.connect(
        host=parts.hostname,
        port=parts.port or 3306,
        user=unquote(parts.username or ""),
        password=unquote(parts.password or ""),
        database=parts.path.lstrip("/"),
        charset="utf8mb4",
    )
    conn.autocommit(True)
    return conn


def find_server() -> tuple[str, str]:
    """The paths of `mariadbd` and `mariadb-install-db`, installing Debian's `mariadb-server`
    first when missing (as root; otherwise the error says what to install)."""
    from workloads.debian import ensure_command

    install = ensure_command("mariadb-install-db", "mariadb-server")  # the package holds both
    server = shutil.which("mariadbd", path=f"{os.environ.get('PATH', '')}:/usr/sbin:/usr/local/sbin")
    if server is None:
        raise RuntimeError("mariadb-server is installed but no mariadbd binary was found in /usr/sbin")
    return server, install


def start_mariadb(tmpdir: Path, dbname: str | None = "legacy") -> tuple[MariadbServer, MariadbDatabase | None]:
    """Initialise and start a server on 127.0.0.1 with `owner`, `reader` and, unless None, database `dbname`.

    Settings: no durability (tests), the general log on, `utf8mb4` with Debian's default
    collation, UTC as the server's time zone.
    """
    mariadbd, install_db = find_server()
    as_mysql = os.geteuid() == 0
    root = Path(tempfile.mkdtemp(prefix="mariadb-", dir=tempfile.gettempdir()))
    datadir = root / "data"
    datadir.mkdir()
    if as_mysql:
        shutil.chown(root, SYSTEM_USER, SYSTEM_USER)
        shutil.chown(datadir, SYSTEM_USER, SYSTEM_USER)
    user = ["--user=" + SYSTEM_USER] if as_mysql else []
    server = MariadbServer(
        host="127.0.0.1",
        port=_free_port(),
        socket=root / "mariadb.sock",
        datadir=datadir,
        general_log=root / "general.log",
        error_log=root / "error.log",
        _root=root,
    )
    try:
        done = subprocess.run(
            [
                install_db,
                "--no-defaults",
                f"--datadir={datadir}",
                *user,
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                "--skip-name-resolve",
            ],
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
        )
        if done.returncode != 0:
            raise RuntimeError(f"mariadb-install-db failed ({done.returncode}): {done.stdout}\n{done.stderr}")
        server._process = subprocess.Popen(
            [
                mariadbd,
                "--no-defaults",
                *user,
                f"--datadir={datadir}",
                f"--socket={server.socket}",
                f"--port={server.port}",
                "--bind-address=127.0.0.1",
                f"--pid-file={root / 'mariadb.pid'}",
                f"--log-error={server.error_log}",
                "--general-log=1",
                f"--general-log-file={server.general_log}",
                f"--character-set-server={CHARSET}",
                f"--collation-server={COLLATION}",
                "--default-time-zone=+00:00",
                "--skip-name-resolve",
                "--innodb-flush-log-at-trx-commit=0",
                "--innodb-buffer-pool-size=128M",
                "--innodb-log-file-size=48M",
                "--sync-binlog=0",
                "--skip-log-bin",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _wait_ready(server)
        server._owner_password, server._reader_password = secrets.token_hex(12), secrets.token_hex(12)
        conn = server.admin()
        try:
            cur = conn.cursor()
            cur.execute("SET SESSION sql_log_off = 1")  # keep the passwords out of the general log
            cur.execute(f"CREATE USER 'owner'@'%' IDENTIFIED BY '{server._owner_password}'")
            cur.execute(f"CREATE USER 'reader'@'%' IDENTIFIED BY '{server._reader_password}'")
        finally:
            conn.close()
        database = server.create_database(dbname) if dbname is not None else None
    except BaseException:
        server.stop()
        raise
    return server, database


def _wait_ready(server: MariadbServer) -> None:
    import MySQLdb

    deadline = time.monotonic() + COMMAND_TIMEOUT_S
    while True:
        if server._process is not None and server._process.poll() is not None:
            log = server.error_log.read_text(errors="replace")[-2000:] if server.error_log.exists() else ""
            raise RuntimeError(f"mariadbd exited with {server._process.returncode} at start: {log}")
        try:
            server.admin().close()
            return
        except MySQLdb.OperationalError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"mariadbd did not accept connections within {COMMAND_TIMEOUT_S} s") from None
            time.sleep(0.1)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
