"""The driver's header skim of a binlog range: boundaries and DDL, no row images.

Planning a micro-batch needs three facts per event: does a transaction boundary
follow it, is it a statement the schema history must apply (QUERY), and is it a
TABLE_MAP the history has not checked yet. ``Skimmer`` answers them from the event
type and a few header bytes:

* rows events and XIDs are never decoded (the type code says all);
* MariaDB GTIDs are read in place (``BinlogParser.skim_mariadb_gtid``);
* a TABLE_MAP is decoded and shown to the observer only when its bytes differ
  from every one seen since the observer's state last changed (``generation``);
* QUERY, GTID, ROTATE, FORMAT_DESCRIPTION and the rare rest are parsed as before;
* a TRANSACTION_PAYLOAD (MySQL 8 compression) is decompressed and its inner
  events skimmed the same way: the boundary hides inside it.

The boundaries and the observed QUERY / TABLE_MAP events are exactly those a full
parse finds; rows are left to the read tasks, which decode (and CRC-check) them.
"""

from __future__ import annotations

from typing import Callable

from mysqlcdc.binlog import constants as C
from mysqlcdc.binlog.events import Event, RotateEvent
from mysqlcdc.binlog.parser import BinlogParser
from mysqlcdc.capture.transactions import TxnTracker

__all__ = ["Skimmer"]

Observe = Callable[[str, int, list[Event]], None]

_ROWS = frozenset({
    *range(C.WRITE_ROWS_EVENT_V1, C.DELETE_ROWS_EVENT_V1 + 1),
    *range(C.WRITE_ROWS_EVENT, C.DELETE_ROWS_EVENT + 1), C.PARTIAL_UPDATE_ROWS_EVENT,
    *range(C.MARIA_WRITE_ROWS_COMPRESSED_EVENT_V1, C.MARIA_DELETE_ROWS_COMPRESSED_EVENT + 1),
})
_XID, _TABLE_MAP, _ANNOTATE = C.XID_EVENT, C.TABLE_MAP_EVENT, C.MARIA_ANNOTATE_ROWS_EVENT
_MARIA_GTID, _PAYLOAD = C.MARIA_GTID_EVENT, C.TRANSACTION_PAYLOAD_EVENT


def _never(file: str, pos: int) -> int:
    return 0


class Skimmer:
    """Feeds raw events in binlog order; see the module docstring.

    ``observe(file, pos, events)`` receives every QUERY and every TABLE_MAP not
    seen before in the current ``generation(file, pos)`` (a value the observer
    changes whenever the same TABLE_MAP could now be judged differently). ``table_maps``
    False: TABLE_MAPs are never shown (an observer that wants DDL only).
    """

    def __init__(self, file: str, observe: Observe | None = None, *,
                 generation: Callable[[str, int], object] = _never,
                 table_maps: bool = True) -> None:
        self.parser = BinlogParser(include=lambda db, table: False, file=file)
        self.tracker = TxnTracker()
        self.observe = observe
        self.generation = generation
        self.table_maps = table_maps and observe is not None
        self._seen: set[bytes] = set()
        self._seen_generation: object = None

    def feed(self, file: str, pos: int, data: bytes) -> tuple[str, int] | None:
        """Account for the event ``data`` at ``file:pos``: where the next transaction
        starts if a boundary follows it, else None."""
        code = data[4]
        tracker = self.tracker
        if code in _ROWS:
            tracker.observe_table_map_bytes(data, file, pos)
            return None
        if code == _XID and self.parser.skim(data) == _XID:
            tracker.observe_xid()
            return file, pos + len(data)
        if code == _MARIA_GTID and tracker.observe_mariadb_gtid(self.parser.skim_mariadb_gtid(data)):
            return None
        if code == _ANNOTATE and self.parser.fde is not None:
            return (file, pos + len(data)) if tracker.observe_annotate() else None
        if code == _TABLE_MAP and self.parser.fde is not None:
            self._table_map(data, file, pos, False)
            tracker.observe_table_map_bytes(data, file, pos)
            return None
        if code == _PAYLOAD and self.parser.fde is not None:
            boundary = False
            for raw in self.parser.payload_inner(data, pos):
                boundary = self._inner(raw, file, pos)
            return (file, pos + len(data)) if boundary else None
        events = self.parser.parse(data, pos)
        return self._events(events, file, pos, pos + len(data))

    def _inner(self, raw: bytes, file: str, pos: int) -> bool:
        """One event inside a TRANSACTION_PAYLOAD (no CRC32 of its own): boundary?"""
        code = raw[4]
        if code in _ROWS:
            self.tracker.observe_table_map_bytes(raw, file, pos)
            return False
        if code == _TABLE_MAP:
            self._table_map(raw, file, pos, True)
            self.tracker.observe_table_map_bytes(raw, file, pos)
            return False
        return self._events(self.parser.parse(raw, pos, inner=True), file, pos, None) is not None

    def _events(self, events: list[Event], file: str, pos: int,
                end: int | None) -> tuple[str, int] | None:
        if self.observe is not None and events:
            self.observe(file, pos, events)
        boundary = False
        for ev in events:
            boundary = self.tracker.observe(ev, file, pos)
        if not boundary:
            return None
        last = events[-1]
        if isinstance(last, RotateEvent):
            return last.next_file, last.next_pos
        return file, end if end is not None else pos

    def _table_map(self, data: bytes, file: str, pos: int, inner: bool) -> None:
        """Decode and show a TABLE_MAP unless the same bytes were shown already."""
        if not self.table_maps:
            return
        generation = self.generation(file, pos)
        if generation != self._seen_generation or len(self._seen) > 10_000:
            self._seen.clear()
            self._seen_generation = generation
        parser = self.parser
        body = data[parser.header_length:len(data) - (4 if parser.checksum and not inner else 0)]
        if body in self._seen:
            return
        self.observe(file, pos, parser.parse(data, pos, inner=inner))
        self._seen.add(body)
