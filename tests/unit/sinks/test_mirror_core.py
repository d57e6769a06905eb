"""Mirror core without a server: column diffs, value conversion, config checks, retries."""

from __future__ import annotations

from datetime import date, timedelta
from decimal import Decimal

import pytest
from pydantic import ValidationError

from mysqlcdc.config.models import PipelineConfig
from mysqlcdc.errors import MirrorAuthError, MirrorUnavailableError
from mysqlcdc.schema.model import ColumnDef as C, TableDef as T
from mysqlcdc.sinks.mirror import from_sink_config
from mysqlcdc.sinks.mirror.values import parse_time, python_value
from mysqlcdc.sinks.mirror.writer import (RetryableTargetError, TargetAuthError, diff_columns,
                                          run_with_retries)

pytestmark = pytest.mark.unit

ID = C("id", "int", is_primary_key=True, column_type="int(11)")


def test_diff_rename_drop_add_retype():
    before = T("d", "t", (ID, C("a", "varchar", column_type="varchar(5)"),
                          C("b", "int", column_type="int(11)"), C("c", "int", column_type="int(11)")))
    after = T("d", "t", (ID, C("a2", "varchar", column_type="varchar(5)"),
                         C("c", "bigint", column_type="bigint(20)"), C("z", "date")))
    kinds = [(ch.kind, ch.old_name, ch.column.name if ch.column else None)
             for ch in diff_columns(before, after)]
    assert kinds == [("rename", "a", "a2"), ("drop", "b", None), ("retype", "c", "c"),
                     ("add", None, "z")]


def test_values():
    assert python_value(C("d", "decimal"), "-1.50") == Decimal("-1.50")
    assert python_value(C("d", "date"), "0000-00-00") is None
    assert python_value(C("d", "date"), "2024-02-30") is None
    assert python_value(C("d", "date"), "0000-00-00", zero_dates="keep") == "0000-00-00"
    assert python_value(C("d", "date"), "2024-02-29") == date(2024, 2, 29)
    assert python_value(C("s", "set"), ["a", "b"]) == "a,b"
    assert python_value(C("b", "blob"), "AP8=") == b"\x00\xff"
    assert parse_time("-838:59:59.5") == -timedelta(hours=838, minutes=59, seconds=59,
                                                    microseconds=500000)


def _cfg(sink, env=None):
    return PipelineConfig.model_validate(
        {"name": "x", "source": {"host": "h", "user": "u", "server_id": 5},
         "spark": {"checkpoint": "/tmp/ck"}, "sinks": [{"mirror": sink}]},
        context={"env": env or {}})


def test_config(monkeypatch):
    monkeypatch.setenv("MIRROR_PW", "s3cret-value")
    cfg = _cfg({"target": "postgresql", "user": "m", "password_env": "MIRROR_PW"},
               {"MIRROR_PW": "s3cret-value"})
    settings = from_sink_config(cfg.sinks[0], "x", "/tmp/h")
    assert settings.password == "s3cret-value" and settings.port == 5432
    assert "s3cret" not in repr(settings) and "s3cret" not in cfg.model_dump_json()
    with pytest.raises(ValidationError, match="user is required"):
        _cfg({"target": "mysql"})
    with pytest.raises(ValidationError, match="must end with"):
        _cfg({"target": "redis", "key_template": "{pk}:{db}"})
    with pytest.raises(ValidationError):
        _cfg({"target": "delta", "user": "u"})
    with pytest.raises(ValidationError, match="NOPE"):
        _cfg({"target": "redis", "password_env": "NOPE"})


def test_changelog_table_config_and_rows():
    import json

    from mysqlcdc.sinks.changelog_table import from_sink_config as table_settings
    from mysqlcdc.sinks.changelog_table.writer import changelog_rows

    cfg = PipelineConfig.model_validate(
        {"name": "x", "source": {"host": "h", "user": "u", "server_id": 5},
         "spark": {"checkpoint": "/tmp/ck"},
         "sinks": [{"changelog_table": {"target": "mysql", "user": "m"}}]}, context={"env": {}})
    settings = table_settings(cfg.sinks[0], "x", None)
    assert settings.suffix == "_changelog" and settings.ledger_name == "x#changelog"
    with pytest.raises(ValidationError):
        _cfg_sink({"changelog_table": {"target": "redis", "user": "m"}})
    with pytest.raises(ValidationError):
        _cfg_sink({"changelog_table": {"target": "mysql", "user": "m", "ttl_s": 5}})
    base = {"db": "d", "table": "t", "file": "b.000001", "pos": 10, "txn_id": "0-1-5",
            "server_id": 7}
    rows = changelog_rows([
        {**base, "op": "u", "before": '{"id": 1, "v": 1}', "after": '{"id": 1, "v": 2}',
         "key": '{"id": 1}', "seq": Decimal(20)},
        {**base, "op": "t", "before": None, "after": None, "key": None, "seq": Decimal(30)},
        {**base, "op": "c", "after": '{"id": 2, "v": 3}', "before": None, "key": '{"id": 2}',
         "seq": Decimal(12)},
    ], "_changelog")
    got = [(r["table"], json.loads(r["after"])["dml_type"], json.loads(r["after"])["gsn"],
            json.loads(r["after"])["uow_id"], json.loads(r["after"])["v"]) for r in rows]
    assert got == [("t_changelog", 1, "24", "12", 3), ("t_changelog", -1, "40", "12", 1),
                   ("t_changelog", 1, "41", "12", 2)]


def test_changelog_rows_read_again_are_zero_for_live_keys():
    """A read of a key the log holds live (the target says so, or a change earlier in the
    batch made it live) is 0; one of a key it does not hold is +1."""
    import json

    from mysqlcdc.sinks.changelog_table.writer import changelog_rows

    base = {"db": "d", "table": "t", "file": "b.000001", "pos": 10, "txn_id": "x",
            "server_id": 7, "before": None}
    asked = []

    def last_rows(db, table, file, pos, names, keys):
        asked.append((db, table, names, keys))
        return [(1, Decimal(2)) if k["id"] == 1 else None for k in keys]

    def read(i, seq, query="backfill"):
        return {**base, "op": "r", "after": f'{{"id": {i}}}', "key": f'{{"id": {i}}}',
                "seq": Decimal(seq), "query": query}
    rows = changelog_rows([
        read(1, 10), read(2, 11), read(9, 12, "snapshot"),
        {**base, "op": "c", "after": '{"id": 3}', "key": '{"id": 3}', "seq": Decimal(13)},
        read(3, 14), read(4, 15, "backfill:last_in_table"),
        {**base, "op": "d", "before": '{"id": 1}', "after": None, "key": '{"id": 1}',
         "seq": Decimal(16)},
        read(1, 17)], "_log", last_rows=last_rows)
    got = [(json.loads(r["after"])["id"], json.loads(r["after"])["dml_type"]) for r in rows]
    assert got == [(1, 0), (2, 1), (9, 1), (3, 1), (3, 0), (4, 1), (1, -1), (1, 1)]
    assert asked == [("d", "t_log", ["id"],
                      [{"id": 1}, {"id": 2}, {"id": 9}, {"id": 3}, {"id": 4}])]


def test_changelog_rows_count_each_image_once_whatever_the_snapshot_order():
    """A snapshot chunk's read of a key reaches the log before the stream's older changes
    of it (they sort before the chunk's high watermark): those are already in the read's
    image, so they are 0. A key changed while its chunk was read is not in the chunk: the
    old image of its first change was never counted, so it is 0, not -1. SUM(dml_type)
    per key is then 1 for live keys and 0 for deleted ones, and SUM(v * dml_type) counts
    each live value once."""
    import json

    from mysqlcdc.sinks.changelog_table.writer import changelog_rows

    base = {"db": "d", "table": "t", "file": "b.000001", "pos": 10, "txn_id": None,
            "server_id": 7}
    logged: dict[int, list[tuple[int, Decimal, int]]] = {}    # the target: id -> rows

    def last_rows(db, table, file, pos, names, keys):                 # counted rows
        counted = {i: [r for r in rows if r[0]] for i, rows in logged.items()}
        return [counted[k["id"]][-1][:2] if counted.get(k["id"]) else None for k in keys]

    def apply(batch):
        for r in changelog_rows(batch, "_log", last_rows=last_rows):
            row = json.loads(r["after"])
            logged.setdefault(row["id"], []).append((row["dml_type"], Decimal(row["gsn"]),
                                                     row["v"]))
            logged[row["id"]].sort(key=lambda x: x[1])

    def img(i, v):
        return json.dumps({"id": i, "v": v})

    def change(op, i, seq, before=None, after=None):
        return {**base, "op": op, "key": json.dumps({"id": i}), "seq": Decimal(seq),
                "before": None if before is None else img(i, before),
                "after": None if after is None else img(i, after), "query": None}

    # the snapshot's chunks (state at their high watermarks, seq 100 and 200), first
    apply([change("r", 1, 100, after=2), change("r", 3, 100, after=30),
           change("r", 5, 200, after=50)])
    # then the stream from the snapshot's start: 1 updated and 2 deleted before the
    # chunk read them; 4 updated and 6 deleted inside the chunk's window (dropped from
    # it); 7 inserted and 3 updated after it; 5 deleted after it
    apply([change("u", 1, 50, before=1, after=2), change("d", 2, 60, before=9),
           change("u", 4, 150, before=40, after=41), change("d", 6, 160, before=60),
           change("c", 7, 170, after=70), change("u", 3, 250, before=30, after=31)])
    apply([change("d", 5, 300, before=50), change("u", 4, 310, before=41, after=42)])
    # a backfill read ahead of a lagging stream: 3 is live, so its read (state at 500)
    # is 0; the stream's changes before 500 arrive after it and still count
    apply([{**change("r", 3, 500, after=33), "query": "backfill"}])
    apply([change("u", 3, 400, before=31, after=32), change("u", 3, 450, before=32, after=33)])
    sums = {i: sum(s for s, _, _ in rows) for i, rows in logged.items()}
    values = {i: sum(s * v for s, _, v in rows) for i, rows in logged.items()}
    assert sums == {1: 1, 2: 0, 3: 1, 4: 1, 5: 0, 6: 0, 7: 1}
    assert values == {1: 2, 2: 0, 3: 33, 4: 42, 5: 0, 6: 0, 7: 70}


def _cfg_sink(sink):
    return PipelineConfig.model_validate(
        {"name": "x", "source": {"host": "h", "user": "u", "server_id": 5},
         "spark": {"checkpoint": "/tmp/ck"}, "sinks": [sink]}, context={"env": {}})


class _Flaky:
    def __init__(self, errors):
        self.errors = errors

    def connect(self):
        if self.errors:
            raise self.errors.pop(0)

    def close(self):
        pass


def test_retries_then_names_errors():
    sleeps = []
    errors = [RetryableTargetError("down"), RetryableTargetError("down")]
    assert run_with_retries(lambda: _Flaky(errors), lambda t: "ok", attempts=3,
                            initial_delay_s=0.5, max_delay_s=0.8, sleep=sleeps.append) == "ok"
    assert sleeps == [0.5, 0.8]
    with pytest.raises(MirrorUnavailableError):
        run_with_retries(lambda: _Flaky([RetryableTargetError("x")] * 5), lambda t: "ok",
                         attempts=2, initial_delay_s=0, max_delay_s=0, sleep=lambda s: None)
    calls = []
    with pytest.raises(MirrorAuthError):
        run_with_retries(lambda: calls.append(1) or _Flaky([TargetAuthError("no")]),
                         lambda t: "ok", attempts=5, initial_delay_s=0, max_delay_s=0,
                         sleep=lambda s: None)
    assert calls == [1]                      # no retry on wrong credentials
