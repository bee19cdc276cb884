"""A small shop, the kind of database people try a tool on first, for PostgreSQL and MariaDB.

Shaped after the public sample databases (a store's customers, staff, products, orders
and their lines, payments split by month, an HR salary history) but written here, with
seeded data: the same seed builds the same rows. Each engine gets the shape its users
would give it, and every type family it has:

- PostgreSQL: `payment` partitioned by range on its date (a partition per month of 2025,
  key `(payment_id, payment_date)` over columns declared date first); `order_line` keyed
  `(order_id, product_id, line_no)` over columns declared the other way round; integers,
  `numeric(p,s)` and `numeric` without precision (more than ten decimals, NaN), `real`,
  `double precision`, text, `varchar`, `char`, `citext`, `bool`, `date`, `timestamp`,
  `timestamptz`, `interval`, `uuid`, `json`, `jsonb`, `bytea`, an enum, a domain, a
  composite, `inet`, `text[]` and `int[]` with NULL elements; a view and a materialized
  view beside the tables; schema `hr` with the salary history.
- MariaDB (InnoDB): the same shop, `payment` partitioned by RANGE COLUMNS on its date,
  `order_line` keyed in another order than its columns, `ENUM`, `SET`, `DECIMAL(p,s)`,
  `FLOAT`, `DOUBLE`, `BIT(1)`, `BOOLEAN`, `DATE`, `DATETIME(6)`, `TIMESTAMP(6)`, `JSON`,
  `BLOB`, `POINT` (SRID 0) and `GEOMETRY` (SRID 4326), utf8mb4 text with emoji; a view.

`create_*_shop(conn, rng)` builds and fills the schema through the owner's connection
(autocommit); `*_day_of_business(conn, rng)` then inserts, updates every column type,
deletes, and moves payments across month bounds (the partition key changes).
"""

from __future__ import annotations

import datetime as dt
import json
import random
import uuid
from decimal import Decimal
from typing import Any

#: Rows of each table at creation: a few thousand in all keeps a test under a minute an engine.
CUSTOMERS, EMPLOYEES, PRODUCTS, ORDERS, SALARY_ROWS = 120, 16, 60, 300, 90
#: The months `payment` is partitioned into (PostgreSQL: one table each; MariaDB: one partition each).
MONTHS = [dt.date(2025, m, 1) for m in range(1, 13)]
#: Payments are made in the first half of the year, so moves of a month or more stay in range.
FIRST_DAY, LAST_DAY = dt.date(2025, 1, 1), dt.date(2025, 6, 30)
#: The hr schema of PostgreSQL (a second schema the reader may read).
HR_SCHEMA = "hr"

WORDS = ["plain", "Ærø", "日本語", "emoji 🚀✨", "", "quote ' \" \\", "naïve", "Zürich", "tab\there", "ß"]
FIRST_NAMES = ["Ada", "Bjørn", "Chloé", "Dmitri", "Eun-ji", "Farah", "Gustavo", "Hana", "Ivo", "Jürgen", "Kofi", "Lía"]
LAST_NAMES = ["Okafor", "Nguyễn", "Smith", "Østergaard", "Papadopoulos", "García", "Kowalski", "Tanaka", "O'Brien"]
CITIES = ["Oslo", "Łódź", "São Paulo", "東京", "Zürich", "Lagos", "Reykjavík", "Montréal"]
REGIONS = {"NO": "Norway", "PL": "Poland", "BR": "Brazil", "JP": "Japan", "CH": "Switzerland", "NG": "Nigeria"}
STATUSES = ["placed", "packed", "shipped", "delivered", "returned"]
METHODS = ["card", "cash", "transfer", "voucher 🎟"]
TITLES = ["Sales Rep", "Manager", "Stock Keeper", "Buyer", "Support"]
#: Values of `numeric` without precision: wider than 38 digits, more than ten decimals, NaN.
PRECISE = [
    Decimal("12345678901234567890.123456789012345"),
    Decimal("0.000000000001234"),
    Decimal("-98765.4321098765432109"),
    Decimal("NaN"),
    Decimal("3.14159265358979323846264338327950288419716939937510"),
    Decimal("1E+30"),
    Decimal("0"),
]


def _money(rng: random.Random, top: int = 10_000) -> Decimal:
    return Decimal(rng.randrange(0, top * 100)) / 100


def _name(rng: random.Random) -> str:
    return f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"


def _maybe(rng: random.Random, value: Any, null_share: float = 0.15) -> Any:
    return None if rng.random() < null_share else value


def _day(rng: random.Random, first: dt.date = FIRST_DAY, last: dt.date = LAST_DAY) -> dt.date:
    return first + dt.timedelta(days=rng.randrange((last - first).days + 1))


def _moment(rng: random.Random) -> dt.datetime:
    """A wall-clock time of 2025 with microseconds (sometimes none)."""
    day = _day(rng)
    micro = rng.choice([0, rng.randrange(1_000_000)])
    return dt.datetime(day.year, day.month, day.day, rng.randrange(24), rng.randrange(60), rng.randrange(60), micro)


def _instant(rng: random.Random) -> dt.datetime:
    """An instant written in one of several zones (the database keeps the instant)."""
    zone = dt.timezone(dt.timedelta(hours=rng.choice([-5, 0, 1, 9])))
    return _moment(rng).replace(tzinfo=zone)


def _tags(rng: random.Random) -> list[str | None] | None:
    pool = ["vip", "c,d", "late payer", None, "日本", '"quoted"', "NULL"]
    return _maybe(rng, [rng.choice(pool) for _ in range(rng.randrange(0, 4))])


def _lots(rng: random.Random) -> list[int | None] | None:
    return _maybe(rng, [rng.choice([1, 6, 12, 24, None, -3, 2**31 - 1]) for _ in range(rng.randrange(0, 4))])


def _preferences(rng: random.Random) -> dict:
    return {
        "newsletter": rng.random() < 0.5,
        "language": rng.choice(["en", "nb", "ja", "pt-BR"]),
        "sizes": [rng.choice(["S", "M", "L"]) for _ in range(rng.randrange(3))],
        "note": rng.choice(WORDS),
    }


def _attributes_text(rng: random.Random) -> str:
    """A json document as the application wrote it: its own spacing and key order, kept by `json`."""
    doc = {"colour": rng.choice(["red", "blue", "grün"]), "fragile": rng.random() < 0.3, "dims": [1, 2.5, None]}
    return json.dumps(doc, ensure_ascii=rng.random() < 0.5, indent=rng.choice([None, 1]))


def _ip(rng: random.Random) -> str:
    return rng.choice(
        [
            f"10.0.{rng.randrange(4)}.{rng.randrange(1, 255)}",
            f"192.168.{rng.randrange(256)}.0/24",
            f"2001:db8::{rng.randrange(1, 0xFFFF):x}",
            "172.16.5.4/32",
        ]
    )


def _real(rng: random.Random) -> float:
    return rng.choice([0.1, 1.5, -2.25, 3.4028234e38, 1e-7, round(rng.uniform(0, 5), 2)])


def _double(rng: random.Random, extremes: tuple[float, ...] = (1e300, 5e-324)) -> float:
    return rng.choice([0.1 + 0.2, -0.0, *extremes, rng.uniform(-1e6, 1e6)])


# -- PostgreSQL ------------------------------------------------------------------------------

POSTGRES_SCHEMA = f"""
CREATE EXTENSION IF NOT EXISTS citext;
CREATE TYPE order_status AS ENUM ('placed', 'packed', 'shipped', 'delivered', 'returned');
CREATE DOMAIN money_amount AS numeric(12,2) CHECK (VALUE >= 0);
CREATE TYPE postal_address AS (street text, city text, zip varchar(10));

CREATE TABLE region (
    region_code char(2) PRIMARY KEY,
    name varchar(40) NOT NULL,
    tax_rate numeric(5,4)
);
CREATE TABLE customer (
    customer_id integer PRIMARY KEY,
    email citext UNIQUE,
    full_name text NOT NULL,
    region_code char(2),
    signup_date date,
    last_login timestamptz,
    is_active boolean NOT NULL,
    credit_limit money_amount,
    loyalty_points bigint,
    rating real,
    lifetime_value double precision,
    preferences jsonb,
    address postal_address,
    tags text[],
    external_ref uuid,
    last_ip inet
);
CREATE TABLE employee (
    employee_id smallint PRIMARY KEY,
    first_name varchar(30) NOT NULL,
    last_name varchar(30) NOT NULL,
    title varchar(60),
    reports_to smallint,
    hired_on date,
    salary numeric(10,2),
    shift_length interval,
    photo bytea
);
CREATE TABLE product (
    product_id integer PRIMARY KEY,
    code char(6) NOT NULL,
    name text NOT NULL,
    unit_price numeric(10,2) NOT NULL,
    precise_cost numeric,
    weight_kg real,
    attributes json,
    lot_sizes integer[],
    discontinued boolean,
    created_at timestamp
);
CREATE TABLE sales_order (
    order_id integer PRIMARY KEY,
    customer_id integer NOT NULL,
    employee_id smallint,
    ordered_at timestamptz NOT NULL,
    required_on date,
    status order_status NOT NULL,
    freight money_amount,
    note text
);
-- the key lists the columns in another order than the table declares them
CREATE TABLE order_line (
    line_no smallint NOT NULL,
    product_id integer NOT NULL,
    order_id integer NOT NULL,
    quantity integer NOT NULL,
    unit_price numeric(10,2) NOT NULL,
    discount real NOT NULL DEFAULT 0,
    PRIMARY KEY (order_id, product_id, line_no)
);
-- partitioned by month; its key puts the id before the date the columns start with
CREATE TABLE payment (
    payment_date date NOT NULL,
    payment_id integer NOT NULL,
    order_id integer NOT NULL,
    amount numeric(10,2) NOT NULL,
    method text,
    paid_at timestamptz,
    PRIMARY KEY (payment_id, payment_date)
) PARTITION BY RANGE (payment_date);
CREATE SCHEMA {HR_SCHEMA};
CREATE TABLE {HR_SCHEMA}.salary_history (
    from_date date NOT NULL,
    salary integer NOT NULL,
    employee_id smallint NOT NULL,
    to_date date,
    PRIMARY KEY (employee_id, from_date)
);
CREATE VIEW customer_order_totals AS
    SELECT o.customer_id, count(*) AS orders, sum(l.quantity * l.unit_price) AS total
    FROM sales_order o JOIN order_line l ON l.order_id = o.order_id
    GROUP BY o.customer_id;
"""

#: Created after the data, so that it holds some.
POSTGRES_MATERIALIZED = """
CREATE MATERIALIZED VIEW monthly_sales AS
    SELECT date_trunc('month', payment_date)::date AS month, sum(amount) AS amount, count(*) AS payments
    FROM payment GROUP BY 1
"""


def postgres_partitions() -> list[str]:
    """The names of `payment`'s partitions, one per month of 2025."""
    return [f"payment_{m:%Y_%m}" for m in MONTHS]


def create_postgres_shop(conn, rng: random.Random) -> None:
    """The shop's schema and rows in the PostgreSQL database of `conn` (the owner's, autocommit);
    `reader` may SELECT every table, views included, of `public` and `hr`."""
    conn.execute(POSTGRES_SCHEMA)
    for month, name in zip(MONTHS, postgres_partitions()):
        following = (month + dt.timedelta(days=32)).replace(day=1)
        conn.execute(f"CREATE TABLE {name} PARTITION OF payment FOR VALUES FROM ('{month}') TO ('{following}')")
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO region VALUES (%s, %s, %s)", [(c, n, _tax(rng)) for c, n in REGIONS.items()])
        cur.executemany(_PG_CUSTOMER_INSERT, [_pg_customer(rng, i) for i in range(1, CUSTOMERS + 1)])
        cur.executemany(_PG_EMPLOYEE_INSERT, [_pg_employee(rng, i) for i in range(1, EMPLOYEES + 1)])
        cur.executemany(_PG_PRODUCT_INSERT, [_pg_product(rng, i) for i in range(1, PRODUCTS + 1)])
        _pg_orders(cur, rng, range(1, ORDERS + 1), CUSTOMERS)
        cur.executemany(
            f"INSERT INTO {HR_SCHEMA}.salary_history VALUES (%s, %s, %s, %s)",
            [_salary(rng, i) for i in range(SALARY_ROWS)],
        )
    conn.execute(POSTGRES_MATERIALIZED)
    conn.execute(f"GRANT USAGE ON SCHEMA {HR_SCHEMA} TO reader")
    for schema in ("public", HR_SCHEMA):
        conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO reader")


_PG_CUSTOMER_INSERT = (
    "INSERT INTO customer VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s::jsonb,"
    " ROW(%s, %s, %s)::postal_address, %s::text[], %s::uuid, %s::inet)"
)
_PG_EMPLOYEE_INSERT = "INSERT INTO employee VALUES (%s, %s, %s, %s, %s, %s, %s, %s::interval, %s)"
_PG_PRODUCT_INSERT = "INSERT INTO product VALUES (%s, %s, %s, %s, %s, %s, %s::json, %s::int[], %s, %s)"
_PG_ORDER_INSERT = "INSERT INTO sales_order VALUES (%s, %s, %s, %s, %s, %s::order_status, %s, %s)"
_PG_LINE_INSERT = "INSERT INTO order_line VALUES (%s, %s, %s, %s, %s, %s)"
_PG_PAYMENT_INSERT = "INSERT INTO payment VALUES (%s, %s, %s, %s, %s, %s)"


def _tax(rng: random.Random) -> Decimal:
    return Decimal(rng.randrange(0, 3_000)) / 10_000


def _uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _pg_customer(rng: random.Random, i: int) -> tuple:
    street, city = _maybe(rng, f"{rng.randrange(1, 300)} {rng.choice(WORDS)} St"), rng.choice(CITIES)
    return (
        i,
        _maybe(rng, f"Customer.{i}@Example.com"),
        _name(rng),
        _maybe(rng, rng.choice(list(REGIONS))),
        _maybe(rng, _day(rng, dt.date(2019, 1, 1))),
        _maybe(rng, _instant(rng)),
        rng.random() < 0.8,
        _maybe(rng, _money(rng)),
        _maybe(rng, rng.choice([0, rng.randrange(100_000), 2**53 + 1, -(2**63)])),
        _maybe(rng, _real(rng)),
        _maybe(rng, _double(rng)),
        _maybe(rng, json.dumps(_preferences(rng))),
        street,
        city,
        _maybe(rng, f"{rng.randrange(10_000):05}"),
        _tags(rng),
        _maybe(rng, _uuid(rng)),
        _maybe(rng, _ip(rng)),
    )


def _pg_employee(rng: random.Random, i: int) -> tuple:
    shift = rng.choice(["8 hours", "7 hours 30 minutes", "1 day 2 hours", "-15 minutes", "3 mons 4 days 00:00:01.5"])
    return (
        i,
        rng.choice(FIRST_NAMES),
        rng.choice(LAST_NAMES),
        _maybe(rng, rng.choice(TITLES)),
        None if i == 1 else rng.randrange(1, i),
        _day(rng, dt.date(2010, 1, 1), dt.date(2024, 12, 31)),
        _maybe(rng, _money(rng, 200_000)),
        _maybe(rng, shift),
        _maybe(rng, rng.randbytes(rng.randrange(0, 40))),
    )


def _pg_product(rng: random.Random, i: int) -> tuple:
    return (
        i,
        f"P{i:05}",
        f"{rng.choice(['Tea', 'Cheese', 'Sauce', 'Bread', 'Soap'])} {rng.choice(WORDS)} {i}",
        _money(rng, 500),
        _maybe(rng, rng.choice(PRECISE)),
        _maybe(rng, _real(rng)),
        _maybe(rng, _attributes_text(rng)),
        _lots(rng),
        _maybe(rng, rng.random() < 0.2),
        _maybe(rng, _moment(rng)),
    )


def _pg_orders(cur, rng: random.Random, ids: range, customers: int) -> None:
    """Orders `ids`, their lines and their payments."""
    orders, lines, payments = [], [], []
    for order_id in ids:
        ordered = _instant(rng)
        status = rng.choice(STATUSES)
        employee = _maybe(rng, rng.randrange(1, EMPLOYEES + 1))
        orders.append(
            (
                order_id,
                rng.randrange(1, customers + 1),
                employee,
                ordered,
                _maybe(rng, ordered.date() + dt.timedelta(days=rng.randrange(3, 20))),
                status,
                _maybe(rng, _money(rng, 80)),
                _maybe(rng, rng.choice(WORDS)),
            )
        )
        for line_no, product in enumerate(rng.sample(range(1, PRODUCTS + 1), rng.randrange(1, 5)), start=1):
            lines.append(
                (line_no, product, order_id, rng.randrange(1, 50), _money(rng, 200), rng.choice([0.0, 0.05, 0.1, 0.25]))
            )
        if rng.random() < 0.8:
            paid = _instant(rng)
            payments.append(
                (paid.date(), order_id, order_id, _money(rng, 2_000), rng.choice(METHODS), _maybe(rng, paid))
            )
    cur.executemany(_PG_ORDER_INSERT, orders)
    cur.executemany(_PG_LINE_INSERT, lines)
    cur.executemany(_PG_PAYMENT_INSERT, payments)


def _salary(rng: random.Random, i: int) -> tuple:
    start = dt.date(2015, 1, 1) + dt.timedelta(days=30 * i)
    return (start, rng.randrange(30_000, 150_000), 1 + i % EMPLOYEES, _maybe(rng, start + dt.timedelta(days=365)))


def _pg_ids(conn, table: str, column: str) -> list:
    return [r[0] for r in conn.execute(f"SELECT {column} FROM {table} ORDER BY {column}")]


def postgres_day_of_business(conn, rng: random.Random) -> None:
    """A day at the shop: new customers, orders and payments; updates of every column type
    (values to NULL and back included); deletes; payments moved across month bounds."""
    customers = _pg_ids(conn, "customer", "customer_id")
    orders = _pg_ids(conn, "sales_order", "order_id")
    with conn.transaction(), conn.cursor() as cur:
        # inserts
        first = customers[-1] + 1
        cur.executemany(_PG_CUSTOMER_INSERT, [_pg_customer(rng, i) for i in range(first, first + 8)])
        _pg_orders(cur, rng, range(orders[-1] + 1, orders[-1] + 25), first + 7)
        cur.execute(
            f"INSERT INTO {HR_SCHEMA}.salary_history VALUES (%s, %s, %s, %s)",
            (
                dt.date(2026, 1, 1) + dt.timedelta(days=rng.randrange(300)),
                99_000,
                rng.randrange(1, EMPLOYEES + 1),
                None,
            ),
        )
        # updates: each column of each type, on a few rows
        for i in rng.sample(customers, 12):
            new = _pg_customer(rng, i)
            cur.execute(
                "UPDATE customer SET email = %s, full_name = %s, region_code = %s, signup_date = %s,"
                " last_login = %s, is_active = %s, credit_limit = %s, loyalty_points = %s, rating = %s,"
                " lifetime_value = %s, preferences = %s::jsonb, address = ROW(%s, %s, %s)::postal_address,"
                " tags = %s::text[], external_ref = %s::uuid, last_ip = %s::inet WHERE customer_id = %s",
                (*new[1:], i),
            )
        for i in rng.sample(customers, 6):  # one column at a time, as a clerk would
            column, value = rng.choice(
                [
                    ("rating", _real(rng)),
                    ("tags", ["c,d", None, "new"]),
                    ("last_ip", "10.9.8.7"),
                    ("is_active", False),
                    ("credit_limit", None),
                ]
            )
            cast = {"tags": "::text[]", "last_ip": "::inet"}.get(column, "")
            cur.execute(f"UPDATE customer SET {column} = %s{cast} WHERE customer_id = %s", (value, i))
        for i in rng.sample(range(1, EMPLOYEES + 1), 4):
            new = _pg_employee(rng, i)
            cur.execute(
                "UPDATE employee SET title = %s, salary = %s, shift_length = %s::interval, photo = %s"
                " WHERE employee_id = %s",
                (new[3], new[6], new[7], new[8], i),
            )
        for i in rng.sample(range(1, PRODUCTS + 1), 10):
            new = _pg_product(rng, i)
            cur.execute(
                "UPDATE product SET code = %s, name = %s, unit_price = %s, precise_cost = %s, weight_kg = %s,"
                " attributes = %s::json, lot_sizes = %s::int[], discontinued = %s, created_at = %s"
                " WHERE product_id = %s",
                (f"Q{i:05}", *new[2:], i),
            )
        for i in rng.sample(orders, 20):
            cur.execute(
                "UPDATE sales_order SET status = %s::order_status, freight = %s, ordered_at = ordered_at + %s::interval,"
                " required_on = required_on + 1 WHERE order_id = %s",
                (rng.choice(STATUSES), _maybe(rng, _money(rng, 80)), "90 minutes", i),
            )
        cur.execute(
            "UPDATE order_line SET quantity = quantity + 1, discount = 0.3 WHERE (order_id + product_id) %% 17 = %s",
            (rng.randrange(17),),
        )
        cur.execute("UPDATE region SET tax_rate = tax_rate + 0.0125, name = name || ' ✓' WHERE region_code = 'NO'")
        cur.execute(
            f"UPDATE {HR_SCHEMA}.salary_history SET salary = salary + 1000, to_date = NULL WHERE employee_id = %s",
            (rng.randrange(1, EMPLOYEES + 1),),
        )
        cur.execute("UPDATE payment SET amount = amount + 0.01, method = %s WHERE payment_id %% 13 = %s", ("cash", 5))
        # payments move across month bounds: the row goes to another partition, its key changes
        cur.execute(
            "UPDATE payment SET payment_date = payment_date + 31 WHERE payment_id %% 11 = %s", (rng.randrange(11),)
        )
        cur.execute(
            "UPDATE payment SET payment_date = payment_date - 40 WHERE payment_id %% 19 = %s AND payment_date >= %s",
            (rng.randrange(19), dt.date(2025, 2, 15)),
        )
        # deletes
        cur.execute("DELETE FROM order_line WHERE (order_id * 7 + line_no) %% 41 = %s", (rng.randrange(41),))
        cur.execute("DELETE FROM payment WHERE payment_id = ANY(%s)", (rng.sample(orders, 5),))
        gone = rng.sample(customers, 3)
        cur.execute("DELETE FROM customer WHERE customer_id = ANY(%s)", (gone,))
        cur.execute("DELETE FROM employee WHERE employee_id = %s", (rng.randrange(2, EMPLOYEES + 1),))
        cur.execute(
            f"DELETE FROM {HR_SCHEMA}.salary_history WHERE employee_id = %s AND to_date IS NOT NULL",
            (rng.randrange(1, EMPLOYEES + 1),),
        )
    conn.execute("REFRESH MATERIALIZED VIEW monthly_sales")


# -- MariaDB ---------------------------------------------------------------------------------

MARIADB_SCHEMA = [
    "CREATE TABLE region (region_code CHAR(2) PRIMARY KEY, name VARCHAR(40) NOT NULL, tax_rate DECIMAL(5,4))",
    """CREATE TABLE customer (
        customer_id INT PRIMARY KEY,
        email VARCHAR(120),
        full_name VARCHAR(100) NOT NULL,
        region_code CHAR(2),
        signup_date DATE,
        last_login TIMESTAMP(6) NULL DEFAULT NULL,
        is_active BOOLEAN NOT NULL,
        credit_limit DECIMAL(12,2),
        loyalty_points BIGINT,
        rating FLOAT,
        lifetime_value DOUBLE,
        preferences JSON,
        tier ENUM('bronze', 'silver', 'gold'),
        interests SET('books', 'games', 'garden', 'music'),
        home POINT
    ) ENGINE=InnoDB""",
    """CREATE TABLE employee (
        employee_id SMALLINT PRIMARY KEY,
        first_name VARCHAR(30) NOT NULL,
        last_name VARCHAR(30) NOT NULL,
        title VARCHAR(60),
        reports_to SMALLINT,
        hired_on DATE,
        salary DECIMAL(10,2),
        photo BLOB
    ) ENGINE=InnoDB""",
    """CREATE TABLE product (
        product_id INT PRIMARY KEY,
        code CHAR(6) NOT NULL,
        name TEXT NOT NULL,
        unit_price DECIMAL(10,2) NOT NULL,
        weight_kg FLOAT,
        attributes JSON,
        discontinued BIT(1),
        created_at DATETIME(6)
    ) ENGINE=InnoDB""",
    """CREATE TABLE sales_order (
        order_id INT PRIMARY KEY,
        customer_id INT NOT NULL,
        employee_id SMALLINT,
        ordered_at DATETIME(6) NOT NULL,
        required_on DATE,
        status ENUM('placed', 'packed', 'shipped', 'delivered', 'returned') NOT NULL,
        freight DECIMAL(12,2),
        note TEXT
    ) ENGINE=InnoDB""",
    """CREATE TABLE order_line (
        line_no SMALLINT NOT NULL,
        product_id INT NOT NULL,
        order_id INT NOT NULL,
        quantity INT NOT NULL,
        unit_price DECIMAL(10,2) NOT NULL,
        discount FLOAT NOT NULL DEFAULT 0,
        PRIMARY KEY (order_id, product_id, line_no)
    ) ENGINE=InnoDB""",
    """CREATE TABLE store (
        store_id SMALLINT PRIMARY KEY,
        name VARCHAR(60) NOT NULL,
        site GEOMETRY REF_SYSTEM_ID=4326
    ) ENGINE=InnoDB""",
    """CREATE TABLE payment (
        payment_date DATE NOT NULL,
        payment_id INT NOT NULL,
        order_id INT NOT NULL,
        amount DECIMAL(10,2) NOT NULL,
        method VARCHAR(20),
        paid_at TIMESTAMP(6) NULL DEFAULT NULL,
        PRIMARY KEY (payment_id, payment_date)
    ) ENGINE=InnoDB
    PARTITION BY RANGE COLUMNS (payment_date) ("""
    + ", ".join(
        f"PARTITION p{m:%Y_%m} VALUES LESS THAN ('{(m + dt.timedelta(days=32)).replace(day=1)}')" for m in MONTHS
    )
    + ")",
    """CREATE VIEW customer_order_totals AS
        SELECT o.customer_id, COUNT(*) AS orders, SUM(l.quantity * l.unit_price) AS total
        FROM sales_order o JOIN order_line l ON l.order_id = o.order_id
        GROUP BY o.customer_id""",
]

_MDB_CUSTOMER_INSERT = (
    "INSERT INTO customer VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s,"
    " IF(%s IS NULL, NULL, ST_PointFromText(%s)))"
)
_MDB_PRODUCT_INSERT = "INSERT INTO product VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
_MDB_ORDER_INSERT = "INSERT INTO sales_order VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
_MDB_LINE_INSERT = "INSERT INTO order_line VALUES (%s, %s, %s, %s, %s, %s)"
_MDB_PAYMENT_INSERT = "INSERT INTO payment VALUES (%s, %s, %s, %s, %s, %s)"
_MDB_STORE_INSERT = "INSERT INTO store VALUES (%s, %s, IF(%s IS NULL, NULL, ST_GeomFromText(%s, 4326)))"


def _utc(moment: dt.datetime) -> dt.datetime:
    """An instant as a TIMESTAMP column takes it from a UTC session: naive UTC wall time."""
    return moment.astimezone(dt.UTC).replace(tzinfo=None)


def _mdb_customer(rng: random.Random, i: int) -> tuple:
    point = _maybe(rng, f"POINT({rng.uniform(-180, 180):.6f} {rng.uniform(-90, 90):.6f})")
    interests = ",".join(sorted(rng.sample(["books", "games", "garden", "music"], rng.randrange(0, 3))))
    return (
        i,
        _maybe(rng, f"customer.{i}@example.com"),
        f"{_name(rng)} {rng.choice(['', '🚀', '✨', '🦊'])}".strip(),
        _maybe(rng, rng.choice(list(REGIONS))),
        _maybe(rng, _day(rng, dt.date(2019, 1, 1))),
        _maybe(rng, _utc(_instant(rng))),
        rng.randrange(2),
        _maybe(rng, _money(rng)),
        _maybe(rng, rng.choice([0, rng.randrange(100_000), -(2**63), 2**63 - 1])),
        _maybe(rng, rng.choice([0.5, -2.25, 1.5, 3.0])),
        _maybe(rng, _double(rng, (1e300,))),
        _maybe(rng, json.dumps(_preferences(rng), ensure_ascii=False)),
        _maybe(rng, rng.choice(["bronze", "silver", "gold"])),
        _maybe(rng, interests),
        point,
        point,
    )


def _mdb_product(rng: random.Random, i: int) -> tuple:
    return (
        i,
        f"P{i:05}",
        f"{rng.choice(['Tea', 'Cheese', 'Sauce', 'Bread', 'Soap'])} {rng.choice(WORDS)} {i}",
        _money(rng, 500),
        _maybe(rng, rng.choice([0.25, 1.5, 12.0, -0.125])),
        _maybe(rng, _attributes_text(rng)),
        _maybe(rng, rng.randrange(2)),
        _maybe(rng, _moment(rng)),
    )


def _mdb_store(rng: random.Random, i: int) -> tuple:
    site = _maybe(
        rng,
        rng.choice(
            [
                f"POINT({rng.uniform(-180, 180):.5f} {rng.uniform(-90, 90):.5f})",
                "LINESTRING(10.7 59.9, 10.8 59.95, 11 60)",
                "POLYGON((0 0, 4 0, 4 4, 0 4, 0 0))",
            ]
        ),
    )
    return (i, f"Store {rng.choice(CITIES)} {i}", site, site)


def _mdb_orders(cur, rng: random.Random, ids: range, customers: int) -> None:
    orders, lines, payments = [], [], []
    for order_id in ids:
        ordered = _moment(rng)
        orders.append(
            (
                order_id,
                rng.randrange(1, customers + 1),
                _maybe(rng, rng.randrange(1, EMPLOYEES + 1)),
                ordered,
                _maybe(rng, ordered.date() + dt.timedelta(days=rng.randrange(3, 20))),
                rng.choice(STATUSES),
                _maybe(rng, _money(rng, 80)),
                _maybe(rng, rng.choice(WORDS)),
            )
        )
        for line_no, product in enumerate(rng.sample(range(1, PRODUCTS + 1), rng.randrange(1, 5)), start=1):
            lines.append(
                (line_no, product, order_id, rng.randrange(1, 50), _money(rng, 200), rng.choice([0.0, 0.5, 0.25]))
            )
        if rng.random() < 0.8:
            paid = _instant(rng)
            payments.append(
                (paid.date(), order_id, order_id, _money(rng, 2_000), rng.choice(METHODS), _maybe(rng, _utc(paid)))
            )
    cur.executemany(_MDB_ORDER_INSERT, orders)
    cur.executemany(_MDB_LINE_INSERT, lines)
    cur.executemany(_MDB_PAYMENT_INSERT, payments)


def _mdb_employee(rng: random.Random, i: int) -> tuple:
    return (
        i,
        rng.choice(FIRST_NAMES),
        rng.choice(LAST_NAMES),
        _maybe(rng, rng.choice(TITLES)),
        None if i == 1 else rng.randrange(1, i),
        _day(rng, dt.date(2010, 1, 1), dt.date(2024, 12, 31)),
        _maybe(rng, _money(rng, 200_000)),
        _maybe(rng, rng.randbytes(rng.randrange(0, 40))),
    )


def create_mariadb_shop(conn, rng: random.Random) -> None:
    """The shop's schema and rows in the MariaDB database of `conn` (the owner's MySQLdb
    connection, autocommit, UTC session)."""
    cur = conn.cursor()
    cur.execute("SET SESSION time_zone = '+00:00'")
    for statement in MARIADB_SCHEMA:
        cur.execute(statement)
    cur.executemany("INSERT INTO region VALUES (%s, %s, %s)", [(c, n, _tax(rng)) for c, n in REGIONS.items()])
    cur.executemany(_MDB_CUSTOMER_INSERT, [_mdb_customer(rng, i) for i in range(1, CUSTOMERS + 1)])
    cur.executemany(
        "INSERT INTO employee VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
        [_mdb_employee(rng, i) for i in range(1, EMPLOYEES + 1)],
    )
    cur.executemany(_MDB_PRODUCT_INSERT, [_mdb_product(rng, i) for i in range(1, PRODUCTS + 1)])
    cur.executemany(_MDB_STORE_INSERT, [_mdb_store(rng, i) for i in range(1, 9)])
    _mdb_orders(cur, rng, range(1, ORDERS + 1), CUSTOMERS)
    cur.close()


def _mdb_ids(cur, table: str, column: str) -> list:
    cur.execute(f"SELECT {column} FROM {table} ORDER BY {column}")
    return [r[0] for r in cur.fetchall()]


def mariadb_day_of_business(conn, rng: random.Random) -> None:
    """A day at the shop, as `postgres_day_of_business`, in one transaction."""
    cur = conn.cursor()
    cur.execute("SET SESSION time_zone = '+00:00'")
    customers = _mdb_ids(cur, "customer", "customer_id")
    orders = _mdb_ids(cur, "sales_order", "order_id")
    cur.execute("START TRANSACTION")
    first = customers[-1] + 1
    cur.executemany(_MDB_CUSTOMER_INSERT, [_mdb_customer(rng, i) for i in range(first, first + 8)])
    _mdb_orders(cur, rng, range(orders[-1] + 1, orders[-1] + 25), first + 7)
    cur.execute(_MDB_STORE_INSERT, _mdb_store(rng, 100 + rng.randrange(1000)))
    for i in rng.sample(customers, 12):
        new = _mdb_customer(rng, i)
        cur.execute(
            "UPDATE customer SET email = %s, full_name = %s, region_code = %s, signup_date = %s, last_login = %s,"
            " is_active = %s, credit_limit = %s, loyalty_points = %s, rating = %s, lifetime_value = %s,"
            " preferences = %s, tier = %s, interests = %s, home = IF(%s IS NULL, NULL, ST_PointFromText(%s))"
            " WHERE customer_id = %s",
            (*new[1:], i),
        )
    for i in rng.sample(range(1, EMPLOYEES + 1), 4):
        new = _mdb_employee(rng, i)
        cur.execute(
            "UPDATE employee SET title = %s, salary = %s, photo = %s WHERE employee_id = %s",
            (new[3], new[6], new[7], i),
        )
    for i in rng.sample(range(1, PRODUCTS + 1), 10):
        new = _mdb_product(rng, i)
        cur.execute(
            "UPDATE product SET code = %s, name = %s, unit_price = %s, weight_kg = %s, attributes = %s,"
            " discontinued = %s, created_at = %s WHERE product_id = %s",
            (f"Q{i:05}", *new[2:], i),
        )
    for i in rng.sample(orders, 20):
        cur.execute(
            "UPDATE sales_order SET status = %s, freight = %s, ordered_at = ordered_at + INTERVAL 90 MINUTE,"
            " required_on = required_on + INTERVAL 1 DAY WHERE order_id = %s",
            (rng.choice(STATUSES), _maybe(rng, _money(rng, 80)), i),
        )
    cur.execute(
        "UPDATE order_line SET quantity = quantity + 1, discount = 0.75 WHERE (order_id + product_id) %% 17 = %s",
        (rng.randrange(17),),
    )
    cur.execute("UPDATE region SET tax_rate = tax_rate + 0.0125, name = CONCAT(name, ' ✓') WHERE region_code = 'NO'")
    # the first store left (a day may have deleted any), moved somewhere new each day
    cur.execute(
        "UPDATE store SET site = ST_GeomFromText(%s, 4326), name = %s ORDER BY store_id LIMIT 1",
        (f"POINT({rng.randrange(1, 80)} {rng.randrange(1, 80)})", f"Moved 🚚 {rng.randrange(10_000)}"),
    )
    cur.execute("UPDATE payment SET amount = amount + 0.01, method = 'cash' WHERE payment_id % 13 = 5")
    cur.execute(
        "UPDATE payment SET payment_date = payment_date + INTERVAL 31 DAY WHERE payment_id %% 11 = %s",
        (rng.randrange(11),),
    )
    cur.execute(
        "UPDATE payment SET payment_date = payment_date - INTERVAL 40 DAY WHERE payment_id %% 19 = %s"
        " AND payment_date >= %s",
        (rng.randrange(19), dt.date(2025, 2, 15)),
    )
    cur.execute("DELETE FROM order_line WHERE (order_id * 7 + line_no) %% 41 = %s", (rng.randrange(41),))
    for payment_id in rng.sample(orders, 5):
        cur.execute("DELETE FROM payment WHERE payment_id = %s", (payment_id,))
    for customer_id in rng.sample(customers, 3):
        cur.execute("DELETE FROM customer WHERE customer_id = %s", (customer_id,))
    cur.execute("DELETE FROM employee WHERE employee_id = %s", (rng.randrange(2, EMPLOYEES + 1),))
    cur.execute("DELETE FROM store WHERE store_id = %s", (rng.randrange(1, 9),))
    cur.execute("COMMIT")
    cur.close()
