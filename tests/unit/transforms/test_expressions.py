"""The filter/add_field expression language: what it accepts, refuses and computes."""

from __future__ import annotations

import pytest

from mysqlcdc.transforms.builtins import field_lookup
from mysqlcdc.transforms.expressions import ExpressionError, evaluate, evaluate_values, parse

from tests.unit.transforms.rows import events, row

pytestmark = pytest.mark.unit


def _rows():
    return events(
        row("c", "orders", after={"id": 1, "status": "deleted", "amount": "120.50", "n": 3,
                                  "tags": ["a"], "name": "Ada"}),
        row("u", "orders", before={"id": 2, "status": "new", "amount": "99.99", "n": 4},
            after={"id": 2, "status": "paid", "amount": "100.00", "n": 5, "name": None}),
        row("d", "users", before={"id": 3, "email": "X@Example.com"}),
        row("c", "orders", after={"id": 4, "status": 7, "amount": "not a number"}),
    )


def _eval(text: str) -> list[bool]:
    ev = _rows()
    return evaluate(parse(text), field_lookup(ev), ev.num_rows).to_pylist()


@pytest.mark.parametrize("text, expected", [
    ("op == 'd'", [False, False, True, False]),
    ("op != 'd' and table == 'orders'", [True, True, False, True]),
    ("table in ('users', 'nope')", [False, False, True, False]),
    ("op not in ['c']", [False, True, True, False]),
    ("after.status == 'deleted'", [True, False, False, False]),
    ("after.status != 'deleted'", [False, True, False, True]),          # null compares false
    ("after.amount >= 100", [True, True, False, False]),                # DECIMAL text as a number
    ("after.amount > before.amount", [False, True, False, False]),
    ("after.n * 2 == 10", [False, True, False, False]),
    ("after.status == 7", [False, False, False, True]),
    ("after.name is None", [False, True, True, True]),                  # missing = null
    ("after.name is not None", [True, False, False, False]),
    ("after['status'] == 'paid' or op == 'd'", [False, True, True, False]),
    ("not (op == 'c')", [False, True, True, False]),
    ("endswith(lower(before.email), '@example.com')", [False, False, True, False]),
    ("len(after.status) == 4", [False, True, False, False]),
    ("startswith(after.status, 'del')", [True, False, False, False]),
    ("contains(table, 'der')", [True, True, False, True]),
    ("seq > 0", [True, True, True, True]),
    ("true", [True, True, True, True]),
    ("after.status == null", [False, False, True, False]),
])
def test_predicates(text, expected):
    assert _eval(text) == expected


def test_values_for_add_field():
    ev = _rows()
    assert evaluate_values(parse("db + '.' + table"), field_lookup(ev), 4) == \
        ["shop.orders", "shop.orders", "shop.users", "shop.orders"]
    assert evaluate_values(parse("after.n * 10"), field_lookup(ev), 4) == [30, 50, None, None]
    assert evaluate_values(parse("after.amount / 2"), field_lookup(ev), 4)[:2] == [60.25, 50.0]
    assert evaluate_values(parse("'x'"), field_lookup(ev), 4) == ["x"] * 4


@pytest.mark.parametrize("text, fragment", [
    ("__import__('os')", "functions allowed"),
    ("after.x.y == 1", "fields are written"),
    ("os.system('x')", "functions allowed"),
    ("after == 1", "row image"),
    ("op in after.x", "'in' needs a list of literals"),
    ("op is 'c'", "compare with None only"),
    ("lambda: 1", "Lambda is not allowed"),
    ("[x for x in op]", "ListComp is not allowed"),
    ("op ==", "not a valid expression"),
    ("after[0] == 1", "with a string"),
    ("op ** 2", "Pow"),
    ("startswith(op, table)", "string literal"),
])
def test_refused(text, fragment):
    with pytest.raises(ExpressionError, match=fragment):
        parse(text)


def test_refs_name_the_images_to_parse():
    expr = parse("after.a == 1 and key.id > 2 and op == 'u'")
    assert expr.images() == {"after", "key"}
