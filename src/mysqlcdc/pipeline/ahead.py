"""The decode-ahead process of ``mysqlcdc run`` (DESIGN.md decision 24).

A new pipeline that starts from a position in the past has a backlog. While Spark's JVM
starts (seconds in which no batch can run) and then while the query's read task writes
one batch, this process plans the next batches with the source's own planner and decodes
them with the read task's own code into spool files (``spark.ahead``); the query adopts
them. Decoding and writing then overlap on two cores instead of taking turns in one
read task, and the first seconds of a run are no longer spent waiting for the JVM.

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
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

log = logging.getLogger(__name__)

__all__ = ["DecodeAhead", "main", "plan_ahead"]

ENV_SWITCH = "MYSQLCDC_DECODE_AHEAD"
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
        counts = Ledger(self.folder).counts() if proc is not None else {}
        if counts:
            log.info("decode-ahead of sink %d: %d batches decoded ahead, %d adopted by the "
                     "query, %d read from their spool", self.index, counts["decoded"],
                     counts["adopted"], counts["read"])
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
    if not _enabled() or history_folder is None or len(cfg.sinks) != 1:
        return None
    if not str(cfg.spark.master).startswith("local") or src.parallelism != 1:
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
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    ledger = Ledger(options[OPTION])
    try:
        reason = _run(options, ledger)
    except Exception as exc:   # noqa: BLE001 - the query does the work itself, as without us
        log.info("stopped: %s", exc)
        reason = f"error: {type(exc).__name__}: {exc}"
    ledger.over(reason)
    return 0


def _run(options: dict[str, str], ledger) -> str:
    from dataclasses import replace

    from mysqlcdc.capture import batchend
    from mysqlcdc.spark.ahead import DEPTH, fingerprint
    from mysqlcdc.spark.options import SourceOptions
    from mysqlcdc.spark.source import MysqlcdcStreamReader, RangePartition

    # every replication connection of this process (its planner's position lookups and
    # its decoding) uses the replica id a second sink would take (decode-ahead runs for
    # one sink only): never the query's or its read task's, which connect at the same time
    given = {k: v for k, v in options.items() if k not in ("decodeAhead", START)}
    server_id = int(given["serverId"]) + 1 + int(given.get("parallelism") or 1)
    parsed = SourceOptions.parse({**given, "serverId": str(server_id)})
    reader = MysqlcdcStreamReader(parsed)
    reader._runway_at = float("inf")       # the query keeps the runway record, not us
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
            spool = ledger.plan(start, end, fingerprint(task))
            log.debug("planned %s", spool.name)
            try:
                _decode(replace(task, server_id=server_id), spool, ledger)
            except BaseException:
                ledger.failed(start)
                raise
            ledger.decoded(start)
            found = batchend.read_found(task.rule.record)
            log.debug("decoded %s: cpu %.2f rows %s reason %s", spool.name, time.process_time(),
                      found and found.rows, found and found.reason)
            # at a DDL the next batch goes on past it (the planner applies it, as the
            # query's would, to the same append-only history); at the cap the backlog is read
            if found is None or found.reason not in ("events", "ddl"):
                return f"the backlog is read ({found.reason if found else 'no record'})"
            start = end
    finally:
        reader.stop()


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


if __name__ == "__main__":
    sys.exit(main())
