"""The decode-ahead process of ``mysqlcdc run`` (DESIGN.md decision 24).

A new pipeline that starts from a position in the past has a backlog. While Spark's JVM
starts (seconds in which no batch can run) and then while the query's read task writes
one batch, this process plans the next batches with the source's own planner and decodes
them with the read task's own code into spool files (``spark.ahead``); the query adopts
them. Decoding and writing then overlap on two cores instead of taking turns in one
read task, and the first seconds of a run are no longer spent waiting for the JVM.
Where there are two cores it decodes each batch in two slices at once, the second in a
helper process; the slices, read one after the other, hold exactly the rows of the one
read task the query planned. A slice starts at an exact cut: a transaction the server
found about half way into the batch, with the number of events before it
(``RangePlanner.exact_cuts``); where there is none, and the batch's events are large
(wide rows), at a cut by bytes, passing over the batch's events before it without
decoding them.

It runs as ``python -m mysqlcdc.pipeline.ahead`` with the source's options on its
standard input (they hold the password), and stops by itself: when the backlog is read
(a batch ended at the server's position), when the query planned a batch itself, on an
error (the query then does the work as it always does), or when its parent is gone.
``MYSQLCDC_DECODE_AHEAD=0`` turns it off; ``MYSQLCDC_AHEAD_DEBUG=1`` makes it log each
batch and keeps the ledger's files after the run (their times show who waited for whom).
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

__all__ = ["DecodeAhead", "main", "plan_ahead"]

ENV_SWITCH = "MYSQLCDC_DECODE_AHEAD"
# Without exact cuts a batch is decoded in slices at once only when its events average
# this many bytes: such a slice passes over the events before it one by one, and the
# rows' conversion is what slicing spreads. Measured on two cores (docs/BENCHMARKS.md,
# "Decoding in slices"): wide rows (386 bytes per event) reached the changelog 1.10x
# sooner in two slices; narrow ones (77 bytes per event) were no faster and cost 1.2x
# the CPU. Exact cuts have no such walk and are taken for events of any size.
SLICE_EVENT_BYTES = 200
START = "aheadStart"          # the process's input: a resumed query's start offset
FOLDER = "ahead"              # inside the sink's schema-history folder


def _enabled() -> bool:
    return os.environ.get(ENV_SWITCH, "1").strip().lower() not in ("0", "false", "no", "off")


class DecodeAhead:
    """The decode-ahead of one sink's query: started once the schema history is made,
    stopped (its files removed) when the pipeline's queries have stopped."""

    def __init__(self, index: int, options: dict[str, str], folder: Path,
                 resume: dict | None = None) -> None:
        self.index, self.options, self.folder = index, options, folder
        self.resume = resume          # a resumed query's start offset (None: a new one)
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._stopped = False
        self.counts: dict[str, int] = {}

    def start(self) -> None:
        from mysqlcdc.spark.ahead import OPTION, Ledger

        with self._lock:
            if self._stopped or self._proc is not None:
                return
            shutil.rmtree(self.folder, ignore_errors=True)
            try:
                proc = subprocess.Popen([sys.executable, "-m", "mysqlcdc.pipeline.ahead"],
                                        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                        stderr=None, close_fds=True)
            except OSError as exc:
                log.info("decode-ahead not started: %s", exc)
                return
            Ledger(self.folder).begin(proc.pid)     # the query waits for it from now
            assert proc.stdin is not None
            try:
                proc.stdin.write(json.dumps({**self.options, OPTION: str(self.folder),
                                             START: self.resume}).encode())
                proc.stdin.close()
            except OSError as exc:
                log.info("decode-ahead not started: %s", exc)
            self._proc = proc

    def stop(self) -> dict[str, int]:
        """Stop the process, remove its files; returns what it did (``Ledger.counts``)."""
        from mysqlcdc.spark.ahead import Ledger

        with self._lock:
            self._stopped = True
            proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        ledger = Ledger(self.folder)
        counts = ledger.counts() if proc is not None else {}
        if counts:
            # why it stopped: "the backlog is read" is the whole backlog; "the query planned
            # a batch itself" means the query overtook it (the rest was decoded as without)
            reason = ledger.reason() or "stopped at the query's end"
            log.info("decode-ahead of sink %d: %d batches decoded ahead, %d adopted by the "
                     "query, %d read from their spool; %d decoded in slices at once; %s",
                     self.index, counts["decoded"], counts["adopted"], counts["read"],
                     counts["sliced"], reason)
        self.counts = counts
        if not os.environ.get("MYSQLCDC_AHEAD_DEBUG"):
            shutil.rmtree(self.folder, ignore_errors=True)
        return counts


def plan_ahead(cfg, history_folder: str | None, index: int,
               options: dict[str, str]) -> DecodeAhead | None:
    """The decode-ahead for sink ``index``, when it can help and cannot be wrong to try:
    one sink, a local master (the read tasks see the spool files), one read task per
    batch, no pending seek and no pause; and either a new pipeline (no checkpoint) that
    starts from a position in the past without a snapshot, or one resumed after a clean
    stop (its last planned batch committed: the query goes on from that batch's end)."""
    from mysqlcdc.capture.control import StreamControl
    from mysqlcdc.pipeline.runner import checkpoint_position, sink_checkpoint
    from mysqlcdc.spark.checkpoint import (committed_batches, local_dir, planned_batches,
                                           stored_offset)

    src = cfg.source
    if not _enabled() or history_folder is None or not cfg.may_decode_ahead():
        return None
    control = StreamControl(history_folder)
    if control.pending_seek() is not None or control.paused():
        return None
    checkpoint = sink_checkpoint(cfg, index)
    if checkpoint_position(checkpoint) is None:
        if src.snapshot_mode() != "never" or str(src.start) == "latest":
            return None
        return DecodeAhead(index, options, Path(history_folder) / FOLDER)
    local = local_dir(checkpoint)
    planned, committed = planned_batches(local), committed_batches(local)
    if not planned or not committed or planned[0] != committed[0]:
        return None                    # a batch to replay first: the query's alone
    start = stored_offset(local, planned[0])
    if start is None or "snapshot" in start or "seek" in start:
        return None
    return DecodeAhead(index, options, Path(history_folder) / FOLDER, start)


# -- the process ------------------------------------------------------------------------
def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(0)                      # the pipeline is gone: so is its decode-ahead


def main() -> int:
    from mysqlcdc.spark.ahead import OPTION, Ledger

    logging.basicConfig(level=logging.DEBUG if os.environ.get("MYSQLCDC_AHEAD_DEBUG") else
                        logging.WARNING, format="decode-ahead %(relativeCreated)d: %(message)s")
    options = json.loads(sys.stdin.read())
    # the slice helpers are forked now, before this process starts a thread: they begin
    # with the decoder imported (a spawned interpreter spent a third of a CPU second on
    # its imports, beside the decoding of the first batch)
    slices = _slices(_block(options))
    try:
        helpers = _Helpers(slices - 1) if slices > 1 else None
    except OSError as exc:
        log.info("no slice helper: %s", exc)
        helpers = None
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    ledger = Ledger(options[OPTION])
    try:
        reason = _run(options, ledger, helpers)
    except Exception as exc:   # noqa: BLE001 - the query does the work itself, as without us
        log.info("stopped: %s", exc)
        reason = f"error: {type(exc).__name__}: {exc}"
    finally:
        if helpers is not None:
            helpers.close()
    ledger.over(reason)
    return 0


def _block(options: dict[str, str]) -> int:
    """How many replica ids the decode-ahead may use (``PipelineConfig.replica_ids``)."""
    return 1 + int(options.get("parallelism") or 1)


def _run(options: dict[str, str], ledger, helpers: _Helpers | None) -> str:
    from dataclasses import replace

    from mysqlcdc.capture import batchend
    from mysqlcdc.spark.ahead import DEPTH, fingerprint
    from mysqlcdc.spark.options import SourceOptions
    from mysqlcdc.spark.source import MysqlcdcStreamReader, RangePartition

    # every replication connection of this process (its planner's position lookups and
    # its decoding) and of its slice helper uses an id of the block a second sink would
    # take (decode-ahead runs for one sink only; ``PipelineConfig.replica_ids``): never
    # the query's or its read task's, which connect at the same time
    given = {k: v for k, v in options.items() if k not in ("decodeAhead", START)}
    block = _block(given)
    server_id = int(given["serverId"]) + block
    parsed = SourceOptions.parse({**given, "serverId": str(server_id)})
    reader = MysqlcdcStreamReader(parsed)
    reader._runway_at = float("inf")       # the query keeps the runway record, not us
    reader._tables_checked = True          # and looks for a widened table filter
    slices = 1 if helpers is None else len(helpers.procs) + 1
    start = options.get(START) or reader.initialOffset()
    limit = reader.getDefaultReadLimit()
    try:
        while True:
            ledger.planning(start)
            if ledger.untaken() >= DEPTH:
                log.debug("waiting for the query")
            while ledger.untaken() >= DEPTH:
                if ledger.diverged():
                    return "the query planned a batch itself"
                time.sleep(0.02)
            if ledger.diverged():
                return "the query planned a batch itself"
            end = reader.latestOffset(start, limit)
            if end == start or "snapshot" in end or not batchend.pending(end):
                return "nothing more to read"
            parts = reader.partitions(start, end)
            if len(parts) != 1 or not isinstance(parts[0], RangePartition) or \
                    parts[0].task.rule is None:
                return "a batch of more than one read task"
            task = parts[0].task
            # exact cuts (the server counts the events before each) cost a slice no walk
            # over the batch before it, so they pay on events of any size; else cut by
            # bytes, where the walk is cheap beside decoding (large events)
            cuts = [] if slices == 1 else reader.planner.exact_cuts(end, slices) or \
                [(c, None) for c in reader.planner.cuts_of(end, slices, SLICE_EVENT_BYTES)]
            spools = ledger.plan(start, end, fingerprint(task), len(cuts) + 1)
            log.debug("planned %s in %d slices%s", spools[0].name, len(spools),
                      " (exact cuts)" if cuts and cuts[0][1] is not None else "")
            try:
                if cuts:
                    _decode_sliced(task, cuts, server_id, spools, ledger, helpers)
                else:
                    _decode(replace(task, server_id=server_id), spools[0], ledger)
            except BaseException:
                ledger.failed(start)
                raise
            found = batchend.read_found(task.rule.record)
            # at a DDL the next batch goes on past it (the planner applies it, as the
            # query's would, to the same append-only history); at the cap the backlog is read
            more = found is not None and found.reason in ("events", "ddl")
            ledger.decoded(start, len(spools), following=end if more else None)
            ledger.complete(start)
            log.debug("decoded %s: cpu %.2f rows %s reason %s", spools[0].name, time.process_time(),
                      found and found.rows, found and found.reason)
            if not more:
                return f"the backlog is read ({found.reason if found else 'no record'})"
            start = end
    finally:
        reader.stop()


def _slices(block: int) -> int:
    """Slices a batch is decoded in at once: one per core, at most ``block`` (the replica
    ids set aside for the decode-ahead); ``MYSQLCDC_AHEAD_SLICES`` sets fewer."""
    given = os.environ.get("MYSQLCDC_AHEAD_SLICES", "").strip()
    cores = len(os.sched_getaffinity(0))
    wanted = int(given) if given.isdigit() and int(given) > 0 else cores
    return max(1, min(wanted, block))


class _Helper:
    """One slice helper: a child process and the two pipes to it."""

    def __init__(self, pid: int, jobs, results) -> None:
        self.pid, self.jobs, self.results = pid, jobs, results


class _Helpers:
    """Processes that decode slices of a batch beside the decode-ahead: forked from it
    before it starts a thread, they exit when their job pipe closes or their parent is
    gone."""

    def __init__(self, count: int) -> None:
        from mysqlcdc.capture import task as _task  # noqa: F401 - what the helpers run
        from mysqlcdc.spark import ahead as _ahead  # noqa: F401

        self.procs: list[_Helper] = []
        for _ in range(count):
            jobs_r, jobs_w = os.pipe()
            results_r, results_w = os.pipe()
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
            pid = os.fork()
            if pid == 0:                                   # the helper
                code = 1
                try:
                    os.close(jobs_w)
                    os.close(results_r)
                    for other in self.procs:             # the earlier helpers' pipes
                        other.jobs.close()
                        other.results.close()
                    code = _helper(os.fdopen(jobs_r, "rb"), os.fdopen(results_w, "wb"))
                finally:
                    os._exit(code)
            os.close(jobs_r)
            os.close(results_w)
            self.procs.append(_Helper(pid, os.fdopen(jobs_w, "wb"), os.fdopen(results_r, "rb")))

    def submit(self, index: int, task, spool: Path, folder: Path) -> Callable[[], None]:
        """Helper ``index`` decodes ``task`` into ``spool``; returns the call that waits
        for it (and raises what went wrong)."""
        helper = self.procs[index]
        job = pickle.dumps((task, str(spool), str(folder)))
        helper.jobs.write(struct.pack("<I", len(job)) + job)
        helper.jobs.flush()

        def result() -> None:
            head = helper.results.read(4)
            if len(head) < 4:
                raise RuntimeError("the slice helper exited")
            message = helper.results.read(struct.unpack("<I", head)[0]).decode()
            if message:
                raise RuntimeError(f"a slice failed: {message}")
        return result

    def close(self) -> None:
        for helper in self.procs:
            try:
                helper.jobs.close()
            except OSError:
                pass
        deadline = time.monotonic() + 5
        for helper in self.procs:
            try:
                while os.waitpid(helper.pid, os.WNOHANG) == (0, 0):
                    if time.monotonic() > deadline:
                        os.kill(helper.pid, signal.SIGKILL)
                        os.waitpid(helper.pid, 0)
                        break
                    time.sleep(0.01)
            except ChildProcessError:
                pass                                     # reaped already
            helper.results.close()


def _helper(source, sink) -> int:
    """A slice helper: decodes the jobs ``source`` sends, answers each on ``sink`` with an
    empty message (done) or what failed."""
    from mysqlcdc.spark.ahead import Ledger

    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    while True:
        head = source.read(4)
        if len(head) < 4:
            return 0
        task, spool, folder = pickle.loads(source.read(struct.unpack("<I", head)[0]))
        try:
            _decode(task, Path(spool), Ledger(folder))
            message = b""
        except Exception as exc:   # noqa: BLE001 - the decode-ahead stops; the query decodes
            message = f"{type(exc).__name__}: {exc}".encode()
        sink.write(struct.pack("<I", len(message)) + message)
        sink.flush()


def _decode_sliced(task, cuts, server_id: int, spools: list[Path], ledger, helpers) -> None:
    """``task`` decoded as ``len(cuts) + 1`` slices at once (this process the first, the
    helpers the others), each into its spool; their records made the one ``task`` writes.
    ``cuts``: (position, events before it or None). A slice starts at an exact cut with
    the events before it counted by the server; at another cut it reads the events of the
    batch before it without decoding them. Either way the slices yield, one after the
    other, exactly the batches ``task`` yields."""
    from dataclasses import replace

    from mysqlcdc.capture import batchend

    edges = [(None, None), *cuts, (None, None)]
    records = [ledger.folder / f"{spools[0].stem}-{i}.found" for i in range(len(spools))]
    tasks = [replace(task, server_id=server_id + i,
                     rule=replace(task.rule, cut_from=edges[i][0], cut_events=edges[i][1],
                                  cut_to=edges[i + 1][0], record=str(records[i])))
             for i in range(len(spools))]
    waits = [helpers.submit(i, t, s, ledger.folder)
             for i, (t, s) in enumerate(zip(tasks[1:], spools[1:]))]
    _decode(tasks[0], spools[0], ledger)
    log.debug("slice 0 decoded")
    for wait in waits:
        wait()
    parts = [batchend.read_found(r) for r in records]
    if any(f is None for f in parts):
        raise RuntimeError("a slice wrote no record")
    log.debug("slices: %s", [(f.reason, f.rows, f.bytes) for f in parts])
    whole = batchend.combine(task.start, parts)
    if whole is None or not batchend.write_found(task.rule.record, whole):
        raise RuntimeError("the slices' records do not make the batch's")
    for record in records:
        record.unlink(missing_ok=True)


def _decode(task, spool: Path, ledger) -> None:
    """``task``'s batches into ``spool``: written as ``.part`` (the read task follows it),
    renamed when complete."""
    import pyarrow as pa

    from mysqlcdc.capture.task import read_range

    tmp = spool.with_suffix(".part")
    with pa.OSFile(str(tmp), "wb") as sink:
        writer = None
        for batch in read_range(task):
            if writer is None:
                writer = pa.ipc.new_stream(sink, batch.schema)
            writer.write_batch(batch)
            if ledger.diverged():
                raise RuntimeError("the query planned a batch itself")
        if writer is None:
            writer = pa.ipc.new_stream(sink, pa.schema([]))
        writer.close()
    os.replace(tmp, spool)


class _WithoutPandas:
    """An import finder that has no pandas. This process runs the decoder alone, which
    never uses pandas; but pyarrow imports it, when it is installed, at the first
    ``pa.array`` of a Python list (to ask whether the list is a pandas object): a quarter
    of a CPU second in each decode-ahead process, on the cores the decoding needs."""

    @staticmethod
    def find_spec(name: str, path=None, target=None):
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError("the decode-ahead process does without pandas", name=name)
        return None


if __name__ == "__main__":
    if "pandas" not in sys.modules:
        sys.meta_path.insert(0, _WithoutPandas())
    from mysqlcdc.process import exit_now

    exit_now(main())
