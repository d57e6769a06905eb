"""`mysqlcdc serve`'s service: two pipelines in one SparkSession, managed over real HTTP
(uvicorn on a free port): create, pause, resume, stop, seek (both directions, confirmed),
start, delete, a backfill; metrics that count what the workload wrote, per table and op, and lag; the
dashboard rendered by headless Chromium; the API token."""

from __future__ import annotations

import json
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
def served(spark, tmp_path, request):
    import uvicorn

    token = getattr(request, "param", None)
    service = PipelineService(tmp_path / "pipelines", lambda: spark)
    poller = Poller(service, interval_s=0.3, lag_s=1.0)
    poller.start()
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(service, token), host="127.0.0.1",
                                           port=port, log_level="warning"))
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
        # per table and op: what the workload wrote (one rows event per INSERT/DELETE)
        for line in (f'{{db="{a}",op="c",pipeline="alpha",table="t"}} 30.0',
                     f'{{db="{b}",op="c",pipeline="beta",table="t"}} 11.0',
                     f'{{db="{b}",op="d",pipeline="beta",table="t"}} 1.0'):
            assert "mysqlcdc_table_rows_total" + line in metrics, line
            assert "mysqlcdc_table_events_total" + line in metrics, line
        assert 'mysqlcdc_batch_duration_seconds_count{pipeline="alpha"}' in metrics
        caught_up = _wait(lambda: (p := http.get("/pipelines/alpha").json())["lag_bytes"] == 0
                          and p["lag_seconds"] == 0 and p, what="alpha caught up")
        assert caught_up["gtid"] and caught_up["binlog_runway"]
        lagged = http.get("/metrics").text
        assert 'mysqlcdc_lag_bytes{pipeline="alpha"} 0.0' in lagged
        assert 'mysqlcdc_lag_seconds{pipeline="alpha"} 0.0' in lagged
        # the rates come from the read tasks' count files, at the poller's next refresh
        # after those files are written (the position may be caught up one refresh sooner)
        rate = f'mysqlcdc_table_rows_per_second{{db="{a}",op="c",pipeline="alpha"'
        _wait(lambda: rate in http.get("/metrics").text, what="alpha's per-table rate")

        # pause: the query stays up, reads nothing; lag grows; resume catches up
        assert http.post("/pipelines/alpha/pause").json()["state"] == "paused"
        mariadb.sql(*[f"INSERT INTO `{a}`.t VALUES ({i}, {i})" for i in range(201, 206)])
        behind = _wait(lambda: (p := http.get("/pipelines/alpha").json())["lag_bytes"]
                       and p["lag_seconds"] is not None and p["lag_seconds"] >= 2 and p,
                       what="alpha's lag while paused")
        assert behind["state"] == "paused" and behind["rows_total"] == 30
        assert 'state="paused"} 1.0' in http.get("/metrics").text
        assert http.post("/pipelines/alpha/resume").json()["state"] == "running"
        _wait(lambda: http.get("/pipelines/alpha").json()["rows_total"] == 35, what="resumed")

        # backfill: some rows of a table read again while alpha streams (a signal row)
        refused = http.post("/pipelines/alpha/snapshot", json={"tables": [f"{b}.t"]})
        assert refused.status_code == 422, refused.text
        assert refused.json()["code"] == "SNAPSHOT_REQUEST_INVALID"
        asked = http.post("/pipelines/alpha/snapshot",
                          json={"tables": [f"{a}.t"], "where": "id <= 5"})
        assert asked.status_code == 202 and asked.json()["tables"] == [f"{a}.t"], asked.text
        _wait(lambda: http.get("/pipelines/alpha").json()["rows_total"] == 40, what="backfill")
        read = service.spark.read.parquet(str(folder / "alpha-changelog")).where("op = 'r'")
        assert sorted(json.loads(r["key"])["id"] for r in read.collect()) == [1, 2, 3, 4, 5]

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
        _wait(lambda: http.get("/pipelines/alpha").json()["rows_total"] == 41, what="alpha")
        assert http.post("/pipelines/beta/start").json()["state"] == "running"
        _wait(lambda: http.get("/pipelines/beta").json()["rows_total"] >= 13, what="beta resumed")
        changes = service.spark.read.parquet(str(folder / "beta-changelog")).count()
        assert changes == 13                       # 11 inserts, 1 delete, 1 after the restart

        status = subprocess.run([sys.executable, "-m", "mysqlcdc.cli.main", "status", "--url", url],
                                capture_output=True, text=True, timeout=60,
                                env={**os.environ, "COLUMNS": "200"})
        assert status.returncode == 0 and "alpha" in status.stdout and "running" in status.stdout
        assert "SOURCE_UNREACHABLE" in status.stdout or "failed" in status.stdout

        _seek_both_ways(http, service, mariadb, b, start, folder)

        # The service starts again (a crash, a redeploy): a pipeline stopped through the
        # API stays stopped until started; the others run again.
        assert http.post("/pipelines/beta/stop").json()["state"] == "stopped"
        service.stop_all()                         # the service's own stop holds nothing
        again = PipelineService(folder, lambda: service.spark)
        try:
            held, failed = again.start_folder()
            assert held == ["beta"] and set(failed) == {"delta"}, (held, failed)
            assert again.get("alpha").state == "running"
            assert again.get("beta").state == "stopped" and again.held("beta")
            assert again.start("beta").state == "running" and not again.held("beta")
            mariadb.sql(f"INSERT INTO `{b}`.t VALUES (301, 301)")
            _wait(lambda: len(_changes(again, folder)) == 28, what="beta after the restart")
            made = again.create(_yaml("kappa", mariadb, b, start, 6501), start=False)
            assert made.state == "stopped" and again.held("kappa")     # created stopped
            again.delete("kappa")
            assert not again.held("kappa") and not (folder / "kappa.yaml").exists()
        finally:
            again.stop_all()
        assert not PipelineService(folder, None).held("beta")

        assert http.delete("/pipelines/beta").status_code == 204
        assert not (folder / "beta.yaml").exists()
        assert "beta" not in {p["name"] for p in http.get("/pipelines").json()}
        assert http.get("/healthz").json()["ok"] is True
        assert "/pipelines/{name}/start" in http.get("/openapi.json").json()["paths"]


def _changes(service, folder) -> list:
    rows = service.spark.read.parquet(str(folder / "beta-changelog")).collect()
    return sorted((int(r["seq"]), json.loads(r["key"])["id"], r["op"]) for r in rows)


def _seek_both_ways(http, service, mariadb, b: str, start: str, folder: Path) -> None:
    """Backward (replay) to the first position, then forward (skip) by GTID set."""
    before = _changes(service, folder)
    assert len(before) == 13
    state = folder / "beta-ck" / "0-changelog" / "mysqlcdc-schema"
    assert http.post("/pipelines/beta/seek", json={"to": start}).status_code == 409  # running
    assert http.post("/pipelines/beta/stop").json()["state"] == "stopped"
    refused = http.post("/pipelines/beta/seek", json={"to": start})
    assert refused.status_code == 409 and refused.json()["code"] == "SEEK_NOT_CONFIRMED"
    assert "replays" in refused.json()["message"] and not (state / "seek.json").exists()
    wrong = http.post("/pipelines/beta/seek", json={"to": start, "confirm": "skip"})
    assert wrong.status_code == 409 and not (state / "seek.json").exists()
    plan = http.post("/pipelines/beta/seek", json={"to": start, "confirm": "replay"})
    assert plan.status_code == 200 and plan.json()["direction"] == "replay", plan.text
    assert http.post("/pipelines/beta/start").json()["state"] == "running"
    replayed = _wait(lambda: len(c := _changes(service, folder)) == 26 and c, what="replay")
    assert replayed == sorted(before + before)           # the same changes, the same seqs
    assert not (state / "seek.json").exists() and list((state / "seek-done").iterdir())

    assert http.post("/pipelines/beta/stop").json()["state"] == "stopped"
    mariadb.sql(*[f"INSERT INTO `{b}`.t VALUES ({i}, {i})" for i in range(200, 205)])
    gtid = mariadb.sql("SELECT @@gtid_binlog_pos")[0][0]
    refused = http.post("/pipelines/beta/seek", json={"to": gtid})
    assert refused.status_code == 409 and "skips" in refused.json()["message"]
    plan = http.post("/pipelines/beta/seek", json={"to": gtid, "confirm": "skip"})
    assert plan.status_code == 200 and plan.json()["direction"] == "skip", plan.text
    assert http.post("/pipelines/beta/start").json()["state"] == "running"
    mariadb.sql(f"INSERT INTO `{b}`.t VALUES (300, 300)")
    after = _wait(lambda: len(c := _changes(service, folder)) == 27 and c, what="after skip")
    ids = {key for _, key, _ in after}
    assert 300 in ids and not ids & set(range(200, 205))


CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--hide-scrollbars"]


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    import shutil

    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    assert binary, "chromium not found: bash scripts/bootstrap.sh installs it"
    profile = tmp_path / f"chromium-profile-{len(list(tmp_path.glob('chromium-profile-*')))}"
    return subprocess.run([binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=120)


def test_dashboard_renders_in_chromium(served, mariadb, tmp_path, monkeypatch):
    import re

    from PIL import Image

    import mysqlcdc.api.service as svc

    monkeypatch.setattr(svc, "_SAMPLE_EVERY_S", 1.0)        # a sample a second, not every 5
    service, url = served
    d = _db(mariadb, "serve_dash")
    (tmp_path / "pipelines" / "dash.yaml").write_text(
        _yaml("dash", mariadb, d, str(binlog_position(mariadb)), 6501))
    service.load_folder()
    service.start("dash")
    for burst in range(6):                                  # one burst of rows a sample
        mariadb.sql(f"INSERT INTO `{d}`.t VALUES "         # one rows event of 20 rows
                    + ",".join(f"({burst * 20 + i}, {i})" for i in range(20)))
        _wait(lambda: service.get("dash").rows_total == 20 * (burst + 1), what="a burst")
        time.sleep(1.2)
    _wait(lambda: sum(1 for x in service.get("dash").samples if x["rows_per_s"] > 0) >= 3,
          what="throughput samples")

    dom = _chromium(tmp_path, "--dump-dom", f"{url}/")
    assert dom.returncode == 0, dom.stderr[-2000:]
    charts = re.findall(r'<svg class="chart".*?</svg>', dom.stdout, flags=re.S)
    assert len(charts) == 2                                   # lag and throughput of "dash"
    throughput = [float(v) for v in re.findall(r'class="point"[^>]*data-value="([^"]+)"',
                                               charts[1])]
    lag = re.findall(r'class="point"', charts[0])
    assert len(throughput) >= 5 and sum(v > 0 for v in throughput) >= 3 and lag
    assert 'class="state running"' in dom.stdout and "pipelines/dash/schema" in dom.stdout

    shot = tmp_path / "dashboard.png"
    done = _chromium(tmp_path, f"--screenshot={shot}", "--window-size=1300,900", f"{url}/")
    assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
    import numpy as np

    px = np.asarray(Image.open(shot).convert("RGB")).reshape(-1, 3).astype(int)
    blue = int(((px[:, 2] > 180) & (px[:, 0] < 60) & (px[:, 1] > 80) & (px[:, 1] < 140)).sum())
    assert blue > 100, f"the throughput line (#0969da) is not on the screenshot ({blue} px)"

    # the dashboard's links: schema history and quarantines of the pipeline
    with httpx.Client(base_url=url, timeout=30) as http:
        history = http.get("/pipelines/dash/schema").json()
        assert any(r["what"] == "bootstrap" and r["table"] == f"{d}.t" for r in history)
        assert http.get("/pipelines/dash/quarantines").json() == []
        tables = http.get("/pipelines/dash/tables").json()
        assert tables == [{"db": d, "table": "t", "op": "c", "rows": 120, "events": 6,
                           "rows_per_s": tables[0]["rows_per_s"],
                           "events_per_s": tables[0]["events_per_s"]}]


TOKEN = "tok-3f9aQ-never-shown"
SOURCE_PASSWORD = "pw-Qq93-never-shown"


@pytest.mark.parametrize("served", [TOKEN], indirect=True)
def test_api_token_required_and_no_secret_shown(served, mariadb, tmp_path, monkeypatch, caplog,
                                                capfd):
    import logging

    caplog.set_level(logging.DEBUG)
    service, url = served
    mariadb.sql("CREATE USER IF NOT EXISTS tokuser@'127.0.0.1' IDENTIFIED BY "
                f"'{SOURCE_PASSWORD}'",
                "GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO "
                "tokuser@'127.0.0.1'")
    monkeypatch.setenv("TOK_PW", SOURCE_PASSWORD)
    d = _db(mariadb, "serve_tok")
    text = _yaml("tok", mariadb, d, str(binlog_position(mariadb)), 6601).replace(
        f"user: {mariadb.user}", "user: tokuser\n  password_env: TOK_PW")
    seen: list[str] = []

    def keep(response):
        seen.append(response.text + repr(dict(response.headers)))
        return response

    with httpx.Client(base_url=url, timeout=60) as anonymous:
        for method, path in (("GET", "/pipelines"), ("GET", "/metrics"), ("GET", "/docs"),
                             ("GET", "/openapi.json"), ("POST", "/pipelines/tok/stop")):
            refused = keep(anonymous.request(method, path))
            assert refused.status_code == 401 and refused.json()["code"] == "UNAUTHORIZED"
        refused = keep(anonymous.post("/pipelines", content=text))
        assert refused.status_code == 401 and "tok" not in service.pipelines
        page = keep(anonymous.get("/"))
        assert page.status_code == 401 and "API token" in page.text
        assert keep(anonymous.get("/healthz")).status_code == 200
        wrong = keep(anonymous.get("/pipelines", headers={"Authorization": "Bearer nope"}))
        assert wrong.status_code == 401
        assert keep(anonymous.post("/login", data={"token": "nope"})).status_code == 401
        login = keep(anonymous.post("/login", data={"token": TOKEN}))
        assert login.status_code in (200, 303)
        assert keep(anonymous.get("/")).status_code == 200        # the cookie opens the page

    with httpx.Client(base_url=url, timeout=60,
                      headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        assert keep(http.post("/pipelines", content=text)).status_code == 201
        mariadb.sql(f"INSERT INTO `{d}`.t VALUES (1, 1)")
        _wait(lambda: keep(http.get("/pipelines/tok")).json()["rows_total"] == 1, what="tok")
        for path in ("/pipelines", "/metrics", "/", "/openapi.json", "/pipelines/tok/schema",
                     "/pipelines/tok/tables"):
            assert keep(http.get(path)).status_code == 200
        assert keep(http.post("/pipelines/tok/stop")).status_code == 200
        assert keep(http.delete("/pipelines/tok")).status_code == 204
    out, err = capfd.readouterr()
    for secret in (TOKEN, SOURCE_PASSWORD):
        assert not any(secret in s for s in seen), secret
        assert secret not in caplog.text and secret not in out + err, secret


def test_heartbeats_move_an_idle_pipeline_and_the_runway_warns(served, mariadb, tmp_path, caplog):
    import logging

    caplog.set_level(logging.WARNING, logger="mysqlcdc.runway")
    service, url = served
    d = _db(mariadb, "serve_hb")
    text = _yaml("hb", mariadb, d, str(binlog_position(mariadb)), 6701).replace(
        "  reconnect:", f"  heartbeat: {{interval_s: 0.5, table: {d}.heartbeat}}\n"
        "  runway_warning: 2d\n  reconnect:")
    mariadb.sql("SET GLOBAL binlog_expire_logs_seconds = 86400")
    try:
        with httpx.Client(base_url=url, timeout=60) as http:
            assert http.post("/pipelines", content=text).status_code == 201
            first = _wait(lambda: http.get("/pipelines/hb").json()["position"], what="position")
            # nothing is written to the captured tables; the heartbeats move the pipeline
            moved = _wait(lambda: (p := http.get("/pipelines/hb").json())["position"] != first
                          and (p["heartbeats"] or 0) >= 3 and p["lag_seconds"] is not None
                          and p["lag_seconds"] < 5 and p, what="heartbeats")
            assert moved["rows_total"] == 0               # the heartbeat table is not captured
            beats = mariadb.sql(f"SELECT beats FROM `{d}`.heartbeat WHERE pipeline = 'hb'")
            assert beats and beats[0][0] >= 3
            warned = _wait(lambda: (p := http.get("/pipelines/hb").json())["runway_warning"]
                           and p, what="the runway warning")
            assert 0 < warned["binlog_runway_s"] <= 86400
            metrics = http.get("/metrics").text
            assert 'mysqlcdc_binlog_runway_warning{pipeline="hb"} 1.0' in metrics
            assert 'mysqlcdc_heartbeats_total{pipeline="hb"}' in metrics
            assert "binlog runway" in caplog.text and "hb" in caplog.text
            assert caplog.text.count("binlog runway") == 1        # one line, not one per check
            assert http.delete("/pipelines/hb").status_code == 204
    finally:
        mariadb.sql("SET GLOBAL binlog_expire_logs_seconds = 0")


def test_sigterm_stops_serve_and_its_pipelines(mariadb, tmp_path):
    """systemd and Kubernetes stop a service with SIGTERM. uvicorn shuts its server down
    on it, then raised it again under the default handler, so `mysqlcdc serve` died by the
    signal before it stopped its pipelines. It now stops them as on Ctrl-C."""
    import signal

    db = _db(mariadb, "serve_term")
    folder = tmp_path / "pipelines"
    folder.mkdir()
    (folder / "term.yaml").write_text(_yaml("term", mariadb, db, str(binlog_position(mariadb)),
                                            8301))
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "mysqlcdc.cli.main", "serve", "--config-dir", str(folder),
         "--port", str(port), "--master", "local[2]"], cwd=tmp_path, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable, "COLUMNS": "200"})
    try:
        mariadb.sql(f"INSERT INTO {db}.t VALUES (1, 1)")

        def captured():
            try:
                got = httpx.get(f"http://127.0.0.1:{port}/pipelines/term", timeout=5).json()
            except (httpx.HTTPError, ValueError):
                return False
            return got.get("state") == "running" and got.get("rows_total", 0) >= 1
        _wait(captured, 180, "the pipeline's first row")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, out[-2000:]
    assert out.rstrip().endswith("stopped") and "Traceback" not in out, out[-2000:]
