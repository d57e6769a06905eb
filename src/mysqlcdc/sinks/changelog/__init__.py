"""Parquet changelog sink."""

from mysqlcdc.sinks.changelog.writer import current_state_sql, read_changelog, start_changelog

__all__ = ["start_changelog", "read_changelog", "current_state_sql"]
