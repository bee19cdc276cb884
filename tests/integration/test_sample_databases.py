"""A realistic database per server engine, mirrored in one call and kept exact over a day of business.

The shop of `workloads/sample_shop.py` (shaped like the sample databases people try a tool
on: customers, staff, products, orders and their lines, payments partitioned by month, a
salary history) on PostgreSQL and on MariaDB, behind an agent started without `--allow`.
One `POST /v1/sources/{name}/mirror` with `{}` creates a view of every table (PostgreSQL's
`hr` schema included, as `<source>_hr_<table>`) and skips the partitions and the source's
views with their reason. Every view is synced (the load), the shop does a day of business
(inserts, updates of every column type, deletes, payments moved across month bounds), every
view is synced, and the same again: after each sync every view equals its table as the
oracle reads it through the owner's connection, its delta holds only real changes (an
update is one `update` line), and its Delta Lake table, read with deltalake, equals its rows.

The oracle writes each value as the service's JSON should, computed its own way: integers
and floats as numbers, exact decimals as strings, dates and timestamps in ISO 8601 (an
instant in UTC), bytes in base64; PostgreSQL's `numeric` without precision, enums, json,
jsonb, uuid, interval and citext as PostgreSQL prints them, arrays as `array_to_json`
prints them, composites as `to_json` prints them, `inet` as PostgreSQL's output (no `/32`);
MariaDB's spatial values as EWKB (plain WKB when the SRID is 0).
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import random
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal

import psycopg
import pytest
from deltalake import DeltaTable

from tests.support.oracle import check_sync, keyed
from workloads.harness import Api, start_agent
from workloads.published import view_rows
from workloads.sample_shop import (
    HR_SCHEMA,
    create_mariadb_shop,
    create_postgres_shop,
    mariadb_day_of_business,
    postgres_day_of_business,
    postgres_partitions,
)

pytestmark = pytest.mark.integration

SEED = 47
#: Syncs of each view: the load, then one after each day of business (two days: a
#: composite key's order must hold over several rounds, not only at the load).
DAYS = 2
#: Seconds a view's Delta table is given to catch up after a sync.
CATCH_UP_S = 90
#: The tables of the PostgreSQL shop and their keys, as the mirror must give them (the
#: primary key's order, not the columns').
POSTGRES_KEYS = {
    "region": ["region_code"],
    "customer": ["customer_id"],
    "employee": ["employee_id"],
    "product": ["product_id"],
    "sales_order": ["order_id"],
    "order_line": ["order_id", "product_id", "line_no"],
    "payment": ["payment_id", "payment_date"],
    f"{HR_SCHEMA}.salary_history": ["employee_id", "from_date"],
}
POSTGRES_VIEWS = {"customer_order_totals": "view", "monthly_sales": "materialized view"}
MARIADB_KEYS = {
    "region": ["region_code"],
    "customer": ["customer_id"],
    "employee": ["employee_id"],
    "product": ["product_id"],
    "sales_order": ["order_id"],
    "order_line": ["order_id", "product_id", "line_no"],
    "payment": ["payment_id", "payment_date"],
    "store": ["store_id"],
}
MARIADB_VIEWS = {"customer_order_totals": "view"}

Truth = Callable[[str, list[str]], dict]


# -- the values as the service's JSON writes them -------------------------------------------


def as_json(value: object) -> object:
    """A value read by a driver (psycopg, MySQLdb, deltalake) as the service's JSON writes it."""
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).isoformat() if value.tzinfo else value.isoformat()
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(
        value, ipaddress.IPv4Address | ipaddress.IPv6Address | ipaddress.IPv4Interface | ipaddress.IPv6Interface
    ):
        return str(value)  # as PostgreSQL prints inet: an address alone (psycopg: an Address), a network with its mask
    raise AssertionError(f"the oracle has no JSON form for {type(value).__name__} {value!r}")


def ewkb(wkb: bytes, srid: int) -> bytes:
    """The EWKB of a geometry: its WKB when the SRID is 0, else the type word flagged with
    0x20000000 and followed by the SRID (4 bytes, little-endian)."""
    if srid == 0:
        return wkb
    order = "little" if wkb[0] == 1 else "big"
    kind = int.from_bytes(wkb[1:5], order) | 0x20000000
    return wkb[:1] + kind.to_bytes(4, order) + srid.to_bytes(4, "little") + wkb[5:]


# -- the oracles -----------------------------------------------------------------------------

#: Types read through PostgreSQL's own text output (the cast to text is that output).
_PG_AS_TEXT = {"json", "jsonb", "uuid", "interval", "citext"}

_PG_COLUMNS = """
SELECT a.attname,
       COALESCE(base.typtype, t.typtype),
       COALESCE(base.typcategory, t.typcategory),
       CASE WHEN t.typtype = 'd' THEN format_type(t.typbasetype, t.typtypmod)
            ELSE format_type(a.atttypid, a.atttypmod) END
FROM pg_attribute a
JOIN pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_type base ON t.typtype = 'd' AND base.oid = t.typbasetype
WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""


def postgres_expression(column: str, typtype: str, category: str, declared: str) -> str:
    """The SQL the oracle reads `column` with: the value itself, or the text the view holds."""
    col = '"' + column.replace('"', '""') + '"'
    if category == "A":
        return f"array_to_json({col})::text"
    if typtype == "c":
        return f"to_json({col})::text"
    if typtype == "e" or declared == "numeric" or declared in _PG_AS_TEXT:
        return f"{col}::text"
    return col


def postgres_truth(conn: psycopg.Connection) -> Truth:
    def truth(table: str, key: list[str]) -> dict:
        columns = conn.execute(_PG_COLUMNS, (table,)).fetchall()
        select = ", ".join(postgres_expression(*c) for c in columns)
        names = [c[0] for c in columns]
        rows = conn.execute(f"SELECT {select} FROM {table}").fetchall()
        return keyed(({n: as_json(v) for n, v in zip(names, row)} for row in rows), key)

    return truth


_MDB_SPATIAL = {"point", "geometry", "linestring", "polygon", "multipoint", "multilinestring", "multipolygon"}


def mariadb_truth(conn) -> Truth:
    def truth(table: str, key: list[str]) -> dict:
        cur = conn.cursor()
        cur.execute(
            "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE FROM information_schema.COLUMNS"
            " WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
            (table,),
        )
        columns = cur.fetchall()
        select = []
        for name, data_type, _ in columns:
            if data_type in _MDB_SPATIAL:
                select += [f"ST_AsWKB(`{name}`)", f"ST_SRID(`{name}`)"]
            else:
                select.append(f"`{name}`")
        cur.execute(f"SELECT {', '.join(select)} FROM `{table}`")
        out = []
        for raw in cur.fetchall():
            values, row = iter(raw), {}
            for name, data_type, column_type in columns:
                value = next(values)
                if data_type in _MDB_SPATIAL:
                    srid = next(values)
                    value = None if value is None else ewkb(bytes(value), srid)
                elif data_type == "timestamp" and value is not None:
                    value = value.replace(tzinfo=dt.UTC)  # the owner's session is in UTC
                elif data_type == "bit" and value is not None:
                    number = int.from_bytes(value, "big")
                    value = bool(number) if column_type == "bit(1)" else number
                row[name] = as_json(value)
            out.append(row)
        cur.close()
        return keyed(out, key)

    return truth


# -- the service's side ----------------------------------------------------------------------


def mirror(api: Api, source: str) -> dict:
    r = api.http.post(f"/v1/sources/{source}/mirror", json={})
    assert r.status_code == 200, r.text
    return r.json()


def delta_rows(api: Api, view: str, sync_id: str) -> list[dict]:
    """The rows of `view`'s Delta table (read with deltalake) once it holds `sync_id`."""
    deadline = time.monotonic() + CATCH_UP_S
    while True:
        (destination,) = api.http.get(f"/v1/views/{view}").json()["destinations"]
        if destination["applied_sync"] == sync_id and destination["lag_syncs"] == 0:
            assert destination["error"] is None, destination
            break
        assert time.monotonic() < deadline, f"the Delta table of {view} did not catch up to {sync_id}: {destination}"
        time.sleep(0.2)
    table = DeltaTable(destination["uri"])
    return [{c: as_json(v) for c, v in row.items()} for row in view_rows(table).to_pylist()]


def check_mirror(done: dict, source: str, keys: dict, views: dict, partitions: list[str]) -> dict:
    """The mirror's answer: a view of each table with its key, the partitions and the views
    skipped with their reason. Returns table -> view."""
    created = {m["table"]: m for m in done["created"]}
    skipped = {s["table"]: s["reason"] for s in done["skipped"]}
    assert done["existing"] == [], done
    assert sorted(created) == sorted(keys), f"created {sorted(created)}, skipped {skipped}"
    for table, m in created.items():
        assert m["view"] == f"{source}_{table.replace('.', '_')}", m
        assert m["key"] == keys[table], f"{table}: key {m['key']} instead of {keys[table]}"
    assert sorted(skipped) == sorted([*partitions, *views]), f"skipped {skipped}, created {sorted(created)}"
    for partition in partitions:
        assert "partition of payment" in skipped[partition], (partition, skipped[partition])
    for view, kind in views.items():
        assert kind in skipped[view], (view, skipped[view])
    return {table: m["view"] for table, m in created.items()}


def business_rounds(api: Api, views: dict, keys: dict, truth: Truth, day: Callable[[random.Random], None]) -> dict:
    """Load every view, then a day of business and a sync of every view, DAYS times: after
    each sync the view is its table, its delta exact, its Delta table its rows. Returns
    the metrics of the last day's syncs by table."""
    rng = random.Random(SEED + 1)
    before: dict[str, dict] = {table: {} for table in views}
    metrics: dict[str, dict] = {}
    for round_ in range(DAYS + 1):
        if round_:
            day(rng)
        truths = {table: truth(table, keys[table]) for table in views}
        with ThreadPoolExecutor(2) as pool:  # the service runs two syncs at once by default
            syncs = {table: pool.submit(api.sync, view) for table, view in views.items()}
        for table, view in views.items():
            sync = syncs[table].result()
            assert sync["status"] == "succeeded", f"round {round_}, {view}: {sync['error']}"
            check_sync(api, view, keys[table], before[table], truths[table], sync)
            m = sync["metrics"]
            if round_:
                assert m["rows_inserted"] + m["rows_updated"] + m["rows_deleted"] > 0, (
                    f"{view}: the day changed nothing"
                )
            published = keyed(delta_rows(api, view, sync["id"]), keys[table])
            assert published == truths[table], f"round {round_}: the Delta table of {view} differs from the view"
            metrics[table] = m
            before[table] = truths[table]
    return metrics


def check_days(metrics: dict) -> None:
    """The day of business did what it says: updates of every table it updates, payments
    moved (a delete and an insert each), lines and payments deleted."""
    for table in ("customer", "product", "sales_order", "order_line", "employee", "region"):
        assert metrics[table]["rows_updated"] > 0, (table, metrics[table])
    assert metrics["payment"]["rows_inserted"] > 0 and metrics["payment"]["rows_deleted"] > 0, metrics["payment"]
    assert metrics["order_line"]["rows_deleted"] > 0, metrics["order_line"]


def test_postgres_shop(api, service, logs_dir, postgres):
    started = time.monotonic()
    owner = psycopg.connect(postgres.owner_url, autocommit=True)
    agent = None
    try:
        create_postgres_shop(owner, random.Random(SEED))
        agent = start_agent(postgres.reader_url, logs_dir)
        api.add_source("shop_pg", agent.url)
        views = check_mirror(mirror(api, "shop_pg"), "shop_pg", POSTGRES_KEYS, POSTGRES_VIEWS, postgres_partitions())
        metrics = business_rounds(
            api,
            views,
            POSTGRES_KEYS,
            postgres_truth(owner),
            lambda rng: postgres_day_of_business(owner, rng),
        )
        check_days(metrics)
        assert metrics[f"{HR_SCHEMA}.salary_history"]["rows_updated"] > 0
    finally:
        owner.close()
        if agent is not None:
            agent.stop()
    print(f"PostgreSQL shop: {time.monotonic() - started:.1f} s")


def test_mariadb_shop(api, service, logs_dir, mariadb, mariadb_server):
    started = time.monotonic()
    owner = mariadb.owner()
    owner.cursor().execute("SET SESSION time_zone = '+00:00'")
    agent = None
    try:
        create_mariadb_shop(owner, random.Random(SEED))
        # a login that reads the shop's database only: the session's reader may read every test's
        agent = start_agent(mariadb_server.sole_reader(mariadb.name), logs_dir)
        api.add_source("shop_mdb", agent.url)
        views = check_mirror(mirror(api, "shop_mdb"), "shop_mdb", MARIADB_KEYS, MARIADB_VIEWS, [])
        metrics = business_rounds(
            api,
            views,
            MARIADB_KEYS,
            mariadb_truth(owner),
            lambda rng: mariadb_day_of_business(owner, rng),
        )
        check_days(metrics)
        assert metrics["store"]["rows_updated"] > 0
    finally:
        owner.close()
        if agent is not None:
            agent.stop()
    print(f"MariaDB shop: {time.monotonic() - started:.1f} s")
