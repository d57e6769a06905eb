"""A pipeline config -> running Spark streaming queries, one per sink.

Each sink runs as its own streaming query with its own checkpoint folder
(``<checkpoint>/<index>-<type>``): Spark's checkpoint is the source of truth
for progress, so a sink that crashed resumes exactly where it committed.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Callable

from mysqlcdc.capture.server import preflight
from mysqlcdc.config.models import (ChangelogSinkConfig, ConsoleSinkConfig, KafkaSinkConfig,
                                    ChangelogTableSinkConfig, MirrorSinkConfig,
                                    PipelineConfig)
from mysqlcdc.errors import ConfigError, ServerIdInUseError
from mysqlcdc.protocol.connection import ConnectionSettings
from mysqlcdc.spark.checkpoint import latest_offset, local_dir
from mysqlcdc.types import BinlogPosition

__all__ = ["connection_settings", "source_options", "start_queries", "run_pipeline",
           "checkpoint_position", "sink_checkpoint", "checked_preflight", "schema_history_dir"]

log = logging.getLogger(__name__)


def connection_settings(cfg: PipelineConfig) -> ConnectionSettings:
    src = cfg.source
    return ConnectionSettings(
        src.host, port=src.port, user=src.user, password=src.password(),
        ssl=_ssl(cfg), connect_timeout=src.connect_timeout_s,
    )


def _ssl(cfg: PipelineConfig) -> dict | None:
    ssl = cfg.source.ssl
    if ssl is None:
        return None
    out: dict[str, Any] = {k: str(v) for k in ("ca", "cert", "key") if (v := getattr(ssl, k))}
    out["check_hostname"] = bool(ssl.verify_identity)
    out["verify_mode"] = bool(ssl.verify_cert or ssl.verify_identity)
    return out


def source_options(cfg: PipelineConfig, index: int = 0) -> dict[str, str]:
    """The Spark options of ``format("mysqlcdc")`` for sink ``index`` of this pipeline.

    Each sink's query is its own replica, so it registers with its own block of server ids
    (``source.sink_server_id``): two queries under one id would disconnect each other."""
    src = cfg.source
    opts = {
        "host": src.host, "port": str(src.port), "user": src.user, "password": src.password(),
        "serverId": str(src.sink_server_id(index)), "startingPosition": str(src.start),
        "include": ",".join(src.tables.include), "exclude": ",".join(src.tables.exclude),
        "maxEventsPerBatch": str(src.max_events_per_batch),
        "parallelism": str(src.parallelism),
        "connectTimeout": str(max(1, int(src.connect_timeout_s))),
        "reconnectAttempts": str(src.reconnect.attempts),
        "reconnectMaxDelay": str(max(1, int(src.reconnect.max_delay_s))),
        "schemaBootstrap": src.schema_bootstrap,
        "includeQuery": str(src.include_query).lower(),
    }
    ssl = _ssl(cfg) or {}
    for key in ("ca", "cert", "key"):
        if key in ssl:
            opts[f"ssl.{key}"] = ssl[key]
    if ssl:
        opts["ssl.verifyCert"] = str(ssl["verify_mode"]).lower()
        opts["ssl.verifyIdentity"] = str(ssl["check_hostname"]).lower()
    return opts


def sink_checkpoint(cfg: PipelineConfig, index: int) -> str:
    """``<checkpoint>/<index>-<type>``; kept a string so URIs (s3a://...) survive."""
    return f"{cfg.spark.checkpoint.rstrip('/')}/{index}-{cfg.sinks[index].type}"


def schema_history_dir(cfg: PipelineConfig, index: int) -> str | None:
    """Where sink ``index``'s query keeps its schema history: beside Spark's checkpoint
    files, so the two go (and are deleted) together. None for a remote checkpoint."""
    local = local_dir(sink_checkpoint(cfg, index))
    return None if local is None else str(Path(local).resolve() / "mysqlcdc-schema")


def checkpoint_position(checkpoint: str) -> BinlogPosition | None:
    """The source offset of the newest planned batch in a local Spark checkpoint, if any."""
    local = local_dir(checkpoint)
    return latest_offset(local) if local is not None else None   # remote: Spark reads it


def resume_position(cfg: PipelineConfig) -> BinlogPosition | None:
    """Where the pipeline will read from first: the oldest sink checkpoint, else the config."""
    found = [p for i in range(len(cfg.sinks)) if (p := checkpoint_position(sink_checkpoint(cfg, i)))]
    if found:
        return min(found)
    start = str(cfg.source.start)
    return None if start in ("earliest", "latest") else BinlogPosition.parse(start)


def checked_preflight(cfg: PipelineConfig, *, stale_wait_s: float = 20.0) -> None:
    """Preflight, tolerating our own previous run's registration for a while.

    After a crash (SIGKILL, power loss) the server keeps the dead reader's
    registration until its dump thread next writes (a heartbeat, every 5 s),
    so the server id looks taken for a few seconds. A live reader keeps it.
    """
    deadline = time.monotonic() + stale_wait_s
    while True:
        try:
            preflight(connection_settings(cfg),
                      server_id=cfg.source.server_ids(len(cfg.sinks)),
                      start=resume_position(cfg))
            return
        except ServerIdInUseError:
            if time.monotonic() >= deadline:
                raise
            log.info("server_id %s still registered; waiting for a stale registration to clear",
                     cfg.source.server_id)
            time.sleep(1.0)


def start_queries(spark, cfg: PipelineConfig) -> list:
    """Start one streaming query per sink; returns them in sink order."""
    from mysqlcdc.sinks.changelog import from_sink_config as changelog_settings, start_changelog
    from mysqlcdc.sinks.console import start_console

    queries = []
    for index, sink in enumerate(cfg.sinks):
        checkpoint = sink_checkpoint(cfg, index)
        options = source_options(cfg, index)
        history = schema_history_dir(cfg, index)
        if history is None:
            log.warning("checkpoint %s is not a local folder: the schema history of sink %d is "
                        "kept in memory and bootstrapped again at every start", checkpoint, index)
        else:
            options["schemaHistory"] = history
        df = spark.readStream.format("mysqlcdc").options(**options).load()
        name = f"{cfg.name}-{index}-{sink.type}"
        trigger = cfg.spark.trigger_interval
        if isinstance(sink, ChangelogSinkConfig):
            q = start_changelog(df, changelog_settings(sink, cfg.name, index),
                                checkpoint=checkpoint, trigger_interval=trigger, name=name)
        elif isinstance(sink, ConsoleSinkConfig):
            q = start_console(df, checkpoint=checkpoint, trigger_interval=trigger,
                              max_rows=sink.max_rows, truncate=sink.truncate, name=name)
        elif isinstance(sink, KafkaSinkConfig):
            from mysqlcdc.sinks.kafka import from_sink_config, start_kafka

            q = start_kafka(df, from_sink_config(sink, cfg.name), checkpoint=checkpoint,
                            trigger_interval=trigger, write_tasks=sink.write_tasks, name=name)
        elif isinstance(sink, MirrorSinkConfig):
            from mysqlcdc.sinks.mirror import from_sink_config as mirror_settings, start_mirror

            if history is None:
                raise ConfigError(f"sink {index} (mirror) needs a local spark.checkpoint: it "
                                  "reads table definitions from the schema history kept there")
            q = start_mirror(df, mirror_settings(sink, cfg.name, history), checkpoint=checkpoint,
                             trigger_interval=trigger, name=name)
        elif isinstance(sink, ChangelogTableSinkConfig):
            from mysqlcdc.sinks.changelog_table import (from_sink_config as table_settings,
                                                        start_changelog_table)

            if history is None:
                raise ConfigError(f"sink {index} (changelog_table) needs a local "
                                  "spark.checkpoint: it reads table definitions from the "
                                  "schema history kept there")
            q = start_changelog_table(df, table_settings(sink, cfg.name, history),
                                      checkpoint=checkpoint, trigger_interval=trigger, name=name)
        else:  # pragma: no cover - the config model admits only known sinks
            raise ConfigError(f"sink type {sink.type!r} is not supported by this version")
        queries.append(q)
    return queries


def run_pipeline(cfg: PipelineConfig, *, until_idle: bool = False,
                 on_progress: Callable[[dict], None] | None = None, spark=None,
                 resume_from_sink: bool = False) -> None:
    """Preflight, start every sink's query and run until stopped (or idle).

    ``resume_from_sink``: queries without a checkpoint start at the Kafka commit log's
    last position instead of ``source.start`` (see ``mysqlcdc.sinks.kafka.resume``).
    """
    from mysqlcdc.sinks.kafka.resume import resume_from_sink as sink_resume, wants_sink_resume
    from mysqlcdc.spark import build_session

    if resume_from_sink or wants_sink_resume(cfg):
        cfg = sink_resume(cfg)
    checked_preflight(cfg)
    spark = spark or build_session(cfg.spark.master, cfg.spark.app_name or cfg.name,
                                   dict(cfg.spark.conf))
    queries = start_queries(spark, cfg)
    try:
        if until_idle:
            for q in queries:
                q.processAllAvailable()
                _report(q, on_progress)
        else:
            _await(queries, on_progress)
    finally:
        for q in queries:
            if q.isActive:
                q.stop()
    for q in queries:
        if q.exception() is not None:
            raise q.exception()


def _await(queries: list, on_progress: Callable[[dict], None] | None) -> None:
    while all(q.isActive for q in queries):
        for q in queries:
            q.awaitTermination(1.0)
            _report(q, on_progress)


def _report(query, on_progress: Callable[[dict], None] | None) -> None:
    if on_progress is not None and query.lastProgress:
        on_progress(dict(query.lastProgress))
