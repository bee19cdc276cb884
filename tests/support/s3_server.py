"""An S3-protocol server on the loopback for the tests: moto's server mode, a subprocess.

moto (the `test` extra) answers S3's REST API with its own state in memory: buckets,
objects, listings, ranged reads, multipart uploads, and conditional PUTs (`If-None-Match:
*` refused with 412 when the key exists), which is how delta-rs 1.x commits on S3
(warehouse/destinations/object_storage.py). It signs nothing in: any access key is taken.

The server runs under DELTASIEVE_MOTO_PYTHON when set (an interpreter whose environment
has moto, for a machine whose venv cannot take it), else under the suite's own.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from workloads.harness import free_port

#: Credentials moto takes (it checks none); the destinations under test get them by reference.
ACCESS_KEY_ID = "AKIDDELTASIEVETEST"
SECRET_ACCESS_KEY = "deltasieve-test-secret"
REGION = "us-east-1"
#: Seconds the server has to answer its first request.
START_TIMEOUT_S = 60.0


@dataclass
class S3Server:
    """A running moto server: `endpoint` is its http://127.0.0.1:PORT."""

    endpoint: str
    logfile: Path
    _process: subprocess.Popen = field(repr=False)
    _buckets: int = 0

    def bucket(self, prefix: str = "lake") -> str:
        """A new, empty bucket's name."""
        self._buckets += 1
        name = f"{prefix}-{self._buckets}"
        answer = httpx.put(f"{self.endpoint}/{name}")  # moto takes an unsigned CreateBucket
        answer.raise_for_status()
        return name

    def storage_options(self, endpoint: str | None = None) -> dict[str, str]:
        """delta-rs storage options that sign in to this server (or to `endpoint`, a proxy in front of it)."""
        return {
            "aws_endpoint": endpoint or self.endpoint,
            "aws_allow_http": "true",
            "aws_region": REGION,
            "aws_access_key_id": ACCESS_KEY_ID,
            "aws_secret_access_key": SECRET_ACCESS_KEY,
        }

    def stop(self) -> None:
        self._process.terminate()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


def start_s3_server(workdir: Path) -> S3Server:
    """Start moto's server on a free loopback port; return once it answers."""
    port = free_port()
    python = os.environ.get("DELTASIEVE_MOTO_PYTHON") or sys.executable
    logfile = workdir / "moto.log"
    with logfile.open("wb") as log:
        process = subprocess.Popen(
            [python, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"moto's server ended at start ({python} -m moto.server): {logfile.read_text()[-2000:]}")
        try:
            httpx.get(f"{endpoint}/moto-api/", timeout=2.0)
            return S3Server(endpoint, logfile, process)
        except httpx.TransportError:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError(f"moto's server did not answer within {START_TIMEOUT_S:.0f} s: {logfile}")
