"""The private test server lives in the package (the demo uses it too)."""

from mysqlcdc.pipeline.localserver import MariaDB, find_binary, free_port

__all__ = ["MariaDB", "find_binary", "free_port"]
