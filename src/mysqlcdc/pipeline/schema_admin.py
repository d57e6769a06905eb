"""What ``mysqlcdc schema history`` and ``mysqlcdc schema resolve`` do.

Every sink's query keeps its own schema history beside its Spark checkpoint
(``<checkpoint>/<index>-<type>/mysqlcdc-schema/``). ``history`` reads the first
sink's; ``resolve`` writes the decision into every sink's history, where the
running (or next) pipeline picks it up when it plans its next micro-batch.
"""

from __future__ import annotations

from pathlib import Path

from mysqlcdc.config.models import PipelineConfig
from mysqlcdc.errors import ConfigError
from mysqlcdc.schema.history import HISTORY_FILE, SchemaHistory

__all__ = ["history_dirs", "table_timeline", "resolve_table", "parse_table"]


def history_dirs(cfg: PipelineConfig) -> list[Path]:
    from mysqlcdc.pipeline.runner import schema_history_dir

    dirs = [schema_history_dir(cfg, i) for i in range(len(cfg.sinks))]
    return [Path(d) for d in dirs if d is not None]


def _existing(cfg: PipelineConfig) -> list[SchemaHistory]:
    found = [SchemaHistory(d) for d in history_dirs(cfg) if (d / HISTORY_FILE).is_file()]
    if not found:
        raise ConfigError(
            f"pipeline {cfg.name} has no schema history yet (looked in "
            f"{', '.join(str(d) for d in history_dirs(cfg)) or 'no local checkpoint'})",
            hint="Run the pipeline once; the history is created when it plans its first batch.")
    return found


def parse_table(text: str) -> tuple[str, str]:
    db, sep, table = text.partition(".")
    if not sep or not db or not table:
        raise ConfigError(f"a table is named DB.TABLE, got {text!r}")
    return db, table


def table_timeline(cfg: PipelineConfig, table: str | None) -> list[dict]:
    history = _existing(cfg)[0]
    if table is None:
        return history.timeline()
    return history.timeline(*parse_table(table))


def resolve_table(cfg: PipelineConfig, table: str, action: str) -> list[str]:
    """Resolve ``table``'s open quarantine in every sink's history; returns what was done."""
    from mysqlcdc.pipeline.runner import connection_settings
    from mysqlcdc.protocol.connection import connect_sql
    from mysqlcdc.schema.introspect import load_tables

    db, name = parse_table(table)
    definition = None
    if action == "reload":
        conn = connect_sql(connection_settings(cfg))
        try:
            definition = load_tables(conn, lambda d, t: (d, t) == (db, name)).get((db, name))
        finally:
            conn.close()
        if definition is None:
            raise ConfigError(f"{table} does not exist on the server; nothing to reload",
                              hint="Use --skip to drop the table's held-back rows instead.")
    histories = _existing(cfg)
    held = [(h, h.open_quarantine(db, name)) for h in histories]
    if not any(q is not None for _, q in held):
        raise ConfigError(f"{table} is not quarantined in any sink's schema history",
                          hint="`mysqlcdc schema history PIPELINE.yaml` lists quarantines.")
    done = []
    for history, q in held:
        if q is not None:
            history.resolve(db, name, action, definition)
            done.append(f"{history.path}: {table} quarantined at {q.pos} -> {action}")
    # a sink whose stream is behind has not met the DDL yet: it would quarantine the table
    # there later, with nobody to resolve it; resolve it ahead at the same position
    for pos in sorted({q.pos for _, q in held if q is not None}):
        for history, q in held:
            if q is None and not history.has_quarantine(db, name, pos):
                history.resolve_ahead(db, name, pos, action, definition)
                done.append(f"{history.path}: {table} not held there yet (behind {pos}) -> "
                            f"{action} when its stream gets there")
    return done
