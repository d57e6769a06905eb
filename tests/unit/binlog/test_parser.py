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
