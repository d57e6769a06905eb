"""Pure units of the capture and envelope layers: no server."""

from __future__ import annotations

import json

import pytest

from mysqlcdc.binlog.events import (
    EventHeader, GtidEvent, MariadbGtidEvent, QueryEvent, RotateEvent, RowsEvent,
    TableMapEvent, XidEvent,
)
from mysqlcdc.capture.filters import TableFilter
from mysqlcdc.capture.planner import Scan, split
from mysqlcdc.capture.transactions import TxnTracker
from mysqlcdc.envelope.builder import EnvelopeBuilder, TxnContext
from mysqlcdc.envelope.model import ARROW_SCHEMA
from mysqlcdc.errors import ConfigError
from mysqlcdc.spark.options import SourceOptions
from mysqlcdc.types import BinlogPosition, make_seq

pytestmark = pytest.mark.unit


def H(ts: int = 100, server_id: int = 1) -> EventHeader:
    return EventHeader(ts, 0, server_id, 0, 0, 0)


def q(text: str) -> QueryEvent:
    return QueryEvent(H(), 1, 0, 0, "db", text)


def rows() -> RowsEvent:
    return RowsEvent(H(), "c", 1, "db", "t", [(None, {"id": 1})], True)


def tmap() -> TableMapEvent:
    return TableMapEvent(H(), 1, "db", "t", b"\x03", (0,), (False,), None, None)


def test_mysql_transaction_boundaries():
    t = TxnTracker()
    assert t.observe(GtidEvent(H(), "u:1", 1_700_000_000_123_456), "f.1", 4) is False
    assert t.ctx.gtid == "u:1" and t.ctx.ts_ms == 1_700_000_000_123
    assert t.observe(q("BEGIN"), "f.1", 10) is False
    assert t.observe(tmap(), "f.1", 20) is False
    assert t.observe(rows(), "f.1", 30) is False
    assert t.observe(XidEvent(H(), 9), "f.1", 40) is True
    # DDL after a GTID, with no BEGIN: ends after the statement
    assert t.observe(GtidEvent(H(), "u:2"), "f.1", 50) is False
    assert t.observe(q("CREATE TABLE x (a int)"), "f.1", 60) is True


def test_mariadb_groups_and_non_transactional_commit():
    t = TxnTracker()
    assert t.observe(MariadbGtidEvent(H(), 0, 1, 5, 0, False), "f.1", 4) is False
    assert t.ctx.txn_id == "0-1-5"
    assert t.observe(tmap(), "f.1", 10) is False
    assert t.observe(rows(), "f.1", 20) is False
    assert t.observe(q("COMMIT"), "f.1", 30) is True
    assert t.observe(MariadbGtidEvent(H(), 0, 1, 6, 1, True), "f.1", 40) is False
    assert t.observe(q("DROP TABLE x"), "f.1", 50) is True
    # statements inside an open transaction do not end it
    assert t.observe(q("BEGIN"), "f.1", 60) is False
    assert t.ctx.txn_id == "f.1:60"
    assert t.observe(q("INSERT INTO x VALUES (1)"), "f.1", 70) is False
    assert t.observe(XidEvent(H(), 3), "f.1", 80) is True


def test_rotate_moves_to_next_file():
    ev = RotateEvent(H(), "mysql-bin.000010", 4)
    assert TxnTracker.next_position(ev, "mysql-bin.000009", 999) == ("mysql-bin.000010", 4)
    assert TxnTracker().observe(ev, "mysql-bin.000009", 900) is True


def test_positions_order_across_files():
    a, b = BinlogPosition.parse("mysql-bin.000009:900"), BinlogPosition.parse("mysql-bin.000010:4")
    assert a < b
    with pytest.raises(ValueError):
        BinlogPosition.parse("nofile")
    assert make_seq(9, 900, 0) < make_seq(9, 900, 1) < make_seq(10, 4, 0)


def test_table_filter():
    f = TableFilter(("shop.*", "crm.users"), ("shop.tmp_*",))
    assert f("shop", "orders") and f("crm", "users")
    assert not f("shop", "tmp_1") and not f("crm", "leads") and not f("mysql", "user")
    assert TableFilter()("app", "t") and not TableFilter()("mysql", "user")
    with pytest.raises(ValueError):
        TableFilter(("noDot",))
    # answers are remembered: asking again, or after a pickle round trip, agrees
    import pickle
    again = pickle.loads(pickle.dumps(f))
    assert again == f and hash(again) == hash(f)
    for g in (f, again):
        assert [g("shop", "orders"), g("shop", "tmp_1"), g("crm", "leads")] == [True, False, False]


def test_builder_keys_and_schema():
    b = EnvelopeBuilder()
    ctx = TxnContext()
    ctx.gtid, ctx.txn_id, ctx.ts_ms, ctx.server_id = "0-1-1", "0-1-1", 5, 1
    nxt = b.add_rows("u", "db", "t", [({"id": 1, "v": "a"}, {"v": "b"})], ("id",), ctx,
                     "bin.000002", 2, 400, 0)
    nxt = b.add_rows("d", "db", "t", [({"id": 2, "v": "é"}, None)], None, ctx, "bin.000002", 2, 500, 0)
    batch = b.take()
    assert batch.schema == ARROW_SCHEMA and batch.num_rows == 2 and nxt == 1
    data = batch.to_pylist()
    assert json.loads(data[0]["key"]) == {"id": 1}          # key from the before image (MINIMAL)
    assert json.loads(data[1]["key"]) == {"id": 2, "v": "é"}  # no PK: all columns
    assert data[0]["seq"] < data[1]["seq"] and len(b) == 0


def test_split_cuts_at_boundaries():
    p = lambda n: BinlogPosition.of("b.000001", n)  # noqa: E731
    scan = Scan(p(4), p(100), [(p(10), 1), (p(20), 2), (p(50), 3), (p(100), 4)])
    ranges = split(scan, 2)
    assert ranges[0][0] == p(4) and ranges[-1][1] == p(100)
    assert all(a < b for a, b in ranges) and len(ranges) == 2
    assert split(scan, 1) == [(p(4), p(100))]


def test_source_options_validation():
    base = {"host": "h", "user": "u", "serverId": "5"}
    opts = SourceOptions.parse({**base, "MAXEVENTSPERBATCH": "10", "include": "a.*, b.c"})
    assert opts.max_events_per_batch == 10 and opts.tables.include == ("a.*", "b.c")
    for bad in ({"serverId": "x"}, {"startingPosition": "somewhere"}, {"parallelism": "0"}):
        with pytest.raises(ConfigError):
            SourceOptions.parse({**base, **bad})
    with pytest.raises(ConfigError):
        SourceOptions.parse({"host": "h", "user": "u"})
    assert "secret" not in repr(SourceOptions.parse({**base, "password": "secret"}))


def test_corrupt_xid_in_a_file_is_a_named_error(tmp_path):
    """XIDs are only skimmed on the hot path: a damaged one must still stop the read."""
    import struct
    import sys
    from pathlib import Path

    from mysqlcdc.binlog.constants import BINLOG_MAGIC
    from mysqlcdc.capture.offline import iter_file_batches
    from mysqlcdc.errors import ChecksumMismatchError

    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
    from decode_micro import event, fde

    xid = bytearray(event(16, struct.pack("<Q", 9)))
    good = bytes(xid)
    xid[-6] ^= 0x01
    head = BINLOG_MAGIC + fde()
    path = tmp_path / "binlog.000001"
    path.write_bytes(head + good + bytes(xid))
    with pytest.raises(ChecksumMismatchError) as info:
        list(iter_file_batches([str(path)], tables={}))
    assert info.value.pos == len(head) + len(good)


def _micro():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
    import decode_micro
    return decode_micro


def _mariadb_gtid(seq: int, flags2: int, extra: bytes = b"") -> bytes:
    import struct
    return _micro().event(162, struct.pack("<QIB", seq, 0, flags2) + extra)


def test_corrupt_gtid_in_a_file_is_a_named_error(tmp_path):
    """MariaDB GTIDs are only skimmed on the hot path: a damaged one must still stop the read."""
    from mysqlcdc.binlog.constants import BINLOG_MAGIC
    from mysqlcdc.capture.offline import iter_file_batches
    from mysqlcdc.errors import ChecksumMismatchError, MalformedEventError

    m = _micro()
    good = _mariadb_gtid(1, 12)
    bad = bytearray(_mariadb_gtid(2, 12))
    bad[-6] ^= 0x01
    head = BINLOG_MAGIC + m.fde()
    path = tmp_path / "binlog.000001"
    path.write_bytes(head + good + bytes(bad))
    with pytest.raises(ChecksumMismatchError) as info:
        list(iter_file_batches([str(path)], tables={}))
    assert (info.value.pos, info.value.event_type) == (len(head) + len(good), 162)
    path.write_bytes(head + good + m.event(162, b"\x01" * 12))   # a body too short
    with pytest.raises(MalformedEventError) as info:
        list(iter_file_batches([str(path)], tables={}))
    assert info.value.pos == len(head) + len(good)


def test_skimmed_transaction_events_decode_as_parsed_ones():
    """Every GTID flag combination, a TABLE_MAP seen before or not, a transaction
    opened by its TABLE_MAP (no GTID), ANNOTATE_ROWS in or out of the query field:
    the skimming decoder leaves the same rows, boundaries and transaction state as
    one that parses every event (XA GTIDs fall back to parsing)."""
    import struct

    from mysqlcdc.binlog.parser import BinlogParser
    from mysqlcdc.capture.changes import ChangeDecoder

    m = _micro()
    xa = struct.pack("<IBB", 1, 2, 1) + b"gtb"
    annotate = m.event(160, b"INSERT INTO narrow VALUES (1)")
    tmap, xid = m.table_map(7, "narrow", m.NARROW), m.event(16, struct.pack("<Q", 9))
    events = [m.fde()]
    for i, (flags2, extra) in enumerate([(12, b""), (14, b"\x05" * 8), (64 | 8, xa), (128, xa),
                                         (1, b""), (4, b""), (0, b"")]):
        rows = m.rows_event(7, 4, [m.narrow_row(i), m.narrow_row(i + 100)][:1 + i % 2])
        events += [_mariadb_gtid(10 + i, flags2, extra), annotate, tmap, rows, xid]
    events += [tmap, m.rows_event(7, 4, [m.narrow_row(9)]), xid,      # no GTID: opened by the map
               m.table_map(8, "narrow", m.NARROW), m.rows_event(8, 4, [m.narrow_row(8)]), xid]

    def trace(skim: bool, include_query: bool):
        parser = BinlogParser()
        decoder = ChangeDecoder(parser, include_query=include_query)
        if not skim:   # the parser vouches for no event: every one is parsed
            parser.skim, parser.skim_mariadb_gtid, parser.skim_table_map, parser.skim_rows = (
                lambda data: -1, lambda data: None, lambda data: None, lambda data: None)
        pos, states = 4, []
        for raw in events:
            decoder.feed_raw("bin.000003", pos, raw)
            t = decoder.tracker
            states.append((decoder.boundary, decoder.query, t.in_txn, t._group_open,
                           t.ctx.gtid, t.ctx.txn_id, t.ctx.ts_ms, t.ctx.server_id))
            pos += len(raw)
        return decoder.take().to_pylist(), states

    for include_query in (False, True):
        rows, states = trace(True, include_query)
        assert (rows, states) == trace(False, include_query)
        assert [r["gtid"] for r in rows] == ["0-1-10", "0-1-11", "0-1-11", "0-1-12", "0-1-13",
                                             "0-1-13", "0-1-14", "0-1-15", "0-1-15", "0-1-16",
                                             None, None]
        assert rows[-1]["txn_id"] == f"bin.000003:{states[-4][0][1]}"
        assert rows[0]["ts_ms"] == 1_700_000_000_000
        assert rows[0]["query"] == ("INSERT INTO narrow VALUES (1)" if include_query else None)


def _query_event(text: str, db: bytes = b"shop") -> bytes:
    import struct
    post = struct.pack("<IIBHH", 7, 0, len(db), 0, 0)          # no status variables
    return _micro().event(2, post + db + b"\x00" + text.encode())


def test_rollback_after_rows_is_a_record_only_when_asked():
    """A group whose rows are followed by ROLLBACK (a transaction cache that held changes
    of a table that cannot roll back): with emit_rollbacks an ``op = x`` record closes it,
    carrying the transaction's id; a COMMIT closes the next one as usual."""
    from mysqlcdc.binlog.parser import BinlogParser
    from mysqlcdc.capture.changes import ChangeDecoder

    m = _micro()
    tmap = m.table_map(7, "narrow", m.NARROW)
    events = [m.fde(), _mariadb_gtid(20, 0), _query_event("BEGIN"), tmap,
              m.rows_event(7, 4, [m.narrow_row(1)]), _query_event("ROLLBACK"),
              _mariadb_gtid(21, 0), _query_event("BEGIN"), tmap,
              m.rows_event(7, 4, [m.narrow_row(2)]), _query_event("COMMIT")]

    def decode(emit: bool) -> list[dict]:
        decoder = ChangeDecoder(BinlogParser(), emit_rollbacks=emit)
        pos = 4
        for raw in events:
            decoder.feed_raw("bin.000003", pos, raw)
            pos += len(raw)
        return decoder.take().to_pylist()

    plain = decode(False)
    assert [(r["op"], r["txn_id"]) for r in plain] == [("c", "0-1-20"), ("c", "0-1-21")]
    marked = decode(True)
    assert [(r["op"], r["txn_id"]) for r in marked] == [("c", "0-1-20"), ("x", "0-1-20"),
                                                        ("c", "0-1-21")]
    x = marked[1]
    assert x["query"] == "ROLLBACK" and x["table"] is None and x["before"] is None
    assert plain[0]["seq"] < x["seq"] < plain[1]["seq"]


def _xa_prepare(gtrid: bytes, one_phase: bool = False) -> bytes:
    import struct
    return _micro().event(38, struct.pack("<BIII", one_phase, 1, len(gtrid), 0) + gtrid)


def test_mysql_xa_groups_are_held_until_their_outcome():
    """MySQL's shape of XA (no GTID flag: an ``XA START`` statement opens the group, an
    XA_PREPARE event closes it, ``XA COMMIT ... ONE PHASE`` is an XA_PREPARE marked
    one-phase): a prepared group's rows are output at its XA COMMIT, as its changes
    (position, txn id, seq from there), never at its XA ROLLBACK; a one-phase group where
    it is; and a batch taken while a group is open leaves its rows held. The decoders of
    both paths (columnar and per row) agree."""
    import json

    from mysqlcdc.binlog.parser import BinlogParser
    from mysqlcdc.capture.changes import ChangeDecoder

    m = _micro()
    tmap = m.table_map(7, "narrow", m.NARROW)
    rows = lambda *ids: m.rows_event(7, 4, [m.narrow_row(i) for i in ids])  # noqa: E731
    events = [m.fde(),
              _query_event("XA START X'61',X'',1"), tmap, rows(1, 2),
              _query_event("XA END X'61',X'',1"), _xa_prepare(b"a"),              # a prepared
              _query_event("BEGIN"), tmap, rows(3), _query_event("COMMIT"),     # plain
              _query_event("XA START X'62',X'',1"), tmap, rows(4),
              _query_event("XA END X'62',X'',1"), _xa_prepare(b"b"),             # b prepared
              _query_event("XA ROLLBACK X'62',X'',1"),                            # b undone
              _query_event("XA COMMIT X'61',X'',1"),                              # a done
              _query_event("XA START X'63',X'',1"), tmap, rows(5),
              _query_event("XA END X'63',X'',1"), _xa_prepare(b"c", one_phase=True)]

    def decode(columnar: bool, take_at: int | None = None) -> tuple[list[dict], list[int]]:
        decoder = ChangeDecoder(BinlogParser(), columnar=columnar)
        out, positions, pos = [], [], 4
        for i, raw in enumerate(events):
            positions.append(pos)
            decoder.feed_raw("bin.000003", pos, raw)
            pos += len(raw)
            if i == take_at:
                out += decoder.take().to_pylist()
        return out + decoder.take().to_pylist(), positions

    got, at = decode(True)
    assert decode(False)[0] == got
    assert decode(True, take_at=3)[0] == got         # taken mid-group: nothing of a out
    commit = at[16]
    assert [(json.loads(r["after"])["a"], r["pos"]) for r in got] == [
        (3, at[8]), (1, commit), (2, commit), (5, at[19])]
    assert got[1]["txn_id"] == f"bin.000003:{commit}"
    assert [int(r["seq"]) for r in got] == sorted(int(r["seq"]) for r in got)
    assert int(got[2]["seq"]) - int(got[1]["seq"]) == 2
