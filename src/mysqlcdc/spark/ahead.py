"""Decode-ahead: a backlog's batches decoded in a process of their own (DESIGN.md decision 24).

On a local master, while Spark starts and while its read task writes one batch, a
process started by ``mysqlcdc run`` (``pipeline.ahead``) plans the next batches with the
source's own planner and decodes them, with the read task's own code, into spool files.
The query then *adopts* what was decoded ahead instead of planning and decoding it again.
This module is the ledger both sides share, a folder of files:

``state.json``
    the decode-ahead's process id, the key of the batch start it plans next, and
    ``over`` once it plans no more.
``<key>.json``
    one planned batch: its ``start`` and ``end`` offsets (as the query's planner would
    return them) and the fingerprint of its read task. ``key`` is the start's.
``<key>.part`` / ``<key>.arrow`` / ``<key>.failed``
    the batch's envelope record batches, an Arrow IPC stream, while it is written and once
    complete (renamed), or the mark that decoding failed. The read task follows the stream
    as it is written; when it ends unfinished, the task decodes the rest itself.
``<key>-<i>.part`` / ``<key>-<i>.arrow``, ``<key>.done``
    a batch decoded in ``slices`` parts at once (one process each): slice ``i`` > 0 of
    it, and the mark that every slice is complete and the batch's record written. The
    read task reads the slices in order: together they are the batch.
``<key>.taken``, ``<key>.used``
    the query adopted the batch; its read task read the spool (both kept until the
    pipeline stops, to count). ``diverged``: the query planned a batch itself; the
    decode-ahead stops.

Nothing here can change what a batch holds: the query adopts a batch only when its start
is the one the query stands at (and its end respects the query's own cap), and a read
task reads a spool only when the task the query planned has the fingerprint of the task
that was decoded. Any doubt, failure or missing file means the query plans and decodes
as it does without a decode-ahead.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa

__all__ = ["DEPTH", "OPTION", "Ledger", "fingerprint", "offset_key", "read_spool", "spool_path"]

log = logging.getLogger(__name__)

OPTION = "decodeAhead"      # the source option naming the ledger's folder
DEPTH = 2                   # batches decoded ahead and not yet adopted by the query
_POLL_S = 0.01
# A read task following a spool waits for the decode-ahead most of a run. Each look costs
# a wake-up (and, for the writer's liveness, a few file reads): looking every 5 ms cost a
# tenth of a core on this project's 2-core bench machine, CPU the decode-ahead itself
# needs. Waits start short and double up to _FOLLOW_MAX_S; liveness is looked at every
# _ALIVE_EVERY_S (docs/BENCHMARKS.md, "Less CPU beside the decode").
_FOLLOW_MIN_S = 0.001
_FOLLOW_MAX_S = 0.02
_ALIVE_EVERY_S = 0.25
_START_WAIT_S = 30.0        # how long the query waits for a decode-ahead still starting


def offset_key(offset: dict) -> str:
    """A file name for an offset (the same for equal offsets, after a JSON round trip)."""
    return hashlib.sha1(json.dumps(offset, sort_keys=True).encode()).hexdigest()[:24]


def fingerprint(task) -> str:
    """What decides the rows a read task yields: its range, rule, tables, options and the
    schema history it carries (not its replica id). Tasks with equal fingerprints yield the
    same batches."""
    rule = task.rule
    view = task.schema
    parts = [
        str(task.start), str(task.end), task.batch_rows, task.include_query,
        task.emit_rollbacks, task.tables.include, task.tables.exclude, task.tables.also,
        None if rule is None else (str(rule.cap), rule.events, str(rule.known), rule.record,
                                   str(rule.cut_from), str(rule.cut_to)),
        sorted((repr(k), repr(v)) for k, v in task.definitions.items()),
        repr(task.signals),            # a tap writes the signal rows it reads (idempotent)
        _ordered(getattr(task, "xa_open", {})),   # XA transactions it may read again
    ]
    digest = hashlib.sha1(repr(parts).encode())
    if view is not None:
        for name in ("versions", "quarantines", "resolutions", "batch_start", "catchup"):
            digest.update(repr(_ordered(getattr(view, name))).encode())
    return digest.hexdigest()


def _ordered(value):
    """``value`` with its dicts as key-sorted pairs: the same repr in every process (a
    pickle is not: it depends on which equal objects happen to be one object)."""
    if isinstance(value, dict):
        return sorted(((repr(k), _ordered(v)) for k, v in value.items()), key=lambda kv: kv[0])
    if isinstance(value, list):
        return [_ordered(v) for v in value]
    return value


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, killed and not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except FileNotFoundError:
        return False
    except (OSError, IndexError):
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


class Ledger:
    """The folder the decode-ahead and the query's planner share (see the module doc)."""

    def __init__(self, folder: str | os.PathLike) -> None:
        self.folder = Path(folder)

    # -- the decode-ahead's side ------------------------------------------------------
    def begin(self, pid: int) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        _write_json(self.folder / "state.json", {"pid": pid, "next": None, "over": False})

    def planning(self, start: dict) -> None:
        """The decode-ahead is planning the batch from ``start``."""
        state = _read_json(self.folder / "state.json") or {"pid": os.getpid()}
        _write_json(self.folder / "state.json", {**state, "next": offset_key(start)})

    def over(self, reason: str) -> None:
        state = _read_json(self.folder / "state.json") or {"pid": os.getpid()}
        _write_json(self.folder / "state.json", {**state, "over": True, "reason": reason})

    def plan(self, start: dict, end: dict, task_fingerprint: str, slices: int = 1) -> list[Path]:
        """Record the batch ``[start, end)``; returns where its spools go (one per slice)."""
        key = offset_key(start)
        entry = self.folder / f"{key}.json"
        _write_json(entry, {"start": start, "end": end, "task": task_fingerprint,
                            "slices": slices})
        return [spool_path(entry, i) for i in range(slices)]

    def complete(self, start: dict) -> None:
        """Every slice of the batch from ``start`` is written, and its record."""
        (self.folder / f"{offset_key(start)}.done").touch()

    def failed(self, start: dict) -> None:
        (self.folder / f"{offset_key(start)}.failed").touch()

    def untaken(self) -> int:
        return sum(1 for p in self.folder.glob("*.json")
                   if p.name != "state.json" and not p.with_suffix(".taken").exists())

    def counts(self) -> dict[str, int]:
        """Batches decoded ahead, adopted by the query, read from their spool, decoded
        in slices."""
        state = self._state() or {}
        return {"decoded": int(state.get("decoded", 0)),
                "adopted": sum(1 for _ in self.folder.glob("*.taken")),
                "read": sum(1 for _ in self.folder.glob("*.used")),
                "sliced": int(state.get("sliced", 0))}

    def decoded(self, start: dict, slices: int = 1, following: dict | None = None) -> None:
        """The batch from ``start`` is decoded; ``following``: the start of the batch the
        decode-ahead plans next, recorded now, before ``complete`` lets the read task
        finish. The query asks for that batch as soon as it commits this one; had the
        decode-ahead not said yet that it plans it, the query would plan it itself and
        the decode-ahead would stop (a race a loaded machine lost now and then)."""
        state = _read_json(self.folder / "state.json") or {"pid": os.getpid()}
        named = {} if following is None else {"next": offset_key(following)}
        _write_json(self.folder / "state.json",
                    {**state, "decoded": int(state.get("decoded", 0)) + 1,
                     "sliced": int(state.get("sliced", 0)) + (slices > 1), **named})

    def reason(self) -> str | None:
        """Why the decode-ahead stopped (None: it has not said)."""
        return (self._state() or {}).get("reason")

    def diverged(self) -> bool:
        return (self.folder / "diverged").exists()

    # -- the query's side -----------------------------------------------------------------
    def _state(self) -> dict | None:
        return _read_json(self.folder / "state.json")

    def active(self) -> bool:
        """The decode-ahead runs and plans more."""
        state = self._state()
        return bool(state) and not state.get("over") and _alive(int(state["pid"]))

    def adopt(self, start: dict, cap=None) -> dict | None:
        """The end of the batch decoded ahead from ``start`` (None: none; the query plans
        itself). While the decode-ahead is planning that very batch, waits for it. ``cap``:
        the query's own limit (``trigger(availableNow)``); a batch reaching past it is not
        adopted."""
        from mysqlcdc.capture import batchend
        from mysqlcdc.types import BinlogPosition

        key = offset_key(start)
        entry_path = self.folder / f"{key}.json"
        since = time.monotonic()
        while True:
            entry = _read_json(entry_path)
            if entry is not None:
                break
            state = self._state()
            starting = state is not None and state.get("next") is None and \
                time.monotonic() - since < _START_WAIT_S
            if not state or state.get("over") or not _alive(int(state["pid"])) or \
                    (state.get("next") != key and not starting):
                self._diverge()
                return None
            time.sleep(_POLL_S)
        end = entry["end"]
        if entry.get("start") != start or not batchend.pending(end):
            self._diverge()
            return None
        if cap is not None:
            upto = end["upto"]
            if BinlogPosition.of(upto["file"], int(upto["pos"])) > cap:
                self._diverge()
                return None
        (self.folder / f"{key}.taken").touch()
        return end

    def _diverge(self) -> None:
        if self.folder.is_dir():
            try:
                (self.folder / "diverged").touch()
            except OSError:
                pass

    def spool_for(self, start: dict, end: dict, task) -> str | None:
        """The ledger entry whose spool holds ``task``'s batches, if the batch from
        ``start`` to ``end`` was decoded ahead with that very task."""
        path = self.folder / f"{offset_key(start)}.json"
        entry = _read_json(path)
        if entry is None or entry.get("end") != end or entry.get("task") != fingerprint(task):
            return None
        return str(path)

    def retire(self, end: dict) -> None:
        """The batch ending at ``end`` is committed: its files go."""
        for path in list(self.folder.glob("*.json")):
            if path.name == "state.json":
                continue
            entry = _read_json(path)
            if entry is not None and entry.get("end") == end:
                files = [spool_path(path, i).with_suffix(suffix)
                         for i in range(int(entry.get("slices") or 1))
                         for suffix in (".arrow", ".part")]
                for file in [*files, *(path.with_suffix(s) for s in (".failed", ".done")),
                             path]:
                    try:
                        file.unlink()
                    except FileNotFoundError:
                        pass


def spool_path(entry: Path, index: int) -> Path:
    """Where slice ``index`` of the ledger entry ``entry`` is spooled (complete: ``.arrow``)."""
    return entry.with_name(f"{entry.stem}.arrow" if index == 0 else f"{entry.stem}-{index}.arrow")


def read_spool(entry: str, decode: Callable[[], Iterator[pa.RecordBatch]]
               ) -> Iterator[pa.RecordBatch]:
    """The batches decoded ahead for the ledger entry ``entry``, read while they are being
    written. When the decode-ahead fails or dies before the spool is complete, the rest
    comes from ``decode()`` (the read task's own decoding of the same task, which yields
    the same rows in the same order): its first rows, those already read, are skipped."""
    path = Path(entry)
    done = 0
    try:
        slices = int((_read_json(path) or {}).get("slices") or 1)
        for index in range(slices):
            spool = _open_spool(path, index)
            if spool is None:
                raise _Abandoned()
            try:
                follow = _Follow(spool, path, spool_path(path, index))
                for batch in pa.ipc.open_stream(pa.PythonFile(follow, mode="r")):
                    done += batch.num_rows
                    yield batch
            finally:
                spool.close()
        if slices > 1:
            _wait_complete(path)
    except _Abandoned:
        log.warning("the decode-ahead stopped inside batch %s: decoding the rest", path.stem)
    except (OSError, pa.ArrowInvalid) as exc:
        log.warning("decode-ahead spool of %s unreadable (%s): decoding the rest", path, exc)
    else:
        _touch(path.with_suffix(".used"))
        return
    for batch in decode():
        if done >= batch.num_rows:
            done -= batch.num_rows
            continue
        if done:
            batch, done = batch.slice(done), 0
        yield batch


class _Abandoned(Exception):
    """The decode-ahead will not finish the spool."""


def _gone(path: Path) -> bool:
    """The spool of ``path`` will not be completed: marked failed, or its writer is gone."""
    if path.with_suffix(".failed").exists():
        return True
    state = _read_json(path.with_name("state.json"))
    return not state or not _alive(int(state["pid"]))


class _Waiting:
    """How a read task waits for the decode-ahead: pauses that start short and grow while
    nothing comes, and the writer's liveness (``_gone``) looked at now and then."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.pause = _FOLLOW_MIN_S
        self.next_look = time.monotonic() + _ALIVE_EVERY_S

    def came(self) -> None:
        """Something came: the next wait starts short again."""
        self.pause = _FOLLOW_MIN_S

    def gone(self) -> bool:
        """``_gone(path)``, looked at no more often than every ``_ALIVE_EVERY_S``."""
        now = time.monotonic()
        if now < self.next_look:
            return False
        self.next_look = now + _ALIVE_EVERY_S
        return _gone(self.path)

    def wait(self) -> None:
        time.sleep(self.pause)
        self.pause = min(self.pause * 2, _FOLLOW_MAX_S)


def _open_spool(path: Path, index: int = 0):
    """Slice ``index``'s spool of entry ``path``, complete or being written (None: it
    never came)."""
    complete = spool_path(path, index)
    waiting = _Waiting(path)
    while True:
        for name in (complete, complete.with_suffix(".part")):
            try:
                return open(name, "rb", buffering=0)
            except FileNotFoundError:
                pass
        if waiting.gone():
            return None
        waiting.wait()


def _wait_complete(path: Path) -> None:
    """Until the batch of entry ``path`` was decoded in full, its record written (the
    query plans the next batch from that record)."""
    done = path.with_suffix(".done")
    waiting = _Waiting(path)
    while not done.exists():
        if waiting.gone() and not done.exists():
            raise _Abandoned()
        waiting.wait()


class _Follow:
    """A file being written, read as if it were complete: a read at its end waits for
    more until the writer renamed it complete (then the end is the end)."""

    def __init__(self, raw, path: Path, complete: Path) -> None:
        self.raw, self.path, self.closed = raw, path, False
        self._complete = complete
        self._waiting = _Waiting(path)

    def read(self, n: int = -1) -> bytes:
        parts, want = [], n
        while want != 0:
            chunk = self.raw.read(want if want > 0 else 1 << 20)
            if chunk:
                parts.append(chunk)
                want = want - len(chunk) if want > 0 else want
                self._waiting.came()
                continue
            if self._complete.exists():
                chunk = self.raw.read(want if want > 0 else 1 << 20)
                if not chunk:
                    break                  # the end of a complete spool
                parts.append(chunk)
                want = want - len(chunk) if want > 0 else want
                continue
            if self._waiting.gone() and not self._complete.exists():
                raise _Abandoned()
            self._waiting.wait()
        return b"".join(parts)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def tell(self) -> int:
        return self.raw.tell()

    def close(self) -> None:
        self.closed = True


def _touch(path: Path) -> None:
    try:
        path.touch()
    except OSError:
        pass
