"""An Iceberg REST catalog on the loopback for the tests: the REST protocol's namespace and
table routes over pyiceberg's own SQL catalog (a SQLite file), served by uvicorn in a thread.

No REST catalog server installs from the package index; this one speaks the protocol as
pyiceberg's REST client does (its request and answer models are pyiceberg's), and keeps the
tables in the SQL catalog, whose commits check the requirements a REST commit carries. The
data and metadata files are on local disk, where the client writes and reads them itself.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import uvicorn
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from pyiceberg.catalog.rest import CreateTableRequest, TableResponse
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.table import CommitTableRequest

#: The protocol's error answer for each of the SQL catalog's refusals.
REFUSALS = {
    NoSuchTableError: (404, "NoSuchTableException"),
    NoSuchNamespaceError: (404, "NoSuchNamespaceException"),
    TableAlreadyExistsError: (409, "AlreadyExistsException"),
    NamespaceAlreadyExistsError: (409, "AlreadyExistsException"),
    CommitFailedException: (409, "CommitFailedException"),
}


@dataclass
class _Named:
    """What SqlCatalog.commit_table reads of the table it is given: its identifier."""

    identifier: tuple[str, ...]

    def name(self) -> tuple[str, ...]:
        return self.identifier


def _namespace(path: str) -> tuple[str, ...]:
    return tuple(path.split("\x1f"))


def _json(model) -> Response:
    return Response(model.model_dump_json(), media_type="application/json")


def rest_app(catalog: SqlCatalog) -> FastAPI:
    """The catalog's routes under /v1 (no prefix, no authentication)."""
    app = FastAPI()

    async def refused(request: Request, exc: Exception) -> JSONResponse:
        code, kind = REFUSALS[type(exc)]
        return JSONResponse({"error": {"message": str(exc), "type": kind, "code": code}}, status_code=code)

    for refusal in REFUSALS:
        app.add_exception_handler(refusal, refused)

    @app.get("/v1/config")
    def config() -> dict:
        return {"defaults": {}, "overrides": {}}

    @app.get("/v1/namespaces")
    def namespaces() -> dict:
        return {"namespaces": [list(n) for n in catalog.list_namespaces()]}

    @app.post("/v1/namespaces")
    async def create_namespace(request: Request) -> dict:
        body = await request.json()
        catalog.create_namespace(tuple(body["namespace"]), body.get("properties") or {})
        return {"namespace": body["namespace"], "properties": body.get("properties") or {}}

    @app.get("/v1/namespaces/{namespace}")
    def namespace(namespace: str) -> dict:
        return {"namespace": list(_namespace(namespace)), "properties": catalog.load_namespace_properties(namespace)}

    @app.head("/v1/namespaces/{namespace}")
    def namespace_exists(namespace: str) -> Response:
        catalog.load_namespace_properties(_namespace(namespace))
        return Response(status_code=204)

    @app.get("/v1/namespaces/{namespace}/tables")
    def tables(namespace: str) -> dict:
        found = catalog.list_tables(_namespace(namespace))
        return {"identifiers": [{"namespace": list(t[:-1]), "name": t[-1]} for t in found]}

    @app.post("/v1/namespaces/{namespace}/tables")
    async def create_table(namespace: str, request: Request) -> Response:
        body = {"location": None, "partition-spec": None, "write-order": None, **(await request.json())}
        asked = CreateTableRequest.model_validate(body)  # the client leaves out what it does not set
        identifier = (*_namespace(namespace), asked.name)
        extra = {"partition_spec": asked.partition_spec} if asked.partition_spec else {}
        if asked.write_order:
            extra["sort_order"] = asked.write_order
        if asked.stage_create:  # made by the commit that follows (its requirement: the table is new)
            if catalog.table_exists(identifier):
                raise TableAlreadyExistsError(f"table {identifier} exists")
            staged = catalog._create_staged_table(
                identifier, asked.table_schema, asked.location, properties=asked.properties, **extra
            )
            return _json(TableResponse(metadata=staged.metadata, **{"metadata-location": staged.metadata_location}))
        table = catalog.create_table(
            identifier, asked.table_schema, asked.location, properties=asked.properties, **extra
        )
        return _json(TableResponse(metadata=table.metadata, **{"metadata-location": table.metadata_location}))

    @app.get("/v1/namespaces/{namespace}/tables/{table}")
    def load_table(namespace: str, table: str) -> Response:
        loaded = catalog.load_table((*_namespace(namespace), table))
        return _json(TableResponse(metadata=loaded.metadata, **{"metadata-location": loaded.metadata_location}))

    @app.head("/v1/namespaces/{namespace}/tables/{table}")
    def table_exists(namespace: str, table: str) -> Response:
        return Response(status_code=204 if catalog.table_exists((*_namespace(namespace), table)) else 404)

    @app.post("/v1/namespaces/{namespace}/tables/{table}")
    async def commit(namespace: str, table: str, request: Request) -> Response:
        asked = CommitTableRequest.model_validate_json(await request.body())
        named = _Named((*_namespace(namespace), table))
        return _json(catalog.commit_table(named, asked.requirements, asked.updates))  # type: ignore[arg-type]

    @app.delete("/v1/namespaces/{namespace}/tables/{table}")
    def drop_table(namespace: str, table: str) -> Response:
        catalog.drop_table((*_namespace(namespace), table))
        return Response(status_code=204)

    return app


@dataclass
class RestCatalog:
    """A running REST catalog: its `uri` for pyiceberg's `{"type": "rest", "uri": ...}`."""

    uri: str
    server: uvicorn.Server
    thread: threading.Thread

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def start_rest_catalog(folder: Path) -> RestCatalog:
    """A REST catalog whose tables live under `folder` (its SQLite file and the warehouse)."""
    folder.mkdir(parents=True, exist_ok=True)
    catalog = SqlCatalog(
        "rest-backing", uri=f"sqlite:///{folder / 'catalog.db'}", warehouse=(folder / "warehouse").as_uri()
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(rest_app(catalog), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="iceberg-rest", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the Iceberg REST catalog did not start")
        time.sleep(0.05)
    return RestCatalog(f"http://127.0.0.1:{port}", server, thread)
