"""Parser behaviour on synthetic events: checksums, unknown types, encryption, framing."""

from __future__ import annotations

import struct
import sys
import zlib
from pathlib import Path

import pytest

from mysqlcdc.binlog import events as E
from mysqlcdc.binlog.file import iter_binlog_bytes, iter_binlog_file
from mysqlcdc.binlog.parser import BinlogParser
from mysqlcdc.errors import (ChecksumMismatchError, EncryptedBinlogError, MalformedEventError,
                             TruncatedEventError, UnsupportedEventError)
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
from decode_micro import NARROW, event, fde, narrow_row, rows_event, table_map  # noqa: E402

pytestmark = pytest.mark.unit


def _ready() -> BinlogParser:
    p = BinlogParser(file="t.000001")
    p.parse(fde())
    p.parse(table_map(7, "narrow", NARROW))
    return p


def test_rows_roundtrip_and_filter():
    ev = _ready().parse(rows_event(7, 4, [narrow_row(1), narrow_row(2)]))[0]
    assert isinstance(ev, E.RowsEvent) and ev.kind == "c" and ev.stmt_end
    assert ev.rows[1] == (None, {"a": 2, "b": 4, "c": 6, "d": "value-02"})
    p = BinlogParser(include=lambda db, t: False)
    p.parse(fde())
    p.parse(table_map(7, "narrow", NARROW))
    assert p.parse(rows_event(7, 4, [narrow_row(1)]))[0].rows is None


def test_checksum_mismatch_and_fde_in_use_flag():
    raw = bytearray(fde())
    raw[17] |= 1                      # LOG_EVENT_BINLOG_IN_USE_F: CRC computed without it
    BinlogParser().parse(bytes(raw))
    p = _ready()
    bad = bytearray(rows_event(7, 4, [narrow_row(1)]))
    bad[-6] ^= 0xFF
    with pytest.raises(ChecksumMismatchError) as info:
        p.parse(bytes(bad), 1234)
    assert (info.value.file, info.value.pos, info.value.event_type) == ("t.000001", 1234, 30)
    BinlogParser(verify_checksum=False).parse(fde())


def test_unknown_events():
    p = _ready()
    ignorable = bytearray(event(99, b"x"))
    ignorable[17] |= 0x80
    ignorable[-4:] = zlib.crc32(bytes(ignorable[:-4])).to_bytes(4, "little")
    assert isinstance(p.parse(bytes(ignorable))[0], E.UnknownEvent)
    assert isinstance(p.parse(event(100, b"pad"))[0], E.UnknownEvent)
    with pytest.raises(UnsupportedEventError):
        p.parse(event(99, b"x"))
    with pytest.raises(EncryptedBinlogError):
        p.parse(event(164, b"\x01" * 20))


def test_file_framing_errors():
    with pytest.raises(EncryptedBinlogError):
        list(iter_binlog_bytes(b"\xfdbin" + b"\x00" * 30))
    with pytest.raises(TruncatedEventError):
        list(iter_binlog_bytes(b"\xfebin" + fde()[:-1]))
    assert len(list(iter_binlog_bytes(b"\xfebin" + fde()))) == 1


def test_rotate_updates_file_name():
    p = _ready()
    ev = p.parse(event(4, struct.pack("<Q", 4) + b"binlog.000002"))[0]
    assert ev == E.RotateEvent(ev.header, "binlog.000002", 4) and p.file == "binlog.000002"


def _framing(it):
    """Every (pos, event) an iterator yields, then the error it ends with (or None)."""
    out = []
    try:
        for item in it:
            out.append(item)
    except Exception as e:  # noqa: BLE001 - the error is what is compared
        return out, (type(e).__name__, str(e), getattr(e, "pos", None))
    return out, None


@pytest.mark.parametrize("cut", [None, 3, 4, 10, 60, 61, 200, 255, "bad size", "encrypted"])
def test_file_reads_in_chunks_like_bytes(tmp_path, cut):
    events = [fde(), table_map(7, "narrow", NARROW), rows_event(7, 4, [narrow_row(i) for i in range(30)]),
              event(16, b"\x01" * 8)]
    if cut == "bad size":
        events[2] = events[2][:9] + (5).to_bytes(4, "little") + events[2][13:]
    elif cut == "encrypted":
        events.insert(2, event(164, b"\x01" * 10))
    data = b"\xfebin" + b"".join(events)
    data = data if not isinstance(cut, int) else data[:cut]
    path = tmp_path / "t.000001"
    path.write_bytes(data)
    want = _framing(iter_binlog_bytes(data, "t.000001"))
    for chunk in (1, 2, 5, 19, 64, 1 << 20):
        assert _framing(iter_binlog_file(path, chunk=chunk)) == want


def test_header_is_the_frozen_event_header():
    import dataclasses
    ev = _ready().parse(rows_event(7, 4, [narrow_row(1)]))[0]
    assert type(ev.header) is E.EventHeader and ev.header == E.EventHeader(*dataclasses.astuple(ev.header))
    with pytest.raises(dataclasses.FrozenInstanceError):
        ev.header.flags = 1


def test_rows_cache_follows_the_table_map_in_force():
    p = _ready()
    raw = rows_event(7, 4, [narrow_row(1)])
    assert p.parse(raw)[0].rows[0][1]["a"] == 1
    assert p.parse(raw)[0].rows[0][1]["a"] == 1          # from the cache
    renamed = [("x" + name, *rest) for name, *rest in NARROW]
    p.parse(table_map(7, "narrow", renamed))            # the same table id, new columns
    ev = p.parse(raw)[0]
    assert ev.rows[0][1] == {"xa": 1, "xb": 2, "xc": 3, "xd": "value-01"} and ev.table == "narrow"
    p.parse(table_map(7, "other", NARROW))
    assert p.parse(raw)[0].table == "other"
    p.parse(fde())                                      # a new FORMAT_DESCRIPTION empties it
    assert all(not cache for cache in p.rows_cache.values())
    q = BinlogParser(include=lambda db, t: False)
    q.parse(fde())
    q.parse(table_map(7, "narrow", NARROW))
    assert q.parse(raw)[0].rows is None and q.parse(raw)[0].rows is None


def test_skim_rows_only_for_a_shape_decoded_under_the_map_in_force():
    """``skim_rows`` hands back the rows ``parse`` puts in the event, and only for a
    rows event whose shape was decoded before under the TABLE_MAP still in force and
    whose bytes check out; otherwise None, and ``parse`` decodes it or names what is
    wrong."""
    p = _ready()
    raw = rows_event(7, 4, [narrow_row(1), narrow_row(2)])
    assert p.skim_rows(raw) is None                     # this shape never decoded
    ev = p.parse(raw)[0]
    hit, rows = p.skim_rows(raw)
    assert rows == ev.rows and hit[2:6] == ("c", 7, "bench", "narrow")
    other = rows_event(7, 4, [narrow_row(3)])           # same shape, other rows
    assert p.skim_rows(other)[1] == p.parse(other)[0].rows
    bad = bytearray(raw)
    bad[-6] ^= 0xFF
    assert p.skim_rows(bytes(bad)) is None
    with pytest.raises(ChecksumMismatchError):
        p.parse(bytes(bad), 99)
    short = rows_event(7, 4, [narrow_row(1)[:-3]])      # images that end past the event
    assert p.skim_rows(short) is None
    with pytest.raises(MalformedEventError):
        p.parse(short, 99)
    p.parse(table_map(7, "renamed", NARROW))            # another map for the table id
    assert p.skim_rows(raw) is None
    assert p.parse(raw)[0].table == "renamed"
    assert p.skim_rows(raw)[0][5] == "renamed"
    p.parse(fde())                                      # a new FORMAT_DESCRIPTION forgets them
    assert p.skim_rows(raw) is None


def test_skim_checks_xid_and_annotate_without_decoding():
    """``skim`` answers only for an intact XID or ANNOTATE_ROWS; anything it cannot
    vouch for is -1, and ``parse`` then decodes it or raises the named error."""
    p = _ready()
    xid = event(16, struct.pack("<Q", 5))
    annotate = event(160, b"INSERT INTO t VALUES (1)")
    assert p.skim(xid) == 16 and p.skim(annotate) == 160
    assert p.skim(rows_event(7, 4, [narrow_row(1)])) == -1
    assert BinlogParser().skim(xid) == -1               # no FORMAT_DESCRIPTION yet
    bad = bytearray(xid)
    bad[-6] ^= 0xFF
    assert p.skim(bytes(bad)) == -1
    with pytest.raises(ChecksumMismatchError):
        p.parse(bytes(bad), 99)
    short = event(16, b"\x01\x02")                      # an XID needs 8 bytes
    assert p.skim(short) == -1
    with pytest.raises(MalformedEventError):
        p.parse(short, 99)
    resized = bytearray(xid)
    resized[9:13] = struct.pack("<I", len(xid) + 1)     # header size disagrees with the bytes
    assert p.skim(bytes(resized)) == -1
    unchecked = BinlogParser(verify_checksum=False)
    unchecked.parse(fde())
    assert unchecked.skim(bytes(bad)) == 16


def _mariadb_gtid(seq: int, domain: int = 0, flags2: int = 0, extra: bytes = b"") -> bytes:
    return event(162, struct.pack("<QIB", seq, domain, flags2) + extra)


def test_skim_mariadb_gtid_reads_what_parse_would():
    """``skim_mariadb_gtid`` gives the fields of an intact MariaDB GTID; anything it
    cannot vouch for is None, and ``parse`` then decodes it or raises the named error."""
    p = _ready()
    raw = _mariadb_gtid(42, 3, 4 | 8)                   # TRANSACTIONAL | ALLOW_PARALLEL
    ts, code, sid, size, _, _, seq, domain, flags2 = p.skim_mariadb_gtid(raw)
    ev = p.parse(raw)[0]
    assert (ts, code, sid, size) == (ev.header.timestamp, 162, ev.header.server_id, len(raw))
    assert (seq, domain, flags2) == (ev.seq_no, ev.domain_id, ev.flags2) == (42, 3, 12)
    assert p.skim_mariadb_gtid(_mariadb_gtid(7, 0, 2, extra=b"\x01" * 8))[6] == 7   # + commit id
    assert BinlogParser().skim_mariadb_gtid(raw) is None        # no FORMAT_DESCRIPTION yet
    assert p.skim_mariadb_gtid(event(16, struct.pack("<Q", 5) + b"\x00" * 5)) is None
    bad = bytearray(raw)
    bad[-6] ^= 0xFF
    assert p.skim_mariadb_gtid(bytes(bad)) is None
    with pytest.raises(ChecksumMismatchError):
        p.parse(bytes(bad), 99)
    short = event(162, b"\x01" * 12)                    # seq_no, domain id and flags2 are 13
    assert p.skim_mariadb_gtid(short) is None
    with pytest.raises(MalformedEventError):
        p.parse(short, 99)
    resized = bytearray(raw)
    resized[9:13] = struct.pack("<I", len(raw) + 1)     # header size disagrees with the bytes
    assert p.skim_mariadb_gtid(bytes(resized)) is None
    with pytest.raises(TruncatedEventError):
        p.parse(bytes(resized), 99)
    for xa in (64, 128):                                # XA groups are left to parse
        xa_raw = _mariadb_gtid(9, 0, xa, extra=struct.pack("<IBB", 1, 1, 1) + b"gb")
        assert p.skim_mariadb_gtid(xa_raw) is None and p.parse(xa_raw)[0].flags2 == xa
    unchecked = BinlogParser(verify_checksum=False)
    unchecked.parse(fde())
    assert unchecked.skim_mariadb_gtid(bytes(bad))[6] == 42


def _named_table_map(table_id: int, name: str) -> bytes:
    """A TABLE_MAP of NARROW without optional metadata: its names come from ``tables``."""
    types = bytes(c[1] for c in NARROW)
    meta = b"".join(c[2] for c in NARROW)
    body = table_id.to_bytes(6, "little") + b"\x01\x00" + b"\x05bench\x00"
    body += bytes([len(name)]) + name.encode() + b"\x00" + bytes([len(NARROW)]) + types
    return event(19, body + bytes([len(meta)]) + meta + b"\x0f")


def test_skim_table_map_only_while_the_decoded_state_holds():
    """``skim_table_map`` reuses a TABLE_MAP decoded before, and puts its state in
    force, only while its bytes are intact and the table's definition and inclusion
    are what they were; otherwise None, and ``parse`` decodes it afresh."""
    from mysqlcdc.schema.model import ColumnDef, TableDef

    def narrow(prefix: str) -> TableDef:
        return TableDef("bench", "n", tuple(ColumnDef(prefix + c[0], "int" if c[1] == 3 else "varchar")
                                            for c in NARROW))
    defs, included = {"n": narrow("")}, {"n": True}
    p = BinlogParser(tables=lambda db, t: defs.get(t), include=lambda db, t: included[t])
    p.parse(fde())
    raw = _named_table_map(7, "n")
    assert p.skim_table_map(raw) is None                # never decoded
    ev = p.parse(raw)[0]
    first = p.table_maps[7]
    assert first.event == ev and [c.name for c in first.columns] == ["a", "b", "c", "d"]
    p.table_maps.clear()
    assert p.skim_table_map(raw) is first and p.table_maps[7] is first
    other = _named_table_map(8, "n")                    # another table id: other bytes
    assert p.skim_table_map(other) is None
    bad = bytearray(raw)
    bad[-6] ^= 0xFF
    assert p.skim_table_map(bytes(bad)) is None
    with pytest.raises(ChecksumMismatchError):
        p.parse(bytes(bad), 99)
    defs["n"] = narrow("x")                             # the definition in force changed
    assert p.skim_table_map(raw) is None
    p.parse(raw)
    assert [c.name for c in p.table_maps[7].columns] == ["xa", "xb", "xc", "xd"]
    assert p.skim_table_map(raw) is p.table_maps[7]
    included["n"] = False                               # held back or filtered from here on
    assert p.skim_table_map(raw) is None
    p.parse(raw)
    assert not p.table_maps[7].included and p.skim_table_map(raw) is p.table_maps[7]
    p.parse(fde())                                      # a new FORMAT_DESCRIPTION forgets them
    assert p.skim_table_map(raw) is None


def test_skim_table_map_leaves_a_failing_lookup_to_parse():
    """A ``tables`` callable that raises on a TABLE_MAP seen before: the skim vouches
    for nothing, and ``parse`` raises the named error it always did."""
    from mysqlcdc.schema.model import ColumnDef, TableDef

    narrow = TableDef("bench", "n", tuple(ColumnDef(c[0], "int") for c in NARROW))
    failing = []

    def tables(db, t):
        if failing:
            raise KeyError(t)
        return narrow
    p = BinlogParser(tables=tables)
    p.parse(fde())
    raw = _named_table_map(7, "n")
    p.parse(raw)
    assert p.skim_table_map(raw) is p.table_maps[7]
    failing.append(True)
    assert p.skim_table_map(raw) is None
    with pytest.raises(MalformedEventError):
        p.parse(raw, 99)
