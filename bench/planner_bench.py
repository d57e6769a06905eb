"""The driver's share of a micro-batch, without Spark: CPU seconds of planning a
workload's whole binlog file as one batch against decoding it.

For each workload of ``bench/workload.py``, in one process, on a private mariadbd,
over the replication protocol, CPU time (``time.process_time``; the server runs in
another process):

* ``full-parse``: what the planner did before its header skim — every event
  through ``BinlogParser.parse`` (rows decoded) and ``TxnTracker``;
* ``skim``: ``RangePlanner.scan`` — the planner's batch scan today, schema keeper
  included;
* ``ddl-scan``: ``RangePlanner.ddl_scan`` — the schema bootstrap's walk (also in
  MB of binlog per wall second);
* ``decode``: ``capture.task.read_range`` — what the read task does with the range.

``--batches`` instead plans and reads the workload's file micro-batch by micro-batch
as the stream reader does (``maxEventsPerBatch``, default 50,000), in both planning
modes (``driver``: the driver walks each range first; ``tasks``: the read tasks find
their batch's end, ``capture.batchend``), and gives the driver's CPU per batch (every
planner call the stream reader makes: ``plan_end``, ``plan_tasks`` and resolving the
previous end) against the CPU of that batch's read tasks, with the largest share of
any one batch.

    python bench/workload.py --rows 200000
    python bench/planner_bench.py --rows 200000 --reps 3
    python bench/planner_bench.py --rows 200000 --batches --reps 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from server import OUT_DIR, BenchServer, data_dir_for  # noqa: E402

from mysqlcdc.binlog.parser import BinlogParser  # noqa: E402
from mysqlcdc.capture.planner import RangePlanner  # noqa: E402
from mysqlcdc.capture.server import list_binlogs  # noqa: E402
from mysqlcdc.capture.task import read_range  # noqa: E402
from mysqlcdc.capture.transactions import TxnTracker  # noqa: E402
from mysqlcdc.protocol.stream import ReplicationStream  # noqa: E402
from mysqlcdc.spark.options import SourceOptions  # noqa: E402
from mysqlcdc.types import BinlogPosition  # noqa: E402


def _full_parse(planner: RangePlanner, start: BinlogPosition, stop: BinlogPosition) -> int:
    parser, tracker, boundaries = BinlogParser(include=lambda d, t: False, file=start.file), \
        TxnTracker(), 0
    stream = ReplicationStream(planner.options.settings, server_id=planner.options.server_id,
                               start=start, stop_at=stop)
    try:
        for raw in stream:
            events = parser.parse(raw.data, raw.pos)
            if raw.artificial:
                continue
            if raw.file == stop.file and raw.pos >= stop.pos:
                break
            boundary = False
            for ev in events:
                boundary = tracker.observe(ev, raw.file, raw.pos)
            boundaries += boundary
    finally:
        stream.close()
    return boundaries


def _timed(fn) -> tuple[float, float, object]:
    cpu, wall = time.process_time(), time.perf_counter()
    out = fn()
    return time.process_time() - cpu, time.perf_counter() - wall, out


def _per_batch(server, info: dict, mode: str, max_events: int, parallelism: int,
               rep: int) -> dict:
    """Plan and read one workload file batch by batch; CPU seconds of the driver's calls
    and of the read tasks, per batch."""
    import tempfile

    start = BinlogPosition.of(info["files"][0], 4)
    with tempfile.TemporaryDirectory(prefix="mysqlcdc-plbench-") as folder:
        opts = SourceOptions.parse({
            "host": server.host, "port": str(server.port), "user": server.user,
            "password": server.password, "serverId": str(7500 + os.getpid() % 400 * 8),
            "startingPosition": str(start), "include": info["table"], "planning": mode,
            "schemaHistory": folder, "parallelism": str(parallelism)})
        planner = RangePlanner(opts)
        try:
            planner.keeper.ensure(start, planner.current(), planner.ddl_scan)  # not timed
            file = info["files"][-1]
            target = BinlogPosition.of(file, dict(list_binlogs(planner._sql()))[file])
            offset, driver, tasks, rows = {"file": start.file, "pos": start.pos}, [], [], 0
            while True:
                cpu = time.process_time()
                end = planner.plan_end(offset, max_events, target)
                if end == offset:
                    break
                planned = planner.plan_tasks(offset, end)
                driver.append(time.process_time() - cpu)
                cpu = time.process_time()
                rows += sum(b.num_rows for t in planned for b in read_range(t))
                tasks.append(time.process_time() - cpu)
                offset = end
            cpu = time.process_time()
            planner.position_of(offset)            # the last batch's end, as the next plan does
            driver[-1] += time.process_time() - cpu
        finally:
            planner.close()
    shares = [d / t for d, t in zip(driver, tasks) if t > 0]
    return {"workload": info["table"], "mode": mode, "rep": rep, "batches": len(driver),
            "rows": rows, "driver_cpu_s": round(sum(driver), 3),
            "tasks_cpu_s": round(sum(tasks), 3),
            "driver_share": round(sum(driver) / sum(tasks), 4),
            "max_batch_share": round(max(shares), 4)}


def batches_main(args) -> int:
    basedir = data_dir_for(args.rows, args.seed)
    manifest = json.loads((basedir / "manifest.json").read_text())
    server = BenchServer(basedir=basedir).start()
    results = []
    try:
        for rep in range(args.reps):
            modes = ("driver", "tasks") if rep % 2 == 0 else ("tasks", "driver")
            for workload in args.workloads.split(","):
                for mode in modes:
                    r = _per_batch(server, manifest["workloads"][workload], mode,
                                   args.max_events, args.parallelism, rep)
                    results.append(r)
                    print(json.dumps(r), flush=True)
    finally:
        server.stop()
    print(f"\n{'workload':<14} {'mode':<7} {'batches':>7} {'driver CPU s':>12} "
          f"{'tasks CPU s':>11} {'driver/tasks':>12} {'worst batch':>11}   (medians)")
    for workload in args.workloads.split(","):
        for mode in ("driver", "tasks"):
            rs = [r for r in results if r["workload"].endswith(workload) and r["mode"] == mode]
            med = {k: statistics.median(r[k] for r in rs)
                   for k in ("batches", "driver_cpu_s", "tasks_cpu_s", "driver_share",
                             "max_batch_share")}
            print(f"{workload:<14} {mode:<7} {med['batches']:>7.0f} {med['driver_cpu_s']:>12.3f} "
                  f"{med['tasks_cpu_s']:>11.2f} {med['driver_share']:>12.3f} "
                  f"{med['max_batch_share']:>11.3f}")
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    out = OUT_DIR / f"planner-batches-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps({"args": vars(args), "results": results}, indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--workloads", default="wide,narrow")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--batches", action="store_true",
                    help="the driver's CPU per micro-batch against its read tasks'")
    ap.add_argument("--max-events", type=int, default=50_000)
    ap.add_argument("--parallelism", type=int, default=1)
    args = ap.parse_args(argv)
    if args.batches:
        return batches_main(args)

    basedir = data_dir_for(args.rows, args.seed)
    manifest = json.loads((basedir / "manifest.json").read_text())
    server = BenchServer(basedir=basedir).start()
    results = []
    try:
        for rep in range(args.reps):
            for workload in args.workloads.split(","):
                info = manifest["workloads"][workload]
                file = info["files"][-1]
                start = BinlogPosition.of(info["files"][0], 4)
                opts = SourceOptions.parse({
                    "host": server.host, "port": str(server.port), "user": server.user,
                    "password": server.password, "serverId": str(7500 + os.getpid() % 400),
                    "startingPosition": str(start), "include": info["table"]})
                planner = RangePlanner(opts)
                try:
                    size = dict(list_binlogs(planner._sql()))[file]
                    stop = BinlogPosition.of(file, size)
                    planner.keeper.ensure(start, planner.current(), planner.ddl_scan)
                    row = {"workload": workload, "rep": rep, "mb": round(size / 1e6, 1)}
                    cpu, wall, _ = _timed(lambda: _full_parse(planner, start, stop))
                    row["full_parse_cpu_s"] = round(cpu, 2)
                    cpu, wall, scan = _timed(lambda: planner.scan(start, stop, None))
                    row["skim_cpu_s"], row["boundaries"] = round(cpu, 2), len(scan.boundaries)
                    cpu, wall, _ = _timed(lambda: planner.ddl_scan(start, stop,
                                                                   lambda f, p, e: None))
                    row["ddl_scan_cpu_s"] = round(cpu, 2)
                    row["ddl_scan_mb_per_s"] = round(size / 1e6 / wall)
                    [task] = planner.tasks(start, scan.end)
                    cpu, wall, rows = _timed(lambda: sum(b.num_rows for b in read_range(task)))
                    row["decode_cpu_s"], row["rows"] = round(cpu, 2), rows
                    row["skim_vs_decode"] = round(row["skim_cpu_s"] / row["decode_cpu_s"], 3)
                    row["full_parse_vs_decode"] = round(
                        row["full_parse_cpu_s"] / row["decode_cpu_s"], 3)
                finally:
                    planner.close()
                results.append(row)
                print(json.dumps(row), flush=True)
    finally:
        server.stop()
    print(f"\n{'workload':<8} {'MB':>6} {'full parse':>10} {'skim':>6} {'ddl scan':>8} "
          f"{'decode':>7} {'skim/decode':>11} {'ddl MB/s':>8}   (CPU s, medians)")
    for workload in args.workloads.split(","):
        rs = [r for r in results if r["workload"] == workload]
        med = {k: statistics.median(r[k] for r in rs) for k in rs[0] if k not in ("workload",)}
        print(f"{workload:<8} {med['mb']:>6.0f} {med['full_parse_cpu_s']:>10.2f} "
              f"{med['skim_cpu_s']:>6.2f} {med['ddl_scan_cpu_s']:>8.2f} "
              f"{med['decode_cpu_s']:>7.2f} {med['skim_vs_decode']:>11.3f} "
              f"{med['ddl_scan_mb_per_s']:>8.0f}")
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    out = OUT_DIR / f"planner-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps({"args": vars(args), "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
