"""The codes an agent's error answers carry (`ErrorOut.code`, and the `code` of an error frame).

Every error the agent answers with names one of these, so that the warehouse acts on the
code and never on the words of the message, which are for people and may change. A code
says what kind of failure it is; the HTTP status says how the request fared, and several
codes share one status (a 409 is a schema change, a duplicate key or an unknown site).

>>> sorted(STATUS)[:3]
['bad_request', 'body_too_large', 'busy']
>>> STATUS[SCHEMA_CHANGED], STATUS[UNKNOWN_SITE]
(409, 409)
"""

from __future__ import annotations

#: The request is malformed, or asks for something the agent does not allow.
BAD_REQUEST = "bad_request"
#: The request's body does not validate against the protocol's models.
INVALID_REQUEST = "invalid_request"
#: No token, or not the agent's.
UNAUTHORIZED = "unauthorized"
#: The site query touches a table or column the agent does not expose (or blocks).
FORBIDDEN = "forbidden"
#: The request's body is larger than the agent takes.
BODY_TOO_LARGE = "body_too_large"
#: The site query is not a plain SELECT-project-join the agent runs.
UNSUPPORTED_QUERY = "unsupported_query"
#: A view hashes a column and the agent has no AGENT_HASH_KEY to hash with.
HASH_KEY_MISSING = "hash_key_missing"
#: The source's data breaks an assumption of the view (a duplicate or NULL key, an unreadable value).
SOURCE_DATA = "source_data"
#: Columns of the site query are gone or of other types than when the view was registered (`changes`).
SCHEMA_CHANGED = "schema_changed"
#: The database refused a statement of the read (`table`, `column`, `source_message`).
SOURCE_ERROR = "source_error"
#: The database could not be reached or timed out: worth a retry.
SOURCE_UNAVAILABLE = "source_unavailable"
#: The agent's reader process ended before its scan did: worth a retry.
READER_LOST = "reader_lost"
#: A control message names its site by a reference the agent does not hold: send it in full.
UNKNOWN_SITE = "unknown_site"
#: A sketch session the agent no longer holds.
SESSION_GONE = "session_gone"
#: The agent runs as many extractions as it takes: retry after `Retry-After`.
BUSY = "busy"
#: A failure the agent did not foresee (a bug): its type and message are in `detail`.
INTERNAL = "internal"

#: The HTTP status each code is answered with.
STATUS: dict[str, int] = {
    BAD_REQUEST: 400,
    INVALID_REQUEST: 422,
    UNAUTHORIZED: 401,
    FORBIDDEN: 403,
    BODY_TOO_LARGE: 413,
    UNSUPPORTED_QUERY: 422,
    HASH_KEY_MISSING: 422,
    SOURCE_DATA: 409,
    SCHEMA_CHANGED: 409,
    SOURCE_ERROR: 424,
    SOURCE_UNAVAILABLE: 503,
    READER_LOST: 503,
    UNKNOWN_SITE: 409,
    SESSION_GONE: 410,
    BUSY: 429,
    INTERNAL: 500,
}

#: Codes of a site query the agent accepted when the view was registered and refuses now:
#: the source's schema (or the agent's --allow list) changed under the view.
SCHEMA_DRIFT = frozenset({SCHEMA_CHANGED, FORBIDDEN, UNSUPPORTED_QUERY})
