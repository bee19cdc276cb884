"""The view key without the keys its joins imply (warehouse/viewdef/keys.py), on the
schemas of a golden case: customers (key id) and invoices (key no, cust_id an int)."""

from __future__ import annotations

import pytest

from tests.unit.warehouse.viewdef.test_decomposition import CASES, schemas_of
from warehouse.viewdef import analyze_view

SCHEMAS = schemas_of(CASES["predicates_one_side"])
SELECT = "SELECT c.id, c.name, i.no, i.total FROM shop.customers c JOIN erp.invoices i ON "


@pytest.mark.parametrize(
    ("on", "key", "why"),
    [
        # each invoice has one customer: the customer's key is implied
        ("i.cust_id = c.id", ["no"], "i.cust_id = c.id"),
        # the same through WHERE, and with the sides swapped
        ("TRUE WHERE c.id = i.cust_id", ["no"], "c.id = i.cust_id"),
        # a join on columns that are no table's key implies nothing
        ("i.state = c.region", ["id", "no"], None),
        # an equality under OR holds for some rows only
        ("i.cust_id = c.id OR i.total > 5", ["id", "no"], None),
        # a key equated to a constant is fixed by it
        ("i.total > 0 WHERE c.id = 3", ["no"], "fixed by the conditions"),
        # both keys equated (1:1): the first table's key stays
        ("i.no = c.id", ["id"], "i.no = c.id"),
    ],
)
def test_a_key_implied_by_the_join_leaves_the_view_key(on, key, why):
    view = analyze_view(SELECT + on, SCHEMAS)
    assert view.key == key
    dropped = [p for p in view.key_derivation if not p["in_view_key"]]
    if why is None:
        assert not dropped
    else:
        assert len(dropped) == 1 and why in dropped[0]["reason"], view.key_derivation


def test_a_definition_stored_before_keys_were_derived_keeps_its_key():
    view = analyze_view(SELECT + "i.cust_id = c.id", SCHEMAS)
    stored = view.to_json()
    del stored["key_derivation"]
    stored["key"] = ["id", "no"]
    old = type(view).from_json(stored)
    assert old.key == ["id", "no"] and old.key_derivation is None


LEFT = "SELECT i.no, i.total, c.id, c.name FROM erp.invoices i LEFT JOIN shop.customers c ON "


@pytest.mark.parametrize(
    ("on", "key"),
    [
        # the customer's whole key fixed from the invoice: at most one partner, keyed by the invoice
        ("c.id = i.cust_id", ["no"]),
        # its key fixed by a constant: one partner at most for every invoice
        ("c.id = 3 AND c.region = 'north'", ["no"]),
    ],
)
def test_a_left_join_matching_at_most_one_row_leaves_the_view_key(on, key):
    assert analyze_view(LEFT + on, SCHEMAS).key == key


def test_a_left_join_fixes_the_joined_table_from_the_others_never_the_reverse():
    """c.credit = i.total in the ON holds only where a partner matched: the invoice's column
    is not fixed by the customer's (else the invoice's key would look implied by it)."""
    sql = (
        "SELECT i.no, i.total, c.id, c.name, d.id AS did FROM erp.invoices i JOIN shop.customers d ON d.credit = i.cust_id "
        "LEFT JOIN shop.customers c ON c.id = i.cust_id AND c.credit = d.id"
    )
    view = analyze_view(sql, SCHEMAS)
    assert [p["in_view_key"] for p in view.key_derivation] == [True, True, False]
