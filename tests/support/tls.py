"""Self-signed TLS certificates for tests, made with the `openssl` command-line tool."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

#: Seconds allowed for openssl to make a key and a certificate.
OPENSSL_TIMEOUT_S = 60


@dataclass(frozen=True)
class Certificate:
    """A self-signed certificate (which is also the CA to trust) and its private key."""

    certfile: Path
    keyfile: Path


def self_signed(
    directory: Path, name: str = "agent", hosts: tuple[str, ...] = ("127.0.0.1", "localhost")
) -> Certificate:
    """A fresh key and a certificate valid for `hosts` (IP addresses or DNS names), for two days."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError("the openssl command is needed to make test certificates (Debian: apt-get install openssl)")
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    san = ",".join(f"IP:{h}" if h.replace(".", "").isdigit() or ":" in h else f"DNS:{h}" for h in hosts)
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-sha256",
            "-days",
            "2",
            "-subj",
            f"/CN={hosts[0]}",
            "-addext",
            f"subjectAltName={san}",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=OPENSSL_TIMEOUT_S,
    )
    return Certificate(cert, key)
