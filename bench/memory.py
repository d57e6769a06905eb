"""Memory is bounded by settings, not by the data: one huge transaction, one huge backlog.

On a private mariadbd (datadir kept under ``bench/data/memory-<rows>``), two cases of
``--rows`` row changes each (default 20,000,000), in binlog files of their own:

* ``transaction``  one transaction inserting ``--rows`` narrow rows (``INSERT ... SELECT``
                   from MariaDB's sequence engine): a micro-batch cannot end inside a
                   transaction, so this is one micro-batch of every row;
* ``backlog``      ``--rows / 5`` single-row transactions (GTID, ANNOTATE_ROWS, TABLE_MAP,
                   WRITE_ROWS, XID: ``--rows`` events) waiting when the pipeline starts.

Each is captured by ``mysqlcdc run PIPELINE.yaml --until-idle`` with the default
settings (``max_events_per_batch``, ``trigger_interval``, ``spark.driver.memory`` and the
rest as the config reference gives them) into a Parquet changelog (``--sinks kafka`` adds
a run into a private Tansu broker). The process tree is sampled every 0.25 s: the peak
resident set of every process is reported (and of each kind of process together), with
wall and CPU seconds; the changelog's row count must equal the rows written.

    python bench/memory.py --rows 20000000
    python bench/memory.py --rows 2000000 --cases transaction        # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from e2e import _rss  # noqa: E402
from pipeline_bench import _rows, _sample  # noqa: E402
from server import DATA_ROOT, OUT_DIR, REPO_ROOT, BenchServer  # noqa: E402

sys.path.insert(0, str(REPO_ROOT))

_YAML = """\
name: memory-{case}
source:
  host: {host}
  port: {port}
  user: {user}
  server_id: {server_id}
  start: "{start}"
  tables:
    include: ["mem.{table}"]
spark:
  checkpoint: ./checkpoint
sinks:
{sink}"""


def generate(server: BenchServer, rows: int, manifest: Path) -> dict:
    """The two cases' tables and binlog files (once per datadir)."""
    if manifest.exists():
        return json.loads(manifest.read_text())
    from pymysql.constants import CLIENT

    conn = server.connect(client_flag=CLIENT.MULTI_STATEMENTS, max_allowed_packet=256 << 20,
                          read_timeout=3600)
    out = {}
    try:
        with conn.cursor() as cur:
            cur.execute("CREATE DATABASE IF NOT EXISTS mem")
            cur.execute("USE mem")                  # where the sequence engine's tables live
            for t in ("big", "many"):
                cur.execute(f"CREATE TABLE IF NOT EXISTS mem.{t} (id BIGINT PRIMARY KEY, val INT, "
                            f"name VARCHAR(32))")
            cur.execute("FLUSH BINARY LOGS")
            out["transaction"] = _case(cur, "big", rows, lambda: [
                "BEGIN", f"INSERT INTO mem.big SELECT seq, seq % 1000003, CONCAT('n', seq) "
                f"FROM seq_1_to_{rows}", "COMMIT"])
            out["backlog"] = _case(cur, "many", rows // 5, lambda: _singles(rows // 5))
    finally:
        conn.close()
    manifest.write_text(json.dumps(out, indent=1))
    return out


def _case(cur, table: str, rows: int, statements) -> dict:
    cur.execute("SHOW MASTER STATUS")
    file, pos = cur.fetchone()[:2]
    began = time.time()
    for sql in statements():
        cur.execute(sql)
        while cur.nextset():
            pass
    seconds = time.time() - began
    cur.execute("FLUSH BINARY LOGS")
    return {"table": table, "start": f"{file}:{pos}", "rows": rows, "seconds": round(seconds)}


def _singles(n: int, per: int = 2000):
    """``n`` single-row autocommit transactions, sent as multi-statement packets."""
    for first in range(0, n, per):
        yield ";".join(f"INSERT INTO mem.many VALUES ({i}, {i % 1000003}, 'n{i}')"
                       for i in range(first + 1, min(n, first + per) + 1))


def run_case(server: BenchServer, case: str, info: dict, sink: str, broker) -> dict:
    with tempfile.TemporaryDirectory(prefix="mysqlcdc-memory-") as tmp:
        sink_yaml = ("  - changelog:\n      path: ./changelog\n" if sink == "changelog" else
                     f"  - kafka:\n      bootstrap_servers: \"{broker.bootstrap}\"\n"
                     f"      topic_prefix: \"mem{os.getpid()}{case}\"\n")
        (Path(tmp) / "p.yaml").write_text(_YAML.format(
            case=case, host=server.host, port=server.port, user=server.user,
            server_id=8800 + (case == "backlog") * 10 + (sink == "kafka") * 20,
            start=info["start"], table=info["table"], sink=sink_yaml))
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable,
               "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
        started = time.perf_counter()
        cpu: dict[int, tuple[str, float]] = {}
        peak: dict[str, float] = {}
        with open(Path(tmp) / "run.log", "w+") as log:
            proc = subprocess.Popen([sys.executable, "-m", "mysqlcdc.cli.main", "run", "p.yaml",
                                     "--until-idle"], cwd=tmp, env=env, stdout=subprocess.DEVNULL,
                                    stderr=log)
            while proc.poll() is None:
                _rss(cpu, peak, _sample(proc.pid, cpu))
                time.sleep(0.25)
            seconds = time.perf_counter() - started
            if proc.returncode != 0:
                log.seek(0)
                raise SystemExit(f"mysqlcdc run failed ({proc.returncode}):\n{log.read()[-4000:]}")
        rows = _rows(Path(tmp) / "changelog") if sink == "changelog" else None
    roles: dict[str, float] = {}
    for role, seconds_cpu in cpu.values():
        roles[role] = roles.get(role, 0.0) + seconds_cpu
    return {"case": case, "sink": sink, "rows_written": info["rows"], "rows": rows,
            "rows_ok": rows is None or rows == info["rows"], "seconds": round(seconds, 1),
            "cpu_s": round(sum(roles.values()), 1),
            "cpu_by_process": {k: round(v, 1) for k, v in sorted(roles.items())},
            "peak_rss_mb": {k: round(v) for k, v in sorted(peak.items())}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=20_000_000)
    ap.add_argument("--cases", default="transaction,backlog")
    ap.add_argument("--sinks", default="changelog")
    args = ap.parse_args(argv)

    basedir = DATA_ROOT / f"memory-{args.rows}"
    server = BenchServer(basedir=basedir, options={"max-binlog-size": "1G",
                                                   "binlog-cache-size": "16M"}).start()
    broker = None
    results = []
    try:
        made = generate(server, args.rows, basedir / "manifest.json")
        print(json.dumps({"generated": made}), flush=True)
        if "kafka" in args.sinks:
            from tests.support.kafka import Broker
            broker = Broker(os.environ.get("KAFKA_BOOTSTRAP") or None).start()
        for case in args.cases.split(","):
            for sink in args.sinks.split(","):
                r = run_case(server, case, made[case], sink, broker)
                r["load_avg"] = round(os.getloadavg()[0], 1)
                results.append(r)
                print(json.dumps(r), flush=True)
    finally:
        if broker is not None:
            broker.kill()
        server.stop()
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    out = OUT_DIR / f"memory-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps({"args": vars(args), "results": results}, indent=1))
    print(f"\n{out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
