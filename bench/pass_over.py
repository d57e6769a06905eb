"""Transactions of tables a pipeline does not capture: decoded one by one, or passed over
by the replication stream (DESIGN.md decision 27). Decoder-only numbers.

``read_range`` (one process, one core, the replication protocol) reads one workload's
binlog file with a filter that captures only the *other* workload's table, so that
every transaction in it is of a table not captured, with ``MYSQLCDC_PASS_OVER=1``
(the default) and ``=0`` in alternating pairs; then the same file with its own table
captured (nothing to pass over: what the check costs). Prints each pair's CPU and wall
ratio and their medians.

    python bench/pass_over.py --rows 1000000 --pairs 6
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compare import run_worker  # noqa: E402
from server import BenchServer  # noqa: E402
from workload import DEFAULT_SEED, ensure_workload  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--cpu", type=int, default=0)
    args = ap.parse_args()
    args.peer_limit, args.src_dir = None, Path(__file__).resolve().parents[1] / "src"
    basedir, manifest = ensure_workload(args.rows, args.seed, reuse=True)
    workloads = manifest["workloads"]
    cases = [("narrow file, wide table captured", "narrow", workloads["wide"]["table"]),
             ("wide file, narrow table captured", "wide", workloads["narrow"]["table"]),
             ("narrow file, its own table captured", "narrow", workloads["narrow"]["table"])]
    server = BenchServer(basedir=basedir).start()
    ids = iter(range(31000, 10**9))
    try:
        for label, files_of, table in cases:
            info = {**workloads[files_of], "table": table}
            pairs = []
            for i in range(args.pairs):
                run = {}
                for mode in (("1", "0") if i % 2 == 0 else ("0", "1")):
                    os.environ["MYSQLCDC_PASS_OVER"] = mode
                    run[mode] = run_worker(("mysqlcdc", "stream"), files_of, info, server, args,
                                           next(ids))
                pairs.append((run["1"]["cpu_seconds"] / run["0"]["cpu_seconds"],
                              run["1"]["seconds"] / run["0"]["seconds"],
                              run["1"]["cpu_seconds"], run["0"]["cpu_seconds"], run["1"]["rows"]))
            cpu = statistics.median(p[0] for p in pairs)
            wall = statistics.median(p[1] for p in pairs)
            print(f"{label}: passed ÷ decoded, CPU {cpu:.3f} (pairs "
                  f"{', '.join(f'{p[0]:.3f}' for p in pairs)}), wall {wall:.3f}; CPU s "
                  f"{statistics.median(p[2] for p in pairs):.2f} against "
                  f"{statistics.median(p[3] for p in pairs):.2f}; rows {pairs[0][4]:,}", flush=True)
    finally:
        os.environ.pop("MYSQLCDC_PASS_OVER", None)
        server.stop()


if __name__ == "__main__":
    main()
