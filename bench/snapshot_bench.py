"""Snapshot throughput: mysqlcdc against ``mariadb-dump --quick`` and a plain pymysql loop.

Two tables of ``--rows`` rows each on a private mariadbd (datadir kept under
``bench/data/snapshot-<rows>/``): ``snap.narrow`` (``id INT PRIMARY KEY, val INT,
name VARCHAR(32)``) and ``snap.wide`` (the 19 columns of ``workload.py``'s wide table,
every type family). For each table, each of ``--reps`` rounds runs, in an order that
rotates from round to round, one process per tool:

* ``dump``     ``mariadb-dump --quick`` of the table to /dev/null (the C client);
* ``pymysql``  ``SELECT *`` through an unbuffered pymysql cursor, every value touched;
* ``noop``     mysqlcdc's snapshot (``snapshotMode=initial_only``) into Spark's ``noop``
               sink, ``trigger(availableNow=True)``;
* ``changelog`` the same into the Parquet changelog sink on a local path, as ``mysqlcdc run``
               writes it: the read tasks write the part files (DESIGN.md decision 20) and
               the query's ``foreachBatch`` commits them, in a JVM with the compilers
               ``mysqlcdc run`` gives it (C1 alone: decision 22);
* ``filesink`` (only when named in ``--tools``) the same through Spark's own Parquet file
               sink, the changelog's writer for a path that is not local (``s3a://``):
               every row through the JVM (what ``changelog`` measured before stop 28).

The Spark tools are timed from the query's start to its end inside a process whose
SparkSession is already up (starting Spark costs 15-40 s here and is not the snapshot's).
Every process's peak RSS is sampled (/proc, every 0.2 s) and reported by role: the
driver (the worker process), the JVM, the source's planner and the Python read workers.
A Spark run also reports ``in_batches_s``, the seconds spent inside its micro-batches
(the rest is the query's start, its planning process and its stop: a fixed cost).
Printed: one JSON line per run, then per table the median rows/s per tool, the ratios to
``dump`` (medians of the per-round ratios: each round's tools ran side by side), the peak
RSS per tool and the median CPU seconds per role.

    .venv/bin/python bench/snapshot_bench.py --rows 1000000 --reps 3
    .venv/bin/python bench/snapshot_bench.py --rows 200000 --reps 1 --tools noop   # memory vs size
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
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from server import DATA_ROOT, OUT_DIR, BenchServer  # noqa: E402
from workload import NARROW_DDL, WIDE_DDL  # noqa: E402

TOOLS = ("dump", "pymysql", "noop", "changelog", "filesink")
DEFAULT_TOOLS = ("dump", "pymysql", "noop", "changelog")

_WIDE_FILL = """
INSERT INTO wide SELECT seq, CAST(seq % 256 AS SIGNED) - 128, CAST(seq % 65536 AS SIGNED) - 32768,
  seq * 13, seq * 1844674407 + 9223372036854775807, seq / 7, seq / 3, seq * 1.000001,
  CONCAT('vc-é-', seq), REPEAT(CONCAT('text ', seq), 8), '2024-01-01' + INTERVAL (seq % 3000) DAY,
  '2020-01-01 00:00:00.123456' + INTERVAL seq SECOND, '2021-01-01 00:00:00.123' + INTERVAL seq SECOND,
  SEC_TO_TIME(CAST(seq % 3000000 AS SIGNED) - 1500000), 1901 + seq % 250, 1 + seq % 4, seq % 16,
  seq % 256, UNHEX(SHA1(seq)) FROM seq_1_to_{rows}"""
_NARROW_FILL = ("INSERT INTO narrow SELECT seq, seq * 7 % 100003, CONCAT('name-', seq) "
                "FROM seq_1_to_{rows}")


def prepare(rows: int) -> BenchServer:
    server = BenchServer(basedir=DATA_ROOT / f"snapshot-{rows}").start()
    have = server.sql("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA='snap'")
    if have[0][0] != 2:
        began = time.perf_counter()
        server.sql("DROP DATABASE IF EXISTS snap", "CREATE DATABASE snap")
        server.sql(WIDE_DDL, NARROW_DDL, _NARROW_FILL.format(rows=rows),
                   _WIDE_FILL.format(rows=rows), "ANALYZE TABLE narrow, wide", db="snap")
        print(json.dumps({"generated": rows, "seconds": round(time.perf_counter() - began, 1)}),
              flush=True)
    return server


# --- memory: peak RSS of a process tree, by role ------------------------------------------

def _role(pid: int) -> str:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "gone"
    if not cmd or not cmd[0]:
        return "gone"
    text = b" ".join(cmd).decode(errors="replace")
    if "java" in cmd[0].decode(errors="replace"):
        return "jvm"
    if "pyspark.daemon" in text or "pyspark/daemon" in text:
        return "python-workers"
    if "pyspark" in text and "worker" in text:
        return "python-workers"
    if "snapshot_bench" in text:
        return "driver"
    if "python" in text:
        return "python-source"
    name = Path(cmd[0].decode(errors="replace")).name
    # anything else: short-lived helpers Spark shells out to (chmod, rm, ps, ...)
    return name if name == "mariadb-dump" else "other"


def _tree(root: int) -> list[int]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(kids.get(pid, []))
    return out


def _cpu_s(pid: int) -> float:
    """user + system CPU seconds of a process so far."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def _jvm_threads(pid: int) -> dict[str, float]:
    """CPU seconds of a JVM's threads so far, by kind: ``jvm-jit`` (the C1 and C2
    compilers), ``jvm-gc`` (the collector's threads) and ``jvm`` (everything else: the
    tasks turning Arrow batches into rows, the stream's thread, the launcher)."""
    out = {"jvm": 0.0, "jvm-jit": 0.0, "jvm-gc": 0.0}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            name = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
            fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        kind = ("jvm-jit" if "CompilerThre" in name else
                "jvm-gc" if name.startswith(("GC Thread", "G1 ")) else "jvm")
        out[kind] += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


class CpuMeter:
    """CPU seconds a process tree spends between ``start()`` and ``stop()``, per role
    (processes born in between count from zero; one that ends in between counts up to
    the last time it was seen: ``poll()`` often). A JVM's CPU is split by thread
    (``_jvm_threads``), so its compilers' share shows beside the rows' conversion."""

    def __init__(self, root: int) -> None:
        self.root, self.first, self.last, self.roles = root, {}, {}, {}
        self.started = False

    def poll(self) -> None:
        for pid in _tree(self.root):
            if pid not in self.roles:
                self.roles[pid] = _role(pid)
            if self.roles[pid] == "jvm":
                for kind, cpu in _jvm_threads(pid).items():
                    self._note((pid, kind), kind, cpu)
            else:
                self._note(pid, self.roles[pid], _cpu_s(pid))

    def _note(self, key, role: str, cpu: float) -> None:
        if key not in self.first:         # before start() every entry is reset below
            self.first[key] = 0.0
            self.roles.setdefault(key, role)
        self.last[key] = cpu

    def start(self) -> None:
        self.started = False
        self.poll()
        self.first = dict(self.last)
        self.started = True

    def stop(self) -> dict[str, float]:
        self.poll()
        out: dict[str, float] = {}
        for pid, cpu in self.last.items():
            role = self.roles.get(pid, "?")
            out[role] = out.get(role, 0.0) + max(0.0, cpu - self.first.get(pid, 0.0))
        out["total"] = sum(out.values())
        return {k: round(v, 2) for k, v in sorted(out.items()) if v or k == "total"}


def _rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


class Sampler(threading.Thread):
    """Peak RSS per role over the process tree of ``root`` (per role: the largest
    sum over its processes at one sample)."""

    def __init__(self, root: int) -> None:
        super().__init__(daemon=True)
        self.root, self.stop_now, self.peak = root, threading.Event(), {}

    def run(self) -> None:
        while not self.stop_now.is_set():
            now: dict[str, int] = {}
            for pid in _tree(self.root):
                role = _role(pid)
                if role not in ("gone", ""):
                    now[role] = now.get(role, 0) + _rss_kb(pid)
            for role, kb in now.items():
                self.peak[role] = max(self.peak.get(role, 0), kb)
            self.peak["total"] = max(self.peak.get("total", 0), sum(now.values()))
            self.stop_now.wait(0.2)

    def result(self) -> dict[str, int]:
        self.stop_now.set()
        self.join()
        return {k: round(v / 1024) for k, v in sorted(self.peak.items()) if k != "gone"}


# --- the tools --------------------------------------------------------------------------

def run_dump(server, table: str) -> dict:
    import resource

    cmd = ["mariadb-dump", "--quick", f"-h{server.host}", f"-P{server.port}", f"-u{server.user}",
           "snap", table]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    sampler = Sampler(proc.pid)
    sampler.start()
    _, err = proc.communicate()
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise SystemExit(err.decode())
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return {"seconds": wall, "rss_mb": sampler.result(), "cpu_s": {"mariadb-dump": round(cpu, 2),
                                                                   "total": round(cpu, 2)}}


def run_worker(server, table: str, tool: str, rows: int, server_id: int) -> dict:
    """One Python process per run: ``--worker`` below. Its last line is the result."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    cmd = [sys.executable, __file__, "--worker", tool, "--table", table, "--port",
           str(server.port), "--rows", str(rows), "--server-id", str(server_id),
           "--server-pid", str(server.process.pid)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                            text=True)
    sampler = Sampler(proc.pid)
    sampler.start()
    out, err = proc.communicate()
    memory = sampler.result()
    if proc.returncode:
        raise SystemExit(f"{tool} on {table} failed:\n{err[-4000:]}")
    result = json.loads(out.strip().splitlines()[-1])
    result["rss_mb"] = memory
    return result


def worker_pymysql(port: int, table: str, server_pid: int) -> dict:
    import pymysql

    conn = pymysql.connect(host="127.0.0.1", port=port, user="root", database="snap",
                           charset="utf8mb4")
    server_began = _cpu_s(server_pid)
    began = time.perf_counter()
    cur = conn.cursor(pymysql.cursors.SSCursor)
    cur.execute(f"SELECT * FROM {table}")
    n = 0
    while True:
        rows = cur.fetchmany(10000)
        if not rows:
            break
        for row in rows:                    # every value touched
            for _ in row:
                pass
        n += len(rows)
    seconds = time.perf_counter() - began
    cpu = time.process_time()
    return {"seconds": seconds, "rows": n,
            "server_query_cpu_s": round(_cpu_s(server_pid) - server_began, 2),
            "cpu_s": {"driver": round(cpu, 2), "total": round(cpu, 2)}}


def worker_spark(port: int, table: str, tool: str, server_id: int, server_pid: int) -> dict:
    """The snapshot twice in one session: ``cold`` (the session's first query: Spark starts
    its Python workers) and ``warm`` (the same query again), each timed from start to end
    with the CPU seconds of every process of the session and of the server."""
    from mysqlcdc.spark import build_session

    # the JVM's compilers `mysqlcdc run` picks for such a sink (pipeline.runner.jit_mode):
    # C1 alone where no row reaches the JVM (the changelog on a local path), else both
    jit = "quick" if tool == "changelog" else "full"
    spark = build_session("local[2]", f"snapbench-{tool}", {"spark.sql.shuffle.partitions": "2",
                                                             "spark.ui.enabled": "false"},
                          jit=jit)
    runs = {}
    for run, sid in (("cold", server_id), ("warm", server_id + 5)):
        meter, stop = CpuMeter(os.getpid()), threading.Event()
        meter.start()
        poller = threading.Thread(target=_poll_until, args=(meter, stop), daemon=True)
        server_began = _cpu_s(server_pid)
        began = time.perf_counter()
        poller.start()
        rows, batches, in_batches = _snapshot_query(spark, port, table, tool, sid)
        seconds = time.perf_counter() - began
        server_cpu = _cpu_s(server_pid) - server_began
        stop.set()
        poller.join()
        runs[run] = {"seconds": seconds, "rows": rows, "batches": batches,
                     "in_batches_s": in_batches, "cpu_s": meter.stop(),
                     "server_query_cpu_s": round(server_cpu, 2)}
    spark.stop()
    return {**runs["warm"], "cold": {k: v for k, v in runs["cold"].items() if k != "rows"}}


def _poll_until(meter: CpuMeter, stop: threading.Event) -> None:
    while not stop.wait(0.2):
        meter.poll()


def _snapshot_query(spark, port: int, table: str, tool: str,
                    server_id: int) -> tuple[int, int, float]:
    """Rows written, micro-batches, and the seconds spent inside them (the rest of the
    query's wall time is its start, its planning process and its stop)."""
    work = Path(tempfile.mkdtemp(prefix=f"snapbench-{tool}-"))
    try:
        return _run_query(spark, work, port, table, tool, server_id)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run_query(spark, work: Path, port: int, table: str, tool: str,
               server_id: int) -> tuple[int, int, float]:
    options = {"host": "127.0.0.1", "port": str(port), "user": "root", "serverId": str(server_id),
               "include": f"snap.{table}", "snapshotMode": "initial_only", "parallelism": "2",
               "snapshotChunkRows": "50000", "snapshotChunksPerBatch": "8"}
    if tool == "changelog":
        # what `mysqlcdc run` does for a changelog on a local path (DESIGN.md decision 20):
        # the read tasks write the part files, the query's foreachBatch commits them
        from mysqlcdc.sinks.changelog import ChangelogSettings, task_writer
        from mysqlcdc.sinks.changelog.writer import parquet_batch_committer
        from mysqlcdc.spark.transforms import load_written

        settings = ChangelogSettings(path=str(work / "changelog"), pipeline="snapbench")
        df, _ = load_written(spark, options, None, task_writer(settings))
        query = (df.writeStream.foreachBatch(parquet_batch_committer(settings, str(work / "ck")))
                 .option("checkpointLocation", str(work / "ck")).trigger(availableNow=True)
                 .start())
    else:
        df = spark.readStream.format("mysqlcdc").options(**options).load()
        if tool == "noop":
            query = (df.writeStream.format("noop").option("checkpointLocation", str(work / "ck"))
                     .trigger(availableNow=True).start())
        else:   # Spark's own Parquet file sink (the changelog's writer for a remote path)
            query = (df.writeStream.format("parquet").option("path", str(work / "changelog"))
                     .outputMode("append").partitionBy("db", "table")
                     .option("checkpointLocation", str(work / "ck")).trigger(availableNow=True)
                     .start())
    query.awaitTermination()
    if query.exception() is not None:
        raise SystemExit(str(query.exception()))
    rows = sum(int(p.get("numInputRows", 0)) for p in query.recentProgress)
    if tool in ("changelog", "filesink"):
        import pyarrow.dataset as ds

        rows = ds.dataset(str(work / "changelog"), format="parquet",
                          partitioning="hive").count_rows()
    in_batches = sum(p["durationMs"].get("triggerExecution", 0) for p in query.recentProgress)
    return rows, len(query.recentProgress), round(in_batches / 1000, 2)


# --- the comparison ---------------------------------------------------------------------

def compare(args) -> list[dict]:
    server = prepare(args.rows)
    results = []
    try:
        server.sql("SET GLOBAL max_connections = 500")
        tools = args.tools.split(",")
        for table in args.tables.split(","):
            for rep in range(args.reps):
                order = tools[rep % len(tools):] + tools[:rep % len(tools)]
                for i, tool in enumerate(order):
                    server_cpu = _cpu_s(server.process.pid)
                    if tool == "dump":
                        r = run_dump(server, table)
                        r["rows"] = args.rows
                    else:
                        r = run_worker(server, table, tool, args.rows, 7500 + 10 * (rep * 5 + i))
                    # the server's CPU over the whole run (a Spark tool: both its queries,
                    # cold and warm); ``server_query_cpu_s``: over the timed query alone
                    r["server_run_cpu_s"] = round(_cpu_s(server.process.pid) - server_cpu, 2)
                    r.setdefault("server_query_cpu_s", r["server_run_cpu_s"])
                    r.update({"table": table, "tool": tool, "rep": rep,
                              "rows_per_s": round(r["rows"] / r["seconds"])})
                    r["seconds"] = round(r["seconds"], 2)
                    print(json.dumps(r), flush=True)
                    results.append(r)
    finally:
        server.stop()
    return results


def summarize(results: list[dict], rows: int) -> dict:
    out: dict = {}
    for table in sorted({r["table"] for r in results}):
        mine = [r for r in results if r["table"] == table]
        rates = {t: statistics.median(r["rows_per_s"] for r in mine if r["tool"] == t)
                 for t in sorted({r["tool"] for r in mine})}
        ratios = {}
        for tool in rates:
            per_round = []
            for rep in sorted({r["rep"] for r in mine}):
                got = {r["tool"]: r["rows_per_s"] for r in mine if r["rep"] == rep}
                if "dump" in got and tool in got:
                    per_round.append(got[tool] / got["dump"])
            if per_round:
                ratios[tool] = round(statistics.median(per_round), 3)
        peak = {t: max((r["rss_mb"].get("total", 0) for r in mine if r["tool"] == t), default=0)
                for t in rates}
        cpu = {t: _median_cpu([{**r["cpu_s"], "server": r["server_query_cpu_s"]}
                               for r in mine if r["tool"] == t]) for t in rates}
        out[table] = {"rows": rows, "rows_per_s": {k: round(v) for k, v in rates.items()},
                      "x_dump": ratios, "peak_rss_mb": peak, "cpu_s": cpu}
    return out


def _median_cpu(runs: list[dict]) -> dict[str, float]:
    """Median CPU seconds per role over runs (a Spark tool: its warm run)."""
    roles = sorted({role for run in runs for role in run})
    return {role: round(statistics.median(run.get(role, 0.0) for run in runs), 2)
            for role in roles}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tables", default="narrow,wide")
    ap.add_argument("--tools", default=",".join(DEFAULT_TOOLS),
                    help=f"comma-separated, of {','.join(TOOLS)} (filesink: Spark's own Parquet "
                    "file sink, what a changelog on a remote path is written by)")
    ap.add_argument("--worker", choices=("pymysql", "noop", "changelog", "filesink"), help=argparse.SUPPRESS)
    ap.add_argument("--table", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--server-id", type=int, default=7500, help=argparse.SUPPRESS)
    ap.add_argument("--server-pid", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker == "pymysql":
        print(json.dumps(worker_pymysql(args.port, args.table, args.server_pid)))
        return
    if args.worker:
        print(json.dumps(worker_spark(args.port, args.table, args.worker, args.server_id,
                                      args.server_pid)))
        return
    results = compare(args)
    summary = summarize(results, args.rows)
    print(json.dumps(summary, indent=2))
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    (OUT_DIR / f"snapshot-{stamp}.json").write_text(json.dumps(
        {"args": vars(args), "results": results, "summary": summary}, indent=2))


if __name__ == "__main__":
    main()
