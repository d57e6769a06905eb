"""The replication client: wire protocol only, no SQL about tables, no schema, no Spark.

pymysql logs in (authentication, TLS); after that :class:`ReplicationStream`
registers as a replica and yields raw binlog events.
"""

from mysqlcdc.protocol.connection import ConnectionSettings, connect_sql
from mysqlcdc.protocol.retry import RetryPolicy
from mysqlcdc.protocol.stream import RawEvent, ReplicationStream

__all__ = ["ConnectionSettings", "connect_sql", "RawEvent", "ReplicationStream", "RetryPolicy"]
