"""Commit -> visible: how long a committed transaction takes to reach a reader.

A private mariadbd; a ``mysqlcdc run`` pipeline (its own process, as a user runs it)
into a Parquet changelog and into Kafka (a private Tansu broker), one setting at a
time; a writer commits single-row transactions at ``--rate`` per second for
``--seconds``, noting the wall time each COMMIT returned; a reader polls the sink and
notes when each row became visible:

* changelog: a row is visible once the Spark file sink's commit log
  (``_spark_metadata``) lists the Parquet file holding it (what Spark readers honour);
* kafka: once a consumer receives its message.

Latency = visible - committed, per row; p50 / p95 / p99 / max. The pipeline process
tree's CPU seconds during the measured window, divided by the window, is the setting's
CPU cost in cores (``--idle-seconds`` measures the same with no writes at all).

Settings (``--settings``, comma-separated, each run in turn, alternating per repetition):

* ``default``       ``trigger_interval: 1 second`` (the config default);
* ``low-latency``   the documented low-latency setting: ``trigger_interval: 100 milliseconds``;
* ``zero``          ``trigger_interval: 0 seconds`` (poll continuously).

    python bench/latency.py --seconds 40 --rate 20 --reps 1
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
from urllib.parse import unquote

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pipeline_bench import _sample  # noqa: E402
from server import OUT_DIR, REPO_ROOT  # noqa: E402

sys.path.insert(0, str(REPO_ROOT))
from tests.support.kafka import Broker  # noqa: E402
from tests.support.mariadb import MariaDB, binlog_position  # noqa: E402

SETTINGS = {"default": "1 second", "low-latency": "100 milliseconds", "zero": "0 seconds"}

_YAML = """\
name: latency-{name}
source:
  host: {host}
  port: {port}
  user: {user}
  server_id: {server_id}
  start: "{start}"
  tables:
    include: ["lat.t"]
spark:
  master: "local[2]"
  trigger_interval: "{trigger}"
  checkpoint: ./checkpoint
  conf: {{spark.sql.shuffle.partitions: 1}}
sinks:
{sink}"""


def _percentiles(values: list[float]) -> dict:
    if not values:
        return {}
    ordered = sorted(values)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
    return {"n": len(values), "p50_ms": round(at(0.50) * 1000), "p95_ms": round(at(0.95) * 1000),
            "p99_ms": round(at(0.99) * 1000), "max_ms": round(ordered[-1] * 1000)}


class ChangelogWatch:
    """Rows of the changelog as the file sink's commit log makes them visible."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.seen, self.files = folder, {}, set()

    def poll(self) -> None:
        import pyarrow.parquet as pq

        log = self.folder / "_spark_metadata"
        if not log.is_dir():
            return
        for entry in sorted(log.iterdir()):
            if entry.name.startswith(".") or entry.name in self.files:
                continue
            lines = entry.read_text().splitlines()[1:]
            now = time.time()
            for line in lines:
                # a URI: partition folders are escaped in it (db=x as db%3Dx)
                path = unquote(json.loads(line)["path"].removeprefix("file://"))
                for after in pq.read_table(path, columns=["after"]).column("after").to_pylist():
                    if after:
                        self.seen.setdefault(json.loads(after)["id"], now)
            self.files.add(entry.name)


class KafkaWatch:
    """Rows of the table's topic as a consumer receives them."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import Consumer

        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"lat-{os.getpid()}",
                                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                  "fetch.wait.max.ms": 10,
                                  # the topic appears with the first batch: notice it within a
                                  # second, not librdkafka's default 5 minutes
                                  "topic.metadata.refresh.interval.ms": 1000})
        self.consumer.subscribe([topic])
        self.seen: dict[int, float] = {}

    def poll(self) -> None:
        for msg in self.consumer.consume(500, timeout=0.01):
            if msg.error() or msg.value() is None:
                continue
            after = json.loads(msg.value()).get("after")       # embedded JSON: an object
            if after:
                self.seen.setdefault(after["id"], time.time())

    def close(self) -> None:
        self.consumer.close()


def run_setting(args, server: MariaDB, broker: Broker, name: str, sink: str, rep: int,
                first_id: int) -> dict:
    start = str(binlog_position(server))
    with tempfile.TemporaryDirectory(prefix="mysqlcdc-latency-") as tmp:
        prefix = f"lat{os.getpid()}x{rep}{name.replace('-', '')}"
        sink_yaml = ("  - changelog:\n      path: ./changelog\n" if sink == "changelog" else
                     f"  - kafka:\n      bootstrap_servers: \"{broker.bootstrap}\"\n"
                     f"      topic_prefix: \"{prefix}\"\n")
        (Path(tmp) / "p.yaml").write_text(_YAML.format(
            name=name, host=server.host, port=server.port, user=server.user,
            server_id=5000 + rep * 10 + list(SETTINGS).index(name) * 2 + (sink == "kafka"),
            start=start, trigger=SETTINGS[name], sink=sink_yaml))
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable,
               "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
        log = open(Path(tmp) / "run.log", "wb")
        proc = subprocess.Popen([sys.executable, "-m", "mysqlcdc.cli.main", "run", "p.yaml"],
                                cwd=tmp, env=env, stdout=log, stderr=subprocess.STDOUT)
        watch = ChangelogWatch(Path(tmp) / "changelog") if sink == "changelog" else \
            KafkaWatch(broker.bootstrap, f"{prefix}.lat.t")
        try:
            _warm_up(server, watch, first_id, proc, tmp)
            cpu0, t0 = _cpu(proc.pid), time.time()
            _wait(watch, args.idle_seconds)
            cpu_w, t_w = _cpu(proc.pid), time.time()
            idle_cpu = (cpu_w - cpu0) / max(t_w - t0, 1e-3)
            committed = _write(server, watch, first_id + 1, args.rate, args.seconds)
            busy_cpu = (_cpu(proc.pid) - cpu_w) / max(time.time() - t_w, 1e-3)
            deadline = time.time() + 30
            while len(set(committed) - set(watch.seen)) and time.time() < deadline:
                watch.poll()
                time.sleep(0.01)
        finally:
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
            if hasattr(watch, "close"):
                watch.close()
        lat = [watch.seen[i] - t for i, t in committed.items() if i in watch.seen]
        missing = len(committed) - len(lat)
    return {"setting": name, "trigger": SETTINGS[name], "sink": sink, "rep": rep,
            **_percentiles(lat), "missing": missing,
            "cpu_cores_busy": round(busy_cpu, 2), "cpu_cores_idle": round(idle_cpu, 2)}


def _warm_up(server: MariaDB, watch, row_id: int, proc, tmp: str) -> None:
    """One row through before timing: Spark's start-up is not latency."""
    server.sql(f"INSERT INTO lat.t VALUES ({row_id}, 0)")
    deadline = time.time() + 600
    while row_id not in watch.seen:
        if proc.poll() is not None:
            raise SystemExit(f"pipeline exited:\n{(Path(tmp) / 'run.log').read_text()[-3000:]}")
        if time.time() > deadline:
            raise SystemExit("the pipeline did not deliver its first row in 10 minutes")
        watch.poll()
        time.sleep(0.05)


def _wait(watch, seconds: float) -> None:
    end = time.time() + seconds
    while time.time() < end:
        watch.poll()
        time.sleep(0.01)


def _write(server: MariaDB, watch, first: int, rate: float, seconds: float) -> dict[int, float]:
    """Single-row transactions at ``rate`` per second; the wall time each COMMIT returned.
    The reader polls between writes on this thread's behalf (another thread)."""
    committed: dict[int, float] = {}
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            watch.poll()
            time.sleep(0.005)
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            t0 = time.time()
            for n in range(int(rate * seconds)):
                due = t0 + n / rate
                time.sleep(max(0.0, due - time.time()))
                cur.execute(f"INSERT INTO lat.t VALUES ({first + n}, {n})")
                committed[first + n] = time.time()      # autocommit: COMMIT has returned
    finally:
        conn.close()
        time.sleep(3)
        stop.set()
        reader.join()
    return committed


def _cpu(root: int) -> float:
    seen: dict[int, tuple[str, float]] = {}
    _sample(root, seen)
    return sum(cpu for _, cpu in seen.values())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--settings", default="default,low-latency")
    ap.add_argument("--sinks", default="changelog,kafka")
    ap.add_argument("--rate", type=float, default=20.0)
    ap.add_argument("--seconds", type=float, default=40.0)
    ap.add_argument("--idle-seconds", type=float, default=10.0)
    ap.add_argument("--reps", type=int, default=1)
    args = ap.parse_args(argv)

    server = MariaDB().start()
    broker = Broker(os.environ.get("KAFKA_BOOTSTRAP") or None).start()
    results, next_id = [], 1
    try:
        server.sql("CREATE DATABASE lat", "CREATE TABLE lat.t (id INT PRIMARY KEY, v INT)")
        settings = args.settings.split(",")
        for rep in range(args.reps):
            for sink in args.sinks.split(","):
                for name in (settings if rep % 2 == 0 else settings[::-1]):
                    r = run_setting(args, server, broker, name, sink, rep, next_id)
                    next_id += int(args.rate * args.seconds) + 10
                    r["load_avg"] = round(os.getloadavg()[0], 1)
                    results.append(r)
                    print(json.dumps(r), flush=True)
    finally:
        broker.kill()
        server.stop()
    print(f"\n{'sink':<10} {'setting':<12} {'trigger':<17} {'p50 ms':>7} {'p95 ms':>7} "
          f"{'p99 ms':>7} {'max ms':>7} {'cores busy':>10} {'cores idle':>10}")
    for r in results:
        print(f"{r['sink']:<10} {r['setting']:<12} {r['trigger']:<17} {r.get('p50_ms', ''):>7} "
              f"{r.get('p95_ms', ''):>7} {r.get('p99_ms', ''):>7} {r.get('max_ms', ''):>7} "
              f"{r['cpu_cores_busy']:>10} {r['cpu_cores_idle']:>10}")
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    out = OUT_DIR / f"latency-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps({"args": vars(args), "results": results}, indent=1))
    print(f"\n{out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
