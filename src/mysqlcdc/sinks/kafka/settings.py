"""Spark option strings <-> a typed, picklable description of what the Kafka sink does.

The writer receives only Spark options (strings, keys lower-cased by Spark). Options::

    kafka.<setting>          librdkafka producer settings, e.g. kafka.bootstrap.servers,
                             kafka.security.protocol, kafka.sasl.password (Spark redacts
                             option keys containing password/secret/token in plans)
    topic                    template over {prefix} {db} {table}, or a fixed name
    topicPrefix              {prefix} (default: the pipeline name)
    topicColumn              take the topic from this column instead
    format                   mysqlcdc (default) | debezium
    schemas                  true (default) | false: debezium key and value as
                             {"schema", "payload"} (Kafka Connect's JSON converter) or bare
    decimalHandlingMode, timePrecisionMode, bigintUnsignedHandlingMode,
    binaryHandlingMode       Debezium's value encodings (see typemap.MODES)
    schemaHistory            the source query's schema history folder (debezium format)
    tombstones               true | false: a null-value record after each delete
                             (default: true for debezium, false for mysqlcdc)
    positionHeaders          true | false (default): headers seq, file, pos, row, gtid
    schemaChangeTopic        op=s records (template), default {prefix}; "" for none
    partitions, replicationFactor, topicConfig.<key>   for topics the sink creates
    transactionTopic         BEGIN/END records per transaction (template), default none
    commitTopic              commit-log topic (template), default {prefix}.mysqlcdc-commits
    pipeline                 name written into commit-log records (default: mysqlcdc)
    deliveryTimeout          seconds one delivery attempt may take (default 60)
    deliveryAttempts         attempts per batch, each with a new producer (default 10)
    sortMemoryMb             memory a write task orders its rows in before it spills
                             sorted runs to local disk (default 128)
    checkpointLocation       set by writeStream; the batch end offsets are read from it
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from mysqlcdc.errors import ConfigError
from mysqlcdc.sinks.kafka.typemap import MODES, Modes

__all__ = ["KafkaSettings", "FORMATS", "from_sink_config"]

FORMATS = ("mysqlcdc", "debezium")

# What no option may override: the guarantees the sink is built on.
_FORCED = {"enable.idempotence": "true", "acks": "all"}
# Compressed unless the user chose (``compression.codec`` is librdkafka's other name for
# it): envelope JSON shrinks several times, and the broker stores and serves whole
# batches instead of records. docs/KAFKA.md, "Compression".
_COMPRESSION = "lz4"


@dataclass(frozen=True)
class KafkaSettings:
    """Everything a write task and the commit step need; pickles to the executors."""

    producer: Mapping[str, str]
    topic: str = "{prefix}.{db}.{table}"
    prefix: str = "mysqlcdc"
    topic_column: str | None = None
    value_column: str | None = None
    headers_column: str | None = None
    format: str = "mysqlcdc"
    tombstones: bool | None = None
    position_headers: bool = False
    schemas: bool = True
    decimal_handling_mode: str = "precise"
    time_precision_mode: str = "adaptive_time_microseconds"
    bigint_unsigned_handling_mode: str = "long"
    binary_handling_mode: str = "bytes"
    schema_change_topic: str | None = "{prefix}"
    history_dir: str | None = None
    partitions: int = 6
    replication_factor: int = 1
    topic_config: Mapping[str, str] = field(default_factory=dict)
    transaction_topic: str | None = None
    commit_topic: str = "{prefix}.mysqlcdc-commits"
    pipeline: str = "mysqlcdc"
    delivery_timeout_s: float = 60.0
    delivery_attempts: int = 10
    checkpoint: str | None = None
    sort_memory_mb: int = 128

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ConfigError(f"kafka format must be one of {', '.join(FORMATS)}, "
                              f"got {self.format!r}")
        for name, allowed in MODES.items():
            if getattr(self, name) not in allowed:
                raise ConfigError(f"kafka {name} must be one of {', '.join(allowed)}, "
                                  f"got {getattr(self, name)!r}")

    def __repr__(self) -> str:   # the producer settings may hold secrets
        return f"KafkaSettings(topic={self.topic!r}, prefix={self.prefix!r}, format={self.format!r})"

    @property
    def send_tombstones(self) -> bool:
        """A null-value record after each delete: as set, else Debezium's default for its
        format (``tombstones.on.delete=true``) and none for ``mysqlcdc``."""
        return self.format == "debezium" if self.tombstones is None else self.tombstones

    @property
    def modes(self) -> Modes:
        return Modes(self.decimal_handling_mode, self.time_precision_mode,
                     self.bigint_unsigned_handling_mode, self.binary_handling_mode)

    @property
    def transaction_orders(self) -> bool:
        """Whether events carry Debezium's ``transaction`` block (see :mod:`.txnorder`)."""
        return self.format == "debezium" and bool(self.transaction_topic)

    @property
    def bootstrap(self) -> str:
        return self.producer.get("bootstrap.servers", "")

    def producer_config(self) -> dict[str, str]:
        """librdkafka settings of the data producer (idempotent, acks=all, bounded wait)."""
        timeout_ms = str(int(self.delivery_timeout_s * 1000))
        chosen = "compression.type" in self.producer or "compression.codec" in self.producer
        return {"message.timeout.ms": timeout_ms, "linger.ms": "20",
                **({} if chosen else {"compression.type": _COMPRESSION}),
                **self.producer, **_FORCED}

    def admin_config(self) -> dict[str, str]:
        """The connection settings alone (no producer-only keys) for admin/consumer clients."""
        skip = ("linger.ms", "batch.", "compression.", "message.", "queue.", "acks",
                "enable.idempotence", "retries", "retry.", "delivery.", "max.in.flight",
                "request.timeout.ms", "sticky.", "partitioner")
        return {k: v for k, v in self.producer.items() if not k.startswith(skip)}

    def resolve(self, template: str, db: str = "", table: str = "") -> str:
        """A topic name from a template; characters Kafka rejects become ``_``."""
        try:
            name = template.format(prefix=self.prefix, db=db, table=table)
        except (KeyError, IndexError, ValueError) as err:
            raise ConfigError(f"topic template {template!r} is invalid: {err}") from None
        return _legal_topic(name)

    def to_options(self) -> dict[str, str]:
        """The Spark options that rebuild these settings (see :meth:`parse`)."""
        opts = {f"kafka.{k}": v for k, v in self.producer.items()}
        opts.update({f"topicConfig.{k}": v for k, v in self.topic_config.items()})
        opts.update({
            "topic": self.topic, "topicPrefix": self.prefix, "format": self.format,
            "schemas": str(self.schemas).lower(), "partitions": str(self.partitions),
            "decimalHandlingMode": self.decimal_handling_mode,
            "timePrecisionMode": self.time_precision_mode,
            "bigintUnsignedHandlingMode": self.bigint_unsigned_handling_mode,
            "binaryHandlingMode": self.binary_handling_mode,
            "schemaChangeTopic": self.schema_change_topic or "",
            "replicationFactor": str(self.replication_factor), "commitTopic": self.commit_topic,
            "pipeline": self.pipeline, "deliveryTimeout": str(self.delivery_timeout_s),
            "deliveryAttempts": str(self.delivery_attempts),
            "sortMemoryMb": str(self.sort_memory_mb),
        })
        for key, value in (("topicColumn", self.topic_column),
                           ("valueColumn", self.value_column),
                           ("headersColumn", self.headers_column),
                           ("transactionTopic", self.transaction_topic),
                           ("schemaHistory", self.history_dir)):
            if value:
                opts[key] = value
        if self.tombstones is not None:
            opts["tombstones"] = str(self.tombstones).lower()
        if self.position_headers:
            opts["positionHeaders"] = "true"
        return opts

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> "KafkaSettings":
        """Settings from Spark options (keys case-insensitive)."""
        low = {k.lower(): str(v) for k, v in options.items()}
        producer = {k[6:]: v for k, v in low.items() if k.startswith("kafka.")}
        if not producer.get("bootstrap.servers"):
            raise ConfigError("option kafka.bootstrap.servers is required")
        return cls(
            producer=producer, format=low.get("format", cls.format),
            topic=low.get("topic", cls.topic), prefix=low.get("topicprefix", cls.prefix),
            topic_column=low.get("topiccolumn") or None,
            value_column=low.get("valuecolumn") or None,
            headers_column=low.get("headerscolumn") or None,
            tombstones=_bool(low, "tombstones") if "tombstones" in low else None,
            position_headers=_bool(low, "positionheaders", "false"),
            schemas=_bool(low, "schemas", "true"),
            decimal_handling_mode=low.get("decimalhandlingmode", cls.decimal_handling_mode),
            time_precision_mode=low.get("timeprecisionmode", cls.time_precision_mode),
            bigint_unsigned_handling_mode=low.get("bigintunsignedhandlingmode",
                                                  cls.bigint_unsigned_handling_mode),
            binary_handling_mode=low.get("binaryhandlingmode", cls.binary_handling_mode),
            schema_change_topic=low.get("schemachangetopic", cls.schema_change_topic) or None,
            history_dir=low.get("schemahistory") or None,
            partitions=_int(low, "partitions", cls.partitions),
            replication_factor=_int(low, "replicationfactor", cls.replication_factor),
            topic_config={k[12:]: v for k, v in low.items() if k.startswith("topicconfig.")},
            transaction_topic=low.get("transactiontopic") or None,
            commit_topic=low.get("committopic", cls.commit_topic),
            pipeline=low.get("pipeline", cls.pipeline),
            delivery_timeout_s=float(low.get("deliverytimeout", cls.delivery_timeout_s)),
            delivery_attempts=_int(low, "deliveryattempts", cls.delivery_attempts),
            checkpoint=low.get("checkpointlocation"),
            sort_memory_mb=_int(low, "sortmemorymb", cls.sort_memory_mb),
        )


def from_sink_config(sink, pipeline: str, history_dir: str | None = None) -> KafkaSettings:
    """Settings from a validated ``KafkaSinkConfig`` of the pipeline named ``pipeline``;
    ``history_dir``: the schema history folder of the sink's query."""
    producer = {**sink.producer_config, "bootstrap.servers": sink.bootstrap_servers}
    producer.update({k: s.reveal() for k, s in sink.secret_producer_config().items()})
    return KafkaSettings(
        producer=producer, topic=sink.topic, prefix=sink.topic_prefix or pipeline,
        topic_column=sink.topic_column, value_column=sink.value_column,
        headers_column=sink.headers_column, format=sink.format, tombstones=sink.tombstones,
        position_headers=sink.position_headers,
        partitions=sink.partitions, replication_factor=sink.replication_factor,
        topic_config=dict(sink.topic_config), transaction_topic=sink.transaction_topic,
        commit_topic=sink.commit_topic, pipeline=pipeline,
        delivery_timeout_s=sink.delivery_timeout_s, delivery_attempts=sink.delivery_attempts,
        schemas=sink.schemas, decimal_handling_mode=sink.decimal_handling_mode,
        time_precision_mode=sink.time_precision_mode,
        bigint_unsigned_handling_mode=sink.bigint_unsigned_handling_mode,
        binary_handling_mode=sink.binary_handling_mode,
        schema_change_topic=sink.schema_change_topic, history_dir=history_dir,
        sort_memory_mb=sink.sort_memory_mb,
    )


def _legal_topic(name: str) -> str:
    return "".join(c if c.isascii() and (c.isalnum() or c in "._-") else "_" for c in name)[:249]


def _bool(low: Mapping[str, str], key: str, default: str = "false") -> bool:
    value = low.get(key, default).strip().lower()
    if value not in ("true", "false"):
        raise ConfigError(f"option {key} must be true or false, got {value!r}")
    return value == "true"


def _int(low: Mapping[str, str], key: str, default: int) -> int:
    raw = low.get(key)
    try:
        value = default if raw is None else int(raw)
    except ValueError:
        raise ConfigError(f"option {key} must be an integer, got {raw!r}") from None
    if value < 1:
        raise ConfigError(f"option {key} must be at least 1, got {value}")
    return value
