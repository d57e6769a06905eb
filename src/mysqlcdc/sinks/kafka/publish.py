"""Publishing one task's rows, and one batch's commit records. No pyspark here.

Order: a task's rows arrive sorted by ``seq`` and are produced in that order by one
idempotent producer, a record batch at a time, each acknowledged before the next
(ordering per partition is kept through retries), and every change of a key of the
batch is in one task: a read task whose keys no other task of the batch holds
(:mod:`.tasks`), or a write task after the rows were spread by key. The default
partitioner hashes the key, so a key always lands in one partition.

Schema changes (``op = s``) are not produced by the tasks: they go back to the
driver in the commit messages and the commit step publishes them, in ``seq`` order,
to the single-partition schema-change topic before the batch's commit record.
"""

from __future__ import annotations

import time
from typing import Callable

import pyarrow as pa
import pyarrow.compute as pc

from mysqlcdc.arrowbuild import text_scalar
from mysqlcdc.collector import fewer_collections
from mysqlcdc.envelope.model import ENVELOPE_FIELDS, envelope_json_lines
from mysqlcdc.schema.history import SchemaHistory
from mysqlcdc.schema.model import TableDef
from mysqlcdc.sinks.kafka.commitlog import CommitRecord
from mysqlcdc.sinks.kafka.connect import TXN_KEY, TXN_VALUE
from mysqlcdc.sinks.kafka.debezium import DebeziumEncoder, KafkaSchemaUnknownError
from mysqlcdc.sinks.kafka.formats import (
    TxnTally, boundary_records, encode_key, headers, key_change_header, mysqlcdc_value,
    tally_transactions,
)
from mysqlcdc.sinks.kafka.producer import drop_producer, producer_for, with_retries
from mysqlcdc.sinks.kafka.schemachange import schema_change_messages
from mysqlcdc.sinks.kafka.settings import KafkaSettings
from mysqlcdc.sinks.kafka.topics import TopicRouter, ensure_topics, forget_topics
from mysqlcdc.types import BinlogPosition

__all__ = ["publish_batch", "publish_commit", "row_encoder", "HistoryDefinitions",
           "batch_messages", "encode_batch", "encode_messages", "send_messages",
           "split_schema_changes", "transaction_tally"]

Encode = Callable[[dict], tuple[bytes | None, bytes, list]]


def _reset(settings: KafkaSettings) -> None:
    drop_producer(settings)
    forget_topics(settings)


_HISTORIES: dict[str, SchemaHistory] = {}


class HistoryDefinitions:
    """Table definitions at a position, from the source query's schema history folder
    (one history per Python worker, re-read when the file grew)."""

    def __init__(self, history_dir: str | None) -> None:
        if not history_dir:
            raise KafkaSchemaUnknownError("the debezium format needs the source's schema "
                                          "history folder and the sink was given none")
        history = _HISTORIES.get(history_dir)
        if history is None:
            history = _HISTORIES[history_dir] = SchemaHistory(history_dir)
        history.reload()
        self.history = history

    def at(self, db: str, table: str, file: str, pos: int) -> TableDef | None:
        return self.history.definition(db, table, BinlogPosition.of(file, pos))


def split_schema_changes(settings: KafkaSettings, batch: pa.RecordBatch
                         ) -> tuple[pa.RecordBatch, list[dict]]:
    """``batch``'s row changes, and its schema changes (``op = s``) as the records the
    commit step publishes (none without a schema-change topic).

    A schema change that leaves no table under its name (a DROP, the old name of a
    RENAME) also stays among the row changes as a ``t`` of that name, at its place: the
    table's topic then tells a consumer that every key it holds for the name is void,
    as the changelog's current state starts again at such a DDL. Without it, a table
    that a RENAME puts in place of another (an online schema change's cut-over) or that
    is created again after a DROP would keep the old table's rows in the topic."""
    is_schema = pc.equal(batch.column("op"), text_scalar("s"))
    if not pc.any(is_schema).as_py():
        return batch, []
    schema_rows = batch.filter(is_schema).to_pylist() if settings.schema_change_topic else []
    gone = pc.and_(is_schema, pc.is_null(batch.column("after")))
    if not pc.any(gone).as_py():
        return batch.filter(pc.invert(is_schema)), schema_rows
    keep = pc.or_(pc.invert(is_schema), gone)
    changes, was_gone = batch.filter(keep), pc.filter(gone, keep)
    names = changes.schema.names
    columns = list(changes.columns)
    columns[names.index("op")] = pc.if_else(was_gone, text_scalar("t"), changes.column("op"))
    before = changes.column("before")
    columns[names.index("before")] = pc.if_else(was_gone, pa.nulls(1, before.type)[0], before)
    return pa.RecordBatch.from_arrays(columns, schema=changes.schema), schema_rows


def encode_messages(settings: KafkaSettings, changes: pa.RecordBatch,
                    encode: Encode | None = None):
    """(messages, the encoder used) of row changes: messages are (topics, keys, values,
    headers, tombstone after each); by column (:func:`batch_messages`) where the format
    allows, else row by row with ``encode`` (a task's :func:`row_encoder`, made once for
    all its batches; default: a new one)."""
    fewer_collections()
    messages = batch_messages(settings, changes)
    if messages is not None:
        return messages, encode
    encode = encode or row_encoder(settings)
    rows, router = changes.to_pylist(), TopicRouter(settings)
    keys, values, hdrs = [], [], []
    for row in rows:
        key, value, headers_ = encode(row)
        keys.append(key)
        values.append(value)
        hdrs.append(headers_)
    return ([router.topic(r) for r in rows], keys, values, hdrs,
            [settings.send_tombstones and r["op"] == "d" for r in rows]), encode


def transaction_tally(settings: KafkaSettings, changes: pa.RecordBatch) -> dict[str, TxnTally]:
    """The tally of ``changes``' transactions for the boundary records (none without a
    transaction topic)."""
    if not settings.transaction_topic:
        return {}
    return tally_transactions(changes.select(
        ["op", "txn_id", "seq", "ts_ms", "db", "table"]).to_pylist())


def encode_batch(settings: KafkaSettings, batch: pa.RecordBatch, encode: Encode | None = None):
    """One record batch made ready to send: (its row changes' messages, None when it holds
    none; the row changes; their transaction tally; the schema-change records left for
    the commit step; the encoder used, see :func:`encode_messages`)."""
    changes, schema_rows = split_schema_changes(settings, batch)
    tally = transaction_tally(settings, changes)
    if not changes.num_rows:
        return None, changes, tally, schema_rows, encode
    messages, encode = encode_messages(settings, changes, encode)
    return messages, changes, tally, schema_rows, encode


def publish_batch(settings: KafkaSettings, batch: pa.RecordBatch, encode: Encode | None = None
                  ) -> tuple[dict[str, TxnTally], list[dict], Encode | None]:
    """Deliver one record batch's row changes (in seq order) or raise; returns their
    transaction tally, the schema-change records left for the commit step, and the
    encoder used (see :func:`encode_messages`)."""
    if not batch.num_rows:
        return {}, [], encode
    messages, _, tally, schema_rows, encode = encode_batch(settings, batch, encode)
    if messages is not None:
        send_messages(settings, *messages)
    return tally, schema_rows, encode


_ENVELOPE_NAMES = frozenset(name for name, _, _ in ENVELOPE_FIELDS)


def batch_messages(settings: KafkaSettings, batch: pa.RecordBatch):
    """(topics, keys, values, headers, tombstone after) of ``batch``'s rows in the
    ``mysqlcdc`` format, the same bytes :func:`row_encoder` gives, built by Arrow a column
    at a time; None where that does not apply (another format, a topic, value or headers
    column)."""
    if settings.format != "mysqlcdc" or settings.topic_column or settings.value_column or \
            settings.headers_column or not _ENVELOPE_NAMES <= set(batch.schema.names):
        return None
    n = batch.num_rows
    values = pc.cast(envelope_json_lines(batch, newline=False), pa.binary()).to_pylist()
    keys = pc.cast(batch.column("key"), pa.binary()).to_pylist()
    router, db, table = TopicRouter(settings), batch.column("db"), batch.column("table")
    if pc.count_distinct(db, mode="all").as_py() == 1 and \
            pc.count_distinct(table, mode="all").as_py() == 1:
        topics = [router.topic({"db": db[0].as_py(), "table": table[0].as_py()})] * n
    else:
        topics = [router.topic({"db": d, "table": t})
                  for d, t in zip(db.to_pylist(), table.to_pylist())]
    ops = batch.column("op").to_pylist()
    headers = _batch_headers(batch, ops, settings.position_headers)
    tombstones = [op == "d" for op in ops] if settings.send_tombstones else [False] * n
    return topics, keys, values, headers, tombstones


def _batch_headers(batch: pa.RecordBatch, ops: list[str], position: bool) -> list:
    """Each row's headers as :func:`formats.headers` makes them (None: none), from cast
    columns."""
    n = batch.num_rows
    moved_none = batch.column("moved_key").null_count == n
    if not position:                 # the key-change headers alone, on a key change's halves
        if moved_none:
            return [None] * n
        moved = batch.column("moved_key").cast(pa.binary()).to_pylist()
        return [None if other is None else [(key_change_header(op), other)]
                for other, op in zip(moved, ops)]
    # as the row encoder's str(): a null seq, file, pos or row reads "None" (gtid and
    # moved_key are left out when null)
    text = [pc.cast(pc.fill_null(pc.cast(batch.column(c), pa.string()), text_scalar("None"))
                    if c not in ("gtid", "moved_key") else batch.column(c), pa.binary()
                    ).to_pylist() for c in ("seq", "file", "pos", "row", "gtid", "moved_key")]
    seqs, files, poss, rows, gtids, _ = text
    if moved_none and batch.column("gtid").null_count == 0:
        return [[("seq", a), ("file", b), ("pos", c), ("row", d), ("gtid", e)]
                for a, b, c, d, e in zip(seqs, files, poss, rows, gtids)]
    headers = []
    for seq, file, pos, row, gtid, other, op in zip(*text, ops):
        out = [("seq", seq), ("file", file), ("pos", pos), ("row", row)]
        if gtid is not None:
            out.append(("gtid", gtid))
        if other is not None:
            out.append((key_change_header(op), other))
        headers.append(out)
    return headers


def send_messages(settings: KafkaSettings, topics: list[str], keys: list, values: list,
                  headers: list, tombstones: list[bool]) -> None:
    """Deliver encoded messages in the order given (a tombstone after each flagged one),
    retried with a new producer; or raise."""
    fewer_collections()
    with_retries(settings, "publishing a batch",
                 lambda: _send_messages(settings, topics, keys, values, headers, tombstones),
                 lambda: _reset(settings))


def _send_messages(settings: KafkaSettings, topics: list[str], keys: list, values: list,
                   headers: list, tombstones: list[bool]) -> None:
    ensure_topics(settings, set(topics))
    producer = producer_for(settings)
    producer.send_all(topics, keys, values, headers, tombstones)
    producer.finish(settings.delivery_timeout_s + 5)


def row_encoder(settings: KafkaSettings) -> Encode:
    """(key, value, headers) of a row in the sink's format; where the row sets the
    ``value_column`` / ``headers_column`` a transform added, those instead."""
    encode = _format_encoder(settings)
    if settings.value_column is None and settings.headers_column is None:
        return encode
    return _with_columns(encode, settings.value_column, settings.headers_column,
                         settings.position_headers)


def _with_columns(encode: Encode, value_column: str | None,
                  headers_column: str | None, position: bool) -> Encode:
    """A row whose ``value_column`` holds text is sent as that text, keyed by the
    envelope's key (its ``after`` is no table row the format could encode, such as an
    outbox event's payload); ``headers_column``'s JSON object adds headers."""
    import orjson

    def encode_row(row: dict) -> tuple[bytes | None, bytes, list]:
        value = row.get(value_column) if value_column else None
        if value is not None:
            key, out, hdrs = encode_key(row), value.encode(), headers(row, None, position)
        else:
            key, out, hdrs = encode(row)
        extra = row.get(headers_column) if headers_column else None
        if extra:
            hdrs = (hdrs or []) + [
                (str(k), (v if isinstance(v, str) else orjson.dumps(v).decode()).encode())
                for k, v in orjson.loads(extra).items() if v is not None]
        return key, out, hdrs
    return encode_row


def _format_encoder(settings: KafkaSettings) -> Encode:
    if settings.format != "debezium":
        position = settings.position_headers
        return lambda row: (encode_key(row), mysqlcdc_value(row), headers(row, None, position))
    dbz = DebeziumEncoder(prefix=settings.prefix, schemas=settings.schemas,
                          modes=settings.modes,
                          definitions=HistoryDefinitions(settings.history_dir))
    now_ns, position = time.time_ns(), settings.position_headers

    def encode(row: dict) -> tuple[bytes | None, bytes, list]:
        moved = None if row.get("moved_key") is None else dbz.moved_key(row)
        return dbz.key(row), dbz.value(row, now_ns), headers(row, moved, position)
    return encode


def publish_commit(settings: KafkaSettings, record: CommitRecord,
                   txns: dict[str, TxnTally], schema_rows: list[dict] | None = None) -> None:
    """Schema changes and transaction boundaries (if enabled), then the commit record;
    all acknowledged."""
    with_retries(settings, "writing the commit log",
                 lambda: _send_commit(settings, record, txns, schema_rows or []),
                 lambda: _reset(settings))


def _boundary_wrap(settings: KafkaSettings):
    if settings.format != "debezium" or not settings.schemas:
        return None
    from orjson import dumps

    schemas = {"key": dumps(TXN_KEY).decode(), "value": dumps(TXN_VALUE).decode()}
    return lambda part, payload: (f'{{"schema":{schemas[part]},'
                                  f'"payload":{dumps(payload).decode()}}}').encode()


def _send_single(settings: KafkaSettings, template: str, messages: list) -> None:
    """``messages`` (key, value) to partition 0 of the one-partition topic ``template``."""
    if not messages:
        return
    topic = settings.resolve(template)
    ensure_topics(settings, [topic], partitions=1)
    producer = producer_for(settings)
    for key, value in messages:
        producer.send(topic, key, value, partition=0)
    producer.finish(settings.delivery_timeout_s + 5)


def _send_commit(settings: KafkaSettings, record: CommitRecord,
                 txns: dict[str, TxnTally], schema_rows: list[dict]) -> None:
    if settings.schema_change_topic:
        _send_single(settings, settings.schema_change_topic, schema_change_messages(
            schema_rows, format=settings.format, prefix=settings.prefix,
            schemas=settings.schemas, now_ms=int(time.time() * 1000),
            envelope_value=mysqlcdc_value))
    if settings.transaction_topic:
        _send_single(settings, settings.transaction_topic,
                     boundary_records(txns, _boundary_wrap(settings)))
    _send_single(settings, settings.commit_topic, [record.encode()])   # read from partition 0
