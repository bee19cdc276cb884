"""A Delta destination on S3 or an S3-compatible server: its storage options for delta-rs.

A destination `{"kind": "delta", "uri": "s3://BUCKET/PATH", "storage": {...}}` names its
server (`endpoint`, `region`) and its credentials (`access_key_id`, `secret_access_key`,
`session_token`), each given by reference (`env:NAME`, `file:/PATH`) or as a literal the
catalog keeps sealed (service/secrets.py). They are resolved each time the destination is
applied and handed to delta-rs as storage options of that table alone, never put in the
environment: two destinations on two servers or accounts each sign in with their own. A
destination without `storage` signs in as delta-rs does by itself (the AWS_* environment
variables, the instance's role).

Commits: delta-rs 1.x writes a commit, `_delta_log/<version>.json`, with one conditional PUT
(`If-None-Match: *`, object_store's create mode): of two writers of one version, one wins
and the other is refused and checks for conflicts. AWS S3 honours the condition (since
2024), and so do the S3-compatible servers that claim it (the tests run against moto's). No
lock table is needed; delta-rs 1.x has none left (it ignores a DynamoDB locking provider),
and the setting that turns the safety off, `aws_s3_allow_unsafe_rename`, is refused here.
A server that ignores the condition would let a second writer overwrite a version: the one
writer deltasieve puts on a table (never two workers on one destination) does not race
itself, and each sync's commit carries a Delta transaction id (`txn`, delta.py) so that a
commit retried after a lost answer conflicts with its own first landing instead of being
written twice.

What assumes a local path falls back: the file rewrite (delta_rewrite.py) and its cache
take local tables only, a table on S3 is applied by the MERGE; compaction and vacuum go
through delta-rs, on a bucket as on a disk.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from warehouse.view_options import StorageSpec

#: The URI schemes of tables on S3 or an S3-compatible server (delta-rs reads both).
SCHEMES = ("s3", "s3a")
#: What an API answer shows in place of a literal credential.
MASK = "***"
#: The storage options `endpoint`, `region` and the credentials fill (any spelling delta-rs takes).
_TYPED = re.compile(r"^(aws_)?(endpoint(_url)?|endpoint_url_s3|(default_)?region|allow_http)$")
#: Storage options that hold a credential: refused in `options`, where they would be stored in clear.
_CREDENTIAL = re.compile(r"secret|token|password|access_key|sse_customer_key")
#: Storage options that turn off the safety of commits.
_UNSAFE = re.compile(r"^(aws_)?s3_(allow_unsafe_rename|locking_provider)$")


def on_object_store(uri: str | None) -> bool:
    """Whether a Delta table's `uri` is on S3 or an S3-compatible server.

    >>> on_object_store("s3://lake/orders"), on_object_store("/data/tables/orders"), on_object_store(None)
    (True, False, False)
    """
    return uri is not None and urlsplit(uri).scheme in SCHEMES


def storage_options(storage: StorageSpec) -> dict[str, str]:
    """The delta-rs storage options of a destination's `storage`, its credentials resolved
    (the catalog's references and sealed literals opened: service/publishing.py `usable`).

    >>> storage_options(StorageSpec(endpoint="http://127.0.0.1:9000", access_key_id="k", secret_access_key="s"))
    {'aws_endpoint': 'http://127.0.0.1:9000', 'aws_allow_http': 'true', 'aws_access_key_id': 'k', 'aws_secret_access_key': 's'}
    >>> storage_options(StorageSpec(region="eu-west-1", options={"aws_virtual_hosted_style_request": "true"}))
    {'aws_region': 'eu-west-1', 'aws_virtual_hosted_style_request': 'true'}
    """
    options: dict[str, str] = {}
    if storage.endpoint is not None:
        options["aws_endpoint"] = storage.endpoint
        if urlsplit(storage.endpoint).scheme == "http":
            options["aws_allow_http"] = "true"
    if storage.region is not None:
        options["aws_region"] = storage.region
    for name in StorageSpec.CREDENTIALS:
        value = getattr(storage, name)
        if value is not None:
            options[f"aws_{name}"] = value
    return {**options, **(storage.options or {})}


def refused_option(key: str) -> str | None:
    """Why the storage option `key` may not be given in `options` (None: it may).

    >>> refused_option("aws_virtual_hosted_style_request") is None, refused_option("max_retries") is None
    (True, True)
    >>> refused_option("AWS_SECRET_ACCESS_KEY")
    'AWS_SECRET_ACCESS_KEY holds a credential: give it as storage.access_key_id, storage.secret_access_key or storage.session_token, where it is sealed or given by reference'
    >>> refused_option("aws_s3_allow_unsafe_rename")
    "aws_s3_allow_unsafe_rename would make the table's commits unsafe: delta-rs commits on S3 with a conditional PUT"
    >>> refused_option("aws_endpoint")
    'aws_endpoint is set by storage.endpoint, storage.region (allow_http: by an http:// endpoint)'
    """
    name = key.lower()
    if _CREDENTIAL.search(name):
        return (
            f"{key} holds a credential: give it as storage.access_key_id, storage.secret_access_key or "
            "storage.session_token, where it is sealed or given by reference"
        )
    if _UNSAFE.match(name):
        return f"{key} would make the table's commits unsafe: delta-rs commits on S3 with a conditional PUT"
    if _TYPED.match(name):
        return f"{key} is set by storage.endpoint, storage.region (allow_http: by an http:// endpoint)"
    return None


def shown(storage: StorageSpec) -> dict:
    """What an API answer shows of a stored `storage`: a reference as it is, a literal
    credential (stored sealed) masked.

    >>> shown(StorageSpec(endpoint="http://s3:9000", access_key_id="env:S3_KEY", secret_access_key="fernet:gAAA"))
    {'endpoint': 'http://s3:9000', 'access_key_id': 'env:S3_KEY', 'secret_access_key': '***'}
    """
    out = storage.model_dump(exclude_none=True)
    for name in StorageSpec.CREDENTIALS:
        value = out.get(name)
        if value is not None and not value.startswith(("env:", "file:")):
            out[name] = MASK
    return out
