"""The private test server lives in the package (the demo uses it too)."""

from mysqlcdc.capture.server import current_position
from mysqlcdc.pipeline.localserver import MariaDB, find_binary, free_port
from mysqlcdc.types import BinlogPosition

__all__ = ["MariaDB", "find_binary", "free_port", "binlog_position"]


def binlog_position(server: MariaDB) -> BinlogPosition:
    """The server's current binlog position (where a pipeline started now would begin)."""
    conn = server.connect()
    try:
        return current_position(conn)
    finally:
        conn.close()
