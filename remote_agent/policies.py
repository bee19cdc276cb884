"""Column policies the agent applies inside the read: personal data that never leaves the legacy host.

Two sources of policies meet here. The agent's own (`--hash TABLE.COLUMN`, `--block
TABLE.COLUMN`) shape what it exposes: a blocked column is not exposed at all, a hashed one is
exposed as text and always hashed, whatever a view asks. A view's (`SiteSpec.policies`,
`SiteSpec.blocked`) ride on each request's site spec: its blocked columns are read as if
not exposed, its hashed and masked output columns are transformed value by value where the
adapter's rows become canonical Arrow (adapters/rows.py), so that every hash, sketch and
row the answer carries is of the transformed values. A row filter needs nothing here: the
warehouse writes it into the site query, which the agent validates like any other.

A hash is HMAC-SHA-256 under AGENT_HASH_KEY of the value's text form, as 64 hex digits:
deterministic (joins and comparisons on it hold), and not to be reversed by hashing
guessed values without the key, which never leaves the agent.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from deltasieve_protocol.error_codes import HASH_KEY_MISSING
from deltasieve_protocol.models import SiteSpec
from deltasieve_protocol.schema import ColumnInfo, TableInfo
from deltasieve_protocol.types import LogicalType
from remote_agent.errors import UnsupportedQuery

if TYPE_CHECKING:
    from remote_agent.sitequery import ValidatedQuery

#: Characters of a masked value kept at its end; the others become MASK_CHAR.
MASK_KEEP = 4
MASK_CHAR = "*"
TEXT = LogicalType("text")


class HashKeyMissing(UnsupportedQuery):
    """A column is to be hashed but the agent has no AGENT_HASH_KEY (422)."""

    code = HASH_KEY_MISSING


def text_form(value: Any) -> bytes:
    """The bytes a value is hashed as: UTF-8 of its text form; bytes as they are.

    Integers and decimals as their digits, floats as Python's repr, booleans as
    true/false, dates and times in ISO 8601.

    >>> text_form("Ann"), text_form(42), text_form(True), text_form(dt.date(2024, 1, 2)), text_form(b"\\x00")
    (b'Ann', b'42', b'true', b'2024-01-02', b'\\x00')
    """
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, bool):
        return b"true" if value else b"false"
    if isinstance(value, dt.date | dt.time):
        return value.isoformat().encode()
    return str(value).encode()


def hashed(key: bytes, value: Any) -> str | None:
    """HMAC-SHA-256 of the value's text form under `key`, as hex; NULL stays NULL.

    >>> hashed(b"k", "Ann")
    '7515ec00c678587251341589c884e090202fed1f66d3ee91ed2cade59125ca1b'
    >>> hashed(b"k", None) is None, hashed(b"k", 7) == hashed(b"k", "7")
    (True, True)
    """
    if value is None:
        return None
    return hmac.new(key, text_form(value), hashlib.sha256).hexdigest()


def masked(value: str | None) -> str | None:
    """The value with all but its last MASK_KEEP characters replaced by MASK_CHAR (its length kept);
    a value of MASK_KEEP characters or fewer is masked whole. NULL stays NULL.

    >>> masked("4111111111111111"), masked("abcd"), masked(""), masked(None)
    ('************1111', '****', '', None)
    """
    if value is None:
        return None
    if len(value) <= MASK_KEEP:
        return MASK_CHAR * len(value)
    return MASK_CHAR * (len(value) - MASK_KEEP) + value[-MASK_KEEP:]


def transform(column: ColumnInfo, key: bytes | None) -> Callable[[Any], Any] | None:
    """The function a column's policy applies to its canonical values, or None without one."""
    if column.policy == "mask":
        return masked
    if column.policy == "hash":
        if key is None:
            raise HashKeyMissing(f"column {column.name!r} is to be hashed, but this agent has no AGENT_HASH_KEY")
        return lambda value: hashed(key, value)
    return None


def parse_columns(rules: Iterable[str], flag: str) -> set[str]:
    """`--hash`/`--block` rules (TABLE.COLUMN, SCHEMA.TABLE.COLUMN) as a set, each checked.

    >>> sorted(parse_columns(["people.ssn", "erp.people.name"], "--hash"))
    ['erp.people.name', 'people.ssn']
    """
    rules = [r.strip() for r in rules if r.strip()]
    for rule in rules:
        table, _, column = rule.rpartition(".")
        if not table or not column:
            raise ValueError(f"bad {flag} rule {rule!r}: expected TABLE.COLUMN (SCHEMA.TABLE.COLUMN in another schema)")
    return set(rules)


def exposed_table(table: TableInfo, hash_columns: set[str], block_columns: set[str]) -> TableInfo:
    """`table` as the agent's own policies expose it: blocked columns gone, hashed ones text.

    A key holding a blocked or hashed column is no key of the exposed table: the source
    orders and looks up keys by their raw values, which the warehouse never sees.

    >>> from deltasieve_protocol.types import LogicalType as T
    >>> t = TableInfo("p", (ColumnInfo("id", T("int"), False, "int"), ColumnInfo("ssn", T("int"), True, "int")), ("id",))
    >>> e = exposed_table(t, {"p.ssn"}, set())
    >>> [(c.name, str(c.type), c.policy) for c in e.columns], e.primary_key
    ([('id', 'int', None), ('ssn', 'text', 'hash')], ('id',))
    >>> exposed_table(t, set(), {"p.ssn"}).columns[1:], exposed_table(t, {"p.id"}, set()).primary_key
    ((), ())
    """
    if not hash_columns and not block_columns:
        return table
    columns = []
    for c in table.columns:
        name = f"{table.name}.{c.name}"
        if name in block_columns:
            continue
        if name in hash_columns:
            c = replace(c, type=TEXT, policy="hash", policy_from=c.type)
        columns.append(c)
    plain = {c.name for c in columns if c.policy is None}
    return replace(
        table,
        columns=tuple(columns),
        primary_key=table.primary_key if set(table.primary_key) <= plain else (),
        unique_keys=tuple(u for u in table.unique_keys if set(u) <= plain),
    )


def without_blocked(tables: Mapping[str, TableInfo], blocked: Iterable[str] | None) -> Mapping[str, TableInfo]:
    """The exposed tables less the columns a view blocks (`table.column`): a query naming one is refused.

    >>> from deltasieve_protocol.types import LogicalType as T
    >>> t = TableInfo("p", (ColumnInfo("id", T("int"), False, "int"), ColumnInfo("ssn", T("text"), True, "text")), ("id",))
    >>> [c.name for c in without_blocked({"p": t}, ["p.ssn"])["p"].columns]
    ['id']
    """
    if not blocked:
        return tables
    cut = set(blocked)
    return {
        name: replace(t, columns=tuple(c for c in t.columns if f"{name}.{c.name}" not in cut))
        for name, t in tables.items()
    }


def with_policies(query: ValidatedQuery, site: SiteSpec, key: bytes | None) -> ValidatedQuery:
    """The query with the view's policies set on its output columns, every policy checked.

    Raises:
        UnsupportedQuery: a policy on a column the query does not output, on a key column, on a
            column read as another type (column_types), a mask on a column that is not text, or any
            policy on a grouped query (422).
        HashKeyMissing: a column is to be hashed and the agent has no AGENT_HASH_KEY (422).
    """
    asked = site.policies or {}
    columns = list(query.columns)
    names = [c.name for c in columns]
    for name, policy in asked.items():
        if name not in names:
            raise UnsupportedQuery(f"policies name {name!r}, which is not an output column ({', '.join(names)})")
        i = names.index(name)
        c = columns[i]
        if c.read_from is not None:
            raise UnsupportedQuery(
                f"column {name!r} is read as another type (column_types): it cannot also be {policy}ed"
            )
        if c.policy == "hash":  # the agent's own --hash: no view lifts it
            continue
        if policy == "mask":
            if c.type.kind != "text":
                raise UnsupportedQuery(
                    f"column {name!r} is {c.type}: only a text column can be masked; hash it instead"
                )
            columns[i] = replace(c, policy="mask")
        else:
            columns[i] = replace(c, type=TEXT, policy="hash", policy_from=c.type)
    ruled = [c for c in columns if c.policy is not None]
    if not ruled:
        return query
    if query.grouped:
        raise UnsupportedQuery(
            "a view over tables without a key is read grouped by its raw values: its columns cannot be hashed or masked"
        )
    in_key = [c.name for c in ruled if c.name in query.key]
    if in_key:
        raise UnsupportedQuery(
            f"key column(s) {in_key} would be hashed or masked: the source orders and looks up keys by their raw "
            "values, which the warehouse never sees; a key column keeps its values"
        )
    if key is None and any(c.policy == "hash" for c in ruled):
        hashed_names = [c.name for c in ruled if c.policy == "hash"]
        raise HashKeyMissing(
            f"column(s) {hashed_names} are to be hashed, but this agent has no hash key: start it with "
            "AGENT_HASH_KEY set (a secret only the agent holds)"
        )
    return replace(query, columns=columns, hash_key=key)


def redacted(column: ColumnInfo, value: Any) -> Any:
    """What an error message may show of a value of `column`: never the raw value of a policy column.

    >>> redacted(ColumnInfo("ssn", TEXT, True, "text", policy="mask"), "123-45-6789")
    '<masked>'
    """
    return value if column.policy is None else f"<{column.policy}ed>"


def encoded_key(secret: str | None) -> bytes | None:
    """AGENT_HASH_KEY as the bytes HMAC is keyed with (UTF-8), or None without one.

    >>> encoded_key("s3cret"), encoded_key(None), encoded_key("")
    (b's3cret', None, None)
    """
    return secret.encode() if secret else None


__all__ = [
    "HashKeyMissing",
    "encoded_key",
    "exposed_table",
    "hashed",
    "masked",
    "parse_columns",
    "redacted",
    "text_form",
    "transform",
    "with_policies",
    "without_blocked",
]
