"""`mysqlcdc serve`'s service: two pipelines in one SparkSession, managed over real HTTP
(uvicorn on a free port), with metrics that count what the workload wrote."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from mysqlcdc.api import PipelineService
from mysqlcdc.api.app import Poller, create_app
from mysqlcdc.pipeline.localserver import free_port

from tests.support.mariadb import binlog_position

pytestmark = pytest.mark.e2e


def _yaml(name: str, mariadb, db: str, start: str, server_id: int, port: int | None = None) -> str:
    return f"""
name: {name}
source:
  host: {mariadb.host}
  port: {port or mariadb.port}
  user: {mariadb.user}
  server_id: {server_id}
  start: "{start}"
  tables: {{include: ["{db}.*"]}}
  reconnect: {{attempts: 1, initial_delay_s: 0.1, max_delay_s: 0.1}}
spark:
  checkpoint: ./{name}-ck
  trigger_interval: "200 milliseconds"
sinks:
  - changelog: {{path: ./{name}-changelog}}
"""


def _wait(predicate, timeout: float = 120.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def served(spark, tmp_path):
    import uvicorn

    service = PipelineService(tmp_path / "pipelines", lambda: spark)
    poller = Poller(service, interval_s=0.3, lag_s=1.0)
    poller.start()
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(service), host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    _wait(lambda: server.started, 30, "uvicorn")
    try:
        yield service, f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        poller.stopped.set()
        service.stop_all()


def _db(mariadb, name: str) -> str:
    mariadb.sql(f"DROP DATABASE IF EXISTS `{name}`", f"CREATE DATABASE `{name}`",
                f"CREATE TABLE `{name}`.t (id INT PRIMARY KEY, v INT)")
    return name


def test_two_pipelines_managed_over_http(served, mariadb, tmp_path):
    service, url = served
    a, b = _db(mariadb, "serve_a"), _db(mariadb, "serve_b")
    start = str(binlog_position(mariadb))
    folder = tmp_path / "pipelines"
    (folder / "alpha.yaml").write_text(_yaml("alpha", mariadb, a, start, 6101))
    assert service.load_folder() == ["alpha"]
    service.start("alpha")
    with httpx.Client(base_url=url, timeout=60) as http:
        # A second pipeline through the API: validated, saved, started.
        created = http.post("/pipelines", content=_yaml("beta", mariadb, b, start, 6201),
                            headers={"content-type": "application/yaml"})
        assert created.status_code == 201, created.text
        assert created.json()["state"] == "running" and (folder / "beta.yaml").is_file()

        mariadb.sql(*[f"INSERT INTO `{a}`.t VALUES ({i}, {i})" for i in range(1, 31)],
                    *[f"INSERT INTO `{b}`.t VALUES ({i}, {i})" for i in range(1, 12)],
                    f"DELETE FROM `{b}`.t WHERE id = 1")

        def counted():
            rows = {p["name"]: p for p in http.get("/pipelines").json()}
            return rows if (rows["alpha"]["rows_total"], rows["beta"]["rows_total"]) == (30, 12) \
                else None
        rows = _wait(counted, what="both pipelines' rows")
        assert {r["state"] for r in rows.values()} == {"running"}
        assert rows["alpha"]["position"] and rows["beta"]["position"]

        metrics = http.get("/metrics").text
        assert 'mysqlcdc_rows_total{pipeline="alpha"} 30.0' in metrics
        assert 'mysqlcdc_rows_total{pipeline="beta"} 12.0' in metrics
        assert 'mysqlcdc_pipeline_state{pipeline="beta",state="running"} 1.0' in metrics
        lagged = _wait(lambda: "mysqlcdc_lag_bytes{" in http.get("/metrics").text and
                       http.get("/metrics").text, what="the lag metric")
        assert 'mysqlcdc_lag_bytes{pipeline="alpha"}' in lagged

        # Mistakes come back named, with the status their kind calls for.
        bad = http.post("/pipelines", content="name: gamma\nsource: {host: x, user: u}\n"
                        "spark: {checkpoint: ck}\nsinks: [{console: {}}]\n")
        assert bad.status_code == 422 and bad.json()["code"] == "CONFIG_INVALID"
        assert any("source.server_id" in p for p in bad.json()["problems"])
        assert not (folder / "gamma.yaml").exists()
        dup = http.post("/pipelines", content=_yaml("beta", mariadb, b, start, 6301))
        assert dup.status_code == 409 and dup.json()["code"] == "PIPELINE_CONFLICT"
        # alpha's parallel reader registers as 6102: a pipeline there would cut its stream.
        clash = http.post("/pipelines", content=_yaml("omega", mariadb, b, start, 6102))
        assert clash.status_code == 409 and clash.json()["code"] == "SERVER_ID_IN_USE", clash.text
        assert "alpha" in clash.json()["message"]
        assert http.get("/pipelines/omega").json()["state"] == "failed"
        assert http.delete("/pipelines/omega").status_code == 204
        assert http.get("/pipelines/nope").status_code == 404

        # A pipeline whose server is down fails alone; the others keep flowing.
        down = http.post("/pipelines", content=_yaml("delta", mariadb, b, start, 6401,
                                                     port=free_port()))
        assert down.status_code == 503, down.text
        assert http.get("/pipelines/delta").json()["state"] == "failed"

        # stop / start / delete: a stopped pipeline resumes from its checkpoint.
        assert http.post("/pipelines/beta/stop").json()["state"] == "stopped"
        mariadb.sql(f"INSERT INTO `{b}`.t VALUES (100, 100)",
                    f"INSERT INTO `{a}`.t VALUES (100, 100)")
        _wait(lambda: http.get("/pipelines/alpha").json()["rows_total"] == 31, what="alpha")
        assert http.post("/pipelines/beta/start").json()["state"] == "running"
        _wait(lambda: http.get("/pipelines/beta").json()["rows_total"] >= 13, what="beta resumed")
        changes = service.spark.read.parquet(str(folder / "beta-changelog")).count()
        assert changes == 13                       # 11 inserts, 1 delete, 1 after the restart

        status = subprocess.run([sys.executable, "-m", "mysqlcdc.cli.main", "status", "--url", url],
                                capture_output=True, text=True, timeout=60,
                                env={**os.environ, "COLUMNS": "200"})
        assert status.returncode == 0 and "alpha" in status.stdout and "running" in status.stdout
        assert "SOURCE_UNREACHABLE" in status.stdout or "failed" in status.stdout

        assert http.delete("/pipelines/beta").status_code == 204
        assert not (folder / "beta.yaml").exists()
        assert "beta" not in {p["name"] for p in http.get("/pipelines").json()}
        assert http.get("/healthz").json()["ok"] is True
        assert "/pipelines/{name}/start" in http.get("/openapi.json").json()["paths"]


def test_serve_port_in_use_is_one_line(tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "mysqlcdc.cli.main", "serve", "--config-dir",
                               str(tmp_path), "--port", str(port)],
                              capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "cannot listen on" in done.stderr and "Traceback" not in done.stderr + done.stdout
    unreachable = subprocess.run([sys.executable, "-m", "mysqlcdc.cli.main", "status", "--url",
                                  f"http://127.0.0.1:{free_port()}"],
                                 capture_output=True, text=True, timeout=60)
    assert unreachable.returncode == 2 and "SERVE_UNREACHABLE" in unreachable.stderr
    assert "Traceback" not in unreachable.stderr

