"""How a site's final extraction failure is told: with the way out, in the view's own terms.

The agent knows site queries, not views: when the source's schema no longer fits what the
view was registered with, the warehouse adds the way out that names the view, and says how
many attempts a transient failure was given.
"""

from __future__ import annotations

from typing import TypeGuard

from deltasieve_protocol.error_codes import SCHEMA_CHANGED, SCHEMA_DRIFT
from warehouse.errors import AgentRejected, Remedy, SourceError, WarehouseError


def drifted(exc: WarehouseError) -> TypeGuard[AgentRejected]:
    """Whether the agent refuses a site query it accepted when the view was registered, for a
    reason that says the source's schema (or the agent's --allow list) changed since: told
    by the agent's code, never by its words.

    >>> drifted(AgentRejected("...", 409, "schema_changed")), drifted(AgentRejected("...", 403, "forbidden"))
    (True, True)
    >>> drifted(AgentRejected("...", 422, "hash_key_missing")), drifted(AgentRejected("...", 409, "source_data"))
    (False, False)
    """
    return isinstance(exc, AgentRejected) and exc.agent_code in SCHEMA_DRIFT


def told(exc: WarehouseError, source: str, attempts: int, retries: int) -> str:
    """The message of `exc`, the last failure of `source`'s extraction after `attempts`; sets
    the remedies the service adds to it.

    >>> e = AgentRejected("column 'x' is gone; redefine the view to match the new schema", 409, "schema_changed")
    >>> told(e, "crm", 1, 3), e.remedies
    ("column 'x' is gone; redefine the view to match the new schema", (<Remedy.REDEFINE: 'redefine'>,))
    >>> told(AgentRejected("no table 'orders'", 422, "unsupported_query"), "crm", 1, 3).endswith("or redefine the view")
    True
    >>> told(SourceError("PostgreSQL refused the read of table 't': permission denied"), "crm", 1, 3)[:60]
    "source 'crm': PostgreSQL refused the read of table 't': perm"
    """
    message = exc.message
    if isinstance(exc, SourceError):
        message = f"source {source!r}: {message}. {SOURCE_WAY_OUT}"
    elif drifted(exc) and exc.agent_code != SCHEMA_CHANGED:  # a schema change words its own way out
        message = (
            f"source {source!r}: {message}. The agent accepted this site query when the view was registered: "
            f"the source schema (or the agent's --allow list) changed since; restore it, or redefine the view"
        )
    if isinstance(exc, SourceError) or drifted(exc):
        exc.remedies = (Remedy.REDEFINE,)
    if exc.transient:
        message = f"{message} (gave up after {attempts} attempt(s); SERVICE_AGENT_RETRIES={retries})"
    return message


#: What to do when the source's database refuses a read (a retry meets the same refusal).
SOURCE_WAY_OUT = (
    "The database refuses this read, so the sync was not retried: leave the column out of the view (its SQL, "
    'or "exclude_columns" on a table view or a mirror), read it as another type ("column_types"), or have the '
    "source grant the agent's role what it lacks"
)
