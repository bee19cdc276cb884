"""The service's words for the ways out of a failed sync: the warehouse names a remedy
(warehouse.errors.Remedy) and says it in words; the service adds the call that does it.

The warehouse knows views and sources, not this API's routes, so that a route renamed here
changes no message there.
"""

from __future__ import annotations

from warehouse.errors import Remedy, WarehouseError

#: A cancelled sync's error; `{view}` and `{id}` are the view's and the sync's.
CANCELLED = "cancelled (DELETE /v1/views/{view}/syncs/{id}); the view is unchanged"
#: A queued sync's error when it was cancelled with the others (DELETE /v1/syncs?status=queued).
CANCELLED_QUEUED = (
    "cancelled while queued, with the other queued syncs (DELETE /v1/syncs?status=queued); the view is unchanged"
)


def how(remedy: Remedy, view: str) -> str:
    """The call that applies `remedy` to `view`.

    >>> how(Remedy.REDEFINE, "orders")
    'PUT /v1/views/orders'
    >>> how(Remedy.EVOLVE, "orders")
    'PATCH /v1/views/orders with {"on_schema_change": "evolve"}'
    """
    if remedy is Remedy.REDEFINE:
        return f"PUT /v1/views/{view}"
    return f'PATCH /v1/views/{view} with {{"on_schema_change": "evolve"}}'


def worded(exc: WarehouseError, view: str) -> str:
    """The message of a failed sync of `view`: the warehouse's, then how to take its ways out.

    >>> e = WarehouseError("column 'x' is gone; redefine the view")
    >>> worded(e, "v")
    "column 'x' is gone; redefine the view"
    >>> e.remedies = (Remedy.REDEFINE, Remedy.EVOLVE)
    >>> worded(e, "v")
    'column \\'x\\' is gone; redefine the view (redefine: PUT /v1/views/v; evolve: PATCH /v1/views/v with {"on_schema_change": "evolve"})'
    """
    if not exc.remedies:
        return exc.message
    calls = "; ".join(f"{remedy.value}: {how(remedy, view)}" for remedy in exc.remedies)
    return f"{exc.message} ({calls})"
