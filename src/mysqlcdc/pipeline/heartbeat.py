"""Heartbeats: a row written to the source every ``interval_s`` (``source.heartbeat``).

On a server whose captured tables are quiet the binlog may not move for hours: the
pipeline's position then stays in an old binlog file (which the server purges when it
expires) and "seconds behind" cannot tell idle from stuck. A heartbeat is one tiny
transaction per interval in its own table, which the pipeline never captures (it is
added to ``tables.exclude``): the binlog moves, the pipeline's offsets follow, and the
last transaction it read is never older than the interval when it keeps up.

The table holds one row per pipeline::

    CREATE TABLE mysqlcdc.mysqlcdc_heartbeat (
        pipeline VARCHAR(64) PRIMARY KEY, ts TIMESTAMP(6) NOT NULL, beats BIGINT NOT NULL)

The account needs ``CREATE, INSERT, UPDATE`` on it (the database and table are created
when missing). A failed beat is logged once (and again when it works after failing), is
counted, and never stops the pipeline.
"""

from __future__ import annotations

import logging
import threading
import time

import pymysql

from mysqlcdc.config.models import PipelineConfig
from mysqlcdc.errors import MysqlcdcError
from mysqlcdc.protocol.connection import connect_sql, query

__all__ = ["Heartbeat"]

log = logging.getLogger(__name__)


class Heartbeat(threading.Thread):
    """Writes the pipeline's heartbeat row until :meth:`stop`."""

    def __init__(self, cfg: PipelineConfig) -> None:
        from mysqlcdc.pipeline.runner import connection_settings

        super().__init__(name=f"mysqlcdc-heartbeat-{cfg.name}", daemon=True)
        hb = cfg.source.heartbeat
        assert hb is not None
        self.pipeline, self.interval = cfg.name, hb.interval_s
        self.db, self.table = hb.table.split(".", 1)
        self.settings = connection_settings(cfg)
        self.beats = self.errors = 0
        self.last_ok: float | None = None
        self.last_error: str | None = None
        self._stopped = threading.Event()
        self._conn = None
        self._ready = False

    def run(self) -> None:
        while not self._stopped.is_set():
            self.beat()
            self._stopped.wait(self.interval)
        self._close()

    def stop(self) -> None:
        self._stopped.set()

    def beat(self) -> bool:
        """One heartbeat; False (counted, logged once per failing streak) if it failed."""
        try:
            conn = self._connection()
            if not self._ready:
                self._create(conn)
                self._ready = True
            query(conn, f"INSERT INTO `{self.db}`.`{self.table}` VALUES "
                  f"({conn.escape(self.pipeline)}, NOW(6), 1) "
                  "ON DUPLICATE KEY UPDATE ts = NOW(6), beats = beats + 1")
        except (MysqlcdcError, pymysql.err.MySQLError, OSError) as err:
            self._close()
            self.errors += 1
            text = getattr(err, "message", None) or str(err)
            if self.last_error is None:
                log.warning("pipeline %s: heartbeat to %s.%s failed: %s (it needs CREATE, "
                            "INSERT, UPDATE on that table); retrying every %.0f s",
                            self.pipeline, self.db, self.table, text, self.interval)
            self.last_error = text
            return False
        if self.last_error is not None:
            log.warning("pipeline %s: heartbeat works again", self.pipeline)
        self.beats += 1
        self.last_ok, self.last_error = time.time(), None
        return True

    def _create(self, conn) -> None:
        """The table, when missing, by a plain CREATE TABLE: a schema history bootstrapped
        from an older position knows such a table did not exist before it (a CREATE ...
        IF NOT EXISTS could have replaced one, and would make that bootstrap refuse)."""
        found = query(conn, "SELECT COUNT(*) FROM information_schema.tables WHERE "
                            f"table_schema = {conn.escape(self.db)} AND "
                            f"table_name = {conn.escape(self.table)}")
        if found[0][0]:
            return
        if not query(conn, "SELECT 1 FROM information_schema.schemata WHERE schema_name = "
                           f"{conn.escape(self.db)}"):
            query(conn, f"CREATE DATABASE `{self.db}`")
        query(conn, f"CREATE TABLE `{self.db}`.`{self.table}` (pipeline VARCHAR(64) PRIMARY "
                    "KEY, ts TIMESTAMP(6) NOT NULL, beats BIGINT NOT NULL)")

    def _connection(self):
        if self._conn is None:
            self._conn = connect_sql(self.settings)
        return self._conn

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:   # noqa: BLE001 - it is broken already
                pass
