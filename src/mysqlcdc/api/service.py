"""Several pipelines in one process: the registry behind ``mysqlcdc serve`` and its API.

Each pipeline is a YAML file in the service's config folder and, while running, the
group of streaming queries ``start_queries`` made for it in the shared SparkSession.
Pipelines are isolated: a query that fails stops only its own pipeline, whose named
error is kept (``error``/``error_code``) for the API. Progress comes from Spark's
``lastProgress`` of each query; the position from the pipeline's checkpoint; the lag
in bytes from the server's binlog list.
"""

from __future__ import annotations

import logging
import re
import threading
import time
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


@dataclass
class PipelineState:
    name: str
    path: Path
    config: PipelineConfig
    state: str = "stopped"                 # stopped | running | failed
    queries: list = field(default_factory=list)
    error: str | None = None
    error_code: str | None = None
    started_at: float | None = None
    rows_total: int = 0
    batches_total: int = 0
    last_batch_s: float | None = None
    rows_per_s: float = 0.0
    lag_bytes: int | None = None
    position: str | None = None
    seen_batches: dict = field(default_factory=dict)   # query id -> last batch counted

    def summary(self) -> dict:
        return {
            "name": self.name, "state": self.state, "error": self.error,
            "error_code": self.error_code, "position": self.position,
            "lag_bytes": self.lag_bytes, "rows_total": self.rows_total,
            "batches_total": self.batches_total, "rows_per_s": round(self.rows_per_s, 1),
            "last_batch_s": self.last_batch_s, "sinks": [s.type for s in self.config.sinks],
            "uptime_s": round(time.time() - self.started_at, 1) if self.started_at else None,
            "snapshot": self.snapshot(),
        }

    def snapshot(self) -> dict | None:
        """The snapshot's progress (table, chunks done of the estimate, ETA), if one ran."""
        from mysqlcdc.pipeline.runner import schema_history_dir, snapshot_status

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

    # --- registry ------------------------------------------------------------

    @property
    def spark(self):
        if self._spark is None:
            self._spark = self._spark_factory()
        return self._spark

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
            del self.pipelines[name]

    # --- lifecycle -----------------------------------------------------------

    def start(self, name: str) -> PipelineState:
        from mysqlcdc.pipeline.runner import checked_preflight, start_queries

        with self._lock:
            state = self.get(name)
            if state.config is None:
                raise ConfigError(state.error or f"pipeline {name} did not load")
            if state.state == "running":
                return state
            state.error = state.error_code = None
            try:
                self._check_server_ids(state)
                if self._preflight:
                    checked_preflight(state.config, stale_wait_s=10.0)
                state.queries = start_queries(self.spark, state.config)
            except MysqlcdcError as err:
                state.state, state.error, state.error_code = "failed", err.message, err.code
                raise
            state.state, state.started_at = "running", time.time()
            log.info("pipeline %s started (%d queries)", name, len(state.queries))
            return state

    def _check_server_ids(self, state: PipelineState) -> None:
        """Two running pipelines of one source may not share a server id: the server would
        drop one's binlog stream whenever the other connects. Checked before Spark starts, so
        the error names both pipelines instead of surfacing later from a read task."""
        mine = state.config.source
        ids = set(mine.server_ids(len(state.config.sinks)))
        for other in self.pipelines.values():
            if other is state or other.state != "running" or other.config is None:
                continue
            theirs = other.config.source
            if (theirs.host, theirs.port) != (mine.host, mine.port):
                continue
            shared = ids & set(theirs.server_ids(len(other.config.sinks)))
            if shared:
                raise ServerIdInUseError(
                    f"pipeline {state.name} would use server_id {min(shared)}, which running "
                    f"pipeline {other.name} uses (each pipeline takes source.server_id .. "
                    f"+sinks*(parallelism+1)-1)")

    def stop(self, name: str) -> PipelineState:
        with self._lock:
            state = self.get(name)
            for q in state.queries:
                try:
                    if q.isActive:
                        q.stop()
                except Exception as err:  # noqa: BLE001 - a stopping query may already be gone
                    log.warning("pipeline %s: stopping a query: %s", name, err)
            state.queries = []
            if state.state == "running":
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
                if state.state != "running":
                    continue
                for q in state.queries:
                    self._progress(state, q)
                failed = next((q for q in state.queries if not q.isActive and q.exception()),
                              None)
                if failed is not None:
                    err = _named(failed.exception())
                    self.stop(state.name)
                    state.state = "failed"
                    state.error, state.error_code = err
                    log.error("pipeline %s failed: [%s] %s", state.name, err[1], err[0])

    def _progress(self, state: PipelineState, query) -> None:
        try:
            progresses = query.recentProgress
        except Exception:  # noqa: BLE001 - a query being torn down
            return
        last_seen = state.seen_batches.get(query.id, -1)
        rates = []
        for p in progresses:
            raw = _as_dict(p)
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
            if isinstance(end, dict) and "file" in end:
                state.position = f"{end['file']}:{end['pos']}"

    def refresh_lag(self) -> None:
        """Bytes between each running pipeline's position and the server's end."""
        from mysqlcdc.capture.server import list_binlogs
        from mysqlcdc.pipeline.runner import connection_settings
        from mysqlcdc.protocol.connection import connect_sql

        for state in list(self.pipelines.values()):
            if state.state != "running" or not state.position:
                continue
            try:
                conn = connect_sql(connection_settings(state.config))
                try:
                    logs = list_binlogs(conn)
                finally:
                    conn.close()
            except MysqlcdcError as err:
                log.warning("pipeline %s: lag unknown: %s", state.name, err.message)
                continue
            file, pos = state.position.rsplit(":", 1)
            behind, counting = 0, False
            for name, size in logs:
                if name == file:
                    behind, counting = max(0, size - int(pos)), True
                elif counting:
                    behind += size
            state.lag_bytes = behind if counting else None


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
