"""The whole product against its own decoder and against python-mysql-replication.

For each workload of ``bench/workload.py`` (``wide``, ``narrow``), in the same run,
on the same private mariadbd, each repetition in alternating order:

* ``peer``         python-mysql-replication decoding the workload over the replication
                   protocol (decode only, one core, its first ``--peer-limit`` rows);
* ``read_range``   mysqlcdc's read task alone (``capture.task.read_range``: replication
                   protocol -> envelope Arrow batches; decode only, one core), over the
                   range the pipelines read: the workload's first event to the server's
                   end (for ``wide`` the narrow file's events are passed over by both);
* ``changelog``    ``mysqlcdc run PIPELINE.yaml --until-idle`` from the workload's first
                   event into a Parquet changelog: the whole process (JVM, Python workers,
                   Spark start-up included), every core it wants;
* ``kafka``        the same into Kafka (a private Tansu broker, ``mysqlcdc`` format).

Each is timed as a whole process: wall seconds, and CPU seconds of the process and its
descendants (sampled from /proc). Rows are counted where they landed (the changelog's
Parquet files, the Kafka topic's messages) and must equal the workload's row changes.
The end-to-end rates are compared with ``read_range``'s and the peer's: those ratios are
the headline; ``read_range`` and ``peer`` alone are decoder-only numbers.

    python bench/workload.py --rows 1000000
    python bench/e2e.py --rows 1000000 --reps 2
    python bench/e2e.py --rows 200000 --reps 1 --tools read_range,changelog \\
        --set source.max_events_per_batch=200000 --conf spark.sql.maxConcurrentOutputFileWriters=0
    python bench/e2e.py --tools changelog --parallelism 2 --cluster 2   # standalone cluster

``E2E_STDERR=FILE`` appends what each ``mysqlcdc run`` logged to FILE (with
``MYSQLCDC_AHEAD_DEBUG=1``: the decode-ahead's batches and their slices).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import compare  # noqa: E402
from pipeline_bench import _rows, _sample  # noqa: E402
from server import OUT_DIR, REPO_ROOT, BenchServer, data_dir_for  # noqa: E402

sys.path.insert(0, str(REPO_ROOT))
TOOLS = ("peer", "read_range", "startup", "changelog", "kafka")
# ``startup``: the same changelog pipeline with nothing to read (from the server's current
# position): Spark's start-up and the query's fixed cost, which a short run pays in full;
# ``both``: one pipeline with both sinks (each sink its own query and read: what one read
# fanned out to every sink would save, DESIGN.md decision 17)

_YAML = """\
name: e2e-{workload}
source:
  host: {host}
  port: {port}
  user: {user}
  server_id: {server_id}
  start: "{start}"
  tables:
    include: ["{table}"]
{source_extra}spark:
  master: "{master}"
  trigger_interval: "{trigger}"
  checkpoint: ./checkpoint
{conf}sinks:
{sink}"""


def _sink(kind: str, broker) -> str:
    changelog = "  - changelog:\n      path: ./changelog\n"
    kafka = (f"  - kafka:\n      bootstrap_servers: \"{broker.bootstrap}\"\n"
             f"      topic: \"{{prefix}}.{{db}}.{{table}}\"\n      topic_prefix: \"e2e{os.getpid()}-"
             f"{time.time_ns()}\"\n") if broker is not None else ""
    return {"changelog": changelog, "startup": changelog, "kafka": kafka,
            "both": changelog + kafka}[kind]


def _yaml(args, server, workload: str, info: dict, kind: str, broker, server_id: int) -> str:
    extra = {"parallelism": args.level}
    if args.max_events is not None:            # else the product's default
        extra["max_events_per_batch"] = args.max_events
    start = f"{info['files'][0]}:4"
    if kind == "startup":
        start, extra["snapshot"] = "latest", "{mode: never}"
    for item in args.set:
        key, value = item.split("=", 1)
        if key.startswith("source."):
            extra[key.split(".", 1)[1]] = value
    source_extra = "".join(f"  {k}: {v}\n" for k, v in extra.items())
    conf = {"spark.sql.shuffle.partitions": "2", **dict(c.split("=", 1) for c in args.conf)}
    conf_text = "  conf:\n" + "".join(f"    {k}: \"{v}\"\n" for k, v in conf.items())
    return _YAML.format(workload=workload, host=server.host, port=server.port, user=server.user,
                        server_id=server_id, start=start, table=info["table"],
                        source_extra=source_extra, master=args.master, trigger=args.trigger,
                        conf=conf_text, sink=_sink(kind, broker))


def run_pipeline(args, server, workload: str, info: dict, kind: str, broker,
                 server_id: int) -> dict:
    """``mysqlcdc run --until-idle`` as a user runs it; wall and CPU of the process tree."""
    with tempfile.TemporaryDirectory(prefix="mysqlcdc-e2e-") as tmp:
        text = _yaml(args, server, workload, info, kind, broker, server_id)
        (Path(tmp) / "pipeline.yaml").write_text(text)
        env = {**os.environ, "PYTHONPATH": f"{args.src_dir}:{REPO_ROOT}",
               "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
               "SPARK_LOCAL_IP": "127.0.0.1"}
        started = time.perf_counter()
        peak: dict[str, float] = {}
        with open(Path(tmp) / "stderr.txt", "w+") as err:
            proc = subprocess.Popen([sys.executable, "-m", "mysqlcdc.cli.main", "run",
                                     "pipeline.yaml", "--until-idle"], env=env, cwd=tmp,
                                    stdout=subprocess.DEVNULL, stderr=err)
            cpu: dict[int, tuple[str, float]] = {}
            seconds = _watch(proc, started, cpu, peak)
            if os.environ.get("E2E_STDERR"):       # keep what the run logged (debugging)
                err.seek(0)
                with open(os.environ["E2E_STDERR"], "a") as keep:
                    keep.write(err.read())
            if proc.returncode != 0:
                err.seek(0)
                raise SystemExit(f"mysqlcdc run failed ({proc.returncode}):\n{err.read()[-4000:]}")
        rows = _rows(Path(tmp) / "changelog") if kind != "kafka" else _kafka_rows(broker, text)
        if kind == "both":
            kafka_rows = _kafka_rows(broker, text)
            rows = rows if rows == kafka_rows else -abs(rows - kafka_rows)   # must agree
    roles: dict[str, float] = {}
    for role, seconds_cpu in cpu.values():
        roles[role] = roles.get(role, 0.0) + seconds_cpu
    return {"tool": kind, "rows": rows, "seconds": seconds, "cpu_seconds": sum(roles.values()),
            "cpu_by_process": {k: round(v, 2) for k, v in sorted(roles.items())},
            "peak_rss_mb": {k: round(v) for k, v in sorted(peak.items())}}


# How often the run's processes are sampled: their CPU (cheap: /proc/*/stat) every 0.25 s,
# their memory every 1 s. Reading a JVM's proportional set size (smaps_rollup) costs the
# reader about 16 ms of CPU: at every 0.25 s tick the bench took 7 % of a core from the
# two the run shares, which ``read_range``, timed alone, never paid.
_CPU_TICK_S = 0.25
_RSS_EVERY = 4


def _watch(proc: subprocess.Popen, started: float, cpu: dict[int, tuple[str, float]],
           peak: dict[str, float]) -> float:
    """Sample ``proc``'s tree until it ends; its wall seconds from ``started`` to its exit,
    taken when the process is reaped (not at the next sampling tick)."""
    ended: dict[str, float] = {}
    done = threading.Event()

    def reap() -> None:
        proc.wait()
        ended["at"] = time.perf_counter()
        done.set()

    threading.Thread(target=reap, daemon=True).start()
    tick = 0
    while not done.is_set():
        alive = _sample(proc.pid, cpu)
        if tick % _RSS_EVERY == 0:
            _rss(cpu, peak, alive)
        tick += 1
        done.wait(_CPU_TICK_S)
    return ended["at"] - started


def _rss(cpu: dict[int, tuple[str, float]], peak: dict[str, float],
         alive: set[int] | None = None) -> None:
    """Peak resident set (MB) of every process (``role pid``), and peak of each role's
    processes together (``role``), sampled. A role's total adds proportional set sizes
    (PSS: a page shared by n processes counts 1/n in each), not resident sets: a JVM's
    fork children before their exec, or the Python workers forked from pyspark's daemon,
    show the parent's shared pages in their RSS, and adding RSS would count them twice."""
    now: dict[str, float] = {}
    for pid, (role, _) in cpu.items():
        if alive is not None and pid not in alive:
            continue           # ended; its pid may be another process's by now
        try:
            with open(f"/proc/{pid}/statm") as f:
                mb = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6
        except OSError:
            continue
        now[role] = now.get(role, 0.0) + _pss(pid, mb)
        peak[f"{role} {pid}"] = max(peak.get(f"{role} {pid}", 0.0), mb)
    for role, mb in now.items():
        peak[role] = max(peak.get(role, 0.0), mb)


def _pss(pid: int, rss_mb: float) -> float:
    """Proportional set size (MB) of ``pid``; its RSS where the kernel does not say."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) / 1e3
    except OSError:
        pass
    return rss_mb


def _kafka_rows(broker, yaml_text: str) -> int:
    from confluent_kafka.admin import AdminClient
    from tests.support.kafka import read_topic

    prefix = yaml_text.split('topic_prefix: "', 1)[1].split('"', 1)[0]
    topics = [t for t in AdminClient({"bootstrap.servers": broker.bootstrap})
              .list_topics(timeout=30).topics
              if t.startswith(prefix + ".") and not t.endswith(".mysqlcdc-commits")]
    return sum(sum(len(m) for m in read_topic(broker.bootstrap, t, timeout_s=600).values())
               for t in topics)


def run_decoder(args, server, workload: str, info: dict, tool: str, server_id: int) -> dict:
    """A decode-only tool of ``compare.py``, one core, in a process of its own."""
    ns = argparse.Namespace(cpu=args.cpu, src_dir=args.src_dir,
                            peer_limit=args.peer_limit if tool == "peer" else None)
    if tool == "read_range":   # what the pipelines read: from the workload to the server's end
        info = {**info, "end_file": args.server_end[0], "end_pos": args.server_end[1]}
    kind = ("peer", None) if tool == "peer" else ("mysqlcdc", "stream")
    r = compare.run_worker(kind, workload, info, server, ns, server_id)
    return {"tool": tool, "rows": r["rows"], "seconds": r["seconds"],
            "cpu_seconds": r["cpu_seconds"]}


def _server_end(server) -> tuple[str, int]:
    """The server's current binlog position: where an ``--until-idle`` pipeline stops. For
    ``wide`` that range holds the later workloads' files too, whose events the table
    filter passes over: ``read_range`` reads the same range, so the two compare."""
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW MASTER STATUS")
            file, pos = cur.fetchone()[:2]
    finally:
        conn.close()
    return str(file), int(pos)


def summarize(results: list[dict], tools: list[str], workloads: list[str]) -> list[dict]:
    out = []
    for workload in workloads:
        med = {}
        for tool in tools:
            rs = [r for r in results if r["workload"] == workload and r["tool"] == tool]
            if rs:
                med[tool] = {"rows_per_s": statistics.median(r["rows"] / r["seconds"] for r in rs),
                             "rows_per_cpu_s": statistics.median(r["rows"] / r["cpu_seconds"]
                                                                 for r in rs),
                             "rows": rs[0]["rows"]}
        startup = [r["seconds"] for r in results
                   if r["workload"] == workload and r["tool"] == "startup"]
        for tool, m in med.items():
            if tool == "startup":
                out.append({"workload": workload, "tool": tool, "rows": 0,
                            "seconds": round(statistics.median(startup), 1)})
                continue
            row = {"workload": workload, "tool": tool, **{k: round(v) for k, v in m.items()}}
            if startup and tool not in ("peer", "read_range"):
                secs = statistics.median(r["seconds"] for r in results
                                         if r["workload"] == workload and r["tool"] == tool)
                row["rows_per_s_after_startup"] = round(
                    m["rows"] / max(secs - statistics.median(startup), 1e-3))
                if "read_range" in med:
                    row["x_read_range_after_startup"] = round(
                        row["rows_per_s_after_startup"] / med["read_range"]["rows_per_s"], 2)
            for base in ("read_range", "peer"):
                if base in med and base != tool:
                    row[f"x_{base}"] = round(m["rows_per_s"] / med[base]["rows_per_s"], 2)
                    row[f"x_{base}_cpu"] = round(m["rows_per_cpu_s"] / med[base]["rows_per_cpu_s"], 2)
            out.append(row)
    return out


def print_table(rows: list[dict]) -> None:
    print(f"\n{'workload':<8} {'tool':<14} {'rows':>9} {'rows/s':>8} {'rows/CPU-s':>10} "
          f"{'x read_range':>12} {'x peer':>7} {'x read_range CPU':>16} {'x peer CPU':>10} "
          f"{'x read_range after start-up':>27}")
    for r in rows:
        if r["tool"] == "startup":
            print(f"{r['workload']:<8} {'startup':<14} {'':>9} {r['seconds']:>7} s (an empty "
                  f"pipeline: Spark start-up and the query's fixed cost)")
            continue
        print(f"{r['workload']:<8} {r['tool']:<14} {r['rows']:>9} {r['rows_per_s']:>8} "
              f"{r['rows_per_cpu_s']:>10} {r.get('x_read_range', ''):>12} "
              f"{r.get('x_peer', ''):>7} {r.get('x_read_range_cpu', ''):>16} "
              f"{r.get('x_peer_cpu', ''):>10} {r.get('x_read_range_after_startup', ''):>27}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--workloads", default="wide,narrow")
    ap.add_argument("--tools", default=",".join(TOOLS))
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--peer-limit", type=int, default=200_000)
    ap.add_argument("--cpu", type=int, default=0, help="the core the decode-only tools run on")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--cluster", type=int, default=0, metavar="WORKERS",
                    help="run the pipelines on a Spark standalone cluster of this many one-core "
                         "workers on loopback (started and stopped here)")
    ap.add_argument("--trigger", default="0 seconds")
    ap.add_argument("--max-events", type=int, default=None,
                    help="source.max_events_per_batch (default: the product's own)")
    ap.add_argument("--parallelism", default="1",
                    help="source.parallelism; a list (1,2,4) runs each pipeline tool at each")
    ap.add_argument("--set", action="append", default=[], metavar="source.KEY=VALUE")
    ap.add_argument("--conf", action="append", default=[], metavar="SPARK.KEY=VALUE")
    ap.add_argument("--src", default=str(REPO_ROOT / "src"), help="the src/ tree to run")
    args = ap.parse_args(argv)
    args.src_dir = Path(args.src).resolve()
    tools, workloads = args.tools.split(","), args.workloads.split(",")
    levels = [int(x) for x in str(args.parallelism).split(",")]

    basedir = data_dir_for(args.rows, args.seed)
    manifest = json.loads((basedir / "manifest.json").read_text())
    server = BenchServer(basedir=basedir).start()
    args.server_end = _server_end(server)
    cluster = None
    if args.cluster:
        from tests.support.spark_cluster import StandaloneCluster
        cluster = StandaloneCluster(workers=args.cluster, cores=1, memory="1g").start()
        args.master = cluster.url
        args.conf = [f"spark.cores.max={args.cluster}", "spark.executor.cores=1",
                     "spark.executor.memory=768m", *args.conf]
    broker = None
    if "kafka" in tools or "both" in tools:
        from tests.support.kafka import Broker
        broker = Broker(os.environ.get("KAFKA_BOOTSTRAP") or None).start()
    ids = iter(range(20000 + os.getpid() % 1000 * 40, 10**9, 8))
    results = []
    try:
        for rep in range(args.reps):
            # odd repetitions run everything in reverse order (reversed once: the tools
            # and, with several levels, the levels)
            for workload in workloads:
                info = manifest["workloads"][workload]
                runs = [(t, None) if t in ("peer", "read_range") else (t, p)
                        for t in tools for p in levels]
                for tool, level in (runs if rep % 2 == 0 else runs[::-1]):
                    if level is None:
                        r = run_decoder(args, server, workload, info, tool, next(ids))
                    else:
                        args.level = level
                        r = run_pipeline(args, server, workload, info, tool, broker, next(ids))
                        if len(levels) > 1:
                            r["tool"] = tool = f"{tool}/p{level}"
                    r.update(workload=workload, rep=rep)
                    expected = 0 if tool == "startup" else info["counts"]["total"] \
                        if tool != "peer" else min(args.peer_limit, info["counts"]["total"])
                    # the peer stops at the first rows event that reaches its limit
                    r["rows_ok"] = (expected <= r["rows"] < expected + 1000) if tool == "peer" \
                        else r["rows"] == expected
                    results.append(r)
                    print(json.dumps(r), flush=True)
    finally:
        if broker is not None:
            broker.kill()
        if cluster is not None:
            cluster.stop()
        server.stop()
    names = list(dict.fromkeys(r["tool"] for r in results))
    table = summarize(results, names, workloads)
    print_table(table)
    if not all(r["rows_ok"] for r in results):
        print("\nROW COUNTS DIFFER from the workload's on some runs: see rows_ok above")
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    out = OUT_DIR / f"e2e-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                               "results": results, "summary": table}, indent=1))
    print(f"\n{out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
