"""Changelog sink: every change as a row of a partitioned Parquet or Delta Lake table.

Its names are imported on first use: a read task that only writes part files
(``files.PartFiles``) then never loads the config models or Spark's writer glue."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mysqlcdc.sinks.changelog.settings import ChangelogSettings, from_sink_config
    from mysqlcdc.sinks.changelog.writer import (current_state_sql, read_changelog,
                                                 start_changelog, task_writer)

__all__ = ["start_changelog", "task_writer", "read_changelog", "current_state_sql", "ChangelogSettings",
           "from_sink_config"]

_HOME = {"ChangelogSettings": "settings", "from_sink_config": "settings",
         "start_changelog": "writer", "task_writer": "writer", "read_changelog": "writer",
         "current_state_sql": "writer"}


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(import_module(f"{__name__}.{_HOME[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
