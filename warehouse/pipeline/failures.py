"""How a site's final extraction failure is told: with the way out, in the view's own terms.

The agent knows site queries, not views: when the source's schema no longer fits what the
view was registered with, the warehouse adds the way out that names the view, and says how
many attempts a transient failure was given.
"""

from __future__ import annotations

from warehouse.errors import AgentRejected, SourceError, WarehouseError

#: Agent refusals of a site query it accepted at registration: a table or column is gone
#: or no longer exposed (403), or no longer fits the site-query grammar (422).
SCHEMA_DRIFT_STATUSES = (403, 422)
#: How the agent ends a schema change's message (remote_agent/strategies/checks.py).
REDEFINE_AT_AGENT = "(PUT its definition again)"


def told(exc: WarehouseError, source: str, view: str, attempts: int, retries: int) -> str:
    """The message of `exc`, the last failure of `source`'s extraction for `view` after `attempts`.

    >>> told(AgentRejected("column 'x' is gone; redefine the view (PUT its definition again)"), "crm", "v", 1, 3)
    "column 'x' is gone; redefine the view (PUT /v1/views/v)"
    >>> told(AgentRejected("no table 'orders'", 422), "crm", "v", 1, 3).endswith("redefine the view (PUT /v1/views/v)")
    True
    >>> told(SourceError("PostgreSQL refused the read of table 't': permission denied"), "crm", "v", 1, 3)[:60]
    "source 'crm': PostgreSQL refused the read of table 't': perm"
    """
    message = exc.message
    if isinstance(exc, SourceError):
        message = f"source {source!r}: {message}. {source_way_out(view)}"
    elif isinstance(exc, AgentRejected) and exc.status in SCHEMA_DRIFT_STATUSES:
        message = (
            f"source {source!r}: {message}. The agent accepted this site query when the view was registered: "
            f"the source schema (or the agent's --allow list) changed since; restore it, or redefine the view "
            f"(PUT /v1/views/{view})"
        )
    elif isinstance(exc, AgentRejected) and message.endswith(REDEFINE_AT_AGENT):
        message = message.removesuffix(REDEFINE_AT_AGENT) + f"(PUT /v1/views/{view})"
    if exc.transient:
        message = f"{message} (gave up after {attempts} attempt(s); SERVICE_AGENT_RETRIES={retries})"
    return message


def source_way_out(view: str) -> str:
    """What to do when the source's database refuses a read of `view` (a retry meets the same refusal)."""
    return (
        "The database refuses this read, so the sync was not retried: leave the column out of the view (its SQL, "
        f'PUT /v1/views/{view}; "exclude_columns" on a table view or a mirror), read it as another type '
        '("column_types"), or have the source grant the agent\'s role what it lacks'
    )
