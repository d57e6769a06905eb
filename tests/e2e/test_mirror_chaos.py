"""Chaos: a random workload while `mysqlcdc run` is SIGKILLed at random points; afterwards
each mirror target (PostgreSQL, a second MariaDB, Redis, Delta Lake; current state and
history tables) equals SELECT * of the source."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from mysqlcdc.types import BinlogPosition

from tests.support.mariadb import binlog_position
from tests.support.mirror import assert_history_chains, assert_target_equals_source

pytestmark = pytest.mark.e2e

TXNS = 500
# The workload changes primary keys too: such an UPDATE reaches the sinks as a `d` of the
# old key and a `c` of the new one (docs/ENVELOPE.md), which the mirror applies per key in
# seq order.
PK_CHANGES = True


def _sink(kind: str, server, mode: str) -> str:
    """One mirror sink of the pipeline."""
    lines = [f"  - mirror:", f"      target: {kind}", f"      mode: {mode}"]
    if kind == "delta":
        return "\n".join(lines + [f"      path: {server}"])
    lines += [f"      host: {server.host}", f"      port: {server.port}"]
    if kind == "postgresql":
        lines += [f"      user: {server.user}", "      password_env: CHAOS_PG_PASSWORD"]
    elif kind == "mysql":
        lines += [f"      user: {server.user}", "      database: chaos_ledger"]
    else:
        lines += ["      password_env: CHAOS_REDIS_PASSWORD"]
    return "\n".join(lines)


def _config(tmp_path: Path, mariadb, db: str, start: str, targets: list) -> Path:
    path = tmp_path / "pipeline.yaml"
    path.write_text(f"""
name: mirror-chaos
source:
  host: {mariadb.host}
  port: {mariadb.port}
  user: {mariadb.user}
  server_id: 4343
  start: "{start}"
  tables:
    include: ["{db}.*"]
  max_events_per_batch: 200
spark:
  master: "local[2]"
  checkpoint: ./checkpoint
  trigger_interval: "200 milliseconds"
  conf:
    spark.sql.shuffle.partitions: "2"
sinks:
{chr(10).join(_sink(kind, server, mode) for kind, mode, server in targets)}
""")
    return path


def _start(config: Path, env: dict, *args: str) -> subprocess.Popen:
    log = open(config.parent / "pipeline.log", "ab")
    return subprocess.Popen([sys.executable, "-m", "mysqlcdc.cli.main", "run", str(config), *args],
                            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def _commits(tmp_path: Path, index: int) -> int:
    commits = tmp_path / "checkpoint" / f"{index}-mirror" / "commits"
    return len(list(commits.glob("[0-9]*"))) if commits.is_dir() else 0


def _workload(mariadb, db: str, done: threading.Event) -> None:
    rnd = random.Random(17)
    conn = mariadb.connect(database=db, autocommit=False)
    live: set[int] = set()
    next_id = 1
    with conn.cursor() as cur:
        for i in range(TXNS):
            if i == TXNS // 2:
                cur.execute("ALTER TABLE acct ADD COLUMN extra VARCHAR(10), MODIFY bal DECIMAL(14,3)")
            for _ in range(rnd.choice([1, 1, 2, 5])):
                r = rnd.random()
                if r < 0.35 or not live:
                    cur.execute("INSERT INTO acct (id, name, bal, big, seen) VALUES (%s,%s,%s,%s,%s)",
                                (next_id, f"n{next_id}", f"{rnd.randint(-999, 999)}.25",
                                 rnd.choice([0, 18446744073709551615]),
                                 f"2024-02-{rnd.randint(10, 28)} 13:45:07.123"))
                    live.add(next_id)
                    next_id += 1
                elif r < 0.6:
                    cur.execute("INSERT INTO hot VALUES (%s, 1) ON DUPLICATE KEY UPDATE n = n + 1",
                                (rnd.randint(1, 5),))
                elif r < 0.75:
                    victim = rnd.choice(sorted(live))
                    cur.execute("DELETE FROM acct WHERE id = %s", (victim,))
                    live.discard(victim)
                elif r < 0.8:
                    cur.execute("DELETE FROM hot WHERE k = %s", (rnd.randint(1, 5),))
                elif r < 0.85 and PK_CHANGES:
                    old = rnd.choice(sorted(live))
                    cur.execute("UPDATE acct SET id = %s WHERE id = %s", (next_id, old))
                    live.discard(old)
                    live.add(next_id)
                    next_id += 1
                else:
                    key = rnd.choice(sorted(live))
                    if i > TXNS // 2:
                        cur.execute("UPDATE acct SET name = %s, extra = %s WHERE id = %s",
                                    (f"u{i}", f"e{i}", key))
                    else:
                        cur.execute("UPDATE acct SET name = %s WHERE id = %s", (f"u{i}", key))
            conn.commit()
            time.sleep(0.02)
    conn.close()
    done.set()


FIXTURES = {"postgresql": "postgres", "mysql": "mariadb_target", "redis": "redis_server"}
TARGETS = [("postgresql", "current"), ("mysql", "current"), ("redis", "current"),
           ("delta", "current"), ("delta", "history")]


# One pipeline with every target as its own mirror sink (history mode runs on Delta here;
# its SQL form is in test_mirror.py and the integration tests). Each sink is its own query
# (DESIGN decision 17), so every kill lands somewhere else in each sink's batch, and one
# run costs a few Spark starts instead of a few per target.
def test_sigkill_chaos_every_target_equals_source(mariadb, fresh_db, tmp_path, request):
    targets = [(kind, mode, tmp_path / f"delta-{mode}" if kind == "delta"
                else request.getfixturevalue(FIXTURES[kind])) for kind, mode in TARGETS]
    servers = {kind: server for kind, _, server in targets}
    mariadb.sql(f"CREATE TABLE `{fresh_db}`.acct (id INT PRIMARY KEY, name VARCHAR(40), "
                "bal DECIMAL(12,2), big BIGINT UNSIGNED, seen DATETIME(3))",
                f"CREATE TABLE `{fresh_db}`.hot (k INT PRIMARY KEY, n INT)")
    start = str(binlog_position(mariadb))
    config = _config(tmp_path, mariadb, fresh_db, start, targets)
    passwords = [servers["postgresql"].password, servers["redis"].password]
    assert all(passwords)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           "CHAOS_PG_PASSWORD": passwords[0], "CHAOS_REDIS_PASSWORD": passwords[1]}
    done = threading.Event()
    writer = threading.Thread(target=_workload, args=(mariadb, fresh_db, done), daemon=True)
    rnd = random.Random(23)
    for kill in range(3):
        proc = _start(config, env)
        if not writer.is_alive() and not done.is_set():
            # every sink's schema history starts before the workload's DDL
            deadline = time.monotonic() + 240
            histories = [tmp_path / "checkpoint" / f"{i}-mirror" / "mysqlcdc-schema"
                         for i in range(len(targets))]
            while not all(h.is_dir() and any(h.glob("*")) for h in histories):
                assert proc.poll() is None, (tmp_path / "pipeline.log").read_text()[-3000:]
                assert time.monotonic() < deadline, "the sinks' schema histories never started"
                time.sleep(0.2)
            writer.start()
        watched = kill % len(targets)          # wait for a commit of a different sink each time
        seen = _commits(tmp_path, watched)
        deadline = time.monotonic() + 240
        while _commits(tmp_path, watched) <= seen and time.monotonic() < deadline:
            assert proc.poll() is None, (tmp_path / "pipeline.log").read_text()[-3000:]
            time.sleep(0.2)
        time.sleep(rnd.uniform(0.0, 2.0))          # somewhere inside a later batch
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    writer.join(timeout=300)
    assert done.is_set()
    final = _start(config, env, "--until-idle")
    assert final.wait(timeout=600) == 0, (tmp_path / "pipeline.log").read_text()[-3000:]
    log = (tmp_path / "pipeline.log").read_text()
    assert not any(p in log for p in passwords)
    for kind, mode, server in targets:
        assert_target_equals_source(mariadb, server, kind, fresh_db, ["acct", "hot"],
                                    history=mode == "history")
        if mode == "history":
            assert_history_chains(mariadb, server, kind, fresh_db, ["acct", "hot"])
    # `mysqlcdc mirror position` prints the transaction boundary each target reflects
    shown = subprocess.run([sys.executable, "-m", "mysqlcdc.cli.main", "mirror", "position",
                            str(config), "--json"], capture_output=True, text=True, env=env,
                           timeout=120)
    assert shown.returncode == 0, shown.stderr
    rows = [json.loads(line) for line in shown.stdout.splitlines()]
    assert [r["target"] for r in rows] == [kind for kind, _, _ in targets]
    for row, (kind, _, server) in zip(rows, targets):
        assert row["batch_id"] >= 2 and row["stopped"] == [], row
        at = BinlogPosition.parse(row["position"])
        assert BinlogPosition.parse(start) < at <= binlog_position(mariadb)
        if kind == "delta":           # every table's last commit is at or before the cut
            assert {t["table"] for t in row["tables"]} == {f"{fresh_db}.acct",
                                                           f"{fresh_db}.hot"}
            assert all(BinlogPosition.parse(t["position"]) <= at for t in row["tables"])
