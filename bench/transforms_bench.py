"""What transforms cost end to end: whole `mysqlcdc run --until-idle` processes, side by side.

For each workload (``bench/workload.py``), in the same run and alternating (the order
rotates every repetition), one whole ``mysqlcdc run PIPELINE.yaml --until-idle`` process
reads the workload's binlog from its first file into a Parquet changelog with:

* ``none``: no transform (the baseline);
* ``builtins``: ``mask`` + ``hash`` + ``filter``: mask a text column (keep the last 4),
  hash another with a salt, and a filter whose predicate reads an image field (it keeps
  every row, so the sink writes as much as the baseline);
* ``python``: a user python function per event that changes one field of ``after``.

The wall seconds of each whole process (Spark's start-up included) and the rows each
changelog holds (equal across variants) are printed; then, per workload and variant, the
median rate and the cost against the baseline of the same repetition
(1 - variant rate / baseline rate, median over repetitions).

    .venv/bin/python bench/workload.py --rows 200000
    .venv/bin/python bench/transforms_bench.py --rows 200000 --reps 3
    .venv/bin/python bench/transforms_bench.py --rows 200000 --once builtins --workloads narrow
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from server import OUT_DIR, BenchServer, data_dir_for  # noqa: E402

VARIANTS = ("none", "builtins", "python")

# per workload: (masked column, hashed column, a NOT NULL column for the predicate, the
# column the python function changes)
COLUMNS = {"wide": ("c_vc", "c_text", "c_int", "c_vc"),
           "narrow": ("name", "val", "val", "name")}

USER_CODE = textwrap.dedent('''
    def touch_one_field(event):
        """Change one field of the new image (the text column), nothing else."""
        after = event["after"]
        if after is not None and after.get("{column}") is not None:
            after["{column}"] = after["{column}"].upper()
        return event
''')


def _transforms(variant: str, workload: str, table: str) -> str:
    masked, hashed, field, touched = COLUMNS[workload]
    if variant == "none":
        return ""
    if variant == "python":
        return """
transforms_path: [./code]
transforms:
  - python: {function: "bench_user_code:touch_one_field"}
"""
    return f"""
transforms:
  - mask: {{columns: ["{table}.{masked}"], keep_last: 4}}
  - hash: {{columns: ["{table}.{hashed}"], salt_env: BENCH_SALT}}
  - filter: {{keep: "after.{field} is not None or op == 'd'"}}
"""


def _yaml(server, *, start: str, table: str, workload: str, variant: str, server_id: int) -> str:
    return f"""
name: bench-{variant}
source:
  host: {server.host}
  port: {server.port}
  user: {server.user}
  server_id: {server_id}
  start: "{start}"
  tables: {{include: ["{table}"]}}
  max_events_per_batch: 50000
spark:
  master: "local[2]"
  checkpoint: ./checkpoint
  trigger_interval: "1 second"
  conf: {{spark.sql.shuffle.partitions: "2", spark.ui.enabled: "false"}}
{_transforms(variant, workload, table)}
sinks:
  - changelog:
      path: ./changelog
"""


def _env() -> dict:
    return {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
            "BENCH_SALT": "bench-salt"}


def _rows(path: Path) -> int:
    import pyarrow.dataset as ds

    return ds.dataset(str(path), format="parquet", partitioning="hive").count_rows()


def run_once(server, info: dict, workload: str, variant: str, server_id: int) -> dict:
    work = Path(tempfile.mkdtemp(prefix=f"trbench-{variant}-"))
    try:
        (work / "code").mkdir()
        (work / "code" / "bench_user_code.py").write_text(
            USER_CODE.replace("{column}", COLUMNS[workload][3]))
        config = work / "pipeline.yaml"
        config.write_text(_yaml(server, start=f"{info['files'][0]}:4", table=info["table"],
                                workload=workload, variant=variant, server_id=server_id))
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "mysqlcdc.cli.main", "run", str(config),
                               "--until-idle"], env=_env(), capture_output=True, text=True)
        wall = time.perf_counter() - started
        if done.returncode != 0:
            raise SystemExit(f"{variant} run failed:\n{done.stdout[-2000:]}{done.stderr[-3000:]}")
        rows = _rows(work / "changelog")
        return {"workload": workload, "variant": variant, "rows": rows,
                "wall_s": round(wall, 2), "rows_per_s": round(rows / wall)}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def throughput(args, manifest: dict, server) -> list[dict]:
    results = []
    for rep in range(args.reps):
        for workload in args.workloads.split(","):
            info = manifest["workloads"][workload]
            shift = rep % len(VARIANTS)
            order = VARIANTS[shift:] + VARIANTS[:shift]
            counts = set()
            for i, variant in enumerate(order):
                r = run_once(server, info, workload, variant, 7600 + rep * 8 + i * 2)
                r["rep"] = rep
                print(json.dumps(r), flush=True)
                counts.add(r["rows"])
                results.append(r)
            assert len(counts) == 1, f"variants wrote different row counts: {counts}"
    return results


def report(results: list[dict]) -> str:
    lines = ["| workload | variant | median rows/s | median wall s | cost vs none (median of reps) |",
             "|---|---|---:|---:|---:|"]
    for workload in sorted({r["workload"] for r in results}):
        mine = [r for r in results if r["workload"] == workload]
        base = {r["rep"]: r["rows_per_s"] for r in mine if r["variant"] == "none"}
        for variant in VARIANTS:
            runs = [r for r in mine if r["variant"] == variant]
            costs = [1 - r["rows_per_s"] / base[r["rep"]] for r in runs]
            lines.append(f"| {workload} | {variant} | "
                         f"{statistics.median(r['rows_per_s'] for r in runs):,.0f} | "
                         f"{statistics.median(r['wall_s'] for r in runs):.1f} | "
                         f"{statistics.median(costs):+.1%} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--workloads", default="wide,narrow")
    parser.add_argument("--once", choices=VARIANTS,
                        help="one run of this variant on the first of --workloads (for timing "
                        "the whole command from outside)")
    args = parser.parse_args()
    basedir = data_dir_for(args.rows, args.seed)
    manifest = json.loads((basedir / "manifest.json").read_text())
    server = BenchServer(basedir=basedir).start()
    try:
        if args.once:
            workload = args.workloads.split(",")[0]
            print(json.dumps(run_once(server, manifest["workloads"][workload], workload,
                                      args.once, 7650)))
            return
        results = throughput(args, manifest, server)
    finally:
        server.stop()
    print(report(results))
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    path = OUT_DIR / f"transforms-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps({"rows": args.rows, "seed": args.seed, "results": results},
                               indent=2))
    print(f"written: {path}")


if __name__ == "__main__":
    main()
