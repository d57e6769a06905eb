"""XA transactions: their changes are output when they commit (DESIGN.md decision 32).

A server logs an XA transaction twice. At ``XA PREPARE`` it writes the transaction's
events (``XA START``, its TABLE_MAPs and rows, ``XA END``) closed by an XA_PREPARE
event; at ``XA COMMIT`` or ``XA ROLLBACK`` — moments or hours later, from any session —
it writes a group of its own holding that one statement. Between the two the rows are
neither committed nor visible, and a rolled-back transaction's rows stay in the binlog.
So the decoder holds a prepared transaction's rows back, outputs them as the commit's
changes (its GTID, commit time, position and ``seq``), and drops them at a rollback.
``XA COMMIT ... ONE PHASE`` commits where it is written (MariaDB logs it as a plain
transaction; MySQL closes it with an XA_PREPARE event marked one-phase).

The outcome may fall in a later micro-batch than the prepare. A read task records the
prepared transactions still open at its range's end (``Found.xa``); the next batch's
tasks inherit them (``RangeTask.xa_open``) and, meeting the commit, read the prepared
group again from its recorded position (:func:`read_prepared`). A slice task that meets
the commit of a transaction prepared in an earlier slice of its batch searches from the
batch's start. What no record names (prepared before the pipeline began reading, or in a
range read without records) is looked for in the server's own listing of its binlog,
newest file first (:func:`find_prepare`). A rollback of a transaction prepared before
the read needs nothing looked up: its rows are dropped anyway.
"""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Callable

import pyarrow as pa

from mysqlcdc.envelope.model import ARROW_SCHEMA
from mysqlcdc.errors import XaPrepareNotFoundError
from mysqlcdc.types import BinlogPosition, make_seq

if TYPE_CHECKING:
    from mysqlcdc.capture.task import RangeTask
    from mysqlcdc.envelope.builder import TxnContext
    from mysqlcdc.schema.history import SchemaView

__all__ = ["Fetch", "as_committed", "find_prepare", "missing_error", "not_found",
           "read_prepared", "statement", "xid_of"]

# (xid, where to read from, where to stop) -> (the prepare's position, its rows or None
# when it changed no captured table), or None when no prepare of ``xid`` is there
Fetch = Callable[[str, BinlogPosition, BinlogPosition],
                 "tuple[BinlogPosition, pa.RecordBatch | None] | None"]


def xid_of(text: str) -> str:
    """An xid as the binlog spells it (``X'6131',X'',1``), in one form whichever event
    or statement it comes from: no blanks, hex digits upper-case."""
    return "".join(text.split()).upper()


def statement(query: str) -> tuple[str, str] | None:
    """``(verb, xid)`` of an XA statement the binlog holds (verb START, END, COMMIT or
    ROLLBACK; BEGIN is START); None for any other statement."""
    head = query[:3]
    if head != "XA " and head.upper() != "XA ":
        return None
    parts = query[3:].lstrip().split(None, 1)
    if not parts:
        return None
    verb = parts[0].upper()
    xid = parts[1] if len(parts) > 1 else ""
    if verb == "COMMIT" and xid.rstrip().upper().endswith("ONE PHASE"):
        xid = xid.rstrip()[:-len("ONE PHASE")]
    return ("START" if verb == "BEGIN" else verb), xid_of(xid)


_SEQ = ARROW_SCHEMA.field("seq").type


def as_committed(batch: pa.RecordBatch, ctx: "TxnContext", file: str, file_number: int,
                 pos: int) -> pa.RecordBatch:
    """A prepared transaction's rows as the changes of its commit at ``file:pos``: the
    commit's GTID, transaction id, time, server id and position, and ``seq`` numbered
    from the commit's event in the rows' order (the create half of a key change keeps
    the odd seq after its delete)."""
    n = batch.num_rows
    base = make_seq(file_number, pos, 0)
    seqs, k = [], -1
    for old in batch.column("seq").to_pylist():
        part = int(old) & 1
        k += 1 - part
        seqs.append(Decimal(base + 2 * k + part))
    columns = {name: batch.column(name) for name in batch.schema.names}
    columns.update({
        "gtid": pa.array([ctx.gtid] * n, pa.string()),
        "txn_id": pa.array([ctx.txn_id or f"{file}:{pos}"] * n, pa.string()),
        "ts_ms": pa.array([ctx.ts_ms] * n, pa.int64()),
        "server_id": pa.array([ctx.server_id] * n, pa.int64()),
        "file": pa.array([file] * n, pa.string()),
        "pos": pa.array([pos] * n, pa.int64()),
        "seq": pa.array(seqs, _SEQ),
    })
    return pa.RecordBatch.from_arrays([columns[f.name].cast(f.type) for f in ARROW_SCHEMA],
                                      schema=ARROW_SCHEMA)


def read_prepared(task: "RangeTask", view: "SchemaView", xid: str, start: BinlogPosition,
                  stop: BinlogPosition) -> tuple[BinlogPosition, pa.RecordBatch | None] | None:
    """Read the binlog from ``start`` (a transaction boundary) towards ``stop`` until the
    prepare of ``xid``: where its XA START is, and its rows (None: it changed no table
    ``task`` captures). None when it is not there. The read uses server id 0, a bounded
    read that displaces no other reader (the task's own stream stays open)."""
    from mysqlcdc.binlog.parser import BinlogParser
    from mysqlcdc.capture.changes import ChangeDecoder, EarliestHistoryLookup
    from mysqlcdc.protocol.stream import ReplicationStream

    if stop <= start:
        return None

    # a prepare before the history's first record of a table is read with that record's
    # definition (``EarliestHistoryLookup``)
    lookup = EarliestHistoryLookup(view)
    parser = BinlogParser(tables=lookup, include=task.tables, file=start.file)
    decoder = ChangeDecoder(parser, lookup, include=task.tables,
                            include_query=task.include_query)
    decoder.xa_missing = not_found      # other outcomes met on the way are not ours
    stream = ReplicationStream(task.settings, server_id=0, start=start,
                               reconnect=task.retry, stop_at=stop)
    try:
        for raw in stream:
            decoder.feed(raw)
            found = decoder.xa_held.get(xid)
            if found is not None:
                return found
            if len(decoder.builder) > 8192:
                decoder.builder.take()     # other transactions' rows: not wanted here
    finally:
        stream.close()
    return None


def not_found(xid: str, file: str, pos: int) -> None:
    """An ``xa_missing`` that passes over the outcome (a search's own read)."""
    return None


def find_prepare(sql, xid: str, before: BinlogPosition, page: int = 20_000) -> BinlogPosition | None:
    """Where the group of ``xid``'s last prepare before ``before`` begins, from the
    server's own listing of its binlog (``SHOW BINLOG EVENTS``, a page at a time), newest
    file first; None when no file the server still has holds it."""
    from mysqlcdc.capture.server import list_binlogs
    from mysqlcdc.protocol.connection import query

    files = [name for name, _ in list_binlogs(sql)
             if BinlogPosition.of(name, 4).file_number <= before.file_number]
    for name in reversed(files):
        start = found = None
        at = 4
        while True:
            rows = query(sql, f"SHOW BINLOG EVENTS IN '{name}' FROM {at} LIMIT {page}")
            for row in rows:
                pos, kind, info = int(row[1]), str(row[2]), str(row[5] or "")
                if name == before.file and pos >= before.pos:
                    rows = []
                    break
                said = info.lstrip().upper()
                if said.startswith(("XA START", "XA BEGIN")):
                    start = pos          # MariaDB: the group's GTID event; MySQL: XA START
                elif kind.upper().startswith("XA_PREPARE") and start is not None:
                    words = info.split(None, 2)
                    if len(words) == 3 and xid_of(words[2]) == xid:
                        found = start
            if len(rows) < page:
                break
            at = int(rows[-1][4])
        if found is not None:
            return BinlogPosition.of(name, found)
    return None


def missing_error(xid: str, file: str, pos: int, searched: str) -> XaPrepareNotFoundError:
    return XaPrepareNotFoundError(
        f"XA COMMIT {xid} at {file}:{pos}: its XA PREPARE ({searched}) was not found, so "
        f"the transaction's row changes cannot be read")
