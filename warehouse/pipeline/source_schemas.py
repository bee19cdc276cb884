"""Ask the sources' agents what they expose, for checking a view against it."""

from __future__ import annotations

import ssl
from collections.abc import Iterable, Mapping

from deltasieve_protocol.models import ColumnSampleRequest
from deltasieve_protocol.schema import SourceSchema
from warehouse.agent_client import DEADLINE_S, READ_TIMEOUT_S, AgentClient, ByteCounter
from warehouse.errors import AgentRejected, SchemaUnavailable, WarehouseError
from warehouse.viewdef import ViewDefinitionError
from warehouse.viewdef.column_types import AskedType


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


#: Rows of a column's sample read when a view's column_types are checked: enough to meet a
#: second format in a column that has one, few enough that the check costs the agent one
#: short read (the first and the last rows in key order; the answer is a few hundred bytes).
SAMPLE_ROWS = 1000


def check_column_samples(
    asked: Iterable[AskedType],
    agents: Mapping[str, tuple[str, str | None]],
    *,
    verify: ssl.SSLContext | str | bool = True,
    read_timeout_s: float = READ_TIMEOUT_S,
    deadline_s: float = DEADLINE_S,
    rows: int = SAMPLE_ROWS,
) -> int:
    """Check that a sample of each asked column reads as the asked type; the bytes exchanged.

    Args:
        asked: the view's resolved column_types.
        agents: source name -> (agent URL, token).

    Raises:
        ViewDefinitionError: a sampled value does not read, quoted with its row's key.
        SchemaUnavailable: an agent could not be reached or refused (an agent that predates
            column_types answers 404).
    """
    exchanged = 0
    for a in asked:
        url, token = agents[a.source]
        request = ColumnSampleRequest(
            table=a.table, column=a.column, read_from=str(a.declared), type=str(a.asked), rows=rows
        )
        try:
            with AgentClient(url, token, verify=verify, read_timeout_s=read_timeout_s, deadline_s=deadline_s) as client:
                answer = client.column_sample(request)
                exchanged += client.counter.sent + client.counter.received
        except AgentRejected as exc:
            hint = " (an agent older than column_types answers 404: upgrade it)" if exc.status == 404 else ""
            raise SchemaUnavailable(a.source, AgentRejected(exc.message + hint, exc.status)) from None
        except WarehouseError as exc:
            raise SchemaUnavailable(a.source, exc) from None
        if answer.bad is not None:
            key = ", ".join(f"{k}={v}" for k, v in answer.bad.key.items())
            raise ViewDefinitionError(
                f"column_types: {a.given!r} asks to read {a.source}.{a.table}.{a.column} ({a.declared}) as {a.asked}, "
                f"but in the row with key {key}, {answer.bad.reason} "
                f"(checked {answer.rows_read} rows, the first and the last in key order)"
            )
    return exchanged
