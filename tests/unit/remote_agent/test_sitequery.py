"""The agent's check of site queries: exact regenerated SQL, refusals, and injection attempts."""

from __future__ import annotations

import sqlite3

import pytest

from deltasieve_protocol.types import LogicalType
from remote_agent.adapters.base import ColumnInfo, TableInfo
from remote_agent.errors import BadRequest, Forbidden, UnsupportedQuery
from remote_agent.sitequery import validate_site_query


def col(name: str, kind: str = "int", nullable: bool = True, read_as: str | None = None) -> ColumnInfo:
    return ColumnInfo(name, LogicalType.parse(kind), nullable, kind.upper(), read_as)


CUSTOMERS = TableInfo("customers", (col("id", nullable=False), col("name", "text"), col("region", "text")), ("id",))
ORDERS = TableInfo(
    "orders",
    (col("shop", nullable=False), col("no", nullable=False), col("customer_id"), col("amount", "decimal(10,2)")),
    ("shop", "no"),
)
#: What the agent exposes; `secrets` exists in the database but is not exposed, and
#: customers' `password` column is hidden by the allow list.
EXPOSED = {t.name: t for t in (CUSTOMERS, ORDERS)}
PG_ACCOUNTS = TableInfo(
    "accounts",
    (
        col("uid", "text", nullable=False, read_as="CAST({col} AS TEXT)"),
        col("tags", "text", read_as="CAST({col} AS TEXT)"),
        col("n"),
    ),
    ("uid",),
)


def check(sql: str, key=("id",), dialect: str = "sqlite", tables=None):
    return validate_site_query(sql, list(key), EXPOSED if tables is None else tables, dialect)


@pytest.fixture
def db():
    """A real SQLite database with the exposed tables, one hidden table and one hidden column."""
    conn = sqlite3.connect(":memory:")
    conn.executescript(
        """
        CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, region TEXT, password TEXT);
        CREATE TABLE orders (shop INTEGER, no INTEGER, customer_id INTEGER, amount DECIMAL(10,2), PRIMARY KEY (shop, no));
        CREATE TABLE secrets (s TEXT);
        INSERT INTO customers VALUES (1, 'Ann', 'north', 'pw1'), (2, 'Bob', NULL, 'pw2'), (3, 'x'' OR 1=1 --', 'east', 'pw3');
        INSERT INTO orders VALUES (1, 1, 1, 10.5), (1, 2, 1, 99), (2, 1, 2, 5);
        INSERT INTO secrets VALUES ('top');
        """
    )
    yield conn
    conn.close()


# --- valid queries: the exact SQL the agent runs --------------------------------------------

VALID = [
    pytest.param(
        "sqlite",
        'SELECT "c"."id" AS "id", "c"."name" AS "name" FROM "customers" AS "c"',
        ("id",),
        'SELECT "c"."id" AS "id", "c"."name" AS "name" FROM "customers" AS "c"',
        id="canonical-input-unchanged",
    ),
    pytest.param(
        "sqlite",
        "select id, name as who from customers where region = 'north' and id != 3",
        ("id",),
        'SELECT "customers"."id" AS "id", "customers"."name" AS "who" FROM "customers" AS "customers" '
        'WHERE "customers"."region" = \'north\' AND "customers"."id" <> 3',
        id="loose-input-normalized",
    ),
    pytest.param(
        "sqlite",
        "SELECT `c`.[id] AS cid, o.shop, o.no, o.amount FROM customers c INNER JOIN orders o ON o.customer_id = c.id WHERE o.amount BETWEEN 1 AND 50 OR o.no IN (1, -2)",
        ("cid", "shop", "no"),
        'SELECT "c"."id" AS "cid", "o"."shop" AS "shop", "o"."no" AS "no", "o"."amount" AS "amount" '
        'FROM "customers" AS "c" JOIN "orders" AS "o" ON "o"."customer_id" = "c"."id" '
        'WHERE "o"."amount" BETWEEN 1 AND 50 OR "o"."no" IN (1, -2)',
        id="sqlite-quoting-and-join",
    ),
    pytest.param(
        "postgres",
        "SELECT c.id, c.name FROM customers AS c WHERE c.name LIKE 'A%' AND c.region IS NOT NULL AND c.id * 2 / 4 > 0",
        ("id",),
        'SELECT "c"."id" AS "id", "c"."name" AS "name" FROM "customers" AS "c" '
        'WHERE "c"."name" LIKE \'A%\' AND "c"."region" IS NOT NULL AND "c"."id" * 2 / 4 > 0',
        id="postgres",
    ),
    pytest.param(
        "postgres",
        "SELECT a.uid, a.n AS count FROM accounts a WHERE a.uid = 'abc'",
        ("uid",),
        'SELECT CAST("a"."uid" AS TEXT) AS "uid", "a"."n" AS "count" FROM "accounts" AS "a" WHERE "a"."uid" = \'abc\'',
        id="postgres-read-as",
    ),
]


@pytest.mark.parametrize(("dialect", "sql", "key", "expected"), VALID)
def test_regenerated_sql(dialect, sql, key, expected):
    tables = {"accounts": PG_ACCOUNTS} if "accounts" in sql else EXPOSED
    query = check(sql, key, dialect, tables)
    assert query.sql == expected
    assert query.key == list(key)
    if tables is EXPOSED:  # without read_as, the agent's own SQL is a fixed point
        assert check(query.sql, key, dialect, tables).sql == expected


def test_output_columns_carry_output_names_and_source_types():
    query = check("SELECT o.shop, o.no AS number, o.amount FROM orders o", key=("shop", "number"))
    assert [(c.name, str(c.type), c.nullable) for c in query.columns] == [
        ("shop", "int", False),
        ("number", "int", False),
        ("amount", "decimal(10,2)", True),
    ]


def test_read_as_is_kept_on_output_columns():
    query = check("SELECT a.uid FROM accounts a", key=("uid",), dialect="postgres", tables={"accounts": PG_ACCOUNTS})
    assert query.columns[0].read_as == "CAST({col} AS TEXT)"


def test_generated_sql_runs(db):
    query = check(
        "SELECT c.id, c.name FROM customers c JOIN orders o ON o.customer_id = c.id AND o.shop = 1 WHERE c.region IS NOT NULL"
    )
    assert db.execute(query.sql).fetchall() == [(1, "Ann"), (1, "Ann")]


# --- lookups by key ----------------------------------------------------------------------


def test_lookup_sql_single_key(db):
    query = check("SELECT c.id, c.name FROM customers c WHERE c.region IS NOT NULL")
    sql = query.lookup_sql(3)
    assert sql == (
        'SELECT "c"."id" AS "id", "c"."name" AS "name" FROM "customers" AS "c" '
        'WHERE (NOT "c"."region" IS NULL) AND "c"."id" IN (?, ?, ?)'
    )
    assert db.execute(sql, (1, 2, 3)).fetchall() == [(1, "Ann"), (3, "x' OR 1=1 --")]


def test_lookup_sql_composite_key(db):
    query = check("SELECT o.shop, o.no AS n, o.amount FROM orders o", key=("shop", "n"))
    sql = query.lookup_sql(2)
    assert (
        sql
        == 'SELECT "o"."shop" AS "shop", "o"."no" AS "n", "o"."amount" AS "amount" FROM "orders" AS "o" WHERE ("o"."shop", "o"."no") IN ((?, ?), (?, ?))'
    )
    assert sorted(db.execute(sql, (1, 2, 2, 1)).fetchall()) == [(1, 2, 99), (2, 1, 5)]


def test_lookup_sql_postgres_placeholders_and_where_kept_apart():
    query = check(
        "SELECT o.shop, o.no FROM orders o WHERE o.amount > 1 OR o.amount IS NULL",
        key=("no", "shop"),
        dialect="postgres",
    )
    assert query.lookup_sql(1) == (
        'SELECT "o"."shop" AS "shop", "o"."no" AS "no" FROM "orders" AS "o" '
        'WHERE ("o"."amount" > 1 OR "o"."amount" IS NULL) AND ("o"."no", "o"."shop") IN ((%s, %s))'
    )


def test_lookup_matches_the_key_as_output():
    query = check("SELECT a.uid FROM accounts a", key=("uid",), dialect="postgres", tables={"accounts": PG_ACCOUNTS})
    assert (
        query.lookup_sql(2)
        == 'SELECT CAST("a"."uid" AS TEXT) AS "uid" FROM "accounts" AS "a" WHERE CAST("a"."uid" AS TEXT) IN (%s, %s)'
    )


def test_lookup_needs_a_key():
    with pytest.raises(ValueError):
        check("SELECT c.id FROM customers c").lookup_sql(0)


# --- key -------------------------------------------------------------------------------


@pytest.mark.parametrize("key", [(), ("missing",), ("id", "id"), ("ID",)])
def test_key_must_name_output_columns(key):
    with pytest.raises(BadRequest):
        check("SELECT c.id, c.name FROM customers c", key=key)


# --- not exposed -> 403 -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "needle"),
    [
        pytest.param("SELECT s.s AS id FROM secrets s", "'secrets' is not exposed", id="hidden-table"),
        pytest.param("SELECT m.name AS id FROM sqlite_master m", "'sqlite_master' is not exposed", id="catalog-table"),
        pytest.param("SELECT c.id FROM main.customers c", "'main.customers' is not exposed", id="schema-qualified"),
        pytest.param(
            "SELECT u.usename AS id FROM pg_catalog.pg_user u", "'pg_catalog.pg_user' is not exposed", id="pg-catalog"
        ),
        pytest.param("SELECT c.id, c.password FROM customers c", "column 'password'", id="hidden-column"),
        pytest.param(
            "SELECT c.id FROM customers c WHERE c.password = 'x'", "column 'password'", id="hidden-column-in-where"
        ),
        pytest.param(
            "SELECT c.id FROM customers c JOIN orders o ON o.secret = c.id", "column 'secret'", id="hidden-column-in-on"
        ),
        pytest.param(
            "SELECT id, password FROM customers", "column 'password' does not exist in any", id="hidden-unqualified"
        ),
        pytest.param(
            'SELECT "id" AS "id" FROM "t; DROP TABLE customers"',
            "'t; DROP TABLE customers' is not exposed",
            id="injection-in-table-name",
        ),
        pytest.param(
            'SELECT "c"."id; DROP TABLE customers" AS "id" FROM customers c',
            "column 'id; DROP TABLE customers'",
            id="injection-in-column-name",
        ),
    ],
)
def test_not_exposed_is_forbidden(sql, needle):
    with pytest.raises(Forbidden) as info:
        check(sql)
    assert needle in info.value.message
    assert info.value.status == 403


# --- unsupported -> 422 -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "needle"),
    [
        pytest.param(
            "SELECT c.id FROM customers c; DROP TABLE customers", "exactly one statement", id="stacked-statement"
        ),
        pytest.param(
            "SELECT c.id FROM customers c /* x */; DROP TABLE customers -- ",
            "exactly one statement",
            id="comment-then-statement",
        ),
        pytest.param(
            "SELECT c.id FROM customers c WHERE c.id = 1 UNION SELECT s.s FROM secrets s", "UNION", id="union-select"
        ),
        pytest.param("SELECT c.id FROM customers c UNION ALL SELECT name FROM sqlite_master", "UNION", id="union-all"),
        pytest.param(
            "SELECT c.id, load_extension('evil.so') AS x FROM customers c",
            "function call load_extension",
            id="load-extension-select",
        ),
        pytest.param(
            "SELECT c.id FROM customers c WHERE load_extension('evil.so') IS NULL",
            "function call load_extension",
            id="load-extension-where",
        ),
        pytest.param(
            "SELECT c.id FROM customers c WHERE c.id IN (SELECT s.s FROM secrets s)",
            "subqueries",
            id="subquery-in-where",
        ),
        pytest.param("SELECT c.id FROM customers c WHERE EXISTS (SELECT 1 FROM secrets)", "subqueries", id="exists"),
        pytest.param("SELECT c.id FROM customers c WHERE c.id = ?", "query parameters", id="placeholder"),
        pytest.param("SELECT c.id FROM customers c WHERE c.id = :id", "query parameters", id="named-placeholder"),
        pytest.param("SELECT c.id FROM customers c WHERE CAST(c.name AS INTEGER) = 1", "a cast", id="cast"),
        pytest.param("SELECT c.id FROM customers c WHERE CASE WHEN 1 THEN 1 END = 1", "CASE", id="case"),
        pytest.param("SELECT c.id FROM customers c WHERE c.name = X'41'", "the literal", id="blob-literal"),
        pytest.param("SELECT * FROM customers", "SELECT *", id="star"),
        pytest.param("SELECT c.id + 0 AS id FROM customers c", "expressions in the select list", id="expression"),
        pytest.param("SELECT count(*) AS id FROM customers", "aggregates", id="aggregate"),
        pytest.param("SELECT c.id FROM customers c ORDER BY c.id", "ORDER BY", id="order-by"),
        pytest.param("SELECT c.id FROM customers c LIMIT 1", "LIMIT", id="limit"),
        pytest.param(
            "SELECT c.id FROM customers c LEFT JOIN orders o ON o.customer_id = c.id", "outer joins", id="outer-join"
        ),
        pytest.param("SELECT c.id FROM customers c, orders o", "cross joins", id="comma-join"),
        pytest.param("SELECT c.id FROM customers c JOIN orders o USING (id)", "USING", id="using"),
        pytest.param("WITH x AS (SELECT s FROM secrets) SELECT c.id FROM customers c", "CTEs", id="cte"),
        pytest.param("ATTACH DATABASE '/tmp/x.db' AS x", "statements are not supported", id="attach"),
        pytest.param("PRAGMA writable_schema = 1", "statements are not supported", id="pragma"),
        pytest.param("DELETE FROM customers", "DELETE statements are not supported", id="delete"),
        pytest.param("SELECT c.id FROM customers c JOIN customers c ON c.id = c.id", "own alias", id="duplicate-alias"),
        pytest.param("SELECT c.id, c.name AS id FROM customers c", "occurs twice", id="duplicate-output"),
        pytest.param("SELECT x.id FROM customers c", "not a table or alias", id="unknown-qualifier"),
        pytest.param(
            "SELECT c.id, o.no FROM customers c JOIN orders o ON o.customer_id = c.id JOIN orders p ON p.no = 1 AND c.id = q.no",
            "not a table or alias",
            id="unknown-qualifier-in-on",
        ),
        pytest.param(
            "SELECT c.id FROM customers c JOIN orders o ON o.no = p.no JOIN orders p ON p.no = o.no",
            "joined later",
            id="on-uses-later-table",
        ),
        pytest.param("SELECT c.id, c.name FROM customers c WHERE c.name = ('a' || 'b')", "concatenation", id="concat"),
    ],
)
def test_unsupported(sql, needle):
    with pytest.raises(UnsupportedQuery) as info:
        check(sql)
    assert needle in info.value.message
    assert info.value.status == 422


@pytest.mark.parametrize(
    ("sql", "needle"),
    [
        pytest.param("SELECT c.id FROM customers c WHERE pg_sleep(1) IS NULL", "function call pg_sleep", id="pg-sleep"),
        pytest.param("SELECT c.id FROM customers c WHERE c.name = E'\\x41'", "the literal", id="escape-string"),
        pytest.param("SELECT c.id FROM customers c WHERE c.name = $$x$$", "the literal", id="dollar-string"),
        pytest.param("SELECT c.id FROM customers c WHERE c.id = $1", "query parameters", id="numbered-parameter"),
        pytest.param("SELECT c.id::text AS id FROM customers c", "expressions in the select list", id="cast-operator"),
        pytest.param("SELECT c.id FROM customers c FOR UPDATE", "FOR UPDATE", id="for-update"),
        pytest.param("SELECT c.id FROM ONLY customers c", "ONLY", id="only"),
        pytest.param("SELECT c.id INTO copy FROM customers c", "INTO", id="select-into"),
        pytest.param("COPY customers TO PROGRAM 'rm -rf /'", "statements are not supported", id="copy-program"),
    ],
)
def test_unsupported_postgres(sql, needle):
    with pytest.raises(UnsupportedQuery) as info:
        check(sql, dialect="postgres")
    assert needle in info.value.message


# --- injection attempts rendered harmless ---------------------------------------------------


def test_string_literal_stays_a_literal(db):
    query = check("SELECT c.id, c.name FROM customers c WHERE c.name = 'x'' OR 1=1 --'")
    assert (
        query.sql
        == 'SELECT "c"."id" AS "id", "c"."name" AS "name" FROM "customers" AS "c" WHERE "c"."name" = \'x\'\' OR 1=1 --\''
    )
    assert db.execute(query.sql).fetchall() == [(3, "x' OR 1=1 --")]


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
def test_backslash_in_a_literal_is_refused(dialect):
    # PostgreSQL with standard_conforming_strings off would read \' as an escaped quote and
    # take the rest of the regenerated text for SQL.
    with pytest.raises(UnsupportedQuery, match="backslash"):
        check(
            "SELECT c.id FROM customers c WHERE c.name = 'a\\' OR c.name = ' OR pg_sleep(9) IS NULL --'",
            dialect=dialect,
        )


def test_quote_in_output_alias_is_escaped(db):
    query = check('SELECT c.id AS "x"" FROM secrets; --" FROM customers c WHERE c.id = 1', key=('x" FROM secrets; --',))
    assert query.sql == 'SELECT "c"."id" AS "x"" FROM secrets; --" FROM "customers" AS "c" WHERE "c"."id" = 1'
    cursor = db.execute(query.sql)
    assert cursor.description[0][0] == 'x" FROM secrets; --'
    assert cursor.fetchall() == [(1,)]


def test_quote_in_table_alias_is_escaped(db):
    alias = 'c"; DROP TABLE customers; --'
    query = check('SELECT "c""; DROP TABLE customers; --".id FROM customers AS "c""; DROP TABLE customers; --"')
    assert (
        query.sql
        == 'SELECT "c""; DROP TABLE customers; --"."id" AS "id" FROM "customers" AS "c""; DROP TABLE customers; --"'
    )
    assert len(db.execute(query.sql).fetchall()) == 3
    assert db.execute("SELECT count(*) FROM customers").fetchone() == (3,)
    assert alias in query.sql.replace('""', '"')


def test_numbers_are_rendered_as_plain_numbers():
    query = check("SELECT c.id FROM customers c WHERE c.id = 0x10 OR c.id > 1e3")
    assert query.sql == 'SELECT "c"."id" AS "id" FROM "customers" AS "c" WHERE "c"."id" = 16 OR "c"."id" > 1e3'


def test_comments_are_dropped():
    query = check("SELECT c.id /* ; DROP TABLE customers */ FROM customers c -- trailing\nWHERE c.id = 1 /* */")
    assert query.sql == 'SELECT "c"."id" AS "id" FROM "customers" AS "c" WHERE "c"."id" = 1'


def test_comment_closing_inside_identifier_is_harmless(db):
    query = check('SELECT c.id AS "*/ DROP TABLE customers /*" FROM customers c', key=("*/ DROP TABLE customers /*",))
    assert query.sql == 'SELECT "c"."id" AS "*/ DROP TABLE customers /*" FROM "customers" AS "c"'
    assert len(db.execute(query.sql).fetchall()) == 3


def test_narrowed_ors_the_agents_condition_across_the_joined_tables_and_keeps_the_where():
    from sqlglot import exp

    query = check(
        "SELECT o.shop, o.no, c.id FROM orders o JOIN customers c ON c.id = o.customer_id WHERE o.amount > 1 OR o.amount IS NULL",
        key=("shop", "no", "id"),
        dialect="postgres",
    )
    narrowed = query.narrowed(lambda alias: exp.GT(this=exp.column("xmin", alias), expression=exp.Literal.number(7)))
    assert narrowed.sql.endswith(
        'WHERE ("o"."amount" > 1 OR "o"."amount" IS NULL) AND (("o"."xmin" > 7) OR ("c"."xmin" > 7))'
    ), narrowed.sql
    assert '("o"."xmin" > 7) OR ("c"."xmin" > 7)' in narrowed.chunk_sql(10, from_cursor=True)
    assert (narrowed.columns, narrowed.key) == (query.columns, query.key)
    assert "xmin" not in query.sql  # the validated query itself is left as it was


# --- the grouped form (a view over tables without a key) ---------------------------------

GROUPED = (
    "SELECT c.region AS region, COALESCE(c.name, '') AS name, c.name IS NULL AS \"__ds_null_name\", "
    'COUNT(*) AS "__ds_count" FROM customers c GROUP BY c.region, c.name'
)


def test_grouped_query_counts_each_distinct_row_and_reads_null_as_a_flagged_value(db):
    db.executescript(
        "INSERT INTO customers VALUES (4, 'Ann', 'north', 'x'), (5, NULL, NULL, 'y'), (6, NULL, NULL, 'z')"
    )
    query = check(GROUPED, key=("region", "name", "__ds_null_name"))
    assert query.grouped
    assert [(c.name, str(c.type), c.nullable) for c in query.columns] == [
        ("region", "text", True),
        ("name", "text", False),
        ("__ds_null_name", "bool", False),
        ("__ds_count", "int", False),
    ]
    rows = sorted(db.execute(query.sql).fetchall(), key=repr)
    assert rows == sorted(
        [("north", "Ann", 0, 2), (None, "Bob", 0, 1), ("east", "x' OR 1=1 --", 0, 1), (None, "", 1, 2)], key=repr
    )
    # a lookup of a NULL row binds its filler and flag, never a NULL
    found = db.execute(query.lookup_sql(1), ["east", "x' OR 1=1 --", False]).fetchall()
    assert found == [("east", "x' OR 1=1 --", 0, 1)]


@pytest.mark.parametrize(
    ("sql", "key", "needle", "error"),
    [
        pytest.param(
            "SELECT c.region AS region FROM customers c GROUP BY c.region",
            ("region",),
            "COUNT(*) exactly once",
            UnsupportedQuery,
            id="no-count",
        ),
        pytest.param(
            'SELECT c.region AS region, COUNT(*) AS "__ds_count" FROM customers c GROUP BY c.region, c.name',
            ("region",),
            "groups by exactly the columns it selects",
            UnsupportedQuery,
            id="group-by-more",
        ),
        pytest.param(
            'SELECT c.region AS region, COUNT(*) AS "__ds_count" FROM customers c GROUP BY upper(c.region)',
            ("region",),
            "GROUP BY function call upper",
            UnsupportedQuery,
            id="group-by-expression",
        ),
        pytest.param(
            'SELECT COALESCE(c.region, upper(c.name)) AS region, COUNT(*) AS "__ds_count" FROM customers c GROUP BY c.region',
            ("region",),
            "a column and a literal",
            UnsupportedQuery,
            id="coalesce-with-expression",
        ),
        pytest.param(
            'SELECT c.region AS region, COUNT(c.name) AS "__ds_count" FROM customers c GROUP BY c.region',
            ("region",),
            "aggregate",
            UnsupportedQuery,
            id="count-of-a-column",
        ),
        pytest.param(
            'SELECT c.region AS region, c.name AS name, COUNT(*) AS "__ds_count" FROM customers c GROUP BY c.region, c.name',
            ("region",),
            "every output column but the count",
            BadRequest,
            id="key-not-every-column",
        ),
        pytest.param(
            'SELECT c.region AS region, COUNT(*) AS "__x" FROM customers c GROUP BY c.region',
            ("region",),
            "reserved",
            UnsupportedQuery,
            id="reserved-name-of-a-column",
        ),
        pytest.param(
            "SELECT COALESCE(c.region, 'x') AS region FROM customers c",
            ("region",),
            "expressions in the select list",
            UnsupportedQuery,
            id="coalesce-without-group-by",
        ),
    ],
)
def test_grouped_form_refusals(sql, key, needle, error):
    with pytest.raises(error) as info:
        check(sql, key=key)
    assert needle in info.value.message
