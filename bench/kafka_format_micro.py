"""The Kafka sink's per-row encoding cost, format by format, without Spark or a broker.

Rows are envelope records of the ``wide`` and ``narrow`` tables of ``bench/workload.py``
(values drawn like the workload's, every nullable column null one time in ten). Each
round encodes all rows once per format — key, value and headers as ``publish.py``
does — in turn (A B C D A B C D ...), and the CPU seconds of each pass are kept; the
report is the median over rounds and the ratio to the ``mysqlcdc`` format measured in
the same rounds.

    .venv/bin/python bench/kafka_format_micro.py --rows 20000 --rounds 7
"""

from __future__ import annotations

import argparse
import base64
import json
import random
import statistics
import sys
import time
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from mysqlcdc.schema.model import ColumnDef, TableDef  # noqa: E402
from mysqlcdc.sinks.kafka.debezium import TXN_ORDER, TXN_TABLE_ORDER, DebeziumEncoder  # noqa: E402
from mysqlcdc.sinks.kafka.formats import encode_key, headers, mysqlcdc_value  # noqa: E402
from mysqlcdc.sinks.kafka.typemap import Modes  # noqa: E402
from mysqlcdc.types import make_seq  # noqa: E402

WIDE = TableDef("bench", "wide", (
    ColumnDef("id", "bigint", is_primary_key=True, nullable=False),
    ColumnDef("c_tiny", "tinyint"), ColumnDef("c_small", "smallint"),
    ColumnDef("c_int", "int", nullable=False), ColumnDef("c_ubig", "bigint", unsigned=True),
    ColumnDef("c_dec", "decimal", precision=20, scale=6), ColumnDef("c_float", "float"),
    ColumnDef("c_double", "double"), ColumnDef("c_vc", "varchar", charset="utf8mb4", length=64),
    ColumnDef("c_text", "text", charset="utf8mb4"), ColumnDef("c_date", "date"),
    ColumnDef("c_dt", "datetime", fsp=6), ColumnDef("c_ts", "timestamp", fsp=3),
    ColumnDef("c_time", "time", fsp=3), ColumnDef("c_year", "year"),
    ColumnDef("c_enum", "enum", enum_values=("red", "green", "blue", "cyan")),
    ColumnDef("c_set", "set", set_values=("a", "b", "c", "d")), ColumnDef("c_bit", "bit", length=8),
    ColumnDef("c_blob", "blob", charset="binary")))
NARROW = TableDef("bench", "narrow", (
    ColumnDef("id", "int", is_primary_key=True, nullable=False),
    ColumnDef("val", "int", nullable=False), ColumnDef("name", "varchar", length=32)))


def _wide(r: random.Random, i: int) -> dict:
    def maybe(v):
        return None if r.random() < 0.1 else v
    return {
        "id": i, "c_tiny": maybe(r.randint(-128, 127)), "c_small": maybe(r.randint(-32768, 32767)),
        "c_int": r.randint(-2**31, 2**31 - 1), "c_ubig": maybe(r.randint(0, 2**64 - 1)),
        "c_dec": maybe(f"{r.randint(-10**13, 10**13)}.{r.randint(0, 999999):06d}"),
        "c_float": maybe(r.randint(-4000, 4000) / 4), "c_double": maybe(r.random() * 1e6),
        "c_vc": maybe("v" * r.randint(0, 60)), "c_text": maybe("t" * r.randint(20, 240)),
        "c_date": maybe(f"{r.randint(1970, 2030)}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}"),
        "c_dt": maybe(f"2024-02-{r.randint(1, 28):02d} 12:34:56.{r.randint(0, 999999):06d}"),
        "c_ts": maybe(f"2024-02-{r.randint(1, 28):02d}T12:34:56.{r.randint(0, 999):03d}Z"),
        "c_time": maybe(f"{r.randint(0, 23):02d}:{r.randint(0, 59):02d}:00.{r.randint(0, 999):03d}"),
        "c_year": maybe(r.randint(1901, 2155)), "c_enum": maybe(r.choice(["red", "blue"])),
        "c_set": maybe(r.sample(["a", "b", "c", "d"], r.randint(0, 4))),
        "c_bit": maybe(r.randint(0, 255)),
        "c_blob": maybe(base64.b64encode(r.randbytes(r.randint(0, 96))).decode()),
    }


def _narrow(r: random.Random, i: int) -> dict:
    return {"id": i, "val": r.randint(0, 10**6), "name": None if r.random() < 0.1 else "n" * 12}


def rows(table: TableDef, n: int, seed: int) -> list[dict]:
    r = random.Random(seed)
    make = _wide if table is WIDE else _narrow
    out = []
    for i in range(n):
        image = json.dumps(make(r, i), separators=(",", ":"), ensure_ascii=False)
        out.append({
            "op": "c", "db": table.db, "table": table.name, "before": None, "after": image,
            "key": f'{{"id":{i}}}', "ts_ms": 1_700_000_000_000, "server_id": 1,
            "gtid": f"0-1-{i // 4}", "txn_id": f"0-1-{i // 4}", "file": "mariadb-bin.000001",
            "pos": 4 + i // 4 * 100, "row": i % 4, "seq": Decimal(make_seq(1, 4 + i // 4 * 100, i % 4)),
            "query": None, "moved_key": None})
        out[-1]["_plain"] = dict(out[-1])
        out[-1].update({TXN_ORDER: i % 4 + 1, TXN_TABLE_ORDER: i % 4 + 1})
    return out


class Fixed:
    def __init__(self, definition: TableDef) -> None:
        self.definition = definition

    def at(self, db, table, file, pos):
        return self.definition


def encoders(table: TableDef) -> dict:
    def dbz(schemas: bool, txn: bool):
        enc = DebeziumEncoder(prefix="bench", schemas=schemas, modes=Modes(),
                              definitions=Fixed(table))

        def encode(row):
            if not txn:      # as without the transaction topic: no orders, null block
                row = row["_plain"]
            return enc.key(row), enc.value(row, 1_700_000_000_000_000_000), headers(row)
        return encode
    return {
        "mysqlcdc": lambda row: (encode_key(row), mysqlcdc_value(row), headers(row)),
        "debezium bare": dbz(False, False),
        "debezium schemas": dbz(True, False),
        "debezium schemas+txn": dbz(True, True),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args()
    print("| table | format | rows | median CPU s | rows/CPU-s | x mysqlcdc | bytes/row |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for table in (WIDE, NARROW):
        data = rows(table, args.rows, args.seed)
        encs = encoders(table)
        times: dict[str, list[float]] = {name: [] for name in encs}
        size = {}
        for name, enc in encs.items():          # warm-up: caches, codecs
            size[name] = sum(len(k or b"") + len(v) for k, v, _ in map(enc, data)) / len(data)
        for _ in range(args.rounds):
            for name, enc in encs.items():
                t0 = time.process_time()
                for row in data:
                    enc(row)
                times[name].append(time.process_time() - t0)
        base = statistics.median(times["mysqlcdc"])
        for name, t in times.items():
            med = statistics.median(t)
            print(f"| {table.name} | {name} | {len(data):,} | {med:.3f} | {len(data) / med:,.0f} "
                  f"| {med / base:.2f} | {size[name]:,.0f} |")


if __name__ == "__main__":
    main()
