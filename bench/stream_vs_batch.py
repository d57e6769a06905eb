"""Streaming = batch? The same binlog range read by ``spark.read`` (bounded) and by
``spark.readStream`` under ``trigger(availableNow=True)``, both into Spark's ``noop``
sink, in one SparkSession, alternating.

For each workload of ``bench/workload.py`` the range is from the first event of
its binlog file to the server's position (later workloads' files are read too,
their rows filtered out, by both); the stream reads it with ``maxEventsPerBatch`` (default
50,000: the pipeline's default, so several bounded batches) and its target fixed
at the range's end by starting after the workload was written. Wall seconds of
each query, session start and one warm-up excluded.

    python bench/workload.py --rows 200000
    python bench/stream_vs_batch.py --rows 200000 --reps 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from server import OUT_DIR, BenchServer, data_dir_for  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--workloads", default="wide,narrow")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--max-events", type=int, default=50_000)
    ap.add_argument("--planning", choices=("tasks", "driver"), default="tasks",
                    help="the stream's planning mode (DESIGN.md decision 4)")
    args = ap.parse_args(argv)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from mysqlcdc.spark import build_session

    basedir = data_dir_for(args.rows, args.seed)
    manifest = json.loads((basedir / "manifest.json").read_text())
    server = BenchServer(basedir=basedir).start()
    spark = build_session("local[2]", "mysqlcdc-stream-vs-batch",
                          {"spark.sql.shuffle.partitions": "2"})
    results = []
    try:
        ids = iter(range(7900 + os.getpid() % 300 * 10, 10**6, 2))

        def opts(info: dict, **extra) -> dict:
            file = info["files"][0]
            return {"host": server.host, "port": str(server.port), "user": server.user,
                    "password": server.password, "serverId": str(next(ids)),
                    "startingPosition": f"{file}:4", "include": info["table"], **extra}

        def batch(info: dict) -> tuple[float, int]:
            df = spark.read.format("mysqlcdc").options(
                **opts(info, endingPosition="latest")).load()
            started = time.perf_counter()
            df.write.format("noop").mode("overwrite").save()
            return time.perf_counter() - started, -1

        def stream(info: dict) -> tuple[float, int]:
            with tempfile.TemporaryDirectory() as ck:
                # a schema-history folder, as every pipeline has: the read tasks then
                # find their batches' ends (planning=driver: the driver walks them)
                df = spark.readStream.format("mysqlcdc").options(**opts(
                    info, maxEventsPerBatch=str(args.max_events), planning=args.planning,
                    schemaHistory=str(Path(ck) / "history"))).load()
                started = time.perf_counter()
                q = (df.writeStream.format("noop").option("checkpointLocation", ck)
                     .trigger(availableNow=True).start())
                q.awaitTermination()
                seconds = time.perf_counter() - started
            if q.exception() is not None:
                raise q.exception()
            return seconds, len(q.recentProgress)

        warm = manifest["workloads"]["narrow"]
        batch(warm)
        for rep in range(args.reps):
            for workload in args.workloads.split(","):
                info = manifest["workloads"][workload]
                order = [("batch", batch), ("stream", stream)]
                for mode, fn in (order if rep % 2 == 0 else order[::-1]):
                    seconds, batches = fn(info)
                    r = {"workload": workload, "mode": mode, "rep": rep,
                         "seconds": round(seconds, 2), "rows": info["counts"]["total"],
                         "batches": batches}
                    results.append(r)
                    print(json.dumps(r), flush=True)
    finally:
        spark.stop()
        server.stop()
    print(f"\n{'workload':<8} {'batch s':>8} {'stream s':>9} {'stream/batch':>12}")
    for workload in args.workloads.split(","):
        b = statistics.median(r["seconds"] for r in results
                              if r["workload"] == workload and r["mode"] == "batch")
        s = statistics.median(r["seconds"] for r in results
                              if r["workload"] == workload and r["mode"] == "stream")
        print(f"{workload:<8} {b:>8.1f} {s:>9.1f} {s / b:>12.2f}")
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    out = OUT_DIR / f"stream-vs-batch-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps({"args": vars(args), "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
