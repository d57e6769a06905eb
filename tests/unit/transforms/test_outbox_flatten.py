"""The outbox router and flattening over envelope batches (no Spark): routing, state by seq,
replays that answer the same, pruning, re-emission."""

from __future__ import annotations

import orjson
import pytest

from mysqlcdc.errors import TransformError
from mysqlcdc.transforms.api import TaskPlace, TransformContext
from mysqlcdc.transforms.chain import Chain
from mysqlcdc.transforms.flatten import Flatten, Join
from mysqlcdc.transforms.outbox import Outbox

from tests.unit.transforms.rows import batch, events, row

pytestmark = pytest.mark.unit


def _outbox_row(op, id_, kind, agg, payload, **kw):
    image = {"id": id_, "aggregatetype": kind, "aggregateid": agg, "type": "Created",
             "payload": payload}
    return row(op, "cdc_outbox", after=image if op != "d" else None,
               before=image if op == "d" else None, **kw)


def test_outbox_routes_inserts_only():
    ev = events(row("c", "reservation", after={"id": 1}),
                _outbox_row("c", "e1", "reservation", 1, '{"id": 1, "n": 18446744073709551615}'),
                _outbox_row("c", "e2", "user", "u-7", {"x": [1, 2]}),
                _outbox_row("d", "e1", "reservation", 1, "{}"),
                _outbox_row("u", "e2", "user", "u-7", "{}"))
    out = Outbox("shop.cdc_outbox").apply(ev, TransformContext(TaskPlace("p", "0", "q", 0, 0, 0)))
    b = out.to_batch().to_pylist()
    assert [r["topic"] for r in b] == ["outbox.event.reservation", "outbox.event.user"]
    assert [r["key"] for r in b] == ["1", "u-7"]
    assert b[0]["after"] == b[0]["message_value"] == '{"id": 1, "n": 18446744073709551615}'
    assert orjson.loads(b[1]["message_value"]) == {"x": [1, 2]}
    assert orjson.loads(b[0]["message_headers"]) == {"id": "e1", "eventType": "Created",
                                                     "aggregateType": "reservation"}
    assert {r["op"] for r in b} == {"c"} and b[0]["before"] is None


def test_outbox_payload_that_is_not_json():
    ev = events(_outbox_row("c", "e1", "r", 1, "{not json"))
    ctx = TransformContext(TaskPlace("p", "0", "q", 0, 0, 0))
    with pytest.raises(TransformError, match="payload is not JSON"):
        Outbox("shop.cdc_outbox").apply(ev, ctx)


# --- flatten ------------------------------------------------------------------------

JOINS = [Join("userid", "shop.user", "userid", "user"),
         Join("thingid", "shop.thing", "thingid", "thing")]


def _run(flatten, rows, tmp_path, batch_id, shuffled=False):
    chain = Chain([flatten], state_dir=str(tmp_path))
    b = batch(*rows)
    parts = [b.slice(1), b.slice(0, 1)] if shuffled else [b]     # tasks' order is arbitrary
    out = list(chain.run_stage(0, parts, TaskPlace("p", "0", "q", batch_id, 0, 0), b.schema))
    return [r for part in out for r in part.to_pylist()]


def _reservations(out):
    return [(r["op"], orjson.loads(r["after"] or r["before"])) for r in out
            if r["table"] == "reservation"]


def test_flatten_embeds_rows_as_of_the_change(tmp_path):
    first = [row("r", "user", after={"userid": 7, "name": "old"}, seq=10),
             row("r", "thing", after={"thingid": 3, "label": "kayak"}, seq=11)]
    _run(Flatten("shop.reservation", JOINS), first, tmp_path, 0)
    second = [row("c", "reservation", after={"id": 1, "userid": 7, "thingid": 3}, seq=20),
              row("u", "user", before={"userid": 7, "name": "old"},
                  after={"userid": 7, "name": "new"}, seq=21),
              row("c", "reservation", after={"id": 2, "userid": 7, "thingid": 4}, seq=22)]
    out = _run(Flatten("shop.reservation", JOINS), second, tmp_path, 1, shuffled=True)
    (_, r1), (_, r2) = _reservations(out)
    assert r1["user"] == {"userid": 7, "name": "old"}       # the later update does not leak
    assert r1["thing"] == {"thingid": 3, "label": "kayak"}
    assert r2["user"] == {"userid": 7, "name": "new"} and r2["thing"] is None
    assert [r["seq"] for r in out] == sorted(r["seq"] for r in out)
    # batch 1 replayed after a crash: the state already holds its versions; same output
    assert _run(Flatten("shop.reservation", JOINS), second, tmp_path, 1) == out


def test_flatten_under_a_snapshot_read_after_the_changes_asking(tmp_path):
    """A snapshot's reads carry their high watermark as seq, later than the stream's
    changes made while the snapshot ran, which arrive after them (the stream held at the
    snapshot's start). A change before a read gets the row as it was then: the image before
    the row's first change in the batch between the two, else the read (never null for a
    row that existed)."""
    reads = [row("r", "user", after={"userid": u, "name": f"read{u}"}, seq=50) for u in (7, 8, 9)]
    reads.append(row("r", "user", after={"userid": 11, "name": "read11"}, seq=52))
    reads.append(row("r", "user", after={"userid": 12, "name": "again"}, seq=53))
    _run(Flatten("shop.reservation", JOINS[:1]), reads, tmp_path, 0)
    stream = [row("c", "reservation", after={"id": 1, "userid": 7}, seq=20),
              row("c", "reservation", after={"id": 2, "userid": 9}, seq=21),
              row("c", "reservation", after={"id": 3, "userid": 11}, seq=22),
              row("c", "reservation", after={"id": 4, "userid": 8}, seq=25),
              row("d", "user", before={"userid": 12, "name": "gone"}, seq=26),
              row("c", "reservation", after={"id": 6, "userid": 12}, seq=27),
              row("u", "user", before={"userid": 7, "name": "orig"},
                  after={"userid": 7, "name": "read7"}, seq=30),
              row("c", "user", after={"userid": 9, "name": "read9"}, seq=35),
              row("c", "reservation", after={"id": 5, "userid": 7}, seq=40),
              row("u", "reservation", before={"id": 4, "userid": 8},
                  after={"id": 4, "userid": 8, "x": 1}, seq=60)]
    out = _run(Flatten("shop.reservation", JOINS[:1]), stream, tmp_path, 1)
    users = [(r["id"], r["user"]) for _, r in _reservations(out)]
    assert users == [
        (1, {"userid": 7, "name": "orig"}),     # before its change at 30, in this batch
        (2, None),                              # created at 35: not there yet at 21
        (3, {"userid": 11, "name": "read11"}),  # no change in the batch: as the snapshot read it
        (4, {"userid": 8, "name": "read8"}),
        (6, None),                              # deleted at 26 (created again later)
        (5, {"userid": 7, "name": "read7"}),    # its change at 30 is a version below 40
        (4, {"userid": 8, "name": "read8"})]    # after the read: the read itself
    # replayed after a crash over the state it left: the same rows
    assert _run(Flatten("shop.reservation", JOINS[:1]), stream, tmp_path, 1) == out


def test_flatten_a_snapshots_rows_read_before_the_rows_they_reference(tmp_path):
    """A snapshot reads reservations, then users, at one high watermark: the user reads
    sort after the reservations' (chunk order) in the same batch, or arrive in a later one."""
    first = [row("r", "reservation", after={"id": 1, "userid": 7}, seq=100_001),
             row("r", "reservation", after={"id": 2, "userid": 8}, seq=100_002),
             row("r", "user", after={"userid": 7, "name": "seven"}, seq=100_101)]
    out = _run(Flatten("shop.reservation", JOINS[:1]), first, tmp_path, 0)
    assert [(r["id"], r["user"]) for _, r in _reservations(out)] == [
        (1, {"userid": 7, "name": "seven"}), (2, None)]      # user 8's read is not here yet
    second = [row("r", "user", after={"userid": 8, "name": "eight"}, seq=100_102),
              row("c", "reservation", after={"id": 3, "userid": 8}, seq=90_000)]
    out = _run(Flatten("shop.reservation", JOINS[:1]), second, tmp_path, 1)
    assert [(r["id"], r["user"]) for _, r in _reservations(out)] == [
        (3, {"userid": 8, "name": "eight"})]


def test_flatten_deletes_truncates_and_pruning(tmp_path):
    f = Flatten("shop.reservation", JOINS[:1], keep_referenced=False)
    _run(f, [row("c", "user", after={"userid": 1, "v": 1}, seq=1),
             row("u", "user", before={"userid": 1, "v": 1}, after={"userid": 1, "v": 2}, seq=2)],
         tmp_path, 0)
    out = _run(f, [row("u", "user", before={"userid": 1, "v": 2}, after={"userid": 1, "v": 3},
                       seq=3),
                   row("c", "reservation", after={"id": 1, "userid": 1}, seq=4),
                   row("d", "user", before={"userid": 1, "v": 3}, seq=5),
                   row("c", "reservation", after={"id": 2, "userid": 1}, seq=6)], tmp_path, 1)
    assert [r["user"] for _, r in _reservations(out)] == [{"userid": 1, "v": 3}, None]
    assert all(r["table"] == "reservation" for r in out)          # keep_referenced: false
    from mysqlcdc.transforms.state import VersionStore

    store = VersionStore(f.state_file(str(tmp_path)))
    assert store.count() == 4            # kept: a rolled-back checkpoint may still replay
    store.close()
    out = _run(f, [row("c", "user", after={"userid": 1, "v": 9}, seq=7),
                   row("t", "user", seq=8),
                   row("c", "reservation", after={"id": 3, "userid": 1}, seq=9)], tmp_path, 2)
    assert _reservations(out)[0][1]["user"] is None               # truncated before it
    # KEEP_BATCHES later, what only batches 0 and 1 could ask for is pruned
    from mysqlcdc.transforms.state import KEEP_BATCHES

    _run(f, [row("c", "user", after={"userid": 2, "v": 1}, seq=100)], tmp_path, 1 + KEEP_BATCHES)
    store = VersionStore(f.state_file(str(tmp_path)))
    assert store.count() == 6            # only user 1's seq 1 went: batch 1 starts at seq 3
    assert store.get("shop.user", "1", 3) == '{"userid":1,"v":2}'
    assert store.get("shop.user", "1", 9) is None and store.get("shop.user", "1", 6) is None
    store.close()


def test_flatten_reemits_rows_pointing_at_a_changed_row(tmp_path):
    f = Flatten("shop.reservation", JOINS[:1], reemit=True)
    out = _run(f, [row("c", "user", after={"userid": 7, "name": "a"}, seq=1),
                   row("c", "reservation", after={"id": 1, "userid": 7}, key={"id": 1}, seq=2),
                   row("c", "reservation", after={"id": 2, "userid": 8}, key={"id": 2}, seq=3),
                   row("u", "user", before={"userid": 7, "name": "a"},
                       after={"userid": 7, "name": "b"}, seq=4)], tmp_path, 0)
    again = [r for r in out if r["table"] == "reservation" and r["op"] == "u"]
    assert len(again) == 1 and again[0]["key"] == '{"id":1}' and int(again[0]["seq"]) == 4
    assert orjson.loads(again[0]["before"])["user"]["name"] == "a"
    assert orjson.loads(again[0]["after"])["user"]["name"] == "b"
