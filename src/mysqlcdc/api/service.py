"""Several pipelines in one process: the registry behind ``mysqlcdc serve`` and its API.

Each pipeline is a YAML file in the service's config folder and, while running, the
group of streaming queries ``start_queries`` made for it in the shared SparkSession.
Pipelines are isolated: a query that fails stops only its own pipeline, whose named
error is kept (``error``/``error_code``) for the API. Progress comes from Spark's
``recentProgress`` of each query (its end offset carries the position, the GTID set and
the last commit time); bytes behind and the binlog runway from the server's binlog list;
rows and events per table and op from the read tasks' count files
(``spark.batches``). The last hour of lag and throughput is sampled for the dashboard.

States: ``stopped``, ``running``, ``paused`` (queries up, no new micro-batch),
``failed`` (stopped by an error, kept in ``error``/``error_code``).

A pipeline stopped through the API is *held*: a marker in the folder's ``.stopped/``
keeps it stopped when the service starts again (after a crash, a redeploy), until a
start through the API. The service's own shutdown holds nothing; a pause is kept with
the pipeline's checkpoint (``pipeline.control``), so ``mysqlcdc run`` honours it too.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from mysqlcdc.config.loader import load_pipeline
from mysqlcdc.config.models import PipelineConfig
from mysqlcdc.errors import ConfigError, MysqlcdcError, ServerIdInUseError

__all__ = ["PipelineService", "PipelineState", "UnknownPipelineError", "PipelineConflictError"]

log = logging.getLogger(__name__)

_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")


class UnknownPipelineError(MysqlcdcError):
    code = "PIPELINE_UNKNOWN"
    hint = "List the pipelines with GET /pipelines (or mysqlcdc status)."


class PipelineConflictError(MysqlcdcError):
    code = "PIPELINE_CONFLICT"
    hint = "Stop the pipeline first, or pick another name."


BATCH_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
_SAMPLES = 720            # one hour at the dashboard's 5 s resolution
_SAMPLE_EVERY_S = 5.0


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


@dataclass
class PipelineState:
    name: str
    path: Path
    config: PipelineConfig
    state: str = "stopped"                 # stopped | running | paused | failed
    queries: list = field(default_factory=list)
    error: str | None = None
    error_code: str | None = None
    started_at: float | None = None
    rows_total: int = 0
    batches_total: int = 0
    last_batch_s: float | None = None
    rows_per_s: float = 0.0
    lag_bytes: int | None = None
    lag_seconds: float | None = None
    position: str | None = None
    gtid: str | None = None
    last_ts: int | None = None              # commit time (ms) of the last transaction read
    runway: object | None = None            # pipeline.monitor.Runway
    runway_low: bool = False
    failures_total: int = 0
    heartbeat: object | None = None         # pipeline.heartbeat.Heartbeat
    seen_batches: dict = field(default_factory=dict)   # query id -> last batch counted
    # batch durations: counts per bucket of BATCH_BUCKETS (the last: +Inf), their sum
    duration_counts: list = field(default_factory=lambda: [0] * (len(BATCH_BUCKETS) + 1))
    duration_sum: float = 0.0
    samples: deque = field(default_factory=lambda: deque(maxlen=_SAMPLES))
    table_rates: dict = field(default_factory=dict)  # (db, table, op) -> (rows/s, events/s)
    _counts_seen: deque = field(default_factory=lambda: deque(maxlen=64))

    def observe_duration(self, seconds: float) -> None:
        index = next((i for i, bound in enumerate(BATCH_BUCKETS) if seconds <= bound),
                     len(BATCH_BUCKETS))
        self.duration_counts[index] += 1
        self.duration_sum += seconds

    def summary(self) -> dict:
        runway = self.runway
        return {
            "name": self.name, "state": self.state, "error": self.error,
            "error_code": self.error_code, "position": self.position, "gtid": self.gtid,
            "lag_bytes": self.lag_bytes, "lag_seconds": _round(self.lag_seconds),
            "rows_total": self.rows_total,
            "batches_total": self.batches_total, "rows_per_s": round(self.rows_per_s, 1),
            "last_batch_s": self.last_batch_s,
            "sinks": [s.type for s in self.config.sinks] if self.config else [],
            "uptime_s": round(time.time() - self.started_at, 1) if self.started_at else None,
            "snapshot": self.snapshot(),
            "binlog_runway_s": None if runway is None else _round(runway.seconds),
            "binlog_runway": None if runway is None else runway.basis,
            "runway_warning": self.runway_low,
            "heartbeats": None if self.heartbeat is None else self.heartbeat.beats,
        }

    def snapshot(self) -> dict | None:
        """The snapshot's progress (table, chunks done of the estimate, ETA), if one ran."""
        from mysqlcdc.pipeline.runner import schema_history_dir, snapshot_status

        if self.config is None:
            return None
        folders = [f for i in range(len(self.config.sinks))
                   if (f := schema_history_dir(self.config, i))]
        return snapshot_status(folders)


class PipelineService:
    """The pipelines of one config folder, run in one SparkSession."""

    def __init__(self, config_dir: Path, spark_factory, *, preflight: bool = True) -> None:
        self.config_dir = Path(config_dir)
        self.config_dir.mkdir(parents=True, exist_ok=True)
        self._spark_factory = spark_factory
        self._spark = None
        self._preflight = preflight
        self._lock = threading.RLock()
        self.pipelines: dict[str, PipelineState] = {}
        from mysqlcdc.pipeline.monitor import RunwayWarning

        self._runway_warning = RunwayWarning()

    # --- registry ------------------------------------------------------------

    @property
    def spark(self):
        if self._spark is None:
            self._spark = self._spark_factory()
        return self._spark

    def _hold_marker(self, name: str) -> Path:
        return self.config_dir / ".stopped" / name

    def held(self, name: str) -> bool:
        """Stopped through the API: stays stopped when the service starts again."""
        return self._hold_marker(name).exists()

    def _hold(self, name: str, held: bool) -> None:
        marker = self._hold_marker(name)
        if held:
            marker.parent.mkdir(exist_ok=True)
            marker.write_text("stopped through the API; POST /pipelines/NAME/start starts it\n")
        else:
            marker.unlink(missing_ok=True)

    def start_folder(self) -> tuple[list[str], dict[str, MysqlcdcError]]:
        """What ``mysqlcdc serve`` does at start: register the folder and start every
        pipeline that is not held. Returns the held names and the failures by name."""
        held, failed = [], {}
        for name in self.load_folder():
            if self.held(name):
                held.append(name)
                continue
            try:
                self.start(name)
            except MysqlcdcError as err:
                failed[name] = err
        return held, failed

    def load_folder(self) -> list[str]:
        """Register every ``*.yaml`` in the folder; a file that does not load is logged and
        registered as failed, so one broken file does not keep the others down."""
        names = []
        for path in sorted(self.config_dir.glob("*.yaml")):
            try:
                cfg = load_pipeline(path)
            except ConfigError as err:
                log.error("%s", err)
                name = path.stem
                self.pipelines[name] = PipelineState(name, path, None, state="failed",  # type: ignore[arg-type]
                                                     error=err.message, error_code=err.code)
                continue
            self.pipelines[cfg.name] = PipelineState(cfg.name, path, cfg)
            names.append(cfg.name)
        return names

    def reading(self):
        """The lock the poller folds each query's progress in with: a reader holding it
        sees a pipeline's rows, batches and position of the same moment (never a
        batch's rows counted before its position is)."""
        return self._lock

    def get(self, name: str) -> PipelineState:
        found = self.pipelines.get(name)
        if found is None:
            raise UnknownPipelineError(f"no pipeline named {name!r}")
        return found

    def create(self, text: str, *, start: bool = True) -> PipelineState:
        """A new pipeline from YAML (or JSON) text: validated like a file, then saved."""
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as err:
            raise ConfigError(f"the body is not YAML or JSON: {err}") from None
        name = data.get("name") if isinstance(data, dict) else None
        if not isinstance(name, str) or not _NAME.match(name):
            raise ConfigError("the pipeline needs a `name` of lowercase letters, digits, - and _")
        with self._lock:
            if name in self.pipelines:
                raise PipelineConflictError(f"a pipeline named {name!r} exists")
            path = self.config_dir / f"{name}.yaml"
            tmp = path.with_suffix(".yaml.tmp")
            tmp.write_text(text)
            try:
                cfg = load_pipeline(tmp)
            except ConfigError:
                tmp.unlink(missing_ok=True)
                raise
            tmp.replace(path)
            if not start:                  # created stopped: it stays so until started
                self._hold(name, True)
            state = self.pipelines[name] = PipelineState(name, path, load_pipeline(path))
            del cfg
        if start:
            self.start(name)
        return state

    def delete(self, name: str) -> None:
        with self._lock:
            state = self.get(name)
            self.stop(name)
            state.path.unlink(missing_ok=True)
            self._hold(name, False)
            del self.pipelines[name]

    # --- lifecycle -----------------------------------------------------------

    def start(self, name: str) -> PipelineState:
        from mysqlcdc.pipeline.control import is_paused
        from mysqlcdc.pipeline.failover import follow_failover
        from mysqlcdc.pipeline.runner import _start_heartbeat, checked_preflight, start_queries

        with self._lock:
            state = self.get(name)
            if state.config is None:
                raise ConfigError(state.error or f"pipeline {name} did not load")
            self._hold(name, False)        # asked to run: a restart of the service runs it
            if state.state in ("running", "paused"):
                return state
            state.error = state.error_code = None
            try:
                self._check_server_ids(state)
                follow_failover(state.config)
                if self._preflight:
                    checked_preflight(state.config, stale_wait_s=10.0)
                state.queries = start_queries(self.spark, state.config)
            except MysqlcdcError as err:
                state.state, state.error, state.error_code = "failed", err.message, err.code
                raise
            state.state = "paused" if is_paused(state.config) else "running"
            state.started_at = time.time()
            state.heartbeat = _start_heartbeat(state.config)
            log.info("pipeline %s started (%d queries)", name, len(state.queries))
            return state

    def pause(self, name: str) -> PipelineState:
        """Plan no new micro-batch (the one under way completes); the queries stay up."""
        from mysqlcdc.pipeline.control import set_paused

        with self._lock:
            state = self._loaded(name)
            set_paused(state.config, True)
            if state.state == "running":
                state.state = "paused"
            return state

    def resume(self, name: str) -> PipelineState:
        from mysqlcdc.pipeline.control import set_paused

        with self._lock:
            state = self._loaded(name)
            set_paused(state.config, False)
            if state.state == "paused":
                state.state = "running"
            return state

    def seek(self, name: str, to: str, confirm: str | None) -> dict:
        """Move a stopped pipeline to ``to`` (see ``pipeline.control.seek``)."""
        from mysqlcdc.pipeline.control import seek

        with self._lock:
            state = self._loaded(name)
            if state.state in ("running", "paused"):
                raise PipelineConflictError(f"pipeline {name} is {state.state}; stop it before "
                                            "a seek", hint="POST /pipelines/NAME/stop first.")
            plan = seek(state.config, to, confirm)
            state.position, state.lag_bytes, state.lag_seconds = plan.to, None, None
            log.warning("pipeline %s: seek to %s (%s) requested", name, plan.to, plan.direction)
            return plan.as_json()

    def request_snapshot(self, name: str, tables: list[str], where: str | None) -> dict:
        """Ask a pipeline for a backfill of ``tables`` (see ``pipeline.snapshot_admin``);
        its stream takes the request when it reaches the signal row, running or not."""
        from mysqlcdc.pipeline.snapshot_admin import request_snapshot

        state = self._loaded(name)
        req = request_snapshot(state.config, tables, where)
        log.warning("pipeline %s: snapshot of %s requested (signal %s)", name,
                    ", ".join(req.tables), req.id)
        return {"id": req.id, "tables": list(req.tables), "where": req.where,
                "signal_table": req.signal_table}

    def set_source(self, name: str, host: str, port: int) -> PipelineState:
        """Point a stopped pipeline at another server (a failover): its config file is
        rewritten; the next start follows the failover by the checkpoint's GTID set."""
        import yaml

        from mysqlcdc.config.loader import load_pipeline
        from mysqlcdc.pipeline.failover import follow_failover

        with self._lock:
            state = self._loaded(name)
            if state.state in ("running", "paused"):
                raise PipelineConflictError(f"pipeline {name} is {state.state}; stop it first",
                                            hint="POST /pipelines/NAME/stop first.")
            data = yaml.safe_load(state.path.read_text())
            data["source"]["host"], data["source"]["port"] = host, int(port)
            tmp = state.path.with_suffix(".yaml.tmp")
            tmp.write_text(yaml.safe_dump(data, sort_keys=False))
            try:
                follow_failover(load_pipeline(tmp))   # SOURCE_CHANGED etc. before the switch
            except MysqlcdcError:
                tmp.unlink(missing_ok=True)
                raise
            tmp.replace(state.path)
            state.config = load_pipeline(state.path)
            return state

    def _loaded(self, name: str) -> PipelineState:
        state = self.get(name)
        if state.config is None:
            raise ConfigError(state.error or f"pipeline {name} did not load")
        return state

    def _check_server_ids(self, state: PipelineState) -> None:
        """Two running pipelines of one source may not share a server id: the server would
        drop one's binlog stream whenever the other connects. Checked before Spark starts, so
        the error names both pipelines instead of surfacing later from a read task."""
        mine = state.config.source
        ids = set(state.config.replica_ids())
        for other in self.pipelines.values():
            if other is state or other.state != "running" or other.config is None:
                continue
            theirs = other.config.source
            if (theirs.host, theirs.port) != (mine.host, mine.port):
                continue
            shared = ids & set(other.config.replica_ids())
            if shared:
                raise ServerIdInUseError(
                    f"pipeline {state.name} would use server_id {min(shared)}, which running "
                    f"pipeline {other.name} uses (each pipeline takes source.server_id .. "
                    f"+sinks*(parallelism+1)-1, a one-sink pipeline on a local master "
                    f"with parallelism 1 two such blocks: give them ids further apart)")

    def stop(self, name: str, *, hold: bool = False) -> PipelineState:
        """Stop the pipeline's queries (its checkpoint is kept). ``hold`` (a stop through
        the API) keeps it stopped when the service starts again."""
        with self._lock:
            state = self.get(name)
            if hold:
                self._hold(name, True)
            if state.heartbeat is not None:
                state.heartbeat.stop()
                state.heartbeat = None
            for q in state.queries:
                try:
                    if q.isActive:
                        q.stop()
                except Exception as err:  # noqa: BLE001 - a stopping query may already be gone
                    log.warning("pipeline %s: stopping a query: %s", name, err)
            from mysqlcdc.pipeline.runner import queries_stopped

            if state.config is not None:
                queries_stopped(state.config, state.queries)
            state.queries = []
            if state.state in ("running", "paused"):
                state.state = "stopped"
            state.started_at = None
            return state

    def stop_all(self) -> None:
        for name in list(self.pipelines):
            self.stop(name)

    # --- observation -----------------------------------------------------------

    def poll(self) -> None:
        """Fold each running query's progress into its pipeline; a failed query fails
        (and stops) its pipeline only."""
        with self._lock:
            for state in self.pipelines.values():
                if state.state not in ("running", "paused"):
                    continue
                for q in state.queries:
                    self._progress(state, q)
                self._sample(state)
                failed = next((q for q in state.queries if not q.isActive and q.exception()),
                              None)
                if failed is not None:
                    err = _named(failed.exception())
                    self.stop(state.name)
                    state.state = "failed"
                    state.failures_total += 1
                    state.error, state.error_code = err
                    log.error("pipeline %s failed: [%s] %s", state.name, err[1], err[0])

    def _sample(self, state: PipelineState) -> None:
        """One dashboard sample every few seconds: rows/s over the interval, lag."""
        now = time.time()
        last = state.samples[-1] if state.samples else None
        if last is not None and now - last["t"] < _SAMPLE_EVERY_S:
            return
        rate = 0.0
        if last is not None and state.rows_total >= last["rows"]:
            rate = (state.rows_total - last["rows"]) / max(now - last["t"], 1e-3)
        state.samples.append({"t": now, "rows": state.rows_total, "rows_per_s": rate,
                              "lag_s": state.lag_seconds, "lag_bytes": state.lag_bytes})

    def _progress(self, state: PipelineState, query) -> None:
        try:
            progresses = query.recentProgress
        except Exception:  # noqa: BLE001 - a query being torn down
            return
        last_seen = state.seen_batches.get(query.id, -1)
        rates = []
        from mysqlcdc.spark.taskwrite import with_written_rows

        for p in progresses:
            raw = with_written_rows(_as_dict(p))
            batch = int(raw.get("batchId", -1))
            if batch <= last_seen:
                continue
            last_seen = batch
            rows = int(raw.get("numInputRows", 0) or 0)
            state.rows_total += rows
            state.batches_total += 1
            duration = (raw.get("durationMs") or {}).get("triggerExecution")
            if duration is not None:
                state.last_batch_s = duration / 1000
                state.observe_duration(duration / 1000)
            if rows:
                rates.append(float(raw.get("processedRowsPerSecond") or 0.0))
        state.seen_batches[query.id] = last_seen
        if rates:
            state.rows_per_s = rates[-1]
        sources = (_as_dict(progresses[-1]).get("sources") or []) if progresses else []
        if sources and sources[0].get("endOffset"):
            end = sources[0]["endOffset"]
            if isinstance(end, str):
                import json

                try:
                    end = json.loads(end)
                except ValueError:
                    end = {}
            if isinstance(end, dict) and "file" in end and query is state.queries[0]:
                end = _resolved(state.config, end)
                state.position = f"{end['file']}:{end['pos']}"
                state.gtid = end.get("gtid", state.gtid)
                state.last_ts = end.get("ts", state.last_ts)

    def refresh_lag(self) -> None:
        """Bytes and seconds behind, the binlog runway and per-table rates of each
        running pipeline, from the server's binlog list and the count files."""
        from mysqlcdc.capture.server import list_binlogs
        from mysqlcdc.config.fields import duration_seconds
        from mysqlcdc.pipeline.monitor import bytes_behind, pipeline_runway, seconds_behind
        from mysqlcdc.pipeline.runner import connection_settings
        from mysqlcdc.protocol.connection import connect_sql
        from mysqlcdc.types import BinlogPosition

        for state in list(self.pipelines.values()):
            if state.state not in ("running", "paused"):
                continue
            self._table_rates(state)
            try:
                conn = connect_sql(connection_settings(state.config))
                try:
                    logs = list_binlogs(conn)
                    state.runway = pipeline_runway(state.config, conn)
                finally:
                    conn.close()
            except MysqlcdcError as err:
                log.warning("pipeline %s: lag unknown: %s", state.name, err.message)
                continue
            if state.runway is not None:
                state.runway_low = self._runway_warning.check(
                    state.name, state.runway, duration_seconds(state.config.source.runway_warning))
            if state.position:
                state.lag_bytes = bytes_behind(logs, BinlogPosition.parse(state.position))
                state.lag_seconds = seconds_behind(state.last_ts, state.lag_bytes)

    def _table_rates(self, state: PipelineState) -> None:
        """Rows and events per second per (db, table, op) over the last minute."""
        now = time.time()
        counts = self.table_counts(state)
        seen = state._counts_seen
        seen.append((now, counts))
        while len(seen) > 2 and now - seen[1][0] >= 60:
            seen.popleft()
        then, old = seen[0]
        span = now - then
        if span <= 0:
            return
        state.table_rates = {key: ((rows - old.get(key, (0, 0))[0]) / span,
                                   (events - old.get(key, (0, 0))[1]) / span)
                             for key, (rows, events) in counts.items()}

    def table_counts(self, state: PipelineState) -> dict:
        """(rows, events) per (db, table, op) the first sink's read tasks counted."""
        from mysqlcdc.pipeline.runner import schema_history_dir
        from mysqlcdc.spark.batches import read_counts

        folder = schema_history_dir(state.config, 0) if state.config else None
        return {} if folder is None else read_counts(Path(folder) / "counts")

    def reconnects(self, state: PipelineState) -> int:
        from mysqlcdc.pipeline.runner import schema_history_dir, source_status

        folders = [f for i in range(len(state.config.sinks))
                   if (f := schema_history_dir(state.config, i))] if state.config else []
        return int((source_status(folders) or {}).get("reconnects", 0))

    def quarantines(self, state: PipelineState) -> list[dict]:
        """Every quarantine of the first sink's schema history (open or resolved)."""
        return [r for r in self.schema_history(state) if r["what"] == "quarantine"]

    def schema_history(self, state: PipelineState, table: str | None = None) -> list[dict]:
        from mysqlcdc.pipeline.schema_admin import table_timeline

        if state.config is None:
            return []
        try:
            return table_timeline(state.config, table)
        except ConfigError:
            return []                       # no history yet


def _resolved(cfg, end: dict) -> dict:
    """A query's end offset as a position: a pending one (its read tasks find where the
    batch ends) resolved from their record in the first sink's schema history."""
    from mysqlcdc.capture.batchend import pending, resolved_offset
    from mysqlcdc.pipeline.runner import schema_history_dir

    if cfg is None or not pending(end):
        return end
    return resolved_offset(end, schema_history_dir(cfg, 0))


def _as_dict(progress) -> dict:
    if isinstance(progress, dict):
        return progress
    try:
        import json

        return json.loads(progress.json)
    except Exception:  # noqa: BLE001
        return dict(progress)


def _named(exc) -> tuple[str, str]:
    """(message, code) of a query's exception: the mysqlcdc error inside it when there is
    one (its ``[CODE] message`` text survives Spark's wrapping), else its first line."""
    text = str(exc)
    found = re.search(r"\[([A-Z][A-Z0-9_]+)\] ([^\n]+)", text)
    if found and found.group(1) not in ("STREAM_FAILED", "PYTHON_EXCEPTION"):
        return found.group(2).strip(), found.group(1)
    first = next((line for line in text.splitlines() if line.strip()), "query failed")
    return first.strip()[:500], "QUERY_FAILED"
