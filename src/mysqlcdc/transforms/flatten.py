"""``flatten``: each change of a table, with the rows it references embedded as they were
at that change's binlog position, without ever querying the source.

Configured as joins (``reservation.userid -> user.userid``). The transform keeps the
referenced tables' rows itself: every change of ``user`` (snapshot rows included) is
stored as a version at its ``seq`` (:mod:`mysqlcdc.transforms.state`). A change of
``reservation`` at seq S gets, in its ``before`` and ``after`` images, the user row's
newest version *before S*: what the database held at that point of the binlog. A user
row updated a moment after the reservation was inserted is a later version, so it
never leaks into the reservation's event, which a query back to the source (reading
the row's state at *processing* time) cannot promise.

It runs in the ordered stage: one task per micro-batch sees the rows in seq order.
Under a snapshot that runs while the tables are written, a referenced row's snapshot read
carries the read's high watermark as its seq, later than the stream's changes made while
the snapshot ran (which come after it, the stream held at the snapshot's start). A change
at seq S with no version of the row below S, only such a read above it, gets the row as
it was at S from what the batch holds: the before image of the row's first change after
S in the batch (before the read), else the read's image: exact unless the row changed
after S in a later micro-batch, before the read. A snapshot's own rows get the referenced
rows its reads of those tables found, in earlier batches or later in the same one (exact
for reads at the same high watermark).

With ``reemit``, a change of a referenced row also emits an update of each row of the
flattened table that points at it (before: flattened with the old referenced row,
after: with the new one), at the referenced change's position and seq.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa

from mysqlcdc.envelope.model import OP_READ, OP_TRUNCATE, ROW_OPS
from mysqlcdc.errors import ConfigError
from mysqlcdc.transforms.api import Transform, TransformContext
from mysqlcdc.transforms.batch import EventBatch
from mysqlcdc.transforms.state import VersionStore

__all__ = ["Flatten", "Join"]

_loads, _dumps = orjson.loads, orjson.dumps


@dataclass(frozen=True)
class Join:
    column: str          # in the flattened table
    table: str           # db.table referenced
    key: str             # column of the referenced table
    name: str            # field the referenced row is embedded as


class Flatten(Transform):
    kind = "flatten"
    ordered = True

    def __init__(self, table: str, joins: list[Join], reemit: bool = False,
                 keep_referenced: bool = True) -> None:
        self.table = table
        self.joins = list(joins)
        self.reemit = reemit
        self.keep_referenced = keep_referenced
        self._referenced = {j.table for j in self.joins}
        self._store: VersionStore | None = None
        self._rows: list[dict] = []
        self._ahead: dict | None = None

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.update(_store=None, _rows=[], _ahead=None)
        return state

    def state_file(self, state_dir: str) -> Path:
        return Path(state_dir) / f"flatten-{self.table}.sqlite"

    def open(self, ctx: TransformContext) -> None:
        if ctx.state_dir is None:
            raise ConfigError(f"{self.describe()} keeps its state in the sink's checkpoint "
                              "folder: spark.checkpoint must be a local path (or a mount every "
                              "executor sees)")
        self._store = VersionStore(self.state_file(ctx.state_dir))
        self._began = False

    def close(self, ctx: TransformContext) -> None:
        if self._store is not None:
            if self._began:
                self._store.commit()
            self._store.close()
            self._store = None

    def apply(self, events: EventBatch, ctx: TransformContext) -> EventBatch:
        rows = events.to_batch().to_pylist()
        if not rows:
            return events
        store = self._store
        if not self._began:
            store.begin(ctx.batch_id, int(rows[0]["seq"]))
            self._began = True
        self._rows, self._ahead = rows, None
        out: list[dict[str, Any]] = []
        for row in rows:
            name = f"{row['db']}.{row['table']}"
            if name in self._referenced:
                emitted = self._referenced_change(row, name)
                if self.keep_referenced:
                    out.append(row)
                out.extend(emitted)
            elif name == self.table and row["op"] in ROW_OPS:
                self._remember(row)
                out.append(self._flattened(row))
            else:
                out.append(row)
        self._rows, self._ahead = [], None
        schema = events.batch.schema
        return EventBatch(pa.RecordBatch.from_pylist(out, schema=schema))

    # --- referenced tables -----------------------------------------------------------

    def _referenced_change(self, row: dict, name: str) -> list[dict]:
        seq = int(row["seq"])
        if row["op"] == OP_TRUNCATE:
            self._store.truncate(name, seq)
            return []
        if row["op"] not in ROW_OPS:
            return []
        image = row["after"] if row["op"] != "d" else None
        source = _loads(row["after"] if image is not None else row["before"] or "null")
        for key in self._keys_of(name, source):
            self._store.put(name, key, seq, image, snapshot=row["op"] == OP_READ)
        return self._reemit(row, name, seq) if self.reemit else []

    # --- the flattened table ----------------------------------------------------------

    def _remember(self, row: dict) -> None:
        if not self.reemit or row["key"] is None:
            return
        seq, after = int(row["seq"]), row["after"] if row["op"] != "d" else None
        self._store.put(self.table, row["key"], seq, after)
        if after is not None:
            image = _loads(after)
            refs = [(i, _ref_key(image.get(j.column))) for i, j in enumerate(self.joins)]
            self._store.put_refs(self.table, row["key"], seq, refs)

    def _flattened(self, row: dict, below: int | None = None) -> dict:
        seq = int(row["seq"]) if below is None else below
        out = dict(row)
        for side in ("before", "after"):
            if row[side] is not None:
                out[side] = self._embed(row[side], seq)
        return out

    def _embed(self, text: str, below: int) -> str:
        image = _loads(text)
        for join in self.joins:
            value = image.get(join.column)
            ref = None if value is None else self._lookup(join.table, _ref_key(value), below)
            image[join.name] = None if ref is None else _loads(ref)
        return _dumps(image).decode()

    def _lookup(self, table: str, key: str, below: int) -> str | None:
        """The referenced row just before ``below``: its newest version there (after a
        delete or a truncate: none). When nothing is known below but a snapshot read it
        later (the module's note; the read may come later in this batch): the image before
        its first change in this batch between the two, else the read's image."""
        known, ref = self._store.known(table, key, below)
        if known:                   # a version, a delete or a truncate below: that is it
            return ref
        changes, reads = self._batch_ahead().get((table, key), ((), ()))
        read = self._store.read_after(table, key, below)
        for seq, image in reads:
            if seq > below and (read is None or seq < read[0]):
                read = (seq, image)
                break
        if read is None:
            return None
        for seq, before in changes:
            if below < seq < read[0]:
                return before
        return read[1]

    def _batch_ahead(self) -> dict:
        """The batch's rows of referenced tables: (table, key) -> ([(seq, the image before
        the change)] of its stream changes, [(seq, image)] of its snapshot reads), in seq
        order (built once per batch, when first needed)."""
        if self._ahead is None:
            ahead: dict = {}
            for row in self._rows:
                name = f"{row['db']}.{row['table']}"
                op = row["op"]
                if name not in self._referenced or op not in ROW_OPS:
                    continue
                source = _loads(row["before"] or row["after"] or "null")
                for key in self._keys_of(name, source):
                    changes, reads = ahead.setdefault((name, key), ([], []))
                    if op == OP_READ:
                        reads.append((int(row["seq"]), row["after"]))
                    else:
                        changes.append((int(row["seq"]), row["before"] if op != "c" else None))
            self._ahead = ahead
        return self._ahead

    def _keys_of(self, name: str, image: dict | None) -> list[str]:
        """The keys by which the joins on referenced table ``name`` find the row ``image``
        (each once: two joins on the same key column share it)."""
        if not image:
            return []
        return list(dict.fromkeys(_ref_key(image[join.key]) for join in self.joins
                                  if join.table == name and join.key in image))

    def _reemit(self, row: dict, name: str, seq: int) -> list[dict]:
        """Updates of every flattened row pointing at the referenced row that changes."""
        if row["op"] not in ("u", "d"):
            return []
        before = _loads(row["before"] or "null") or {}
        out = []
        for i, join in enumerate(self.joins):
            if join.table != name or join.key not in before:
                continue
            for key in self._store.pointing_at(self.table, i, _ref_key(before[join.key]), seq):
                image = self._store.get(self.table, key, seq)
                out.append(self._reemitted(row, key, image, seq))
        return out

    def _reemitted(self, cause: dict, key: str, image: str, seq: int) -> dict:
        """before: the row flattened as it was just before the referenced change;
        after: flattened with that change (stored already, so looked up below seq + 1)."""
        db, table = self.table.split(".", 1)
        event = dict(cause)
        event.update(op="u", db=db, table=table, key=key, moved_key=None, query=None,
                     before=self._embed(image, seq), after=self._embed(image, seq + 1),
                     seq=Decimal(seq))
        return event


def _ref_key(value: Any) -> str:
    """A referenced key's value as the store keys it (its JSON text)."""
    return _dumps(value).decode()
