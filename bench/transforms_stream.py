"""What transforms cost inside one SparkSession: the same binlog range streamed again and again.

``bench/transforms_bench.py`` times whole ``mysqlcdc run`` processes, Spark's start-up
included, as the issue asks; on a busy machine those minutes-long runs drift a lot. This
one keeps one SparkSession and streams each workload's range
(``trigger(availableNow=True)``, ``max_events_per_batch`` 50,000) into Spark's ``noop``
sink with each variant in turn, the order rotating every repetition:

* ``none``: no transform;
* ``builtins``: mask + hash + filter (the chain of ``transforms_bench.py``);
* ``python``: a per-event python function changing one field, typed values on.

Wall seconds of each query from start to end (no session start-up); per variant the
median, and the cost against ``none`` of the same repetition (median of reps).

    .venv/bin/python bench/workload.py --rows 200000
    .venv/bin/python bench/transforms_stream.py --rows 200000 --reps 5
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from server import OUT_DIR, BenchServer, data_dir_for  # noqa: E402
from transforms_bench import COLUMNS, USER_CODE, VARIANTS  # noqa: E402


def _chain(variant: str, workload: str, table: str, history: str):
    from mysqlcdc.transforms.builtins import Filter, Hash, Mask
    from mysqlcdc.transforms.chain import Chain
    from mysqlcdc.transforms.python import PythonTransform

    masked, hashed, field, _ = COLUMNS[workload]
    if variant == "none":
        return None
    if variant == "python":
        return Chain([PythonTransform(f"{_module(workload)}:touch_one_field")],
                     history_dir=history)
    return Chain([Mask([f"{table}.{masked}"], keep_last=4),
                  Hash([f"{table}.{hashed}"], salt="bench-salt"),
                  Filter(keep=f"after.{field} is not None or op == 'd'")], history_dir=history)


def _module(workload: str) -> str:
    """One module name per workload: Spark refuses a second addPyFile of the same file
    name with other contents, and the touched column differs between workloads."""
    return f"bench_user_code_{workload}"


def run_once(spark, server, info: dict, workload: str, variant: str, server_id: int) -> float:
    from mysqlcdc.spark.transforms import load_transformed

    work = Path(tempfile.mkdtemp(prefix=f"trstream-{variant}-"))
    try:
        options = {"host": server.host, "port": str(server.port), "user": server.user,
                   "password": server.password, "serverId": str(server_id),
                   "startingPosition": f"{info['files'][0]}:4", "include": info["table"],
                   "maxEventsPerBatch": "50000", "schemaHistory": str(work / "history")}
        chain = _chain(variant, workload, info["table"], str(work / "history"))
        query = (load_transformed(spark, options, chain).writeStream.format("noop")
                 .option("checkpointLocation", str(work / "ck"))
                 .trigger(availableNow=True).start())
        started = time.perf_counter()
        query.awaitTermination()
        if query.exception() is not None:
            raise SystemExit(f"{variant}: {query.exception()}")
        return time.perf_counter() - started
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--workloads", default="wide,narrow")
    args = parser.parse_args()
    from mysqlcdc.spark import build_session
    from mysqlcdc.spark.transforms import ship_user_code

    basedir = data_dir_for(args.rows, args.seed)
    manifest = json.loads((basedir / "manifest.json").read_text())
    server = BenchServer(basedir=basedir).start()
    code = Path(tempfile.mkdtemp(prefix="trstream-code-"))
    results = []
    try:
        spark = build_session("local[2]", "transforms-stream",
                              {"spark.sql.shuffle.partitions": "2"})
        for workload in args.workloads.split(","):
            info = manifest["workloads"][workload]
            module = code / f"{_module(workload)}.py"
            module.write_text(USER_CODE.replace("{column}", COLUMNS[workload][3]))
            sys.path.insert(0, str(module.parent))
            ship_user_code(spark, [str(module)])
            run_once(spark, server, info, workload, "none", 7700)          # warm-up
            for rep in range(args.reps):
                order = VARIANTS[rep % 3:] + VARIANTS[:rep % 3]
                for i, variant in enumerate(order):
                    seconds = run_once(spark, server, info, workload, variant,
                                       7710 + 4 * (rep * 3 + i))
                    r = {"workload": workload, "variant": variant, "rep": rep,
                         "seconds": round(seconds, 2)}
                    print(json.dumps(r), flush=True)
                    results.append(r)
            sys.path.remove(str(module.parent))
    finally:
        server.stop()
        shutil.rmtree(code, ignore_errors=True)
    print(report(results))
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    path = OUT_DIR / f"transforms-stream-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(results, indent=2))
    print(f"written: {path}")


def report(results: list[dict]) -> str:
    lines = ["| workload | variant | median s | cost vs none (median of reps) |",
             "|---|---|---:|---:|"]
    for workload in sorted({r["workload"] for r in results}):
        mine = [r for r in results if r["workload"] == workload]
        base = {r["rep"]: r["seconds"] for r in mine if r["variant"] == "none"}
        for variant in VARIANTS:
            runs = [r for r in mine if r["variant"] == variant]
            costs = [1 - base[r["rep"]] / r["seconds"] for r in runs]   # rate lost
            lines.append(f"| {workload} | {variant} | "
                         f"{statistics.median(r['seconds'] for r in runs):.1f} | "
                         f"{statistics.median(costs):+.1%} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
