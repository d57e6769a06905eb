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

    python bench/workload.py --rows 200000
    python bench/planner_bench.py --rows 200000 --reps 3
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--workloads", default="wide,narrow")
    ap.add_argument("--reps", type=int, default=1)
    args = ap.parse_args(argv)

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
