"""Debian packages a test needs, installed on first use when missing (CI runs as root)."""

from __future__ import annotations

import os
import shutil
import subprocess


def ensure_command(command: str, package: str) -> str:
    """The path of `command`, installing Debian's `package` first when it is missing.

    Raises:
        RuntimeError: it is missing and cannot be installed here (not root, no apt-get, or
            the install failed), with the command that would install it.
    """
    found = shutil.which(command)
    if found:
        return found
    how = f"apt-get install {package}"
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise RuntimeError(f"the {command} command is needed by this test and is missing; install it: {how}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", package]
    if subprocess.run(install, env=env, capture_output=True).returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True)
        done = subprocess.run(install, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"`{how}` failed: {done.stderr[-500:]}")
    found = shutil.which(command)
    if not found:
        raise RuntimeError(f"`{how}` ran but no {command} command is on the PATH")
    return found
