"""Built-in transforms over envelope batches (no Spark): values, scope, keys, untouched rows."""

from __future__ import annotations

import hashlib

import orjson
import pytest

from mysqlcdc.transforms.builtins import (AddField, DropColumns, Filter, Hash, Mask, Rename, Route,
                                          Truncate)
from mysqlcdc.transforms.helpers import hash as hash_helper
from mysqlcdc.transforms.helpers import mask as mask_helper

from tests.unit.transforms.rows import after, ctx, events, row

pytestmark = pytest.mark.unit


def _users():
    return events(
        row("c", "user", after={"id": 1, "email": "ada@example.com", "card": "4111111111111111"}),
        row("u", "user", before={"id": 2, "email": "old@x.io", "card": "12"},
            after={"id": 2, "email": "new@x.io", "card": None}),
        row("d", "user", before={"id": 3, "email": "gone@x.io", "card": "999"}),
        row("c", "order", after={"id": 9, "email": "o@x.io", "note": "é" * 10}),
        row("s", "user", before={"db": "shop", "table": "user"}, after={"db": "shop",
                                                                        "table": "user"}),
    )


def _col(ev, name):
    return [None if t is None else orjson.loads(t) for t in ev.to_batch().column(name).to_pylist()]


def test_mask_keep_last_matches_the_helper_and_leaves_other_tables():
    ev = Mask(["shop.user.card"], keep_last=4).apply(_users(), ctx())
    a, b = _col(ev, "after"), _col(ev, "before")
    assert a[0]["card"] == mask_helper("4111111111111111") == "************1111"
    assert a[1]["card"] is None and b[1]["card"] == "**" and b[2]["card"] == "***"
    assert a[3] == {"id": 9, "email": "o@x.io", "note": "é" * 10}
    assert a[0]["email"] == "ada@example.com"


def test_mask_stars_hides_length_and_masks_the_key_too():
    ev = events(row("c", "user", after={"email": "a@b.c", "v": 1}, key={"email": "a@b.c"}))
    ev = Mask(["shop.user.email"], stars=3).apply(ev, ctx())
    assert _col(ev, "after")[0] == {"email": "***", "v": 1}
    assert _col(ev, "key")[0] == {"email": "***"}


def test_untouched_rows_keep_their_exact_text():
    original = _users().to_batch()
    ev = Mask(["shop.user.card"], keep_last=4).apply(_users(), ctx())
    out = ev.to_batch()
    assert out.column("after")[3] == original.column("after")[3]
    assert out.column("before")[4] == original.column("before")[4]     # a schema change
    assert out.column("after")[4] == original.column("after")[4]


def test_hash_is_salted_sha256_of_the_text_and_equal_values_stay_equal():
    ev = events(row("c", "user", after={"id": 1, "email": "a@b.c"}),
                row("c", "user", after={"id": 2, "email": "a@b.c"}),
                row("c", "user", after={"id": 3, "email": None}))
    ev = Hash(["*.user.email", "shop.user.id"], salt="pepper").apply(ev, ctx())
    a = _col(ev, "after")
    expected = hashlib.sha256(b"pepper" + b"a@b.c").hexdigest()
    assert a[0]["email"] == a[1]["email"] == expected == hash_helper("a@b.c", "pepper")
    assert a[2]["email"] is None
    assert a[0]["id"] == hashlib.sha256(b"pepper1").hexdigest()
    assert "pepper" not in repr(Hash(["a.b.c"], salt="pepper"))


def test_truncate_counts_characters():
    ev = Truncate(["shop.order.note", "shop.order.id"], 3).apply(_users(), ctx())
    assert after(ev, 3) == {"id": 9, "email": "o@x.io", "note": "ééé"}    # ints untouched


def test_drop_columns_keeps_the_key():
    ev = events(row("u", "user", before={"id": 1, "ssn": "x", "v": 1},
                    after={"id": 1, "ssn": "y", "v": 2}))
    ev = DropColumns(["shop.user.ssn", "shop.user.id"]).apply(ev, ctx())
    assert _col(ev, "after")[0] == {"v": 2} and _col(ev, "before")[0] == {"v": 1}
    assert _col(ev, "key")[0] == {"id": 1}


def test_rename_keeps_order_and_renames_in_the_key():
    ev = events(row("c", "user", after={"id": 1, "mail": "x", "v": 2}))
    ev = Rename({"shop.user.id": "user_id", "shop.*.mail": "email"}).apply(ev, ctx())
    assert list(after(ev, 0)) == ["user_id", "email", "v"]
    assert _col(ev, "key")[0] == {"user_id": 1}


def test_filter_keep_drop_and_scope():
    ev = Filter(drop="op == 'd'").apply(_users(), ctx())
    assert ev.to_batch().column("op").to_pylist() == ["c", "u", "c", "s"]
    ev = Filter(tables=["shop.user"], ops=["c", "u"], keep="after.card is not None") \
        .apply(_users(), ctx())
    # of the user inserts and updates, only those with a card; other events pass
    assert ev.to_batch().column("op").to_pylist() == ["c", "d", "c", "s"]
    ev = Filter(tables=["shop.order"]).apply(_users(), ctx())
    assert ev.to_batch().column("table").to_pylist() == ["order"]


def test_filter_then_edit_keeps_what_was_parsed_consistent():
    ev = Filter(keep="after.email != 'new@x.io'", ops=["u"]).apply(_users(), ctx())
    ev = Mask(["shop.user.email"], stars=1).apply(ev, ctx())
    assert [a and a.get("email") for a in after(ev)] == ["*", None, "o@x.io", None]


def test_route_template_field_and_scope():
    ev = Route(template="cdc.{db}.{table}.{key.id}").apply(_users(), ctx())
    assert ev.to_batch().column("topic").to_pylist()[:4] == [
        "cdc.shop.user.1", "cdc.shop.user.2", "cdc.shop.user.3", "cdc.shop.order.9"]
    ev = Route(field="after.email", column="target", tables=["shop.order"]).apply(_users(), ctx())
    assert ev.to_batch().column("target").to_pylist() == [None, None, None, "o@x.io", None]


def test_add_field_constant_expression_and_column():
    ev = AddField("region", value="eu", target="both").apply(_users(), ctx())
    assert after(ev, 0)["region"] == "eu" and _col(ev, "before")[1]["region"] == "eu"
    assert "region" not in (_col(ev, "before")[4] or {})      # not on schema changes
    ev = AddField("n", expression="key.id * 10", target="column", type="long").apply(
        _users(), ctx())
    assert ev.to_batch().column("n").to_pylist() == [10, 20, 30, 90, None]
