"""``mysqlcdc snapshot``: ask a pipeline for a snapshot of tables, while it streams.

The request is a row in the pipeline's signal table (``capture.signals``), so it takes
the same way as a signal written by hand: through the binlog, ordered with the data,
into the offsets of every sink's query. The checks a running pipeline would make are
made here first, so a mistake is named at once instead of in the pipeline's log: the
table is captured by the pipeline and exists, the capture user may SELECT it, and the
``--where`` filter is one the server accepts.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, replace

from mysqlcdc.capture.signals import SIGNAL_DDL
from mysqlcdc.config.models import PipelineConfig
from mysqlcdc.errors import (ConfigError, MissingPrivilegeError, MysqlcdcError, ProtocolError,
                             SnapshotRequestError)
from mysqlcdc.protocol.connection import connect_sql, query

__all__ = ["SnapshotRequest", "request_snapshot", "signal_row"]


@dataclass(frozen=True)
class SnapshotRequest:
    id: str
    tables: tuple[str, ...]
    where: str | None
    signal_table: str


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _qualified(name: str) -> str:
    db, table = name.split(".", 1)
    return f"{_q(db)}.{_q(table)}"


def signal_row(pipeline: str, tables: list[str], where: str | None) -> tuple[str, str, str]:
    """(id, type, data) of the signal asking ``pipeline`` to snapshot ``tables``."""
    data: dict = {"data-collections": tables, "type": "incremental", "pipeline": pipeline}
    if where:
        data["additional-conditions"] = [{"data-collection": t, "filter": where} for t in tables]
    return str(uuid.uuid4()), "execute-snapshot", json.dumps(data)


def request_snapshot(cfg: PipelineConfig, tables: list[str], where: str | None = None, *,
                     user: str | None = None, password: str | None = None) -> SnapshotRequest:
    """Check the request against the server and write it to the signal table.

    ``user``/``password``: who writes the signal row (default: the capture user), for
    capture users that may not INSERT."""
    from mysqlcdc.pipeline.runner import connection_settings

    signal = cfg.source.snapshot.signal_table
    if signal is None:
        raise ConfigError(f"pipeline {cfg.name} has no signal table (source.snapshot."
                          "signal_table is null), so it cannot be asked for a snapshot",
                          hint="Set source.snapshot.signal_table (default "
                          "mysqlcdc.mysqlcdc_signal) and restart the pipeline.")
    names = [_check_name(cfg, t) for t in tables]
    settings = connection_settings(cfg)
    conn = connect_sql(settings)
    try:
        for name in names:
            _check_readable(conn, name, where)
    finally:
        conn.close()
    writer = settings if user is None else replace(settings, user=user, password=password or "")
    ident, kind, data = signal_row(cfg.name, names, where)
    conn = connect_sql(writer)
    try:
        _insert(conn, signal, (ident, kind, data), writer.user)
    finally:
        conn.close()
    return SnapshotRequest(ident, tuple(names), where, signal)


def _check_name(cfg: PipelineConfig, name: str) -> str:
    db, sep, table = name.partition(".")
    if not sep or not db or not table:
        raise SnapshotRequestError(f"{name!r} is not DB.TABLE")
    if not cfg.source.tables.matcher().user(db, table):
        raise SnapshotRequestError(f"pipeline {cfg.name} does not capture {name} (source.tables "
                                   f"include {cfg.source.tables.include}, exclude "
                                   f"{cfg.source.tables.exclude})",
                                   hint="Add the table to source.tables.include, restart the "
                                   "pipeline, then request its snapshot.")
    return f"{db}.{table}"


def _check_readable(conn, name: str, where: str | None) -> None:
    sql = f"SELECT 1 FROM {_qualified(name)}" + (f" WHERE ({where})" if where else "") + " LIMIT 0"
    try:
        query(conn, sql)
    except MissingPrivilegeError as exc:
        raise MissingPrivilegeError(f"the capture user may not SELECT from {name}: "
                                    f"{exc.message}",
                                    hint=f"GRANT SELECT ON {_qualified(name)} TO the capture "
                                    "user, then request the snapshot again.") from exc
    except ProtocolError as exc:
        code = getattr(exc, "server_code", 0)
        if code in (1146, 1049):
            raise SnapshotRequestError(f"{name} does not exist on the server") from exc
        raise SnapshotRequestError(f"the server refuses the snapshot query of {name}"
                                   + (f" with --where {where!r}" if where else "")
                                   + f": {exc.message}") from exc


def _insert(conn, signal: str, row: tuple[str, str, str], user: str) -> None:
    db, table = signal.split(".", 1)
    sql = f"INSERT INTO {_qualified(signal)} (id, type, data) VALUES (%s, %s, %s)"
    try:
        with conn.cursor() as cur:
            try:
                cur.execute(sql, row)
            except Exception as exc:        # noqa: BLE001 - mapped below
                if _code(exc) not in (1146, 1049):
                    raise
                cur.execute(f"CREATE DATABASE IF NOT EXISTS {_q(db)}")
                cur.execute(SIGNAL_DDL.format(table=_qualified(signal)))
                cur.execute(sql, row)
    except MysqlcdcError:
        raise
    except Exception as exc:                # noqa: BLE001 - pymysql errors, named here
        code = _code(exc)
        ddl = (f"CREATE DATABASE IF NOT EXISTS {_q(db)}; "
               + SIGNAL_DDL.format(table=_qualified(signal))
               + f"; GRANT INSERT ON {_qualified(signal)} TO {user!r}")
        if code in (1044, 1142, 1227, 1045):
            raise MissingPrivilegeError(
                f"user {user!r} may not write the signal table {signal} ({code}: {exc})",
                hint=f"Run as an administrator: {ddl}; or pass --user/--password-env of an "
                "account that may.") from exc
        raise ProtocolError(f"writing the snapshot request to {signal} failed: {exc}",
                            hint=f"The signal table must have columns id, type, data: {ddl}") from exc


def _code(exc: BaseException) -> int:
    args = getattr(exc, "args", ())
    return args[0] if args and isinstance(args[0], int) else 0
