"""Every consumer rebuilds every table exactly.

A snapshot, then a random workload (inserts, updates, deletes, NULLs, every column type,
primary-key changes of one row and of many rows at once, a key swap, a composite key
shifting onto itself, a table without a key swapping values in one statement) is
captured by one pipeline into a Parquet changelog, a Kafka topic set in Debezium's
format (schemas on, transaction metadata on) and one in the mysqlcdc format. Then:

* the changelog's current-state query,
* a consumer that applies each topic per key in order,
* a consumer that reads only the last message of each key (what compaction keeps;
  a tombstone or a delete removes the key),
* Pathway's own Debezium reader (``pw.io.debezium.read``, written elsewhere),

each equal ``SELECT *`` of the source, table by table; and the transaction blocks of
the Debezium events agree with the BEGIN/END records.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict

import pytest

from mysqlcdc.sinks.changelog import current_state_sql
from tests.support import cdc_workload as w
from tests.support.kafka import read_topic
from tests.support.pathway_consumer import run_pathway

pytestmark = pytest.mark.e2e

TABLES = (w.ALLT, w.ALLNN, w.PK2, w.NOPK)
# Pathway's Debezium reader takes no NULL and no struct (spatial) value; see
# tests/support/pathway_consumer.py. It reads the tables that have neither.
PATHWAY_TABLES = (w.ALLNN, w.PK2, w.NOPK)


def _config(mariadb, kafka, db: str, tmp_path):
    from mysqlcdc.config import load_pipeline_from_dict

    kafka_common = {"bootstrap_servers": kafka.bootstrap, "delivery_timeout_s": 20,
                    "partitions": 3, "write_tasks": 2}
    return load_pipeline_from_dict({
        "name": db.replace("_", "-"),
        "source": {"host": mariadb.host, "port": mariadb.port, "user": mariadb.user,
                   "server_id": 3500 + 10 * int(db.rsplit("_", 1)[-1]), "start": "latest",
                   "tables": {"include": [f"{db}.*"]}, "max_events_per_batch": 300,
                   "parallelism": 2, "snapshot": {"chunk_rows": 8}},
        "spark": {"checkpoint": str(tmp_path / "ck"), "trigger_interval": "200 milliseconds"},
        "sinks": [
            {"changelog": {"path": str(tmp_path / "changelog")}},
            # BIGINT UNSIGNED: Debezium's default `long` mode turns values past 2^63-1
            # negative (documented); an exact copy needs `precise`
            {"kafka": {**kafka_common, "format": "debezium", "topic_prefix": f"{db}-dbz",
                       "transaction_topic": "{prefix}.transaction",
                       "bigint_unsigned_handling_mode": "precise"}},
            {"kafka": {**kafka_common, "topic_prefix": f"{db}-own"}},
        ],
    })


def _messages(kafka, topic: str) -> list[tuple[bytes, dict | None]]:
    """(key, value) of every message, partitions one after the other (a key lives in one)."""
    out = []
    for msgs in read_topic(kafka.bootstrap, topic).values():
        out += [(m.key(), None if m.value() is None else json.loads(m.value())) for m in msgs]
    return out


def _by_row_key(table: str, rows) -> dict[tuple, dict]:
    return {w.row_key(table, r): r for r in rows}


def _same(got: dict[tuple, dict], want: dict[tuple, dict], what: str) -> None:
    """``got == want``, or a message naming the keys and columns that differ."""
    if got == want:
        return
    diffs = [f"missing {k}" for k in want.keys() - got.keys()]
    diffs += [f"extra {k}" for k in got.keys() - want.keys()]
    for k in want.keys() & got.keys():
        diffs += [f"{k}.{c}: {got[k].get(c)!r} != {v!r}" for c, v in want[k].items()
                  if got[k].get(c) != v]
    raise AssertionError(f"{what}: " + "; ".join(diffs[:12]))


def _debezium_decoder(table: str, value: dict) -> dict:
    payload, envelope = value["payload"], value["schema"]
    after_schema = next(f for f in envelope["fields"] if f["field"] == "after")
    return w.from_debezium(table, payload["after"], after_schema)


def _dbz(messages):
    """Debezium messages with schemas as (key, payload-with-decoding) for the consumers."""
    return [(k, None if v is None else {"op": v["payload"]["op"], "_v": v}) for k, v in messages]


def test_every_consumer_rebuilds_every_table(spark, mariadb, kafka, fresh_db, tmp_path):
    from mysqlcdc.pipeline.runner import run_pipeline

    rnd = random.Random(19)
    conn = mariadb.connect(database=fresh_db, autocommit=False)
    try:
        with conn.cursor() as cur:
            w.create_tables(cur, fresh_db)
        w.seed(conn, fresh_db, rnd)
        cfg = _config(mariadb, kafka, fresh_db, tmp_path)
        run_pipeline(cfg, until_idle=True, spark=spark)          # the snapshot
        w.random_workload(conn, fresh_db, rnd, txns=120)
        run_pipeline(cfg, until_idle=True, spark=spark)          # the binlog from there
        source = {t: w.select_rows(conn, fresh_db, t) for t in TABLES}
    finally:
        conn.close()
    assert all(len(source[t]) > 10 for t in TABLES)

    log = spark.read.parquet(str(tmp_path / "changelog"))
    log.createOrReplaceTempView("consumers_log")
    for table in TABLES:
        rows = spark.sql(current_state_sql("consumers_log", fresh_db, table)).collect()
        _same(_by_row_key(table, (w.from_envelope(table, json.loads(r["row"])) for r in rows)),
              source[table], f"changelog current state of {table}")

    dbz = {t: _dbz(_messages(kafka, f"{fresh_db}-dbz.{fresh_db}.{t}")) for t in TABLES}
    own = {t: _messages(kafka, f"{fresh_db}-own.{fresh_db}.{t}") for t in TABLES}
    for table in TABLES:
        decode_dbz = lambda v: _debezium_decoder(table, v["_v"])   # noqa: E731
        decode_own = lambda v: w.from_envelope(table, v["after"])  # noqa: E731
        for name, rebuilt in (
                ("debezium per key", w.apply_per_key(dbz[table], decode_dbz)),
                ("debezium last per key", w.last_per_key(dbz[table], decode_dbz)),
                ("mysqlcdc per key", w.apply_per_key(own[table], decode_own)),
                ("mysqlcdc last per key", w.last_per_key(own[table], decode_own))):
            _same(_by_row_key(table, rebuilt.values()), source[table], f"{name}: {table}")

    moves = [v for _, v in dbz[w.ALLT] if v is not None and v["op"] == "d"]
    assert moves, "the workload deleted and moved rows"
    tombstones = sum(1 for _, v in dbz[w.ALLT] if v is None)
    assert tombstones == len(moves), "a tombstone after every delete, moved keys included"
    _transactions_agree(kafka, fresh_db, dbz)

    rebuilt = run_pathway(kafka.bootstrap,
                          {t: f"{fresh_db}-dbz.{fresh_db}.{t}" for t in PATHWAY_TABLES},
                          tmp_path / "pathway", {t: len(source[t]) for t in PATHWAY_TABLES})
    for table in PATHWAY_TABLES:
        schema = next(v["_v"]["schema"] for _, v in dbz[table] if v is not None)
        after = next(f for f in schema["fields"] if f["field"] == "after")
        rows = [w.from_debezium(table, r, after) for r in rebuilt[table]]
        _same(_by_row_key(table, rows), source[table], f"pathway: {table}")


def _transactions_agree(kafka, db: str, dbz: dict) -> None:
    """Each transaction's events are numbered 1..N overall and 1..n per table, and the
    END record counts N and n; snapshot reads carry no transaction."""
    orders: dict[str, list[int]] = defaultdict(list)
    per_table: dict[tuple[str, str], list[int]] = defaultdict(list)
    for table, messages in dbz.items():
        for _, v in messages:
            if v is None:
                continue
            payload = v["_v"]["payload"]
            txn = payload["transaction"]
            if payload["op"] == "r":
                assert txn is None
                continue
            orders[txn["id"]].append(txn["total_order"])
            per_table[(txn["id"], f"{db}.{table}")].append(txn["data_collection_order"])
    assert orders, "the workload's events carry transaction blocks"
    for n in orders.values():
        assert sorted(n) == list(range(1, len(n) + 1))
    for n in per_table.values():
        assert sorted(n) == list(range(1, len(n) + 1))
    boundaries = [v["payload"] for _, v in _messages(kafka, f"{db}-dbz.transaction")]
    ends = {b["id"]: b for b in boundaries if b["status"] == "END"}
    begins = [b["id"] for b in boundaries if b["status"] == "BEGIN"]
    assert sorted(begins) == sorted(ends) == sorted(orders)
    for txn, end in ends.items():
        assert end["event_count"] == len(orders[txn])
        assert {c["data_collection"]: c["event_count"] for c in end["data_collections"]} == \
            {t: len(n) for (i, t), n in per_table.items() if i == txn}
