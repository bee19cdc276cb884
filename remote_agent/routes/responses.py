"""What the routes answer besides their result, for the OpenAPI document."""

from __future__ import annotations

from deltasieve_protocol import frames
from deltasieve_protocol.models import ErrorOut
from deltasieve_protocol.schema import FINGERPRINT_HEADER

#: Seconds a client is told to wait after a 429.
RETRY_AFTER_S = 5

#: What each error status of the API means, for the OpenAPI document.
ERROR_STATUSES = {
    400: "malformed request: bad frames, control message, key or unit set; or a control message of another protocol version",
    401: "missing or wrong bearer token",
    403: "the site query names a table or column this agent does not expose, or the database refused the read for want of a privilege (code source_error)",
    409: "the source's data breaks an assumption (NULL or duplicate key), or its schema changed since the view was registered (code schema_changed, the changed columns in changes)",
    410: "the sketch session named is no longer held by the agent (expired or dropped): start the exchange again",
    413: "the request body exceeds the agent's limit (AGENT_MAX_BODY_BYTES)",
    422: "the site query is not a SELECT-project-join the agent will run",
    424: "the database refused a statement of the read (code source_error: a value or type it cannot cast, SQL it "
    "does not take; a privilege it lacks answers 403 and an unreadable value 409 with the same code); table, column "
    "and source_message say where and what; a retry meets the same refusal",
    429: "the agent already runs its maximum of extractions; retry after Retry-After seconds",
    503: "the legacy database cannot be reached or timed out; retry later",
}
#: Error statuses of the extraction endpoints (those that read a body and a site query).
EXTRACTION_ERRORS = (400, 401, 403, 409, 413, 422, 424, 429, 503)
#: Request body of the extraction endpoints, for the OpenAPI document.
FRAMES_BODY = {
    "requestBody": {
        "required": True,
        "description": "binary frames: a JSON control frame first, then Arrow data frames (see deltasieve_protocol/frames.py)",
        "content": {frames.MEDIA_TYPE: {"schema": {"type": "string", "format": "binary"}}},
    }
}
FRAMES_ANSWER = {
    "description": "binary frames, ending with a summary frame, or an error frame if the extraction failed midway",
    "content": {frames.MEDIA_TYPE: {"schema": {"type": "string", "format": "binary"}}},
    "headers": {
        FINGERPRINT_HEADER: {
            "description": "a fingerprint of the columns (names, types, nullability) of the tables the site query reads "
            "(deltasieve_protocol/schema.py columns_fingerprint): when it changes, GET /v1/schema?table=... says how",
            "schema": {"type": "string"},
        }
    },
}


def error_responses(*statuses: int) -> dict:
    """OpenAPI `responses` for the error statuses an endpoint may answer with.

    >>> error_responses(401)[401]["description"]
    'missing or wrong bearer token'
    """
    out: dict = {}
    for status in statuses:
        out[status] = {"model": ErrorOut, "description": ERROR_STATUSES[status]}
        if status == 429:
            out[status]["headers"] = {"Retry-After": {"description": "seconds to wait", "schema": {"type": "integer"}}}
    return out
