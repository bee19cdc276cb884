"""Debian packages a test needs, installed on first use when missing (CI runs as root).

The suite's two workers may each need a package at the same moment (MariaDB's server,
Chromium): installs take turns behind a lock file, and apt waits for dpkg's own lock
rather than failing at once.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

#: Serializes this project's installs across processes (pytest-xdist workers).
LOCK_FILE = Path(tempfile.gettempdir()) / "deltasieve-apt.lock"
#: Seconds apt waits for dpkg's lock held by another install before giving up.
DPKG_LOCK_TIMEOUT_S = 600


def ensure_command(command: str, package: str) -> str:
    """The path of `command`, installing Debian's `package` first when it is missing.

    Raises:
        RuntimeError: it is missing and cannot be installed here (not root, no apt-get, or
            the install failed), with the command that would install it.
    """
    found = shutil.which(command)
    if found:
        return found
    _install(package, f"the {command} command", lambda: shutil.which(command) is not None)
    found = shutil.which(command)
    if not found:
        raise RuntimeError(f"`apt-get install {package}` ran but no {command} command is on the PATH")
    return found


def ensure_file(path: Path, package: str) -> Path:
    """`path`, a file Debian's `package` installs (a PostgreSQL extension's control file), installing it when missing.

    Raises:
        RuntimeError: as `ensure_command`.
    """
    if not path.exists():
        _install(package, str(path), path.exists)
        if not path.exists():
            raise RuntimeError(f"`apt-get install {package}` ran but {path} is still missing")
    return path


def _install(package: str, what: str, present: Callable[[], bool]) -> None:
    """Install `package` (which provides `what`) unless `present()` says another worker did meanwhile."""
    how = f"apt-get install {package}"
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise RuntimeError(f"{what} is needed by this test and is missing; install it: {how}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    wait = ["-o", f"DPkg::Lock::Timeout={DPKG_LOCK_TIMEOUT_S}"]
    install = ["apt-get", *wait, "install", "-y", "-q", package]
    with open(LOCK_FILE, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker's install first
        if not present():
            if subprocess.run(install, env=env, capture_output=True).returncode != 0:
                subprocess.run(["apt-get", *wait, "update", "-q"], env=env, capture_output=True)
                done = subprocess.run(install, env=env, capture_output=True, text=True)
                if done.returncode != 0:
                    raise RuntimeError(f"`{how}` failed: {done.stderr[-500:]}")
