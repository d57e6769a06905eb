"""The pipeline config: what ``mysqlcdc run PIPELINE.yaml`` loads.

Every option is declared once, here, with its type, default, limits and meaning
(``docs/CONFIG.md`` is generated from these declarations by
``python -m mysqlcdc.config.reference``). Every model forbids unknown keys, so a
typo fails instead of being ignored.

Load a file with :func:`mysqlcdc.config.load_pipeline`; it resolves relative
paths against the file's folder and reads the password from the environment.
Building models directly works too (paths then resolve against the cwd and the
password comes from ``os.environ``)::

    >>> cfg = PipelineConfig.model_validate({
    ...     "name": "shop-cdc",
    ...     "source": {"host": "db", "user": "cdc", "server_id": 5401},
    ...     "spark": {"checkpoint": "/tmp/ck"},
    ...     "sinks": [{"console": {}}],
    ... })
    >>> cfg.spark.app_name, cfg.source.start, cfg.sinks[0].max_rows
    ('mysqlcdc-shop-cdc', 'latest', 20)

Sinks are written as one-key mappings (``- changelog: {...}``); the key picks the
model. To add a sink type, declare its model with ``type: Literal["kafka"]`` and
add it to :data:`AnySinkConfig`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union, get_args

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    FieldSerializationInfo,
    PrivateAttr,
    ValidationInfo,
    field_serializer,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError
from typing_extensions import Self

from mysqlcdc.config.fields import (
    Duration,
    EnvVarName,
    Every,
    LocalPath,
    StrictModel,
    one_key_unwrapper,
    check_env_names,
    secrets_from_env,
    SparkConfValue,
    SparkMaster,
    StartFrom,
    StoragePath,
    TablePattern,
    TriggerInterval,
    context_env,
)
from mysqlcdc.capture.filters import TableFilter
from mysqlcdc.config.secret import Secret
from mysqlcdc.config.transforms import (TRANSFORM_TYPES, AnyTransformConfig, DeadLetterConfig,
                                        DottedPath, ModuleName, uses_dead_letters)

__all__ = [
    "PipelineConfig",
    "SourceConfig",
    "SslConfig",
    "TablesConfig",
    "TableFilter",
    "ReconnectConfig",
    "HeartbeatConfig",
    "SparkConfig",
    "ChangelogSinkConfig",
    "ConsoleSinkConfig",
    "KafkaSinkConfig",
    "MirrorSinkConfig",
    "ChangelogTableSinkConfig",
    "PluginsSinkConfig",
    "AnySinkConfig",
    "TRANSFORM_TYPES",
    "DeadLetterConfig",
    "SINK_TYPES",
    "MAX_SERVER_ID",
    "models_in",
]

MAX_SERVER_ID = 2**32 - 1


_Model = StrictModel   # base of every config model: unknown keys are errors


# --- source ------------------------------------------------------------------


class SslConfig(_Model):
    """TLS for the connection to the server. Leave ``ssl`` out (or null) to connect without
    TLS; write ``ssl: {}`` for TLS verified against the system's CA certificates."""

    ca: LocalPath | None = Field(
        None,
        description="CA certificate file (PEM) the server certificate must chain to. "
        "Null: the system's CA certificates.",
    )
    cert: LocalPath | None = Field(
        None,
        description="Client certificate file (PEM), for servers that require one. Needs `key`.",
    )
    key: LocalPath | None = Field(
        None, description="Private key file (PEM) of the client certificate. Needs `cert`."
    )
    verify_cert: bool = Field(
        True, description="Check that the server certificate chains to `ca` (or a system CA)."
    )
    verify_identity: bool = Field(
        True,
        description="Check that the server certificate names `source.host`. Needs `verify_cert`.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if (self.cert is None) != (self.key is None):
            raise PydanticCustomError("ssl_pair", "cert and key must be given together")
        if self.verify_identity and not self.verify_cert:
            raise PydanticCustomError(
                "ssl_verify", "verify_identity needs verify_cert: true"
            )
        return self


class TablesConfig(_Model):
    """Which tables to capture: those matching an ``include`` pattern and no ``exclude``
    pattern. Patterns are ``db.table`` with fnmatch globs on each side (``*``, ``?``,
    ``[abc]``, ``[!abc]``), matched case-sensitively."""

    include: list[TablePattern] = Field(
        default_factory=lambda: ["*.*"],
        min_length=1,
        description="Patterns of tables to capture, such as `shop.*` or `*.orders`.",
    )
    exclude: list[TablePattern] = Field(
        default_factory=list,
        description="Patterns of tables to leave out even when included, such as `shop.tmp_*`.",
    )

    def matcher(self) -> TableFilter:
        """The picklable ``(db, table) -> bool`` the capture layer filters with."""
        return TableFilter(tuple(self.include), tuple(self.exclude))


class ReconnectConfig(_Model):
    """How the pipeline rides through an outage of the source (a restart, a dropped
    connection, a failover window). Every connection to the server — the driver's
    planning, the read tasks' binlog streams, schema-history and preflight queries —
    retries with a delay that starts at ``initial_delay_s`` and doubles (±25 % jitter) up
    to ``max_delay_s``. An outage longer than ``max_wait_s`` stops the pipeline with
    SERVER_UNREACHABLE; running it again resumes from the checkpoint. Wrong credentials,
    missing privileges or a different server stop it at once."""

    max_wait_s: float = Field(
        600.0, gt=0, description="Longest outage, seconds, the pipeline waits through before "
        "it stops with SERVER_UNREACHABLE (default 10 minutes)."
    )
    attempts: int | None = Field(
        None, ge=0, description="Optional limit on failed tries in a row within one outage "
        "(0: fail at once); null: only `max_wait_s` limits the outage."
    )
    initial_delay_s: float = Field(
        0.5, gt=0, description="Seconds to wait before the first reconnect attempt."
    )
    max_delay_s: float = Field(
        30.0, gt=0, description="Longest wait between two attempts, seconds."
    )

    @model_validator(mode="after")
    def _delays_ordered(self) -> Self:
        if self.max_delay_s < self.initial_delay_s:
            raise PydanticCustomError(
                "delay_order", "max_delay_s must be at least initial_delay_s"
            )
        return self


class SnapshotConfig(_Model):
    """The rows the captured tables already hold, read beside the binlog: lock-free, in
    chunks by key (one Spark read task each), each chunk reconciled with the binlog
    written while it was read. Rows arrive as `op = r` records; progress is kept in the
    checkpoint, so a restarted pipeline goes on with the chunks not yet committed. A
    running pipeline snapshots a table again on demand (`mysqlcdc snapshot`, or a row in
    `signal_table`)."""

    mode: Literal["initial", "initial_only", "never", "when_needed"] | None = Field(
        None, description="`initial`: snapshot every captured table, then stream; "
        "`initial_only`: snapshot, then stop; `when_needed`: like `initial`, and snapshot "
        "again (same checkpoint, a `t` record per table first) when the checkpoint's "
        "position has been purged from the server; `never`: only changes from `start` on. "
        "Null (the default): `initial` when `start` is `latest`, else `never` (an older "
        "position replays the binlog from there instead). Only a pipeline without a "
        "checkpoint takes its initial snapshot."
    )
    chunk_rows: int = Field(
        50_000, ge=1, le=1_000_000, description="Rows per chunk (one read task each)."
    )
    chunks_per_batch: int | None = Field(
        None, ge=1, le=10_000, description="Chunks read per micro-batch (Spark runs them "
        "`parallelism` at a time). Null: 4 x `parallelism`. While the stream runs, a backfill "
        "reads this many chunks beside each batch of changes."
    )
    chunk_keys: dict[str, list[str]] = Field(
        default_factory=dict, description="Per `db.table` (exact names), the columns its "
        "snapshot is chunked by, for tables without a primary key (an indexed column, "
        "unique or not; rows where it is NULL are one more chunk). A table without a primary "
        "key and without an entry is chunked by its first unique key over NOT NULL columns, "
        "else read as one task (logged)."
    )
    query_timeout_s: float | None = Field(
        None, gt=0, description="Seconds a chunk's SELECT may run (the session's "
        "max_statement_time / max_execution_time); a chunk that runs longer is read again in "
        "halves. Null: the server's own limit."
    )
    signal_table: str | None = Field(
        "mysqlcdc.mysqlcdc_signal", description="`db.table` whose inserted rows ask the "
        "running pipeline for snapshots (`mysqlcdc snapshot` writes there; Debezium's "
        "signal format). Read from the binlog: the table need not be captured, and need not "
        "exist until the first request. Null: no signals."
    )

    @field_validator("chunk_keys")
    @classmethod
    def _chunk_key_names(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        for name, columns in value.items():
            db, sep, table = name.partition(".")
            if not sep or not db or not table or "." in table or any(c in name for c in "*?["):
                raise PydanticCustomError("chunk_key_name", "chunk_keys names exact tables as "
                                          "db.table, got {name!r}", {"name": name})
            if not columns:
                raise PydanticCustomError("chunk_key_columns", "chunk_keys[{name}] names no "
                                          "column", {"name": name})
        return value

    @field_validator("signal_table")
    @classmethod
    def _signal_name(cls, value: str | None) -> str | None:
        if value is not None:
            db, sep, table = value.partition(".")
            if not sep or not db or not table or "." in table:
                raise PydanticCustomError("signal_table", "signal_table must be db.table, got "
                                          "{value!r}", {"value": value})
        return value


# ``source.max_events_per_batch`` by default (DESIGN.md decision 22). A sink written by
# the read tasks keeps its memory within its writers' buffers whatever a batch holds, and
# each micro-batch costs a fixed few hundred milliseconds besides its rows: fewer, larger
# batches. The others meet a batch's rows in the JVM or on the driver.
EVENTS_PER_BATCH = 50_000
EVENTS_PER_BATCH_TASK_WRITTEN = 500_000


class HeartbeatConfig(_Model):
    """A row written to the source every `interval_s`, so the binlog moves even when the
    captured tables are idle: offsets advance, the binlog files this pipeline needs are
    released for purging, and seconds-behind stays meaningful on a quiet server. The
    account needs `CREATE, INSERT, UPDATE` on the table (`GRANT CREATE, INSERT, UPDATE ON
    mysqlcdc.mysqlcdc_heartbeat TO cdc@'%'`); the table is created if missing, holds one
    row per pipeline and is never captured."""

    interval_s: float = Field(
        10.0, ge=0.1, description="Seconds between two heartbeat writes."
    )
    table: str = Field(
        "mysqlcdc.mysqlcdc_heartbeat", pattern=r"^[A-Za-z0-9_$]+\.[A-Za-z0-9_$]+$",
        description="`db.table` the heartbeat writes to (created with its database if "
        "missing).",
    )


class SourceConfig(_Model):
    """The MySQL or MariaDB server to capture from, and how to read its binlog.

    The user needs ``REPLICATION SLAVE, REPLICATION CLIENT`` and ``SELECT`` on the
    captured tables. The password is never written in the file: ``password_env``
    names the environment variable that holds it, read once at load.
    """

    host: str = Field(min_length=1, description="Server host name or IP address.")
    port: int = Field(3306, ge=1, le=65535, description="Server TCP port.")
    user: str = Field(min_length=1, description="User to connect as.")
    password_env: EnvVarName | None = Field(
        None,
        description="Name of the environment variable holding the password (such as "
        "`MYSQLCDC_PASSWORD`); it must be set when the config loads. Null: empty password.",
    )
    server_id: int = Field(
        ge=1,
        le=MAX_SERVER_ID,
        description="Replica server id this pipeline registers with, 1..2^32-1. It must differ "
        "from the server's own id and from every other replica or reader of the server. The "
        "first sink's query uses `server_id` itself and its parallel readers `server_id+1` .. "
        "`server_id+parallelism`; each further sink takes the next block of `parallelism+1` "
        "ids. Keep `server_id` .. `server_id+sinks*(parallelism+1)-1` free.",
    )
    ssl: SslConfig | None = Field(None, description="TLS settings; null: no TLS.")
    start: StartFrom = Field(
        "latest",
        description="Where a pipeline without a checkpoint starts: `earliest` (oldest binlog "
        "on the server), `latest` (current end), `FILE:POS` such as `mariadb-bin.000003:4`, "
        "a GTID set (MariaDB `0-1-100[,...]`, MySQL `uuid:1-5[,...]`, tagged GTIDs too; "
        "right after the last transaction of the set) or a timestamp such as "
        "`2026-11-01T12:00:00Z` (the first transaction committed at or after it). "
        "`{gtid: ...}` and `{timestamp: ...}` are accepted too. Ignored once a checkpoint "
        "exists (use the API's seek to move a pipeline that has one).",
    )
    tables: TablesConfig = Field(
        default_factory=TablesConfig, description="Which tables to capture."
    )
    max_events_per_batch: int | None = Field(
        None,
        gt=0,
        description="Admission control: a micro-batch ends at the first transaction "
        "boundary after this many binlog events, so a longer backlog is spread over several "
        "batches (one large transaction still goes in one batch). Null: "
        f"{EVENTS_PER_BATCH_TASK_WRITTEN:,} for a sink whose read tasks write its changes "
        "themselves (a changelog on a local path; Kafka at `parallelism: 1`; no `flatten` "
        "before it), whose memory no batch size changes, and "
        f"{EVENTS_PER_BATCH:,} for the others, whose batch's rows meet in the JVM or on the "
        "driver.",
    )
    parallelism: int = Field(
        1, ge=1, le=64, description="Decode partitions per micro-batch, 1..64."
    )
    connect_timeout_s: float = Field(
        10.0, gt=0, description="Seconds to wait for the server to accept a connection and "
        "greet; also the limit on the driver's ping before each batch (a hung server counts "
        "as unreachable after it)."
    )
    reconnect: ReconnectConfig = Field(
        default_factory=ReconnectConfig, description="Reconnect policy after a dropped connection."
    )
    snapshot: SnapshotConfig = Field(
        default_factory=SnapshotConfig, description="Reading the rows tables hold already."
    )
    schema_bootstrap: Literal["exact", "current"] = Field(
        "exact",
        description="How the schema history starts when `start` is older than the server's "
        "current position. `exact`: only when no DDL in between touches a table that exists "
        "today (tables created in between are fine); otherwise stop with "
        "SCHEMA_BOOTSTRAP_UNSAFE. `current`: accept today's definitions for the older events "
        "(a TABLE_MAP that disagrees still quarantines its table).",
    )
    heartbeat: HeartbeatConfig | None = Field(
        None, description="Heartbeat writes to the source; null: none."
    )
    runway_warning: Duration = Field(
        "6h", description="Warn (log line and `mysqlcdc_binlog_runway_warning` metric) when "
        "the oldest binlog file this pipeline still needs will be purged by the server's "
        "`binlog_expire_logs_seconds` / `expire_logs_days` within this time."
    )
    include_query: bool = Field(
        False,
        description="Put the SQL statement that changed each row in the envelope's `query` "
        "field (MariaDB ANNOTATE_ROWS, on by default there; MySQL ROWS_QUERY, needs "
        "`binlog_rows_query_log_events=ON`). Null when the server did not write it.",
    )

    _password: Secret = PrivateAttr(default_factory=lambda: Secret(""))

    @field_validator("password_env")
    @classmethod
    def _env_var_is_set(cls, name: str | None, info: ValidationInfo) -> str | None:
        if name is not None and name not in context_env(info):
            raise PydanticCustomError(
                "env_var_missing",
                "environment variable {name} is not set; it must hold the password of "
                "the source user",
                {"name": name},
            )
        return name

    @model_validator(mode="after")
    def _read_password(self, info: ValidationInfo) -> Self:
        if self.password_env is not None:
            self._password = Secret(context_env(info)[self.password_env])
        return self

    @model_validator(mode="after")
    def _snapshot_fits_start(self) -> Self:
        if self.snapshot.mode in ("initial", "initial_only", "when_needed") \
                and str(self.start) != "latest":
            raise PydanticCustomError(
                "snapshot_start",
                "snapshot.mode {mode} reads the tables as they are now and streams from the "
                "current position: leave `start` at latest, or use snapshot.mode never to "
                "replay the binlog from {start}", {"mode": self.snapshot.mode,
                                                   "start": str(self.start)})
        return self

    def snapshot_mode(self) -> str:
        """The mode in force: null means `initial` from `latest`, else `never`."""
        if self.snapshot.mode is not None:
            return self.snapshot.mode
        return "initial" if str(self.start) == "latest" else "never"

    @model_validator(mode="after")
    def _server_ids_fit(self) -> Self:
        if self.server_id + self.parallelism > MAX_SERVER_ID:
            raise PydanticCustomError(
                "server_id_range",
                "server_id + parallelism must stay below 2^32 (readers use server_id .. "
                "server_id+parallelism)",
            )
        return self

    def password(self) -> str:
        """The password read from ``password_env`` at load (``""`` when none is named)."""
        return self._password.reveal()

    def server_ids(self, sinks: int = 1) -> range:
        """Every replica server id a pipeline of ``sinks`` queries may use: one block of
        ``parallelism+1`` ids per sink, starting at ``server_id``."""
        return range(self.server_id, self.server_id + sinks * (self.parallelism + 1))

    def sink_server_id(self, index: int) -> int:
        """The server id of sink ``index``'s query (its readers use the next ``parallelism``)."""
        return self.server_id + index * (self.parallelism + 1)

    def events_per_batch(self, task_written: bool) -> int:
        """``max_events_per_batch``, or its default for a sink whose read tasks write its
        changes themselves (``task_written``) or not."""
        if self.max_events_per_batch is not None:
            return self.max_events_per_batch
        return EVENTS_PER_BATCH_TASK_WRITTEN if task_written else EVENTS_PER_BATCH


# --- spark -------------------------------------------------------------------


class SparkConfig(_Model):
    """The Spark session and streaming query that run the pipeline."""

    master: SparkMaster = Field("local[*]", description="Spark master URL: `local[*]` "
                        "(or `local[N]`) in this process, `spark://host:7077` for a standalone "
                        "cluster (several `host:port` comma-separated for standby masters).")
    app_name: str | None = Field(
        None, description="Spark application name. Null: `mysqlcdc-<name>`."
    )
    trigger_interval: TriggerInterval = Field(
        "1 second",
        description="Processing-time trigger: how often a micro-batch starts, such as "
        "`1 second` or `500 milliseconds`.",
    )
    checkpoint: StoragePath = Field(
        description="Streaming checkpoint location: binlog offsets and sink commits. A local "
        "path (relative to the YAML file's folder) or a URI such as `s3a://bucket/ck`. One "
        "per pipeline; never share it."
    )
    conf: dict[str, SparkConfValue] = Field(
        default_factory=dict,
        description="Extra Spark conf, key to value, such as `spark.sql.shuffle.partitions: 4`.",
    )


# --- sinks -------------------------------------------------------------------


class _SinkModel(_Model):
    """What every sink accepts besides its own options."""

    transforms: list[AnyTransformConfig] = Field(
        default_factory=list,
        description="Transforms for this sink only, applied after the pipeline's `transforms` "
        "(same forms as there).",
    )


class ChangelogSinkConfig(_SinkModel):
    """``changelog``: appends every change envelope to a partitioned table of changes,
    in Parquet (Spark's file sink) or Delta Lake (one idempotent commit per batch)."""

    type: Literal["changelog"] = Field(
        "changelog", exclude=True, repr=False, description="Set from the mapping key; not written."
    )
    path: StoragePath = Field(
        description="Where the changelog is written: a local path (relative to the YAML "
        "file's folder) or a URI such as `s3a://bucket/changelog`."
    )
    partition_by: list[str] = Field(
        default_factory=lambda: ["db", "table"],
        description="Envelope columns the changelog is partitioned by; [] for none.",
    )
    format: Literal["parquet", "delta"] = Field(
        "parquet",
        description="`parquet`: Spark's file sink; exact for Spark readers, and for plain "
        "Parquet readers once the sink has started (it removes a killed batch's leftover "
        "files). `delta`: a Delta Lake table, one commit per micro-batch, exact for every "
        "Delta reader (deltalake, polars, DuckDB, Spark with Delta) at every moment; needed "
        "for `compact_every`.",
    )
    compact_every: Every | None = Field(
        None,
        description="Delta only: merge each partition's small files into files of about "
        "`target_file_mb`, every this many micro-batches (`100`) or this often (`'1h'`), "
        "while capture continues; then remove replaced files older than `vacuum_after`. "
        "Unset: never (run `mysqlcdc changelog compact`).",
    )
    target_file_mb: int = Field(
        128, ge=1, le=4096, description="Delta only: the file size compaction aims for, in MiB."
    )
    vacuum_after: Duration = Field(
        "7d",
        description="Delta only: replaced files (by compaction or retention) stay this long "
        "for readers of older table versions, then compaction's vacuum deletes them.",
    )
    retention: Duration | None = Field(
        None,
        description="Drop changes older than this (`'30d'`); newer ones are never touched. "
        "Delta: deleted by `ts_ms` when compaction runs (hourly without `compact_every`). "
        "Parquet: Spark's file-sink TTL, by when each file was written (so a change goes at "
        "the latest `retention` after it was captured), applied at Spark's log compaction "
        "(every 10 batches) and the files deleted by the sink. Unset: kept forever.",
    )

    @field_validator("partition_by")
    @classmethod
    def _distinct(cls, columns: list[str]) -> list[str]:
        if len(set(columns)) != len(columns):
            raise PydanticCustomError("duplicate_column", "columns must be distinct")
        return columns

    @model_validator(mode="after")
    def _delta_only(self) -> Self:
        if self.format == "parquet":
            if self.compact_every is not None:
                raise PydanticCustomError(
                    "delta_only",
                    "`compact_every` needs `format: delta`: Spark's Parquet file sink lists "
                    "every file it committed, so its files cannot be merged safely",
                )
        return self


class ConsoleSinkConfig(_SinkModel):
    """``console``: prints each micro-batch's changes, for trying a pipeline out."""

    type: Literal["console"] = Field(
        "console", exclude=True, repr=False, description="Set from the mapping key; not written."
    )
    max_rows: int = Field(20, gt=0, description="Most rows printed per micro-batch.")
    truncate: bool = Field(True, description="Cut long values to 20 characters.")


class KafkaSinkConfig(_SinkModel):
    """``kafka``: publishes every change to Kafka, one topic per table, keyed by primary key.

    Changes of one key go to one partition in ``seq`` order; a batch counts as done only
    when every message is acknowledged (idempotent producer, ``acks=all``), and then one
    record with the batch's end position is appended to the commit-log topic, which
    ``mysqlcdc run --resume-from-sink`` resumes from when the checkpoint is lost. A
    replayed batch may publish changes twice; consumers drop repeats by ``seq``.
    Secrets for SASL/SSL go in ``producer_config_env`` (read from the environment at
    load, never printed)."""

    type: Literal["kafka"] = Field(
        "kafka", exclude=True, repr=False, description="Set from the mapping key; not written."
    )
    bootstrap_servers: str = Field(
        min_length=1, description="Kafka brokers, `host:port[,host:port...]`."
    )
    topic: str = Field(
        "{prefix}.{db}.{table}",
        min_length=1,
        description="Topic of each change: a template over `{prefix}`, `{db}` and `{table}`, "
        "or a fixed name. Characters Kafka does not allow in names become `_`.",
    )
    topic_prefix: str | None = Field(
        None, description="`{prefix}` in topic names. Null: the pipeline's `name`."
    )
    topic_column: str | None = Field(
        None,
        description="Take each change's topic from this column of the stream instead of "
        "`topic` (for a transform that adds one).",
    )
    value_column: str | None = Field(
        None,
        description="Send this column's text as the message value where it is set, in "
        "place of the format's value, keyed by the envelope's key (the outbox transform's "
        "`message_value`: its payload as the application wrote it).",
    )
    headers_column: str | None = Field(
        None,
        description="Add the entries of this column's JSON object as message headers where "
        "it is set (the outbox transform's `message_headers`: id, eventType, aggregateType).",
    )
    format: Literal["mysqlcdc", "debezium"] = Field(
        "mysqlcdc",
        description="Messages: `mysqlcdc` (the envelope as JSON) or `debezium` (Debezium MySQL's "
        "change events: before, after, source, transaction, op, ts_ms, with Debezium's value "
        "encodings; see docs/KAFKA.md).",
    )
    schemas: bool = Field(
        True,
        description="`debezium` format: key and value as `{\"schema\", \"payload\"}`, as Kafka "
        "Connect's JSON converter writes them by default; false: the payload alone.",
    )
    decimal_handling_mode: Literal["precise", "double", "string"] = Field(
        "precise",
        description="`debezium` format, DECIMAL values: `precise` (Connect Decimal: base64 of "
        "the unscaled two's-complement bytes), `double` or `string` (exact text).",
    )
    time_precision_mode: Literal["adaptive_time_microseconds", "connect"] = Field(
        "adaptive_time_microseconds",
        description="`debezium` format, DATE/TIME/DATETIME values: Debezium's types by column "
        "precision (TIME in microseconds), or Kafka Connect's Date/Time/Timestamp (milliseconds).",
    )
    bigint_unsigned_handling_mode: Literal["long", "precise"] = Field(
        "long",
        description="`debezium` format, BIGINT UNSIGNED values: `long` (int64; values above "
        "2^63-1 come out negative, as in Debezium) or `precise` (Connect Decimal, exact).",
    )
    binary_handling_mode: Literal["bytes", "base64", "base64-url-safe", "hex"] = Field(
        "bytes",
        description="`debezium` format, BINARY/VARBINARY/BLOB values: `bytes` (base64 in JSON, "
        "schema type bytes) or a string in base64, URL-safe base64 or hex.",
    )
    tombstones: bool | None = Field(
        None, description="After each delete (including the old key of a key change), also send "
        "the key with a null value, so compaction drops the key. Null: on for `debezium` (as "
        "Debezium's `tombstones.on.delete`), off for `mysqlcdc`."
    )
    position_headers: bool = Field(
        False, description="Also send each change's binlog position as the message headers "
        "`seq`, `file`, `pos`, `row` and `gtid` (text), for consumers that filter without "
        "parsing the value (both formats' values carry the same fields). Off by default: they "
        "cost about 40 % of producing a message (docs/KAFKA.md, \"Headers\")."
    )
    schema_change_topic: str | None = Field(
        "{prefix}",
        description="Schema changes (`op = s` records) go to this one-partition topic "
        "(template like `topic`; Debezium's schema change topic is named after the prefix), "
        "keyed by database. Null: not published.",
    )
    partitions: int = Field(6, ge=1, description="Partitions of topics the sink creates.")
    replication_factor: int = Field(
        1, ge=1, description="Replication factor of topics the sink creates (3 in production)."
    )
    topic_config: dict[str, SparkConfValue] = Field(
        default_factory=dict,
        description="Config of topics the sink creates, such as `cleanup.policy: compact`.",
    )
    transaction_topic: str | None = Field(
        None,
        description="Also publish BEGIN/END records with event counts per table for every "
        "transaction to this topic (template like `topic`). Null: none.",
    )
    commit_topic: str = Field(
        "{prefix}.mysqlcdc-commits",
        min_length=1,
        description="Commit-log topic (one partition): one record per fully delivered batch "
        "with its end position.",
    )
    resume_from_sink: bool = Field(
        False,
        description="Without a checkpoint, start from the commit log's last position instead "
        "of `source.start` (as `mysqlcdc run --resume-from-sink`).",
    )
    delivery_timeout_s: float = Field(
        60.0, gt=0, description="Seconds one delivery attempt of a batch may take."
    )
    delivery_attempts: int = Field(
        10,
        ge=1,
        description="Attempts per batch, each with a new producer, before the batch fails "
        "(a broker outage longer than attempts x timeout stops the pipeline; running it "
        "again replays the batch).",
    )
    sort_memory_mb: int = Field(
        128,
        ge=1,
        description="Memory (MB) each write task orders its rows by `seq` in, where the sink "
        "runs write tasks (a chain with an ordered stage); a larger micro-batch (one big "
        "transaction is one) is sorted in runs spilled to local disk.",
    )
    write_tasks: int | None = Field(
        None,
        ge=1,
        description="Spark tasks that produce the messages of a batch whose read tasks may "
        "share keys (parallel slices, a backfill beside the stream; rows are spread by key). "
        "Other batches are published by their read tasks. Null: "
        "`spark.sql.shuffle.partitions`. 1: no shuffle (one producer task).",
    )
    producer_config: dict[str, SparkConfValue] = Field(
        default_factory=dict,
        description="librdkafka producer settings passed through, such as "
        "`security.protocol: SASL_SSL`, `sasl.mechanism: SCRAM-SHA-512`, `compression.type: zstd`. "
        "Idempotence and `acks=all` are always on. Messages are compressed with `lz4` unless "
        "this sets `compression.type` (or `compression.codec`); `none` turns it off "
        "([KAFKA.md](KAFKA.md#compression)).",
    )
    producer_config_env: dict[str, EnvVarName] = Field(
        default_factory=dict,
        description="librdkafka settings whose values are secrets, setting to environment "
        "variable name, such as `sasl.password: KAFKA_PASSWORD`. Read at load, never logged.",
    )

    _secrets: dict[str, Secret] = PrivateAttr(default_factory=dict)

    @field_validator("producer_config_env")
    @classmethod
    def _env_vars_set(cls, names: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        return check_env_names(names, info)

    @model_validator(mode="after")
    def _read_secrets(self, info: ValidationInfo) -> Self:
        self._secrets = secrets_from_env(self.producer_config_env, info)
        return self

    def secret_producer_config(self) -> dict[str, Secret]:
        """The secret librdkafka settings read from ``producer_config_env``."""
        return dict(self._secrets)


class _TargetConnection(_SinkModel):
    """Connection settings shared by the sinks that write into a database server."""

    host: str = Field("127.0.0.1", min_length=1, description="Target server host.")
    port: int | None = Field(
        None, ge=1, le=65535, description="Target server port; null: the target's default "
        "(5432 for postgresql, 3306 for mysql, 6379 for redis)."
    )
    user: str | None = Field(
        None, min_length=1, description="User to connect as; required for postgresql and "
        "mysql; for redis an ACL user (null: the default user)."
    )
    password_env: EnvVarName | None = Field(
        None, description="Environment variable holding the target user's password (read at "
        "load, never logged); null: no password."
    )
    database: str | None = Field(
        None, min_length=1, description="postgresql: the database to connect to (default "
        "`postgres`); source table `db.t` becomes table `t` in schema `db` there. mysql: the "
        "database holding the ledger tables (default `mysqlcdc`); `db.t` becomes `db`.`t`. "
        "redis: the database number (default `0`)."
    )
    connect_timeout_s: float = Field(10.0, gt=0, description="Seconds to wait for a connection.")
    retry: ReconnectConfig = Field(
        default_factory=lambda: ReconnectConfig(attempts=8, initial_delay_s=0.5, max_delay_s=15),
        description="Retries of a batch whose target is unreachable or dropped the "
        "connection (exponential backoff); after the last the pipeline stops with "
        "MIRROR_TARGET_UNAVAILABLE and replays the batch when run again.",
    )

    _password: Secret = PrivateAttr(default_factory=lambda: Secret(""))

    @field_validator("password_env")
    @classmethod
    def _env_var_is_set(cls, name: str | None, info: ValidationInfo) -> str | None:
        if name is not None and name not in context_env(info):
            raise PydanticCustomError(
                "env_var_missing",
                "environment variable {name} is not set; it must hold the password of "
                "the target user",
                {"name": name},
            )
        return name

    @model_validator(mode="after")
    def _read_password(self, info: ValidationInfo) -> Self:
        if self.password_env is not None:
            self._password = Secret(context_env(info)[self.password_env])
        return self

    @model_validator(mode="after")
    def _user_given(self) -> Self:
        if self.target in ("postgresql", "mysql") and self.user is None:
            raise PydanticCustomError("mirror_user", "user is required for target {target}",
                                      {"target": self.target})
        return self

    @property
    def password(self) -> Secret:
        """The password read from ``password_env`` at load (empty when none is named)."""
        return self._password

    def target_port(self) -> int:
        return self.port or {"postgresql": 5432, "mysql": 3306, "redis": 6379}.get(self.target, 0)

    def target_database(self) -> str:
        return self.database or {"postgresql": "postgres", "mysql": "mysqlcdc",
                                 "redis": "0"}.get(self.target, "")


class MirrorSinkConfig(_TargetConnection):
    """The current state (or, with `mode: history`, every version) of every captured table
    kept live in a target: PostgreSQL, MySQL/MariaDB, Redis or Delta Lake tables. Each
    micro-batch is reduced to the last change per key and applied as one target
    transaction together with its row in ``mysqlcdc_offsets`` (Delta: one commit per table
    and one in the `_mysqlcdc_offsets` table, each carrying the batch id), so a replayed
    batch changes nothing. Schema changes and truncates are applied; a change the target
    cannot apply stops that table (recorded with the ledger), the others flow.
    See README "Mirror the tables" for the type mappings."""

    type: Literal["mirror"] = Field(
        "mirror", description="Sink type; set by the key of the sink mapping."
    )
    target: Literal["postgresql", "mysql", "redis", "delta"] = Field(
        description="The target: `postgresql`, `mysql` (MySQL and MariaDB), `redis` or "
        "`delta` (Delta Lake tables under `path`, written with delta-rs)."
    )
    mode: Literal["current", "history"] = Field(
        "current", description="`current`: one row per key, as the source has it. `history` "
        "(postgresql, mysql, delta): every version of every row, with `valid_from`, "
        "`valid_to` (commit times), `valid_from_seq`, `valid_to_seq` and `is_current`."
    )
    path: StoragePath | None = Field(
        None, description="delta: the root folder; source table `db.t` becomes the Delta "
        "table `<path>/db/t`. A local path (relative to the YAML file's folder) or a mount "
        "every Spark executor sees."
    )
    key_template: str = Field(
        "{db}:{table}:{pk}", description="redis: the key of a row's hash over `{db}`, "
        "`{table}` and `{pk}` (primary-key values joined by `:`); must end with `{pk}`."
    )
    ttl_s: float | None = Field(
        None, gt=0, description="redis: expire every written key after this many seconds; "
        "null: keys do not expire."
    )
    compact_every: Every | None = Field(
        None, description="delta: merge each table's small files into files of about "
        "`target_file_mb` every this many micro-batches (`100`) or this often (`'1h'`), then "
        "vacuum files replaced more than `vacuum_after` ago. Unset: never."
    )
    target_file_mb: int = Field(
        128, ge=1, le=4096, description="delta: the file size compaction aims for, in MiB."
    )
    vacuum_after: Duration = Field(
        "7d", description="delta: replaced files stay this long for readers of older versions "
        "(time travel, `read_consistent`), then compaction's vacuum deletes them."
    )

    @model_validator(mode="after")
    def _target_options(self) -> Self:
        if not self.key_template.endswith("{pk}"):
            raise PydanticCustomError("key_template", "key_template must end with {pk}")
        if self.target == "redis" and not self.target_database().isdigit():
            raise PydanticCustomError("redis_db", "database must be a number for target redis")
        if self.mode == "history" and self.target == "redis":
            raise PydanticCustomError("mirror_mode", "mode history needs target postgresql, "
                                      "mysql or delta (a Redis hash holds one version)")
        if (self.target == "delta") != (self.path is not None):
            raise PydanticCustomError("mirror_path", "path is required for target delta and "
                                      "only used by it")
        if self.target != "delta" and self.compact_every is not None:
            raise PydanticCustomError("delta_only", "compact_every needs target delta")
        if self.target == "delta" and "://" in str(self.path) and \
                not str(self.path).startswith("file:"):
            raise PydanticCustomError("mirror_path", "the delta mirror writes to a local or "
                                      "mounted folder; object-store URIs are not supported yet")
        return self


class ChangelogTableSinkConfig(_TargetConnection):
    """FlexCDC-style changelog tables: per source table, a table in the target database
    with every row change: the row's columns plus `dml_type` (+1/-1; an update is a -1 of
    the old image and a +1 of the new; 0 a backfill's read of a row the table holds live),
    `uow_id` (transaction), `gsn` (global sequence
    number, unique and increasing across tables), `server_id` and `binlog_position`.
    Created and altered from the schema history; one transaction per batch with its
    `mysqlcdc_offsets` row (`<pipeline>#changelog@<query id>`)."""

    type: Literal["changelog_table"] = Field(
        "changelog_table", description="Sink type; set by the key of the sink mapping."
    )
    target: Literal["postgresql", "mysql"] = Field(
        description="The target: `postgresql` or `mysql` (MySQL and MariaDB)."
    )
    table_suffix: str = Field(
        "_changelog", min_length=1, description="Source table `t` is logged into `t<suffix>`."
    )


class PluginsSinkConfig(_SinkModel):
    """``plugins``: FlexCDC-style callbacks. Each listed class is instantiated once per run
    and called in binlog order: `begin_trx`, one `insert` / `delete` / `update_before` +
    `update_after` per row image, then `commit_trx` (or `rollback_trx` for a transaction
    the server logged with ROLLBACK), with a transaction id kept across restarts and a
    global sequence number per row image. Callbacks run on the driver once per micro-batch;
    a batch replayed after a failure calls them again (`ctx.batch_id` tells). The Plugin
    protocol is in README "Your own logic"."""

    type: Literal["plugins"] = Field(
        "plugins", exclude=True, repr=False, description="Set from the mapping key; not written."
    )
    plugins: list[DottedPath] = Field(
        min_length=1, description="Plugin classes, called in this order, such as "
        "`mypkg.audit:AuditPlugin`."
    )
    options: dict[str, Any] = Field(
        default_factory=dict, description="Anything the plugins read as `ctx.options`."
    )


_SinkUnion = Union[ChangelogSinkConfig, ConsoleSinkConfig, KafkaSinkConfig, MirrorSinkConfig,
                   ChangelogTableSinkConfig, PluginsSinkConfig]

SINK_TYPES: dict[str, type[_Model]] = {
    cls.model_fields["type"].default: cls for cls in get_args(_SinkUnion)
}
"""Sink models by the key that selects them in YAML."""


_unwrap_sink = one_key_unwrapper(SINK_TYPES, "sink", "- changelog: {path: ./cl}")


AnySinkConfig = Annotated[
    _SinkUnion, Discriminator("type"), BeforeValidator(_unwrap_sink)
]
"""One sink, written ``{<type>: {options}}``; the key picks the model from :data:`SINK_TYPES`."""


def models_in(annotation: Any) -> list[type[BaseModel]]:
    """The config models an annotation holds: ``list[X | None]`` -> ``[X]``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in getattr(annotation, "__args__", ()) for m in models_in(arg)]


# --- pipeline ----------------------------------------------------------------


class PipelineConfig(_Model):
    """One pipeline: a source server, the Spark query that reads it and the sinks it writes."""

    name: str = Field(
        pattern=r"^[a-z0-9_-]+$",
        description="Pipeline name: lower-case letters, digits, `_` and `-`.",
    )
    source: SourceConfig = Field(description="The server to capture from.")
    spark: SparkConfig = Field(description="The Spark session and streaming query.")
    transforms: list[AnyTransformConfig] = Field(
        default_factory=list,
        description="Transforms applied in order to every change before every sink: one-key "
        "mappings such as `- mask: {columns: [shop.user.email]}` (see the sections below).",
    )
    transforms_path: list[LocalPath] = Field(
        default_factory=list,
        description="Folders searched first for the modules of `python` transforms, `helpers` "
        "and plugins (relative to the YAML file's folder); their code is shipped to Spark's "
        "executors.",
    )
    helpers: list[ModuleName] = Field(
        default_factory=list,
        description="Modules whose public functions user code gets as `helpers.NAME` (next to "
        "the built-in `obfuscate`, `hash` and `mask`).",
    )
    dead_letter: DeadLetterConfig | None = Field(
        None, description="Where events go that a transform with `on_error: dead_letter` could "
        "not process; required when one has it."
    )
    sinks: list[AnySinkConfig] = Field(
        min_length=1,
        description="Where changes go: a list of one-key mappings such as "
        "`- changelog: {path: ./changelog}`; at least one.",
    )

    @model_validator(mode="after")
    def _dead_letter_target(self) -> Self:
        every = list(self.transforms) + [t for s in self.sinks for t in s.transforms]
        if uses_dead_letters(every) and self.dead_letter is None:
            raise PydanticCustomError(
                "dead_letter_missing", "a transform has on_error: dead_letter, so `dead_letter` "
                "must say where those events go (path: or kafka:)")
        return self

    def may_decode_ahead(self) -> bool:
        """Whether this pipeline's shape allows a decode-ahead (DESIGN.md decision 24): one
        sink, a local master (the read tasks see its spool files), ``parallelism: 1``."""
        return len(self.sinks) == 1 and self.source.parallelism == 1 and \
            str(self.spark.master).startswith("local")

    def replica_ids(self) -> range:
        """Every replica server id this pipeline may connect as: each sink's block of
        ``parallelism + 1`` ids; when its backlog may be decoded ahead, also the block a
        second sink would take: the decode-ahead and its slice helper read with those."""
        return self.source.server_ids(2 if self.may_decode_ahead() else len(self.sinks))

    @model_validator(mode="after")
    def _sink_server_ids_fit(self) -> Self:
        ids = self.source.server_ids(len(self.sinks))
        if ids.stop - 1 > MAX_SERVER_ID:
            raise PydanticCustomError(
                "server_id_range",
                "source.server_id + sinks*(parallelism+1) - 1 must stay below 2^32 (each sink "
                "reads with its own block of parallelism+1 server ids)",
            )
        return self

    @model_validator(mode="after")
    def _default_app_name(self) -> Self:
        if self.spark.app_name is None:
            self.spark.app_name = f"mysqlcdc-{self.name}"
        return self

    @field_serializer("sinks")
    def _sinks_as_written(
        self, sinks: list[_Model], info: FieldSerializationInfo
    ) -> list[dict[str, Any]]:
        mode = "json" if info.mode_is_json() else "python"
        return [{s.type: s.model_dump(mode=mode)} for s in sinks]  # type: ignore[attr-defined]
