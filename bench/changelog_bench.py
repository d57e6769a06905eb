"""The changelog's two formats, end to end, side by side: `mysqlcdc run --until-idle`.

Throughput: for each workload (``bench/workload.py``), in the same run and
alternating, a whole ``mysqlcdc run PIPELINE.yaml --until-idle`` process reads the
workload's binlog from its first file (``include`` = its table) into a changelog of
``format: parquet`` and one of ``format: delta``. The whole process's wall seconds
(Spark's start-up included) and the rows each changelog ends with (they must be
equal) are printed, then the Delta/Parquet rate ratio, median of the pairs.

Trickle (``--trickle-s``): a private mariadbd receives ``--trickle-rate`` single-row
transactions per second over two tables for that long while two pipelines run with
the default 1-second trigger, one writing a Parquet changelog and one a Delta
changelog with ``compact_every``; afterwards the data files per partition of each are
counted (and the Delta table's changes checked against the source).

    .venv/bin/python bench/workload.py --rows 200000
    .venv/bin/python bench/changelog_bench.py --rows 200000 --reps 3
    .venv/bin/python bench/changelog_bench.py --rows 200000 --reps 0 --trickle-s 600
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from server import OUT_DIR, BenchServer, data_dir_for  # noqa: E402

FORMATS = ("parquet", "delta")


def _yaml(server, *, start: str, include: str, fmt: str, server_id: int, extra: str = "",
          trigger: str = "1 second", max_events: int = 50_000) -> str:
    return f"""
name: bench-{fmt}
source:
  host: {server.host}
  port: {server.port}
  user: {server.user}
  server_id: {server_id}
  start: "{start}"
  tables: {{include: ["{include}"]}}
  max_events_per_batch: {max_events}
spark:
  master: "local[2]"
  checkpoint: ./checkpoint
  trigger_interval: "{trigger}"
  conf: {{spark.sql.shuffle.partitions: "2", spark.ui.enabled: "false"}}
sinks:
  - changelog:
      path: ./changelog
      format: {fmt}{extra}
"""


def _env() -> dict:
    return {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}


def _rows(path: Path, fmt: str) -> int:
    if fmt == "delta":
        from deltalake import DeltaTable

        return DeltaTable(str(path)).to_pyarrow_dataset().count_rows()
    import pyarrow.dataset as ds

    return ds.dataset(str(path), format="parquet", partitioning="hive").count_rows()


def run_once(server, info: dict, fmt: str, server_id: int) -> dict:
    work = Path(tempfile.mkdtemp(prefix=f"clbench-{fmt}-"))
    try:
        config = work / "pipeline.yaml"
        config.write_text(_yaml(server, start=f"{info['files'][0]}:4", include=info["table"],
                                fmt=fmt, server_id=server_id))
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "mysqlcdc.cli.main", "run", str(config),
                               "--until-idle"], env=_env(), capture_output=True, text=True)
        wall = time.perf_counter() - started
        if done.returncode != 0:
            raise SystemExit(f"{fmt} run failed:\n{done.stdout[-2000:]}{done.stderr[-3000:]}")
        rows = _rows(work / "changelog", fmt)
        return {"format": fmt, "table": info["table"], "rows": rows, "wall_s": round(wall, 2),
                "rows_per_s": round(rows / wall)}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def throughput(args, manifest: dict, server) -> list[dict]:
    results = []
    for rep in range(args.reps):
        for workload in args.workloads.split(","):
            info = manifest["workloads"][workload]
            order = FORMATS if rep % 2 == 0 else tuple(reversed(FORMATS))
            pair = {}
            for i, fmt in enumerate(order):
                r = run_once(server, info, fmt, 7300 + rep * 4 + i)
                r["workload"] = workload
                print(json.dumps(r), flush=True)
                pair[fmt] = r
                results.append(r)
            assert pair["delta"]["rows"] == pair["parquet"]["rows"], pair
    return results


def trickle(args) -> dict:
    from mysqlcdc.pipeline.localserver import MariaDB

    work = Path(tempfile.mkdtemp(prefix="clbench-trickle-"))
    server = MariaDB().start()
    procs = {}
    try:
        server.sql("CREATE DATABASE shop",
                   "CREATE TABLE shop.orders (id INT PRIMARY KEY, note VARCHAR(40))",
                   "CREATE TABLE shop.items (id INT PRIMARY KEY, qty INT)")
        start = server.sql("SHOW MASTER STATUS")[0]
        for fmt, extra in (("parquet", ""), ("delta", f"\n      compact_every: {args.compact_every}"
                                                     "\n      vacuum_after: 0s")):
            folder = work / fmt
            folder.mkdir()
            (folder / "pipeline.yaml").write_text(
                _yaml(server, start=f"{start[0]}:{start[1]}", include="shop.*", fmt=fmt,
                      server_id=7400 + 10 * len(procs), extra=extra))
            log = open(folder / "run.log", "wb")
            procs[fmt] = subprocess.Popen(
                [sys.executable, "-m", "mysqlcdc.cli.main", "run", str(folder / "pipeline.yaml"), "--verbose"],
                env=_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        stop = threading.Event()
        written = {"n": 0}

        def write() -> None:
            conn = server.connect(autocommit=True)
            with conn.cursor() as cur:
                while not stop.is_set():
                    n = written["n"] = written["n"] + 1
                    if n % 2:
                        cur.execute("INSERT INTO shop.orders VALUES (%s, 'x')", (n,))
                    else:
                        cur.execute("INSERT INTO shop.items VALUES (%s, %s)", (n, n))
                    time.sleep(1.0 / args.trickle_rate)
            conn.close()

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        time.sleep(args.trickle_s)
        stop.set()
        writer.join()
        deadline = time.monotonic() + 180   # the last batches land
        while time.monotonic() < deadline:
            try:
                from deltalake import DeltaTable

                if DeltaTable(str(work / "delta" / "changelog")).to_pyarrow_dataset().count_rows() \
                        >= written["n"]:
                    break
            except Exception:  # noqa: BLE001 - not created yet
                pass
            time.sleep(1)
        time.sleep(3)
        for p in procs.values():
            os.killpg(p.pid, signal.SIGINT)
        for p in procs.values():
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
        OUT_DIR.mkdir(parents=True, exist_ok=True)
        for fmt in FORMATS:
            shutil.copy(work / fmt / "run.log", OUT_DIR / f"trickle-{fmt}.log")
        out = {"seconds": args.trickle_s, "changes": written["n"], "compact_every": args.compact_every}
        for fmt in FORMATS:
            root = work / fmt / "changelog"
            files = {}
            if fmt == "delta":
                from deltalake import DeltaTable

                dt = DeltaTable(str(root))
                for uri in dt.file_uris():
                    part = str(Path(uri).parent.relative_to(root))
                    files[part] = files.get(part, 0) + 1
                out["delta_rows"] = dt.to_pyarrow_dataset().count_rows()
            else:
                for p in root.rglob("*.parquet"):
                    part = str(p.parent.relative_to(root))
                    files[part] = files.get(part, 0) + 1
            out[f"{fmt}_files_per_partition"] = files
        return out
    finally:
        for p in procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


def report(results: list[dict]) -> str:
    lines = ["| workload | parquet rows/s | delta rows/s | delta / parquet (median of pairs) |",
             "|---|---:|---:|---:|"]
    for workload in sorted({r["workload"] for r in results}):
        rate = {f: [r["rows_per_s"] for r in results if r["workload"] == workload
                    and r["format"] == f] for f in FORMATS}
        ratios = [d / p for d, p in zip(rate["delta"], rate["parquet"])]
        lines.append(f"| {workload} | {statistics.median(rate['parquet']):,.0f} | "
                     f"{statistics.median(rate['delta']):,.0f} | {statistics.median(ratios):.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--workloads", default="wide,narrow")
    parser.add_argument("--trickle-s", type=float, default=0.0)
    parser.add_argument("--trickle-rate", type=float, default=10.0)
    parser.add_argument("--compact-every", default="60")
    parser.add_argument("--once", choices=FORMATS,
                        help="one run of this format on the first of --workloads (for timing "
                        "the whole command from outside)")
    args = parser.parse_args()
    if args.once:
        basedir = data_dir_for(args.rows, args.seed)
        manifest = json.loads((basedir / "manifest.json").read_text())
        server = BenchServer(basedir=basedir).start()
        try:
            info = manifest["workloads"][args.workloads.split(",")[0]]
            print(json.dumps(run_once(server, info, args.once, 7350)))
        finally:
            server.stop()
        return
    out: dict = {"rows": args.rows, "seed": args.seed, "cpus": os.cpu_count()}
    if args.reps:
        basedir = data_dir_for(args.rows, args.seed)
        manifest = json.loads((basedir / "manifest.json").read_text())
        server = BenchServer(basedir=basedir).start()
        try:
            out["results"] = throughput(args, manifest, server)
        finally:
            server.stop()
        print(report(out["results"]))
    if args.trickle_s:
        out["trickle"] = trickle(args)
        print(json.dumps(out["trickle"], indent=2))
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    path = OUT_DIR / f"changelog-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(out, indent=2))
    print(f"written: {path}")


if __name__ == "__main__":
    main()
