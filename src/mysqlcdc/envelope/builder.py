"""Row changes -> columnar envelope batches (``pyarrow.RecordBatch``).

Built for throughput: per row only the three JSON texts are Python objects (row
images as the UTF-8 bytes orjson writes, never decoded into str); the
columns a rows event's rows share are kept once per event and expanded by Arrow
when the batch is taken.
"""

from __future__ import annotations

import json
import struct
from itertools import accumulate, chain
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from orjson import JSONEncodeError as _OrjsonError
from orjson import dumps as _orjson_dumps

from mysqlcdc.binlog.rowscan import RawRows
from mysqlcdc.envelope.columnar import ValueFailed, image_plan, make_context
from mysqlcdc.envelope.model import ARROW_SCHEMA, OP_DELETE, OP_UPDATE
from mysqlcdc.errors import MalformedEventError
from mysqlcdc.types import SEQ_FILE, SEQ_POS

__all__ = ["EnvelopeBuilder", "TxnContext"]

# what a row decoder raises on bytes it cannot decode (``BinlogParser.parse`` names them)
_DECODE_ERRORS = (ValueError, IndexError, KeyError, struct.error, OverflowError, NotImplementedError)
_encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), check_circular=False)


def _encode(value: Any) -> str:
    """Compact JSON text. orjson is ~8x faster and writes the same text for every
    value a row image holds; anything it refuses (an integer past 64 bits) goes
    through the standard library instead."""
    try:
        return _orjson_dumps(value).decode()
    except _OrjsonError:
        return _encoder.encode(value)


def _encode_utf8(value: Any) -> bytes | str:
    """``_encode`` as the bytes orjson writes (str when the standard library had to):
    row images go to Arrow as UTF-8 bytes, never decoded into Python str."""
    try:
        return _orjson_dumps(value)
    except _OrjsonError:
        return _encoder.encode(value)


class TxnContext:
    """What every row of the current transaction shares."""

    __slots__ = ("gtid", "txn_id", "ts_ms", "server_id")

    def __init__(self) -> None:
        self.gtid: str | None = None
        self.txn_id: str | None = None
        self.ts_ms: int = 0
        self.server_id: int = 0


class EnvelopeBuilder:
    """Accumulates envelope rows; ``take()`` returns them as a RecordBatch.

    Per row only the JSON texts (before, after, key) are kept; everything a rows
    event's rows share is one record per event, expanded into columns by Arrow
    (run-end decoding) when the batch is taken.
    """

    def __init__(self) -> None:
        self._memo: dict[tuple, tuple] = {}
        self._groups: dict[tuple, _Group] = {}
        # batches finished ahead of the rows being built (``stash``, ``put_ready``): what
        # an XA transaction's hold moves aside, handed out first by ``take``
        self._ready: list[pa.RecordBatch] = []
        self._ready_rows = 0
        # True while the rows being built are an XA transaction's, not yet committed:
        # ``take`` leaves them, and they do not count towards a batch's size
        self.holding = False
        self._reset()

    def _reset(self) -> None:
        self._before: list[str | None] = []
        self._after: list[str | None] = []
        self._key: list[str | None] = []
        # per row: an update's key from its before image (None for other ops)
        self._old_key: list[str | None] = []
        # per event: (rows, op, db, table, ts_ms, server_id, gtid, txn_id, file, pos,
        #             query, first row, seq of the first row)
        self._events: list[tuple] = []
        # the images of rows events converted column by column in ``take``, by
        # (columns, present columns, side), and the bytes they are in
        groups = getattr(self, "_groups", {})
        for group in groups.values():
            group.recs, group.events = [], []
        if len(groups) > 1024:          # many shapes seen: start over (all are empty now)
            groups.clear()
            self._memo.clear()
        self._bufs: list[bytes] = []
        self._buflen = 0

    def __len__(self) -> int:
        if self.holding:
            return self._ready_rows
        return len(self._key) + self._ready_rows

    def stash(self) -> None:
        """Finish the rows built so far as a batch of their own, ahead of every later row
        (``take`` hands them out first)."""
        if self._key:
            batch = self.take_own()
            self._ready.append(batch)
            self._ready_rows += batch.num_rows

    def put_ready(self, batch: pa.RecordBatch) -> None:
        """Put finished rows after every row built so far."""
        self.stash()
        if batch.num_rows:
            self._ready.append(batch)
            self._ready_rows += batch.num_rows

    def take(self) -> pa.RecordBatch:
        own = _empty_batch() if self.holding else self.take_own()
        if not self._ready:
            return own
        parts = self._ready + ([own] if own.num_rows else [])
        self._ready, self._ready_rows = [], 0
        return parts[0] if len(parts) == 1 else pa.concat_batches(parts)

    def add_rows(
        self,
        op: str,
        db: str,
        table: str,
        rows: Sequence[tuple[dict | None, dict | None]],
        key_columns: Sequence[str] | None,
        txn: TxnContext,
        file: str,
        file_number: int,
        pos: int,
        first_row: int,
        query: str | None = None,
        event_type: int | None = None,
    ) -> int:
        """Append one rows event's changes; returns the next row index. ``rows`` is a
        list of ``(before, after)`` dicts or a ``RawRows`` (converted in ``take``)."""
        n = len(rows)
        if not n:
            return first_row
        self._old_key += [None] * n
        if rows.__class__ is not RawRows:
            self._add_texts(op, rows, key_columns)
        elif not self._defer(op, rows, key_columns, file, pos, event_type):
            try:
                decoded = rows.decode()
            except _DECODE_ERRORS as e:     # as the parser names them
                raise MalformedEventError(f"cannot decode event: {e!r}", file=file, pos=pos,
                                          event_type=event_type) from e
            self._add_texts(op, decoded, key_columns)
        self._events.append((n, op, db, table, txn.ts_ms, txn.server_id, txn.gtid, txn.txn_id,
                             file, pos, query, first_row,
                             file_number * SEQ_FILE + pos * SEQ_POS + 2 * first_row))
        return first_row + n

    def _add_texts(self, op: str, rows: Sequence[tuple[dict | None, dict | None]],
                   key_columns: Sequence[str] | None) -> None:
        """The before/after/key texts of decoded rows (the reference path)."""
        if op == OP_UPDATE:
            n = len(rows)
            self._old_key[-n:] = [
                None if b is None else
                (_key_text(key_columns, b, a, OP_DELETE) if key_columns else _encode_utf8(b))
                for b, a in rows]
        if len(rows) == 1:
            before, after = rows[0]
            b = None if before is None else _encode_utf8(before)
            a = None if after is None else _encode_utf8(after)
            self._before.append(b)
            self._after.append(a)
            if key_columns:
                # the common key, one int column of the new (deleted) image, inline
                img = before if op == OP_DELETE else after
                if (len(key_columns) == 1 and img is not None
                        and (v := img.get(key_columns[0])).__class__ is int):
                    prefix = _KEY_PREFIX.get(key_columns[0]) or _key_prefix(key_columns[0])
                    self._key.append(prefix + str(v) + "}")
                else:
                    self._key.append(_key_text(key_columns, before, after, op))
            else:
                self._key.append(b if op == OP_DELETE else a)
        else:
            befores = _encode_all([b for b, _ in rows])
            afters = _encode_all([a for _, a in rows])
            self._before += befores
            self._after += afters
            if key_columns and len(key_columns) == 1:
                k = key_columns[0]
                prefix = _KEY_PREFIX.get(k) or _key_prefix(k)
                side = 0 if op == OP_DELETE else 1
                self._key += [prefix + str(v) + "}"
                              if r[side] is not None and (v := r[side].get(k)).__class__ is int
                              else _key_text(key_columns, r[0], r[1], op) for r in rows]
            elif key_columns:
                self._key += [_key_text(key_columns, b, a, op) for b, a in rows]
            else:
                self._key += befores if op == OP_DELETE else afters

    def _defer(self, op: str, rows: RawRows, key_columns: Sequence[str] | None, file: str, pos: int,
               event_type: int | None) -> bool:
        """Take ``rows`` for conversion in ``take``; False when its key columns are
        not all in the image the key comes from (MINIMAL images: decode them)."""
        memo_key = (rows.shape, key_columns)     # the shape implies the columns and op
        entry = self._memo.get(memo_key)
        if entry is None:
            entry = self._memo_entry(memo_key, op, rows, key_columns)
        if entry[0] is None:
            return False
        n, row = rows.n, len(self._key)
        base = self._buflen
        self._bufs.append(rows.data)
        self._buflen = base + len(rows.data)
        event = (file, pos, event_type)
        group = entry[0]
        group.recs += rows.recs_before if group.side == 0 else rows.recs_after
        group.events.append((base, n, row, event, entry[1]))
        group = entry[2]
        if group is not None:
            group.recs += rows.recs_after
            group.events.append((base, n, row, event, entry[3]))
        none = [None] * n
        self._before += none
        self._after += none
        self._key += none
        return True

    def _memo_entry(self, memo_key: tuple, op: str, rows: RawRows,
                    key_columns: Sequence[str] | None) -> tuple:
        """(first group or None when not deferrable, its key columns or None,
        second group or None, its key columns or None) of a rows-event shape."""
        keys = tuple(key_columns) if key_columns else ()
        delete = op == OP_DELETE
        primary = rows.before if delete else rows.after
        names = {rows.cols[i].name for i in primary}
        sides = [(p, s) for p, s in ((rows.before, 0), (rows.after, 1)) if p is not None]
        update = op == OP_UPDATE
        old_names = {rows.cols[i].name for i in rows.before} if update and rows.before else names
        if not all(k in names and k in old_names for k in keys):
            entry = (None, None, None, None)
        else:
            found = []
            for present, side in sides:
                gk = (rows.cols, present, side)
                group = self._groups.get(gk)
                if group is None:
                    group = self._groups[gk] = _Group(rows.cols, present, side)
                # what this side's key texts are for: the key column (2), or an
                # update's key before the change (3), compared with the new one in take
                if (side == 0) == delete:
                    tag = (keys, 2)
                elif update and side == 0:
                    tag = (keys, 3)
                else:
                    tag = None
                found += [group, tag]
            found += [None, None]
            entry = tuple(found[:4])
        if len(self._memo) > 4096:
            self._memo.clear()
        self._memo[memo_key] = entry
        return entry

    def add_event(self, op: str, db: str, table: str, before: dict | None, after: dict | None,
                  query: str | None, txn: TxnContext, file: str, file_number: int,
                  pos: int, row: int = 0) -> None:
        """Append one record that is not a row change (schema change ``s``, truncate ``t``):
        ``before``/``after`` are the table's definitions around it, ``query`` its statement;
        ``row`` orders records at the same position."""
        self._before.append(None if before is None else _encode(before))
        self._after.append(None if after is None else _encode(after))
        self._key.append(None)
        self._old_key.append(None)
        self._events.append((1, op, db, table, txn.ts_ms, txn.server_id, txn.gtid, txn.txn_id,
                             file, pos, query, row,
                             file_number * SEQ_FILE + pos * SEQ_POS + 2 * row))

    def take_own(self) -> pa.RecordBatch:
        """The rows built since the last ``stash`` or ``take`` (not the finished ones)."""
        total = len(self._key)
        events = self._events
        if not events:
            return _empty_batch()
        counts, op, db, table, ts, sid, gtid, txn, file, pos, query, first, seqs = zip(*events)
        ends = pa.array(list(accumulate(counts)), pa.int64())

        def per_event(values: tuple, typ: pa.DataType) -> pa.Array:
            return _run_end_decode(ends, pa.array(values, type=typ))

        # row = first row of its event + its index in the event
        starts = [s - c for s, c in zip(accumulate(counts), counts)]
        index = pc.subtract(pc.cumulative_sum(_run_end_decode(
            pa.array([total], pa.int64()), pa.array([1], pa.int64()))), 1)
        row = pc.add(index, per_event(tuple(f - s for f, s in zip(first, starts)), pa.int64()))
        before, after, key, old_key = (_text_array(self._before), _text_array(self._after),
                                       _text_array(self._key), _text_array(self._old_key))
        if self._bufs:
            before, after, key, old_key = _convert_groups(self._groups, self._bufs, total,
                                                          before, after, key, old_key)
        columns = {
            "op": per_event(op, pa.string()), "db": per_event(db, pa.string()),
            "table": per_event(table, pa.string()), "before": before,
            "after": after, "key": key,
            "ts_ms": per_event(ts, pa.int64()), "server_id": per_event(sid, pa.int64()),
            "gtid": per_event(gtid, pa.string()), "txn_id": per_event(txn, pa.string()),
            "file": per_event(file, pa.string()), "pos": per_event(pos, pa.int64()),
            "row": row.cast(pa.int32()), "seq": _seq_array(seqs, counts),
            "query": per_event(query, pa.string()),
            "moved_key": pa.nulls(total, pa.string()),
        }
        self._reset()
        batch = pa.RecordBatch.from_arrays([columns[f.name] for f in ARROW_SCHEMA],
                                           schema=ARROW_SCHEMA)
        return _split_key_changes(batch, old_key)


def _empty_batch() -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in ARROW_SCHEMA],
                                      schema=ARROW_SCHEMA)


class _Group:
    """The deferred images of one shape and side (0 before, 1 after) in a batch: their
    records (``binlog.rowscan``) and per rows event ``(where its bytes start in the
    batch's joined bytes, image count, first row, (file, pos, type), key columns or
    None when its key does not come from this side)``. Kept across batches (emptied
    by ``take``), so a memoized shape finds its group directly."""

    __slots__ = ("cols", "present", "side", "recs", "events")

    def __init__(self, cols: tuple, present: tuple[int, ...], side: int) -> None:
        self.cols, self.present, self.side = cols, present, side
        self.recs: list[int] = []
        self.events: list[tuple] = []


def _ranges(firsts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``firsts[i] .. firsts[i] + counts[i] - 1`` for every i, concatenated."""
    total = int(counts.sum())
    starts = np.cumsum(counts) - counts
    return np.repeat(firsts - starts, counts) + np.arange(total)


def _convert_groups(groups: dict[tuple, _Group], bufs: list[bytes], total: int, before: pa.Array,
                    after: pa.Array, key: pa.Array, old_key: pa.Array) -> tuple[pa.Array, ...]:
    """The before/after/key/old-key texts of the deferred images, put in their rows."""
    ctx = make_context(bufs)
    placed: list[list] = [[], [], [], []]    # before, after, key, old key: (rows, texts) parts
    for group in groups.values():
        if not group.events:
            continue
        plan = image_plan(group.cols, group.present)
        bases, counts, firsts, events, keyed = zip(*group.events)
        counts = np.array(counts, np.int64)
        recs = np.array(group.recs, np.int64).reshape(-1, 1 + plan.nvar)
        recs += np.repeat(np.array(bases, np.int64), counts)[:, None]
        try:
            frags = plan.fragments(ctx, recs)
        except ValueFailed as e:
            k = int(np.searchsorted(np.cumsum(counts), e.index, side="right"))
            file, pos, etype = events[k]
            raise MalformedEventError(f"cannot decode event: {e.cause!r}", file=file, pos=pos,
                                      event_type=etype) from e.cause
        images = plan.images(frags, len(recs))
        rows = _ranges(np.array(firsts, np.int64), counts)
        placed[group.side].append((rows, images))
        # keys: per distinct key-column tuple, the images whose key comes from here
        starts = np.cumsum(counts) - counts
        key_sets = set(keyed)
        for tag in key_sets:
            if tag is None:
                continue
            keys, target = tag
            texts = plan.key_texts(frags, keys) if keys else images
            if len(key_sets) == 1:
                placed[target].append((rows, texts))
                continue
            pick = np.array([k == tag for k in keyed])
            sel = _ranges(starts[pick], counts[pick])
            placed[target].append((rows[sel], texts.take(pa.array(sel))))

    def put(column: pa.Array, parts: list) -> pa.Array:
        """``column`` (null where deferred) with each part's texts in its rows: one
        take from the column and the parts, no sort."""
        if not parts:
            return column
        if len(parts) == 1 and column.null_count == total:
            # the usual batch, of one table: every text is the part's, in row order (its
            # rows ascend, each once), so the part itself is the column, or one take of it
            rows, texts = parts[0]
            merged = _as_binary(texts)
            if len(rows) != total:
                index = np.full(total, -1, np.int64)
                index[rows] = np.arange(len(rows))
                merged = merged.take(pa.array(index, mask=index < 0))
        else:
            pool = pa.concat_arrays([_as_binary(column)] + [_as_binary(t) for _, t in parts])
            index = np.arange(total, dtype=np.int64)
            at = total
            for rows, texts in parts:
                index[rows] = np.arange(at, at + len(texts))
                at += len(texts)
            merged = pool.take(pa.array(index))
        # no second UTF-8 check: the column's own texts were checked by ``_text_array``,
        # the converted ones are UTF-8 by construction (checked strings, orjson, ASCII)
        return pa.Array.from_buffers(pa.string(), len(merged), merged.buffers(),
                                     null_count=merged.null_count, offset=merged.offset)

    return (put(before, placed[0]), put(after, placed[1]), put(key, placed[2]),
            put(old_key, placed[3]))


def _split_key_changes(batch: pa.RecordBatch, old_key: pa.Array) -> pa.RecordBatch:
    """Every update whose key changed becomes a delete of the old key and a create of the
    new one at the same position (docs/ENVELOPE.md): ``d`` (before, old key, seq) then
    ``c`` (after, new key, seq + 1), each naming the other's key in ``moved_key``."""
    op, key = batch.column(0), batch.column(5)
    # an old key of "{}" comes from a before image without columns: unknown, not moved
    moved = pc.fill_null(pc.and_(pc.and_(pc.equal(op, OP_UPDATE), pc.not_equal(key, old_key)),
                                 pc.not_equal(old_key, "{}")), False)
    if not pc.any(moved).as_py():
        return batch
    flags = moved.to_numpy(zero_copy_only=False)
    index = np.repeat(np.arange(len(flags)), 1 + flags.astype(np.int64))
    taken = batch.take(pa.array(index))
    old = old_key.take(pa.array(index))
    # the first copy of a moved row is its delete half, the second its create half
    first_copy = np.ones(len(index), bool)
    first_copy[1:] = index[1:] != index[:-1]
    moved_t = flags[index]
    is_d = pa.array(moved_t & first_copy)
    is_c = pa.array(moved_t & ~first_copy)
    null = pa.scalar(None, pa.string())
    cols = dict(zip(batch.schema.names, taken.columns))
    new_key = cols["key"]
    cols["op"] = pc.if_else(is_d, "d", pc.if_else(is_c, "c", cols["op"]))
    cols["before"] = pc.if_else(is_c, null, cols["before"])
    cols["after"] = pc.if_else(is_d, null, cols["after"])
    cols["key"] = pc.if_else(is_d, old, new_key)
    cols["moved_key"] = pc.if_else(is_d, new_key, pc.if_else(is_c, old, null))
    seq = cols["seq"]
    limbs = np.frombuffer(seq.buffers()[1], "<u8").reshape(-1, 2)[seq.offset:seq.offset + len(seq)].copy()
    bump = (moved_t & ~first_copy).astype(np.uint64)
    low = limbs[:, 0] + bump
    limbs[:, 1] += (low < limbs[:, 0]).astype(np.uint64)
    limbs[:, 0] = low
    cols["seq"] = pa.Array.from_buffers(seq.type, len(seq), [None, pa.py_buffer(limbs)])
    return pa.RecordBatch.from_arrays([cols[n] for n in batch.schema.names], schema=batch.schema)


def _as_binary(a: pa.Array) -> pa.Array:
    return a if a.type == pa.binary() else a.cast(pa.binary())


def _text_array(values: list[bytes | str | None]) -> pa.Array:
    """A string array from UTF-8 bytes (and str): filled as binary, then cast, which
    checks the UTF-8 once in Arrow instead of decoding and re-encoding each text."""
    return pa.array(values, pa.binary()).cast(pa.string())


def _run_end_decode(ends: pa.Array, values: pa.Array) -> pa.Array:
    """``values[i]`` repeated up to row ``ends[i]`` (ends cumulative)."""
    return pc.run_end_decode(pa.RunEndEncodedArray.from_arrays(ends, values))


_SEQ_TYPE = ARROW_SCHEMA.field("seq").type
_SEQ_MAX = 10**38
_LOW64 = (1 << 64) - 1


def _seq_array(firsts: tuple[int, ...], counts: tuple[int, ...]) -> pa.Array:
    """The seq column, ``firsts[i]``, ``firsts[i] + 2`` ... for ``counts[i]`` rows each
    (a row's seq is even; the create half of a key change takes the odd one after it),
    written straight into the decimal128 buffer (16-byte little-endian two's
    complement); converting each int through pyarrow's decimal path costs
    microseconds a row."""
    if 0 <= min(firsts) and max(f + 2 * c for f, c in zip(firsts, counts)) <= _SEQ_MAX:
        # each event's first seq as two 64-bit limbs, plus the row's index in the event
        # with the carry into the high limb: no Python int per row
        counts_a = np.array(counts, np.int64)
        lo = np.repeat(np.array([f & _LOW64 for f in firsts], np.uint64), counts_a)
        hi = np.repeat(np.array([f >> 64 for f in firsts], np.uint64), counts_a)
        step = 2 * (np.arange(int(counts_a.sum()), dtype=np.int64)
                    - np.repeat(np.cumsum(counts_a) - counts_a, counts_a)).astype(np.uint64)
        low = lo + step
        limbs = np.empty((len(low), 2), np.uint64)
        limbs[:, 0] = low
        limbs[:, 1] = hi + (low < lo)
        return pa.Array.from_buffers(_SEQ_TYPE, len(low), [None, pa.py_buffer(limbs.astype("<u8"))])
    if -_SEQ_MAX < min(firsts) and max(f + 2 * c for f, c in zip(firsts, counts)) <= _SEQ_MAX:
        buf = b"".join([(f + 2 * j).to_bytes(16, "little", signed=True)
                        for f, c in zip(firsts, counts) for j in range(c)])
        return pa.Array.from_buffers(_SEQ_TYPE, sum(counts), [None, pa.py_buffer(buf)])
    # out of range: pyarrow decides
    return pa.array([f + 2 * j for f, c in zip(firsts, counts) for j in range(c)], type=_SEQ_TYPE)


def _encode_all(images: list[dict | None]) -> list[bytes | str | None]:
    """``_encode_utf8`` of every image (None stays None), orjson in one comprehension."""
    try:
        return [None if i is None else _orjson_dumps(i) for i in images]
    except _OrjsonError:
        return [None if i is None else _encode_utf8(i) for i in images]


_KEY_PREFIX: dict[str, str] = {}


def _key_prefix(column: str) -> str:
    """``{"column":`` as orjson writes it, remembered per column name."""
    prefix = _KEY_PREFIX[column] = "{" + _encode(column) + ":"
    return prefix


def _key_text(key_columns: Sequence[str], before: dict | None, after: dict | None, op: str) -> str:
    """``_encode(_key_of(...))``; a one-column key whose value is an int or a str is
    written directly (the same text orjson writes for the one-entry dict)."""
    if len(key_columns) == 1:
        k = key_columns[0]
        primary, other = (before, after) if op == OP_DELETE else (after, before)
        v = primary.get(k, _ABSENT)
        if v is _ABSENT:
            v = other.get(k) if other else None
        t = v.__class__
        if t is int or t is str:
            prefix = _KEY_PREFIX.get(k) or _key_prefix(k)
            if t is int:
                return prefix + str(v) + "}"
            try:
                return prefix + _orjson_dumps(v).decode() + "}"
            except _OrjsonError:
                pass
        return _encode({k: v})
    return _encode(_key_of(key_columns, before, after, op))


_ABSENT = object()


def _key_of(key_columns: Sequence[str], before: dict | None, after: dict | None, op: str) -> dict:
    """Key values from the new image (old one for deletes); a key column the
    image lacks (MINIMAL row image) is taken from the other image."""
    primary, other = (before, after) if op == OP_DELETE else (after, before)
    other = other or {}
    return {k: primary[k] if k in primary else other.get(k) for k in key_columns}
