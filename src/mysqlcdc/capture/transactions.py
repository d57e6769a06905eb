"""Where transactions begin and end in a stream of decoded events.

Offsets must sit on transaction boundaries (DESIGN.md decision 2), so a range
``[start, end)`` always holds whole transactions. ``TxnTracker`` watches events
in binlog order and says, after each one, whether the stream is between two
transactions. It also keeps the identity every row of the current transaction
shares (GTID, transaction id, commit time).
"""

from __future__ import annotations

import struct

from mysqlcdc.binlog.events import (
    Event,
    GtidEvent,
    MariadbAnnotateRowsEvent,
    MariadbGtidEvent,
    QueryEvent,
    RotateEvent,
    RowsEvent,
    TableMapEvent,
    XaPrepareEvent,
    XidEvent,
)
from mysqlcdc.binlog.constants import MARIADB_FL_STANDALONE
from mysqlcdc.envelope.builder import TxnContext

__all__ = ["TxnTracker"]

_new = object.__new__
_TS_CODE_SID = struct.Struct("<IBI").unpack_from   # the head of an event header
# between transactions: what a statement outside any (a DDL without a GTID) shares;
# never changed, every transaction gets a context of its own (``_start``)
_NO_TXN = TxnContext()

_BEGIN = ("BEGIN", "XA START", "XA BEGIN")
# the outcome of a prepared XA transaction is a group of its own (``_keyword`` keeps ten
# characters: "XA ROLLBAC")
_END = ("COMMIT", "ROLLBACK", "XA COMMIT", "XA ROLLBAC")


def _keyword(query: str) -> str:
    return query.lstrip()[:10].upper()


class TxnTracker:
    """Follows BEGIN / GTID / XID / COMMIT / DDL to find transaction boundaries."""

    def __init__(self) -> None:
        self.in_txn = False
        self._group_open = False   # a GTID was seen, the group has not ended
        self.ctx = _NO_TXN
        # the context of the transaction that ended last, and how many have ended: the
        # planner reads them at boundaries for the offsets' GTID set and commit time
        self.last = _NO_TXN
        self.ends = 0

    def observe(self, ev: Event, file: str, pos: int) -> bool:
        """Account for ``ev`` (starting at ``file:pos``); True if a boundary follows it."""
        cls = ev.__class__                    # event classes have no subclasses
        if cls is XidEvent:                   # the most common events first
            return self._end()
        if cls is TableMapEvent or cls is RowsEvent:
            if not self.in_txn and not self._group_open:
                self._start(ev, file, pos, None, None)
                self.in_txn = True
            return False
        if cls is MariadbGtidEvent:
            self._start(ev, file, pos, ev.gtid, None)
            self._group_open = True
            self.in_txn = not ev.standalone   # MariaDB writes no BEGIN after its GTID
            return False
        if cls is MariadbAnnotateRowsEvent:
            return not self.in_txn and not self._group_open
        if cls is GtidEvent:
            ts = ev.commit_ts_us // 1000 if ev.commit_ts_us else None
            self._start(ev, file, pos, ev.gtid, ts)
            self._group_open = True
            return False
        if cls is QueryEvent:
            return self._query(ev, file, pos)
        if cls is XaPrepareEvent:
            return self._end()
        return not self.in_txn and not self._group_open

    def observe_annotate(self) -> bool:
        """``observe`` of an ANNOTATE_ROWS event, for a reader that did not build it."""
        return not self.in_txn and not self._group_open

    def observe_mariadb_gtid(self, fields: tuple | None) -> bool:
        """``observe`` of a MariaDB GTID event, for a reader that did not build it: the
        fields ``BinlogParser.skim_mariadb_gtid`` read (False, nothing done, for None)."""
        if fields is None:
            return False
        timestamp, _, server_id, _, _, _, seq_no, domain_id, flags2 = fields
        ctx = self.ctx = _new(TxnContext)
        ctx.gtid = ctx.txn_id = f"{domain_id}-{server_id}-{seq_no}"   # MariadbGtidEvent.gtid
        ctx.ts_ms = timestamp * 1000
        ctx.server_id = server_id
        self._group_open = True
        self.in_txn = not flags2 & MARIADB_FL_STANDALONE
        return True

    def observe_table_map_bytes(self, data: bytes, file: str, pos: int) -> None:
        """``observe`` of a TABLE_MAP or rows event, for a reader that did not build
        it: its raw bytes, of which only the header's timestamp and server id may be
        read."""
        if not self.in_txn and not self._group_open:
            timestamp, _, server_id = _TS_CODE_SID(data)
            self._begin(file, pos, None, timestamp * 1000, server_id)
            self.in_txn = True

    def _query(self, ev: QueryEvent, file: str, pos: int) -> bool:
        word = _keyword(ev.query)
        if word.startswith(_BEGIN):
            if not self._group_open:
                self._start(ev, file, pos, None, None)
            self.in_txn = True
            return False
        if word.startswith(_END) or not self.in_txn:
            return self._end()        # COMMIT, or a standalone statement (DDL)
        return False                  # a statement inside a transaction

    def _start(self, ev: Event, file: str, pos: int, gtid: str | None, ts_ms: int | None) -> None:
        header = ev.header
        self._begin(file, pos, gtid, header.timestamp * 1000 if ts_ms is None else ts_ms,
                    header.server_id)

    def _begin(self, file: str, pos: int, gtid: str | None, ts_ms: int, server_id: int) -> None:
        ctx = self.ctx = _new(TxnContext)   # every slot set below: no __init__ needed
        ctx.gtid = gtid
        ctx.txn_id = gtid or f"{file}:{pos}"
        ctx.ts_ms = ts_ms
        ctx.server_id = server_id

    def _end(self) -> bool:
        self.last = self.ctx
        self.ends += 1
        self.in_txn = False
        self._group_open = False
        self.ctx = _NO_TXN
        return True

    # ``observe`` of an XID event, for a reader that did not build it
    observe_xid = _end

    @staticmethod
    def next_position(ev: Event, file: str, end_pos: int) -> tuple[str, int]:
        """The position after ``ev``: a ROTATE moves to the start of the next file."""
        if isinstance(ev, RotateEvent):
            return ev.next_file, ev.next_pos
        return file, end_pos
