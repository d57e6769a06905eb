"""``BinlogParser.skim_txn`` on every corpus file: a transaction it says can be passed
over is exactly one whose events, parsed one by one, are TABLE_MAPs of tables not
captured, their rows events, ANNOTATE_ROWS / ROWS_QUERY and MySQL's BEGIN, ending in an
XID; its sizes, end offset and TABLE_MAP states are what parsing them gives."""

from __future__ import annotations

from pathlib import Path

import pytest

from mysqlcdc.binlog import constants as C
from mysqlcdc.binlog import events as E
from mysqlcdc.binlog.file import iter_binlog_bytes
from mysqlcdc.binlog.parser import BinlogParser
from mysqlcdc.errors import DecodeError

from .conftest import manifest_files, read_binlog

pytestmark = pytest.mark.unit

FILES = manifest_files()
_STARTS = (C.GTID_LOG_EVENT, C.ANONYMOUS_GTID_LOG_EVENT, C.GTID_TAGGED_LOG_EVENT, C.MARIA_GTID_EVENT)
_INNER = (E.TableMapEvent, E.RowsEvent, E.MariadbAnnotateRowsEvent, E.RowsQueryEvent)


def _passes(rel: str, parser: BinlogParser) -> tuple[int, int]:
    """Walk ``rel``, asking ``skim_txn`` at every GTID event before parsing on; returns
    (transactions passed, GTID events asked at)."""
    name = Path(rel).name
    raws: list[tuple[int, bytes]] = []
    try:
        for pos, raw in iter_binlog_bytes(read_binlog(rel), name):
            raws.append((pos, raw))
    except DecodeError:
        pass
    batch = [raw for _, raw in raws]
    passed = asked = 0
    i = 0
    try:
        while i < len(batch):
            found = None
            if batch[i][4] in _STARTS:
                asked += 1
                found = parser.skim_txn(batch, i, lambda db, table: True)
            parser.parse(batch[i], raws[i][0])
            if found is None:
                i += 1
                continue
            j, size, end, states = found
            inner = []
            for k in range(i + 1, j):
                inner.extend(parser.parse(batch[k], raws[k][0]))
            assert batch[j][4] == C.XID_EVENT, rel
            for ev in inner:
                if isinstance(ev, E.QueryEvent):
                    assert ev.query == "BEGIN" and ev is inner[0], rel
                    continue
                assert isinstance(ev, _INNER), (rel, ev)
                if isinstance(ev, E.RowsEvent):
                    assert ev.rows is None and ev.table_id in states, rel   # not decoded
            assert size == sum(len(batch[k]) for k in range(i + 1, j))
            assert end == raws[j - 1][0] + len(batch[j - 1]) == raws[j][0]
            for tid, state in states.items():
                assert parser.table_maps[tid] is state and not state.included
            passed += 1
            i = j
    except DecodeError:
        pass
    return passed, asked


@pytest.mark.skipif(not FILES, reason="corpus not present")
def test_skim_txn_passes_only_what_parsing_would_not_decode():
    totals = {"mariadb": 0, "mysql8": 0}
    for rel in FILES:
        parser = BinlogParser(include=lambda db, t: False, file=Path(rel).name)
        passed, asked = _passes(rel, parser)
        assert passed <= asked
        version = parser.fde.server_version if parser.fde is not None else ""
        kind = "mariadb" if "mariadb" in version.lower() else \
            "mysql8" if version[:2] in ("8.", "9.") else None
        if kind:
            totals[kind] += passed
    # both dialects' shapes are recognised somewhere in the corpus
    assert totals["mariadb"] > 0 and totals["mysql8"] > 0, totals


@pytest.mark.skipif(not FILES, reason="corpus not present")
def test_skim_txn_passes_nothing_of_a_captured_table():
    for rel in FILES:
        parser = BinlogParser(include=lambda db, t: True, file=Path(rel).name)
        passed, _ = _passes(rel, parser)
        assert passed == 0, rel
