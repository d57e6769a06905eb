"""Mirror apply core against a second real MariaDB: types, reduce, replay, DDL cut by commits."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

import pytest

from mysqlcdc.errors import MirrorAuthError
from mysqlcdc.schema.model import ColumnDef
from mysqlcdc.sinks.mirror import MirrorSettings, make_target
from mysqlcdc.sinks.mirror.writer import Definitions, apply_batch, run_with_retries

from tests.integration.test_mirror_postgres import ID, Stream, tdef

pytestmark = pytest.mark.integration

_DEFS: dict[str, Definitions] = {}


@pytest.fixture
def my_settings(mariadb_target, request):
    return MirrorSettings(target="mysql", host=mariadb_target.host, port=mariadb_target.port,
                          user=mariadb_target.user, password=mariadb_target.password,
                          database="mysqlcdc", pipeline=f"p_{request.node.name[:40]}",
                          attempts=3, initial_delay_s=0.1)


@pytest.fixture
def db(mariadb_target, request):
    name = f"m_{request.node.name[5:40]}".lower()
    mariadb_target.sql(f"DROP DATABASE IF EXISTS `{name}`")
    return name


def apply(settings, rows, batch_id):
    defs = _DEFS.setdefault(settings.pipeline, Definitions(None))
    return run_with_retries(lambda: make_target(settings),
                            lambda t: apply_batch(t, rows, batch_id=batch_id,
                                                  pipeline=settings.pipeline, definitions=defs),
                            attempts=settings.attempts, initial_delay_s=0.1, max_delay_s=1)


def test_types_reduce_replay(mariadb_target, my_settings, db):
    cols = (ID,
            ColumnDef("u64", "bigint", unsigned=True, column_type="bigint(20) unsigned"),
            ColumnDef("price", "decimal", precision=12, scale=4, column_type="decimal(12,4)"),
            ColumnDef("d", "date", column_type="date"),
            ColumnDef("ts", "timestamp", fsp=3, column_type="timestamp(3)"),
            ColumnDef("t", "time", fsp=0, column_type="time"),
            ColumnDef("e", "enum", enum_values=("a", "b"), column_type="enum('a','b')",
                      charset="utf8mb4"),
            ColumnDef("s", "set", set_values=("x", "y"), column_type="set('x','y')",
                      charset="utf8mb4"),
            ColumnDef("b", "bit", length=10, column_type="bit(10)"),
            ColumnDef("bin", "varbinary", charset="binary", length=8, column_type="varbinary(8)"),
            ColumnDef("name", "varchar", charset="utf8mb4", length=20, column_type="varchar(20)"),
            ColumnDef("ip", "inet6", column_type="inet6"), ColumnDef("uu", "uuid", column_type="uuid"))
    t = tdef(db, "things", *cols)
    s = Stream(db)
    row = {"id": 1, "u64": 18446744073709551615, "price": "-12.3400", "d": "0000-00-00",
           "ts": "2024-02-29T13:45:07.123Z", "t": "-838:59:59", "e": "b", "s": ["x", "y"],
           "b": 513, "bin": "AAEC", "name": "héllo", "ip": "::ffff:1.2.3.4",
           "uu": "123e4567-e89b-12d3-a456-426655440000"}
    batch = [s.ddl("things", None, t), s.ins("things", row),
             s.ins("things", {**row, "id": 2}), s.upd("things", {**row, "id": 2, "name": "2b"}),
             s.ins("things", {**row, "id": 3}), s.dele("things", {**row, "id": 3})]
    apply(my_settings, batch, 0)
    conn = mariadb_target.connect(database=db)
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute("SELECT * FROM things ORDER BY id")
        got = cur.fetchall()
    conn.close()
    assert [r[0] for r in got] == [1, 2]
    one = got[0]
    assert one[1] == 18446744073709551615 and one[2] == Decimal("-12.3400")
    assert one[3] == "0000-00-00"                       # zero date kept as the source has it
    assert one[4] == datetime(2024, 2, 29, 13, 45, 7, 123000)
    assert one[5] == -timedelta(hours=838, minutes=59, seconds=59)
    assert one[6:9] == ("b", "x,y", (513).to_bytes(2, "big"))
    assert one[9] == b"\x00\x01\x02" and got[1][10] == "2b"
    assert one[11:13] == ("::ffff:1.2.3.4", "123e4567-e89b-12d3-a456-426655440000")
    mariadb_target.sql(f"UPDATE `{db}`.things SET name = 'touched' WHERE id = 1")
    assert apply(my_settings, batch, 0).skipped
    assert mariadb_target.sql(f"SELECT name FROM `{db}`.things WHERE id = 1") == [("touched",)]


def test_ddl_replay_resumes_after_the_mark(mariadb_target, my_settings, db):
    """A batch cut by an implicit DDL commit and replayed applies each change once."""
    s = Stream(db)
    v1 = tdef(db, "a", ID, ColumnDef("n", "int", column_type="int(11)"))
    v2 = tdef(db, "a", ID, ColumnDef("n", "bigint", column_type="bigint(20)"),
              ColumnDef("c", "varchar", charset="utf8mb4", column_type="varchar(5)"))
    apply(my_settings, [s.ddl("a", None, v1), s.ins("a", {"id": 1, "n": 1})], 0)
    batch = [s.ins("a", {"id": 2, "n": 2}), s.ddl("a", v1, v2),
             s.ins("a", {"id": 3, "n": 3, "c": "x"}), s.rec("t", "a"),
             s.ins("a", {"id": 4, "n": 4, "c": "y"})]
    target = make_target(my_settings)
    target.connect()
    real_commit = target.commit
    target.commit = lambda *a: (_ for _ in ()).throw(RuntimeError("crash before the end"))
    with pytest.raises(RuntimeError):
        apply_batch(target, batch, batch_id=1, pipeline=my_settings.pipeline,
                    definitions=_DEFS[my_settings.pipeline])
    target.commit = real_commit
    target.close()
    # the part before the DDL and the DDL itself are in; the rest was rolled back
    assert mariadb_target.sql(f"SELECT id FROM `{db}`.a ORDER BY id") == [(1,), (2,)]
    apply(my_settings, batch, 1)
    assert mariadb_target.sql(f"SELECT id, n, c FROM `{db}`.a ORDER BY id") == [(4, 4, "y")]
    bad = tdef(db, "a", ID, ColumnDef("n", "bigint", column_type="bigint(20)"),
               ColumnDef("c", "varchar", charset="utf8mb4", column_type="varchar(5)"),
               ColumnDef("g", "madeup", column_type="madeup(3)"))
    res = apply(my_settings, [s.ddl("a", v2, bad), s.ins("a", {"id": 5, "n": 5})], 2)
    assert res.stopped == [(db, "a")]
    assert mariadb_target.sql(f"SELECT count(*) FROM `{db}`.a") == [(1,)]


def test_wrong_password_fails_at_once(mariadb_target, my_settings):
    bad = MirrorSettings(**{**my_settings.__dict__, "user": "nobody", "password": "wrong-secret"})
    with pytest.raises(MirrorAuthError) as err:
        apply(bad, [Stream("x").ins("t", {"id": 1})], 0)
    assert "wrong-secret" not in str(err.value)


def test_alter_replayed_after_its_commit_is_harmless(mariadb_target, my_settings, db):
    """A crash after an ALTER committed (implicitly) but before its ledger mark replays it."""
    s = Stream(db)
    v1 = tdef(db, "r", ID, ColumnDef("n", "int", column_type="int(11)"))
    v2 = tdef(db, "r", ID, ColumnDef("m", "int", column_type="int(11)"),
              ColumnDef("c", "varchar", charset="utf8mb4", column_type="varchar(5)"))
    apply(my_settings, [s.ddl("r", None, v1), s.ins("r", {"id": 1, "n": 1})], 0)
    mariadb_target.sql(f"ALTER TABLE `{db}`.r RENAME COLUMN n TO m, ADD COLUMN c VARCHAR(5)")
    res = apply(my_settings, [s.ddl("r", v1, v2), s.ins("r", {"id": 2, "m": 2, "c": "x"})], 1)
    assert res.stopped == []
    assert mariadb_target.sql(f"SELECT id, m, c FROM `{db}`.r ORDER BY id") == [
        (1, 1, None), (2, 2, "x")]


def test_values_only_a_lax_source_holds_arrive_as_they_are(mariadb_target, my_settings, db):
    """A source with a lax sql_mode holds values the mirror's strict session refuses: an
    ENUM's empty error value (index 0) and, under ALLOW_INVALID_DATES, 2024-02-30. They
    used to stop the table with MIRROR_TABLE_STOPPED ("Data truncated"); now they are
    written as the source has them."""
    cols = (ID,
            ColumnDef("e", "enum", enum_values=("a", "b"), column_type="enum('a','b')",
                      charset="utf8mb4"),
            ColumnDef("d", "date", column_type="date"),
            ColumnDef("dt", "datetime", fsp=0, column_type="datetime"))
    t = tdef(db, "lax", *cols)
    s = Stream(db)
    batch = [s.ddl("lax", None, t),
             s.ins("lax", {"id": 1, "e": "", "d": "2024-02-30", "dt": "2023-02-29 10:00:00"}),
             s.ins("lax", {"id": 2, "e": "a", "d": "2024-02-28", "dt": None})]
    result = apply(my_settings, batch, 0)
    assert result.stopped == []
    got = mariadb_target.sql(f"SELECT id, e + 0, e, CAST(d AS CHAR), CAST(dt AS CHAR) "
                             f"FROM `{db}`.lax ORDER BY id")
    assert got == [(1, 0, "", "2024-02-30", "2023-02-29 10:00:00"),
                   (2, 1, "a", "2024-02-28", None)]
