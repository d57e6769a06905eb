"""Make docs/dashboard.png: a real `mysqlcdc serve` with two pipelines under a varying
workload (one of them paused for a while, so its lag shows), captured by headless
Chromium. Takes about five minutes.

    .venv/bin/python scripts/dashboard_screenshot.py [--minutes 4] [--out docs/dashboard.png]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mysqlcdc.pipeline.localserver import MariaDB, free_port  # noqa: E402

PIPELINE = """\
name: {name}
source:
  host: 127.0.0.1
  port: {port}
  user: root
  server_id: {server_id}
  start: latest
  tables: {{include: ["{db}.*"]}}
  heartbeat: {{interval_s: 5, table: {db}.heartbeat}}
spark:
  checkpoint: ./{name}-ck
  trigger_interval: "1 second"
sinks:
  - changelog: {{path: ./{name}-changelog}}
"""


def _get(url: str):
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


def main() -> None:
    args = argparse.ArgumentParser()
    args.add_argument("--minutes", type=float, default=4.0)
    args.add_argument("--out", default="docs/dashboard.png")
    opts = args.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mysqlcdc-dash-"))
    server = MariaDB().start()
    serve = None
    try:
        server.sql("CREATE DATABASE shop", "CREATE TABLE shop.orders (id INT PRIMARY KEY, "
                   "amount DECIMAL(10,2), status VARCHAR(16))",
                   "CREATE DATABASE audit", "CREATE TABLE audit.events (id INT PRIMARY KEY, "
                   "what VARCHAR(64))")
        folder = work / "pipelines"
        folder.mkdir()
        for name, db, sid in (("shop-orders", "shop", 5401), ("audit-log", "audit", 5501)):
            (folder / f"{name}.yaml").write_text(PIPELINE.format(
                name=name, port=server.port, server_id=sid, db=db))
        port = free_port()
        serve = subprocess.Popen([sys.executable, "-m", "mysqlcdc.cli.main", "serve",
                                  "--config-dir", str(folder), "--port", str(port)],
                                 stdout=subprocess.DEVNULL, stderr=open(work / "serve.log", "w"))
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 300
        while True:
            try:
                if all(p["state"] == "running" for p in _get(f"{url}/pipelines")):
                    break
            except OSError:
                pass
            if serve.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("serve did not come up:\n"
                                 + (work / "serve.log").read_text()[-3000:])
            time.sleep(1)
        began, n, paused = time.monotonic(), 0, False
        while (elapsed := time.monotonic() - began) < opts.minutes * 60:
            rate = 40 + 35 * math.sin(elapsed / 25)
            rows = [f"({n + i}, {10 + (n + i) % 90}.50, 'new')" for i in range(int(rate))]
            server.sql(f"INSERT INTO shop.orders VALUES {','.join(rows)}",
                       f"UPDATE shop.orders SET status = 'paid' WHERE id BETWEEN {n - 40} AND "
                       f"{n - 20}", f"INSERT INTO audit.events VALUES ({n}, 'tick')")
            n += len(rows)
            phase = elapsed / (opts.minutes * 60)
            if 0.45 < phase < 0.7 and not paused:
                urllib.request.urlopen(urllib.request.Request(
                    f"{url}/pipelines/audit-log/pause", method="POST"), timeout=10)
                paused = True
            elif phase >= 0.7 and paused:
                urllib.request.urlopen(urllib.request.Request(
                    f"{url}/pipelines/audit-log/resume", method="POST"), timeout=10)
                paused = False
            time.sleep(1)
        time.sleep(6)
        chromium = shutil.which("chromium") or "chromium"
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                        "--no-first-run", "--disable-background-networking",
                        "--disable-component-update", "--disable-sync", "--hide-scrollbars",
                        f"--user-data-dir={work / 'chromium'}", f"--screenshot={opts.out}",
                        "--window-size=1280,880", f"{url}/"], check=True,
                       capture_output=True, timeout=120)
        print(f"wrote {opts.out}")
    finally:
        if serve is not None:
            serve.send_signal(signal.SIGINT)
            try:
                serve.wait(timeout=60)
            except subprocess.TimeoutExpired:
                serve.kill()
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    main()
