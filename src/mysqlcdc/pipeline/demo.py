"""``mysqlcdc demo``: see a whole pipeline work with one command.

It starts a throwaway MariaDB with the binlog on (or uses ``--mysql URL``),
creates a small reservation schema (user, thing, reservation), starts a
pipeline into ``./mysqlcdc-demo/``, applies inserts, updates and deletes,
waits until every change is in the changelog and prints them. With ``--mirror``
the pipeline also keeps a Delta Lake mirror of the three tables
(``./mysqlcdc-demo/mirror``), which the demo compares with ``SELECT *`` of the
source at the end.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable
from urllib.parse import unquote, urlparse

from mysqlcdc.errors import ConfigError

__all__ = ["DemoServer", "DemoResult", "SCHEMA", "TABLES", "WORKLOAD", "parse_mysql_url",
           "run_demo"]

DEMO_DB = "mysqlcdc_demo"
MARKER = ".mysqlcdc-demo"
TABLES = ("user", "thing", "reservation")

SCHEMA = [
    f"DROP DATABASE IF EXISTS {DEMO_DB}",
    f"CREATE DATABASE {DEMO_DB}",
    f"""CREATE TABLE {DEMO_DB}.user (
        id INT PRIMARY KEY, name VARCHAR(64) NOT NULL, email VARCHAR(128) NOT NULL)""",
    f"""CREATE TABLE {DEMO_DB}.thing (
        id INT PRIMARY KEY, name VARCHAR(64) NOT NULL, price DECIMAL(10,2) NOT NULL)""",
    f"""CREATE TABLE {DEMO_DB}.reservation (
        id INT PRIMARY KEY, user_id INT NOT NULL, thing_id INT NOT NULL,
        starts_at DATETIME NOT NULL, status ENUM('pending','confirmed','cancelled') NOT NULL)""",
]

# Each step is one transaction.
WORKLOAD: list[list[str]] = [
    [f"INSERT INTO {DEMO_DB}.user VALUES (1,'Ada','ada@example.com'),(2,'Linus','linus@example.com')",
     f"INSERT INTO {DEMO_DB}.thing VALUES (1,'Kayak',35.00),(2,'Tent',12.50),(3,'Bike',20.00)"],
    [f"INSERT INTO {DEMO_DB}.reservation VALUES (1,1,1,'2026-06-01 09:00:00','pending')",
     f"INSERT INTO {DEMO_DB}.reservation VALUES (2,2,2,'2026-06-02 10:30:00','pending')"],
    [f"UPDATE {DEMO_DB}.reservation SET status='confirmed' WHERE id=1"],
    [f"UPDATE {DEMO_DB}.thing SET price=39.90 WHERE id=1"],
    [f"INSERT INTO {DEMO_DB}.reservation VALUES (3,1,3,'2026-06-03 14:00:00','pending')"],
    [f"UPDATE {DEMO_DB}.reservation SET status='cancelled' WHERE id=2"],
    [f"DELETE FROM {DEMO_DB}.reservation WHERE id=2"],
    [f"UPDATE {DEMO_DB}.user SET email='ada@lovelace.example' WHERE id=1"],
]


@dataclass
class DemoResult:
    """What the demo captured: the changelog rows in ``seq`` order and, with ``--mirror``,
    per table the source rows and the Delta mirror's rows (read at one consistent cut)."""

    changes: list[dict]
    source: dict[str, list[tuple]] = field(default_factory=dict)
    mirror: dict[str, list[tuple]] = field(default_factory=dict)
    columns: dict[str, list[str]] = field(default_factory=dict)
    mirror_position: str | None = None

    def mirror_equal(self, table: str) -> bool:
        return self.source.get(table) == self.mirror.get(table)


@dataclass(frozen=True)
class DemoServer:
    host: str
    port: int
    user: str
    password: str


def parse_mysql_url(url: str) -> DemoServer:
    """``mysql://user[:password]@host[:port]`` -> DemoServer."""
    parsed = urlparse(url)
    if parsed.scheme not in ("mysql", "mariadb") or not parsed.hostname or not parsed.username:
        raise ConfigError(f"--mysql must look like mysql://user:password@host:3306, got "
                          f"{parsed.scheme}://{parsed.hostname or ''}...")
    return DemoServer(parsed.hostname, parsed.port or 3306, unquote(parsed.username),
                      unquote(parsed.password or ""))


def prepare_out_dir(out_dir: Path) -> None:
    """Empty a previous demo's folder (only one the demo made itself)."""
    if out_dir.exists():
        if not (out_dir / MARKER).exists():
            raise ConfigError(f"{out_dir} exists and was not made by the demo; move it away first")
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    (out_dir / MARKER).write_text("made by `mysqlcdc demo`; deleted by its next run\n")


def demo_config(server: DemoServer, out_dir: Path, start: str, mirror: bool = False):
    from mysqlcdc.config.loader import load_pipeline_from_dict

    sinks: list[dict] = [{"changelog": {"path": "changelog"}}]
    if mirror:
        sinks.append({"mirror": {"target": "delta", "path": "mirror"}})
    data = {
        "name": "demo",
        "source": {"host": server.host, "port": server.port, "user": server.user,
                   "password_env": "MYSQLCDC_DEMO_PASSWORD", "server_id": 5401,
                   "start": start, "tables": {"include": [f"{DEMO_DB}.*"]}},
        "spark": {"master": "local[2]", "checkpoint": "checkpoint",
                  "trigger_interval": "500 milliseconds"},
        "sinks": sinks,
    }
    return load_pipeline_from_dict(data, base_dir=out_dir,
                                   env={"MYSQLCDC_DEMO_PASSWORD": server.password})


def run_demo(out_dir: Path, server: DemoServer | None = None,
             step: Callable[[str], None] = lambda text: None, mirror: bool = False) -> DemoResult:
    """Run the demo; returns the changelog rows (as dicts) in ``seq`` order and, with
    ``mirror``, the source's and the Delta mirror's rows per table."""
    from mysqlcdc.pipeline.localserver import MariaDB

    prepare_out_dir(out_dir)
    local = None
    try:
        if server is None:
            step("starting a throwaway MariaDB (binlog ROW) in a temp folder")
            local = MariaDB().start()
            server = DemoServer(local.host, local.port, local.user, local.password)
        return _capture(out_dir, server, step, mirror)
    finally:
        if local is not None:
            step("stopping the throwaway MariaDB")
            local.stop()


def _capture(out_dir: Path, server: DemoServer, step: Callable[[str], None],
             mirror: bool) -> DemoResult:
    from mysqlcdc.capture.server import current_position, preflight
    from mysqlcdc.pipeline.runner import connection_settings, start_queries
    from mysqlcdc.protocol.connection import connect_sql
    from mysqlcdc.spark import build_session

    settings = connection_settings(demo_config(server, out_dir, "latest"))
    step(f"checking the server at {settings.address} (binlog, format, privileges)")
    preflight(settings, server_id=5401, start=None)
    conn = connect_sql(settings)
    try:
        step("creating the reservation schema (user, thing, reservation)")
        _run(conn, SCHEMA)
        start = current_position(conn)
        cfg = demo_config(server, out_dir, str(start), mirror)
        step("starting Spark and the pipeline (first start takes ~20 s)")
        spark = build_session(cfg.spark.master, "mysqlcdc-demo", {"spark.sql.shuffle.partitions": "2"})
        queries = start_queries(spark, cfg)
        step("applying inserts, updates and deletes")
        for txn in WORKLOAD:
            _run(conn, ["BEGIN", *txn, "COMMIT"])
        step("waiting until every change is in the changelog" +
             (" and the Delta mirror" if mirror else ""))
        for query in queries:
            query.processAllAvailable()
            query.stop()
        rows = spark.read.parquet(str(out_dir / "changelog")).orderBy("seq").collect()
        result = DemoResult([r.asDict() for r in rows])
        if mirror:
            step("comparing the Delta mirror with SELECT * of the source")
            _compare(conn, out_dir / "mirror", result)
    finally:
        conn.close()
    return result


def _compare(conn, root: Path, result: DemoResult) -> None:
    from mysqlcdc.sinks.mirror import read_consistent

    cut = read_consistent(root)
    result.mirror_position = str(cut.position) if cut.position else None
    with conn.cursor() as cur:
        for table in TABLES:
            cur.execute(f"SELECT * FROM {DEMO_DB}.{table} ORDER BY id")
            names = result.columns[table] = [d[0] for d in cur.description]
            result.source[table] = [tuple(r) for r in cur.fetchall()]
            name = f"{DEMO_DB}.{table}"
            found = cut.to_arrow(name).sort_by("id").to_pylist() if name in cut.tables else []
            result.mirror[table] = [tuple(r[n] for n in names) for r in found]


def _run(conn, statements: list[str]) -> None:
    with conn.cursor() as cur:
        for stmt in statements:
            cur.execute(stmt)
