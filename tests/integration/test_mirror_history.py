"""History tables (mode: history) in PostgreSQL and MySQL/MariaDB: every version of every
row with valid_from/valid_to (commit times), their seqs and is_current; replays add none.
(The Delta target's history mode is in test_mirror_delta.py.)"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from mysqlcdc.schema.model import ColumnDef
from mysqlcdc.sinks.mirror import MirrorSettings, make_target
from mysqlcdc.sinks.mirror.writer import Definitions, apply_batch, run_with_retries

from tests.integration.test_mirror_delta import Stream
from tests.integration.test_mirror_postgres import ID, tdef

pytestmark = pytest.mark.integration

N = ColumnDef("n", "int", column_type="int(11)")
FIXTURES = {"postgresql": ("postgres", "postgres"), "mysql": ("mariadb_target", "mysqlcdc")}


@pytest.fixture(params=["postgresql", "mysql"])
def target(request):
    fixture, database = FIXTURES[request.param]
    server = request.getfixturevalue(fixture)
    settings = MirrorSettings(target=request.param, host=server.host, port=server.port,
                              user=server.user, password=server.password, database=database,
                              pipeline=f"hist_{request.param}", mode="history", attempts=2,
                              initial_delay_s=0.05)
    db = f"hist_{request.param}"
    server.sql(f'DROP SCHEMA IF EXISTS "{db}" CASCADE' if request.param == "postgresql"
               else f"DROP DATABASE IF EXISTS `{db}`")
    return settings, server, db


def versions(server, kind: str, db: str, table: str) -> list[tuple]:
    q = '"' if kind == "postgresql" else "`"
    return server.sql(f"SELECT id, n, is_current, valid_from_seq, valid_to_seq, valid_from, "
                      f"valid_to FROM {q}{db}{q}.{q}{table}{q} ORDER BY id, valid_from_seq")


def applier(settings):
    """Applies batches as foreach_batch does (one Definitions per pipeline)."""
    defs = Definitions(None)

    def apply(rows, batch_id):
        return run_with_retries(lambda: make_target(settings),
                                lambda t: apply_batch(t, rows, batch_id=batch_id, history=True,
                                                      pipeline=settings.pipeline, definitions=defs),
                                attempts=2, initial_delay_s=0.05, max_delay_s=0.1)
    return apply


def test_history_versions_ddl_truncate_replay(target):
    settings, server, db = target
    apply = applier(settings)
    s = Stream(db)
    t = tdef(db, "acct", ID, N)
    create, c1, c2 = s.ddl("acct", None, t), s.ins("acct", {"id": 1, "n": 1}), \
        s.ins("acct", {"id": 2, "n": 1})
    u1 = s.upd("acct", {"id": 1, "n": 2})
    apply([create, c1, c2, u1], 0)
    u2, d2 = s.upd("acct", {"id": 1, "n": 3}), s.dele("acct", {"id": 2, "n": 1})
    moved_d = s.dele("acct", {"id": 1, "n": 3})              # a key change: 1 -> 5
    moved_c = s.ins("acct", {"id": 5, "n": 3})
    moved_c["pos"], moved_c["seq"] = moved_d["pos"], moved_d["seq"] + 1
    apply([u2, d2, moved_d, moved_c], 1)
    got = versions(server, settings.target, db, "acct")
    assert [(i, n, bool(cur)) for i, n, cur, *_ in got] == [
        (1, 1, False), (1, 2, False), (1, 3, False), (2, 1, False), (5, 3, True)]
    assert [r[3] for r in got] == [c1["seq"], u1["seq"], u2["seq"], c2["seq"], moved_c["seq"]]
    assert [r[4] for r in got] == [u1["seq"], u2["seq"], moved_d["seq"], d2["seq"], None]
    when = got[0][5] if got[0][5].tzinfo else got[0][5].replace(tzinfo=timezone.utc)
    assert when == datetime.fromtimestamp(c1["ts_ms"] / 1000, timezone.utc)
    # a replay of batch 1 adds nothing
    assert apply([u2, d2, moved_d, moved_c], 1).skipped
    assert versions(server, settings.target, db, "acct") == got
    # an added column, then a truncate: every version stays, none is current
    t2 = tdef(db, "acct", ID, N, ColumnDef("note", "varchar", charset="utf8mb4",
                                          column_type="varchar(10)"))
    alter = s.ddl("acct", t, t2)
    c6 = s.ins("acct", {"id": 6, "n": 1, "note": "x"})
    trunc = s.rec("t", "acct")
    c7 = s.ins("acct", {"id": 7, "n": 1, "note": "y"})
    apply([alter, c6, trunc, c7], 2)
    after = versions(server, settings.target, db, "acct")
    assert len(after) == 7
    assert [(r[0], r[1]) for r in after if r[2]] == [(7, 1)]
    closed = {(r[0], r[1]): r[4] for r in after}
    assert closed[(5, 3)] == closed[(6, 1)] == trunc["seq"]


def test_a_change_older_than_the_current_version_is_left_out(target):
    """A snapshot chunk's row (its state at the chunk's high watermark) reaches the target
    before the stream's change of the key made while the snapshot ran: that change is in
    the row's image already. It used to be added as a second current version whose range
    overlapped the read's; now the chain stays one line with one current version."""
    from dataclasses import replace

    settings, server, db = target
    settings = replace(settings, pipeline=f"{settings.pipeline}_late")   # its own ledger row
    apply = applier(settings)
    s = Stream(db)
    t = tdef(db, "late", ID, N)
    create, c1, c2 = s.ddl("late", None, t), s.ins("late", {"id": 1, "n": 1}), \
        s.ins("late", {"id": 2, "n": 1})
    late = s.upd("late", {"id": 1, "n": 2})                  # made while the chunk was read
    read = s.ins("late", {"id": 1, "n": 2})                  # the chunk's row, after it
    read["op"] = "r"
    later = s.upd("late", {"id": 1, "n": 3})
    read["ts_ms"] = later["ts_ms"] + 400      # read in the second `later` commits, before it
    apply([create, c1, c2], 0)
    apply([read], 1)
    apply([late, s.upd("late", {"id": 2, "n": 5}), later], 2)
    got = [(i, n, bool(cur), f, to) for i, n, cur, f, to, *_ in
           versions(server, settings.target, db, "late")]
    assert got == [(1, 1, False, c1["seq"], read["seq"]), (1, 2, False, read["seq"], later["seq"]),
                   (1, 3, True, later["seq"], None), (2, 1, False, c2["seq"], got[4][3]),
                   (2, 5, True, got[4][3], None)]
    # the read's version ends when `later` commits, never before it began (binlog commit
    # times have whole seconds, a read's milliseconds)
    (_, _, _, _, _, start, end), *_ = [v for v in versions(server, settings.target, db, "late")
                                       if v[3] == read["seq"]]
    assert end == start
