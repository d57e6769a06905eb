"""Every failure a user can cause or meet ends in one line (and a hint), a non-zero exit
code and no traceback; --verbose adds the traceback. Each case is the real CLI in a
subprocess."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mysqlcdc.pipeline.localserver import free_port

from tests.support.mariadb import binlog_position

pytestmark = pytest.mark.e2e


def _cli(*args: str, env: dict | None = None, cwd=None, timeout: float = 180):
    return subprocess.run([sys.executable, "-m", "mysqlcdc.cli.main", *args],
                          capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env={**os.environ, "COLUMNS": "100", **(env or {})})


def _one_line(done: subprocess.CompletedProcess, code: str, rc: int = 2) -> str:
    text = done.stdout + done.stderr
    assert done.returncode == rc, text[-3000:]
    assert f"[{code}]" in done.stderr, text[-3000:]
    assert "Traceback" not in text and "py4j" not in text.lower(), text[-3000:]
    lines = done.stderr.splitlines()
    errors = [i for i, line in enumerate(lines) if line.startswith("error ")]
    assert len(errors) == 1, done.stderr
    # the message is one line however long (a config error lists its problems below it,
    # indented): no line of it is wrapped at the terminal's width on the way to the hint
    hint = next(i for i, line in enumerate(lines) if line.startswith("  hint: "))
    assert hint > errors[0], done.stderr
    assert all(line.startswith("  ") for line in lines[errors[0] + 1:hint]), done.stderr
    return done.stderr


def _pipeline(tmp_path: Path, port: int, start: str = "latest", user: str = "root",
              extra: str = "") -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(f"name: cli\nsource:\n  host: 127.0.0.1\n  port: {port}\n  user: {user}\n"
                    f"  server_id: 7901\n  start: \"{start}\"\n{extra}"
                    "spark:\n  checkpoint: ./ck\nsinks:\n  - console: {}\n")
    return path


def test_cli_failures_are_one_line(mariadb, tmp_path):
    empty = tmp_path / "no-server-here"
    empty.mkdir()
    err = _one_line(_cli("demo", "--out", str(tmp_path / "demo"),
                         env={"MYSQLCDC_SERVER_BIN": str(empty)}), "SERVER_BINARY_MISSING")
    assert "apt-get install mariadb-server" in err

    unreachable = _pipeline(tmp_path, free_port())
    _one_line(_cli("run", str(unreachable)), "SERVER_UNREACHABLE")
    verbose = _cli("--verbose", "run", str(unreachable))
    assert verbose.returncode == 2 and "Traceback" in verbose.stderr     # asked for

    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nsource:\n  host: h\n  user: u\n  server_id: 1\n  strat: latest\n"
                   "spark: {checkpoint: ./ck}\nsinks: [{console: {}}]\n")
    assert "bad.yaml:6" in _one_line(_cli("run", str(bad)), "CONFIG_INVALID")
    _one_line(_cli("run", str(tmp_path / "missing.yaml")), "CONFIG_INVALID")
    _one_line(_cli("decode", str(tmp_path / "missing.bin")), "CONFIG_INVALID")

    err = _one_line(_cli("serve", "--host", "0.0.0.0", "--config-dir", str(tmp_path / "srv"),
                         env={"MYSQLCDC_API_TOKEN": ""}), "CONFIG_INVALID")
    assert "MYSQLCDC_API_TOKEN" in err
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        err = _one_line(_cli("serve", "--config-dir", str(tmp_path / "srv"), "--port",
                             str(taken.getsockname()[1])), "CONFIG_INVALID")
        assert "cannot listen on" in err
    _one_line(_cli("status", "--url", f"http://127.0.0.1:{free_port()}"), "SERVE_UNREACHABLE")

    # a seek that jumps back must be confirmed; the CLI says so in one line
    here = binlog_position(mariadb)
    offsets = tmp_path / "ck" / "0-console" / "offsets"
    offsets.mkdir(parents=True)
    (offsets / "0").write_text("v1\n{}\n" + json.dumps({"file": here.file, "pos": here.pos}))
    seek_cfg = _pipeline(tmp_path, mariadb.port)
    err = _one_line(_cli("seek", str(seek_cfg), "earliest"), "SEEK_NOT_CONFIRMED")
    assert "replay" in err
    assert not (tmp_path / "ck" / "0-console" / "mysqlcdc-schema" / "seek.json").exists()


def test_ctrl_c_while_waiting_for_the_source(tmp_path):
    """A pipeline with a checkpoint waits through an outage; Ctrl-C then stops it cleanly."""
    offsets = tmp_path / "ck" / "0-console" / "offsets"
    offsets.mkdir(parents=True)
    (offsets / "0").write_text("v1\n{}\n" + json.dumps({"file": "mariadb-bin.000001",
                                                          "pos": 4}))
    config = _pipeline(tmp_path, free_port())
    proc = subprocess.Popen([sys.executable, "-m", "mysqlcdc.cli.main", "run", str(config)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(4)                                   # in the retry loop by now
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "unreachable since" in err and "stopped" in err
    assert "Traceback" not in out + err and "KeyboardInterrupt" not in err


def test_a_refused_schema_bootstrap_is_one_line(mariadb, fresh_db, tmp_path):
    """SCHEMA_BOOTSTRAP_UNSAFE is found by the DDL walk that runs while Spark starts
    (decision 23), or by the Spark source when that walk could not run: the CLI prints
    it alone, with its hint, without Spark's plan or a traceback. (A named error from a
    running query: test_source_outage's SERVER_UNREACHABLE and SOURCE_CHANGED.)"""
    mariadb.sql(f"CREATE TABLE `{fresh_db}`.t (id INT PRIMARY KEY)")
    before = binlog_position(mariadb)
    mariadb.sql(f"ALTER TABLE `{fresh_db}`.t ADD COLUMN v INT",
                f"INSERT INTO `{fresh_db}`.t VALUES (1, 1)")
    config = _pipeline(tmp_path, mariadb.port, start=str(before),
                       extra=f"  tables: {{include: [\"{fresh_db}.*\"]}}\n")
    err = _one_line(_cli("run", "--until-idle", str(config)), "SCHEMA_BOOTSTRAP_UNSAFE")
    assert "schema_bootstrap" in err and "== Physical Plan ==" not in err


def test_a_spark_driver_that_cannot_start_is_one_line(mariadb, fresh_db, tmp_path):
    """A Spark setting the JVM refuses ends in SPARK_START_FAILED after what Java said, one
    Spark refuses in it (or a checkpoint on a file system it has no jar for) with Spark's
    reason; a run whose JVM starts prints no boot warning of Spark's JVM (its incubating
    module)."""
    def config(name: str, conf: str) -> Path:
        path = tmp_path / f"{name}.yaml"
        path.write_text(f"name: {name}\nsource:\n  host: 127.0.0.1\n  port: {mariadb.port}\n"
                        f"  user: root\n  server_id: 7902\n  start: latest\n"
                        f"  tables: {{include: [\"{fresh_db}.*\"]}}\n"
                        f"spark:\n  checkpoint: ./ck-{name}\n  master: \"local[1]\"\n{conf}"
                        "sinks:\n  - console: {}\n")
        return path

    failed = _cli("run", "--until-idle", str(config("tiny", "  conf:\n    spark.driver.memory: "
                                                         "\"1k\"\n")), cwd=tmp_path)
    assert "spark.driver.memory" in _one_line(failed, "SPARK_START_FAILED")
    assert "Too small maximum heap" in failed.stdout + failed.stderr    # what Java said
    typo = _cli("run", "--until-idle", str(config("typo", "  conf:\n    spark.sql.shuffle."
                                                         "partitions: many\n")), cwd=tmp_path)
    err = _one_line(typo, "SPARK_START_FAILED")
    assert "'many'" in err and "spark.sql.shuffle.partitions" in err, err    # Spark's reason
    remote = config("remote", "").read_text().replace("checkpoint: ./ck-remote",
                                                       "checkpoint: s3a://bucket/ck")
    (tmp_path / "remote.yaml").write_text(remote)
    err = _one_line(_cli("run", "--until-idle", str(tmp_path / "remote.yaml"), cwd=tmp_path),
                    "SPARK_START_FAILED")
    assert "query" in err and "s3a" in err, err    # no file system for the scheme here

    mariadb.sql("CREATE TABLE t (id INT PRIMARY KEY)", db=fresh_db)   # its include matches
    done = _cli("run", "--until-idle", str(config("fine", "")), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "incubator" not in done.stderr and "WARNING" not in done.stderr, done.stderr


def test_a_spark_master_that_does_not_answer_is_one_line(mariadb, tmp_path):
    """A standalone master nobody listens at is named at once, instead of Spark's minute of
    retries with a stack trace each and an error about a stopped SparkContext."""
    path = tmp_path / "p.yaml"
    path.write_text(f"name: cli\nsource:\n  host: 127.0.0.1\n  port: {mariadb.port}\n"
                    "  user: root\n  server_id: 7903\n  start: latest\n"
                    f"spark:\n  checkpoint: ./ck\n  master: \"spark://127.0.0.1:{free_port()}\"\n"
                    "sinks:\n  - console: {}\n")
    err = _one_line(_cli("run", str(path), cwd=tmp_path), "SPARK_MASTER_UNREACHABLE")
    assert "start-master.sh" in err and "Exception" not in err
