"""Errors of the service, each with the HTTP status it answers with (all 4xx)."""

from __future__ import annotations


class ServiceError(Exception):
    status = 400

    def __init__(self, detail):
        super().__init__(str(detail))
        self.detail = detail


class NotFound(ServiceError):
    status = 404


class Conflict(ServiceError):
    status = 409


class Unprocessable(ServiceError):
    status = 422


class DependencyFailed(ServiceError):
    """An agent the request needs could not be reached or refused (the caller can fix the source)."""

    status = 424


class Unauthorized(ServiceError):
    status = 401


class Forbidden(ServiceError):
    """A valid key whose scope or view and source limits do not cover the call."""

    status = 403


class Gone(ServiceError):
    """What was asked for existed but is no longer kept."""

    status = 410
