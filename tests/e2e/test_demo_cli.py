"""The demo shows the reservation changes and a Delta mirror equal to the source; the CLI
reports bad input by name."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mysqlcdc.pipeline.demo import DEMO_DB, TABLES, WORKLOAD, run_demo

pytestmark = pytest.mark.e2e


def test_demo_captures_every_reservation_change(spark, tmp_path):
    steps: list[str] = []
    result = run_demo(tmp_path / "demo", None, steps.append, mirror=True)
    rows = result.changes
    statements = sum(len(txn) for txn in WORKLOAD)
    assert statements == 10
    ops = [(r["table"], r["op"]) for r in rows]
    assert ops.count(("user", "c")) == 2 and ops.count(("thing", "c")) == 3
    assert ops.count(("reservation", "c")) == 3 and ops.count(("reservation", "u")) == 2
    assert ops.count(("reservation", "d")) == 1 and ops.count(("thing", "u")) == 1
    assert ops.count(("user", "u")) == 1 and len(rows) == 13
    assert all(r["db"] == DEMO_DB for r in rows)
    price = [json.loads(r["after"]) for r in rows if (r["table"], r["op"]) == ("thing", "u")][0]
    assert price["price"] == "39.90"
    assert any("throwaway MariaDB" in s for s in steps)
    assert (tmp_path / "demo" / "changelog").is_dir()
    # --mirror: the Delta mirror holds what the source holds, value for value
    assert set(result.mirror) == set(TABLES)
    assert all(result.mirror_equal(t) for t in TABLES), (result.source, result.mirror)
    assert [r[0] for r in result.mirror["reservation"]] == [1, 3]
    assert result.mirror["reservation"][0][4] == "confirmed"
    assert result.mirror_position and (tmp_path / "demo" / "mirror" / DEMO_DB / "thing").is_dir()


def _cli(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mysqlcdc.cli.main", *args],
                          capture_output=True, text=True, cwd=cwd, timeout=120)


def test_cli_config_error_names_field_and_line(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("name: x\nsource:\n  host: h\n  user: u\n  server_id: twelve\n"
                   "spark:\n  checkpoint: ./cp\nsinks:\n  - changelog: {path: ./cl}\n")
    res = _cli("run", str(cfg))
    assert res.returncode == 2
    assert "CONFIG_INVALID" in res.stderr and "bad.yaml:5" in res.stderr
    assert "source.server_id" in res.stderr


def test_cli_preflight_error_for_unreachable_server(tmp_path):
    from mysqlcdc.pipeline.localserver import free_port

    cfg = tmp_path / "p.yaml"
    cfg.write_text(f"name: x\nsource:\n  host: 127.0.0.1\n  port: {free_port()}\n  user: u\n"
                   "  server_id: 9\nspark:\n  checkpoint: ./cp\nsinks:\n  - console: {}\n")
    res = _cli("run", str(cfg))
    assert res.returncode == 2 and "SERVER_UNREACHABLE" in res.stderr
    assert "hint:" in res.stderr


def test_cli_password_never_printed(mariadb, tmp_path):
    mariadb.sql("CREATE USER IF NOT EXISTS pwtest@'127.0.0.1' IDENTIFIED BY 'right-one'")
    cfg = tmp_path / "p.yaml"
    cfg.write_text(f"name: x\nsource:\n  host: 127.0.0.1\n  port: {mariadb.port}\n  user: pwtest\n"
                   "  password_env: PW_TEST\n  server_id: 9\nspark:\n  checkpoint: ./cp\n"
                   "sinks:\n  - console: {}\n")
    res = subprocess.run([sys.executable, "-m", "mysqlcdc.cli.main", "run", str(cfg)],
                         capture_output=True, text=True, timeout=120,
                         env={**__import__("os").environ, "PW_TEST": "wrong-secret-xyz"})
    assert res.returncode == 2 and "AUTHENTICATION_FAILED" in res.stderr
    assert "wrong-secret-xyz" not in res.stderr + res.stdout
