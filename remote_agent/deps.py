"""Dependencies of the agent's routes, declared once."""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from typing import Annotated, TypeVar

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ValidationError

from deltasieve_protocol import frames
from deltasieve_protocol.models import (
    PROTOCOL_VERSION,
    SUPPORTED_PROTOCOLS,
    ChangeTokenControl,
    ExtractControl,
    FetchControl,
    RangesControl,
    SketchCellsControl,
    SketchControl,
    SnapshotDiffControl,
)
from deltasieve_protocol.siterefs import SiteRefs
from remote_agent.errors import BadRequest, UnknownSite
from remote_agent.state import AgentState


class Unauthorized(Exception):
    """No bearer token, or a wrong one (the app answers 401 with WWW-Authenticate)."""


class TooLarge(Exception):
    """The request body exceeds the agent's limit (the app answers 413)."""

    def __init__(self, limit: int):
        self.limit = limit


def get_state(request: Request) -> AgentState:
    return request.app.state.agent


StateDep = Annotated[AgentState, Depends(get_state)]

#: Only documents the scheme in OpenAPI: authorize() parses and checks the header itself.
_bearer = HTTPBearer(
    auto_error=False, description="the agent's token (--token); needed on every call but /health when one is set"
)


def authorize(
    request: Request, state: StateDep, _: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> None:
    """With a token configured, every call but /health needs `Authorization: Bearer TOKEN`."""
    token = state.settings.token
    if token is None:
        return
    scheme, _space, given = request.headers.get("authorization", "").partition(" ")
    # compare_digest: the time taken does not reveal how much of the token matched.
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.encode(), token.get_secret_value().encode()):
        raise Unauthorized()


Authorized = Annotated[None, Depends(authorize)]


async def read_frames(request: Request, state: StateDep) -> list[frames.Frame]:
    """The request's frames, the body read up to AGENT_MAX_BODY_BYTES; the first one is the control frame."""
    limit = state.settings.max_body_bytes
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise TooLarge(limit)
    body = bytearray()
    async for chunk in request.stream():
        body.extend(chunk)
        if len(body) > limit:
            raise TooLarge(limit)
    try:
        parsed = list(frames.read_frames([body]))  # payloads copied out of the body once
    except frames.FrameError as exc:
        raise BadRequest(f"malformed body: {exc}") from None
    if not parsed or parsed[0].kind != frames.CONTROL:
        raise BadRequest(f"body must start with a JSON control frame ({frames.MEDIA_TYPE})")
    return parsed


Frames = Annotated[list[frames.Frame], Depends(read_frames)]

Control = TypeVar("Control", bound=BaseModel)


class _Versioned(BaseModel):
    """Only the protocol version of a control message, read before the rest."""

    protocol: int = PROTOCOL_VERSION


def version_mismatch(version: int) -> str | None:
    """Why a request of protocol `version` is refused, or None when this agent speaks it.

    >>> version_mismatch(PROTOCOL_VERSION) is None
    True
    >>> version_mismatch(3) is None  # a warehouse of version 3 gets version 3's answers
    True
    >>> version_mismatch(PROTOCOL_VERSION + 1)  # doctest: +ELLIPSIS
    'this agent speaks deltasieve protocol version 4 (and 3); the request is version 5: upgrade the older ...'
    """
    if version in SUPPORTED_PROTOCOLS:
        return None
    older = ", ".join(str(v) for v in sorted(SUPPORTED_PROTOCOLS - {PROTOCOL_VERSION}, reverse=True))
    return (
        f"this agent speaks deltasieve protocol version {PROTOCOL_VERSION} (and {older}); "
        f"the request is version {version}: "
        "upgrade the older of the agent and the warehouse so both speak the same version"
    )


def parse_control(model: type[Control], frame: frames.Frame, refs: SiteRefs | None = None) -> Control:
    """The control message of a request, refused (400) if it is of another protocol version.

    The version is checked first, so that a message of another version is not reported as
    merely malformed. With `refs`, a site named by reference (`site_ref`) is read as the
    site it names (409 unknown_site when not held), and a site sent in full is remembered.
    """
    try:
        version = _Versioned.model_validate_json(frame.payload).protocol
    except ValidationError:
        version = PROTOCOL_VERSION  # not even that reads: the whole model says what is wrong
    mismatch = version_mismatch(version)
    if mismatch:
        raise BadRequest(mismatch)
    try:
        message = frame.json()
    except frames.FrameError as exc:
        raise BadRequest(f"bad control message: {exc}") from None
    if refs is not None and "site" not in message and isinstance(message.get("site_ref"), str):
        site = refs.resolve(message["site_ref"])
        if site is None:
            raise UnknownSite(
                f"this agent holds no site query under reference {message['site_ref']!r}: send it in full"
            )
        message = {**message, "site": site}
    try:
        control = model.model_validate(message)
    except ValidationError as exc:
        raise BadRequest(f"bad control message: {exc.errors(include_url=False)}") from None
    if refs is not None and "site_ref" not in message and isinstance(message.get("site"), dict):
        refs.remember(message["site"])
    return control


def _control(model: type[Control]) -> Callable[[list[frames.Frame], AgentState], Awaitable[Control]]:
    """The dependency that parses a request's control frame as `model`."""

    async def control(parsed: Frames, state: StateDep) -> Control:
        return parse_control(model, parsed[0], state.site_refs)

    return control


ExtractRequest = Annotated[ExtractControl, Depends(_control(ExtractControl))]
ChangeTokenRequest = Annotated[ChangeTokenControl, Depends(_control(ChangeTokenControl))]
RangesRequest = Annotated[RangesControl, Depends(_control(RangesControl))]
FetchRequest = Annotated[FetchControl, Depends(_control(FetchControl))]
SketchRequest = Annotated[SketchControl, Depends(_control(SketchControl))]
SketchCellsRequest = Annotated[SketchCellsControl, Depends(_control(SketchCellsControl))]
SnapshotDiffRequest = Annotated[SnapshotDiffControl, Depends(_control(SnapshotDiffControl))]
