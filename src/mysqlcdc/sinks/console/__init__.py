"""Console sink."""

from mysqlcdc.sinks.console.writer import start_console

__all__ = ["start_console"]
