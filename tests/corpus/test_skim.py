"""The driver's header skim finds exactly what a full parse finds: the same
transaction boundaries, the same DDL, every distinct TABLE_MAP; on every corpus
file (MySQL 8 TRANSACTION_PAYLOADs, whose boundaries hide inside, included)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mysqlcdc.binlog import events as E
from mysqlcdc.binlog.file import iter_binlog_bytes
from mysqlcdc.binlog.parser import BinlogParser
from mysqlcdc.capture.skim import Skimmer
from mysqlcdc.capture.transactions import TxnTracker
from mysqlcdc.errors import DecodeError

from .conftest import CORPUS, manifest_files, read_binlog

pytestmark = pytest.mark.unit

FILES = manifest_files()


def _tm(pos: int, ev: E.TableMapEvent) -> tuple:
    return (pos, ev.table_id, ev.schema, ev.table, bytes(ev.column_types), ev.column_metas,
            ev.nullable, ev.column_names)


def _reference(rel: str):
    """Full parse of every event: boundaries, QUERY texts, TABLE_MAPs; events read."""
    name = Path(rel).name
    parser, tracker = BinlogParser(include=lambda db, t: False, file=name), TxnTracker()
    boundaries, queries, maps, n = [], [], [], 0
    file = name
    try:
        for i, (pos, raw) in enumerate(iter_binlog_bytes(read_binlog(rel), name)):
            events = parser.parse(raw, pos)
            n = i + 1
            boundary = False
            for ev in events:
                if isinstance(ev, E.QueryEvent):
                    queries.append((pos, ev.query))
                elif isinstance(ev, E.TableMapEvent):
                    maps.append(_tm(pos, ev))
                boundary = tracker.observe(ev, file, pos)
            if boundary:
                boundaries.append((i, TxnTracker.next_position(events[-1], file, pos + len(raw))))
    except DecodeError:
        pass
    return boundaries, queries, maps, n


def _skimmed(rel: str, n: int):
    name = Path(rel).name
    queries, maps = [], []

    def observe(file, pos, events):
        for ev in events:
            if isinstance(ev, E.QueryEvent):
                queries.append((pos, ev.query))
            elif isinstance(ev, E.TableMapEvent):
                maps.append(_tm(pos, ev))
    skimmer = Skimmer(name, observe)
    boundaries = []
    try:
        for i, (pos, raw) in enumerate(iter_binlog_bytes(read_binlog(rel), name)):
            if i >= n:
                break
            after = skimmer.feed(name, pos, raw)
            if after is not None:
                boundaries.append((i, after))
    except DecodeError:
        pass
    return boundaries, queries, maps, skimmer


@pytest.mark.parametrize("rel", FILES or ["<corpus missing>"])
def test_skim_finds_what_a_full_parse_finds(rel):
    assert (CORPUS / rel).exists(), f"missing corpus file {rel}"
    want_b, want_q, want_m, n = _reference(rel)
    got_b, got_q, got_m, _ = _skimmed(rel, n)
    assert got_b == want_b
    assert got_q == want_q
    assert set(got_m) <= set(want_m)                       # shown where a parse saw them
    assert {m[1:] for m in got_m} == {m[1:] for m in want_m}  # every distinct one shown


def test_boundaries_inside_a_transaction_payload():
    rel = "mariadb-server-10.11-testdata/std_data/mdev35643_mysql_80_binlog.000001"
    boundaries, queries, maps, skimmer = _skimmed(rel, 10**9)
    name = Path(rel).name
    payload = [pos for pos, raw in iter_binlog_bytes(read_binlog(rel), name) if raw[4] == 40]
    ends = {after for _, after in boundaries}
    [(pos, size)] = [(p, len(r)) for p, r in iter_binlog_bytes(read_binlog(rel), name)
                     if r[4] == 40]
    assert payload == [pos] and (name, pos + size) in ends    # the payload's XID closes it
    # 100 TABLE_MAPs inside the payload, all the same as t1's before it: none shown again
    assert len(maps) == len({m[1:] for m in maps})
    assert [m for m in _reference(rel)[2] if m[0] == pos][0][3] == "t1"
    assert not [m for m in maps if m[0] == pos]
    assert not skimmer.tracker.in_txn


def test_a_repeated_table_map_is_shown_again_after_the_generation_changes():
    rel = "mariadb-server-10.11-testdata/std_data/mdev35643_mysql_80_binlog.000001"
    name = Path(rel).name
    shown: list[int] = []
    generation = [0]

    def observe(file, pos, events):
        shown.extend(pos for ev in events if isinstance(ev, E.TableMapEvent))
        generation[0] += 1          # as if every event changed the history
    skimmer = Skimmer(name, observe, generation=lambda f, p: generation[0])
    maps = 0
    for pos, raw in iter_binlog_bytes(read_binlog(rel), name):
        skimmer.feed(name, pos, raw)
        maps += raw[4] == 19
    # every top-level TABLE_MAP and the 100 inside the payload (one event each time)
    assert len(shown) == maps + 100
