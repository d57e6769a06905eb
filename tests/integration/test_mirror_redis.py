"""Mirror apply core against a real redis-server: hashes per row, MULTI/EXEC, replay, DDL."""

from __future__ import annotations

import pytest

from mysqlcdc.errors import MirrorAuthError
from mysqlcdc.schema.model import ColumnDef
from mysqlcdc.sinks.mirror import MirrorSettings, make_target
from mysqlcdc.sinks.mirror.writer import Definitions, apply_batch, run_with_retries

from tests.integration.test_mirror_postgres import ID, Stream, tdef

pytestmark = pytest.mark.integration


@pytest.fixture
def rs(redis_server, request):
    return MirrorSettings(target="redis", host=redis_server.host, port=redis_server.port,
                          user=None, password=redis_server.password, database="0",
                          pipeline=f"p_{request.node.name[:40]}", attempts=3,
                          initial_delay_s=0.1)


def apply(settings, rows, batch_id, defs):
    return run_with_retries(lambda: make_target(settings),
                            lambda t: apply_batch(t, rows, batch_id=batch_id,
                                                  pipeline=settings.pipeline, definitions=defs),
                            attempts=settings.attempts, initial_delay_s=0.1, max_delay_s=1)


def test_hashes_replay_and_schema(redis_server, rs):
    r = redis_server.client()
    db = "rdb"
    for k in r.scan_iter(f"{db}:*"):
        r.delete(k)
    defs = Definitions(None)
    s = Stream(db)
    v1 = tdef(db, "u", ID, ColumnDef("name", "varchar", charset="utf8mb4"),
              ColumnDef("bal", "decimal", precision=8, scale=2),
              ColumnDef("tags", "set", set_values=("a", "b")),
              ColumnDef("raw", "varbinary", charset="binary"))
    batch = [s.ddl("u", None, v1),
             s.ins("u", {"id": 1, "name": "ann", "bal": "1.50", "tags": ["a", "b"], "raw": "AAE="}),
             s.ins("u", {"id": 2, "name": "bob", "bal": None, "tags": [], "raw": None}),
             s.upd("u", {"id": 2, "name": "bobby", "bal": "2.00", "tags": [], "raw": None}),
             s.ins("u", {"id": 3, "name": "cy", "bal": None, "tags": [], "raw": None}),
             s.dele("u", {"id": 3})]
    apply(rs, batch, 0, defs)
    assert r.hgetall("rdb:u:1") == {b"id": b"1", b"name": b"ann", b"bal": b"1.50",
                                    b"tags": b"a,b", b"raw": b"\x00\x01"}
    assert r.hgetall("rdb:u:2") == {b"id": b"2", b"name": b"bobby", b"bal": b"2.00", b"tags": b""}
    assert not r.exists("rdb:u:3")
    assert r.hget(f"mysqlcdc:offsets:{rs.pipeline}", "batch_id") == b"0"
    r.hset("rdb:u:1", "name", "touched")
    assert apply(rs, batch, 0, defs).skipped
    assert r.hget("rdb:u:1", "name") == b"touched"
    # rename column name->label, drop bal, then rename the table, then truncate another
    v2 = tdef(db, "u", ID, ColumnDef("label", "varchar", charset="utf8mb4"),
              ColumnDef("tags", "set", set_values=("a", "b")),
              ColumnDef("raw", "varbinary", charset="binary"))
    v3 = tdef(db, "w", *v2.columns)
    batch = [s.ddl("u", v1, v2), s.ins("u", {"id": 4, "label": "dee", "tags": [], "raw": None})]
    old_half = s.ddl("u", v2, None)
    new_half = s.ddl("w", v2, v3)
    new_half["pos"], new_half["seq"] = old_half["pos"], old_half["seq"]
    batch += [old_half, new_half, s.upd("w", {"id": 1, "label": "ann2", "tags": [], "raw": None})]
    apply(rs, batch, 1, defs)
    assert sorted(r.scan_iter("rdb:u:*")) == []
    assert sorted(r.scan_iter("rdb:w:*")) == [b"rdb:w:1", b"rdb:w:2", b"rdb:w:4"]
    assert r.hgetall("rdb:w:2") == {b"id": b"2", b"label": b"bobby", b"tags": b""}
    assert r.hget("rdb:w:1", "label") == b"ann2"
    apply(rs, [s.rec("t", "w"), s.ins("w", {"id": 9, "label": "z", "tags": [], "raw": None})],
          2, defs)
    assert sorted(r.scan_iter("rdb:w:*")) == [b"rdb:w:9"]


def test_ttl(redis_server, rs):
    r = redis_server.client()
    defs = Definitions(None)
    s = Stream("rttl")
    ttl = MirrorSettings(**{**rs.__dict__, "ttl_s": 100})
    apply(ttl, [s.ddl("t", None, tdef("rttl", "t", ID)), s.ins("t", {"id": 1})], 0, defs)
    assert 0 < r.ttl("rttl:t:1") <= 100


def test_wrong_password(redis_server, rs):
    bad = MirrorSettings(**{**rs.__dict__, "password": "wrong-secret"})
    with pytest.raises(MirrorAuthError) as err:
        apply(bad, [Stream("x").ins("t", {"id": 1})], 0, Definitions(None))
    assert "wrong-secret" not in str(err.value)
