"""WRITE/UPDATE/DELETE_ROWS bodies (pre-GA, v1, v2, MariaDB compressed, MySQL partial)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import MalformedEventError, UnsupportedEventError
from . import constants as C
from . import events as E
from .columns import ColumnSpec
from .compression import mariadb_uncompress
from .reader import Reader, ShortRead
from .rows import compile_image_decoder, compile_rows_decoder
from .rowscan import compile_rows_scanner
from .values.json_diff import JSON_DIFF_TYPE, JsonDiffList, apply_json_diffs

if TYPE_CHECKING:
    from .parser import BinlogParser

__all__ = ["decode_rows_body", "skim_rows_body", "ROWS_FAST_CODES", "ROWS_CODES"]

_KIND = {}
for _codes, _kind in (
    ((C.PRE_GA_WRITE_ROWS_EVENT, C.WRITE_ROWS_EVENT_V1, C.WRITE_ROWS_EVENT,
      C.MARIA_WRITE_ROWS_COMPRESSED_EVENT_V1, C.MARIA_WRITE_ROWS_COMPRESSED_EVENT), "c"),
    ((C.PRE_GA_UPDATE_ROWS_EVENT, C.UPDATE_ROWS_EVENT_V1, C.UPDATE_ROWS_EVENT,
      C.MARIA_UPDATE_ROWS_COMPRESSED_EVENT_V1, C.MARIA_UPDATE_ROWS_COMPRESSED_EVENT,
      C.PARTIAL_UPDATE_ROWS_EVENT), "u"),
    ((C.PRE_GA_DELETE_ROWS_EVENT, C.DELETE_ROWS_EVENT_V1, C.DELETE_ROWS_EVENT,
      C.MARIA_DELETE_ROWS_COMPRESSED_EVENT_V1, C.MARIA_DELETE_ROWS_COMPRESSED_EVENT), "d"),
):
    for _c in _codes:
        _KIND[_c] = _kind
_V2 = frozenset({C.WRITE_ROWS_EVENT, C.UPDATE_ROWS_EVENT, C.DELETE_ROWS_EVENT,
                 C.PARTIAL_UPDATE_ROWS_EVENT, C.MARIA_WRITE_ROWS_COMPRESSED_EVENT,
                 C.MARIA_UPDATE_ROWS_COMPRESSED_EVENT, C.MARIA_DELETE_ROWS_COMPRESSED_EVENT})
_COMPRESSED = frozenset(range(C.MARIA_WRITE_ROWS_COMPRESSED_EVENT_V1, C.MARIA_DELETE_ROWS_COMPRESSED_EVENT + 1))
_DUMMY_TABLE_IDS = (0xFFFFFF, 0xFFFFFFFF, 0xFFFFFFFFFFFF)
# rows events the fast path takes -> (post-header length, update); the post-header is
# the table id (6 bytes), flags and, for v2, the extra-data length (2: no extra data)
_FAST = {C.WRITE_ROWS_EVENT_V1: (8, False), C.UPDATE_ROWS_EVENT_V1: (8, True),
         C.DELETE_ROWS_EVENT_V1: (8, False), C.WRITE_ROWS_EVENT: (10, False),
         C.UPDATE_ROWS_EVENT: (10, True), C.DELETE_ROWS_EVENT: (10, False)}
ROWS_FAST_CODES = tuple(_FAST)
ROWS_CODES = frozenset(_KIND)       # every rows event type
_RowsEvent = E.factory(E.RowsEvent)


def _skip_extra_data(r: Reader, kind: str) -> None:
    """ROWS v2 extra data: tagged NDB info and partition ids; unknown tags are malformed."""
    length = r.u16()
    if length < 2:
        raise MalformedEventError(f"rows extra-data length {length} is below its own 2 bytes")
    sub = Reader(r.buf, r.pos, r.pos + length - 2)
    r.take(length - 2)
    while sub.remaining():
        tag = sub.u8()
        if tag == C.ROWS_V_TAG_NDB:
            n = sub.u8()
            if n < 2:
                raise MalformedEventError(f"NDB extra-data length {n}")
            sub.take(n - 1)
        elif tag == C.ROWS_V_TAG_PART:
            sub.take(4 if kind == "u" else 2)
        else:
            raise MalformedEventError(f"unknown rows extra-data tag {tag}")


def _bitmap_indexes(raw: bytes, width: int) -> tuple[int, ...]:
    return tuple(i for i in range(width) if raw[i >> 3] >> (i & 7) & 1)


def _known_shape(parser: BinlogParser, code: int, data: bytes, p: int, end: int) -> tuple | None:
    """``(hit, start)`` for a v1/v2 rows event with the same post-header, column count
    and image bitmaps as an earlier event of a table whose TABLE_MAP is still in force:
    those bytes are the key of everything the slow path worked out (see ``_remember``),
    ``hit`` is that (``(state, decoder, kind, table_id, schema, table, stmt_end,
    names)``) and ``start`` where the row images begin. None otherwise."""
    fast = _FAST.get(code)
    if fast is None:
        return None
    q = p + fast[0]
    if q >= end:
        return None
    nbm = (data[q] + 7) >> 3
    start = q + 1 + (nbm + nbm if fast[1] else nbm)
    hit = parser.rows_cache[code].get(data[p:start])
    if hit is None or start > end or parser.table_maps.get(hit[3]) is not hit[0]:
        return None
    return hit, start


def decode_rows_body(parser: BinlogParser, header: E.EventHeader, data: bytes, p: int, end: int) -> E.RowsEvent:
    """One rows event; ``rows`` is None when the table is filtered out."""
    known = _known_shape(parser, header.type_code, data, p, end)
    if known is None:
        return _decode_rows_body(parser, header, data, p, end)
    (state, decoder, kind, table_id, schema, table, stmt_end, names), start = known
    rows, pos = decoder(data, start, end)
    if pos != end:
        raise MalformedEventError(f"row images end at {pos}, the event data at {end}")
    return _RowsEvent(header, kind, table_id, schema, table, rows, stmt_end, names)


# what ``skim_rows_body`` returns for a rows event of a table that is filtered out
EXCLUDED = ("excluded",)


def skim_rows_body(parser: BinlogParser, data: bytes, end: int) -> tuple | None:
    """``decode_rows_body``'s common case (``_known_shape``) without an event:
    ``(hit, rows)``; ``end`` is where its rows data ends. ``EXCLUDED`` for a plain rows
    event of a table whose TABLE_MAP in force is filtered out (``parse`` would build an
    event without rows). None for any other event, or when its images do not fill it
    exactly or cannot be read: ``parse`` it then, which decodes it or raises the named
    error."""
    known = _known_shape(parser, data[4], data, parser.header_length, end)
    if known is None:
        return _excluded(parser, data, end)
    hit, start = known
    try:
        rows, pos = hit[1](data, start, end)
    except Exception:   # noqa: BLE001 - parse decodes it again and names what is wrong
        return None
    return (hit, rows) if pos == end else None


def _excluded(parser: BinlogParser, data: bytes, end: int) -> tuple | None:
    """``EXCLUDED`` when ``data`` is a plain v1/v2 rows event of a table id whose TABLE_MAP
    in force is filtered out; None otherwise."""
    code = data[4]
    fast = _FAST.get(code)
    p = parser.header_length
    if fast is None or p + fast[0] > end or parser.post_header_len(code, -1) != fast[0]:
        return None
    state = parser.table_maps.get(int.from_bytes(data[p:p + 6], "little"))
    if state is None or state.included:
        return None
    return EXCLUDED


def _remember(parser: BinlogParser, code: int, key: bytes, entry: tuple) -> None:
    """Cache what decoding a plain v1/v2 rows event found, under its post-header, column
    count and bitmap bytes (``parser.rows_cache`` is emptied when a FORMAT_DESCRIPTION
    changes the post-header lengths)."""
    cache = parser.rows_cache[code]
    if len(cache) >= 4096:
        cache.clear()
    cache[key] = entry


def _decode_rows_body(parser: BinlogParser, header: E.EventHeader, data: bytes, p: int,
                      end: int) -> E.RowsEvent:
    code = header.type_code
    kind = _KIND[code]
    r = Reader(data, p, end)
    post = parser.post_header_len(code, 10 if code in _V2 else 8)
    table_id = r.u32() if post == 6 else r.uint(6)
    flags = r.u16()
    if code in _V2:
        extra_at = r.pos
        _skip_extra_data(r, kind)
        cacheable = post == 10 and r.pos == extra_at + 2
    else:
        cacheable = post == 8
    stmt_end = bool(flags & C.STMT_END_F)
    state = parser.table_maps.get(table_id)
    if state is None:
        if table_id in _DUMMY_TABLE_IDS:
            return E.RowsEvent(header, kind, table_id, "", "", [], stmt_end)
        raise MalformedEventError(f"rows event for table id {table_id} without a TABLE_MAP")
    tm = state.event
    if not state.included:
        return E.RowsEvent(header, kind, table_id, tm.schema, tm.table, None, stmt_end)
    cols = state.columns
    width = r.packed()
    if width > len(cols):
        raise MalformedEventError(f"rows event has {width} columns, its TABLE_MAP {len(cols)}")
    nbm = (width + 7) // 8
    bitmaps = r.take(nbm * 2 if kind == "u" else nbm)
    present = _bitmap_indexes(bitmaps[:nbm], width)
    present_after = _bitmap_indexes(bitmaps[nbm:], width) if kind == "u" else None
    if code in _COMPRESSED:
        body, pos, stop = mariadb_uncompress(data, r.pos, end), 0, None
        stop = len(body)
    else:
        body, pos, stop = data, r.pos, end
    names = tuple(c.name for c in cols)
    if not present and not present_after:
        # images of no columns take no bytes: any row data left is garbage (and would loop)
        if pos != stop:
            raise MalformedEventError("rows event with data but no columns in its images")
        return E.RowsEvent(header, kind, table_id, tm.schema, tm.table, [], stmt_end, names)
    if code == C.PARTIAL_UPDATE_ROWS_EVENT:
        rows = _partial_rows(cols, present, present_after or (), body, pos, stop)
    else:
        # a reader converting images column by column: locate them, decode nothing
        decoder = (parser.defer_rows and compile_rows_scanner(cols, kind, present, present_after)
                   or compile_rows_decoder(cols, kind, present, present_after))
        rows, pos = decoder(body, pos, stop)
        if pos != stop:
            raise MalformedEventError(f"row images end at {pos}, the event data at {stop}")
        if cacheable and width < 251 and code in _FAST:
            _remember(parser, code, data[p:r.pos], (state, decoder, kind, table_id, tm.schema,
                                                    tm.table, stmt_end, names))
    return E.RowsEvent(header, kind, table_id, tm.schema, tm.table, rows, stmt_end, names)


def _partial_rows(cols: tuple[ColumnSpec, ...], present: tuple[int, ...], present_after: tuple[int, ...],
                  data: bytes, pos: int, end: int) -> list:
    """PARTIAL_UPDATE_ROWS: after images may hold JSON diffs against the before image."""
    before_dec = compile_image_decoder(cols, present)
    json_after = [i for i in present_after if cols[i].type == C.MYSQL_TYPE_JSON]
    rows = []
    while pos < end:
        (before,), pos = before_dec(data, pos, end)
        options, pos = _packed(data, pos)
        partial: set[int] = set()
        if options & C.PARTIAL_JSON_UPDATES:
            nb = (len(json_after) + 7) // 8
            bits = int.from_bytes(data[pos:pos + nb], "little")
            pos += nb
            partial = {ci for j, ci in enumerate(json_after) if bits >> j & 1}
        after_cols = tuple(_DiffSpec.of(c) if i in partial else c for i, c in enumerate(cols))
        (after,), pos = compile_image_decoder(after_cols, present_after)(data, pos, end)
        for ci in partial:
            name = cols[ci].name
            diff = after.get(name)
            if isinstance(diff, JsonDiffList):
                if name not in before:
                    raise UnsupportedEventError(
                        f"partial JSON update of {name!r} without its before image; "
                        "set binlog_row_image=FULL or binlog_row_value_options=''")
                after[name] = apply_json_diffs(before[name], diff.diffs)
        rows.append((before, after))
    if pos != end:
        raise MalformedEventError(f"row images end at {pos}, the event data at {end}")
    return rows


def _packed(data: bytes, pos: int) -> tuple[int, int]:
    r = Reader(data, pos)
    v = r.packed()
    return v, r.pos


class _DiffSpec:
    """Builds the ColumnSpec of a JSON column whose after value is a diff list."""

    @staticmethod
    def of(col: ColumnSpec) -> ColumnSpec:
        return ColumnSpec(col.name, JSON_DIFF_TYPE, 4, False, None)
