"""A pipeline config -> running Spark streaming queries, one per sink.

Each sink runs as its own streaming query with its own checkpoint folder
(``<checkpoint>/<index>-<type>``): Spark's checkpoint is the source of truth
for progress, so a sink that crashed resumes exactly where it committed.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

from mysqlcdc.capture.server import preflight
from mysqlcdc.config.models import (ChangelogSinkConfig, ConsoleSinkConfig, KafkaSinkConfig,
                                    ChangelogTableSinkConfig, MirrorSinkConfig,
                                    PipelineConfig, PluginsSinkConfig)
from mysqlcdc.errors import (BinlogPurgedError, ConfigError, MysqlcdcError, ServerIdInUseError,
                             ServerUnreachableError, from_text, storage_failure)
from mysqlcdc.protocol.connection import ConnectionSettings
from mysqlcdc.spark.checkpoint import HISTORY_DIR, latest_offset, local_dir
from mysqlcdc.types import BinlogPosition

__all__ = ["connection_settings", "source_options", "start_queries", "run_pipeline",
           "checkpoint_position", "sink_checkpoint", "checked_preflight", "schema_history_dir",
           "retry_policy", "checkpointed_position", "snapshot_status", "writes_in_tasks",
           "jit_mode", "history_ahead", "interrupt"]

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
        "include": ",".join(src.tables.include),
        # the heartbeat table moves the binlog; its rows are never captured
        "exclude": ",".join([*src.tables.exclude, *([src.heartbeat.table] if src.heartbeat else [])]),
        "maxEventsPerBatch": str(src.events_per_batch(writes_in_tasks(cfg, index))),
        "parallelism": str(src.parallelism),
        "connectTimeout": str(max(1, int(src.connect_timeout_s))),
        "reconnectMaxWait": str(src.reconnect.max_wait_s),
        "reconnectInitialDelay": str(src.reconnect.initial_delay_s),
        "reconnectMaxDelay": str(src.reconnect.max_delay_s),
        "schemaBootstrap": src.schema_bootstrap,
        "includeQuery": str(src.include_query).lower(),
        "snapshotMode": src.snapshot_mode(),
        "snapshotChunkRows": str(src.snapshot.chunk_rows),
        "pipelineName": cfg.name,
    }
    snap = src.snapshot
    if snap.chunks_per_batch is not None:
        opts["snapshotChunksPerBatch"] = str(snap.chunks_per_batch)
    if snap.chunk_keys:
        import json

        opts["snapshotChunkKeys"] = json.dumps(snap.chunk_keys)
    if snap.query_timeout_s is not None:
        opts["snapshotQueryTimeout"] = str(snap.query_timeout_s)
    if snap.signal_table is not None:
        opts["signalTable"] = snap.signal_table
    if src.reconnect.attempts is not None:
        opts["reconnectAttempts"] = str(src.reconnect.attempts)
    ssl = _ssl(cfg) or {}
    for key in ("ca", "cert", "key"):
        if key in ssl:
            opts[f"ssl.{key}"] = ssl[key]
    if ssl:
        opts["ssl.verifyCert"] = str(ssl["verify_mode"]).lower()
        opts["ssl.verifyIdentity"] = str(ssl["check_hostname"]).lower()
    return opts


def writes_in_tasks(cfg: PipelineConfig, index: int) -> bool:
    """Whether the source's read tasks write sink ``index``'s changes themselves (DESIGN.md
    decision 20), so that none of its rows reach the JVM: a changelog on a local path, or
    Kafka read by one task per batch, with no ordered transform (``flatten``) before it.
    Memory is then bounded by the writers' buffers whatever a batch holds."""
    sink = cfg.sinks[index]
    if isinstance(sink, ChangelogSinkConfig):
        from mysqlcdc.sinks.changelog import from_sink_config, task_writer

        if task_writer(from_sink_config(sink, cfg.name, index)) is None:
            return False
    elif not isinstance(sink, KafkaSinkConfig) or cfg.source.parallelism > 1:
        return False       # parallel slices share keys: their messages meet in the JVM
    if not cfg.transforms and not sink.transforms:
        return True
    from mysqlcdc.pipeline.transforms import has_ordered

    return not has_ordered(cfg, index)


def history_ahead(cfg: PipelineConfig,
                  on_ready: Callable[[], None] | None = None) -> Callable[[], None]:
    """Start making the schema history of every sink that begins at a fixed position
    with none yet (a new pipeline whose ``source.start`` is ``earliest``, ``FILE:POS``, a
    GTID set or a time, without a snapshot), on a thread, so that its DDL walk runs while
    Spark starts instead of in the first batch (DESIGN.md decision 23). Returns the call
    that waits for it: it raises the walk's named verdict on the binlog
    (SCHEMA_BOOTSTRAP_UNSAFE); any other failure is left to the stream, which makes the
    history as before, through its retries. ``on_ready`` is called (on the thread) once
    every history is made."""
    from mysqlcdc.capture.control import StreamControl
    from mysqlcdc.errors import SchemaBootstrapError

    spec = str(cfg.source.start)
    if cfg.source.snapshot_mode() != "never" or spec == "latest":
        return lambda: None
    folders = []
    for i in range(len(cfg.sinks)):
        folder = schema_history_dir(cfg, i)
        if folder is not None and StreamControl(folder).pending_seek() is None and \
                checkpoint_position(sink_checkpoint(cfg, i)) is None:
            folders.append((i, folder))
    if not folders:
        return lambda: None
    failed: list[BaseException] = []

    def walk() -> None:
        import os

        from mysqlcdc.capture.planner import RangePlanner
        from mysqlcdc.spark.options import SourceOptions

        try:      # this thread only (Linux): the JVM's start keeps the cores it wants
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
        except (AttributeError, OSError):
            pass

        for i, folder in folders:
            planner = RangePlanner(SourceOptions.parse({**source_options(cfg, i),
                                                        "schemaHistory": folder}))
            try:
                planner.bootstrap_history(spec)
            except SchemaBootstrapError as exc:
                failed.append(exc)
                return
            except Exception as exc:   # noqa: BLE001 - the stream does it again, named
                log.info("schema history ahead of the stream: %s; the stream makes it", exc)
                return
            finally:
                planner.close()
        if on_ready is not None:
            on_ready()

    thread = threading.Thread(target=walk, name="schema-history-ahead", daemon=True)
    thread.start()

    def wait() -> None:
        thread.join()
        if failed:
            raise failed[0]
    return wait


def query_options(cfg: PipelineConfig, index: int) -> dict[str, str]:
    """The source options of sink ``index``'s query as ``start_queries`` gives them: the
    pipeline's (``source_options``) with the sink's schema history and rollbacks."""
    options = source_options(cfg, index)
    history = schema_history_dir(cfg, index)
    if history is not None:
        options["schemaHistory"] = history
    if isinstance(cfg.sinks[index], PluginsSinkConfig):
        options["emitRollbacks"] = "true"
    first = referenced_tables(cfg, index)
    if first:
        options["snapshotFirst"] = ",".join(first)
    return options


def referenced_tables(cfg: PipelineConfig, index: int) -> list[str]:
    """The tables sink ``index``'s ``flatten`` transforms reference, in their order: its
    query's initial snapshot reads them first, so that a flattened row finds the rows it
    points at already read (transforms.flatten)."""
    from mysqlcdc.config.transforms import FlattenConfig

    out: list[str] = []
    for t in list(cfg.transforms) + list(cfg.sinks[index].transforms):
        if isinstance(t, FlattenConfig):
            for join in t.joins:
                if str(join.table) not in out:
                    out.append(str(join.table))
    return out


def _decode_ahead(cfg: PipelineConfig) -> dict:
    """The decode-ahead of each sink that gets one (``pipeline.ahead``), not yet started."""
    from mysqlcdc.pipeline.ahead import plan_ahead

    out = {}
    for i in range(len(cfg.sinks)):
        ahead = plan_ahead(cfg, schema_history_dir(cfg, i), i, query_options(cfg, i))
        if ahead is not None:
            out[i] = ahead
    return out


def jit_mode(cfg: PipelineConfig) -> str:
    """The JVM's compilers for this pipeline (``spark.session.JIT_MODES``, DESIGN.md decision
    22): ``quick`` when no sink's rows reach the JVM, else ``full``."""
    return "quick" if all(writes_in_tasks(cfg, i) for i in range(len(cfg.sinks))) else "full"


def retry_policy(cfg: PipelineConfig):
    """``source.reconnect`` as the retry loop reads it (``protocol.retry``)."""
    from mysqlcdc.protocol.retry import RetryPolicy

    r = cfg.source.reconnect
    return RetryPolicy(attempts=r.attempts, initial_delay=r.initial_delay_s,
                       max_delay=r.max_delay_s, max_wait=r.max_wait_s)


def sink_checkpoint(cfg: PipelineConfig, index: int) -> str:
    """``<checkpoint>/<index>-<type>``; kept a string so URIs (s3a://...) survive."""
    return f"{cfg.spark.checkpoint.rstrip('/')}/{index}-{cfg.sinks[index].type}"


def schema_history_dir(cfg: PipelineConfig, index: int) -> str | None:
    """Where sink ``index``'s query keeps its schema history: beside Spark's checkpoint
    files, so the two go (and are deleted) together. None for a remote checkpoint."""
    local = local_dir(sink_checkpoint(cfg, index))
    return None if local is None else str(Path(local).resolve() / HISTORY_DIR)


def checkpoint_position(checkpoint: str) -> BinlogPosition | None:
    """The source offset of the newest planned batch in a local Spark checkpoint, if any."""
    local = local_dir(checkpoint)
    return latest_offset(local) if local is not None else None   # remote: Spark reads it


def checkpointed_position(cfg: PipelineConfig) -> BinlogPosition | None:
    """The oldest position a sink's checkpoint stands at (None: no checkpoint yet); a
    pending seek (or followed failover) counts as where it stands."""
    from mysqlcdc.capture.control import StreamControl

    found = []
    for i in range(len(cfg.sinks)):
        folder = schema_history_dir(cfg, i)
        seek = StreamControl(folder).pending_seek() if folder is not None else None
        at = seek.position if seek is not None else checkpoint_position(sink_checkpoint(cfg, i))
        if at is not None:
            found.append(at)
    return min(found) if found else None


def resume_position(cfg: PipelineConfig) -> BinlogPosition | None:
    """Where the pipeline will read from first: the oldest sink checkpoint, else the config."""
    found = checkpointed_position(cfg)
    if found is not None:
        return found
    start = cfg.source.start
    return start if isinstance(start, BinlogPosition) else None   # others: resolved later


def checked_preflight(cfg: PipelineConfig, *, stale_wait_s: float = 20.0) -> None:
    """Preflight, tolerating our own previous run's registration for a while.

    After a stop, clean or not (SIGKILL, power loss), the server keeps a reader's
    registration until its dump thread next writes (a heartbeat, every second,
    see :class:`~mysqlcdc.protocol.stream.ReplicationStream`), so the server id
    looks taken for a second or two. A live reader keeps it.
    """
    from mysqlcdc.protocol import retry

    deadline = time.monotonic() + stale_wait_s
    settings = connection_settings(cfg)
    while True:
        try:
            resuming = checkpointed_position(cfg) is not None

            def check():
                return preflight(settings, server_id=cfg.replica_ids(),
                                 start=resume_position(cfg), resuming=resuming,
                                 include=tuple(cfg.source.tables.include),
                                 exclude=tuple(cfg.source.tables.exclude))
            # A pipeline with a checkpoint waits through an outage like a running one (a
            # host rebooting with its database). One that never ran has nothing to resume:
            # an unreachable source there is far more often a wrong host or port, so it
            # says so at once.
            try:
                if resuming:
                    info = retry.call(check, retry_policy(cfg), settings.address)
                else:
                    info = check()
                _whole_rows(cfg, info.binlog_row_image)
                for warning in info.warnings:   # a MINIMAL row image, a pattern matching nothing
                    log.warning("%s", warning)
            except BinlogPurgedError as exc:
                if not (resuming and cfg.source.snapshot_mode() == "when_needed"):
                    raise
                log.warning("%s; snapshot.mode is when_needed: the pipeline snapshots its "
                            "tables again and streams on from there", exc.message)
            return
        except ServerIdInUseError:
            if time.monotonic() >= deadline:
                raise
            log.info("server_id %s still registered; waiting for a stale registration to clear",
                     cfg.source.server_id)
            time.sleep(0.25)


def _whole_rows(cfg: PipelineConfig, row_image: str) -> None:
    """Refuse a mirror or changelog-table sink on a server that logs partial row images:
    an update's image there lacks the key and every column it did not set, an insert's
    the columns that took their default. Such a sink would write NULLs (or nothing) for
    them; other sinks record the images as they are (a warning)."""
    from mysqlcdc.errors import RowImageNotFullError

    if row_image in ("", "FULL"):
        return
    kinds = sorted({s.type for s in cfg.sinks if s.type in ("mirror", "changelog_table")})
    if kinds:
        raise RowImageNotFullError(
            f"binlog_row_image is {row_image}, not FULL: its row images leave out the "
            f"columns a statement did not set, and the {' and '.join(kinds)} sink(s) of "
            f"pipeline {cfg.name} keep whole rows")


def _load(spark, cfg: PipelineConfig, index: int, options: dict, history: str | None,
          writer=None):
    """Sink ``index``'s stream, through the pipeline's and the sink's transforms, and None;
    with a sink's task ``writer`` (decision 20): the stream of what the read tasks wrote
    and the Arrow schema of the changes they wrote, when the transforms allow it."""
    from mysqlcdc.spark.transforms import load_transformed, load_written

    chain = _chain(cfg, index, history)
    if writer is not None:
        df, written = load_written(spark, options, chain, writer)
        if df is not None:
            return df, written
    if chain is None:
        return spark.readStream.format("mysqlcdc").options(**options).load(), None
    return load_transformed(spark, options, chain), None


def _chain(cfg: PipelineConfig, index: int, history: str | None):
    """The transforms sink ``index``'s stream goes through (None: none)."""
    if not cfg.transforms and not cfg.sinks[index].transforms:
        return None
    from mysqlcdc.pipeline.transforms import sink_chain

    dead_letters = None
    if cfg.dead_letter is not None:
        from mysqlcdc.sinks.dead_letter import from_config, make_writer

        dead_letters = make_writer(from_config(cfg.dead_letter))
    return sink_chain(cfg, index, history_dir=history, dead_letters=dead_letters,
                      checkpoint_dir=local_dir(sink_checkpoint(cfg, index)))


def _start_plugins(spark, cfg: PipelineConfig, sink: PluginsSinkConfig, df, *, index: int,
                   checkpoint: str, history: str | None, trigger: str, name: str):
    from mysqlcdc.pipeline.transforms import helpers_of, plugin_classes
    from mysqlcdc.sinks.plugins import PluginsSettings, start_plugins

    folder = local_dir(checkpoint)
    if folder is None:
        raise ConfigError(f"sink {index} (plugins) needs a local spark.checkpoint: it keeps its "
                          "transaction ids there")
    settings = PluginsSettings(classes=plugin_classes(sink), state_dir=str(folder / "plugins"),
                               history_dir=history, options=dict(sink.options),
                               pipeline=cfg.name, config=cfg, helpers=helpers_of(cfg))
    return start_plugins(df, settings, checkpoint=checkpoint, trigger_interval=trigger,
                         name=name)


def _clear_stale_writes(cfg: PipelineConfig) -> None:
    """The temporary files a run that died mid-write (a full disk, a kill) left in its
    checkpoints' offset and commit logs, removed before any query starts."""
    from mysqlcdc.spark.checkpoint import local_dir, remove_stale_writes

    for index in range(len(cfg.sinks)):
        folder = local_dir(sink_checkpoint(cfg, index))
        if folder is not None and folder.is_dir():
            removed = remove_stale_writes(folder)
            if removed:
                log.info("checkpoint %s: removed %s, left by a run that stopped while "
                         "writing them", folder, ", ".join(removed))


def start_queries(spark, cfg: PipelineConfig, ahead: dict[int, str] | None = None) -> list:
    """Start one streaming query per sink; returns them in sink order. ``ahead``: the
    decode-ahead ledger folder of a sink's query (``pipeline.ahead``), by sink index."""
    from mysqlcdc.sinks.changelog import (from_sink_config as changelog_settings,
                                          start_changelog, task_writer)
    from mysqlcdc.sinks.console import start_console
    from mysqlcdc.spark.session import plain_local_checkpoints

    if cfg.transforms or any(s.transforms for s in cfg.sinks) or \
            any(isinstance(s, PluginsSinkConfig) for s in cfg.sinks):
        from mysqlcdc.pipeline.transforms import check_user_code
        from mysqlcdc.spark.transforms import ship_user_code

        ship_user_code(spark, check_user_code(cfg))
    plain_local_checkpoints(spark, [sink_checkpoint(cfg, i) for i in range(len(cfg.sinks))])
    _clear_stale_writes(cfg)
    queries = []
    for index, sink in enumerate(cfg.sinks):
        checkpoint = sink_checkpoint(cfg, index)
        options = query_options(cfg, index)
        history = schema_history_dir(cfg, index)
        if history is None:
            log.warning("checkpoint %s is not a local folder: the schema history of sink %d is "
                        "kept in memory and bootstrapped again at every start", checkpoint, index)
        if ahead and index in ahead:
            options["decodeAhead"] = ahead[index]
        name = f"{cfg.name}-{index}-{sink.type}"
        trigger = cfg.spark.trigger_interval
        if isinstance(sink, ChangelogSinkConfig):
            settings = changelog_settings(sink, cfg.name, index)
            df, written = _load(spark, cfg, index, options, history, task_writer(settings))
            q = start_changelog(df, settings, checkpoint=checkpoint, trigger_interval=trigger,
                                name=name, written=written)
            queries.append(q)
            continue
        if isinstance(sink, KafkaSinkConfig):
            # aliased: a bare ``task_writer`` here would rebind the changelog's name for
            # every later sink of this loop
            from mysqlcdc.sinks.kafka import (from_sink_config as kafka_settings, start_kafka,
                                              task_writer as kafka_task_writer)

            if history is None and sink.format == "debezium":
                raise ConfigError(f"sink {index} (kafka, format debezium) needs a local "
                                  "spark.checkpoint: it reads column types from the schema "
                                  "history kept there")
            settings = kafka_settings(sink, cfg.name, history)
            df, written = _load(spark, cfg, index, options, history, kafka_task_writer(settings))
            queries.append(start_kafka(df, settings, checkpoint=checkpoint,
                                       trigger_interval=trigger, write_tasks=sink.write_tasks,
                                       name=name, written=written is not None))
            continue
        df = _load(spark, cfg, index, options, history)[0]
        if isinstance(sink, ConsoleSinkConfig):
            q = start_console(df, checkpoint=checkpoint, trigger_interval=trigger,
                              max_rows=sink.max_rows, truncate=sink.truncate, name=name)
        elif isinstance(sink, MirrorSinkConfig):
            from mysqlcdc.sinks.mirror import from_sink_config as mirror_settings, start_mirror

            if history is None:
                raise ConfigError(f"sink {index} (mirror) needs a local spark.checkpoint: it "
                                  "reads table definitions from the schema history kept there")
            q = start_mirror(df, mirror_settings(sink, cfg.name, history, index),
                             checkpoint=checkpoint,
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
        elif isinstance(sink, PluginsSinkConfig):
            q = _start_plugins(spark, cfg, sink, df, index=index, checkpoint=checkpoint,
                               history=history, trigger=trigger, name=name)
        else:  # pragma: no cover - the config model admits only known sinks
            raise ConfigError(f"sink type {sink.type!r} is not supported by this version")
        queries.append(q)
    return queries


def run_pipeline(cfg: PipelineConfig, *, until_idle: bool = False,
                 on_progress: Callable[[dict], None] | None = None, spark=None,
                 resume_from_sink: bool = False, quiet: bool = False) -> list[dict]:
    """Preflight, start every sink's query and run until stopped (or idle); returns the
    source offset (``file``, ``pos``, ...) each query's last batch ended at, for the
    queries that report one.

    ``resume_from_sink``: queries without a checkpoint start at the Kafka commit log's
    last position instead of ``source.start`` (see ``mysqlcdc.sinks.kafka.resume``).
    ``quiet``: Spark does not print a failed query's stacks (the caller names the error).
    """
    from mysqlcdc.sinks.kafka.resume import resume_from_sink as sink_resume, wants_sink_resume
    from mysqlcdc.spark import build_session

    from mysqlcdc.pipeline.failover import follow_failover

    if spark is None:                # this process owns Spark: a SIGTERM stops it as Ctrl-C does,
        _stop_on_sigterm()           # from the first step (a service stopped while it starts)
    if resume_from_sink or wants_sink_resume(cfg):
        cfg = sink_resume(cfg)
    if cfg.transforms or any(s.transforms for s in cfg.sinks):
        from mysqlcdc.pipeline.transforms import check_user_code

        check_user_code(cfg)     # a typo in user code stops here, before any server or Spark
    follow_failover(cfg)
    checked_preflight(cfg)
    if cfg.source.snapshot_mode() == "initial_only":
        until_idle = True              # the snapshot, then stop
    aheads = _decode_ahead(cfg)
    for a in aheads.values():
        if a.resume is not None:      # resumed: its history is made, it can start now
            a.start()
    history_ready = history_ahead(cfg, on_ready=lambda: [a.start() for a in aheads.values()])
    owns_spark = spark is None
    if spark is None:
        try:
            spark = build_session(cfg.spark.master, cfg.spark.app_name or cfg.name,
                                  dict(cfg.spark.conf), jit=jit_mode(cfg), quiet_boot=quiet)
        except BaseException:        # no Spark (SPARK_START_FAILED, ...): nothing to decode for
            for a in aheads.values():
                a.stop()
            raise
    if quiet:
        from mysqlcdc.spark.session import quiet_failures

        quiet_failures(spark)
        _plain_interrupt()
    try:
        history_ready()
        queries = start_queries(spark, cfg, ahead={i: str(a.folder) for i, a in aheads.items()})
    except BaseException as exc:
        for a in aheads.values():
            a.stop()
        if isinstance(exc, Exception) and not isinstance(exc, MysqlcdcError):
            raise _named_start_failure(cfg, exc) from exc
        raise
    folders = [f for f in (schema_history_dir(cfg, i) for i in range(len(cfg.sinks))) if f]
    heartbeat = _start_heartbeat(cfg)
    try:
        if until_idle:
            for q in queries:
                q.processAllAvailable()
                _report(q, on_progress, folders)
        else:
            from mysqlcdc.pipeline.monitor import runway_watch

            _await(queries, on_progress, folders, runway_watch(cfg))
    except Exception as exc:   # noqa: BLE001 - a failed query's exception, named below
        named = named_failure(cfg, exc)
        if named is exc:
            raise
        raise named from exc
    finally:
        interrupted = isinstance(sys.exc_info()[1], KeyboardInterrupt) or stop_requested()
        if heartbeat is not None:
            heartbeat.stop()
        for q in queries:
            try:
                if q.isActive:
                    q.stop()
            except Exception:   # noqa: BLE001 - after Ctrl-C the JVM may be gone already
                if not interrupted:
                    raise
        queries_stopped(cfg, queries)
        for a in aheads.values():
            a.stop()
        if interrupted and owns_spark:
            _quiet_exit(spark)
    for q in queries:
        failed = q.exception()
        if failed is not None:
            named = named_failure(cfg, failed)
            if named is failed:
                raise failed
            raise named from failed
    return [end for end in (last_end(q, folders) for q in queries) if end is not None]


def last_end(query, folders: list[str] = ()) -> dict | None:
    """The source offset (``file``, ``pos``, ``gtid`` ...) a query's last reported batch
    ended at, an end its read tasks found resolved through the batch-end records of the
    schema-history ``folders``; None when there is none or it cannot be resolved."""
    import json

    from mysqlcdc.capture import batchend

    try:
        sources = (query.lastProgress or {}).get("sources") or []
    except Exception:   # noqa: BLE001 - only a summary: a JVM gone already reports nothing
        return None
    for source in sources:
        end = source.get("endOffset")
        if isinstance(end, str):
            try:
                end = json.loads(end)
            except ValueError:
                continue
        if not (isinstance(end, dict) and end.get("file") and end.get("pos") is not None):
            continue
        if not batchend.pending(end):
            return end
        for folder in folders:
            found = batchend.read_batch(folder, end)
            if found is not None:
                return batchend.offset_after(end, found)
    return None


def queries_stopped(cfg: PipelineConfig, queries) -> None:
    """The pipeline's queries were stopped: a plugins sink's ``deinit`` runs now, before the
    caller goes on (say, to run the pipeline again), not when Spark's listener event for
    the query's end arrives on its own thread."""
    if any(s.type == "plugins" for s in cfg.sinks):
        from mysqlcdc.sinks.plugins import stopped

        for q in queries:
            stopped(q)


def _quiet_exit(spark) -> None:
    """After an interrupt this process exits and the JVM ends under PySpark's accumulator
    server, which would print the stack of its broken connection: told to keep quiet.
    (Spark is not stopped here: a query's stream thread may still be ending, and it
    prints its own stack when the RPC environment goes first.)"""
    context = getattr(spark, "sparkContext", None)
    server = getattr(context, "_accumulatorServer", None)
    if server is not None:
        server.handle_error = lambda request, address: None


def _plain_interrupt() -> None:
    """Ctrl-C reaches the JVM too (one process group), which then shuts down while
    PySpark's own SIGINT handler still calls into it; the Py4J bridge then logs stacks
    of its failed calls. Raise KeyboardInterrupt at once instead, and silence the bridge."""
    if threading.current_thread() is not threading.main_thread():
        return

    signal.signal(signal.SIGINT, interrupt)


_STOP = threading.Event()


def stop_requested() -> bool:
    """A SIGINT or SIGTERM asked this process to stop (:func:`interrupt` ran). What fails
    after that (the JVM, which got the same signal from the service manager, gone
    under a call) is the stop, not an error of its own."""
    return _STOP.is_set()


def interrupt(signum, frame) -> None:   # noqa: ARG001
    """Stop where the main thread is, with the bridge silenced: a call into the JVM it
    cuts short would log its stack (``KeyboardInterrupt while sending command``).

    A signal handler runs between two bytecodes of the main thread, which may be inside a
    finalizer (Py4J releases Java objects from weakref callbacks): Python prints and drops
    an exception raised there. :func:`_redeliver` catches that drop and delivers the
    signal again, at the main thread's next step."""
    _STOP.set()
    logging.getLogger().setLevel(logging.CRITICAL)
    for name in ("py4j", "py4j.java_gateway", "py4j.clientserver", "pyspark"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    if sys.unraisablehook is not _redeliver:
        global _unraisable
        _unraisable, sys.unraisablehook = sys.unraisablehook, _redeliver
    _last_signal[0] = signum
    raise KeyboardInterrupt


_unraisable = sys.unraisablehook
_last_signal = [signal.SIGINT]


def _redeliver(unraisable) -> None:
    """``sys.unraisablehook`` once a stop was asked: a KeyboardInterrupt swallowed in a
    finalizer is raised again in the main thread (through the handler of the signal that
    raised it), silently; anything else goes to the previous hook."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt):
        import _thread

        # from another thread, a moment later: the main thread takes a signal at its next
        # step, and its next step is still in the finalizer while this hook runs
        threading.Timer(0.01, _thread.interrupt_main, (_last_signal[0],)).start()
        return
    _unraisable(unraisable)


def _stop_on_sigterm() -> None:
    """SIGTERM (systemd, Kubernetes, ``kill``) stops the queries like Ctrl-C does: the
    running batch's work is left to the checkpoint and the source's Python runners end
    with their queries, instead of outliving a JVM that died under them."""
    if threading.current_thread() is not threading.main_thread():
        return

    signal.signal(signal.SIGTERM, interrupt)


def _named_start_failure(cfg: PipelineConfig, exc: Exception) -> BaseException:
    """A query that Spark would not start, as a named error: the mysqlcdc error inside it,
    else SPARK_START_FAILED with the innermost Java error's first line (a checkpoint on a
    file system Spark has no jar for, a setting it refuses); unchanged when it is neither."""
    named = named_failure(cfg, exc)
    if named is not exc:
        return named
    from mysqlcdc.errors import SparkStartError
    from mysqlcdc.spark.session import java_reason

    reason = java_reason(exc)
    if reason is None:
        return exc
    return SparkStartError(f"Spark did not start the pipeline's query: {reason}")


def named_failure(cfg: PipelineConfig, exc: BaseException) -> BaseException:
    """A failed query's exception as the mysqlcdc error inside it (one line for the CLI),
    or unchanged when there is none. An outage that outlasted ``max_wait_s`` also says
    where the checkpoint stands, so the user knows the next run resumes there."""
    if isinstance(exc, MysqlcdcError):
        err = exc
    else:
        err = from_text(str(exc))
        if err is None:
            err = storage_failure(str(exc))
            if err is None:
                return exc
            err.message += f"; the pipeline writes its checkpoint under {cfg.spark.checkpoint}"
    if isinstance(err, ServerUnreachableError) and not err.transient:
        at = committed_position(cfg)
        if at is not None and "checkpoint is at" not in err.message:
            err.message = f"{err.message}; the checkpoint is at {at}; run again to resume"
    return err


def committed_position(cfg: PipelineConfig) -> BinlogPosition | None:
    """Where the first sink's checkpoint has committed up to (None: nothing yet, or a
    checkpoint that is not a local folder)."""
    from mysqlcdc.spark.checkpoint import batch_offset, local_dir

    folder = local_dir(sink_checkpoint(cfg, 0))
    commits = folder / "commits" if folder is not None else None
    if commits is None or not commits.is_dir():
        return None
    done = sorted((int(p.name) for p in commits.glob("[0-9]*")), reverse=True)
    return batch_offset(folder, done[0]) if done else None


def _start_heartbeat(cfg: PipelineConfig):
    """The pipeline's heartbeat thread, started (None without ``source.heartbeat``)."""
    if cfg.source.heartbeat is None:
        return None
    from mysqlcdc.pipeline.heartbeat import Heartbeat

    beat = Heartbeat(cfg)
    beat.start()
    return beat


def _await(queries: list, on_progress: Callable[[dict], None] | None,
           folders: list[str] = (), tick: Callable[[], None] | None = None) -> None:
    while all(q.isActive for q in queries):
        for q in queries:
            q.awaitTermination(1.0)
            _report(q, on_progress, folders)
        if tick is not None:
            tick()


def _report(query, on_progress: Callable[[dict], None] | None, folders: list[str] = ()) -> None:
    if on_progress is None:
        return
    from mysqlcdc.spark.taskwrite import with_written_rows

    progress = with_written_rows(dict(query.lastProgress)) if query.lastProgress else {}
    status = source_status(folders)
    if status is not None:
        progress["source"] = status
    snapshot = snapshot_status(folders)
    if snapshot is not None:
        progress["snapshot"] = snapshot
    if progress:
        on_progress(progress)


def snapshot_status(folders) -> dict | None:
    """The snapshot's progress as the planners of these schema-history folders last wrote
    it (``capture.backfill``): the sink furthest from done, None when no snapshot ran."""
    import json

    from mysqlcdc.capture.backfill import STATUS_FILE

    found = []
    for folder in folders:
        try:
            found.append(json.loads((Path(folder) / STATUS_FILE).read_text()))
        except (OSError, ValueError):
            continue
    if not found:
        return None
    busy = [s for s in found if s.get("phase") != "idle"]
    if not busy:
        return found[0]
    return min(busy, key=lambda s: (s.get("tables_done", 0), s.get("chunks_done") or 0))


def source_status(folders) -> dict | None:
    """The source's reconnect counters and current outage, as the planner (driver) and
    the read tasks of these schema-history folders last wrote them: ``reconnects``
    (outages survived), ``outage_s`` (the current one's length, None when connected)."""
    import json

    reconnects, since, seen = 0, None, False
    for folder in folders:
        for path in Path(folder).glob("source-status*.json"):
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            seen = True
            reconnects += int(data.get("reconnects") or 0)
            began = data.get("outage_since")
            if began is not None:
                since = began if since is None else min(since, began)
    if not seen:
        return None
    return {"reconnects": reconnects,
            "outage_s": None if since is None else round(max(0.0, time.time() - since), 1)}
