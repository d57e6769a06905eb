"""Spark option strings -> a typed, picklable description of what to read.

Options (case-insensitive, as Spark passes them)::

    host, port, user, password       connection (password is redacted by Spark)
    serverId                         replica id of the driver-side scanner;
                                     read tasks use serverId+1 .. serverId+parallelism
    startingPosition                 earliest | latest (default) | FILE:POS | GTID set
                                     (0-1-100, uuid:1-5) | timestamp (2026-11-01T12:00:00Z)
    endingPosition                   batch reads only: latest (default) | FILE:POS
    include, exclude                 comma-separated db.table globs
    maxEventsPerBatch                admission control, binlog events per micro-batch
    parallelism                      read tasks per micro-batch (default 1)
    batchRows                        rows per Arrow record batch (default 8192)
    ssl.ca, ssl.cert, ssl.key, ssl.verifyCert, ssl.verifyIdentity
    connectTimeout                   seconds to wait for a connection to open
    reconnectMaxWait                 seconds an outage of the source may last before the
                                     query fails with SERVER_UNREACHABLE (default 600)
    reconnectInitialDelay, reconnectMaxDelay   backoff between tries (0.5 s doubling to 30 s)
    reconnectAttempts                optional limit on failed tries in a row (0: none)
    schemaHistory                    folder of the schema history (kept in memory if unset:
                                     then every start bootstraps it again)
    schemaBootstrap                  exact (default) | current: accept today's table
                                     definitions for older events (see README)
    snapshotMode                     never (default) | initial | initial_only | when_needed:
                                     read the rows the captured tables hold first (``op =
                                     r``), in chunks; when_needed also snapshots again when
                                     the checkpoint's position was purged from the server
    snapshotChunkRows                rows per snapshot chunk (default 50000)
    snapshotChunksPerBatch           chunks read per micro-batch (default: 4 x parallelism)
    snapshotChunkKeys                JSON object {"db.table": ["col", ...]}: the columns a
                                     table without a primary key is chunked by
    snapshotFirst                    comma-separated db.table names the initial snapshot reads
                                     before the other tables, in this order (set for a sink
                                     whose ``flatten`` references them)
    snapshotQueryTimeout             seconds a chunk's SELECT may run (default: the server's
                                     limit); a chunk that runs longer is read in halves
    signalTable                      db.table of the signal table whose inserted rows ask the
                                     running query for snapshots (needs schemaHistory)
    pipelineName                     a signal naming another pipeline is ignored
    includeQuery                     true: the statement text (ANNOTATE_ROWS / ROWS_QUERY)
                                     in each row's ``query`` field
    emitRollbacks                    true: a record with op ``x`` where a transaction whose
                                     rows are in the binlog ends with ROLLBACK (plugins sink)
    transformsFile                   a pickled ``transforms.chain.Chain`` (no ordered
                                     transform) that the read tasks apply to what they read;
                                     written by ``mysqlcdc.spark.transforms``
    planning                         tasks (default): streaming read tasks find where their
                                     micro-batch ends (needs schemaHistory, a folder the
                                     executors share); driver: the driver walks each
                                     batch's range first, as before issue 12
    minSliceBytes                    with parallelism > 1, the least binlog bytes worth a
                                     read task of its own (default 1 MiB)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from mysqlcdc.capture.filters import TableFilter
from mysqlcdc.errors import ConfigError
from mysqlcdc.protocol.connection import ConnectionSettings
from mysqlcdc.protocol.retry import RetryPolicy
from mysqlcdc.types import START_FORMS, BinlogPosition, parse_start

__all__ = ["SourceOptions"]


def _get(options: Mapping[str, str], name: str, default: str | None = None) -> str | None:
    lowered = {k.lower(): v for k, v in options.items()}
    value = lowered.get(name.lower())
    return default if value is None or value == "" else value


def _number(options: Mapping[str, str], name: str, default: float | None, *,
            integer: bool = False, minimum: float = 0.0) -> float | None:
    raw = _get(options, name)
    if raw is None:
        return default
    try:
        value = int(raw) if integer else float(raw)
    except ValueError:
        kind = "an integer" if integer else "a number"
        raise ConfigError(f"option {name} must be {kind}, got {raw!r}") from None
    if value < minimum:
        raise ConfigError(f"option {name} must be at least {minimum:g}, got {raw}")
    return value


def _int(options: Mapping[str, str], name: str, default: int | None) -> int | None:
    raw = _get(options, name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"option {name} must be an integer, got {raw!r}") from None
    if value <= 0:
        raise ConfigError(f"option {name} must be positive, got {value}")
    return value


def _position(text: str | None, name: str, allowed: tuple[str, ...]) -> str:
    if text in allowed:
        return text
    try:
        BinlogPosition.parse(text or "")
    except ValueError:
        raise ConfigError(
            f"option {name} must be {' | '.join(allowed)} | FILE:POS, got {text!r}"
        ) from None
    return text


def _start(text: str | None) -> str:
    """startingPosition: anything ``types.parse_start`` reads, kept as text."""
    try:
        return str(parse_start(text or "latest"))
    except ValueError:
        raise ConfigError(f"option startingPosition must be {START_FORMS}, got {text!r}") \
            from None


@dataclass(frozen=True)
class SourceOptions:
    settings: ConnectionSettings
    server_id: int
    start: str
    end: str
    tables: TableFilter
    max_events_per_batch: int | None
    parallelism: int
    batch_rows: int
    retry: RetryPolicy
    schema_history: str | None = None
    schema_bootstrap: str = "exact"
    include_query: bool = False
    snapshot_mode: str = "never"
    snapshot_chunk_rows: int = 50_000
    snapshot_chunks_per_batch: int = 0              # 0: 4 x parallelism
    snapshot_chunk_keys: tuple[tuple[str, tuple[str, ...]], ...] = ()
    snapshot_timeout_s: float | None = None
    snapshot_first: tuple[str, ...] = ()
    signal_table: tuple[str, str] | None = None
    pipeline: str | None = None
    emit_rollbacks: bool = False
    transforms_file: str | None = None
    planning: str = "tasks"
    min_slice_bytes: int = 1 << 20
    decode_ahead: str | None = None                 # the decode-ahead's ledger (spark.ahead)

    def chunk_key(self, name: str) -> tuple[str, ...] | None:
        """The user's chunk key of ``db.table``, if any."""
        return dict(self.snapshot_chunk_keys).get(name)

    @property
    def chunks_per_batch(self) -> int:
        return self.snapshot_chunks_per_batch or 4 * self.parallelism

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> "SourceOptions":
        host, user = _get(options, "host"), _get(options, "user")
        if not host or not user:
            raise ConfigError("options host and user are required for format('mysqlcdc')")
        server_id = _int(options, "serverId", None)
        if server_id is None:
            raise ConfigError(
                "option serverId is required: a replica id unique on the source server"
            )
        history = _get(options, "schemaHistory")
        signal = _table_name(_get(options, "signalTable"), "signalTable")
        return cls(
            settings=ConnectionSettings(
                host=host,
                port=_int(options, "port", 3306),
                user=user,
                password=_get(options, "password", "") or "",
                ssl=_ssl(options),
                connect_timeout=float(_int(options, "connectTimeout", 10)),
            ),
            server_id=server_id,
            start=_start(_get(options, "startingPosition", "latest")),
            end=_position(_get(options, "endingPosition", "latest"), "endingPosition",
                          ("latest",)),
            tables=TableFilter.parse(_get(options, "include"), _get(options, "exclude"),
                                     (signal,) if signal and history else ()),
            max_events_per_batch=_int(options, "maxEventsPerBatch", None),
            parallelism=_int(options, "parallelism", 1),
            batch_rows=_int(options, "batchRows", 8192),
            retry=RetryPolicy(
                attempts=_number(options, "reconnectAttempts", None, integer=True),
                initial_delay=_number(options, "reconnectInitialDelay", 0.5, minimum=0.001),
                max_delay=_number(options, "reconnectMaxDelay", 30.0, minimum=0.001),
                max_wait=_number(options, "reconnectMaxWait", 600.0, minimum=0.001),
            ),
            schema_history=history,
            schema_bootstrap=_choice(options, "schemaBootstrap", ("exact", "current")),
            include_query=_choice(options, "includeQuery", ("false", "true")) == "true",
            snapshot_mode=_choice(options, "snapshotMode",
                                  ("never", "initial", "initial_only", "when_needed")),
            snapshot_chunk_rows=_chunk_rows(options),
            snapshot_chunks_per_batch=_int(options, "snapshotChunksPerBatch", 0) or 0,
            snapshot_chunk_keys=_chunk_keys(_get(options, "snapshotChunkKeys")),
            snapshot_timeout_s=_number(options, "snapshotQueryTimeout", None, minimum=0.001),
            snapshot_first=tuple(n.strip() for n in (_get(options, "snapshotFirst") or "").split(",")
                                 if n.strip()),
            signal_table=signal,
            pipeline=_get(options, "pipelineName"),
            emit_rollbacks=_choice(options, "emitRollbacks", ("false", "true")) == "true",
            transforms_file=_get(options, "transformsFile"),
            planning=_choice(options, "planning", ("tasks", "driver")),
            min_slice_bytes=_int(options, "minSliceBytes", 1 << 20),
            decode_ahead=_get(options, "decodeAhead"),
        )


def _chunk_rows(options: Mapping[str, str]) -> int:
    rows = _int(options, "snapshotChunkRows", 50_000)
    if rows > 1_000_000:
        raise ConfigError(f"option snapshotChunkRows must be at most 1000000, got {rows}")
    return rows


def _table_name(text: str | None, name: str) -> tuple[str, str] | None:
    if not text:
        return None
    db, sep, table = text.partition(".")
    if not sep or not db or not table or "." in table:
        raise ConfigError(f"option {name} must be db.table, got {text!r}")
    return db, table


def _chunk_keys(text: str | None) -> tuple[tuple[str, tuple[str, ...]], ...]:
    if not text:
        return ()
    import json

    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if not isinstance(data, dict) or not all(
            isinstance(v, list) and v and all(isinstance(c, str) for c in v) for v in data.values()):
        raise ConfigError('option snapshotChunkKeys must be a JSON object such as '
                          f'{{"shop.log": ["day", "seq"]}}, got {text!r}')
    for name in data:
        _table_name(name, "snapshotChunkKeys")
    return tuple(sorted((k, tuple(v)) for k, v in data.items()))


def _choice(options: Mapping[str, str], name: str, allowed: tuple[str, ...]) -> str:
    value = (_get(options, name, allowed[0]) or allowed[0]).lower()
    if value not in allowed:
        raise ConfigError(f"option {name} must be {' | '.join(allowed)}, got {value!r}")
    return value


def _ssl(options: Mapping[str, str]) -> dict | None:
    ssl = {k: _get(options, f"ssl.{k}") for k in ("ca", "cert", "key")}
    ssl = {k: v for k, v in ssl.items() if v}
    verify = _get(options, "ssl.verifyCert")
    if verify is not None:
        ssl["verify_mode"] = verify.lower() == "true"
    identity = _get(options, "ssl.verifyIdentity")
    if identity is not None:
        ssl["check_hostname"] = identity.lower() == "true"
    return ssl or None
