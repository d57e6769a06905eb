"""Built-ins edit and read image fields in the JSON text where a regex can, and parse
where it cannot: both ways must give the same images, for every kind of value and for
images built to fool a text search (the key inside strings, in nested objects, escapes)."""

from __future__ import annotations

import random

import orjson
import pytest

from mysqlcdc.transforms.batch import EventBatch
from mysqlcdc.transforms.builtins import Filter, Hash, Mask, Route, Truncate

from tests.unit.transforms.rows import batch, ctx, row

pytestmark = pytest.mark.unit

TRICKY = [
    {"id": 1, "f": "plain", "g": 2},
    {"id": 2, "f": 12345, "g": "x"},
    {"id": 3, "f": None, "g": "y"},
    {"id": 4, "g": "no f at all"},
    {"id": 5, "f": 'has "quotes" and \\ backslash', "g": 1},
    {"id": 6, "f": "ünïcödé ✓ 𝄞 snowman ☃", "g": 1},
    {"id": 7, "f": 1.5, "g": 1e300},
    {"id": 8, "f": True, "g": False},
    {"id": 9, "f": -0.0, "g": -7},
    {"id": 10, "f": ["a", "b"], "g": {"f": "nested"}},
    {"id": 11, "doc": {"f": "nested first"}, "f": "top", "g": 1},
    {"id": 12, "doc": '{"f":"in a string"}', "f": "top2"},
    {"id": 13, "note": ',"f":"fake"', "f": "real"},
    {"f": "first member", "id": 14},
    {"id": 15, "f": {"a": 1}, "g": 1},
    {"id": 16, "f": "", "g": 1},
    {"id": 17, "f": "ab", "g": 1},
    {"id": 18, "f": "line\nbreak\ttab", "g": 1},
    {"id": 19, "f": 18446744073709551615, "g": 1},
    {"id": 20, "f": -42, "g": "{"},
    {"id": 21, "{": "brace key", "f": "after a brace key"},
]


def _rows(images):
    out = []
    for i, image in enumerate(images):
        if i % 3 == 0:
            out.append(row("u", "t", before=dict(image, g="old"), after=image, key={"f": "k"}))
        elif i % 3 == 1:
            out.append(row("c", "t", after=image, key={"id": i}))
        else:
            out.append(row("d", "t", before=image, key={"id": i}))
    return out


def _images(ev: EventBatch):
    b = ev.to_batch()
    return {name: [None if t is None else orjson.loads(t) for t in b.column(name).to_pylist()]
            for name in ("before", "after", "key")}


def _both_ways(transform, images):
    """(through the text path, through parsed images) for the same rows."""
    fast = transform.apply(EventBatch(batch(*_rows(images))), ctx())
    slow_in = EventBatch(batch(*_rows(images)))
    for name in ("before", "after", "key"):
        slow_in.images(name)                 # parsed first: edits go through the dicts
    slow = transform.apply(slow_in, ctx())
    return fast, slow


EDITS = [
    Mask(["shop.t.f"], keep_last=4), Mask(["shop.t.f"], stars=3), Mask(["shop.t.f"]),
    Mask(["shop.t.f"], keep_last=2, char="•"), Mask(["shop.t.f"], keep_last=1, char='"'),
    Hash(["shop.t.f"], salt="pepper"), Truncate(["shop.t.f"], length=3),
    Mask(["shop.t.f", "shop.t.g"], keep_last=1), Hash(["shop.*.f"], salt="s"),
]


# ids the same in every process (a repr may hold an address)
@pytest.mark.parametrize("transform", EDITS,
                         ids=[f"{type(t).__name__.lower()}-{i}" for i, t in enumerate(EDITS)])
def test_text_edits_equal_parsed_edits(transform):
    fast, slow = _both_ways(transform, TRICKY)
    assert _images(fast) == _images(slow)
    # and something was edited: the top-level plain string of row 1
    assert _images(fast)["after"][0]["f"] != "plain"


def test_only_the_top_level_member_is_edited():
    fast, _ = _both_ways(Mask(["shop.t.f"], stars=1), TRICKY)
    images = {img["id"]: img for img in _images(fast)["before"] + _images(fast)["after"]
              if img and "id" in img}           # an update's after image wins
    assert images[11] == {"id": 11, "doc": {"f": "nested first"}, "f": "*", "g": 1}
    assert images[12]["doc"] == '{"f":"in a string"}' and images[12]["f"] == "*"
    assert images[13] == {"id": 13, "note": ',"f":"fake"', "f": "*"}
    assert images[10]["g"] == {"f": "nested"}
    assert images[4] == {"id": 4, "g": "no f at all"}


def test_the_key_is_edited_too():
    fast, slow = _both_ways(Hash(["shop.t.f"], salt="s"), TRICKY)
    keys = _images(fast)["key"]
    assert keys[0]["f"] != "k" and keys == _images(slow)["key"]


@pytest.mark.parametrize("expr", ["after.f is not None", "after.f == 'top'",
                                  "after.g == 1", "before.f == 12345 or after.f == 12345",
                                  "after.doc is not None", "after.f == 'real'"])
def test_text_reads_equal_parsed_reads(expr):
    fast, slow = _both_ways(Filter(keep=expr), TRICKY)
    assert _images(fast) == _images(slow)
    assert 0 < fast.num_rows < len(TRICKY)


def test_route_reads_fields_from_text():
    fast, slow = _both_ways(Route(template="x.{after.f}"), TRICKY)
    assert fast.column("topic").to_pylist() == slow.column("topic").to_pylist()
    assert fast.column("topic").to_pylist()[13] == "x.first member"


def test_a_chain_mixing_text_and_parsed_images_agrees_on_random_images():
    rnd = random.Random(7)
    pool = ["a", "é", '"', "\\", "{", "}", ",", ":", '"f":', "x" * 30, "\n", "☃"]

    def value():
        kind = rnd.randrange(7)
        if kind == 0:
            return None
        if kind == 1:
            return rnd.randrange(-10**6, 10**6)
        if kind == 2:
            return rnd.random() * 100
        if kind == 3:
            return {"f": value()} if rnd.random() < 0.5 else [value()]
        return "".join(rnd.choice(pool) for _ in range(rnd.randrange(0, 8)))

    images = []
    for i in range(400):
        names = ["id", "f", "g", "h"]
        rnd.shuffle(names)
        image = {n: (i if n == "id" else value()) for n in names if rnd.random() < 0.9}
        image.setdefault("id", i)
        images.append(image)
    chain = [Mask(["shop.t.f"], keep_last=2), Hash(["shop.t.g"], salt="s"),
             Truncate(["shop.t.h"], length=2), Filter(drop="after.h == 'ab'")]

    def run(parsed_first):
        ev = EventBatch(batch(*_rows(images)))
        if parsed_first:
            for name in ("before", "after", "key"):
                ev.images(name)
        for t in chain:
            ev = t.apply(ev, ctx())
        return _images(ev)

    assert run(False) == run(True)


def test_plain_images_are_never_parsed():
    images = [{"id": i, "f": f"value-{i}", "g": i} for i in range(50)]
    ev = EventBatch(batch(*_rows(images)))
    for t in (Mask(["shop.t.f"], keep_last=2), Hash(["shop.t.g"], salt="s"),
              Filter(keep="after.g is not None or op == 'd'")):
        ev = t.apply(ev, ctx())
    assert not any(ev.is_parsed(name) for name in ("before", "after", "key"))
    out = _images(ev)
    assert out["after"][1]["f"] == "*****-1" and len(out["after"][1]["g"]) == 64
