"""OpenLineage run events of a sync: which source tables it read, which tables it wrote.

Each sync is one run of the job named after its view (namespace SERVICE_OPENLINEAGE_NAMESPACE),
its run id a UUID derived from the sync id (`run_id`), so that every event of one sync,
whoever sends it, names the same run:

- START when the sync begins running;
- COMPLETE when it committed: inputs are the view's source tables, outputs each destination
  table of the view with the view's columns (schema facet) and the rows the sync changed
  (output statistics facet);
- FAIL when it failed, with its error (error message facet);
- OTHER, one per destination, when publishing applied the sync to that destination (or
  rebuilt the destination up to it): the destination's own version, where it has one (a
  Delta table version), in the dataset version facet.

COMPLETE does not wait for publishing: a destination applies a sync after the view's
commit and may lag behind for as long as it is down (service/publishing.py). So COMPLETE
says what the sync wrote and where it goes; the OTHER event that follows for each
destination says which of its versions holds it (the OpenLineage spec allows OTHER
events after a run's end for metadata learnt later). A sync with no change is never applied
to a destination: it has no OTHER event.

Names follow OpenLineage's dataset naming: a PostgreSQL table is namespace
`postgres://HOST:PORT`, name `DATABASE.SCHEMA.TABLE`; a Delta table on local disk is
namespace `file`, name its absolute path; on object storage, `SCHEME://BUCKET` and the path
in it. OpenLineage's naming has no entry of its own for an Iceberg table: it is named, as
OpenLineage's Spark integration names one, by where its files are (its location, as a Delta
table's path is) with a symlinks facet naming it in its catalog (the catalog's URI, and
NAMESPACE.TABLE); in a REST catalog, whose server chooses the location, by the catalog alone.
Its version, once a sync is applied, is the id of the snapshot that holds the sync. A source table is named by the agent that reads it (its URL, the namespace) and the
table as the view names it. No name ever carries a secret: user names, passwords and query
strings of URLs are left out.

Everything here is pure: the events are the OpenLineage client's own models
(`openlineage.client.event_v2`), built from values; service/lineage_sender.py gathers the
values from the catalog and sends the events.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from urllib.parse import urlsplit, urlunsplit

from openlineage.client import __version__ as CLIENT_VERSION
from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState
from openlineage.client.facet_v2 import (
    dataset_version_dataset,
    datasource_dataset,
    error_message_run,
    job_type_job,
    output_statistics_output_dataset,
    processing_engine_run,
    schema_dataset,
    sql_job,
    symlinks_dataset,
)

#: The version the events say produced them (the package's, as the app's OpenAPI document says it).
SERVICE_VERSION = "0.1.0"
#: What produced the events (a URI, as the spec asks): this service, by name and version.
PRODUCER = f"urn:deltasieve:service:{SERVICE_VERSION}"
#: The namespace run ids are derived in (uuid5): a fixed UUID, so that a sync's run id never changes.
RUN_NAMESPACE = uuid.UUID("5d1b7a3e-6c8f-4f0e-9a51-2f6e3c0d8b47")
#: PostgreSQL's port when a URL names none (OpenLineage's namespace always carries one).
POSTGRES_PORT = 5432


def run_id(sync_id: str) -> str:
    """The OpenLineage run id of a sync: a UUID derived from its id, the same in every event.

    >>> run_id("s-1") == run_id("s-1"), run_id("s-1") == run_id("s-2")
    (True, False)
    >>> uuid.UUID(run_id("s-1")).version
    5
    """
    return str(uuid.uuid5(RUN_NAMESPACE, sync_id))


def without_secrets(url: str) -> str:
    """`url` without a password, a user name that comes with one, a query or a fragment.

    A user name alone stays: in an object store URI such as abfss://container@account/...
    it is part of where the data is.

    >>> without_secrets("http://me:pw@agent:8765/?token=x")
    'http://agent:8765/'
    >>> without_secrets("abfss://box@acct.dfs.core.windows.net/t")
    'abfss://box@acct.dfs.core.windows.net/t'
    """
    parts = urlsplit(url)
    netloc = parts.netloc
    if parts.password is not None:
        netloc = netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


@dataclass(frozen=True)
class Place:
    """A dataset's OpenLineage identity: its namespace (the data source) and its name in it."""

    namespace: str
    name: str
    #: Another name of the same dataset (an Iceberg table's in its catalog): the symlinks facet.
    symlink: Place | None = field(default=None, repr=False)


def source_table(agent_url: str, table: str) -> Place:
    """A table a view reads, as named by the agent that reads it.

    >>> source_table("http://u:pw@legacy:8765/", "sales.orders")
    Place(namespace='http://legacy:8765', name='sales.orders')
    """
    return Place(without_secrets(agent_url).rstrip("/"), table)


def delta_table(uri: str) -> Place:
    """A Delta table's identity from its URI: `file` and the path on local disk, the bucket
    and the path in it on object storage.

    >>> delta_table("/data/tables/orders")
    Place(namespace='file', name='/data/tables/orders')
    >>> delta_table("file:///data/tables/orders")
    Place(namespace='file', name='/data/tables/orders')
    >>> delta_table("s3://lake/tables/orders?x=1")
    Place(namespace='s3://lake', name='tables/orders')
    """
    parts = urlsplit(without_secrets(uri))
    if parts.scheme in ("", "file"):
        return Place("file", str(PurePosixPath(parts.path)))
    return Place(f"{parts.scheme}://{parts.netloc}", parts.path.lstrip("/"))


def postgres_table(url: str, table: str) -> Place:
    """A PostgreSQL table's identity: the server, and the database, schema and table.

    >>> postgres_table("postgresql://me:pw@wh.example:6543/analytics?sslmode=require", "public.orders")
    Place(namespace='postgres://wh.example:6543', name='analytics.public.orders')
    >>> postgres_table("postgresql://wh/analytics", "orders")
    Place(namespace='postgres://wh:5432', name='analytics.public.orders')
    """
    parts = urlsplit(url)
    schema, _, name = table.rpartition(".")
    database = parts.path.lstrip("/")
    return Place(
        f"postgres://{parts.hostname}:{parts.port or POSTGRES_PORT}", f"{database}.{schema or 'public'}.{name}"
    )


def iceberg_table(catalog: dict[str, str], table: str) -> Place:
    """An Iceberg table's identity from its catalog's properties (pyiceberg's, secrets
    resolved: iceberg_catalog.properties) and NAMESPACE.TABLE: where a SQL catalog puts its
    files (WAREHOUSE/NAMESPACE/TABLE, pyiceberg's default location), named in the catalog by
    a symlink; a REST catalog's table by the catalog.

    >>> p = iceberg_table({"type": "sql", "uri": "sqlite:////d/iceberg/catalog.db",
    ...     "warehouse": "file:///d/iceberg/warehouse"}, "wh.people")
    >>> p.namespace, p.name, p.symlink
    ('file', '/d/iceberg/warehouse/wh/people', Place(namespace='sqlite:////d/iceberg/catalog.db', name='wh.people'))
    >>> p = iceberg_table({"type": "sql", "uri": "postgresql+psycopg://me:pw@db:6543/wh",
    ...     "warehouse": "s3://lake/ice/"}, "bi.orders")
    >>> p.namespace, p.name, p.symlink.namespace
    ('s3://lake', 'ice/bi/orders', 'postgresql://db:6543/wh')
    >>> iceberg_table({"type": "rest", "uri": "https://cat.example/api/?token=x", "token": "t"}, "bi.orders")
    Place(namespace='https://cat.example/api', name='bi.orders')
    """
    uri = catalog["uri"]
    if catalog.get("type") == "rest":
        return Place(without_secrets(uri).rstrip("/"), table)
    namespace, _, name = table.partition(".")
    if not uri.startswith("sqlite:"):  # a SQLite URL is a path (no secret); others lose theirs and the driver
        scheme, _, rest = without_secrets(uri).partition("://")
        uri = f"{scheme.split('+')[0]}://{rest}"
    located = delta_table(f"{catalog['warehouse'].rstrip('/')}/{namespace}/{name}")
    return Place(located.namespace, located.name, Place(uri, table))


@dataclass(frozen=True)
class Column:
    """A column of the view as the schema facet shows it: name, type, whether it is in the key."""

    name: str
    type: str
    key: bool = False


@dataclass(frozen=True)
class SyncLineage:
    """What the events of one sync name: the job (its view), the run (the sync), the datasets."""

    namespace: str
    view: str
    sync_id: str
    sql: str
    inputs: list[tuple[str, Place]]  # (source name, table)
    outputs: list[Place]
    columns: list[Column] = field(default_factory=list)


def start(sync: SyncLineage, at: str) -> RunEvent:
    """The START event of a sync that began running at `at` (ISO 8601).

    >>> s = SyncLineage("deltasieve", "orders", "s-1", "SELECT id FROM pg.orders",
    ...     [("pg", Place("http://legacy:8765", "orders"))], [Place("file", "/d/tables/orders")])
    >>> e = start(s, "2026-01-01T00:00:00+00:00")
    >>> e.eventType.value, e.job.name, e.run.runId == run_id("s-1"), [i.name for i in e.inputs]
    ('START', 'orders', True, ['orders'])
    """
    return _event(RunState.START, sync, at, _inputs(sync), [_output(sync, place) for place in sync.outputs])


def complete(sync: SyncLineage, at: str, metrics: dict) -> RunEvent:
    """The COMPLETE event of a sync that committed at `at`, `metrics` its record's: each
    destination's output statistics count the rows it changed.

    >>> s = SyncLineage("deltasieve", "orders", "s-1", "SELECT id FROM pg.orders", [],
    ...     [Place("file", "/d/tables/orders")], [Column("id", "int", key=True)])
    >>> e = complete(s, "2026-01-01T00:00:01+00:00", {"rows_inserted": 3, "rows_updated": 1, "rows_deleted": 0})
    >>> (out,) = e.outputs
    >>> out.outputFacets["outputStatistics"].rowCount, [(f.name, f.type) for f in out.facets["schema"].fields]
    (4, [('id', 'int')])
    """
    changed = sum(int(metrics.get(k) or 0) for k in ("rows_inserted", "rows_updated", "rows_deleted"))
    outputs = [_output(sync, place, rows=changed) for place in sync.outputs]
    return _event(RunState.COMPLETE, sync, at, _inputs(sync), outputs)


def fail(sync: SyncLineage, at: str, error: str, code: str | None) -> RunEvent:
    """The FAIL event of a sync that failed at `at` with `error` (and its code, if it has one).

    >>> s = SyncLineage("deltasieve", "orders", "s-1", "SELECT 1", [], [])
    >>> e = fail(s, "2026-01-01T00:00:01+00:00", "agent down", "agent_unreachable")
    >>> e.eventType.value, e.run.facets["errorMessage"].message
    ('FAIL', 'agent_unreachable: agent down')
    """
    message = f"{code}: {error}" if code else error
    facet = error_message_run.ErrorMessageRunFacet(message=message, programmingLanguage="python", producer=PRODUCER)
    return _event(RunState.FAIL, sync, at, _inputs(sync), [], {"errorMessage": facet})


def published(sync: SyncLineage, at: str, place: Place, version: str | None) -> RunEvent:
    """The OTHER event of a sync's run once a destination applied it: the destination's
    version that holds it, where the destination has versions.

    >>> s = SyncLineage("deltasieve", "orders", "s-1", "SELECT 1", [], [])
    >>> e = published(s, "2026-01-01T00:00:02+00:00", Place("file", "/d/tables/orders"), "7")
    >>> e.eventType.value, e.outputs[0].facets["version"].datasetVersion
    ('OTHER', '7')
    """
    return _event(RunState.OTHER, sync, at, [], [_output(sync, place, version=version)])


def _event(
    state: RunState, sync: SyncLineage, at: str, inputs: list, outputs: list, run_facets: dict | None = None
) -> RunEvent:
    engine = processing_engine_run.ProcessingEngineRunFacet(
        version=SERVICE_VERSION, name="deltasieve", openlineageAdapterVersion=CLIENT_VERSION, producer=PRODUCER
    )
    job_facets = {
        "jobType": job_type_job.JobTypeJobFacet(
            processingType="BATCH", integration="DELTASIEVE", jobType="SYNC", producer=PRODUCER
        ),
        "sql": sql_job.SQLJobFacet(query=sync.sql, producer=PRODUCER),
    }
    return RunEvent(
        eventType=state,
        eventTime=at,
        run=Run(runId=run_id(sync.sync_id), facets={"processing_engine": engine, **(run_facets or {})}),
        job=Job(namespace=sync.namespace, name=sync.view, facets=job_facets),
        inputs=inputs,
        outputs=outputs,
        producer=PRODUCER,
    )


def _inputs(sync: SyncLineage) -> list[InputDataset]:
    return [
        InputDataset(
            namespace=place.namespace,
            name=place.name,
            facets={
                "datasource": datasource_dataset.DatasourceDatasetFacet(
                    name=source, uri=place.namespace, producer=PRODUCER
                )
            },
        )
        for source, place in sync.inputs
    ]


def _output(sync: SyncLineage, place: Place, rows: int | None = None, version: str | None = None) -> OutputDataset:
    facets: dict = {}
    if sync.columns:
        fields = [
            schema_dataset.SchemaDatasetFacetFields(
                name=c.name, type=c.type, description="key column" if c.key else None, ordinal_position=i + 1
            )
            for i, c in enumerate(sync.columns)
        ]
        facets["schema"] = schema_dataset.SchemaDatasetFacet(fields=fields, producer=PRODUCER)
    if place.symlink is not None:
        alias = symlinks_dataset.Identifier(namespace=place.symlink.namespace, name=place.symlink.name, type="TABLE")
        facets["symlinks"] = symlinks_dataset.SymlinksDatasetFacet(identifiers=[alias], producer=PRODUCER)
    if version is not None:
        facets["version"] = dataset_version_dataset.DatasetVersionDatasetFacet(
            datasetVersion=version, producer=PRODUCER
        )
    output_facets: dict = {}
    if rows is not None:
        output_facets["outputStatistics"] = output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(
            rowCount=rows, producer=PRODUCER
        )
    return OutputDataset(namespace=place.namespace, name=place.name, facets=facets, outputFacets=output_facets)
