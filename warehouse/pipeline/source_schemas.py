"""Ask the sources' agents what they expose, for checking a view against it."""

from __future__ import annotations

import ssl
from collections.abc import Iterable

from protocol.schema import SourceSchema
from warehouse.agent_client import DEADLINE_S, READ_TIMEOUT_S, AgentClient, ByteCounter
from warehouse.errors import SchemaUnavailable, WarehouseError


def fetch_schemas(
    agents: Iterable[tuple[str, str, str | None]],
    *,
    verify: ssl.SSLContext | str | bool = True,
    read_timeout_s: float = READ_TIMEOUT_S,
    deadline_s: float = DEADLINE_S,
    counters: list[ByteCounter] | None = None,
) -> dict[str, SourceSchema]:
    """The schema of each source, asked of its agent, one source after the other.

    Args:
        agents: (source name, agent URL, token) per source; taken one at a time, so a lazy
            lookup of the next source happens only once the previous agent has answered.
        verify, read_timeout_s, deadline_s: as for AgentClient.
        counters: if given, each agent call's bytes are appended to it (a sync counts them).

    Raises:
        SchemaUnavailable: an agent could not be reached or refused; the first such source.
    """
    schemas = {}
    for name, url, token in agents:
        try:
            with AgentClient(url, token, verify=verify, read_timeout_s=read_timeout_s, deadline_s=deadline_s) as client:
                if counters is not None:
                    counters.append(client.counter)
                schemas[name] = SourceSchema.from_json(client.schema())
        except WarehouseError as exc:
            raise SchemaUnavailable(name, exc) from None
    return schemas
