"""The schema history: every table's definition as versions keyed by binlog position.

The history is a log of records, append-only, one JSON object per line:

``bootstrap``   a table's definition read from ``information_schema`` at the position
                the pipeline started from (in force for events at or after it);
``change``      a DDL at a position changed a table (create, alter, rename, drop,
                truncate, reload); the new definition is in force for events *after* it;
``quarantine``  a table's history cannot be trusted after a position (a DDL the parser
                does not understand, or a TABLE_MAP that disagrees with the history):
                its rows after that position are held back, other tables flow;
``resolve``     a user's decision for a quarantined table (``reload`` its definition
                from the server, or ``skip`` it), written by ``mysqlcdc schema resolve``;
``planned``     the micro-batch start at which a resolution took effect, which is where
                the held-back rows of that table are re-read.

Records are keyed by position and deduplicated on load, so the driver may append
the same DDL again after a crash and a replayed micro-batch sees exactly the
versions it saw the first time: a lookup at a position never depends on how far
the history has grown past it.

Everything a read task needs travels in a :class:`SchemaView` (picklable).
"""

from __future__ import annotations

import fcntl
import json
import os
from bisect import bisect_right
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

from mysqlcdc.errors import ConfigError
from mysqlcdc.schema.model import TableDef
from mysqlcdc.types import BinlogPosition

__all__ = ["Change", "Quarantine", "Resolution", "SchemaHistory", "SchemaView", "HISTORY_FILE", "rekeys"]

HISTORY_FILE = "schema-history.jsonl"
Key = tuple[str, str]


def _pos_json(p: BinlogPosition | None) -> dict | None:
    return None if p is None else {"file": p.file, "pos": p.pos}


def _pos(d: dict | None) -> BinlogPosition | None:
    return None if d is None else BinlogPosition.of(d["file"], int(d["pos"]))


@dataclass(frozen=True)
class Change:
    """One version of one table. ``definition`` None: the table does not exist."""

    pos: BinlogPosition
    kind: str                  # bootstrap | create | alter | rename | drop | truncate | reload
    db: str
    table: str
    definition: TableDef | None
    ddl: str | None = None
    old: Key | None = None     # rename: the name before
    before: TableDef | None = None

    @property
    def key(self) -> Key:
        return (self.db, self.table)

    def sort_key(self) -> tuple[int, int, int]:
        # a bootstrap version covers events AT its position, a DDL only those after it
        return (self.pos.file_number, self.pos.pos, 0 if self.kind == "bootstrap" else 1)

    def to_json(self) -> dict:
        return {"type": "bootstrap" if self.kind == "bootstrap" else "change", "kind": self.kind,
                "pos": _pos_json(self.pos), "db": self.db, "table": self.table,
                "definition": None if self.definition is None else self.definition.to_json(),
                "before": None if self.before is None else self.before.to_json(),
                "ddl": self.ddl, "old": list(self.old) if self.old else None}

    @classmethod
    def from_json(cls, d: dict) -> "Change":
        return cls(_pos(d["pos"]), d["kind"], d["db"], d["table"],
                   None if d.get("definition") is None else TableDef.from_json(d["definition"]),
                   d.get("ddl"), tuple(d["old"]) if d.get("old") else None,
                   None if d.get("before") is None else TableDef.from_json(d["before"]))


def rekeys(change: Change) -> bool:
    """A DDL that changes the key texts of its table's rows (``TableDef.key_signature``):
    the same row is under one key before it and another after (DESIGN.md decision 33)."""
    return (change.kind == "alter" and change.before is not None
            and change.definition is not None
            and change.before.key_signature() != change.definition.key_signature())


@dataclass(frozen=True)
class Quarantine:
    """``db.table``'s rows from ``pos`` on are held back; ``since`` is the micro-batch
    start (a transaction boundary at or before ``pos``) to re-read them from."""

    db: str
    table: str
    pos: BinlogPosition
    since: BinlogPosition
    reason: str
    ddl: str | None = None

    @property
    def key(self) -> Key:
        return (self.db, self.table)

    def to_json(self) -> dict:
        return {"type": "quarantine", "db": self.db, "table": self.table,
                "pos": _pos_json(self.pos), "since": _pos_json(self.since),
                "reason": self.reason, "ddl": self.ddl}

    @classmethod
    def from_json(cls, d: dict) -> "Quarantine":
        return cls(d["db"], d["table"], _pos(d["pos"]), _pos(d["since"]), d["reason"],
                   d.get("ddl"))


@dataclass(frozen=True)
class Resolution:
    """What the user decided for the quarantine of ``db.table`` at ``pos``.

    ``planned`` is the micro-batch start from which it applies (set by the
    pipeline when it first plans a batch after the decision)."""

    db: str
    table: str
    pos: BinlogPosition
    action: str                      # reload | skip
    definition: TableDef | None = None
    planned: BinlogPosition | None = None

    @property
    def key(self) -> Key:
        return (self.db, self.table)


def _sort_key(p: BinlogPosition, tiebreak: int = 0) -> tuple[int, int, int]:
    return (p.file_number, p.pos, tiebreak)


@dataclass
class SchemaView:
    """The history as a read task needs it: definitions at positions, quarantines.

    ``batch_start`` decides which resolutions are in force (those planned at or
    before it). A catch-up task (``catchup`` set) re-reads one table's held-back
    rows: for that table it ignores the quarantine and emits only rows after it.
    """

    versions: dict[Key, list[Change]] = field(default_factory=dict)
    quarantines: dict[Key, list[Quarantine]] = field(default_factory=dict)
    resolutions: dict[Key, list[Resolution]] = field(default_factory=dict)
    batch_start: BinlogPosition | None = None
    catchup: Quarantine | None = None
    changes_by_pos: dict[tuple[str, int], list[Change]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._keys = {k: [c.sort_key() for c in v] for k, v in self.versions.items()}

    def __setstate__(self, state: dict) -> None:   # rebuild the lookup keys after pickling
        self.__dict__.update(state)
        self.__post_init__()

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_keys", None)
        return state

    def known(self, db: str, table: str) -> bool:
        return (db, table) in self.versions

    def definition(self, db: str, table: str, pos: BinlogPosition) -> TableDef | None:
        return self.definition_at((db, table), _sort_key(pos))

    def definition_at(self, key: Key, at: tuple[int, int, int]) -> TableDef | None:
        """The definition in force for an event at sort key ``at`` = (file number, pos, 0)."""
        versions = self.versions.get(key)
        if not versions:
            return None
        i = bisect_right(self._keys[key], at)
        return versions[i - 1].definition if i else None

    def held(self, db: str, table: str, pos: BinlogPosition) -> bool:
        return self.held_at((db, table), _sort_key(pos))

    def held_at(self, key: Key, at: tuple[int, int, int]) -> bool:
        """True if the table's rows at ``at`` are held back (quarantined, or skipped)."""
        qs = self.quarantines.get(key)
        if not qs:
            return False
        for q in qs:
            if at < _sort_key(q.pos):    # from the quarantine's own event on (a TABLE_MAP)
                continue
            if self.catchup is not None and self.catchup.key == key and self.catchup.pos == q.pos:
                continue
            res = self._resolution(q)
            if res is None or res.action == "skip":
                return True
        return False

    def before_catchup(self, at: tuple[int, int, int]) -> bool:
        """In a catch-up task: True for events before the quarantine (already emitted)."""
        return self.catchup is not None and at < _sort_key(self.catchup.pos)

    def _resolution(self, q: Quarantine) -> Resolution | None:
        for r in self.resolutions.get(q.key, ()):
            if r.pos == q.pos and r.planned is not None and self.batch_start is not None \
                    and _sort_key(r.planned) <= _sort_key(self.batch_start):
                return r
        return None

    def changes_at(self, file: str, pos: int) -> list[Change]:
        """The schema changes a DDL event at ``file:pos`` made (for change records)."""
        return self.changes_by_pos.get((file, pos), [])


class SchemaHistory:
    """The whole history, loaded from and appended to one JSON-lines file.

    ``path`` None keeps it in memory only (bounded batch reads, tests).
    """

    def __init__(self, path: str | os.PathLike | None = None) -> None:
        self.path = Path(path) / HISTORY_FILE if path is not None else None
        self.changes: dict[Key, list[Change]] = {}
        self.in_order: list[Change] = []        # every non-bootstrap change, as recorded
        self.quarantines: dict[Key, list[Quarantine]] = {}
        self.resolutions: dict[Key, list[Resolution]] = {}
        self._seen: set[str] = set()
        self._size = -1
        self._bootstrapped = False
        self._gen = 0
        self._view: SchemaView | None = None
        self._view_gen = -1
        if self.path is not None:
            self.reload()

    # -- persistence ---------------------------------------------------------
    @property
    def bootstrapped(self) -> bool:
        return self._bootstrapped

    def reload(self) -> None:
        """Re-read the file if it changed (``mysqlcdc schema resolve`` may have written)."""
        if self.path is None or not self.path.exists():
            return
        size = self.path.stat().st_size
        if size == self._size:
            return
        self.changes, self.quarantines, self.resolutions, self._seen = {}, {}, {}, set()
        self.in_order = []
        self._bootstrapped = False
        lines = self.path.read_text(encoding="utf-8").split("\n")
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                self._absorb(json.loads(line))
            except (ValueError, KeyError, TypeError) as e:
                if n == len(lines):
                    break   # the last line, cut short by a crash mid-append: never acknowledged
                raise ConfigError(f"schema history {self.path} line {n} is unreadable ({e})",
                                  hint="Restore the file from a backup, or remove the "
                                  "pipeline's checkpoint folder to start over.") from e
        self._size = size

    def _absorb(self, d: dict) -> bool:
        self._gen += 1
        kind = d["type"]
        ident = json.dumps(d, sort_keys=True) if kind != "planned" else None
        if ident is not None:
            if ident in self._seen:
                return False
            self._seen.add(ident)
        if kind in ("bootstrap", "change"):
            c = Change.from_json(d)
            if kind == "bootstrap":
                self._bootstrapped = True
                if c.table == "":
                    return True
            lst = self.changes.setdefault(c.key, [])
            lst.append(c)
            lst.sort(key=Change.sort_key)
            if kind == "change":
                self.in_order.append(c)
        elif kind == "quarantine":
            self.quarantines.setdefault((d["db"], d["table"]), []).append(Quarantine.from_json(d))
        elif kind == "resolve":
            r = Resolution(d["db"], d["table"], _pos(d["pos"]), d["action"],
                           None if d.get("definition") is None
                           else TableDef.from_json(d["definition"]))
            self.resolutions.setdefault(r.key, []).append(r)
        elif kind == "planned":
            key = (d["db"], d["table"])
            for i, r in enumerate(self.resolutions.get(key, [])):
                if r.pos == _pos(d["pos"]) and r.planned is None:
                    self.resolutions[key][i] = Resolution(r.db, r.table, r.pos, r.action,
                                                          r.definition, _pos(d["planned"]))
        return True

    def _append(self, records: Iterable[dict]) -> None:
        fresh = [r for r in records if self._absorb(r)]
        if not fresh or self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in fresh)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)      # the processes of a pipeline append in turn
            _cut_torn_tail(fd)
            data = memoryview(text.encode("utf-8"))
            while data:                         # a write may take less than it is given
                data = data[os.write(fd, data):]
            os.fsync(fd)
        finally:
            os.close(fd)
        self._size = self.path.stat().st_size

    # -- writing ---------------------------------------------------------------
    def bootstrap(self, at: BinlogPosition, tables: dict[Key, TableDef]) -> None:
        records = [Change(at, "bootstrap", db, t, d).to_json() for (db, t), d in sorted(tables.items())]
        # a marker, so an empty bootstrap (no tables yet) still counts as done
        records.append(Change(at, "bootstrap", "", "", None).to_json())
        self._append(records)

    def record(self, changes: Iterable[Change]) -> None:
        self._append(c.to_json() for c in changes)

    def quarantine(self, q: Quarantine) -> None:
        self._append([q.to_json()])

    def resolve(self, db: str, table: str, action: str, definition: TableDef | None) -> Quarantine:
        q = self.open_quarantine(db, table)
        if q is None:
            raise ConfigError(f"{db}.{table} is not quarantined; nothing to resolve")
        self._append([{"type": "resolve", "db": db, "table": table, "pos": _pos_json(q.pos),
                       "action": action,
                       "definition": None if definition is None else definition.to_json()}])
        return q

    def resolve_ahead(self, db: str, table: str, pos: BinlogPosition, action: str,
                      definition: TableDef | None) -> None:
        """Resolve the quarantine another sink's history holds at ``pos``, before this
        history's stream (behind that sink's) gets there: when it quarantines the table at
        ``pos``, the resolution is in force from its next micro-batch, as if written then."""
        self._append([{"type": "resolve", "db": db, "table": table, "pos": _pos_json(pos),
                       "action": action,
                       "definition": None if definition is None else definition.to_json()}])

    def has_quarantine(self, db: str, table: str, pos: BinlogPosition) -> bool:
        return any(q.pos == pos for q in self.quarantines.get((db, table), ()))

    def mark_planned(self, r: Resolution, at: BinlogPosition) -> None:
        self._append([{"type": "planned", "db": r.db, "table": r.table, "pos": _pos_json(r.pos),
                       "planned": _pos_json(at)}])

    # -- reading ---------------------------------------------------------------
    def definition(self, db: str, table: str, pos: BinlogPosition) -> TableDef | None:
        return self._cached_view().definition(db, table, pos)

    def _cached_view(self) -> SchemaView:
        if self._view is None or self._view_gen != self._gen:
            self._view, self._view_gen = self.view(), self._gen
        return self._view

    def skipped(self, db: str, table: str) -> bool:
        return any(r.action == "skip" for r in self._arrived((db, table)))

    def _arrived(self, key: Key) -> list[Resolution]:
        """The table's resolutions whose quarantine this history holds: one written ahead
        (:meth:`resolve_ahead`) waits until its stream gets to the quarantine."""
        rs = self.resolutions.get(key)
        if not rs:                  # the common case, asked at every TABLE_MAP the keeper checks
            return []
        held = {q.pos for q in self.quarantines.get(key, ())}
        return [r for r in rs if r.pos in held]

    def tables_at(self, pos: BinlogPosition) -> dict[Key, TableDef]:
        """Every table's definition in force after all changes at or before ``pos``."""
        out = {}
        for key, versions in self._cached_view().versions.items():
            current = None
            for c in versions:
                if c.sort_key() <= _sort_key(pos, 1):
                    current = c.definition
            if current is not None:
                out[key] = current
        return out

    def open_quarantine(self, db: str, table: str) -> Quarantine | None:
        """The table's latest quarantine that has no resolution yet."""
        for q in reversed(self.quarantines.get((db, table), [])):
            if not any(r.pos == q.pos for r in self.resolutions.get((db, table), ())):
                return q
            return None
        return None

    def is_quarantined(self, db: str, table: str) -> bool:
        return self.open_quarantine(db, table) is not None

    def unplanned(self) -> Iterator[Resolution]:
        for key in list(self.resolutions):
            yield from (r for r in self._arrived(key) if r.planned is None)

    def catchups(self, batch_start: BinlogPosition) -> list[tuple[Quarantine, Resolution]]:
        """Quarantines resolved by ``reload`` whose held-back rows are re-read in the
        micro-batch starting at ``batch_start``."""
        out = []
        for key, rs in self.resolutions.items():
            for r in rs:
                if r.action == "reload" and r.planned == batch_start:
                    q = next(q for q in self.quarantines[key] if q.pos == r.pos)
                    out.append((q, r))
        return out

    def view(self, include=None, batch_start: BinlogPosition | None = None,
             catchup: Quarantine | None = None) -> SchemaView:
        def keep(key: Key) -> bool:
            return include is None or include(*key)
        versions = {k: list(v) for k, v in self.changes.items() if keep(k)}
        # the changes of one statement in its order (a RENAME of several tables, which may
        # swap names, is applied name by name: decision 34)
        by_pos: dict[tuple[str, int], list[Change]] = {}
        for c in self.in_order:
            if keep(c.key):
                by_pos.setdefault((c.pos.file, c.pos.pos), []).append(c)
        # a resolution by reload is a version at the quarantine position; when a DDL was
        # quarantined there, it is that DDL's schema change too (a catch-up task reads the
        # DDL's event again and writes the record the quarantine kept back: a mirror
        # retypes its columns by it)
        for k, rs in self.resolutions.items():
            if keep(k):
                for r in rs:
                    if r.action == "reload" and r.planned is not None and r.definition is not None:
                        lst = versions.setdefault(k, [])
                        at = (r.pos.file_number, r.pos.pos, 1)
                        before = next((c.definition for c in reversed(lst) if c.sort_key() < at),
                                      None)
                        q = next((q for q in self.quarantines.get(k, ()) if q.pos == r.pos), None)
                        change = Change(r.pos, "reload", k[0], k[1], r.definition,
                                        q.ddl if q is not None else None, before=before)
                        lst.append(change)
                        lst.sort(key=Change.sort_key)
                        if change.ddl:
                            by_pos.setdefault((r.pos.file, r.pos.pos), []).append(change)
        return SchemaView(
            versions=versions,
            quarantines={k: list(v) for k, v in self.quarantines.items() if keep(k)},
            resolutions={k: list(v) for k, v in self.resolutions.items() if keep(k)},
            batch_start=batch_start, catchup=catchup, changes_by_pos=by_pos,
        )

    def timeline(self, db: str | None = None, table: str | None = None) -> list[dict]:
        """Every record about ``db.table`` (or every table), in binlog order, for the CLI."""
        rows = []
        for key, versions in self.changes.items():
            if (db, table) != (None, None) and key != (db, table):
                continue
            for c in versions:
                rows.append((c.sort_key(), {"what": c.kind, "table": f"{c.db}.{c.table}",
                                            "position": str(c.pos), "ddl": c.ddl,
                                            "columns": None if c.definition is None else
                                            [col.column_type or col.data_type
                                             for col in c.definition.columns],
                                            "names": None if c.definition is None else
                                            list(c.definition.column_names)}))
        for key, qs in self.quarantines.items():
            if (db, table) != (None, None) and key != (db, table):
                continue
            for q in qs:
                res = next((r for r in self.resolutions.get(key, ()) if r.pos == q.pos), None)
                rows.append((_sort_key(q.pos, 2), {
                    "what": "quarantine", "table": f"{q.db}.{q.table}", "position": str(q.pos),
                    "ddl": q.ddl, "reason": q.reason,
                    "resolved": None if res is None else res.action,
                    "from": None if res is None or res.planned is None else str(res.planned)}))
        rows.sort(key=lambda r: r[0])
        return [r for _, r in rows]


def _cut_torn_tail(fd: int) -> None:
    """Remove what a writer killed mid-append left after the file's last newline: a
    record never acknowledged (the reader passes over it as the last line), which the
    next append would otherwise glue to the front of its own, making that line
    unreadable for good."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return
    end, step = size, 1 << 16
    while end > 0:
        start = max(0, end - step)
        at = os.pread(fd, end - start, start).rfind(b"\n")
        if at >= 0:
            os.ftruncate(fd, start + at + 1)
            return
        end = start
    os.ftruncate(fd, 0)
