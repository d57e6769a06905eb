"""Decoder hot-path timing on the benchmark binlogs, no server: for optimising.

Times ``capture.offline.iter_file_batches`` (``arrow``) or ``BinlogParser.parse``
(``parser``) over local binlog files on one core and prints rows per CPU second;
``--profile`` prints the cProfile top functions instead, ``--digest`` a SHA-256
of every envelope batch (Arrow IPC bytes) to check that a change leaves the
output byte-for-byte identical.

Table definitions come from a JSON file (a list of ``TableDef.to_json()``), so
no server is needed; ``--save-tables`` writes one from the workload's server.

    python bench/hotpath.py --save-tables /tmp/tables.json --small
    python bench/hotpath.py --tables /tmp/tables.json --workload wide --mode arrow
    python bench/hotpath.py --tables /tmp/tables.json --workload narrow --profile
    python bench/hotpath.py --tables /tmp/tables.json --workload wide --digest --all
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import json
import os
import pstats
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.append(str(BENCH_DIR.parent / "src"))   # appended: a PYTHONPATH copy wins


def load_defs(path: str) -> dict:
    from mysqlcdc.schema.model import TableDef

    defs = [TableDef.from_json(d) for d in json.loads(Path(path).read_text())]
    return {(t.db, t.name): t for t in defs}


def save_tables(path: str, basedir: Path) -> None:
    sys.path.insert(0, str(BENCH_DIR))
    from server import BenchServer

    from mysqlcdc.schema.introspect import load_tables

    server = BenchServer(basedir=basedir.resolve()).start()
    try:
        conn = server.connect()
        try:
            tables = load_tables(conn, lambda db, _t: db == "bench")
        finally:
            conn.close()
    finally:
        server.stop()
    Path(path).write_text(json.dumps([t.to_json() for t in tables.values()], indent=1))
    print(f"wrote {len(tables)} table definitions to {path}")


def run_arrow(paths: list[str], defs: dict, limit: int | None, digest) -> int:
    import pyarrow as pa

    from mysqlcdc.capture.offline import iter_file_batches

    rows = 0
    for batch in iter_file_batches(paths, tables=defs):
        rows += batch.num_rows
        if digest is not None:
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, batch.schema) as w:
                w.write_batch(batch)
            digest.update(sink.getvalue().to_pybytes())
        if limit is not None and rows >= limit:
            break
    return rows


def run_parser(paths: list[str], defs: dict, limit: int | None, digest) -> int:
    from mysqlcdc.binlog.events import RowsEvent
    from mysqlcdc.binlog.file import iter_binlog_file
    from mysqlcdc.binlog.parser import BinlogParser

    parser = BinlogParser(tables=lambda db, t: defs.get((db, t)))
    rows = 0
    for path in paths:
        for pos, raw in iter_binlog_file(path):
            for ev in parser.parse(raw, pos):
                if isinstance(ev, RowsEvent) and ev.rows:
                    rows += len(ev.rows)
                    if digest is not None:
                        digest.update(repr((ev.kind, ev.table, ev.rows)).encode())
            if limit is not None and rows >= limit:
                return rows
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tables", help="TableDef JSON list (see --save-tables)")
    ap.add_argument("--save-tables", metavar="PATH", help="write the workload's definitions and exit")
    ap.add_argument("--small", action="store_true", help="the 50k-row workload")
    ap.add_argument("--workload", default="wide", choices=("wide", "narrow"))
    ap.add_argument("--mode", default="arrow", choices=("arrow", "parser"))
    ap.add_argument("--limit", type=int, default=200_000, help="stop after N rows (default 200000)")
    ap.add_argument("--all", action="store_true", help="the whole file (no --limit)")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--digest", action="store_true")
    ap.add_argument("--cpu", type=int, default=None, help="pin to this core")
    args = ap.parse_args()

    basedir = BENCH_DIR / "data" / f"rows{50_000 if args.small else 1_000_000}-seed42"
    if args.save_tables:
        save_tables(args.save_tables, basedir)
        return
    if not args.tables:
        ap.error("--tables is required (write one with --save-tables)")
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    manifest = json.loads((basedir / "manifest.json").read_text())
    files = manifest["workloads"][args.workload]["files"]
    paths = [str(basedir / "data" / f) for f in files]
    defs = load_defs(args.tables)
    limit = None if args.all else args.limit
    import pandas  # noqa: F401  pyarrow imports it on its first conversion: not timed, as in compare.py
    import pyarrow.pandas_compat  # noqa: F401
    run = run_arrow if args.mode == "arrow" else run_parser
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        rows = run(paths, defs, limit, None)
        prof.disable()
        print(f"{rows} rows")
        pstats.Stats(prof).sort_stats("tottime").print_stats(30)
        return
    for _ in range(args.reps):
        digest = hashlib.sha256() if args.digest else None
        wall0, cpu0 = time.perf_counter(), time.process_time()
        rows = run(paths, defs, limit, digest)
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        line = (f"{args.workload} {args.mode}: {rows} rows, {rows / cpu:,.0f} rows/CPU s, "
                f"{rows / wall:,.0f} rows/s wall")
        if digest is not None:
            line += f", digest {digest.hexdigest()[:16]}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
