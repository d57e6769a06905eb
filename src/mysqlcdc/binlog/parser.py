"""BinlogParser: raw events in, typed events out. Pure: no I/O.

State lives on the parser: the FORMAT_DESCRIPTION in force (header and
post-header lengths, checksum algorithm), the table maps by table id, the
current file name. ``parse`` takes one whole event (header, body, optional
CRC32) and returns its events: normally one, the inner events for a
TRANSACTION_PAYLOAD.

Example::

    parser = BinlogParser(file="binlog.000001")
    for pos, raw in iter_binlog_file("binlog.000001"):
        for event in parser.parse(raw, pos):
            ...
"""

from __future__ import annotations

import dataclasses
import re
import struct
import zlib
from functools import partial
from dataclasses import dataclass
from typing import Callable

from ..errors import (ChecksumMismatchError, DecodeError, EncryptedBinlogError,
                      MalformedEventError, SchemaError, TruncatedEventError, UnsupportedEventError)
from ..schema.model import TableDef
from . import constants as C
from . import events as E
from .columns import ColumnSpec, SchemaMismatch, resolve_columns
from .compression import iter_inner_events, mariadb_uncompress, read_payload
from .gtid import (read_mariadb_gtid, read_mariadb_gtid_list, read_mysql_gtid,
                   read_previous_gtids, read_tagged_gtid)
from .reader import Reader, ShortRead
from .rowsdecode import ROWS_FAST_CODES, decode_rows_body, skim_rows_body
from .tablemap import read_column_metas, read_optional_metadata
from .values.fixedbin import FIXED_TEXT_TYPES
from .values.charsets import codec_for_collation, decode_text

__all__ = ["BinlogParser", "TableState"]

_HEADER = struct.Struct("<IBIIIH")
_HEADER_UNPACK = _HEADER.unpack_from
_HEADER_LEN = C.LOG_EVENT_HEADER_LEN
_EventHeader = E.EventHeader
_new = object.__new__


_FAILURES = (DecodeError, SchemaMismatch, ShortRead, ValueError, IndexError, KeyError,
             struct.error, zlib.error, OverflowError, RecursionError, NotImplementedError,
             MemoryError)


class _HeaderSlots:
    """EventHeader's slot layout without its frozen ``__setattr__`` (see ``_parse``)."""

    __slots__ = E.EventHeader.__slots__
try:       # the same CRC32, computed with carry-less multiply: ~4x zlib's on event sizes
    from zlib_ng.zlib_ng import crc32 as _crc32
except ImportError:     # pragma: no cover - a declared dependency; zlib's is the same function
    _crc32 = zlib.crc32
_CRC_RESIDUE = 0x2144DF1C   # crc32(m + crc32(m) as 4 little-endian bytes), for every m
_U64_FROM = struct.Struct("<Q").unpack_from
_U32_FROM = struct.Struct("<I").unpack_from
_MARIA_GTID = struct.Struct("<QIB").unpack_from
_MARIA_GTID_EVENT = struct.Struct("<IBIIIHQIB").unpack_from   # header + seq_no, domain, flags2
_GTID_SKIM_LEN = _HEADER_LEN + 13
_MARIA_GTID_CODE, _XID_CODE, _ANNOTATE_CODE = C.MARIA_GTID_EVENT, C.XID_EVENT, C.MARIA_ANNOTATE_ROWS_EVENT
_XA_FLAGS = C.MARIADB_FL_PREPARED_XA | C.MARIADB_FL_COMPLETED_XA
_NOT_PLAIN_GTID = C.MARIADB_FL_STANDALONE | _XA_FLAGS
_SIZE_END_FLAGS = struct.Struct("<IIH").unpack_from      # the header's event size, log pos, flags
_U16_FROM = struct.Struct("<H").unpack_from
_ARTIFICIAL_F = 0x20                                     # LOG_EVENT_ARTIFICIAL_F
_TABLE_MAP_CODE, _ROWS_QUERY_CODE = C.TABLE_MAP_EVENT, C.ROWS_QUERY_LOG_EVENT
# rows events a transaction of tables not captured may hold -> their post-header length
# (a 6-byte table id first); PRE_GA ones, with a 4-byte id, are read one by one
_TXN_ROWS = {C.WRITE_ROWS_EVENT_V1: 8, C.UPDATE_ROWS_EVENT_V1: 8, C.DELETE_ROWS_EVENT_V1: 8,
             C.WRITE_ROWS_EVENT: 10, C.UPDATE_ROWS_EVENT: 10, C.DELETE_ROWS_EVENT: 10,
             C.PARTIAL_UPDATE_ROWS_EVENT: 10,
             C.MARIA_WRITE_ROWS_COMPRESSED_EVENT_V1: 8, C.MARIA_UPDATE_ROWS_COMPRESSED_EVENT_V1: 8,
             C.MARIA_DELETE_ROWS_COMPRESSED_EVENT_V1: 8, C.MARIA_WRITE_ROWS_COMPRESSED_EVENT: 10,
             C.MARIA_UPDATE_ROWS_COMPRESSED_EVENT: 10, C.MARIA_DELETE_ROWS_COMPRESSED_EVENT: 10}
# the hot events, built without a type call (see events.factory)
_XidEvent = E.factory(E.XidEvent)
_MariadbGtidEvent = E.factory(E.MariadbGtidEvent)
_AnnotateRowsEvent = E.factory(E.MariadbAnnotateRowsEvent)
_TableMapEvent = E.factory(E.TableMapEvent)
_VERSION = re.compile(rb"^(\d+)\.(\d+)\.(\d+)")
_IGNORABLE = {
    C.INTVAR_EVENT: "INTVAR", C.RAND_EVENT: "RAND", C.USER_VAR_EVENT: "USER_VAR",
    C.LOAD_EVENT: "LOAD", C.SLAVE_EVENT: "SLAVE", C.CREATE_FILE_EVENT: "CREATE_FILE",
    C.APPEND_BLOCK_EVENT: "APPEND_BLOCK", C.EXEC_LOAD_EVENT: "EXEC_LOAD",
    C.DELETE_FILE_EVENT: "DELETE_FILE", C.NEW_LOAD_EVENT: "NEW_LOAD",
    C.BEGIN_LOAD_QUERY_EVENT: "BEGIN_LOAD_QUERY", C.EXECUTE_LOAD_QUERY_EVENT: "EXECUTE_LOAD_QUERY",
    C.IGNORABLE_LOG_EVENT: "IGNORABLE", C.TRANSACTION_CONTEXT_EVENT: "TRANSACTION_CONTEXT",
    C.VIEW_CHANGE_EVENT: "VIEW_CHANGE",
}
# post-header lengths of binlog v3 (4.x): no FORMAT_DESCRIPTION to tell them
_V3_POST_HEADER = bytes([56, 11, 0, 8, 0, 18, 0, 4, 4, 4, 4, 18, 0, 0])
_V3_QUERY_POST_HEADER = 11


@dataclass(frozen=True, slots=True)
class TableState:
    """A TABLE_MAP as the rows events after it need it."""

    event: E.TableMapEvent
    columns: tuple[ColumnSpec, ...]
    included: bool


class BinlogParser:
    """Decodes raw binlog events; see the module docstring."""

    def __init__(
        self, *, tables: Callable[[str, str], TableDef | None] | None = None,
        include: Callable[[str, str], bool] | None = None,
        verify_checksum: bool = True, file: str | None = None,
    ) -> None:
        self.file = file
        self.tables = tables
        self.include = include
        self.verify_checksum = verify_checksum
        self.fde: E.FormatDescriptionEvent | None = None
        self.header_length = C.LOG_EVENT_HEADER_LEN
        self.post_header: bytes = b""
        self.checksum = False
        self.mariadb = False
        self.table_maps: dict[int, TableState] = {}
        # vet(table map) -> False: do not decode this table's rows (a reader that checks
        # TABLE_MAPs against a schema history, ``capture.changes.ChangeDecoder``)
        self.vet: Callable[[E.TableMapEvent], bool] | None = None
        self._spec_cache: dict[tuple, tuple[ColumnSpec, ...]] = {}
        self._tm_cache: dict[bytes, tuple] = {}
        self._txn_rows: frozenset[int] | None = None    # see skim_txn; per FORMAT_DESCRIPTION
        # rows event type -> {post-header, column count and bitmap bytes: what they decode to}
        self.rows_cache: dict[int, dict[bytes, tuple]] = {code: {} for code in ROWS_FAST_CODES}
        # rows events' ``rows`` as ``rowscan.RawRows`` (images located, not decoded)
        # wherever the columns allow: for a reader that converts them column by column
        self.defer_rows = False
        self._handlers = self._dispatch_table()

    def set_defer_rows(self, defer: bool) -> None:
        """Turn located-not-decoded rows (``defer_rows``) on or off."""
        if defer != self.defer_rows:
            self.defer_rows = defer
            for cache in self.rows_cache.values():
                cache.clear()

    # --- entry point ------------------------------------------------------
    def parse(self, data: bytes | memoryview, pos: int | None = None, *,
              inner: bool = False) -> list[E.Event]:
        """Decode one whole raw event; see the module docstring. ``inner``: an event
        from ``payload_inner`` (it has no CRC32 of its own)."""
        if data.__class__ is not bytes:
            data = bytes(data)
        try:
            return self._parse(data, pos, not inner)
        except _FAILURES as e:
            named = self._named(e, data, pos)
            if named is e:
                raise
            raise named from e

    def payload_inner(self, data: bytes, pos: int | None = None) -> list[bytes]:
        """The raw inner events of a TRANSACTION_PAYLOAD, decompressed and framed but
        not decoded (its own size and CRC32 checked): for a reader that looks at few
        of them. Decode one with ``parse(raw, inner=True)``."""
        try:
            n = len(data)
            if n < _HEADER_LEN or _U32_FROM(data, 9)[0] != n:
                raise MalformedEventError(f"event size does not match its {n} bytes")
            if self.checksum:
                n -= 4
                if self.verify_checksum and _crc32(data) != _CRC_RESIDUE:
                    raise ChecksumMismatchError("event CRC32 does not match its bytes")
            out = []
            for _, raw in iter_inner_events(read_payload(data, self.header_length, n)):
                if raw[4] in (C.TRANSACTION_PAYLOAD_EVENT, C.FORMAT_DESCRIPTION_EVENT):
                    raise MalformedEventError(f"event type {raw[4]} inside a TRANSACTION_PAYLOAD")
                out.append(raw)
            return out
        except _FAILURES as e:
            named = self._named(e, data, pos)
            if named is e:
                raise
            raise named from e

    def _named(self, e: Exception, data: bytes, pos: int | None) -> Exception:
        """The named DecodeError to raise for ``e``, met decoding ``data`` at ``pos``."""
        if isinstance(e, DecodeError):
            if e.file is None and e.pos is None:
                return type(e)(e.message, file=self.file, pos=pos, event_type=_type_code(data))
            return e
        if isinstance(e, SchemaMismatch):
            return SchemaError(str(e))
        return MalformedEventError(f"cannot decode event: {e!r}", file=self.file, pos=pos,
                                   event_type=_type_code(data))

    def skim(self, data: bytes) -> int:
        """The type code of an XID or ANNOTATE_ROWS event whose framing, size and
        CRC32 check out, without building any object: for a reader that only needs
        to know such an event went by. -1 for any other event, before the first
        FORMAT_DESCRIPTION, or when a check fails: ``parse`` it then, which decodes
        it or raises the named error."""
        n = len(data)
        if self.fde is None or n < _HEADER_LEN or _U32_FROM(data, 9)[0] != n:
            return -1
        code = data[4]
        if code == _XID_CODE:
            if n - self.header_length - (4 if self.checksum else 0) < 8:
                return -1
        elif code != _ANNOTATE_CODE:
            return -1
        if self.checksum and self.verify_checksum and _crc32(data) != _CRC_RESIDUE:
            return -1
        return code

    def skim_mariadb_gtid(self, data: bytes) -> tuple | None:
        """A MariaDB GTID event whose framing, size and CRC32 check out, as the
        fields a transaction starts from, without building any object:
        ``(timestamp, type code, server id, size, log pos, flags, seq_no, domain id,
        flags2)``. None for anything else, an XA group (FL_PREPARED_XA or
        FL_COMPLETED_XA: rare, and they carry more), or when a check fails: ``parse``
        it then, which decodes it or raises the named error."""
        n = len(data)
        if self.fde is None or n < _GTID_SKIM_LEN or self.header_length != _HEADER_LEN:
            return None
        fields = _MARIA_GTID_EVENT(data)
        if fields[1] != _MARIA_GTID_CODE or fields[3] != n or fields[8] & _XA_FLAGS:
            return None
        if self.checksum:
            if n < _GTID_SKIM_LEN + 4 or (self.verify_checksum and _crc32(data) != _CRC_RESIDUE):
                return None
        return fields

    def skim_table_map(self, data: bytes) -> TableState | None:
        """A TABLE_MAP identical to one decoded before, whose framing, size and CRC32
        check out and whose table's definition (``tables``) and inclusion
        (``include``) are still what they were: its state is put in force for its
        table id, as ``parse`` does, and returned; no event is built (the state's
        ``event`` has every field but the header). None otherwise, also when
        ``tables`` or ``include`` raise: ``parse`` it then, which decodes it or raises
        the named error."""
        n = len(data)
        if self.fde is None or n < _HEADER_LEN or _U32_FROM(data, 9)[0] != n:
            return None
        hit = self._tm_cache.get(data[self.header_length:n - 4 if self.checksum else n])
        if hit is None or (self.checksum and self.verify_checksum and _crc32(data) != _CRC_RESIDUE):
            return None
        ev, state, tdef = hit
        try:
            if (tdef is None or self.tables(ev.schema, ev.table) is tdef) and (
                    self.include is None or self.include(ev.schema, ev.table) == state.included):
                self.table_maps[ev.table_id] = state
                return state
        except Exception:   # noqa: BLE001 - parse asks again and raises it as it would
            pass
        return None

    def skim_rows(self, data: bytes) -> tuple | None:
        """A rows event of a shape decoded before (see ``rowsdecode.skim_rows_body``)
        whose framing, size and CRC32 check out, as ``(what decoding its shape found,
        its rows)``, without building an event: ``rows`` as ``parse`` would put them
        in the event. None otherwise: ``parse`` it then, which decodes it or raises
        the named error."""
        n = len(data)
        if self.fde is None or n < _HEADER_LEN or _U32_FROM(data, 9)[0] != n:
            return None
        if self.checksum:
            if self.verify_checksum and _crc32(data) != _CRC_RESIDUE:
                return None
            n -= 4
        return skim_rows_body(self, data, n)

    def skim_txn(self, batch: list[bytes], i: int,
                 excluded: Callable[[str, str], bool]) -> tuple | None:
        """A transaction of tables this reader does not capture, from its bytes:
        ``batch[i]`` is a GTID event, and every event after it up to its XID is a
        TABLE_MAP identical to one decoded before of a table ``excluded(db, table)``, a
        rows event of such a table id, an ANNOTATE_ROWS or ROWS_QUERY, or (MySQL, right
        after the GTID) the BEGIN query, each whole, its size in its header and its CRC32
        right. Returns ``(j, size, end, states)``: ``batch[j]`` is the XID, ``size`` the
        bytes of the events between, ``end`` the offset after the last of them, and
        ``states`` the TABLE_MAP states by table id, to put in force as decoding them
        would (:meth:`pass_txn`). None for anything else, a transaction that goes on past
        ``batch`` included: its events are then decoded one by one, as always."""
        if self.fde is None or self.header_length != _HEADER_LEN:
            return None
        n = len(batch)
        j = i + 1
        size = end = 0
        data = batch[i]
        if data[4] == _MARIA_GTID_CODE:
            if len(data) < _GTID_SKIM_LEN or data[_GTID_SKIM_LEN - 1] & _NOT_PLAIN_GTID:
                return None             # a DDL's or an XA transaction's
        elif j < n and self._begin(batch[j]):
            size, end = len(batch[j]), _SIZE_END_FLAGS(batch[j], 9)[1]
            j += 1
        else:
            return None
        rows = self._txn_rows
        if rows is None:
            rows = self._txn_rows = frozenset(
                code for code, post in _TXN_ROWS.items() if self.post_header_len(code, -1) == post)
        trail = 4 if self.checksum else 0
        crc = self.checksum and self.verify_checksum
        tm_cache = self._tm_cache
        states: dict[int, TableState] = {}
        while j < n:
            ev = batch[j]
            length, log_pos, flags = _SIZE_END_FLAGS(ev, 9)
            if length != len(ev) or not log_pos or flags & _ARTIFICIAL_F:
                return None
            code = ev[4]
            if code == _XID_CODE:
                return (j, size, end, states) if states else None
            if code == _TABLE_MAP_CODE:
                hit = tm_cache.get(ev[_HEADER_LEN:length - trail])
                if hit is None:
                    return None
                tm, state, _ = hit
                if state.included or not excluded(tm.schema, tm.table):
                    return None
                states[tm.table_id] = state
            elif code in rows:
                if int.from_bytes(ev[_HEADER_LEN:_HEADER_LEN + 6], "little") not in states:
                    return None
            elif code != _ANNOTATE_CODE and code != _ROWS_QUERY_CODE:
                return None
            if crc and _crc32(ev) != _CRC_RESIDUE:
                return None             # decoded one by one, it raises the named error
            size += length
            end = log_pos
            j += 1
        return None

    def pass_txn(self, states: dict[int, TableState]) -> None:
        """Put in force the TABLE_MAP states of a transaction ``skim_txn`` found, as
        decoding its events would have."""
        self.table_maps.update(states)

    def _begin(self, ev: bytes) -> bool:
        """``ev`` is a whole QUERY event whose statement is BEGIN."""
        if ev[4] != C.QUERY_EVENT or len(ev) < _HEADER_LEN + 13:
            return False
        post = self.post_header_len(C.QUERY_EVENT, 13)
        if post < 13:
            return False
        end = len(ev) - (4 if self.checksum else 0)
        at = _HEADER_LEN + post + _U16_FROM(ev, _HEADER_LEN + 11)[0] + ev[_HEADER_LEN + 8] + 1
        if ev[at:end] != b"BEGIN" or _U32_FROM(ev, 9)[0] != len(ev):
            return False
        return not (self.checksum and self.verify_checksum and _crc32(ev) != _CRC_RESIDUE)

    def _parse(self, data: bytes, pos: int | None, checksummed: bool) -> list[E.Event]:
        n = len(data)
        if n < _HEADER_LEN:
            raise TruncatedEventError(f"event of {n} bytes is shorter than its header")
        fields = _HEADER_UNPACK(data)
        if fields[3] != n:
            size = fields[3]
            if size > n:
                raise TruncatedEventError(f"event claims {size} bytes, {n} present")
            raise MalformedEventError(f"event size {size} does not match its {n} bytes")
        # filled as a plain object, then made the frozen EventHeader (same slots): a
        # third of the cost of a frozen dataclass __init__
        header = _new(_HeaderSlots)
        (header.timestamp, header.type_code, header.server_id, header.event_size, header.log_pos,
         header.flags) = fields
        header.__class__ = _EventHeader
        type_code = fields[1]
        handler = self._handlers.get(type_code)
        if handler is None:
            if type_code == C.FORMAT_DESCRIPTION_EVENT:
                return [self._format_description(header, data)]
            if type_code == C.START_EVENT_V3:
                return [self._start_v3(header, data)]
        # CRC32 over the whole event, its own CRC included, leaves a constant residue
        # exactly when the CRC matches: no slice of the covered bytes needed.
        if checksummed and (self.checksum if self.fde is not None
                            else n >= 23 and _crc32(data) == _CRC_RESIDUE):
            n -= 4
            if self.verify_checksum and _crc32(data) != _CRC_RESIDUE:
                raise ChecksumMismatchError("event CRC32 does not match its bytes")
        if handler is None:
            return [self._unknown(header)]
        result = handler(header, data, self.header_length, n)
        return result if result.__class__ is list else [result]

    # --- framing helpers ----------------------------------------------------
    def _has_checksum(self, data: bytes) -> bool:
        if self.fde is not None:
            return self.checksum
        # Before any FORMAT_DESCRIPTION (a stream's fake ROTATE): trust a matching CRC.
        return len(data) >= 23 and _crc32(data) == _CRC_RESIDUE

    @staticmethod
    def _verify_crc(covered: bytes, data: bytes) -> None:
        want = int.from_bytes(data[-4:], "little")
        if zlib.crc32(covered[:-4]) != want:
            raise ChecksumMismatchError("event CRC32 does not match its bytes")

    def post_header_len(self, type_code: int, default: int) -> int:
        if 0 < type_code <= len(self.post_header):
            return self.post_header[type_code - 1]
        return default

    def _dispatch_table(self) -> dict[int, Callable]:
        h: dict[int, Callable] = {
            C.ROTATE_EVENT: self._rotate, C.QUERY_EVENT: self._query,
            C.MARIA_QUERY_COMPRESSED_EVENT: self._query, C.XID_EVENT: self._xid,
            C.STOP_EVENT: lambda hd, d, p, e: E.StopEvent(hd),
            C.GTID_LOG_EVENT: self._gtid, C.ANONYMOUS_GTID_LOG_EVENT: self._gtid,
            C.GTID_TAGGED_LOG_EVENT: self._gtid, C.PREVIOUS_GTIDS_LOG_EVENT: self._previous_gtids,
            C.MARIA_GTID_EVENT: self._mariadb_gtid, C.MARIA_GTID_LIST_EVENT: self._mariadb_gtid_list,
            C.MARIA_BINLOG_CHECKPOINT_EVENT: self._checkpoint,
            C.MARIA_ANNOTATE_ROWS_EVENT: self._annotate, C.ROWS_QUERY_LOG_EVENT: self._rows_query,
            C.TABLE_MAP_EVENT: self._table_map, C.XA_PREPARE_LOG_EVENT: self._xa_prepare,
            C.HEARTBEAT_LOG_EVENT: self._heartbeat, C.HEARTBEAT_LOG_EVENT_V2: self._heartbeat_v2,
            C.INCIDENT_EVENT: self._incident, C.TRANSACTION_PAYLOAD_EVENT: self._payload,
            C.MARIA_START_ENCRYPTION_EVENT: self._start_encryption,
            C.MARIA_PARTIAL_ROW_DATA_EVENT: self._unsupported,
        }
        for code in (C.PRE_GA_WRITE_ROWS_EVENT, C.PRE_GA_UPDATE_ROWS_EVENT, C.PRE_GA_DELETE_ROWS_EVENT):
            h[code] = self._unsupported
        for code in (*range(C.WRITE_ROWS_EVENT_V1, C.DELETE_ROWS_EVENT_V1 + 1),
                     *range(C.WRITE_ROWS_EVENT, C.DELETE_ROWS_EVENT + 1), C.PARTIAL_UPDATE_ROWS_EVENT,
                     *range(C.MARIA_WRITE_ROWS_COMPRESSED_EVENT_V1, C.MARIA_DELETE_ROWS_COMPRESSED_EVENT + 1)):
            h[code] = partial(decode_rows_body, self)   # as self._rows, one call fewer
        for code, name in _IGNORABLE.items():
            h[code] = lambda hd, d, p, e, name=name: E.IgnorableEvent(hd, name)
        return h

    # --- format description ---------------------------------------------------
    def _format_description(self, header: E.EventHeader, data: bytes) -> E.FormatDescriptionEvent:
        r = Reader(data, C.LOG_EVENT_HEADER_LEN)
        version = r.u16()
        server_version = r.take(50).split(b"\x00", 1)[0]
        r.u32()
        header_len = r.u8()
        mariadb = b"mariadb" in server_version.lower()
        aware = _checksum_aware(server_version, mariadb)
        n_post = r.remaining() - (5 if aware else 0)
        if header_len < C.LOG_EVENT_HEADER_LEN or n_post < 0:
            raise MalformedEventError(f"FORMAT_DESCRIPTION with header length {header_len}")
        post = r.take(n_post)
        alg = r.u8() if aware else C.BINLOG_CHECKSUM_ALG_UNDEF
        if alg not in (C.BINLOG_CHECKSUM_ALG_OFF, C.BINLOG_CHECKSUM_ALG_CRC32, C.BINLOG_CHECKSUM_ALG_UNDEF):
            raise MalformedEventError(f"unknown checksum algorithm {alg}")
        if alg == C.BINLOG_CHECKSUM_ALG_CRC32 and self.verify_checksum:
            cleared = bytearray(data)
            cleared[17] &= ~C.LOG_EVENT_BINLOG_IN_USE_F & 0xFF
            self._verify_crc(bytes(cleared), data)
        fde = E.FormatDescriptionEvent(header, version, server_version.decode("ascii", "replace"),
                                       header_len, post, alg)
        self.fde, self.header_length, self.post_header = fde, header_len, post
        for cache in (*self.rows_cache.values(), self._tm_cache):
            cache.clear()
        self._txn_rows = None
        self.checksum, self.mariadb = alg == C.BINLOG_CHECKSUM_ALG_CRC32, mariadb
        return fde

    def _start_v3(self, header: E.EventHeader, data: bytes) -> E.FormatDescriptionEvent:
        r = Reader(data, C.LOG_EVENT_HEADER_LEN)
        version = r.u16()
        server_version = r.take(50).split(b"\x00", 1)[0].decode("ascii", "replace")
        if version not in (2, 3) and data[13:15] == b"\x01\x00":
            raise UnsupportedEventError("binlog format version 1 (MySQL 3.23) is not supported")
        if version not in (2, 3):
            raise UnsupportedEventError(f"binlog format version {version} (MySQL 3.23) is not supported")
        fde = E.FormatDescriptionEvent(header, version, server_version, C.LOG_EVENT_HEADER_LEN,
                                       _V3_POST_HEADER, C.BINLOG_CHECKSUM_ALG_OFF)
        self.fde, self.header_length, self.post_header = fde, C.LOG_EVENT_HEADER_LEN, _V3_POST_HEADER
        for cache in (*self.rows_cache.values(), self._tm_cache):
            cache.clear()
        self._txn_rows = None
        self.checksum = self.mariadb = False
        return fde

    # --- simple events --------------------------------------------------------
    def _rotate(self, header: E.EventHeader, data: bytes, p: int, end: int) -> E.RotateEvent:
        r = Reader(data, p, end)
        next_pos = r.u64() if self.post_header_len(C.ROTATE_EVENT, 8) >= 8 else 4
        name = r.rest().decode("utf-8", "backslashreplace")
        self.file = name
        return E.RotateEvent(header, name, next_pos)

    def _query(self, header: E.EventHeader, data: bytes, p: int, end: int) -> E.QueryEvent:
        post = self.post_header_len(C.QUERY_EVENT, 13)
        r = Reader(data, p, end)
        thread_id, exec_time, db_len, error_code = r.u32(), r.u32(), r.u8(), r.u16()
        status_len = r.u16() if post >= 13 else 0
        r.take(max(post - 13, 0))
        codec = _query_codec(r.take(status_len))
        schema = r.take(db_len).decode("utf-8", "backslashreplace")
        r.u8()  # NUL after the schema name
        if header.type_code == C.MARIA_QUERY_COMPRESSED_EVENT:
            raw = mariadb_uncompress(data, r.pos, end)
        else:
            raw = r.rest()
        return E.QueryEvent(header, thread_id, exec_time, error_code, schema, decode_text(raw, codec))

    def _xid(self, header: E.EventHeader, data: bytes, p: int, end: int) -> E.XidEvent:
        if end - p >= 8:
            return _XidEvent(header, _U64_FROM(data, p)[0])
        return E.XidEvent(header, Reader(data, p, end).u64())

    def _gtid(self, header: E.EventHeader, data: bytes, p: int, end: int) -> E.GtidEvent:
        r = Reader(data, p, end)
        tagged = header.type_code == C.GTID_TAGGED_LOG_EVENT
        g = read_tagged_gtid(r) if tagged else read_mysql_gtid(r)
        anonymous = header.type_code == C.ANONYMOUS_GTID_LOG_EVENT
        return E.GtidEvent(header, g.text(anonymous), g.commit_ts_us, g.transaction_length)

    def _previous_gtids(self, header: E.EventHeader, data: bytes, p: int, end: int) -> E.PreviousGtidsEvent:
        return E.PreviousGtidsEvent(header, read_previous_gtids(Reader(data, p, end)))

    def _mariadb_gtid(self, header: E.EventHeader, data: bytes, p: int, end: int) -> E.MariadbGtidEvent:
        if end - p >= 13:
            seq, domain, flags2 = _MARIA_GTID(data, p)
        else:
            seq, domain, flags2 = read_mariadb_gtid(Reader(data, p, end))
        return _MariadbGtidEvent(header, domain, header.server_id, seq, flags2,
                                 bool(flags2 & C.MARIADB_FL_STANDALONE))

    def _mariadb_gtid_list(self, header: E.EventHeader, data: bytes, p: int, end: int) -> E.MariadbGtidListEvent:
        return E.MariadbGtidListEvent(header, read_mariadb_gtid_list(Reader(data, p, end)))

    def _checkpoint(self, header: E.EventHeader, data: bytes, p: int, end: int) -> E.MariadbBinlogCheckpointEvent:
        r = Reader(data, p, end)
        return E.MariadbBinlogCheckpointEvent(header, r.take(r.u32()).decode("utf-8", "backslashreplace"))

    def _annotate(self, header: E.EventHeader, data: bytes, p: int, end: int) -> E.MariadbAnnotateRowsEvent:
        return _AnnotateRowsEvent(header, data[p:end].decode("utf-8", "backslashreplace"))

    def _rows_query(self, header: E.EventHeader, data: bytes, p: int, end: int) -> E.RowsQueryEvent:
        return E.RowsQueryEvent(header, data[p + 1:end].decode("utf-8", "backslashreplace"))

    def _xa_prepare(self, header: E.EventHeader, data: bytes, p: int, end: int) -> E.XaPrepareEvent:
        r = Reader(data, p, end)
        one_phase, fmt, glen, blen = r.u8(), r.u32(), r.u32(), r.u32()
        gtrid, bqual = r.take(glen), r.take(blen)
        return E.XaPrepareEvent(header, bool(one_phase), f"X'{gtrid.hex()}',X'{bqual.hex()}',{fmt}")

    def _heartbeat(self, header: E.EventHeader, data: bytes, p: int, end: int) -> E.HeartbeatEvent:
        return E.HeartbeatEvent(header, data[p:end].decode("utf-8", "backslashreplace"))

    def _heartbeat_v2(self, header: E.EventHeader, data: bytes, p: int, end: int) -> E.HeartbeatEvent:
        r = Reader(data, p, end)
        name = ""
        while r.remaining():
            field, length = r.packed(), r.packed()
            value = r.take(length)
            if field == 0:
                name = value.decode("utf-8", "backslashreplace")
        return E.HeartbeatEvent(header, name)

    def _incident(self, header: E.EventHeader, data: bytes, p: int, end: int) -> E.IncidentEvent:
        r = Reader(data, p, end)
        incident = r.u16()
        message = r.take(r.u8()).decode("utf-8", "backslashreplace") if r.remaining() else ""
        return E.IncidentEvent(header, incident, message)

    def _start_encryption(self, header: E.EventHeader, data: bytes, p: int, end: int) -> E.Event:
        raise EncryptedBinlogError("MariaDB START_ENCRYPTION: the rest of this binlog is encrypted")

    def _unsupported(self, header: E.EventHeader, data: bytes, p: int, end: int) -> E.Event:
        name = C.EVENT_NAMES.get(header.type_code, str(header.type_code))
        raise UnsupportedEventError(
            f"{name} events are not supported (pre-GA MySQL 5.1 rows events or MariaDB "
            "fragmented rows); re-create the binlog with a GA server version")

    def _unknown(self, header: E.EventHeader) -> E.Event:
        if header.flags & C.LOG_EVENT_IGNORABLE_F or header.type_code == C.AURORA_PADDING_EVENT:
            return E.UnknownEvent(header)
        raise UnsupportedEventError(
            f"unknown event type {header.type_code} is not flagged ignorable and may carry rows")

    # --- transaction payload -------------------------------------------------
    def _payload(self, header: E.EventHeader, data: bytes, p: int, end: int) -> list[E.Event]:
        inner = read_payload(data, p, end)
        out: list[E.Event] = []
        for _, raw in iter_inner_events(inner):
            if raw[4] in (C.TRANSACTION_PAYLOAD_EVENT, C.FORMAT_DESCRIPTION_EVENT):
                raise MalformedEventError(f"event type {raw[4]} inside a TRANSACTION_PAYLOAD")
            out.extend(self._parse(raw, None, checksummed=False))
        return out

    # --- table map and rows --------------------------------------------------
    def _table_map(self, header: E.EventHeader, data: bytes, p: int, end: int) -> E.TableMapEvent:
        # The same table map precedes every transaction on a table: decode it once.
        body = data[p:end]
        hit = self._tm_cache.get(body)
        if hit is not None:
            ev, state, tdef = hit
            # reuse it only while the table's definition and inclusion are unchanged (the
            # schema history may give a new definition, or hold a table back, mid-stream)
            if (tdef is None or self.tables(ev.schema, ev.table) is tdef) and (
                    self.include is None or self.include(ev.schema, ev.table) == state.included):
                self.table_maps[ev.table_id] = state
                return _TableMapEvent(header, ev.table_id, ev.schema, ev.table, ev.column_types,
                                      ev.column_metas, ev.nullable, ev.column_names,
                                      ev.primary_key, ev.optional_metadata)
        event = self._decode_table_map(header, data, p, end)
        state = self.table_maps[event.table_id]
        tdef = None
        if state.included and self.tables is not None and event.column_names is None:
            tdef = self.tables(event.schema, event.table)
        if len(self._tm_cache) > 10_000:
            self._tm_cache.clear()
        self._tm_cache[body] = (event, state, tdef)
        return event

    def _decode_table_map(self, header: E.EventHeader, data: bytes, p: int,
                          end: int) -> E.TableMapEvent:
        r = Reader(data, p, end)
        table_id = r.u32() if self.post_header_len(C.TABLE_MAP_EVENT, 8) == 6 else r.uint(6)
        r.u16()  # flags
        schema = r.take(r.u8()).decode("utf-8", "backslashreplace")
        r.u8()
        table = r.take(r.u8()).decode("utf-8", "backslashreplace")
        r.u8()
        body_key = data[r.pos:end]
        ncols = r.packed()
        types = r.take(ncols)
        if r.remaining():
            metas = read_column_metas(types, r.take(r.packed()))
            nullable = tuple(bool(b >> i & 1) for b in r.take((ncols + 7) // 8) for i in range(8))[:ncols]
        else:  # MySQL 5.1 before 5.1.16 wrote neither metadata nor null bits
            metas, nullable = (0,) * ncols, (True,) * ncols
        opt = read_optional_metadata(r, ncols)
        names = opt.get("column_name")
        pk = opt.get("simple_primary_key")
        if pk is None and "primary_key_with_prefix" in opt:
            pk = tuple(i for i, _ in opt["primary_key_with_prefix"])
        event = E.TableMapEvent(header, table_id, schema, table, types, metas, nullable,
                                tuple(names) if names else None, pk, opt)
        included = self.include(schema, table) if self.include is not None else True
        if included and self.vet is not None and not self.vet(event):
            included = False
        specs = self._columns(schema, table, body_key, types, metas, opt) if included else ()
        self.table_maps[table_id] = TableState(event, specs, included)
        return event

    def _columns(self, schema: str, table: str, key: bytes, types: bytes,
                 metas: tuple[int, ...], opt: dict) -> tuple[ColumnSpec, ...]:
        tdef = None
        named = "column_name" in opt
        if self.tables is not None and not named:
            tdef = self.tables(schema, table)
        ck = (key, tdef, self.mariadb)
        specs = self._spec_cache.get(ck)
        if specs is None:
            if len(self._spec_cache) > 10_000:
                self._spec_cache.clear()
            specs = self._spec_cache[ck] = resolve_columns(types, metas, opt, tdef, self.mariadb)
        if named and self.mariadb and self.tables is not None and _maybe_fixed_text(specs):
            specs = self._text_forms(schema, table, specs)
        return specs

    def _text_forms(self, schema: str, table: str,
                    specs: tuple[ColumnSpec, ...]) -> tuple[ColumnSpec, ...]:
        """``specs`` named by the binlog's own metadata, with the text form of the columns
        the table's definition calls INET6, INET4 or UUID: the binlog logs those as
        BINARY(n), and only the definition tells them apart from one."""
        tdef = self.tables(schema, table)
        if tdef is None:
            return specs
        ck = ("text forms", specs, tdef)
        out = self._spec_cache.get(ck)
        if out is None:
            forms = {c.name: c.data_type for c in tdef.columns if c.data_type in FIXED_TEXT_TYPES}
            out = self._spec_cache[ck] = tuple(
                dataclasses.replace(s, text_form=forms[s.name])
                if s.name in forms and s.type == C.MYSQL_TYPE_STRING else s for s in specs)
        return out

    def _rows(self, header: E.EventHeader, data: bytes, p: int, end: int) -> E.RowsEvent:
        return decode_rows_body(self, header, data, p, end)


_FIXED_SIZES = frozenset(size for size, _ in FIXED_TEXT_TYPES.values())


def _maybe_fixed_text(specs: tuple[ColumnSpec, ...]) -> bool:
    """Whether a column of ``specs`` could be an INET6, INET4 or UUID (a binary STRING of
    their size): only then is the table's definition asked."""
    return any(s.type == C.MYSQL_TYPE_STRING and s.codec is None and s.meta in _FIXED_SIZES
               for s in specs)


def _type_code(data: bytes) -> int | None:
    return data[4] if len(data) > 4 else None


def _checksum_aware(server_version: bytes, mariadb: bool) -> bool:
    """FORMAT_DESCRIPTIONs carry a checksum-algorithm byte since MySQL 5.6.1 / MariaDB 5.3."""
    m = _VERSION.match(server_version)
    if m is None:
        return False
    v = tuple(int(x) for x in m.groups())
    return v >= ((5, 3, 0) if mariadb else (5, 6, 1))


_STATUS_SIZES = {0: 4, 1: 8, 3: 4, 4: 6, 7: 2, 8: 2, 9: 8, 10: 4, 13: 3, 14: 8, 16: 1, 17: 8,
                 18: 2, 19: 1, 20: 1, 128: 3, 129: 8}


def _query_codec(status: bytes) -> str:
    """The client charset's codec, from the Q_CHARSET_CODE status variable (utf-8 if absent)."""
    pos = 0
    while pos < len(status):
        code = status[pos]
        pos += 1
        if code == 4 and pos + 6 <= len(status):
            return codec_for_collation(int.from_bytes(status[pos:pos + 2], "little")) or "utf-8"
        if code in _STATUS_SIZES:
            pos += _STATUS_SIZES[code]
        elif code in (2, 5, 6):              # length-prefixed strings
            pos += 1 + status[pos] + (1 if code == 2 else 0)
        elif code == 11:                     # Q_INVOKER: user, host
            pos += 1 + status[pos]
            pos += 1 + status[pos]
        else:
            break                            # unknown: the server stops here too
    return "utf-8"
