"""The whole product, timed as a user runs it: ``mysqlcdc run PIPELINE.yaml --until-idle``.

For each workload of ``bench/workload.py`` (``wide``, ``narrow``) and each source
tree given with ``--src NAME=PATH`` (so an older commit's ``src/`` and this one's
alternate in the same run, on the same server), one fresh pipeline (new
checkpoint) captures the workload's table from the first event of its binlog file
into a Parquet changelog; the whole ``mysqlcdc run`` process is timed: wall
seconds, and the CPU seconds of it and every descendant (the JVM, the Python
workers and the driver-side source runner), sampled from /proc every 0.25 s. Rows are counted in the
changelog afterwards. Results go to ``bench/out/pipeline-<time>.json``.

    python bench/workload.py --rows 200000
    python bench/pipeline_bench.py --rows 200000 --reps 2 \\
        --src before=/path/to/old/checkout/src --src after=src

``--start earliest`` starts at the server's first binlog instead (what a
``start: earliest`` pipeline pays for the schema-history bootstrap).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from server import OUT_DIR, REPO_ROOT, BenchServer, data_dir_for  # noqa: E402

_YAML = """\
name: bench-{workload}
source:
  host: {host}
  port: {port}
  user: {user}
  server_id: {server_id}
  start: "{start}"
  tables:
    include: ["{table}"]
  max_events_per_batch: {max_events}
  parallelism: {parallelism}
spark:
  master: "local[2]"
  trigger_interval: "0 seconds"
  checkpoint: ./checkpoint
  conf: {{spark.sql.shuffle.partitions: 2}}
sinks:
  - changelog:
      path: ./changelog
"""


def _rows(changelog: Path) -> int:
    import pyarrow.dataset as ds

    if not changelog.exists():
        return 0
    return ds.dataset(str(changelog), format="parquet", partitioning="hive").count_rows()


def run_once(server: BenchServer, src: Path, workload: str, info: dict,
             args: argparse.Namespace, server_id: int) -> dict:
    start = "earliest" if args.start == "earliest" else f"{info['files'][0]}:4"
    with tempfile.TemporaryDirectory(prefix="mysqlcdc-pbench-") as tmp:
        cfg = Path(tmp) / "pipeline.yaml"
        cfg.write_text(_YAML.format(
            workload=workload, host=server.host, port=server.port, user=server.user,
            server_id=server_id, start=start, table=info["table"],
            max_events=args.max_events, parallelism=args.parallelism))
        env = {**os.environ, "PYTHONPATH": f"{src}:{REPO_ROOT}",
               "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
        started = time.perf_counter()
        with open(Path(tmp) / "stderr.txt", "w+") as err:
            proc = subprocess.Popen([sys.executable, "-m", "mysqlcdc.cli.main", "run",
                                     str(cfg), "--until-idle"], env=env, cwd=tmp,
                                    stdout=subprocess.DEVNULL, stderr=err)
            cpu: dict[int, tuple[str, float]] = {}
            while proc.poll() is None:
                _sample(proc.pid, cpu)
                time.sleep(0.25)
            seconds = time.perf_counter() - started
            if proc.returncode != 0:
                err.seek(0)
                raise SystemExit(f"mysqlcdc run failed ({proc.returncode}):\n"
                                 f"{err.read()[-4000:]}")
        rows = _rows(Path(tmp) / "changelog")
    roles: dict[str, float] = {}
    for role, seconds_cpu in cpu.values():
        roles[role] = roles.get(role, 0.0) + seconds_cpu
    return {"workload": workload, "rows": rows, "seconds": round(seconds, 2),
            "cpu_s": round(sum(roles.values()), 2),
            "cpu_by_process": {k: round(v, 2) for k, v in sorted(roles.items())},
            "rows_per_s": round(rows / seconds)}


_TICK = os.sysconf("SC_CLK_TCK")


def _sample(root: int, seen: dict[int, tuple[str, float]]) -> set[int]:
    """CPU seconds so far of ``root`` and every descendant (sampled: a process that
    lives less than a sampling interval is missed); returns the tree's pids now (a pid
    seen earlier may since belong to another process: pids are reused)."""
    stats: dict[int, tuple[int, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        stats[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICK)
    tree, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, _) in stats.items():
            if ppid == parent and pid not in tree:
                tree.add(pid)
                frontier.append(pid)
    for pid in tree:
        if pid in stats:
            role = _role(pid, root)      # again each time: a launcher may exec the JVM
            if role is None:             # exited, not yet reaped: as it was while it ran
                role = seen[pid][0] if pid in seen else "other"
            seen[pid] = (role, stats[pid][1])
    return tree & set(stats)


def _role(pid: int, root: int) -> str | None:
    """What process ``pid`` is (None: it exited; a zombie has no command line)."""
    if pid == root:
        return "cli"
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None
    if not cmd:
        return None
    if "java" in cmd.split(" ", 1)[0]:
        return "jvm"
    if "mysqlcdc.pipeline.ahead" in cmd:
        return "decode-ahead"
    return "source-runner" if "streaming_source_runner" in cmd else "python-workers"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--workloads", default="wide,narrow")
    ap.add_argument("--src", action="append", default=[],
                    help="NAME=PATH of a src/ tree to run (repeatable); default: this tree")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--max-events", type=int, default=50_000)
    ap.add_argument("--parallelism", type=int, default=1)
    ap.add_argument("--start", choices=("file", "earliest"), default="file")
    args = ap.parse_args(argv)

    srcs = [tuple(s.split("=", 1)) for s in args.src] or [("this", str(REPO_ROOT / "src"))]
    basedir = data_dir_for(args.rows, args.seed)
    manifest = json.loads((basedir / "manifest.json").read_text())
    server = BenchServer(basedir=basedir).start()
    results = []
    try:
        for rep in range(args.reps):
            order = srcs if rep % 2 == 0 else srcs[::-1]
            for workload in args.workloads.split(","):
                for name, src in order:
                    r = run_once(server, Path(src).resolve(), workload,
                                 manifest["workloads"][workload], args,
                                 7300 + os.getpid() % 500 * 4)
                    r.update(src=name, rep=rep)
                    results.append(r)
                    print(json.dumps(r), flush=True)
    finally:
        server.stop()
    print(f"\n{'src':<10} {'workload':<8} {'rows':>8} {'wall s':>8} {'cpu s':>8} {'rows/s':>8}")
    for name, _ in srcs:
        for workload in args.workloads.split(","):
            rs = [r for r in results if r["src"] == name and r["workload"] == workload]
            if rs:
                wall = statistics.median(r["seconds"] for r in rs)
                cpu = statistics.median(r["cpu_s"] for r in rs)
                print(f"{name:<10} {workload:<8} {rs[0]['rows']:>8} {wall:>8.1f} {cpu:>8.1f} "
                      f"{rs[0]['rows'] / wall:>8.0f}")
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    out = OUT_DIR / f"pipeline-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps({"args": vars(args), "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
