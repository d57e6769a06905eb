"""Mirror apply core against a real PostgreSQL: reduce per key, ledger, DDL, truncate, stops."""

from __future__ import annotations

import ipaddress
import json
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest

from mysqlcdc.errors import MirrorAuthError, MirrorUnavailableError
from mysqlcdc.schema.model import ColumnDef, TableDef
from mysqlcdc.sinks.mirror import MirrorSettings, make_target
from mysqlcdc.sinks.mirror.writer import Definitions, apply_batch, run_with_retries

pytestmark = pytest.mark.integration

F = "mysql-bin.000001"


def tdef(db, name, *cols):
    return TableDef(db, name, tuple(cols))


ID = ColumnDef("id", "int", is_primary_key=True, nullable=False, column_type="int(11)")


class Stream:
    """Envelope records with increasing positions."""

    def __init__(self, db):
        self.db, self.pos = db, 100

    def rec(self, op, table, *, before=None, after=None, key=None, row=0):
        self.pos += 10
        seq = 1 * 10**24 + self.pos * 10**12 + row
        dump = lambda v: None if v is None else json.dumps(v)   # noqa: E731
        return {"op": op, "db": self.db, "table": table, "before": dump(before),
                "after": dump(after), "key": dump(key), "file": F, "pos": self.pos,
                "seq": Decimal(seq)}

    def ddl(self, table, before: TableDef | None, after: TableDef | None):
        return self.rec("s", table, before=before and before.to_json(),
                        after=after and after.to_json())

    def rename(self, old: TableDef, new: TableDef) -> list[dict]:
        """A table rename: the old name's record (after null), then the new name's, which
        carries the old definition as ``before``; both at one position."""
        drop_rec = self.ddl(old.name, old, None)
        create_rec = self.ddl(new.name, old, new)
        create_rec["pos"], create_rec["seq"] = drop_rec["pos"], drop_rec["seq"]
        return [drop_rec, create_rec]

    def ins(self, table, row, pk="id"):
        return self.rec("c", table, after=row, key={pk: row[pk]})

    def upd(self, table, row, pk="id"):
        return self.rec("u", table, before=row, after=row, key={pk: row[pk]})

    def dele(self, table, row, pk="id"):
        return self.rec("d", table, before=row, key={pk: row[pk]})


@pytest.fixture
def pg_settings(postgres, request):
    return MirrorSettings(target="postgresql", host=postgres.host, port=postgres.port,
                          user=postgres.user, password=postgres.password,
                          pipeline=f"p_{request.node.name[:40]}", attempts=3,
                          initial_delay_s=0.1)


@pytest.fixture
def db(postgres, request):
    name = f"m_{request.node.name[5:40]}".lower()
    postgres.sql(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
    return name


_DEFS: dict[str, Definitions] = {}


def apply(settings, rows, batch_id):
    """As foreach_batch does: one Definitions per pipeline (it learns from ``s`` records)."""
    defs = _DEFS.setdefault(settings.pipeline, Definitions(None))
    return run_with_retries(lambda: make_target(settings),
                            lambda t: apply_batch(t, rows, batch_id=batch_id,
                                                  pipeline=settings.pipeline, definitions=defs),
                            attempts=settings.attempts, initial_delay_s=0.1, max_delay_s=1)


def test_types_reduce_and_replay(postgres, pg_settings, db):
    cols = (ID,
            ColumnDef("u64", "bigint", unsigned=True, column_type="bigint(20) unsigned"),
            ColumnDef("price", "decimal", precision=12, scale=4, column_type="decimal(12,4)"),
            ColumnDef("d", "date"), ColumnDef("dt", "datetime", fsp=6),
            ColumnDef("ts", "timestamp", fsp=3), ColumnDef("t", "time"),
            ColumnDef("doc", "json"), ColumnDef("e", "enum", enum_values=("a", "b")),
            ColumnDef("s", "set", set_values=("x", "y")), ColumnDef("b", "bit", length=8),
            ColumnDef("bin", "varbinary", charset="binary", length=8),
            ColumnDef("name", "varchar", charset="utf8mb4", length=20),
            ColumnDef("ip", "inet6", column_type="inet6"), ColumnDef("ip4", "inet4"),
            ColumnDef("uu", "uuid", column_type="uuid"))
    t = tdef(db, "things", *cols)
    s = Stream(db)
    row1 = {"id": 1, "u64": 18446744073709551615, "price": "-12.3400", "d": "0000-00-00",
            "dt": "2024-02-29 13:45:07.123456", "ts": "2024-02-29T13:45:07.123Z",
            "t": "-838:59:59", "doc": {"k": [1, "x"]}, "e": "b", "s": ["x", "y"], "b": 255,
            "bin": "AAEC", "name": "héllo", "ip": "::ffff:1.2.3.4", "ip4": "10.0.0.1",
            "uu": "123e4567-e89b-12d3-a456-426655440000"}
    batch = [s.ddl("things", None, t), s.ins("things", row1),
             s.ins("things", {**row1, "id": 2, "name": "two"}),
             s.upd("things", {**row1, "id": 2, "name": "two-b"}),
             s.ins("things", {**row1, "id": 3}), s.dele("things", {**row1, "id": 3}),
             s.upd("things", {**row1, "id": 1, "name": "one-final"})]
    res = apply(pg_settings, batch, 0)
    assert res.rows == 6 and not res.skipped
    got = postgres.sql(f'SELECT * FROM "{db}".things ORDER BY id')
    assert [r[0] for r in got] == [1, 2]
    one = got[0]
    assert one[1] == Decimal(18446744073709551615) and one[2] == Decimal("-12.3400")
    assert one[3] is None
    assert one[4] == datetime(2024, 2, 29, 13, 45, 7, 123456)
    assert one[5] == datetime(2024, 2, 29, 13, 45, 7, 123000, tzinfo=timezone.utc)
    assert one[6] == -timedelta(hours=838, minutes=59, seconds=59)
    assert one[7] == {"k": [1, "x"]} and one[8] == "b" and one[9] == "x,y" and one[10] == 255
    assert bytes(one[11]) == b"\x00\x01\x02" and one[12] == "one-final"
    assert got[1][12] == "two-b"
    assert (one[13], one[14], str(one[15])) == (   # inet and uuid columns
        ipaddress.ip_address("::ffff:1.2.3.4"), ipaddress.ip_address("10.0.0.1"),
        "123e4567-e89b-12d3-a456-426655440000")
    # replay of the same batch id: nothing changes even if the rows differ
    postgres.sql(f"UPDATE \"{db}\".things SET name = 'touched' WHERE id = 1")
    assert apply(pg_settings, batch, 0).skipped
    assert postgres.sql(f'SELECT name FROM "{db}".things WHERE id = 1') == [("touched",)]
    pos, = postgres.sql("SELECT batch_id FROM mysqlcdc_offsets WHERE pipeline = %s",
                        (pg_settings.pipeline,))
    assert pos == (0,)


def test_schema_changes_truncate_and_stop(postgres, pg_settings, db):
    s = Stream(db)
    name = ColumnDef("name", "varchar", charset="utf8mb4")
    v1 = tdef(db, "a", ID, name, ColumnDef("n", "int"))
    other = tdef(db, "other", ID, ColumnDef("v", "varchar", charset="utf8mb4"))
    batch = [s.ddl("a", None, v1), s.ddl("other", None, other),
             s.ins("a", {"id": 1, "name": "x", "n": 5}), s.ins("a", {"id": 2, "name": "y", "n": 6}),
             s.ins("other", {"id": 1, "v": "12"})]
    apply(pg_settings, batch, 0)
    # rename column name->label, drop n, add c, retype other.v to int, then rename table a->b
    v2 = tdef(db, "a", ID, ColumnDef("label", "varchar", charset="utf8mb4"),
              ColumnDef("c", "decimal", precision=5, scale=1))
    other2 = tdef(db, "other", ID, ColumnDef("v", "int", column_type="int(11)"))
    v3 = tdef(db, "b", *v2.columns)
    batch = [s.ddl("a", v1, v2), s.ins("a", {"id": 3, "label": "z", "c": "1.5"}),
             s.ddl("other", other, other2), s.ins("other", {"id": 2, "v": 7})]
    batch += [*s.rename(v2, v3), s.upd("b", {"id": 1, "label": "x2", "c": "2.0"})]
    apply(pg_settings, batch, 1)
    assert postgres.sql(f'SELECT id, label, c FROM "{db}".b ORDER BY id') == [
        (1, "x2", Decimal("2.0")), (2, "y", None), (3, "z", Decimal("1.5"))]
    assert postgres.sql(f'SELECT id, v FROM "{db}".other ORDER BY id') == [(1, 12), (2, 7)]
    assert not postgres.sql(f"SELECT 1 FROM information_schema.tables WHERE table_schema = '{db}' "
                            "AND table_name = 'a'")
    # a retype the target cannot cast stops that table; the other keeps flowing
    bad = tdef(db, "other", ID, ColumnDef("v", "date"))
    batch = [s.ddl("other", other2, bad), s.ins("other", {"id": 3, "v": "2024-01-01"}),
             s.rec("t", "b"), s.ins("b", {"id": 9, "label": "after-truncate", "c": None})]
    res = apply(pg_settings, batch, 2)
    assert res.stopped == [(db, "other")]
    assert postgres.sql(f'SELECT id, label FROM "{db}".b') == [(9, "after-truncate")]
    assert postgres.sql(f'SELECT id, v FROM "{db}".other ORDER BY id') == [(1, 12), (2, 7)]
    code, = postgres.sql("SELECT code FROM mysqlcdc_mirror_stopped WHERE pipeline = %s AND db = %s",
                         (pg_settings.pipeline, db))
    assert code == ("MIRROR_TABLE_STOPPED",)
    apply(pg_settings, [s.ins("other", {"id": 4, "v": "2024-01-02"}),
                        s.ins("b", {"id": 10, "label": "z", "c": None})], 3)
    assert postgres.sql(f'SELECT count(*) FROM "{db}".other') == [(2,)]
    assert postgres.sql(f'SELECT count(*) FROM "{db}".b') == [(2,)]


def test_key_change_as_delete_then_create(postgres, pg_settings, db):
    """The settled envelope for a primary-key change: d of the old key, c of the new."""
    s = Stream(db)
    t = tdef(db, "k", ID, ColumnDef("v", "int"))
    batch = [s.ddl("k", None, t), s.ins("k", {"id": 1, "v": 1}), s.ins("k", {"id": 2, "v": 2})]
    apply(pg_settings, batch, 0)
    d = s.dele("k", {"id": 1, "v": 1})
    c = s.ins("k", {"id": 5, "v": 1})
    c["pos"], c["seq"] = d["pos"], d["seq"] + 1
    # 2 -> 1 (a key freed earlier in the same batch is taken again)
    d2 = s.dele("k", {"id": 2, "v": 2})
    c2 = s.ins("k", {"id": 1, "v": 2})
    c2["pos"], c2["seq"] = d2["pos"], d2["seq"] + 1
    apply(pg_settings, [c2, d, c, d2][::-1][::-1], 1)   # order comes from seq, not the list
    assert postgres.sql(f'SELECT id, v FROM "{db}".k ORDER BY id') == [(1, 2), (5, 1)]


def test_wrong_password_fails_at_once(postgres, pg_settings):
    bad = MirrorSettings(**{**pg_settings.__dict__, "password": "wrong-secret"})
    with pytest.raises(MirrorAuthError) as err:
        apply(bad, [Stream("x").ins("t", {"id": 1})], 0)
    assert "wrong-secret" not in str(err.value) and "wrong-secret" not in repr(bad)


def test_target_down_retries_then_names_error(postgres, pg_settings):
    from mysqlcdc.pipeline.localserver import free_port

    gone = MirrorSettings(**{**pg_settings.__dict__, "port": free_port(), "attempts": 2})
    with pytest.raises(MirrorUnavailableError):
        apply(gone, [Stream("x").ins("t", {"id": 1})], 0)


def test_a_new_checkpoint_is_not_a_replay(postgres, pg_settings, db, tmp_path):
    """The ledger row names the Spark checkpoint's query id: batch 0 of a pipeline started
    again from a new checkpoint is applied, not skipped as an old batch 0."""
    from mysqlcdc.sinks.mirror.writer import ledger_key

    old, new = tmp_path / "ck-old", tmp_path / "ck-new"
    for ck, qid in ((old, "11111111-aaaa"), (new, "22222222-bbbb")):
        ck.mkdir()
        (ck / "metadata").write_text('{"id":"%s"}\n' % qid)
    assert ledger_key("p", str(old)) == "p@11111111-aaaa" and ledger_key("p", None) == "p"
    s = Stream(db)
    t = tdef(db, "k", ID, ColumnDef("v", "int"))
    first = MirrorSettings(**{**pg_settings.__dict__,
                              "pipeline": ledger_key(pg_settings.pipeline, str(old))})
    apply(first, [s.ddl("k", None, t), s.ins("k", {"id": 1, "v": 1})], 5)
    again = MirrorSettings(**{**pg_settings.__dict__,
                              "pipeline": ledger_key(pg_settings.pipeline, str(new))})
    _DEFS[again.pipeline] = _DEFS[first.pipeline]
    assert not apply(again, [s.ins("k", {"id": 2, "v": 2})], 0).skipped
    assert postgres.sql(f'SELECT id FROM "{db}".k ORDER BY id') == [(1,), (2,)]


def test_writers_creating_at_once_do_not_collide(postgres, pg_settings):
    """A mirror and a changelog_table sink into one database start together: both create
    the ledger and the source database's schema in the same instant. PostgreSQL's
    ``IF NOT EXISTS`` does not guard against that on its own (one of them used to fail
    with a unique violation in its catalog, an INTERNAL_ERROR on the pipeline's first run)."""
    import threading
    from dataclasses import replace

    import psycopg

    rounds, writers = 6, 4
    for r in range(rounds):
        database = f"race_{r}"
        postgres.sql(f"DROP DATABASE IF EXISTS {database}")
        postgres.sql(f"CREATE DATABASE {database}")
        start, errors = threading.Barrier(writers), []

        def write(i: int) -> None:
            settings = replace(pg_settings, database=database, pipeline=f"race{i}")
            s = Stream("shop")
            d = tdef("shop", f"t{i}", ID)
            rows = [s.ddl(f"t{i}", None, d), s.ins(f"t{i}", {"id": 1})]
            try:
                target = make_target(settings)
                target.connect()
                start.wait()
                apply_batch(target, rows, batch_id=0,
                            pipeline=settings.pipeline, definitions=Definitions(None))
                target.close()
            except Exception as exc:   # noqa: BLE001 - collected for the assertion
                errors.append(repr(exc))

        threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == [], f"round {r}: {errors}"
        conn = psycopg.connect(host=postgres.host, port=postgres.port, user=postgres.user,
                               password=postgres.password, dbname=database)
        with conn.cursor() as cur:
            cur.execute("SELECT count(*) FROM public.mysqlcdc_offsets")
            assert cur.fetchone()[0] == writers
            cur.execute("SELECT tbl, message FROM public.mysqlcdc_mirror_stopped")
            assert cur.fetchall() == []
            for i in range(writers):
                cur.execute(f"SELECT id FROM shop.t{i}")
                assert cur.fetchall() == [(1,)]
        conn.close()


def test_a_row_image_without_its_key_stops_the_table(postgres, pg_settings, db):
    """A session with binlog_row_image MINIMAL logs an update's image with only the
    columns it set: no key. The table stops with a message that says so, where the
    write used to fail on a NULL key (an INTERNAL_ERROR in the Delta mirror)."""
    t = tdef(db, "part", ID, ColumnDef("v", "int", column_type="int(11)"))
    s = Stream(db)
    partial = s.rec("u", "part", before={"id": 1}, after={"v": 5}, key={"id": 1})
    other = tdef(db, "other", ID)
    result = apply(pg_settings, [s.ddl("part", None, t), s.ddl("other", None, other),
                                 s.ins("part", {"id": 1, "v": 1}), partial,
                                 s.ins("other", {"id": 1})], 0)
    assert result.stopped == [(db, "part")]
    assert postgres.sql(f'SELECT id FROM "{db}".other') == [(1,)]     # the others go on
    (message,), = postgres.sql("SELECT message FROM public.mysqlcdc_mirror_stopped WHERE "
                               f"pipeline = '{pg_settings.pipeline}' AND tbl = 'part'")
    assert "lacks its key columns" in message and "binlog_row_image" in message
