"""mysqlcdc against python-mysql-replication, on the same binlog, in the same run.

For each workload (``wide``, ``narrow``; see workload.py) and each repetition,
every tool decodes the workload's binlog file(s) in a subprocess of its own,
pinned to ONE core; the order of the tools alternates between repetitions so
neither always runs on a warmer (or noisier) machine. Reported: rows/s per
run, the median per tool, and the ratio of medians mysqlcdc / peer.

Tools:

* ``peer``: python-mysql-replication (``pymysqlreplication``) 1.0.17, the way
  its users run it: ``BinLogStreamReader`` over the replication protocol from
  the private server, ``only_events`` = the three rows events, touching every
  row's values. Column names come from information_schema (the server writes
  no optional metadata), through its ``use_column_name_cache`` option, which
  asks once per table instead of leaving the columns named ``UNKNOWN_COL<n>``.
  Without optional metadata it also does not know a BLOB is binary and
  decodes it as UTF-8, which raises on the first non-UTF-8 byte; it runs with
  ``ignore_decode_errors=True`` (lossy: invalid bytes dropped), the only way
  it gets through the wide table.
* ``mysqlcdc``, in one or more modes (``--mysqlcdc-modes``), each labelled
  in the output and stored with every number:
  ``arrow`` — the product way for files: local binlog files -> envelope Arrow
  record batches (``capture.offline.iter_file_batches``), the default;
  ``stream`` — the product way for a live server, the same path as the peer:
  replication protocol -> envelope Arrow batches (``capture.task.read_range``);
  ``parser`` — local files -> ``BinlogParser.parse`` only (rows decoded to
  dicts, no envelope), the default while ``capture.offline`` does not exist.

``--peer-limit N`` times every tool on the first N row changes of the
workload only (python-mysql-replication decodes a few thousand wide rows per
second); the prefix is the same for every tool, and the output says so. A
tool stops at the first event (peer) or batch (mysqlcdc) boundary at or after
N rows and its rate counts every row it delivered; the per-op counts compared
between tools are over exactly the first N rows.

Timing is wall-clock inside the worker, from before connecting / opening the
files to after the last row, so interpreter start-up and imports are out (the
worker imports what the tool uses before starting the clock, pandas included,
which pyarrow would otherwise import on its first conversion) and schema
loading is in. CPU time of the worker is recorded too. The server the
peer reads from is pinned to the other core(s).

    python bench/compare.py --small
    python bench/compare.py --peer-limit 200000 --reps 3
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from server import OUT_DIR, REPO_ROOT, BenchServer, compile_bytecode  # noqa: E402
from workload import DEFAULT_ROWS, DEFAULT_SEED, SMALL_ROWS, ensure_workload  # noqa: E402

PEER = "python-mysql-replication"
OPS = ("insert", "update", "delete")


# =========================================================================== workers
# Each runs in its own subprocess, pinned to one core, and prints one JSON line.

class RowTally:
    """Rows delivered, and per-op counts over exactly the first ``limit`` rows."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.rows = 0
        self.counts = dict.fromkeys(OPS, 0)

    def add(self, op: str, n: int) -> None:
        counted = n if self.limit is None else max(0, min(n, self.limit - self.rows))
        self.counts[op] += counted
        self.rows += n

    @property
    def done(self) -> bool:
        return self.limit is not None and self.rows >= self.limit


def run_peer(args: argparse.Namespace) -> dict:
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    op_of = {WriteRowsEvent: "insert", UpdateRowsEvent: "update", DeleteRowsEvent: "delete"}
    files = set(args.files)
    tally = RowTally(args.limit)
    settings = {"host": "127.0.0.1", "port": args.port, "user": "root", "passwd": ""}
    stream = BinLogStreamReader(
        connection_settings=settings, server_id=args.server_id,
        log_file=args.files[0], log_pos=4, resume_stream=True, blocking=False,
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
        use_column_name_cache=True,
        ignore_decode_errors=True,
    )
    try:
        for event in stream:
            if stream.log_file not in files:
                break
            n = 0
            for row in event.rows:
                values = row.get("values") or row["after_values"]
                n += values is not None
            tally.add(op_of[type(event)], n)
            if tally.done:
                break
    finally:
        stream.close()
    return {"tool": PEER, "mode": "replication protocol -> row dicts", "tally": tally}


MYSQLCDC_MODES = ("arrow", "stream", "parser")


def run_mysqlcdc(args: argparse.Namespace) -> dict:
    measure = {"arrow": _mysqlcdc_arrow, "stream": _mysqlcdc_stream, "parser": _mysqlcdc_parser}
    return {"tool": f"mysqlcdc/{args.mode}", "mode": MODE_LABELS[args.mode], "tally": measure[args.mode](args)}


MODE_LABELS = {
    "arrow": "local binlog files -> envelope Arrow batches (capture.offline.iter_file_batches)",
    "stream": "replication protocol -> envelope Arrow batches (capture.task.read_range)",
    "parser": "local binlog files -> parser only, row dicts, no envelope (BinlogParser.parse)",
}


def default_mysqlcdc_modes() -> list[str]:
    """The product path (files -> Arrow) when it exists, else the parser alone."""
    try:
        import mysqlcdc.capture.offline  # noqa: F401
        return ["arrow"]
    except ImportError:
        return ["parser"]


def _tables_and_filter(args: argparse.Namespace):
    import pymysql

    from mysqlcdc.capture.filters import TableFilter
    from mysqlcdc.schema.introspect import load_tables

    include = TableFilter((args.table,))
    conn = pymysql.connect(host="127.0.0.1", port=args.port, user="root", password="")
    try:
        return load_tables(conn, include), include
    finally:
        conn.close()


def _tally_batches(batches, tally: RowTally) -> RowTally:
    import pyarrow.compute as pc

    op_name = {"c": "insert", "u": "update", "d": "delete"}
    limit = tally.limit
    for batch in batches:
        ops = batch.column("op")
        if limit is not None:
            ops = ops.slice(0, max(0, limit - tally.rows))
        for item in pc.value_counts(ops).to_pylist():
            tally.counts[op_name[item["values"]]] += item["counts"]
        tally.rows += batch.num_rows
        if tally.done:
            break
    return tally


def _mysqlcdc_arrow(args: argparse.Namespace) -> RowTally:
    from mysqlcdc.capture.offline import iter_file_batches

    tables, include = _tables_and_filter(args)
    paths = [str(Path(args.datadir) / f) for f in args.files]
    return _tally_batches(iter_file_batches(paths, tables=tables, include=include), RowTally(args.limit))


def _mysqlcdc_stream(args: argparse.Namespace) -> RowTally:
    from mysqlcdc.capture.task import RangeTask, read_range
    from mysqlcdc.protocol.connection import ConnectionSettings
    from mysqlcdc.types import BinlogPosition

    tables, include = _tables_and_filter(args)
    task = RangeTask(
        settings=ConnectionSettings("127.0.0.1", port=args.port, user="root"),
        server_id=args.server_id,
        start=BinlogPosition.of(args.files[0], 4),
        # the file after the workload's last one, or where the caller says (e2e.py: the
        # server's end, the range its pipelines read)
        end=BinlogPosition.of(args.end_file, args.end_pos),
        tables=include,
        definitions=tables,
    )
    batches = read_range(task)
    try:
        return _tally_batches(batches, RowTally(args.limit))
    finally:
        batches.close()


def _mysqlcdc_parser(args: argparse.Namespace) -> RowTally:
    from mysqlcdc.binlog.events import RowsEvent
    from mysqlcdc.binlog.file import iter_binlog_file
    from mysqlcdc.binlog.parser import BinlogParser

    op_name = {"c": "insert", "u": "update", "d": "delete"}
    tally = RowTally(args.limit)
    tables, include = _tables_and_filter(args)
    parser = BinlogParser(tables=lambda db, t: tables.get((db, t)), include=include)
    for name in args.files:
        for _pos, raw in iter_binlog_file(str(Path(args.datadir) / name)):
            for event in parser.parse(raw):
                if isinstance(event, RowsEvent) and event.rows:
                    n = 0
                    for before, after in event.rows:
                        n += (after or before) is not None
                    tally.add(op_name[event.kind], n)
            if tally.done:
                return tally
    return tally


_PRELOAD = {
    "peer": ("pymysqlreplication", "pymysqlreplication.row_event"),
    "arrow": ("mysqlcdc.capture.offline",),
    "stream": ("mysqlcdc.capture.task", "mysqlcdc.protocol.connection", "mysqlcdc.types"),
    "parser": ("mysqlcdc.binlog.events", "mysqlcdc.binlog.file", "mysqlcdc.binlog.parser"),
}
_MYSQLCDC_PRELOAD = ("pymysql", "mysqlcdc.capture.filters", "mysqlcdc.schema.introspect",
                     "pyarrow.compute", "pandas", "pyarrow.pandas_compat")


def preload(args: argparse.Namespace) -> list[str]:
    """Import what the measured code imports, before the clock starts ("imports
    excluded"). pyarrow imports pandas lazily, on its first conversion of a Python
    list (about 0.3 s): that is an import too."""
    names = _PRELOAD["peer" if args.worker == "peer" else args.mode]
    if args.worker != "peer":
        names += _MYSQLCDC_PRELOAD
    loaded = []
    for name in names:
        try:
            importlib.import_module(name)
            loaded.append(name)
        except ImportError:          # an older commit without the module: imported when used
            pass
    return loaded


def worker_main(args: argparse.Namespace) -> None:
    os.sched_setaffinity(0, {args.cpu})
    run = run_peer if args.worker == "peer" else run_mysqlcdc
    preloaded = preload(args)
    wall0, cpu0 = time.perf_counter(), time.process_time()
    result = run(args)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    tally = result.pop("tally")
    result["preloaded"] = preloaded
    if args.worker == "mysqlcdc":
        import mysqlcdc
        result["imported_from"] = str(Path(mysqlcdc.__file__).parent)
    print(json.dumps({**result, "rows": tally.rows, "counts": tally.counts,
                      "seconds": wall, "cpu_seconds": cpu, "limit": args.limit}))


# =========================================================================== orchestration

def run_worker(tool: tuple[str, str | None], workload: str, info: dict, server: BenchServer,
               args: argparse.Namespace, server_id: int) -> dict:
    kind, mode = tool
    cmd = [sys.executable, __file__, "--worker", kind, "--cpu", str(args.cpu),
           "--port", str(server.port), "--datadir", str(server.datadir),
           "--table", info["table"], "--server-id", str(server_id),
           "--end-file", info.get("end_file") or next_binlog(info["files"][-1]),
           "--end-pos", str(info.get("end_pos", 4)), "--files", *info["files"]]
    if args.peer_limit:
        cmd += ["--limit", str(args.peer_limit)]
    if mode:
        cmd += ["--mode", mode]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(args.src_dir), str(REPO_ROOT)])}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{kind} {mode or ''} worker failed on {workload}:\n{proc.stderr[-4000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["rows_per_s"] = result["rows"] / result["seconds"]
    result["rows_per_cpu_s"] = result["rows"] / result["cpu_seconds"]
    return result


def mysqlcdc_source(args: argparse.Namespace) -> dict:
    """Where the workers import mysqlcdc from; sets ``args.src_dir``.

    Other engineers edit the working tree while benchmarks run. With
    ``--src-commit REV`` the workers import ``src/`` exported from that commit
    (``git archive``, into ``bench/out/src-<sha>/``), so a published number
    belongs to one commit; without it they import the working tree, and the
    files modified there are recorded.
    """
    if not args.src_commit:
        args.src_dir = REPO_ROOT / "src"
        dirty = _git("status", "--porcelain", "--", "src").splitlines()
        return {"source": "working tree", "commit": _git("rev-parse", "HEAD"), "uncommitted_src_changes": dirty}
    sha = _git("rev-parse", "--verify", f"{args.src_commit}^{{commit}}")
    dest = OUT_DIR / f"src-{sha[:12]}"
    if not (dest / "src" / "mysqlcdc").is_dir():
        dest.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", str(REPO_ROOT), "archive", sha, "src"],
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    args.src_dir = dest / "src"
    compile_bytecode(args.src_dir)
    return {"source": "git archive", "commit": sha, "path": str(args.src_dir.relative_to(REPO_ROOT))}


def next_binlog(name: str) -> str:
    """``mariadb-bin.000002`` -> ``mariadb-bin.000003`` (the workload's end position is its pos 4)."""
    base, _, number = name.rpartition(".")
    return f"{base}.{int(number) + 1:0{len(number)}d}"


def warm_page_cache(datadir: Path, files: list[str]) -> None:
    """Both tools read the same files (the peer through the server): read them once first."""
    for name in files:
        with open(datadir / name, "rb") as f:
            while f.read(16 << 20):
                pass


def expected_counts(info: dict, limit: int | None) -> dict | None:
    """The manifest's counts when a tool reads the whole workload; None for a prefix."""
    if limit is not None and limit < info["counts"]["total"]:
        return None
    return {op: info["counts"][op] for op in OPS}


def check_counts(workload: str, runs: list[dict], expected: dict | None) -> list[str]:
    problems = []
    reference = expected or runs[0]["counts"]
    for run in runs:
        if run["counts"] != reference:
            what = "the manifest" if expected else f"{runs[0]['tool']}'s"
            problems.append(f"{workload}: {run['tool']} counted {run['counts']}, {what} {reference}")
    return problems


def summarize(workload: str, info: dict, runs: list[dict], limit: int | None) -> dict:
    by_tool: dict[str, list[dict]] = {}
    for run in runs:
        by_tool.setdefault(run["tool"], []).append(run)
    tools = {}
    for tool, rs in by_tool.items():
        tools[tool] = {
            "mode": rs[0]["mode"],
            "rows": rs[0]["rows"],
            "rows_per_s": [round(r["rows_per_s"]) for r in rs],
            "median_rows_per_s": round(statistics.median(r["rows_per_s"] for r in rs)),
            "median_rows_per_cpu_s": round(statistics.median(r["rows_per_cpu_s"] for r in rs)),
        }
    total = info["counts"]["total"]
    summary = {
        "table": info["table"], "files": info["files"], "bytes": info["bytes"],
        "workload_row_changes": total,
        "measured_row_changes": limit if limit and limit < total else total,
        "tools": tools,
        "ratios_over_peer": {},
        "cpu_ratios_over_peer": {},
        "count_problems": check_counts(workload, runs, expected_counts(info, limit)),
    }
    peer = tools.get(PEER)
    for tool, t in tools.items():
        if peer and tool != PEER:
            summary["ratios_over_peer"][tool] = round(t["median_rows_per_s"] / peer["median_rows_per_s"], 2)
            summary["cpu_ratios_over_peer"][tool] = round(
                t["median_rows_per_cpu_s"] / peer["median_rows_per_cpu_s"], 2)
    return summary


def print_table(result: dict) -> None:
    limit = result["peer_limit"]
    print()
    print(f"mysqlcdc vs {PEER} — one core each (cpu {result['cpu']}), {result['reps']} repetitions, "
          f"median rows/s, same binlog, same run")
    src = result["mysqlcdc_source"]
    if src["source"] == "git archive":
        print(f"mysqlcdc as of commit {src['commit'][:12]} ({src['path']})")
    else:
        print(f"mysqlcdc from the working tree at {src['commit'][:12]}, "
              f"{len(src['uncommitted_src_changes'])} uncommitted change(s) under src/")
    if limit:
        print(f"NOTE: --peer-limit {limit}: every tool timed on the first {limit:,} row changes "
              f"of each workload only (same prefix for all)")
    head = (f"{'workload':<8} {'rows':>9} {'file MB':>7} {'tool':<16} {'rows/s':>9} "
            f"{'x peer':>7} {'x peer (cpu)':>12}")
    print(head)
    print("-" * len(head))
    for name, s in result["workloads"].items():
        for tool, t in s["tools"].items():
            print(f"{name:<8} {s['measured_row_changes']:>9,} {s['bytes'] / 1e6:>7.1f} "
                  f"{_short(tool):<16} {t['median_rows_per_s']:>9,} "
                  f"{s['ratios_over_peer'].get(tool, ''):>7} {s['cpu_ratios_over_peer'].get(tool, ''):>12}")
    print()
    for name, s in result["workloads"].items():
        for tool, t in s["tools"].items():
            print(f"  {name} {tool}: runs {t['rows_per_s']} rows/s — {t['mode']}")
        for problem in s["count_problems"]:
            print(f"  COUNT MISMATCH {problem}")


def _short(tool: str) -> str:
    return "peer" if tool == PEER else tool


def orchestrate(args: argparse.Namespace) -> dict:
    basedir, manifest = ensure_workload(args.rows, args.seed, reuse=True)
    modes = args.mysqlcdc_modes or default_mysqlcdc_modes()
    tools: list[tuple[str, str | None]] = [("peer", None)] if "peer" in args.tools else []
    if "mysqlcdc" in args.tools:
        tools += [("mysqlcdc", m) for m in modes]
    server = BenchServer(basedir=basedir).start()
    others = set(range(os.cpu_count() or 1)) - {args.cpu}
    if others:
        server.pin(others)
    result = {
        "started_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "host": {"cpus": os.cpu_count(), "machine": platform.machine(), "python": platform.python_version(),
                 "note": "shared, noisy machine: compare ratios from the same run only"},
        "command": " ".join(["bench/compare.py", *sys.argv[1:]]),
        "mysqlcdc_source": mysqlcdc_source(args), "cpu": args.cpu, "reps": args.reps, "peer_limit": args.peer_limit,
        "manifest": {k: manifest[k] for k in ("rows", "seed", "server_version", "generation_seconds")},
        "workloads": {},
    }
    server_ids = iter(range(1000, 100000))
    try:
        for name in args.workloads:
            info = manifest["workloads"][name]
            warm_page_cache(server.datadir, info["files"])
            runs = []
            for rep in range(args.reps):
                for tool in (tools if rep % 2 == 0 else tools[::-1]):
                    run = run_worker(tool, name, info, server, args, next(server_ids))
                    run["rep"] = rep
                    runs.append(run)
                    print(f"  {name} rep {rep + 1}/{args.reps} {run['tool']:<24}: {run['rows']:,} rows "
                          f"in {run['seconds']:.1f} s = {run['rows_per_s']:,.0f} rows/s", flush=True)
            result["workloads"][name] = summarize(name, info, runs, args.peer_limit)
            result["workloads"][name]["runs"] = runs
    finally:
        server.stop()
    return result


def _git(*argv: str) -> str:
    out = subprocess.run(["git", "-C", str(REPO_ROOT), *argv], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def write_result(result: dict) -> Path:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    stamp = result["started_at"].replace(":", "").replace("+0000", "Z")
    path = OUT_DIR / f"compare-{stamp}.json"
    text = json.dumps(result, indent=2) + "\n"
    path.write_text(text)
    (OUT_DIR / "latest.json").write_text(text)
    return path


def _modes(text: str) -> list[str]:
    modes = [m.strip() for m in text.split(",") if m.strip()]
    unknown = set(modes) - set(MYSQLCDC_MODES)
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown mode(s) {sorted(unknown)}; choose from {MYSQLCDC_MODES}")
    return modes


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=DEFAULT_ROWS, help="which generated workload (row changes per table)")
    ap.add_argument("--small", action="store_true", help=f"use the --small workload ({SMALL_ROWS} rows)")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--peer-limit", type=int, default=None, metavar="ROWS",
                    help="time every tool on the first ROWS row changes of each workload only")
    ap.add_argument("--workloads", default="wide,narrow", type=lambda s: s.split(","))
    ap.add_argument("--tools", default="peer,mysqlcdc", type=lambda s: s.split(","))
    ap.add_argument("--mysqlcdc-modes", default=None, type=_modes,
                    help="comma-separated, any of arrow,stream,parser (default: arrow when "
                    "capture.offline exists, else parser)")
    ap.add_argument("--cpu", type=int, default=0, help="the one core every measured tool runs on")
    ap.add_argument("--src-commit", metavar="REV", default=None,
                    help="measure mysqlcdc as of this commit (git archive of src/), not the working tree")
    # worker-only arguments
    ap.add_argument("--worker", choices=("peer", "mysqlcdc"), help=argparse.SUPPRESS)
    ap.add_argument("--mode", choices=MYSQLCDC_MODES, help=argparse.SUPPRESS)
    ap.add_argument("--end-file", help=argparse.SUPPRESS)
    ap.add_argument("--end-pos", type=int, default=4, help=argparse.SUPPRESS)
    ap.add_argument("--limit", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--datadir", help=argparse.SUPPRESS)
    ap.add_argument("--table", help=argparse.SUPPRESS)
    ap.add_argument("--server-id", type=int, default=1000, help=argparse.SUPPRESS)
    ap.add_argument("--files", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.small:
        args.rows = SMALL_ROWS
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.worker:
        worker_main(args)
        return
    result = orchestrate(args)
    path = write_result(result)
    print_table(result)
    print(f"\nwritten {path.relative_to(REPO_ROOT)} (and bench/out/latest.json)")


if __name__ == "__main__":
    main()
