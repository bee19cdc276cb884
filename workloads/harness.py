"""Start the agent and the service as real processes, and talk to them over HTTP.

Used by the demo, the integration tests and the benchmarks alike."""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class Process:
    """A child process that serves HTTP; stopped (and its log kept) on exit."""

    def __init__(
        self,
        args: list[str],
        *,
        port: int,
        host: str = "127.0.0.1",
        env: dict | None = None,
        log: Path,
        scheme: str = "http",
        startup_timeout_s: float = 120.0,
        verify=True,
        prefix: list[str] | None = None,
        python: str | None = None,
    ):
        """`python`: the interpreter to run `args` with, if not this process's (the orchestrators'
        tests run in a virtualenv of their own and start the service from the project's)."""
        self.port = port
        self.host = host
        self.url = f"{scheme}://{host}:{port}"
        self.log = log
        self.verify = verify
        full_env = {**os.environ, **(env or {})}
        full_env.setdefault("PYTHONUNBUFFERED", "1")
        self._log_handle = open(log, "ab")
        self.proc = subprocess.Popen(
            [*(prefix or []), python or sys.executable, *args],
            cwd=ROOT,
            env=full_env,
            stdout=self._log_handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._wait_ready(startup_timeout_s)

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.url} exited with {self.proc.returncode} before it was ready; log:\n{self.tail()}"
                )
            try:
                if httpx.get(f"{self.url}/health", timeout=2, verify=self.verify).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"{self.url} not ready after {timeout_s} s; log:\n{self.tail()}")

    def tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()
        self._log_handle.close()


def start_agent(
    db_url: str,
    log_dir: Path,
    *,
    token: str | None = None,
    allow: list[str] | None = None,
    host: str = "127.0.0.1",
    port: int | None = None,
    extra: list[str] | None = None,
    env: dict | None = None,
    prefix: list[str] | None = None,
    tls: tuple[Path, Path] | None = None,
    mutual: tuple[Path, Path] | None = None,
    python: str | None = None,
    startup_timeout_s: float = 30.0,
) -> Process:
    """An agent process; `tls` = (certificate, key) serves HTTPS, the certificate being trusted by
    the readiness check; `mutual` = (a self-signed client certificate, its key) makes the agent
    require client certificates signed by it (--ssl-ca-certs), the readiness check presenting it."""
    port = port or free_port()
    args = ["-m", "remote_agent", "--db-url", db_url, "--host", host, "--port", str(port), "--log-level", "warning"]
    if token:
        args += ["--token", token]
    for table in allow or []:
        args += ["--allow", table]
    scheme, verify = "http", True
    if tls:
        args += ["--ssl-certfile", str(tls[0]), "--ssl-keyfile", str(tls[1])]
        scheme, verify = "https", ssl.create_default_context(cafile=str(tls[0]))
        if mutual:
            args += ["--ssl-ca-certs", str(mutual[0])]
            verify.load_cert_chain(str(mutual[0]), str(mutual[1]))
    args += extra or []
    return Process(
        args,
        port=port,
        host=host,
        log=log_dir / f"agent-{port}.log",
        startup_timeout_s=startup_timeout_s,
        env=env,
        prefix=prefix,
        scheme=scheme,
        verify=verify,
        python=python,
    )


#: The SERVICE_SECRET_KEY of the services the tests and benchmarks start, unless the caller's
#: environment or `env` has one: they register agents with literal tokens, which a service
#: stores only encrypted (service/secrets.py). Fixed, so a service started again on the same
#: data dir reads what the one before stored; a key for throw-away data only, never a real one.
HARNESS_SECRET_KEY = "_TMHTksy6-XLJ7emX5el2MfOU20JVf8TkBcs9XkDMh4="


def start_service(
    data_dir: Path,
    log_dir: Path,
    *,
    port: int | None = None,
    env: dict | None = None,
    python: str | None = None,
    startup_timeout_s: float = 180.0,
) -> Process:
    """The service on `data_dir`; `env` adds to the caller's environment ("SERVICE_SECRET_KEY": ""
    starts it without a key)."""
    port = port or free_port()
    if "SERVICE_SECRET_KEY" not in os.environ:
        env = {"SERVICE_SECRET_KEY": HARNESS_SECRET_KEY, **(env or {})}
    args = ["-m", "service", "--port", str(port), "--data-dir", str(data_dir), "--log-level", "warning"]
    return Process(
        args,
        port=port,
        log=log_dir / f"service-{port}.log",
        startup_timeout_s=startup_timeout_s,
        env=env,
        python=python,
    )


#: Seconds a client keeps an idle connection to the service (below uvicorn's 5 s keep-alive).
KEEPALIVE_S = 2.0


class Api:
    """A thin client of the service API for tests and scripts."""

    def __init__(self, url: str, timeout: float = 600.0, headers: dict | None = None):
        # idle connections are dropped before uvicorn's keep-alive (5 s) closes them: a request
        # sent on one the server is closing at that moment fails with a reset
        limits = httpx.Limits(keepalive_expiry=KEEPALIVE_S)
        self.http = httpx.Client(base_url=url, timeout=timeout, headers=headers, limits=limits)

    def add_source(self, name: str, url: str, token: str | None = None, *, check: bool = True) -> dict:
        r = self.http.post("/v1/sources", json={"name": name, "url": url, "token": token, "check": check})
        r.raise_for_status()
        return r.json()

    def add_view(self, name: str, sql: str, **extra) -> dict:
        r = self.http.post("/v1/views", json={"name": name, "sql": sql, **extra})
        if r.status_code != 201:
            raise AssertionError(f"view not created: {r.status_code} {r.text}")
        return r.json()

    def sync(self, view: str) -> dict:
        r = self.http.post(f"/v1/views/{view}/syncs", params={"wait": "true"})
        if r.status_code != 200:
            raise AssertionError(f"sync did not run: {r.status_code} {r.text}")
        return r.json()

    def ndjson(self, path: str) -> list[dict]:
        import json

        r = self.http.get(path)
        r.raise_for_status()
        return [json.loads(line) for line in r.text.splitlines() if line]

    def rows(self, view: str) -> list[dict]:
        return self.ndjson(f"/v1/views/{view}/rows")

    def delta(self, view: str, sync_id: str) -> list[dict]:
        return self.ndjson(f"/v1/views/{view}/syncs/{sync_id}/delta")

    def active_syncs(self) -> list[dict]:
        """Every queued or running sync of every view."""
        active = []
        for view in self.http.get("/v1/views").json():
            for sync in self.http.get(f"/v1/views/{view['name']}/syncs").json():
                if sync["status"] in ("queued", "running"):
                    active.append({"view": view["name"], **sync})
        return active

    def wait_idle(self, within_s: float = 300.0) -> None:
        """Wait until no sync of any view is queued or running (other tests' leftovers)."""
        deadline = time.monotonic() + within_s
        while active := self.active_syncs():
            if time.monotonic() > deadline:
                raise AssertionError(f"syncs still under way after {within_s} s: {active}")
            time.sleep(0.5)

    def close(self) -> None:
        self.http.close()
