"""View analysis: golden site queries, keys, and one test per rejection rule."""

from __future__ import annotations

import pytest

from deltasieve_protocol.types import Column, LogicalType
from remote_agent.adapters.base import ColumnInfo, TableInfo
from remote_agent.sitequery import validate_site_query
from warehouse.viewdef import (
    SiteQuery,
    SourceSchema,
    UnknownSourceError,
    ViewDef,
    ViewDefinitionError,
    analyze_view,
    referenced_sources,
    schema_to_json,
)

DIALECTS = ("sqlite", "postgres")


def col(name: str, kind: str = "int", nullable: bool = True, read_as: str | None = None) -> ColumnInfo:
    return ColumnInfo(name, LogicalType.parse(kind), nullable, kind.upper(), read_as)


CUSTOMERS = TableInfo(
    "customers",
    (col("id", nullable=False), col("name", "text"), col("Email", "text", nullable=False), col("region", "text")),
    ("id",),
    (("Email",),),
)
ORDER_LINES = TableInfo(
    "order_lines",
    (
        col("order_no", nullable=False),
        col("line", nullable=False),
        col("customer_id"),
        col("amount", "decimal(10,2)"),
        col("placed", "date"),
    ),
    ("order_no", "line"),
)
# No primary key: a nullable unique key and a NOT NULL one.
EVENTS = TableInfo(
    "events", (col("seq"), col("code", "text", nullable=False), col("note", "text")), (), (("seq",), ("code",))
)
LOGS = TableInfo("logs", (col("at", "timestamp"), col("message", "text")), ())
EMPLOYEES = TableInfo("employees", (col("id", nullable=False), col("manager_id"), col("name", "text")), ("id",))
# Same name and columns as EMPLOYEES on another source, for multi-source views.
STAFF = TableInfo("staff", (col("id", nullable=False), col("team", "text")), ("id",))
TABLES = [CUSTOMERS, ORDER_LINES, EVENTS, LOGS, EMPLOYEES]


@pytest.fixture(params=DIALECTS)
def dialect(request) -> str:
    return request.param


@pytest.fixture
def schemas(dialect) -> dict[str, SourceSchema]:
    return {
        "crm": SourceSchema(dialect, {t.name: t for t in TABLES}),
        "hr": SourceSchema(dialect, {STAFF.name: STAFF}),
    }


def analyze(sql: str, dialect: str = "sqlite") -> ViewDef:
    return analyze_view(
        sql,
        {"crm": SourceSchema(dialect, {t.name: t for t in TABLES}), "hr": SourceSchema(dialect, {STAFF.name: STAFF})},
    )


def rejected(sql: str, *needles: str) -> str:
    """Analyze `sql`, expect a ViewDefinitionError whose detail holds every needle; return it."""
    with pytest.raises(ViewDefinitionError) as info:
        analyze(sql)
    detail = info.value.detail
    for needle in needles:
        assert needle.lower() in detail.lower(), detail
    return detail


# (view SQL, site SQL, output columns, key). Both dialects render these the same way.
GOLDEN = [
    pytest.param(
        "SELECT c.id, c.name FROM crm.customers c",
        'SELECT "c"."id" AS "id", "c"."name" AS "name" FROM "customers" AS "c"',
        ["id", "name"],
        ["id"],
        id="aliased-table",
    ),
    pytest.param(
        "select ID, Name as who from CRM.Customers",
        'SELECT "customers"."id" AS "id", "customers"."name" AS "who" FROM "customers" AS "customers"',
        ["id", "who"],
        ["id"],
        id="case-insensitive-names-default-alias",
    ),
    pytest.param(
        "SELECT crm.customers.id AS cid FROM crm.customers",
        'SELECT "customers"."id" AS "cid" FROM "customers" AS "customers"',
        ["cid"],
        ["cid"],
        id="three-part-column",
    ),
    pytest.param(
        "SELECT l.amount, l.line AS ln, l.order_no FROM crm.order_lines AS l WHERE l.amount >= 10.5 AND l.placed BETWEEN '2024-01-01' AND '2024-12-31'",
        'SELECT "l"."amount" AS "amount", "l"."line" AS "ln", "l"."order_no" AS "order_no" FROM "order_lines" AS "l" '
        'WHERE "l"."amount" >= 10.5 AND "l"."placed" BETWEEN \'2024-01-01\' AND \'2024-12-31\'',
        ["amount", "ln", "order_no"],
        ["order_no", "ln"],
        id="composite-key-in-key-order",
    ),
    pytest.param(
        "SELECT c.id AS customer, c.region, l.order_no, l.line, l.amount FROM crm.customers AS c "
        "JOIN crm.order_lines AS l ON l.customer_id = c.id AND l.amount > 0 "
        "WHERE (c.region IN ('north', 'east') OR c.region IS NULL) AND NOT c.name LIKE 'test%' AND l.amount * 2 - 1 <> -5",
        'SELECT "c"."id" AS "customer", "c"."region" AS "region", "l"."order_no" AS "order_no", "l"."line" AS "line", "l"."amount" AS "amount" '
        'FROM "customers" AS "c" JOIN "order_lines" AS "l" ON "l"."customer_id" = "c"."id" AND "l"."amount" > 0 '
        'WHERE ("c"."region" IN (\'north\', \'east\') OR "c"."region" IS NULL) AND NOT "c"."name" LIKE \'test%\' AND "l"."amount" * 2 - 1 <> -5',
        ["customer", "region", "order_no", "line", "amount"],
        ["order_no", "line"],  # each line has one customer: its key is implied (viewdef/keys.py)
        id="local-join-with-predicate",
    ),
    pytest.param(
        "SELECT e.id, e.name, m.id AS manager, m.name AS manager_name FROM crm.employees e INNER JOIN crm.employees m ON e.manager_id = m.id",
        'SELECT "e"."id" AS "id", "e"."name" AS "name", "m"."id" AS "manager", "m"."name" AS "manager_name" '
        'FROM "employees" AS "e" JOIN "employees" AS "m" ON "e"."manager_id" = "m"."id"',
        ["id", "name", "manager", "manager_name"],
        ["id"],  # one manager per employee
        id="self-join",
    ),
    pytest.param(
        "SELECT c.Email AS mail, c.name FROM crm.customers c WHERE c.name != 'O''Brien' AND c.id NOT BETWEEN 1 AND 9 AND c.region IS NOT NULL AND c.id / 2 < 100 AND TRUE",
        'SELECT "c"."Email" AS "mail", "c"."name" AS "name" FROM "customers" AS "c" '
        'WHERE "c"."name" <> \'O\'\'Brien\' AND NOT "c"."id" BETWEEN 1 AND 9 AND NOT "c"."region" IS NULL AND "c"."id" / 2 < 100 AND TRUE',
        ["mail", "name"],
        None,
        id="primary-key-required-even-with-unique-key",
    ),
    pytest.param(
        "SELECT c.id FROM crm.customers c WHERE c.name NOT LIKE 'x%' AND c.region IS NOT NULL AND c.id NOT IN (-1) AND c.region IS NULL",
        'SELECT "c"."id" AS "id" FROM "customers" AS "c" '
        'WHERE "c"."name" NOT LIKE \'x%\' AND NOT "c"."region" IS NULL AND NOT "c"."id" IN (-1) AND "c"."region" IS NULL',
        ["id"],
        ["id"],
        id="negated-operators",
    ),
    pytest.param(
        "SELECT e.code, e.note FROM crm.events e WHERE e.seq NOT IN (1, 2) AND e.note IS NULL",
        'SELECT "e"."code" AS "code", "e"."note" AS "note" FROM "events" AS "e" WHERE NOT "e"."seq" IN (1, 2) AND "e"."note" IS NULL',
        ["code", "note"],
        ["code"],
        id="unique-key-fallback",
    ),
    pytest.param(
        'SELECT "e"."seq" AS "Seq No", e.code FROM crm.events AS "e"',
        'SELECT "e"."seq" AS "Seq No", "e"."code" AS "code" FROM "events" AS "e"',
        ["Seq No", "code"],
        ["code"],
        id="not-null-unique-key-preferred",
    ),
    pytest.param(
        "SELECT e.seq FROM crm.events e",
        'SELECT "e"."seq" AS "seq" FROM "events" AS "e"',
        ["seq"],
        ["seq"],
        id="nullable-unique-key-when-selected",
    ),
]


@pytest.mark.parametrize(("view_sql", "site_sql", "names", "key"), GOLDEN)
def test_golden_site_queries(view_sql, site_sql, names, key, schemas, dialect):
    if key is None:
        with pytest.raises(ViewDefinitionError, match="primary key"):
            analyze_view(view_sql, schemas)
        return
    view = analyze_view(view_sql, schemas)
    assert [c.name for c in view.columns] == names
    assert view.key == key
    [site] = view.sites
    assert site.source == "crm"
    assert site.sql == site_sql
    assert site.columns == view.columns and site.key == view.key


@pytest.mark.parametrize(("view_sql", "site_sql", "names", "key"), [p for p in GOLDEN if p.values[3] is not None])
def test_agent_accepts_site_query_unchanged(view_sql, site_sql, names, key, schemas, dialect):
    view = analyze_view(view_sql, schemas)
    [site] = view.sites
    query = validate_site_query(site.sql, site.key, schemas["crm"].tables, dialect)
    assert query.sql == site.sql
    assert [c.name for c in query.columns] == [c.name for c in site.columns]
    assert [c.type for c in query.columns] == [c.type for c in site.columns]
    assert query.key == site.key


def test_output_types_come_from_the_schema():
    view = analyze("SELECT l.order_no, l.line, l.amount, l.placed FROM crm.order_lines l")
    assert view.columns == [
        Column("order_no", LogicalType("int")),
        Column("line", LogicalType("int")),
        Column("amount", LogicalType("decimal", 10, 2)),
        Column("placed", LogicalType("date")),
    ]


def test_read_as_is_left_to_the_agent():
    table = TableInfo("things", (col("id", "text", nullable=False, read_as="CAST({col} AS TEXT)"), col("n")), ("id",))
    view = analyze_view("SELECT t.id, t.n FROM pg.things t", {"pg": SourceSchema("postgres", {"things": table})})
    assert view.sites[0].sql == 'SELECT "t"."id" AS "id", "t"."n" AS "n" FROM "things" AS "t"'
    agent = validate_site_query(view.sites[0].sql, view.key, {"things": table}, "postgres")
    assert agent.sql == 'SELECT CAST("t"."id" AS TEXT) AS "id", "t"."n" AS "n" FROM "things" AS "t"'


def test_division_keeps_the_source_semantics(dialect, schemas):
    # sqlglot would add a cast when transpiling from its standard dialect; the agent rejects casts.
    view = analyze_view("SELECT c.id FROM crm.customers c WHERE c.id / 3 = 1", schemas)
    assert view.sites[0].sql == 'SELECT "c"."id" AS "id" FROM "customers" AS "c" WHERE "c"."id" / 3 = 1'


def test_quoted_names_are_kept_exactly():
    table = TableInfo('we"ird', (col("a b", nullable=False), col("Mixed")), ("a b",))
    view = analyze_view(
        'SELECT w."a b" AS "x""y", w."Mixed" FROM src."we""ird" AS w',
        {"src": SourceSchema("sqlite", {'we"ird': table})},
    )
    assert view.sites[0].sql == 'SELECT "w"."a b" AS "x""y", "w"."Mixed" AS "Mixed" FROM "we""ird" AS "w"'
    assert view.key == ['x"y']


def test_source_names_match_ignoring_case():
    view = analyze("SELECT c.id FROM CRM.customers c")
    assert view.sites[0].source == "crm"


# --- JSON ----------------------------------------------------------------------------------


def test_schema_json_round_trip():
    table = TableInfo(
        "t", (col("id", nullable=False), col("u", "text", read_as="CAST({col} AS TEXT)")), ("id",), (("u",),)
    )
    body = schema_to_json("postgres", [table])
    assert body == {
        "dialect": "postgres",
        "tables": [
            {
                "name": "t",
                "columns": [
                    {"name": "id", "type": "int", "nullable": False, "declared": "INT", "read_as": None},
                    {
                        "name": "u",
                        "type": "text",
                        "nullable": True,
                        "declared": "TEXT",
                        "read_as": "CAST({col} AS TEXT)",
                    },
                ],
                "primary_key": ["id"],
                "unique_keys": [["u"]],
            }
        ],
    }
    assert SourceSchema.from_json(body) == SourceSchema("postgres", {"t": table})
    assert SourceSchema.from_json(body).to_json() == body


def test_view_json_round_trip():
    view = analyze("SELECT l.order_no, l.line, l.amount FROM crm.order_lines l WHERE l.amount > 1")
    data = view.to_json()
    assert data["key"] == ["order_no", "line"]
    assert data["columns"][2] == {"name": "amount", "type": "decimal(10,2)"}
    assert data["sites"][0]["source"] == "crm"
    assert ViewDef.from_json(data) == view
    assert SiteQuery.from_json(data["sites"][0]) == view.sites[0]


# --- referenced_sources ----------------------------------------------------------------------


def test_referenced_sources_in_order_of_use():
    assert referenced_sources(
        "SELECT s.id FROM hr.staff s JOIN crm.employees e ON e.id = s.id JOIN hr.staff t ON t.id = s.id"
    ) == ["hr", "crm"]


def test_referenced_sources_rejects_unparsable_sql():
    with pytest.raises(ViewDefinitionError, match="cannot be parsed"):
        referenced_sources("SELECT FROM WHERE (")


def test_referenced_sources_rejects_non_views():
    with pytest.raises(ViewDefinitionError, match="GROUP BY"):
        referenced_sources("SELECT c.region FROM crm.customers c GROUP BY c.region")


# --- rejection rules (each detail says what is wrong and what is supported) ------------------

SUPPORTED = "a view is SELECT"


@pytest.mark.parametrize(
    ("sql", "needle"),
    [
        pytest.param("SELEC c.id FROM crm.customers c", "cannot be parsed", id="unparsable"),
        pytest.param("SELECT c.id FROM crm.customers c WHERE 'open", "cannot be parsed", id="unterminated-string"),
        pytest.param("   ", "empty", id="empty"),
        pytest.param(
            "SELECT c.id FROM crm.customers c; SELECT c.id FROM crm.customers c",
            "exactly one statement",
            id="two-statements",
        ),
        pytest.param(
            "SELECT c.id FROM crm.customers c; DROP TABLE crm.customers", "exactly one statement", id="drop-appended"
        ),
        pytest.param("INSERT INTO crm.customers (id) VALUES (1)", "INSERT statements are not supported", id="insert"),
        pytest.param("UPDATE crm.customers SET name = 'x'", "UPDATE statements are not supported", id="update"),
        pytest.param("DELETE FROM crm.customers", "DELETE statements are not supported", id="delete"),
        pytest.param("CREATE TABLE crm.x (a INT)", "statements are not supported", id="create"),
        pytest.param("DROP TABLE crm.customers", "statements are not supported", id="drop"),
        pytest.param("SELECT c.id FROM crm.customers c UNION SELECT e.id FROM crm.employees e", "UNION", id="union"),
        pytest.param(
            "SELECT c.id FROM crm.customers c INTERSECT SELECT e.id FROM crm.employees e", "INTERSECT", id="intersect"
        ),
        pytest.param("SELECT c.id FROM crm.customers c EXCEPT SELECT e.id FROM crm.employees e", "EXCEPT", id="except"),
        pytest.param("(SELECT c.id FROM crm.customers c)", "parenthesized", id="parenthesized"),
        pytest.param("WITH x AS (SELECT c.id FROM crm.customers c) SELECT x.id FROM x", "CTEs", id="cte"),
        pytest.param("SELECT count(*) AS n FROM crm.customers c", "aggregates are not supported", id="aggregate"),
        pytest.param(
            "SELECT c.id, max(c.name) AS m FROM crm.customers c", "aggregates are not supported", id="aggregate-max"
        ),
        pytest.param("SELECT c.region FROM crm.customers c GROUP BY c.region", "GROUP BY", id="group-by"),
        pytest.param("SELECT c.id FROM crm.customers c HAVING c.id > 1", "HAVING", id="having"),
        pytest.param("SELECT DISTINCT c.id FROM crm.customers c", "DISTINCT", id="distinct"),
        pytest.param("SELECT c.id FROM crm.customers c LIMIT 10", "LIMIT", id="limit"),
        pytest.param("SELECT c.id FROM crm.customers c LIMIT 10 OFFSET 5", "LIMIT", id="limit-offset"),
        pytest.param("SELECT c.id FROM crm.customers c OFFSET 5", "OFFSET", id="offset"),
        pytest.param("SELECT c.id FROM crm.customers c FETCH FIRST 5 ROWS ONLY", "FETCH", id="fetch"),
        pytest.param("SELECT c.id FROM crm.customers c ORDER BY c.id", "ORDER BY", id="order-by"),
        pytest.param(
            "SELECT c.id, row_number() OVER (ORDER BY c.id) AS r FROM crm.customers c", "window functions", id="window"
        ),
        pytest.param("SELECT c.id INTO crm.copy FROM crm.customers c", "INTO", id="select-into"),
        pytest.param(
            "SELECT c.id FROM crm.customers c WHERE c.id IN (SELECT e.id FROM crm.employees e)",
            "subqueries",
            id="subquery-in",
        ),
        pytest.param(
            "SELECT c.id FROM crm.customers c WHERE EXISTS (SELECT 1 FROM crm.employees e)",
            "subqueries",
            id="subquery-exists",
        ),
        pytest.param("SELECT x.id FROM (SELECT c.id FROM crm.customers c) AS x", "subqueries", id="subquery-from"),
        pytest.param("SELECT c.id, (SELECT 1) AS one FROM crm.customers c", "subqueries", id="subquery-select"),
        pytest.param(
            "SELECT c.id FROM crm.customers c JOIN (SELECT e.id FROM crm.employees e) x ON x.id = c.id",
            "subqueries",
            id="subquery-join",
        ),
        pytest.param(
            "SELECT c.id, e.id AS eid FROM crm.customers c RIGHT JOIN crm.employees e ON e.id = c.id",
            "RIGHT OUTER JOIN is not supported",
            id="right-join",
        ),
        pytest.param(
            "SELECT c.id, e.id AS eid FROM crm.customers c FULL OUTER JOIN crm.employees e ON e.id = c.id",
            "FULL OUTER JOIN is not supported",
            id="full-join",
        ),
        pytest.param(
            "SELECT c.id, e.id AS eid FROM crm.customers c CROSS JOIN crm.employees e", "cross joins", id="cross-join"
        ),
        pytest.param(
            "SELECT c.id, e.id AS eid FROM crm.customers c, crm.employees e WHERE e.id = c.id",
            "cross joins",
            id="comma-join",
        ),
        pytest.param(
            "SELECT c.id, e.id AS eid FROM crm.customers c JOIN crm.employees e", "cross joins", id="join-without-on"
        ),
        pytest.param(
            "SELECT c.id FROM crm.customers c NATURAL JOIN crm.employees e", "NATURAL joins", id="natural-join"
        ),
        pytest.param("SELECT c.id FROM crm.customers c JOIN crm.employees e USING (id)", "USING", id="using"),
        pytest.param("SELECT * FROM crm.customers", "SELECT *", id="star"),
        pytest.param("SELECT c.* FROM crm.customers c", "SELECT *", id="qualified-star"),
        pytest.param(
            "SELECT c.id + 1 AS next FROM crm.customers c", "expressions in the select list", id="arithmetic-in-select"
        ),
        pytest.param(
            "SELECT c.id, upper(c.name) AS n FROM crm.customers c",
            "expressions in the select list",
            id="function-in-select",
        ),
        pytest.param(
            "SELECT c.id, 'x' AS tag FROM crm.customers c", "expressions in the select list", id="literal-in-select"
        ),
        pytest.param("SELECT c.id, CAST(c.name AS INT) AS n FROM crm.customers c", "a cast", id="cast-in-select"),
        pytest.param(
            "SELECT c.id FROM crm.customers c WHERE upper(c.name) = 'X'", "function call upper", id="function-in-where"
        ),
        pytest.param(
            "SELECT c.id FROM crm.customers c WHERE CASE WHEN c.id > 1 THEN TRUE END", "CASE", id="case-in-where"
        ),
        pytest.param("SELECT c.id FROM crm.customers c WHERE CAST(c.name AS INT) = 1", "a cast", id="cast-in-where"),
        pytest.param("SELECT c.id FROM crm.customers c WHERE c.id = ?", "query parameters", id="placeholder"),
        pytest.param("SELECT c.id FROM crm.customers c WHERE c.name ILIKE 'a%'", "ILIKE", id="ilike"),
        pytest.param("SELECT c.id FROM crm.customers c WHERE c.name || 'x' = 'ax'", "concatenation", id="concat"),
        pytest.param(
            "SELECT c.id FROM crm.customers c WHERE c.id IN (c.id, 2)",
            "IN lists hold literals only",
            id="in-with-column",
        ),
        pytest.param("SELECT c.id FROM crm.customers c WHERE c.region IS TRUE", "only IS [NOT] NULL", id="is-true"),
        pytest.param("SELECT c.id FROM crm.customers c WHERE c.id % 2 = 0", "the % operator", id="modulo"),
        pytest.param("SELECT c.id FROM crm.customers c WHERE c.name LIKE 'a!%' ESCAPE '!'", "ESCAPE", id="like-escape"),
        pytest.param(
            "SELECT c.id FROM crm.customers c JOIN crm.employees e ON lower(e.name) = c.name",
            "function call lower",
            id="function-in-on",
        ),
        pytest.param("SELECT c.id FROM crm.customers c WHERE c.name LIKE 'C:\\%'", "backslash", id="backslash-literal"),
        pytest.param("SELECT c.id FROM crm.customers c TABLESAMPLE (10 PERCENT)", "TABLESAMPLE", id="tablesample"),
        pytest.param("SELECT g.x FROM generate_series(1, 3) AS g", "only tables can be read", id="table-function"),
    ],
)
def test_rejected_shape(sql, needle):
    detail = rejected(sql, needle)
    if "predicate" not in detail and "select list holds" not in detail:
        assert SUPPORTED in detail, detail
    else:
        assert "supported" in detail


def test_predicate_messages_list_what_is_supported():
    detail = rejected(
        "SELECT c.id FROM crm.customers c WHERE pg_sleep(1) IS NULL", "function call pg_sleep", "in WHERE"
    )
    assert "IS [NOT] NULL" in detail and "[NOT] LIKE" in detail


def test_table_must_name_its_source():
    rejected("SELECT c.id FROM customers c", "must be written source.table", SUPPORTED)


def test_table_of_another_schema_not_exposed_names_allow():
    rejected("SELECT c.id FROM crm.public.customers c", "no table 'public.customers'", "--allow public.customers")


def test_table_with_four_parts():
    rejected("SELECT c.id FROM crm.db.public.customers c", "only tables can be read")


def test_unknown_source():
    with pytest.raises(UnknownSourceError) as info:
        analyze("SELECT c.id FROM nope.customers c")
    assert info.value.source == "nope"
    assert "source 'nope' is not registered" in info.value.detail
    assert isinstance(info.value, ViewDefinitionError)


def test_unknown_table_lists_the_available_ones():
    rejected(
        "SELECT c.id FROM crm.custmers c",
        "source 'crm' has no table 'custmers'",
        "customers, employees, events, logs, order_lines",
    )


def test_unknown_column_names_the_table_and_its_columns():
    rejected(
        "SELECT c.id, c.nmae FROM crm.customers c",
        "column 'nmae' does not exist",
        "crm.customers",
        "id, name, Email, region",
    )


def test_unknown_unqualified_column():
    rejected("SELECT c.id, nmae FROM crm.customers c", "column 'nmae' does not exist in any table", "crm.customers")


def test_unknown_column_in_where():
    rejected("SELECT c.id FROM crm.customers c WHERE c.missing = 1", "column 'missing' does not exist")


def test_ambiguous_unqualified_column():
    rejected(
        "SELECT c.id AS cid, e.id AS eid, name FROM crm.customers c JOIN crm.employees e ON e.id = c.id",
        "'name' is ambiguous",
        "c, e",
    )


def test_unknown_qualifier():
    rejected("SELECT x.id FROM crm.customers c", "'x'", "not a table or alias")


def test_table_name_is_hidden_by_its_alias():
    rejected("SELECT customers.id FROM crm.customers c", "not a table or alias")


def test_three_part_column_must_match_the_source():
    rejected("SELECT hr.customers.id FROM crm.customers", "not a table or alias")


def test_same_alias_twice():
    rejected("SELECT c.id FROM crm.customers c JOIN crm.employees c ON c.id = 1", "own alias")


def test_self_join_needs_aliases():
    rejected("SELECT employees.id FROM crm.employees JOIN crm.employees ON employees.id = 1", "own alias")


def test_duplicate_output_names():
    rejected("SELECT c.id, c.name AS id FROM crm.customers c", "'id' occurs twice")


def test_duplicate_output_names_ignore_case():
    rejected("SELECT c.id, c.name AS ID FROM crm.customers c", "occurs twice", "ignoring case")


def test_reserved_output_names():
    rejected("SELECT c.id AS __uid FROM crm.customers c", "reserved")


def test_on_condition_may_not_use_later_tables():
    rejected(
        "SELECT c.id, l.order_no, l.line, e.id AS eid FROM crm.customers c "
        "JOIN crm.order_lines l ON l.customer_id = e.id JOIN crm.employees e ON e.id = c.id",
        "joined later",
    )


def test_primary_key_must_be_selected():
    rejected(
        "SELECT c.name FROM crm.customers c",
        "table 'crm.customers' (alias 'c')",
        "primary key (id)",
        "must be selected",
        "c.id",
        "aliases are allowed",
    )


def test_composite_primary_key_must_be_selected_whole():
    rejected(
        "SELECT l.order_no, l.amount FROM crm.order_lines l",
        "primary key (order_no, line)",
        "l.order_no, l.line",
        "must be selected",
    )


def test_every_joined_table_needs_its_key():
    rejected(
        "SELECT c.id, l.amount FROM crm.customers c JOIN crm.order_lines l ON l.customer_id = c.id",
        "crm.order_lines",
        "must be selected",
    )


def test_each_alias_of_a_self_join_needs_its_key():
    rejected(
        "SELECT e.id, m.name FROM crm.employees e JOIN crm.employees m ON e.manager_id = m.id", "alias 'm'", "m.id"
    )


def test_unique_key_fallback_must_be_selected():
    rejected("SELECT e.note FROM crm.events e", "no primary key", "(code) or (seq)", "must be selected")


def test_a_table_without_any_key_makes_a_multiset_view(dialect):
    """Grouped by every column, counted; a nullable column coalesced and flagged so that no
    key column is NULL; the agent accepts the site query as written."""
    view = analyze("SELECT l.at, l.message AS m FROM crm.logs l WHERE l.at IS NOT NULL", dialect)
    assert view.key == [] and [c.name for c in view.columns] == ["at", "m"]
    assert view.multiset == {"count": "__ds_count", "nulls": {"at": "__ds_null_at", "m": "__ds_null_m"}}
    site = view.sites[0]
    assert site.key == ["at", "m", "__ds_null_at", "__ds_null_m"]
    assert [c.name for c in site.columns] == [*site.key, "__ds_count"]
    assert "GROUP BY" in site.sql and "COUNT(*)" in site.sql and "COALESCE" in site.sql
    query = validate_site_query(site.sql, site.key, {t.name: t for t in TABLES}, dialect)
    assert query.grouped and [c.name for c in query.columns] == [c.name for c in site.columns]
    assert ViewDef.from_json(view.to_json()) == view and view.to_json()["format"] == 3


def test_a_multiset_view_joins_keyed_tables_of_its_source():
    view = analyze("SELECT l.message, c.id FROM crm.logs l JOIN crm.customers c ON c.name = l.message")
    assert view.key == [] and len(view.sites) == 1
    # a NOT NULL column is neither coalesced nor flagged
    assert view.multiset["nulls"] == {"message": "__ds_null_message"}
    assert view.sites[0].key == ["message", "id", "__ds_null_message"]


def test_a_multiset_view_over_several_sites_joins_grouped_sites(dialect):
    """Every site grouped (a keyed table too, its key not selected); the assembly selects
    combinations of their rows, each count named after its site, and its conditions read
    NULL where a flag says so; the agent accepts each site query as written."""
    view = analyze("SELECT l.at, s.team FROM crm.logs l JOIN hr.staff s ON s.team <> l.message AND s.id = 3", dialect)
    assert view.key == [] and view.multiset == {
        "count": "__ds_count",
        "nulls": {"at": "__ds_null_at", "team": "__ds_null_team"},
    }
    assert [s.key for s in view.sites] == [
        ["at", "l_message", "__ds_null_at", "__ds_null_l_message"],
        ["team", "__ds_null_team"],
    ]
    assert view.assembly == (
        "SELECT `s0`.`at` AS `at`, `s0`.`l_message` AS `l_message`, `s0`.`__ds_null_at` AS `__ds_null_at`, "
        "`s0`.`__ds_null_l_message` AS `__ds_null_l_message`, `s0`.`__ds_count` AS `__ds_count_0`, "
        "`s1`.`team` AS `team`, `s1`.`__ds_null_team` AS `__ds_null_team`, `s1`.`__ds_count` AS `__ds_count_1` "
        "FROM `site_0` AS `s0` JOIN `site_1` AS `s1` ON CASE WHEN `s1`.`__ds_null_team` THEN NULL ELSE `s1`.`team` END "
        "<> CASE WHEN `s0`.`__ds_null_l_message` THEN NULL ELSE `s0`.`l_message` END"
    )
    tables = {"crm": {t.name: t for t in TABLES}, "hr": {STAFF.name: STAFF}}
    for site in view.sites:
        query = validate_site_query(site.sql, site.key, tables[site.source], dialect)
        assert query.grouped and [c.name for c in query.columns] == [c.name for c in site.columns]
    assert "WHERE" in view.sites[1].sql  # s.id = 3 pushed down, then grouped
    left = analyze("SELECT c.id, l.message FROM crm.customers c LEFT JOIN crm.logs l ON l.message = c.name", dialect)
    assert left.left_sites == [1] and len(left.sites) == 2 and "LEFT JOIN" in left.assembly
    assert ViewDef.from_json(left.to_json()) == left and left.to_json()["format"] == 4
    # a NOT NULL column is read as it is, and a condition on it stays a plain equality
    equi = analyze(
        "SELECT l.message, s.team FROM crm.logs l JOIN crm.customers c ON c.name = l.message JOIN hr.staff s ON s.id = c.id"
    )
    assert equi.assembly.endswith("ON `s1`.`s_id` = `s0`.`c_id`")


# --- several sites (golden cases with data: test_decomposition.py) ------------------------


def test_several_sources_decompose_into_sites_and_an_assembly(dialect, schemas):
    view = analyze_view(
        "SELECT e.id, e.name, s.id AS sid FROM crm.employees e JOIN hr.staff s ON s.id = e.manager_id WHERE s.team = 'ops'",
        schemas,
    )
    assert [s.source for s in view.sites] == ["crm", "hr"]
    assert (
        view.sites[0].sql
        == 'SELECT "e"."id" AS "id", "e"."name" AS "name", "e"."manager_id" AS "e_manager_id" FROM "employees" AS "e"'
    )
    assert view.sites[1].sql == 'SELECT "s"."id" AS "sid" FROM "staff" AS "s" WHERE "s"."team" = \'ops\''
    assert [c.name for c in view.sites[0].columns] == ["id", "name", "e_manager_id"]
    # each site keeps its table's key; the view's key drops staff's, which s.id = e.manager_id implies
    assert view.sites[0].key == ["id"] and view.sites[1].key == ["sid"] and view.key == ["id"]
    assert view.assembly == (
        "SELECT `s0`.`id` AS `id`, `s0`.`name` AS `name`, `s1`.`sid` AS `sid` "
        "FROM `site_0` AS `s0` JOIN `site_1` AS `s1` ON `s1`.`sid` = `s0`.`e_manager_id`"
    )


def test_single_site_view_has_no_assembly():
    view = analyze(
        "SELECT c.id, l.order_no, l.line FROM crm.customers c JOIN crm.order_lines l ON l.customer_id = c.id"
    )
    assert view.assembly is None
    assert "assembly" not in view.to_json()


def test_tables_of_one_source_not_joined_there_are_separate_sites():
    view = analyze("SELECT c.id, e.id AS eid FROM crm.customers c JOIN crm.employees e ON e.id = 1")
    assert [s.sql for s in view.sites] == [
        'SELECT "c"."id" AS "id" FROM "customers" AS "c"',
        'SELECT "e"."id" AS "eid" FROM "employees" AS "e" WHERE "e"."id" = 1',
    ]
    assert (
        view.assembly
        == "SELECT `s0`.`id` AS `id`, `s1`.`eid` AS `eid` FROM `site_0` AS `s0` CROSS JOIN `site_1` AS `s1`"
    )


def test_extra_columns_avoid_output_names_and_reserved_prefix():
    view = analyze(
        "SELECT __e.id, __e.name AS e_manager_id, s.id AS sid FROM crm.employees __e JOIN hr.staff s ON s.id = __e.manager_id"
    )
    assert [c.name for c in view.sites[0].columns] == ["id", "e_manager_id", "e_manager_id_2"]
    assert view.assembly.endswith("ON `s1`.`sid` = `s0`.`e_manager_id_2`")


def test_column_needed_by_the_warehouse_reuses_its_output_name():
    view = analyze(
        "SELECT e.id, e.manager_id AS boss, s.id AS sid FROM crm.employees e JOIN hr.staff s ON s.id = e.manager_id"
    )
    assert [c.name for c in view.sites[0].columns] == ["id", "boss"]
    assert view.assembly.endswith("ON `s1`.`sid` = `s0`.`boss`")


def test_view_json_without_assembly_loads():
    view = analyze("SELECT e.id, s.id AS sid FROM crm.employees e JOIN hr.staff s ON s.id = e.id")
    data = view.to_json()
    assert data["assembly"] == view.assembly
    assert ViewDef.from_json(data) == view
    del data["assembly"]
    assert ViewDef.from_json(data).assembly is None


def test_unknown_source_among_several():
    with pytest.raises(UnknownSourceError) as info:
        analyze("SELECT e.id, x.id AS xid FROM crm.employees e JOIN nope.staff x ON x.id = e.id")
    assert info.value.detail.startswith("source 'nope' is not registered: register it as a source first")


def test_left_join_across_sources_pads_in_the_warehouse():
    view = analyze("SELECT e.id, s.id AS sid, s.team FROM crm.employees e LEFT JOIN hr.staff s ON s.id = e.id")
    assert view.key == ["id"] and view.left_sites == [1]
    assert "LEFT JOIN `site_1`" in view.assembly


def test_left_join_within_a_source_is_a_site_of_its_own():
    view = analyze("SELECT c.id, e.id AS eid FROM crm.customers c LEFT JOIN crm.employees e ON e.id = c.id")
    assert [s.source for s in view.sites] == ["crm", "crm"] and view.left_sites == [1]
    assert view.key == ["id"]


def test_left_joined_table_read_outside_its_on_condition():
    rejected(
        "SELECT e.id, s.id AS sid FROM crm.employees e LEFT JOIN hr.staff s ON s.id = e.id WHERE s.team IS NULL",
        "joined by LEFT JOIN",
        "WHERE reads s.team",
    )


def test_left_join_that_may_match_several_rows_keeps_their_key():
    view = analyze("SELECT e.id, m.id AS mid FROM crm.employees e LEFT JOIN crm.employees m ON m.manager_id = e.id")
    assert view.key == ["id", "mid"] and view.left_sites == [1]


def test_unknown_column_of_another_source():
    rejected(
        "SELECT e.id, s.id AS sid FROM crm.employees e JOIN hr.staff s ON s.nope = e.id",
        "column 'nope' does not exist",
        "hr.staff",
    )


def test_every_site_needs_its_key():
    rejected(
        "SELECT e.id, s.team FROM crm.employees e JOIN hr.staff s ON s.id = e.id",
        "hr.staff",
        "primary key (id)",
        "must be selected",
    )


@pytest.mark.parametrize(
    ("where", "needles"),
    [
        pytest.param("e.id / s.id > 1", ("division is not supported",), id="division"),
        pytest.param("e.name LIKE s.team", ("LIKE is not supported",), id="like"),
        pytest.param("e.name = s.id", ("compares values of different kinds", "number and text"), id="text-vs-number"),
        pytest.param("s.id BETWEEN e.id AND e.name", ("different kinds",), id="between-kinds"),
        pytest.param("s.team + e.id > 1", ("arithmetic works on numbers only", "text value"), id="arithmetic-on-text"),
        pytest.param("e.id + s.id", ("is a number value, not a condition",), id="not-a-condition"),
        pytest.param("e.id = 1 OR s.id", ("not a condition",), id="or-with-number"),
    ],
)
def test_conditions_across_sites_spark_would_evaluate_differently(where, needles):
    detail = rejected(
        f"SELECT e.id, s.id AS sid FROM crm.employees e JOIN hr.staff s ON s.id = e.id WHERE {where}",
        "several sites",
        *needles,
    )
    assert "division and LIKE are supported in conditions that read one site only" in detail


def test_division_and_like_within_one_site_are_pushed_down():
    view = analyze(
        "SELECT e.id, s.id AS sid FROM crm.employees e JOIN hr.staff s ON s.id = e.id WHERE e.id / 2 = 1 AND s.team LIKE 'o%'"
    )
    assert view.sites[0].sql.endswith('WHERE "e"."id" / 2 = 1')
    assert view.sites[1].sql.endswith('WHERE "s"."team" LIKE \'o%\'')


def test_conditions_across_sites_may_compare_with_literals_and_null():
    view = analyze(
        "SELECT e.id, s.id AS sid FROM crm.employees e JOIN hr.staff s ON s.id = e.id WHERE (e.name = s.team OR s.team IS NULL OR e.name IN ('a', NULL)) AND e.id - s.id * 2 <> -1"
    )
    assert view.assembly.endswith(
        "ON `s1`.`sid` = `s0`.`id` AND (`s0`.`e_name` = `s1`.`s_team` OR `s1`.`s_team` IS NULL OR `s0`.`e_name` IN ('a', NULL)) "
        "AND `s0`.`id` - `s1`.`sid` * 2 <> -1"
    )


def test_view_def_error_is_a_value_error():
    with pytest.raises(ValueError):
        analyze("SELECT 1")
