"""The private test server lives in the package (the demo uses it too)."""

import time

from mysqlcdc.capture.server import current_position
from mysqlcdc.pipeline.localserver import MariaDB, find_binary, free_port
from mysqlcdc.types import BinlogPosition

__all__ = ["MariaDB", "find_binary", "free_port", "binlog_position", "start_replica",
           "wait_replicated", "xa_finish"]


def binlog_position(server: MariaDB) -> BinlogPosition:
    """The server's current binlog position (where a pipeline started now would begin)."""
    conn = server.connect()
    try:
        return current_position(conn)
    finally:
        conn.close()


def xa_finish(server: MariaDB, statement: str, timeout: float = 30.0) -> None:
    """Run ``XA COMMIT``/``XA ROLLBACK`` of a transaction another connection prepared.

    The server hands a prepared transaction over from its closed connection on its own
    time: until it has, another session's COMMIT or ROLLBACK is ``XAER_NOTA`` (1397), as
    a CI run on a slow machine found. Asked again until it is taken, or ``timeout``."""
    import pymysql

    deadline = time.monotonic() + timeout
    while True:
        try:
            server.sql(statement)
            return
        except pymysql.err.OperationalError as e:
            if e.args[0] != 1397 or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def start_replica(primary: MariaDB, server_id: int) -> MariaDB:
    """A second private mariadbd replicating ``primary`` by GTID, logging what it applies
    (``log_slave_updates``), as a failover candidate does."""
    replica = MariaDB(options={"server-id": str(server_id), "log-slave-updates": None}).start()
    replica.sql(f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={primary.port}, "
                f"MASTER_USER='{primary.user}', MASTER_PASSWORD='{primary.password}', "
                "MASTER_USE_GTID=slave_pos", "START SLAVE")
    return replica


def wait_replicated(primary: MariaDB, replica: MariaDB, timeout: float = 60.0) -> None:
    """Until ``replica`` has applied everything ``primary`` has logged."""
    gtid = primary.sql("SELECT @@gtid_binlog_pos")[0][0]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if replica.sql(f"SELECT MASTER_GTID_WAIT('{gtid}', 1)")[0][0] == 0:
            return
        status = replica.sql("SHOW SLAVE STATUS")
        if status and status[0][10] != "Yes" and status[0][11] != "Yes":
            raise AssertionError(f"replication stopped: {status[0]}")
    raise AssertionError(f"replica did not reach {gtid} in {timeout}s")
