"""Micro-batches whose end the read task finds (DESIGN.md decision 4, amended).

The driver does not walk a batch's range before the read task does. It hands the
task a rule instead, deterministic because the binlog is immutable: from the
batch's start ``A``, read to the first transaction boundary after ``events`` events,
never past ``cap`` (a boundary: the server's position when the batch was planned),
and stop before the first DDL at or after ``known`` that the schema history the task
carries has not applied. The task checks the TABLE_MAPs of its range against that
history itself and holds back a table whose TABLE_MAP disagrees, as the driver's
schema keeper used to before the task ran.

When it reaches its end the task writes a :class:`Found` record (where it ended and
why, the tables it held back, the binlog files' birth times) into the pipeline's
schema-history folder, named after the batch's end offset. The driver plans the
next batch from that record and merges its findings into the history; when the
record is missing (a folder the executors do not share), the driver reads the
range itself with the same code, which finds the same end.

The end offset Spark stores for such a batch is ``{"file", "pos", "upto"}`` (then
``gtid``, ``ts``, ``epoch`` when known, as every offset carries them): file and pos
are the batch's start (a position every batch after it is at or past), ``gtid`` and
``ts`` are the GTID set and commit time at that start, ``upto`` holds the rule. The
same offset always resolves to the same position. The record also holds the GTID
set of the transactions the task read and the commit time of the last, so the
offset resolves to the full end offset (:func:`resolved_offset`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from itertools import chain
from typing import Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from mysqlcdc.binlog import constants as C
from mysqlcdc.binlog.events import QueryEvent
from mysqlcdc.capture.changes import ChangeDecoder, RawEventLike, _limit_in, _number
from mysqlcdc.collector import fewer_collections
from mysqlcdc.errors import ConnectionLostError, SchemaError, SourceChangedError
from mysqlcdc.gtidset import GtidSet
from mysqlcdc.schema.ddl import classify
from mysqlcdc.schema.history import Quarantine
from mysqlcdc.types import SEQ_FILE, SEQ_POS, BinlogPosition, binlog_file_number

__all__ = ["EndRule", "Found", "RECORDS", "combine", "end_offset", "iter_until", "pending", "read_batch",
           "read_found", "record_path", "resolved_offset", "offset_after",
           "slice_cuts", "spec_key", "task_rules", "write_found"]

log = logging.getLogger(__name__)

RECORDS = "batches"              # the records' folder inside the schema-history folder
_FDE = C.FORMAT_DESCRIPTION_EVENT
_TABLE_MAP = C.TABLE_MAP_EVENT
_NEVER = 1 << 64
# events that begin a transaction group: where a slice of a batch may begin
_GTID_STARTS = frozenset({C.GTID_LOG_EVENT, C.ANONYMOUS_GTID_LOG_EVENT, C.GTID_TAGGED_LOG_EVENT,
                          C.MARIA_GTID_EVENT})
# what a slice task decodes of the events before its slice (nothing carries rows)
_PREFIX_PARSED = frozenset({C.TABLE_MAP_EVENT, C.QUERY_EVENT, C.MARIA_QUERY_COMPRESSED_EVENT,
                            C.TRANSACTION_PAYLOAD_EVENT, C.FORMAT_DESCRIPTION_EVENT,
                            C.ROTATE_EVENT, C.START_EVENT_V3})
_PREFIX_WANTED = _PREFIX_PARSED | _GTID_STARTS


@dataclass(frozen=True)
class EndRule:
    """Where a read task's range ends; see the module docstring."""

    cap: BinlogPosition
    events: int | None = None
    known: BinlogPosition | None = None
    record: str | None = None            # the file the task writes its Found to
    births: dict[str, int] = field(default_factory=dict, compare=False)
    # a slice of the batch: from the first GTID event at or after ``cut_from`` (None: the
    # batch's start) to the first one at or after ``cut_to`` (None: the batch's end)
    cut_from: BinlogPosition | None = None
    cut_to: BinlogPosition | None = None
    # set: ``cut_from`` is exactly where a transaction's GTID event begins, with this many
    # events of the batch before it (``RangePlanner.exact_cuts``): the task starts its
    # stream there instead of passing over the batch's events before its slice
    cut_events: int | None = None


@dataclass
class Found:
    """What a read task found reading ``[start, end)``."""

    start: BinlogPosition
    end: BinlogPosition
    reason: str                           # events | cap | ddl | slice | empty
    events: int = 0
    bytes: int = 0
    rows: int = 0
    held: list[Quarantine] = field(default_factory=list)
    births: dict[str, int] = field(default_factory=dict)
    gtids: str = ""                      # GTID set of the transactions read ("": none)
    last_ts: int | None = None           # commit time (ms) of the last of them
    # XA transactions prepared and still open at ``end`` (``capture.xa``): xid ->
    # [position of their group, whether they changed a captured table]; and those whose
    # outcome was read: xid -> the position of the prepare it resolved
    xa: dict[str, list] = field(default_factory=dict)
    xa_done: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict:
        out = {"start": str(self.start), "end": str(self.end), "reason": self.reason,
               "events": self.events, "bytes": self.bytes, "rows": self.rows,
               "held": [q.to_json() for q in self.held], "births": self.births,
               "gtids": self.gtids, "last_ts": self.last_ts}
        if self.xa or self.xa_done:
            out["xa"], out["xa_done"] = self.xa, self.xa_done
        return out

    @classmethod
    def from_json(cls, d: dict) -> "Found":
        return cls(BinlogPosition.parse(d["start"]), BinlogPosition.parse(d["end"]), d["reason"],
                   int(d["events"]), int(d["bytes"]), int(d["rows"]),
                   [Quarantine.from_json(q) for q in d["held"]],
                   {k: int(v) for k, v in d["births"].items()},
                   d.get("gtids") or "", d.get("last_ts"),
                   {str(k): [str(v[0]), bool(v[1])] for k, v in (d.get("xa") or {}).items()},
                   {str(k): str(v) for k, v in (d.get("xa_done") or {}).items()})


# -- offsets -------------------------------------------------------------------

def pending(offset: dict) -> bool:
    """True for an end offset whose position a read task resolves (``upto``)."""
    return "upto" in offset


def spec_key(offset: dict) -> str:
    """A stable file name for a pending end offset (the failover ``epoch`` too: after
    one, the same positions are another server's binlog)."""
    text = json.dumps({k: offset[k] for k in ("file", "pos", "upto", "epoch") if k in offset},
                      sort_keys=True)
    return hashlib.sha1(text.encode()).hexdigest()[:24]


def record_path(folder: str | os.PathLike, offset: dict, index: int | None = None) -> Path:
    """The record of the batch ending at ``offset`` (of its slice ``index``)."""
    name = spec_key(offset) if index is None else f"{spec_key(offset)}-{index}"
    return Path(folder) / RECORDS / f"{name}.json"


def cuts_of(offset: dict) -> list[BinlogPosition]:
    return [BinlogPosition.parse(c) for c in offset["upto"].get("cuts", ())]


def read_batch(folder: str | os.PathLike, offset: dict) -> Found | None:
    """What the read tasks of the batch ending at ``offset`` found, put together (None
    while a record is missing). Slices are contiguous: the first that ended for a reason
    of the batch's own (events, cap, DDL) ended the batch; those after it are empty."""
    cuts = cuts_of(offset)
    if not cuts:
        return read_found(record_path(folder, offset))
    parts = [read_found(record_path(folder, offset, i)) for i in range(len(cuts) + 1)]
    if any(f is None for f in parts):
        return None
    return combine(BinlogPosition.of(offset["file"], int(offset["pos"])), parts)


def combine(start: BinlogPosition, parts: list[Found]) -> Found | None:
    """What the slices ``parts`` of the batch from ``start`` found, as one read task
    of the whole batch would have (None: they do not chain)."""
    last = next((f for f in parts if f.reason not in ("slice", "empty")), None)
    if last is None or any(f.reason == "empty" for f in parts[:parts.index(last)]):
        log.warning("the records of the batch from %s do not chain; reading it again", start)
        return None
    held: dict[str, Quarantine] = {}
    births: dict[str, int] = {}
    gtids, last_ts = GtidSet(), None
    for f in parts:
        held.update((json.dumps(q.to_json(), sort_keys=True), q) for q in f.held)
        births.update(f.births)
        gtids = gtids.union(GtidSet.parse(f.gtids))     # slices in binlog order
        last_ts = f.last_ts or last_ts
    return Found(start, last.end, last.reason, sum(f.events for f in parts),
                 sum(f.bytes for f in parts), sum(f.rows for f in parts),
                 list(held.values()), births, str(gtids), last_ts, *_xa_of(parts))


def _xa_of(parts: list[Found]) -> tuple[dict[str, list], dict[str, str]]:
    """The XA transactions open at the end of a batch read in slices: every slice
    inherited the batch's open ones, so a prepare is open unless some slice read its
    outcome (an xid may be used again once its transaction is over: the prepare's
    position tells them apart; a rollback a slice did not look up, position "", ends
    every prepare of its xid before that slice)."""
    done: dict[str, str] = {}
    rolled_back: dict[str, BinlogPosition] = {}
    for f in parts:
        done.update(f.xa_done)
        rolled_back.update((x, f.start) for x, at in f.xa_done.items() if at == "")
    resolved = set(done.items())
    open_: dict[str, list] = {}
    for f in parts:
        open_.update((x, v) for x, v in f.xa.items() if (x, v[0]) not in resolved and not (
            x in rolled_back and BinlogPosition.parse(v[0]) < rolled_back[x]))
    return open_, done


def write_found(path: str | os.PathLike, found: Found) -> bool:
    """Write ``found`` atomically; False when the folder cannot be written (an
    executor that does not see the driver's folder: the driver then reads the range)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(found.to_json()))
        os.replace(tmp, path)
        return True
    except OSError as exc:
        log.warning("cannot write the batch record %s: %s", path, exc)
        return False


def read_found(path: str | os.PathLike) -> Found | None:
    try:
        return Found.from_json(json.loads(Path(path).read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def resolved_offset(offset: dict, folder: str | os.PathLike | None) -> dict:
    """The offset ``offset`` stands for, as every reader of offsets wants it (``file``,
    ``pos``, ``gtid``, ``ts``, ``epoch``): a plain one as it is; a pending one the end
    its read tasks recorded, else its start (a lower bound: every change before it was
    delivered)."""
    if not pending(offset):
        return offset
    return offset_after(offset, None if folder is None else read_batch(folder, offset))


def offset_after(offset: dict, found: Found | None) -> dict:
    """A pending ``offset`` (whose ``gtid``/``ts`` are its start's) made plain: at
    ``found``'s end, its GTID set grown by the transactions read; at its start
    without ``found``."""
    out = {k: v for k, v in offset.items() if k != "upto"}
    if found is None:
        return out
    out["file"], out["pos"] = found.end.file, found.end.pos
    if found.xa:
        out["xa"] = found.xa           # XA transactions open there (``capture.xa``)
    else:
        out.pop("xa", None)
    if out.get("gtid") is not None:
        out["gtid"] = str(GtidSet.parse(out["gtid"]).union(GtidSet.parse(found.gtids)))
    if found.last_ts is not None:
        out["ts"] = found.last_ts
    return out


def task_rules(offset: dict, folder: str | os.PathLike | None,
               births: dict[str, int]) -> list[EndRule]:
    """The rules of the read tasks of the batch ending at ``offset``: one, or one per
    slice when the offset cuts the batch. ``folder`` None: no records are written."""
    upto = offset["upto"]
    known = upto.get("known")
    cuts = cuts_of(offset)
    edges = [None, *cuts, None]
    counts = [None, *upto["counts"]] if upto.get("counts") else [None] * (len(cuts) + 1)
    rules = []
    for i in range(len(cuts) + 1):
        record = None if folder is None else \
            str(record_path(folder, offset, i if cuts else None))
        rules.append(EndRule(cap=BinlogPosition.of(upto["file"], int(upto["pos"])),
                             events=upto.get("events"),
                             known=BinlogPosition.parse(known) if known else None,
                             record=record, births=dict(births),
                             cut_from=edges[i], cut_to=edges[i + 1],
                             cut_events=counts[i]))
    return rules


def end_offset(start: BinlogPosition, cap: BinlogPosition, events: int | None,
               known: BinlogPosition | None, cuts: list[BinlogPosition] = (),
               counts: list[int] | None = None) -> dict:
    """The pending end offset of a batch from ``start`` (stable key order). ``counts``:
    the cuts are exact (``EndRule.cut_events``), with these numbers of events before them."""
    upto: dict = {"file": cap.file, "pos": cap.pos, "events": events}
    if known is not None and known > start:
        upto["known"] = str(known)
    if cuts:
        upto["cuts"] = [str(c) for c in cuts]
        if counts:
            upto["counts"] = [int(n) for n in counts]
    return {"file": start.file, "pos": start.pos, "upto": upto}


def slice_cuts(start: BinlogPosition, end: BinlogPosition, parts: int,
               logs: list[tuple[str, int]], min_bytes: int) -> list[BinlogPosition]:
    """Positions cutting ``[start, end)`` into ``parts`` spans of about equal bytes (by the
    server's file list ``logs``), none under ``min_bytes``: where the slices begin."""
    spans = []                      # (file, first, last) byte of each file in the range
    for name, size in logs:
        number = BinlogPosition.of(name, 4).file_number
        if start.file_number <= number <= end.file_number:
            lo = start.pos if name == start.file else 4
            hi = end.pos if name == end.file else size
            if hi > lo:
                spans.append((name, lo, hi))
    total = sum(hi - lo for _, lo, hi in spans)
    parts = max(1, min(parts, total // max(min_bytes, 1)))
    cuts, step, acc = [], total / parts, 0
    want = step
    for name, lo, hi in spans:
        while len(cuts) < parts - 1 and acc + (hi - lo) > want:
            cuts.append(BinlogPosition.of(name, lo + int(want - acc)))
            want += step
        acc += hi - lo
    return cuts


# -- the read task's loop --------------------------------------------------------

def iter_until(raws: Iterable[RawEventLike], decoder: ChangeDecoder, start: BinlogPosition,
               rule: EndRule, *, batch_rows: int = 8192, out: list | None = None
               ) -> Iterator[pa.RecordBatch]:
    """Yield the envelope batches of ``[start, end)`` where ``end`` is what ``rule``
    finds; the :class:`Found` is appended to ``out`` once the end is reached. A slice
    task (``rule.cut_from``) first passes over the batch's events before its slice
    without decoding rows (counting them, checking TABLE_MAPs, looking for DDL)."""
    fewer_collections()       # the row images a batch keeps are no cycle's part
    walk = _Walk(decoder, start, rule)
    events: Iterable[RawEventLike] = raws
    if rule.cut_from is not None and rule.cut_events is not None:
        events = chain((walk.at_slice(raws),), raws)
    elif rule.cut_from is not None:
        first = walk.to_slice(raws)
        if first is None:
            if out is not None:
                out.append(walk.found("empty"))
            return
        events = chain((first,), raws)
    reason = yield from walk.decode(events, batch_rows)
    if reason is None:
        # the stream ended: a replication stream stops at the cap (``stop_at``)
        at = getattr(raws, "position", None)
        if at is None or at < rule.cap:
            raise ConnectionLostError(f"binlog stream ended before the end of the range "
                                      f"(at {walk.boundary[0]}:{walk.boundary[1]}, planned up "
                                      f"to {rule.cap})")
        walk.boundary, reason = (rule.cap.file, rule.cap.pos), "cap"
    if len(decoder.builder):
        walk.emitted += len(decoder.builder)
        yield decoder.take()
    if out is not None:
        out.append(walk.found(reason))


class _Walk:
    """One read task's pass over its stream (see ``iter_until``)."""

    def __init__(self, decoder: ChangeDecoder, start: BinlogPosition, rule: EndRule) -> None:
        self.decoder, self.rule, self.start = decoder, rule, start
        known = rule.known or start
        decoder.known = (known.file_number, known.pos)
        decoder.check_table_maps(start)
        self.cap_key = (rule.cap.file_number, rule.cap.pos)
        self.max_events = rule.events or _NEVER
        self.numbers: dict[str, int] = {start.file: start.file_number}
        self.births: dict[str, int] = {}
        self.boundary = (start.file, start.pos)
        self.counted = 0                  # events of the batch before this task's slice
        self.size = self.emitted = 0
        self.gtids: list[str] = []        # of the transactions up to ``boundary``
        self.last_ts: int | None = None

    def _key(self, file: str, pos: int) -> tuple[int, int]:
        return (_number(self.numbers, file), pos)

    def _moved(self, raw: RawEventLike) -> bool:
        """An event's bookkeeping before any other look at it: a FORMAT_DESCRIPTION's
        birth time; an artificial event fed to the decoder (True: nothing more to do).
        ``decode`` does the same inline, per event of its hot loop."""
        if raw.data[4] == _FDE:
            _birth(raw.file, raw.data, self.rule.births, self.births)
        if raw.artificial:
            self.decoder.feed(raw)
            return True
        return False

    def at_slice(self, raws: Iterable[RawEventLike]) -> RawEventLike:
        """A stream started at an exact cut (``rule.cut_events``): its first event after
        the server's artificial ones must be a GTID event at ``cut_from``; the batch's
        events before it are known by number, not passed over."""
        rule, decoder = self.rule, self.decoder
        for raw in raws:
            data = raw.data
            if self._moved(raw):
                continue
            if (raw.file, raw.pos) != (rule.cut_from.file, rule.cut_from.pos) or \
                    data[4] not in _GTID_STARTS:
                raise SourceChangedError(
                    f"the slice planned at {rule.cut_from} found event type {data[4]} at "
                    f"{raw.file}:{raw.pos}, not a transaction's first event")
            self.counted = decoder.events = rule.cut_events
            self.boundary = (raw.file, raw.pos)
            self.start = BinlogPosition(_number(self.numbers, raw.file), raw.pos, raw.file)
            return raw
        raise ConnectionLostError(f"binlog stream ended before the slice at {rule.cut_from}")

    def to_slice(self, raws: Iterable[RawEventLike]) -> RawEventLike | None:
        """Pass over the events before this task's slice: the first GTID event at or after
        ``cut_from`` (returned, consumed) begins it, unless the batch ends first (None):
        its event count reached, its cap reached, or a DDL the history has not seen. A
        replication stream hands out only the events looked at (``passing``)."""
        decoder, parser, lookup = self.decoder, self.decoder.parser, self.decoder.history
        cut = (self.rule.cut_from.file_number, self.rule.cut_from.pos)
        known, passed = decoder.known, getattr(raws, "passed", 0)
        events = raws.passing(_PREFIX_WANTED) if hasattr(raws, "passing") else iter(raws)
        count = 0                       # events handed out; the rest are counted by the stream
        try:
            for raw in events:
                data = raw.data
                code = data[4]
                if self._moved(raw):
                    continue
                here = self._key(raw.file, raw.pos)
                if here >= self.cap_key:
                    return None
                if code in _GTID_STARTS:
                    before = count + getattr(raws, "passed", 0) - passed
                    if before >= self.max_events:
                        return None      # the batch ended at or before this transaction
                    if here >= cut:
                        self.counted = decoder.events = before
                        self.boundary = (raw.file, raw.pos)
                        self.start = BinlogPosition(here[0], raw.pos, raw.file)
                        return raw
                count += 1
                if code not in _PREFIX_PARSED:
                    continue
                lookup.at = (here[0], raw.pos, 0)
                if code == _TABLE_MAP and parser.skim_table_map(data) is not None:
                    continue
                for ev in parser.parse(data, raw.pos):
                    if ev.__class__ is QueryEvent and here >= known and \
                            classify(ev.query) != "ignore":
                        return None
            return None                  # the stream stopped at the cap
        finally:
            if hasattr(events, "close"):
                events.close()           # what it read and did not hand out stays queued

    def decode(self, raws: Iterable[RawEventLike], batch_rows: int):
        """Decode events until the end the rule finds; yields batches, returns why it ended.

        The loop runs once per event of the batch (two million for a million narrow row
        changes), so what it keeps per event is in locals: the bytes read (``size``) and
        the last commit time are written back when it stops; each transaction's GTID
        goes to ``gtids`` (for the offsets' GTID set, as the driver's scan collects them)."""
        decoder, rule = self.decoder, self.rule
        feed, builder, tracker = decoder.feed_raw, decoder.builder, decoder.tracker
        births, born, numbers, gtids = rule.births, self.births, self.numbers, self.gtids
        max_events, cap_key = self.max_events, self.cap_key
        ends = tracker.ends           # the tracker's count of transactions ended
        last_ts = self.last_ts
        cut = None if rule.cut_to is None else (rule.cut_to.file_number, rule.cut_to.pos)
        b_rows, seen, size = 0, None, 0   # rows produced up to the boundary; bytes read
        # per file: where the cap falls in it, where the next slice may begin, the lower
        file, limit, sliced, stop = None, _NEVER, _NEVER, _NEVER
        try:
            for raw in raws:
                data = raw.data
                if data[4] == _FDE:                   # as _moved, inline
                    _birth(raw.file, data, births, born)
                if raw.artificial:
                    decoder.feed(raw)
                    continue
                pos = raw.pos
                if raw.file != file:
                    file = raw.file
                    limit = _limit_in(numbers, file, cap_key)
                    sliced = _limit_in(numbers, file, cut)
                    stop = min(limit, sliced)
                if pos >= stop:
                    if pos >= limit:
                        self.boundary = (rule.cap.file, rule.cap.pos)
                        return "cap"
                    if data[4] in _GTID_STARTS:
                        self.boundary = (file, pos)     # where the next slice begins
                        return "slice"
                size += len(data)
                rows = feed(file, pos, data)
                if decoder.halt is not None:
                    batch = _drop_group(decoder, self.boundary, b_rows, self.emitted)
                    if batch is not None:
                        self.emitted += batch.num_rows
                        yield batch
                    return "ddl"
                if rows and len(builder) >= batch_rows:
                    self.emitted += len(builder)
                    yield decoder.take()
                b = decoder.boundary
                if b is not seen:
                    seen = self.boundary = b
                    b_rows = self.emitted + len(builder)
                    if tracker.ends != ends:           # a transaction ended here
                        ends, ctx = tracker.ends, tracker.last
                        if ctx.gtid is not None:
                            gtids.append(ctx.gtid)
                        last_ts = ctx.ts_ms or last_ts
                    if decoder.events >= max_events:
                        return "events"
                    # the boundary is mostly in the event's file: its cap offset is known
                    if (b[1] >= limit) if b[0] is file else (self._key(*b) >= cap_key):
                        return "cap"
            return None
        finally:
            self.size += size
            self.last_ts = last_ts

    def found(self, reason: str) -> Found:
        if len(self.decoder.builder):
            raise AssertionError("rows left undelivered")
        file, pos = self.boundary
        end = BinlogPosition(_number(self.numbers, file), pos, file)
        start = self.start if reason != "empty" else end
        return Found(start, end, reason, self.decoder.events - self.counted,
                     self.size + self.decoder.passed_bytes,
                     self.emitted, list(self.decoder.held), self.births,
                     str(GtidSet().add_all(self.gtids)), self.last_ts,
                     self.decoder.xa_still_open(), dict(self.decoder.xa_done))


def _birth(file: str, data: bytes, known: dict[str, int], seen: dict[str, int]) -> None:
    """A FORMAT_DESCRIPTION's timestamp is its file's birth time: another one for a file
    this pipeline read before means another binlog under the same name."""
    born = int.from_bytes(data[:4], "little")
    was = known.get(file)
    if was is not None and was != born:
        raise SourceChangedError(
            f"binlog file {file} was created at {born}, but the file of that name this "
            f"pipeline read was created at {was}: the binlog was reset or another server "
            f"answers on this address")
    seen.setdefault(file, born)


def _drop_group(decoder: ChangeDecoder, boundary: tuple[str, int], b_rows: int,
                emitted: int) -> pa.RecordBatch | None:
    """The decoder halted at a DDL: the batch ends at ``boundary``, before the DDL's
    transaction. Rows of that transaction decoded before the DDL are dropped (the next
    batch reads them again); if some were handed out already, the batch cannot end
    before them and the task stops with a named error instead of decoding on with a
    definition the DDL changed."""
    if emitted > b_rows:
        file, pos = decoder.halt
        raise SchemaError(
            f"DDL at {file}:{pos} follows {emitted - b_rows} row changes of its own "
            f"transaction, which were delivered already; the schema history cannot be "
            f"brought past it inside one micro-batch",
            hint="Restart the pipeline with source.max_events_per_batch set above the size "
                 "of that transaction, or report the statement: DDL normally commits alone.")
    if not len(decoder.builder):
        return None
    batch = decoder.take()
    limit = Decimal(binlog_file_number(boundary[0]) * SEQ_FILE + boundary[1] * SEQ_POS)
    kept = batch.filter(pc.less(batch.column("seq"), pa.scalar(limit, batch.schema.field("seq").type)))
    return kept if kept.num_rows else None
