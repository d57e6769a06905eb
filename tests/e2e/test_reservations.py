"""The reservation example (examples/reservations/pipeline.yaml) end to end, against the real
MariaDB, Spark and the Kafka broker: the outbox router, flattening without back-queries (the
race the article describes, with a query-back transform as the counter-example), the audit
plugin's callbacks, and state that survives restarts and a replayed batch."""

from __future__ import annotations

import importlib.util
import json
import shutil
import textwrap
from pathlib import Path

import pyarrow.dataset as ds
import pytest
import yaml

from mysqlcdc.config import load_pipeline_from_dict
from mysqlcdc.pipeline.runner import run_pipeline

from tests.support.kafka import read_topic, topic_names
from tests.support.mariadb import binlog_position

pytestmark = pytest.mark.e2e

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "reservations"

QUERY_BACK = textwrap.dedent('''
    """The counter-example: flattening by querying the source when the event is processed."""
    import pymysql

    SERVER = {server!r}

    def query_back(event):
        if event["table"] != "reservation" or event["after"] is None:
            return event
        conn = pymysql.connect(**SERVER)
        with conn.cursor() as cur:
            cur.execute("SELECT name FROM user WHERE id = %s", (event["after"]["user_id"],))
            event["after"]["user_name"] = cur.fetchone()[0]
        conn.close()
        return event
''')


def _app():
    spec = importlib.util.spec_from_file_location("reservations_app", EXAMPLE / "app.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _config(mariadb, kafka, db: str, tmp_path: Path):
    """The example's pipeline file, pointed at the test servers and a fresh database."""
    text = (EXAMPLE / "pipeline.yaml").read_text().replace("mysqlcdc_demo", db)
    data = yaml.safe_load(text)
    data["name"] = db.replace("_", "-")
    data["source"].update(host=mariadb.host, port=mariadb.port, user=mariadb.user,
                          server_id=4700, max_events_per_batch=30)
    data["spark"] = {"checkpoint": str(tmp_path / "ck"), "trigger_interval": "200 milliseconds"}
    data["transforms_path"].append(str(tmp_path / "code"))
    kafka_sink, flat, plugins = (s[next(iter(s))] for s in data["sinks"])
    kafka_sink.update(bootstrap_servers=kafka.bootstrap, partitions=1, write_tasks=1,
                      delivery_timeout_s=10)
    kafka_sink["transforms"][0]["outbox"]["topic"] = f"{db}.outbox.{{aggregate_type}}"
    flat["path"] = str(tmp_path / "flat")
    plugins["options"]["audit_file"] = str(tmp_path / "audit.jsonl")
    return load_pipeline_from_dict(data, base_dir=EXAMPLE)


def _side_config(mariadb, db: str, tmp_path: Path, start):
    """A second pipeline over the same changes: the query-back counter-example, and the
    outbox's columns as a table (run after the example, to keep few queries at once)."""
    return load_pipeline_from_dict({
        "name": f"{db}-side".replace("_", "-"),
        "source": {"host": mariadb.host, "port": mariadb.port, "user": mariadb.user,
                   "server_id": 4720, "start": str(start), "tables": {"include": [f"{db}.*"]}},
        "spark": {"checkpoint": str(tmp_path / "ck-side"), "trigger_interval": "200 milliseconds"},
        "transforms_path": [str(tmp_path / "code")],
        "sinks": [
            {"changelog": {"path": str(tmp_path / "queried"),
                           "transforms": [{"python": {"function": "i15_queryback:query_back"}},
                                          {"filter": {"tables": [f"{db}.reservation"]}}]}},
            {"changelog": {"path": str(tmp_path / "outbox"),
                           "transforms": [{"outbox": {"table": f"{db}.cdc_outbox"}}]}}],
    })


def _rows(path: Path) -> list[dict]:
    rows = ds.dataset(str(path), format="parquet", partitioning="hive").to_table().to_pylist()
    return sorted((r for r in rows if r["op"] != "s"), key=lambda r: r["seq"])


def _audit(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]


def test_reservation_example(spark, mariadb, kafka, fresh_db, tmp_path):
    app = _app()
    url = f"mysql://{mariadb.user}:{mariadb.password}@{mariadb.host}:{mariadb.port}"
    app.create_schema(url, fresh_db)
    mariadb.sql(f"INSERT INTO `{fresh_db}`.user VALUES (1,'Ada','ada@example.com'),"
                "(2,'Linus','linus@example.com')",
                f"INSERT INTO `{fresh_db}`.thing VALUES (1,'Kayak',35.00),(2,'Tent',12.50)",
                f"CREATE TABLE `{fresh_db}`.test_log (id INT PRIMARY KEY) ENGINE=MyISAM")
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "i15_queryback.py").write_text(QUERY_BACK.format(server=dict(
        host=mariadb.host, port=mariadb.port, user=mariadb.user, password=mariadb.password,
        database=fresh_db)))
    cfg = _config(mariadb, kafka, fresh_db, tmp_path)

    # Run 1: the snapshot. Users and things are known to flatten from here on.
    run_pipeline(cfg, until_idle=True, spark=spark)
    # The application books, a user is renamed right after a booking, the outbox is
    # cleaned; a MyISAM write inside a rolled-back transaction.
    start = binlog_position(mariadb)
    app.run(url, first_id=1, db=fresh_db)
    conn = mariadb.connect(database=fresh_db, autocommit=False)
    with conn.cursor() as cur:
        cur.execute("UPDATE thing SET price = 36 WHERE id = 1")
        cur.execute("INSERT INTO test_log VALUES (1)")
        conn.rollback()
    conn.close()
    # Run 2: a restart; everything since the snapshot.
    run_pipeline(cfg, until_idle=True, spark=spark)
    run_pipeline(_side_config(mariadb, fresh_db, tmp_path, start), until_idle=True, spark=spark)

    flat = _rows(tmp_path / "flat")
    assert [(r["op"], json.loads(r["key"])["id"]) for r in flat] == [("c", 1), ("c", 2), ("u", 1)]
    booked, linus, confirmed = (json.loads(r["after"]) for r in flat)
    assert booked["user"] == {"id": 1, "name": "Ada", "email": "****example.com"}   # as booked
    assert booked["thing"] == {"id": 1, "name": "Kayak", "price": "35.00"}
    assert booked["weekday"] == "Monday" and booked["starts_at"] == "2026-06-01 09:00:00"
    assert linus["user"]["name"] == "Linus"
    assert confirmed["user"]["name"] == "Ada Lovelace"       # renamed before the confirmation
    assert json.loads(flat[2]["before"])["user"]["name"] == "Ada Lovelace"

    # The query-back implementation reads the row when it processes the event: the
    # rename that came after the booking leaks into the booking.
    queried = _rows(tmp_path / "queried")
    assert json.loads(queried[0]["after"])["user_name"] == "Ada Lovelace"

    # The outbox: only its inserts, one message per transaction, in commit order, keyed
    # by aggregate id, on a topic per aggregate type.
    topic = f"{fresh_db}.outbox.reservation"
    assert [t for t in topic_names(kafka.bootstrap, fresh_db)
            if "mysqlcdc-commits" not in t] == [topic]
    messages = read_topic(kafka.bootstrap, topic)[0]
    assert [m.key() for m in messages] == [b"1", b"2", b"1"]
    values = [json.loads(m.value()) for m in messages]          # the payloads, as written
    assert values == [
        {"reservation": 1, "user": 1, "thing": 1, "starts_at": "2026-06-01 09:00:00"},
        {"reservation": 2, "user": 2, "thing": 2, "starts_at": "2026-06-02 10:30:00"},
        {"reservation": 1}]
    sent = [dict(m.headers()) for m in messages]
    assert [h["eventType"] for h in sent] == [
        b"ReservationBooked", b"ReservationBooked", b"ReservationConfirmed"]
    assert {h["aggregateType"] for h in sent} == {b"reservation"}
    assert len({h["id"] for h in sent}) == 3 and not any("seq" in h for h in sent)
    outbox = _rows(tmp_path / "outbox")
    assert [json.loads(r["message_headers"])["eventType"] for r in outbox] == [
        "ReservationBooked", "ReservationBooked", "ReservationConfirmed"]
    assert [json.loads(r["message_value"]) for r in outbox] == values

    _check_audit(tmp_path, fresh_db)
    # Run 3 flattens one more change (with state from the runs before); then its batch is
    # replayed as after a crash, over a state that already holds what it wrote.
    mariadb.sql(f"UPDATE `{fresh_db}`.reservation SET status = 'cancelled' WHERE id = 2")
    run_pipeline(cfg, until_idle=True, spark=spark)
    _replayed_batch_is_identical(cfg, spark, tmp_path)


def _check_audit(tmp_path: Path, db: str) -> None:
    lines = _audit(tmp_path)
    assert [x["callback"] for x in lines if x["callback"] in ("init", "deinit")] == \
        ["init", "deinit", "init", "deinit"]                 # once per run
    rows = [x for x in lines if "gsn" in x]
    assert [x["gsn"] for x in rows] == list(range(1, len(rows) + 1))   # one per row image
    begins = [x for x in lines if x["callback"] == "begin_trx"]
    commits = [x for x in lines if x["callback"] == "commit_trx"]
    assert [x["trx_id"] for x in begins] == list(range(1, len(begins) + 1))   # across runs
    assert [c["trx_id"] for c in commits] == [b["trx_id"] for b in begins]
    assert begins[0]["gsn_hwm"] == 0
    assert [b["gsn_hwm"] for b in begins[1:]] == [c["last_gsn"] for c in commits[:-1]]
    first_run = lines[:[x["callback"] for x in lines].index("deinit")]
    snapshot = [x for x in first_run if "gsn" in x]
    assert {x["table"] for x in snapshot} == {f"{db}.user", f"{db}.thing"}
    assert {x["callback"] for x in snapshot} == {"insert"}
    users = [x["row"] for x in snapshot if x["table"] == f"{db}.user"]
    assert [u["email"] for u in users] == ["****example.com", "******example.com"]  # transformed
    renamed = [x for x in rows if x["callback"].startswith("update_") and x["table"] == f"{db}.user"]
    assert [x["row"]["name"] for x in renamed] == ["Ada", "Ada Lovelace"]
    deleted = [x for x in rows if x["callback"] == "delete"]
    assert len(deleted) == 3 and {x["table"] for x in deleted} == {f"{db}.cdc_outbox"}
    booking = [x for x in rows if x["table"] == f"{db}.reservation" and x["callback"] == "insert"]
    assert booking[0]["row"]["starts_at"] == "2026-06-01 09:00:00"
    # MariaDB writes a MyISAM change made inside a transaction as its own committed group
    # (ROW format): the plugin sees it committed; the rolled-back InnoDB update never appears.
    myisam = [x for x in rows if x["table"] == f"{db}.test_log"]
    assert len(myisam) == 1 and myisam[0]["callback"] == "insert"
    assert not [x for x in lines if x["callback"] == "rollback_trx"]
    assert not [x for x in rows[len(snapshot):] if x["table"] == f"{db}.thing"]


def _batch_ids(folder: Path) -> list[int]:
    return [int(p.name) for p in folder.iterdir() if p.name.isdigit()]


def _replayed_batch_is_identical(cfg, spark, tmp_path: Path) -> None:
    """Forget the flatten sink's last commit (and its output): the next run replays that
    batch, as Spark does after a crash, and must write the same rows."""
    before = _rows(tmp_path / "flat")
    assert json.loads(before[-1]["after"])["status"] == "cancelled"
    assert json.loads(before[-1]["after"])["user"]["name"] == "Linus"
    commits = tmp_path / "ck" / "1-changelog" / "commits"
    last = max(_batch_ids(commits))
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink(missing_ok=True)
    shutil.rmtree(tmp_path / "flat")            # the file sink writes the batch again
    run_pipeline(cfg, until_idle=True, spark=spark)
    replayed = _rows(tmp_path / "flat")
    assert replayed and replayed[-1]["seq"] == before[-1]["seq"]
    assert replayed == [r for r in before if r["seq"] >= replayed[0]["seq"]]
