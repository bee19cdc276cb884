"""A Spark standalone cluster on this machine, from the distribution pip's PySpark ships.

A master and one worker, each a JVM of its own started with the distribution's
`bin/spark-class`; the worker starts the executor JVM (a third one) when the service's
application registers. The executors' Python is a virtual environment that sees the
project's dependencies (pyarrow, numpy, xxhash, ...) but not the project itself, and the
worker runs outside the repository with no PYTHONPATH: a task that imports `warehouse` or
`remote_agent` finds them only if the driver sent them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sysconfig
import time
import venv
from pathlib import Path

import httpx
import pyspark

from workloads.harness import ROOT, free_port

SPARK_HOME = Path(pyspark.__file__).parent
SPARK_CLASS = SPARK_HOME / "bin" / "spark-class"
#: Heap of the master and the worker daemons; they only keep the cluster's bookkeeping.
DAEMON_MEMORY = "256m"
#: What the worker offers to executors.
WORKER_CORES = 1
WORKER_MEMORY = "1g"
#: Seconds for the master to answer and the worker to register (JVM start-up on a busy machine).
READY_TIMEOUT_S = 90.0


def executor_python(directory: Path) -> Path:
    """A Python for the executors: this one's interpreter and dependencies, without deltasieve.

    A virtual environment whose one .pth file adds the test environment's site-packages
    as a plain path. The editable install of deltasieve there is a .pth file of its own,
    which Python runs only in a site directory, so the project stays out of reach.
    """
    venv.create(directory, with_pip=False)
    python = directory / "bin" / "python"
    purelib = Path(
        subprocess.check_output(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True
        ).strip()
    )
    (purelib / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def _environment() -> dict[str, str]:
    """The daemons' environment: nothing that points Python at the repository."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PYSPARK", "SPARK"))}
    return {**env, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_DAEMON_MEMORY": DAEMON_MEMORY}


class SparkCluster:
    """A running master and worker; `stop()` ends both (and the executors the worker started)."""

    def __init__(self, root: Path, log_dir: Path):
        self.root = root
        self.log_dir = log_dir
        self.python = executor_python(root / "executor-venv")
        self.port, self.ui_port = free_port(), free_port()
        self.master_url = f"spark://127.0.0.1:{self.port}"
        self._processes: list[subprocess.Popen] = []
        try:
            self._start(
                "master",
                ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(self.port)],
                ["--webui-port", str(self.ui_port)],
            )
            self._wait(lambda state: True, "the master to answer")
            self._start(
                "worker",
                ["org.apache.spark.deploy.worker.Worker", self.master_url, "--host", "127.0.0.1"],
                ["--webui-port", str(free_port()), "--cores", str(WORKER_CORES), "--memory", WORKER_MEMORY]
                + ["--work-dir", str(root / "work")],
            )
            self._wait(lambda state: state["aliveworkers"] >= 1, "the worker to register")
        except BaseException:
            self.stop()
            raise

    def _start(self, name: str, main: list[str], options: list[str]) -> None:
        cwd = self.root / name
        cwd.mkdir()
        assert ROOT not in cwd.parents, "the cluster must run outside the repository"
        with open(self.log_dir / f"spark-{name}-{self.port}.log", "ab") as log:
            self._processes.append(
                subprocess.Popen(
                    [str(SPARK_CLASS), *main, *options],
                    cwd=cwd,
                    env=_environment(),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )

    def state(self) -> dict:
        """The master's view of the cluster (its web UI's JSON: workers, applications)."""
        return httpx.get(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5).json()

    def _wait(self, ready, what: str) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            for process in self._processes:
                if process.poll() is not None:
                    raise RuntimeError(f"a Spark daemon exited with {process.returncode}; logs in {self.log_dir}")
            try:
                if ready(self.state()):
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"gave up waiting for {what} after {READY_TIMEOUT_S} s; logs in {self.log_dir}")

    def stop(self) -> None:
        """End the worker (with its executors, in its process group), then the master."""
        for process in reversed(self._processes):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait(timeout=10)
        self._processes.clear()


def can_import(python: Path, cwd: Path, *modules: str) -> bool:
    """Whether `python`, run from `cwd` in the daemons' environment, can import all of `modules`."""
    probe = subprocess.run(
        [str(python), "-c", f"import {', '.join(modules)}"], cwd=cwd, env=_environment(), capture_output=True
    )
    return probe.returncode == 0
