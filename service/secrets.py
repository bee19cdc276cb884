"""Secrets the catalog keeps: a source's token, a PostgreSQL destination's URL.

A secret is given in one of three forms, and stored as:

- `env:NAME`: a reference to the service's environment variable NAME, stored as given and
  read each time the secret is used;
- `file:/ABSOLUTE/PATH`: a reference to a file (its content, without the trailing newline),
  stored as given and read each time;
- anything else, a literal: stored encrypted with Fernet (AES-128-CBC with an HMAC-SHA256
  tag) under SERVICE_SECRET_KEY, as `fernet:<token>`; without the key it is refused.

A stored value that is none of these is a literal kept in clear by a catalog from before
secrets were encrypted: it is still used as it is, and `Secrets.sealed_again` encrypts it
once a key is set (the service does so at start).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from cryptography.fernet import Fernet, InvalidToken

from service.errors import DependencyFailed, Unprocessable
from service.records import SourceRecord
from warehouse.errors import SecretUnavailable

if TYPE_CHECKING:  # the request models load the strategies (Spark): the settings build a Secrets without them
    from service.models import DestinationIn

#: The prefix of a literal stored encrypted.
SEALED = "fernet:"
#: The prefixes of references, resolved when used and never stored resolved.
REFERENCES = ("env:", "file:")
#: The longest file a file: reference may name: a token or a URL, not a document.
MAX_FILE_BYTES = 64 * 1024


class SecretRefused(ValueError):
    """A literal secret cannot be stored: the service has no SERVICE_SECRET_KEY."""


def is_reference(value: str) -> bool:
    """Whether `value` names where the secret is rather than being it.

    >>> is_reference("env:AGENT_TOKEN"), is_reference("file:/run/secrets/token"), is_reference("s3cret")
    (True, True, False)
    """
    return value.startswith(REFERENCES)


def resolve(reference: str, environ: Mapping[str, str] | None = None) -> str:
    """The secret an `env:NAME` or `file:/PATH` reference names (SecretUnavailable says why not).

    >>> resolve("env:TOKEN", {"TOKEN": "abc"})
    'abc'
    >>> resolve("env:TOKEN", {})
    Traceback (most recent call last):
    ...
    warehouse.errors.SecretUnavailable: env:TOKEN: the service has no environment variable TOKEN
    >>> resolve("file:relative/path")
    Traceback (most recent call last):
    ...
    warehouse.errors.SecretUnavailable: file:relative/path: a file: reference takes an absolute path (file:/run/secrets/token)
    """
    kind, _, target = reference.partition(":")
    if kind == "env":
        value = (os.environ if environ is None else environ).get(target)
        if not value:
            raise SecretUnavailable(f"{reference}: the service has no environment variable {target}")
        return value
    path = Path(target)
    if not path.is_absolute():
        raise SecretUnavailable(f"{reference}: a file: reference takes an absolute path (file:/run/secrets/token)")
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise SecretUnavailable(
            f"{reference}: the service cannot read it ({exc.strerror or type(exc).__name__})"
        ) from None
    if len(raw) > MAX_FILE_BYTES:
        raise SecretUnavailable(f"{reference}: longer than {MAX_FILE_BYTES} bytes: not a secret")
    value = raw.decode("utf-8", errors="replace").rstrip("\r\n")
    if not value:
        raise SecretUnavailable(f"{reference}: the file is empty")
    return value


def shown(stored: str | None) -> str | None:
    """What may be shown of a stored secret: a reference as it is, a literal never.

    >>> shown("env:AGENT_TOKEN"), shown("fernet:gAAAA..."), shown("plain"), shown(None)
    ('env:AGENT_TOKEN', None, None, None)
    """
    return stored if stored is not None and is_reference(stored) else None


class Secrets:
    """Seals secrets for the catalog and reveals them for use, under SERVICE_SECRET_KEY (None: no key)."""

    def __init__(self, key: str | None):
        try:
            self._fernet = Fernet(key.encode()) if key else None
        except ValueError:
            raise ValueError(
                "SERVICE_SECRET_KEY must be 32 url-safe base64-encoded bytes; make one with "
                '`python -c "from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())"`'
            ) from None

    @property
    def has_key(self) -> bool:
        return self._fernet is not None

    def seal(self, value: str, what: str) -> str:
        """`value` as the catalog stores it: a reference as given, a literal encrypted.

        Raises:
            SecretRefused: a literal without SERVICE_SECRET_KEY (`what` names the secret).
        """
        if is_reference(value):
            return value
        if self._fernet is None:
            raise SecretRefused(
                f"{what} is a literal secret and the service has no SERVICE_SECRET_KEY to encrypt it with: "
                "give it as env:NAME (an environment variable of the service) or file:/PATH (a file the service "
                "reads), or set SERVICE_SECRET_KEY (docs/operations/security.md)"
            )
        return SEALED + self._fernet.encrypt(value.encode()).decode("ascii")

    def reveal(self, stored: str, what: str) -> str:
        """The secret itself: a reference resolved now, a sealed literal decrypted, a clear one as is.

        Raises:
            SecretUnavailable: the reference cannot be resolved, or the key does not open it.
        """
        if is_reference(stored):
            try:
                return resolve(stored)
            except SecretUnavailable as exc:
                raise SecretUnavailable(f"{what}: {exc.message}") from None
        if not stored.startswith(SEALED):
            return stored  # kept in clear by a catalog from before: sealed_again encrypts it
        if self._fernet is None:
            raise SecretUnavailable(f"{what} is stored encrypted and the service has no SERVICE_SECRET_KEY")
        try:
            return self._fernet.decrypt(stored[len(SEALED) :].encode("ascii")).decode()
        except (InvalidToken, ValueError):
            raise SecretUnavailable(
                f"{what} is stored encrypted under another SERVICE_SECRET_KEY than the service's"
            ) from None

    def seal_url(self, url: str, masked: str, what: str) -> tuple[str, str | None]:
        """A destination's URL as the catalog stores it, given `masked`, the URL with its
        password hidden: (url, None) for a reference or a URL without a password, else (the
        masked URL, which names the place, and the whole URL sealed).

        Raises:
            SecretRefused: a password without SERVICE_SECRET_KEY.
        """
        if is_reference(url) or masked == url:
            return url, None
        return masked, self.seal(url, what)

    def sealed_again(self, stored: str) -> str | None:
        """A literal the catalog keeps in clear, encrypted now that there is a key; None when
        there is nothing to do (a reference, sealed already, or no key)."""
        if self._fernet is None or is_reference(stored) or stored.startswith(SEALED):
            return None
        return self.seal(stored, "")

    def destination_sealed_again(self, spec: dict) -> dict | None:
        """A stored destination whose URL holds a password in clear, with it encrypted now that
        there is a key (as `seal_url` stores it); None when there is nothing to do."""
        url = spec.get("url")
        if self._fernet is None or not isinstance(url, str) or spec.get("sealed") or is_reference(url):
            return None
        from warehouse.destinations.postgres import masked  # only a postgres destination has a url

        shown, sealed = self.seal_url(url, masked(url), "")
        return None if sealed is None else {**spec, "url": shown, "sealed": sealed}


def source_token(secrets: Secrets, name: str, stored: str | None) -> str | None:
    """The token source `name`'s agent takes, from the one the catalog stores (None: no token)."""
    return None if stored is None else secrets.reveal(stored, f"the token of source {name!r}")


def agent_token(source: SourceRecord, secrets: Secrets) -> str | None:
    """A stored source's token for its agent, for a request made now (424 when its reference does not resolve)."""
    try:
        return source_token(secrets, source.name, source.token)
    except SecretUnavailable as exc:
        raise DependencyFailed(
            f"{exc.message}; fix it, or give the source another token (PATCH /v1/sources/{source.name})"
        ) from None


def stored_destinations(destinations: Sequence[DestinationIn], secrets: Secrets) -> list[dict]:
    """The destinations a request gives, as the view's options hold them: a URL's password
    encrypted (422 without SERVICE_SECRET_KEY), a reference as given."""
    out = []
    for d in destinations:
        spec = d.model_dump(mode="json", exclude_defaults=True)
        if d.url is not None:
            from warehouse.destinations.postgres import masked  # the kind's module: installed (DestinationIn)

            try:
                spec["url"], sealed = secrets.seal_url(d.url, masked(d.url), f"the url of destination {d.table}")
            except SecretRefused as exc:
                raise Unprocessable(str(exc)) from None
            if sealed is not None:
                spec["sealed"] = sealed
        out.append(spec)
    return out
