"""Binlog -> Kafka end to end, next to decode-only, through the same Spark streaming query.

For each workload (``wide``, ``narrow`` from ``bench/workload.py``) and mode, one
streaming query with ``trigger(availableNow=True)`` reads the workload's binlog
from its first file (``include`` = its table) on a private mariadbd and:

* ``decode``   writes to Spark's ``noop`` sink: decode + envelope + Spark, no delivery;
* ``shuffle``  the same after the Kafka sink's repartition by key: the cost of ordering;
* ``kafka``    publishes with the Kafka sink (``mysqlcdc`` JSON, idempotent, acks=all)
               to a Tansu broker (``KAFKA_BOOTSTRAP`` to use another), including the
               per-batch commit-log record; messages are counted afterwards.

The rate is row changes / wall seconds of the query (session start and one warm-up
query excluded, the first batch's planning included). Results go to ``bench/out/kafka-<time>.json``.

    .venv/bin/python bench/kafka_bench.py --small          # 50k rows per workload
    .venv/bin/python bench/kafka_bench.py --reps 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from server import OUT_DIR, REPO_ROOT, BenchServer, data_dir_for  # noqa: E402

sys.path.insert(0, str(REPO_ROOT))
from tests.support.kafka import Broker  # noqa: E402

MODES = ("decode", "shuffle", "kafka")


def _source(spark, server: BenchServer, info: dict, args: argparse.Namespace):
    opts = {"host": server.host, "port": str(server.port), "user": server.user,
            "password": server.password, "serverId": str(7100 + os.getpid() % 500 * 4),
            "startingPosition": f"{info['files'][0]}:4", "include": info["table"],
            "maxEventsPerBatch": str(args.max_events), "parallelism": str(args.parallelism)}
    return spark.readStream.format("mysqlcdc").options(**opts).load()


def _query(mode: str, df, ck: str, broker: Broker, prefix: str, tasks: int):
    from mysqlcdc.sinks.kafka import KafkaSettings, start_kafka

    if mode == "kafka":
        settings = KafkaSettings(producer={"bootstrap.servers": broker.bootstrap},
                                 prefix=prefix, pipeline=prefix)
        return start_kafka(df, settings, checkpoint=ck, write_tasks=tasks, available_now=True)
    if mode == "shuffle":
        df = df.repartition(tasks, "db", "table", "key")
    return (df.writeStream.format("noop").option("checkpointLocation", ck)
            .trigger(availableNow=True).start())


def run_once(spark, server, broker, workload: str, info: dict, mode: str,
             args: argparse.Namespace) -> dict:
    prefix = f"bench{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as ck:
        started = time.perf_counter()
        query = _query(mode, _source(spark, server, info, args), ck, broker, prefix, args.tasks)
        query.awaitTermination()
        seconds = time.perf_counter() - started
    if query.exception() is not None:
        raise query.exception()
    rows = sum(p["numInputRows"] for p in query.recentProgress)
    result = {"workload": workload, "mode": mode, "rows": rows, "seconds": round(seconds, 2),
              "rows_per_s": round(rows / seconds), "batches": len(query.recentProgress)}
    if mode == "kafka":
        result["messages"] = _count_messages(broker, f"{prefix}.{info['table']}")
    return result


def _count_messages(broker: Broker, topic: str) -> int:
    from tests.support.kafka import read_topic

    return sum(len(m) for m in read_topic(broker.bootstrap, topic, timeout_s=300).values())


def report(results: list[dict]) -> str:
    lines = ["| workload | mode | rows | median s | median rows/s | x decode |",
             "|---|---|---:|---:|---:|---:|"]
    med = {}
    for (w, m) in sorted({(r["workload"], r["mode"]) for r in results},
                         key=lambda k: (k[0], MODES.index(k[1]))):
        runs = [r for r in results if (r["workload"], r["mode"]) == (w, m)]
        med[w, m] = statistics.median(r["rows_per_s"] for r in runs)
        ratio = med[w, m] / med[w, "decode"] if (w, "decode") in med else float("nan")
        lines.append(f"| {w} | {m} | {runs[0]['rows']:,} | "
                     f"{statistics.median(r['seconds'] for r in runs):.1f} | "
                     f"{med[w, m]:,.0f} | {ratio:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--small", action="store_true", help="the 50k-row workload")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--workloads", default="wide,narrow")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--tasks", type=int, default=2, help="Kafka write tasks")
    parser.add_argument("--parallelism", type=int, default=1, help="decode tasks per batch")
    parser.add_argument("--max-events", type=int, default=50_000)
    args = parser.parse_args()
    rows = 50_000 if args.small else args.rows
    basedir = data_dir_for(rows, args.seed)
    manifest = json.loads((basedir / "manifest.json").read_text())

    from mysqlcdc.spark import build_session

    server = BenchServer(basedir=basedir).start()
    broker = Broker(os.environ.get("KAFKA_BOOTSTRAP") or None).start()
    spark = build_session(args.master, "kafka-bench", {"spark.sql.shuffle.partitions": "2"})
    results = []
    try:   # warm-up: JVM, Python workers and the page cache; not reported
        run_once(spark, server, broker, "narrow", manifest["workloads"]["narrow"], "decode", args)
        for rep in range(args.reps):
            for workload in args.workloads.split(","):
                info = manifest["workloads"][workload]
                for mode in args.modes.split(","):
                    r = run_once(spark, server, broker, workload, info, mode, args)
                    print(json.dumps(r), flush=True)
                    results.append(r)
    finally:
        spark.stop()
        broker.kill()
        server.stop()
    out = {"rows": rows, "seed": args.seed, "master": args.master, "tasks": args.tasks,
           "parallelism": args.parallelism, "cpus": os.cpu_count(), "results": results}
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    path = OUT_DIR / f"kafka-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(out, indent=2))
    print(report(results))
    print(f"written: {path}")


if __name__ == "__main__":
    main()
