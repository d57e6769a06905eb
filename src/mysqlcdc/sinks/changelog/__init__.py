"""Changelog sink: every change as a row of a partitioned Parquet or Delta Lake table."""

from mysqlcdc.sinks.changelog.settings import ChangelogSettings, from_sink_config
from mysqlcdc.sinks.changelog.writer import (current_state_sql, read_changelog, start_changelog,
                                             task_writer)

__all__ = ["start_changelog", "task_writer", "read_changelog", "current_state_sql", "ChangelogSettings",
           "from_sink_config"]
