"""The Delta mirror target without Spark: merges, schema changes, replays of a batch cut
anywhere, a type Delta cannot hold, storage faults, history tables and the consistent cut.

Storage faults are real: ``chattr +i`` makes a table's log folder refuse new files (root
included) until it is lifted, the way a read-only remount or a lost permission would.
"""

from __future__ import annotations

import json
import subprocess
import threading
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path

import pytest
from deltalake import DeltaTable

from mysqlcdc.errors import MirrorUnavailableError
from mysqlcdc.schema.model import ColumnDef
from mysqlcdc.sinks.mirror import MirrorSettings, make_target, read_consistent, read_position
from mysqlcdc.sinks.mirror.writer import Definitions, apply_batch, run_with_retries

from tests.integration.test_mirror_postgres import ID, Stream as _Stream, tdef
from tests.support.mirror import delta_rows_by_reader

pytestmark = pytest.mark.integration

NAME = ColumnDef("name", "varchar", charset="utf8mb4", column_type="varchar(20)")
N = ColumnDef("n", "int", column_type="int(11)")


class Stream(_Stream):
    """Envelope records with commit times (``ts_ms``: one second per record)."""

    def rec(self, op, table, **kw):
        r = super().rec(op, table, **kw)
        r["ts_ms"] = 1_700_000_000_000 + self.pos * 1000
        return r


@pytest.fixture
def settings(tmp_path, request):
    return MirrorSettings(target="delta", path=str(tmp_path / "mirror"),
                          pipeline=f"p_{request.node.name[:30]}", attempts=1,
                          initial_delay_s=0.05, max_delay_s=0.2)


class Mirror:
    """Applies batches the way foreach_batch does (one Definitions per pipeline)."""

    def __init__(self, settings: MirrorSettings, history: bool = False) -> None:
        self.settings, self.history = settings, history
        self.defs = Definitions(None)

    def apply(self, rows, batch_id: int, *, attempts: int | None = None, sleep=None):
        s = self.settings
        kw = {"sleep": sleep} if sleep else {}
        return run_with_retries(
            lambda: make_target(s),
            lambda t: apply_batch(t, rows, batch_id=batch_id, pipeline=s.pipeline,
                                  definitions=self.defs, history=self.history),
            attempts=attempts or s.attempts, initial_delay_s=0.05, max_delay_s=0.2,
            hint=s.unavailable_hint, **kw)


def immutable(path: Path, on: bool) -> None:
    subprocess.run(["chattr", "+i" if on else "-i", str(path)], check=True)


def rows(root: Path, db: str, table: str) -> list[dict]:
    return sorted(DeltaTable(str(root / db / table)).to_pyarrow_table().to_pylist(),
                  key=lambda r: (r["id"], r.get("valid_from_seq") or 0))


def test_types_merge_replay_and_three_readers(settings):
    root = Path(settings.path)
    cols = (ID,
            ColumnDef("u64", "bigint", unsigned=True, column_type="bigint(20) unsigned"),
            ColumnDef("price", "decimal", precision=12, scale=4, column_type="decimal(12,4)"),
            ColumnDef("d", "date"), ColumnDef("dt", "datetime", fsp=6),
            ColumnDef("ts", "timestamp", fsp=3), ColumnDef("t", "time", fsp=6),
            ColumnDef("doc", "json"), ColumnDef("e", "enum", enum_values=("a", "b")),
            ColumnDef("s", "set", set_values=("x", "y")), ColumnDef("b", "bit", length=8),
            ColumnDef("bin", "varbinary", charset="binary", length=8),
            ColumnDef("g", "geometry"), ColumnDef("tiny", "tinyint", unsigned=True),
            ColumnDef("y", "year"), ColumnDef("f", "float"), NAME)
    t = tdef("shop", "things", *cols)
    s = Stream("shop")
    row1 = {"id": 1, "u64": 18446744073709551615, "price": "-12.3400", "d": "0000-00-00",
            "dt": "2024-02-29 13:45:07.123456", "ts": "2024-02-29T13:45:07.123Z",
            "t": "-838:59:59.500000", "doc": {"k": [1, "x"]}, "e": "b", "s": ["x", "y"],
            "b": 255, "bin": "AAEC", "g": "00000000010100000000000000000000000000f03f",
            "tiny": 255, "y": 2024, "f": 2.5, "name": "héllo"}
    batch = [s.ddl("things", None, t), s.ins("things", row1),
             s.ins("things", {**row1, "id": 2, "name": "two", "d": "2024-02-30"}),
             s.upd("things", {**row1, "id": 2, "name": "two-b"}),
             s.ins("things", {**row1, "id": 3}), s.dele("things", {**row1, "id": 3}),
             s.upd("things", {**row1, "id": 1, "name": "one-final"})]
    mirror = Mirror(settings)
    res = mirror.apply(batch, 0)
    assert res.rows == 6 and not res.skipped
    got = rows(root, "shop", "things")
    assert [r["id"] for r in got] == [1, 2]
    one = got[0]
    assert one["u64"] == Decimal(18446744073709551615) and one["price"] == Decimal("-12.3400")
    assert one["d"] is None and got[1]["d"] is None          # zero and invalid dates
    assert one["dt"] == datetime(2024, 2, 29, 13, 45, 7, 123456)
    assert one["ts"] == datetime(2024, 2, 29, 13, 45, 7, 123000, tzinfo=timezone.utc)
    assert one["t"] == -((838 * 3600 + 59 * 60 + 59) * 1_000_000 + 500_000)
    assert json.loads(one["doc"]) == {"k": [1, "x"]} and one["e"] == "b" and one["s"] == "x,y"
    assert one["b"] == 255 and one["bin"] == b"\x00\x01\x02" and one["tiny"] == 255
    assert one["g"] == bytes.fromhex(row1["g"]) and one["y"] == 2024 and one["f"] == 2.5
    assert one["name"] == "one-final" and got[1]["name"] == "two-b"
    # every commit carries the batch id and the batch's end position
    dt = DeltaTable(str(root / "shop" / "things"))
    last = dt.history(1)[0]
    assert last["mysqlcdc.batch_id"] == "0" and last["mysqlcdc.end_position"] == \
        f"{batch[-1]['file']}:{batch[-1]['pos']}"
    # the same state for deltalake, polars and DuckDB
    seen = delta_rows_by_reader(str(root / "shop" / "things"), ["id", "name", "price", "u64"])
    assert seen["deltalake"] == seen["polars"] == seen["duckdb"]
    assert [r[1] for r in seen["duckdb"]] == ["one-final", "two-b"]
    # a replay of batch 0 (different rows even) changes nothing
    version = dt.version()
    assert mirror.apply(batch + [s.ins("things", {**row1, "id": 7})], 0).skipped
    assert DeltaTable(str(root / "shop" / "things")).version() == version


def test_schema_changes_truncate_rename_drop(settings):
    root = Path(settings.path)
    s = Stream("app")
    v1 = tdef("app", "a", ID, NAME, N)
    other = tdef("app", "other", ID, ColumnDef("v", "varchar", charset="utf8mb4"))
    mirror = Mirror(settings)
    mirror.apply([s.ddl("a", None, v1), s.ddl("other", None, other),
                  s.ins("a", {"id": 1, "name": "x", "n": 5}), s.ins("a", {"id": 2, "name": "y", "n": 6}),
                  s.ins("other", {"id": 1, "v": "12"})], 0)
    # rename name->label, drop n, add c; retype other.v to int; then rename table a->b
    v2 = tdef("app", "a", ID, ColumnDef("label", "varchar", charset="utf8mb4",
                                        column_type="varchar(20)"),
              ColumnDef("c", "decimal", precision=5, scale=1))
    other2 = tdef("app", "other", ID, ColumnDef("v", "int", column_type="int(11)"))
    v3 = tdef("app", "b", *v2.columns)
    batch = [s.ddl("a", v1, v2), s.ins("a", {"id": 3, "label": "z", "c": "1.5"}),
             s.ddl("other", other, other2), s.ins("other", {"id": 2, "v": 7})]
    batch += [*s.rename(v2, v3), s.upd("b", {"id": 1, "label": "x2", "c": "2.0"})]
    mirror.apply(batch, 1)
    assert [(r["id"], r["label"], r["c"]) for r in rows(root, "app", "b")] == [
        (1, "x2", Decimal("2.0")), (2, "y", None), (3, "z", Decimal("1.5"))]
    assert [(r["id"], r["v"]) for r in rows(root, "app", "other")] == [(1, 12), (2, 7)]
    assert not (root / "app" / "a").exists()
    # truncate, then rows; a dropped table is gone; an added column is a metadata commit
    v4 = tdef("app", "b", *v3.columns, ColumnDef("extra", "int"))
    mirror.apply([s.rec("t", "b"), s.ins("b", {"id": 9, "label": "after", "c": None}),
                  s.ddl("other", other2, None), s.ddl("b", v3, v4),
                  s.ins("b", {"id": 10, "label": "x", "c": None, "extra": 4})], 2)
    assert [(r["id"], r["extra"]) for r in rows(root, "app", "b")] == [(9, None), (10, 4)]
    assert not (root / "app" / "other").exists()
    ops = [h["operation"] for h in DeltaTable(str(root / "app" / "b")).history(3)]
    assert "ADD COLUMN" in ops


def test_type_delta_cannot_hold_stops_that_table_only(settings):
    root = Path(settings.path)
    s = Stream("w")
    wide = tdef("w", "wide", ID, ColumnDef("d", "decimal", precision=65, scale=30,
                                           column_type="decimal(65,30)"))
    ok = tdef("w", "ok", ID, NAME)
    mirror = Mirror(settings)
    res = mirror.apply([s.ddl("wide", None, wide), s.ddl("ok", None, ok),
                        s.ins("wide", {"id": 1, "d": "1.5"}), s.ins("ok", {"id": 1, "name": "a"})], 0)
    assert res.stopped == [("w", "wide")]
    res = mirror.apply([s.ins("wide", {"id": 2, "d": "2.5"}), s.ins("ok", {"id": 2, "name": "b"})], 1)
    assert res.stopped == [] and res.rows == 1
    assert [r["id"] for r in rows(root, "w", "ok")] == [1, 2]
    assert not (root / "w" / "wide").exists()
    pos = read_position(settings)
    (stop,) = pos["stopped"]
    assert stop["table"] == "w.wide" and stop["code"] == "MIRROR_TABLE_STOPPED"
    assert "38 digits" in stop["message"] and pos["batch_id"] == 1


def test_storage_fault_is_retried_then_applied_once(settings):
    root = Path(settings.path)
    s = Stream("f")
    mirror = Mirror(settings)
    mirror.apply([s.ddl("t", None, tdef("f", "t", ID, N)), s.ins("t", {"id": 1, "n": 1})], 0)
    log = root / "f" / "t" / "_delta_log"
    immutable(log, True)
    try:
        with pytest.raises(MirrorUnavailableError) as err:
            mirror.apply([s.upd("t", {"id": 1, "n": 2})], 1, attempts=2)
        assert "storage" in err.value.hint
    finally:
        immutable(log, False)
    # the fault lasts a while and is lifted during the backoff: the batch lands once
    immutable(log, True)
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == 2:
            immutable(log, False)
    try:
        res = mirror.apply([s.upd("t", {"id": 1, "n": 3}), s.ins("t", {"id": 2, "n": 1})], 1,
                           attempts=5, sleep=sleep)
    finally:
        immutable(log, False)
    assert len(waits) == 2 and not res.skipped
    assert [(r["id"], r["n"]) for r in rows(root, "f", "t")] == [(1, 3), (2, 1)]
    merges = [h for h in DeltaTable(str(log.parent)).history() if h["operation"] == "MERGE"]
    assert [h["mysqlcdc.batch_id"] for h in merges] == ["1", "0"]


def test_batch_cut_mid_way_resumes_and_cut_stays_consistent(settings):
    """Table `a` commits batch 1, `b` cannot (storage fault): the ledger stays at batch 0,
    read_consistent shows both tables at batch 0; the replay skips what `a` holds."""
    root = Path(settings.path)
    s = Stream("c")
    a, b = tdef("c", "a", ID, N), tdef("c", "b", ID, N)
    mirror = Mirror(settings)
    mirror.apply([s.ddl("a", None, a), s.ddl("b", None, b),
                  s.ins("a", {"id": 1, "n": 0}), s.ins("b", {"id": 1, "n": 0})], 0)
    a2 = tdef("c", "a", ID, ColumnDef("m", "int"))     # a DDL mid-batch: steps and marks
    one_txn = [s.upd("a", {"id": 1, "n": 1}), s.upd("b", {"id": 1, "n": 1}), s.ddl("a", a, a2),
               s.ins("a", {"id": 2, "m": 7})]
    blog = root / "c" / "b" / "_delta_log"
    immutable(blog, True)
    try:
        with pytest.raises(MirrorUnavailableError):
            mirror.apply(one_txn, 1)
    finally:
        immutable(blog, False)
    a_version = DeltaTable(str(root / "c" / "a")).version()
    assert [(r["id"], r["n"]) for r in rows(root, "c", "a")] == [(1, 1)]   # a is ahead
    cut = read_consistent(root)
    assert cut.batch_id == 0
    assert {n: [r["n"] for r in cut.to_arrow(n).to_pylist()] for n in ("c.a", "c.b")} == \
        {"c.a": [0], "c.b": [0]}
    # the replay: a's rows before the DDL are not merged again
    res = mirror.apply(one_txn, 1)
    assert not res.skipped
    history = DeltaTable(str(root / "c" / "a")).history()
    assert [h["mysqlcdc.batch_id"] for h in history if h["operation"] == "MERGE"].count("1") == 2
    assert DeltaTable(str(root / "c" / "a")).version() == a_version + 2    # rewrite + merge
    assert [(r["id"], r["m"]) for r in rows(root, "c", "a")] == [(1, None), (2, 7)]
    cut = read_consistent(root)
    assert cut.batch_id == 1 and [r["n"] for r in cut.to_arrow("c.b").to_pylist()] == [1]
    assert read_position(settings)["tables"] == [
        {"table": "c.a", "version": a_version + 2, "batch_id": 1, "position": cut.position.__str__()},
        {"table": "c.b", "version": 2, "batch_id": 1, "position": str(cut.position)}]


def test_history_versions_truncate_and_replay(settings):
    root = Path(settings.path)
    s = Stream("h")
    t = tdef("h", "acct", ID, N)
    mirror = Mirror(MirrorSettings(**{**settings.__dict__, "mode": "history"}), history=True)
    create = s.ddl("acct", None, t)
    c1 = s.ins("acct", {"id": 1, "n": 1})
    c2 = s.ins("acct", {"id": 2, "n": 1})
    u1 = s.upd("acct", {"id": 1, "n": 2})
    mirror.apply([create, c1, c2, u1], 0)
    u2 = s.upd("acct", {"id": 1, "n": 3})
    d2 = s.dele("acct", {"id": 2, "n": 1})
    mirror.apply([u2, d2, s.ins("acct", {"id": 3, "n": 1})], 1)
    got = [(r["id"], r["n"], r["is_current"], r["valid_from_seq"], r["valid_to_seq"])
           for r in rows(root, "h", "acct")]
    got.sort(key=lambda r: (r[0], r[3]))
    assert [(i, n, cur) for i, n, cur, _, _ in got] == [
        (1, 1, False), (1, 2, False), (1, 3, True), (2, 1, False), (3, 1, True)]
    assert got[0][4] == u1["seq"] and got[1][3] == u1["seq"] and got[1][4] == u2["seq"]
    assert got[3][4] == d2["seq"]                     # a delete closes the version
    by = {(r["id"], r["n"]): r for r in rows(root, "h", "acct")}
    assert by[(1, 1)]["valid_from"] == datetime.fromtimestamp(c1["ts_ms"] / 1000, timezone.utc)
    assert by[(1, 1)]["valid_to"] == datetime.fromtimestamp(u1["ts_ms"] / 1000, timezone.utc)
    version = DeltaTable(str(root / "h" / "acct")).version()
    assert mirror.apply([u2, d2], 1).skipped
    assert DeltaTable(str(root / "h" / "acct")).version() == version
    trunc = s.rec("t", "acct")
    mirror.apply([trunc, s.ins("acct", {"id": 4, "n": 1})], 2)
    after = rows(root, "h", "acct")
    assert [(r["id"], r["n"]) for r in after if r["is_current"]] == [(4, 1)]
    assert len(after) == 6                         # the truncate kept every version
    closed = {(r["id"], r["n"]): r["valid_to_seq"] for r in after}
    assert closed[(1, 3)] == closed[(3, 1)] == trunc["seq"]


def test_rename_cut_by_a_crash_loses_nothing(settings):
    """A batch writes a table, renames it, writes the new name and another table, and dies
    before its ledger commit: the replay resumes after the rename's mark (the old name is
    not created again from the rows before it) and skips the steps already committed."""
    root = Path(settings.path)
    s = Stream("r")
    t1, x = tdef("r", "t1", ID, N), tdef("r", "x", ID, N)
    mirror = Mirror(settings)
    mirror.apply([s.ddl("t1", None, t1), s.ddl("x", None, x), s.ins("t1", {"id": 1, "n": 1}),
                  s.ins("x", {"id": 1, "n": 1})], 0)
    before_rename = s.ins("t1", {"id": 2, "n": 2})
    batch = [before_rename, *s.rename(t1, tdef("r", "t2", ID, N)),
             s.ins("t2", {"id": 3, "n": 3}), s.ins("x", {"id": 2, "n": 2})]
    xlog = root / "r" / "x" / "_delta_log"
    immutable(xlog, True)                       # the last table's write fails
    try:
        with pytest.raises(MirrorUnavailableError):
            mirror.apply(batch, 1)
    finally:
        immutable(xlog, False)
    assert not (root / "r" / "t1").exists()
    t2_version = DeltaTable(str(root / "r" / "t2")).version()
    assert mirror.apply(batch, 1).rows == 2     # t1's row and the rename were behind the mark
    assert not (root / "r" / "t1").exists()
    assert DeltaTable(str(root / "r" / "t2")).version() == t2_version
    assert [(r["id"], r["n"]) for r in rows(root, "r", "t2")] == [(1, 1), (2, 2), (3, 3)]
    assert [(r["id"], r["n"]) for r in rows(root, "r", "x")] == [(1, 1), (2, 2)]
    assert mirror.apply(batch, 1).skipped


def test_compaction_keeps_rows_and_the_cut(settings):
    """compact_every: every 3 batches each table's small files are merged and replaced
    files vacuumed; readers and the consistent cut see the same rows."""
    root = Path(settings.path)
    s = Stream("k")
    compacting = MirrorSettings(**{**settings.__dict__, "compact_batches": 3,
                                   "vacuum_after_s": 0.0})
    mirror = Mirror(compacting)
    mirror.apply([s.ddl("t", None, tdef("k", "t", ID, N))], 0)
    for batch in range(1, 8):
        mirror.apply([s.ins("t", {"id": 10 * batch + i, "n": batch}) for i in range(3)], batch)
    dt = DeltaTable(str(root / "k" / "t"))
    ops = [h["operation"] for h in dt.history()]
    assert ops.count("OPTIMIZE") == 2 and "VACUUM END" in ops
    assert len(dt.file_uris()) <= 3                          # 7 appends merged
    assert sorted(r["id"] for r in dt.to_pyarrow_table().to_pylist()) == \
        sorted(10 * b + i for b in range(1, 8) for i in range(3))
    data_files = [p for p in (root / "k" / "t").glob("*.parquet")]
    assert len(data_files) == len(dt.file_uris())            # replaced files were vacuumed
    cut = read_consistent(root)
    assert cut.batch_id == 7 and cut.to_arrow("k.t").num_rows == 21


def test_an_integer_retyped_to_a_decimal_keeps_its_values(settings):
    """Arrow refuses ``int32`` to ``decimal(10,2)`` by the type's width (it wants
    precision 12) whatever the values; the server converted them all, so the rewrite
    must too, and a value the new type cannot hold still stops the table."""
    root = Path(settings.path)
    s = Stream("app")
    v1 = tdef("app", "r", ID, ColumnDef("n", "int", column_type="int(11)"),
              ColumnDef("m", "bigint", column_type="bigint(20)"))
    mirror = Mirror(settings)
    mirror.apply([s.ddl("r", None, v1), s.ins("r", {"id": 1, "n": 12345678, "m": 5}),
                  s.ins("r", {"id": 2, "n": -7, "m": 10**12})], 0)
    v2 = tdef("app", "r", ID, ColumnDef("n", "decimal", precision=10, scale=2,
                                        column_type="decimal(10,2)"), v1.columns[2])
    assert mirror.apply([s.ddl("r", v1, v2)], 1).stopped == []
    assert [(r["id"], r["n"]) for r in rows(root, "app", "r")] == [
        (1, Decimal("12345678.00")), (2, Decimal("-7.00"))]
    v3 = tdef("app", "r", ID, v2.columns[1], ColumnDef("m", "decimal", precision=6, scale=0,
                                                        column_type="decimal(6,0)"))
    assert mirror.apply([s.ddl("r", v2, v3)], 2).stopped == [("app", "r")]


def test_history_leaves_out_a_change_older_than_the_current_version(settings):
    """As in test_mirror_history: a snapshot read that arrived first is not followed by
    the stream's older change of its key as a second current version."""
    root = Path(settings.path)
    s = Stream("hl")
    t = tdef("hl", "acct", ID, N)
    mirror = Mirror(MirrorSettings(**{**settings.__dict__, "mode": "history"}), history=True)
    create, c1 = s.ddl("acct", None, t), s.ins("acct", {"id": 1, "n": 1})
    late = s.upd("acct", {"id": 1, "n": 2})
    read = s.ins("acct", {"id": 1, "n": 2})
    read["op"] = "r"
    later = s.upd("acct", {"id": 1, "n": 3})
    read["ts_ms"] = later["ts_ms"] + 400      # read in the second `later` commits, before it
    mirror.apply([create, c1], 0)
    mirror.apply([read], 1)
    mirror.apply([late], 2)                     # only a late change: nothing to write
    mirror.apply([later], 3)
    got = [(r["n"], r["is_current"], r["valid_from_seq"], r["valid_to_seq"])
           for r in rows(root, "hl", "acct")]
    assert got == [(1, False, c1["seq"], read["seq"]), (2, False, read["seq"], later["seq"]),
                   (3, True, later["seq"], None)]
    by_n = {r["n"]: r for r in rows(root, "hl", "acct")}
    assert by_n[2]["valid_to"] == by_n[2]["valid_from"]      # never before it began
