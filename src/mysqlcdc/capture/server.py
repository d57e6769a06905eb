"""Facts about the source server, and the preflight check before capture.

Plain SQL over :func:`mysqlcdc.protocol.connection.connect_sql`. ``preflight``
checks, in this order and stopping at the first failure: the server answers,
the login works, the binlog is on, its format is ROW, the account has the
replication privileges, the start position is still on the server, and the
chosen server_id is free. Each failure is a named PreflightError (or
ServerUnreachableError) whose message says what is wrong and whose hint says
what to do.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from dataclasses import dataclass

import pymysql

from mysqlcdc.errors import (
    SourceChangedError,
    BinlogDisabledError,
    BinlogFilteredError,
    BinlogFormatError,
    ReplicaUpdatesNotLoggedError,
    BinlogPurgedError,
    MissingPrivilegeError,
    ProtocolError,
    ServerIdInUseError,
)
from mysqlcdc.protocol.connection import ConnectionSettings, connect_sql, query, show_binary_logs
from mysqlcdc.types import BinlogPosition

__all__ = [
    "SourceIdentity", "source_identity", "check_position",
    "ServerInfo", "server_info", "list_binlogs", "current_position", "earliest_position",
    "granted_privileges", "preflight",
]

_VARIABLES = ("server_id", "log_bin", "binlog_format", "binlog_row_image", "binlog_row_metadata",
              "binlog_checksum", "gtid_mode", "gtid_executed", "gtid_binlog_pos")
_SYNTAX = 1064
# Each requirement is met by any one of these names (MariaDB 10.5+ renamed some).
REQUIRED_PRIVILEGES: dict[str, frozenset[str]] = {
    "REPLICATION SLAVE": frozenset({"REPLICATION SLAVE", "REPLICATION REPLICA"}),
    "REPLICATION CLIENT": frozenset({"REPLICATION CLIENT", "BINLOG MONITOR"}),
    "SELECT": frozenset({"SELECT"}),
}


@dataclass(frozen=True)
class ServerInfo:
    """What the server says about itself; ``warnings`` are problems that do not stop capture."""

    version: str
    flavor: str                       # "mariadb" or "mysql"
    server_id: int
    log_bin: bool
    binlog_format: str
    binlog_row_image: str
    binlog_row_metadata: str | None   # None where the server has no such variable
    binlog_checksum: str
    gtid_mode: str | None             # MySQL's @@gtid_mode; None on MariaDB (always has GTIDs)
    gtid_position: str | None         # MySQL @@gtid_executed, MariaDB @@gtid_binlog_pos
    warnings: tuple[str, ...] = ()


def server_info(conn: pymysql.Connection) -> ServerInfo:
    """Version, flavor and the binlog settings that matter for capture."""
    version = str(query(conn, "SELECT VERSION()")[0][0])
    names = ", ".join(f"'{n}'" for n in _VARIABLES)
    rows = query(conn, f"SHOW GLOBAL VARIABLES WHERE Variable_name IN ({names})")
    v = {str(name).lower(): str(value) for name, value in rows}
    mariadb = "mariadb" in version.lower()
    info = ServerInfo(
        version=version, flavor="mariadb" if mariadb else "mysql",
        server_id=int(v.get("server_id", "0")), log_bin=v.get("log_bin", "OFF").upper() == "ON",
        binlog_format=v.get("binlog_format", "").upper(),
        binlog_row_image=v.get("binlog_row_image", "FULL").upper(),
        binlog_row_metadata=v["binlog_row_metadata"].upper() if "binlog_row_metadata" in v else None,
        binlog_checksum=v.get("binlog_checksum", "NONE").upper(),
        gtid_mode=None if mariadb else v.get("gtid_mode"),
        gtid_position=v.get("gtid_binlog_pos" if mariadb else "gtid_executed"),
    )
    return dataclasses.replace(info, warnings=_warnings(info))


def _warnings(info: ServerInfo) -> tuple[str, ...]:
    if info.binlog_row_image in ("", "FULL"):
        return ()
    return (f"binlog_row_image is {info.binlog_row_image}, not FULL: row images lack the columns "
            "the statement did not touch (SET GLOBAL binlog_row_image='FULL' to capture whole rows)",)


def list_binlogs(conn: pymysql.Connection) -> list[tuple[str, int]]:
    """The binlog files on the server as (name, size), oldest first."""
    return show_binary_logs(conn)


def _binlog_status(conn: pymysql.Connection) -> tuple:
    """The server's binlog status row: file, position, Binlog_Do_DB, Binlog_Ignore_DB."""
    for statement in ("SHOW MASTER STATUS", "SHOW BINARY LOG STATUS", "SHOW BINLOG STATUS"):
        try:
            rows = query(conn, statement)
        except ProtocolError as exc:
            if getattr(exc, "server_code", 0) == _SYNTAX:
                continue  # removed in MySQL 8.4 / not known to this server: try the next name
            raise
        if not rows:
            raise BinlogDisabledError("the server reports no binlog position: the binary log is off")
        return tuple(rows[0])
    raise ProtocolError("the server knows none of SHOW MASTER STATUS, SHOW BINARY LOG STATUS, "
                        "SHOW BINLOG STATUS", hint="Report the server version to mysqlcdc.")


def current_position(conn: pymysql.Connection) -> BinlogPosition:
    """The end of the binlog now: always a transaction boundary."""
    row = _binlog_status(conn)
    return BinlogPosition.of(str(row[0]), int(row[1]))


def _replication_channels(conn: pymysql.Connection) -> list[dict] | None:
    """This server's replication channels as the server lists them (a replica: one or
    more); None when it will not say (an account without the privilege to look)."""
    for statement in ("SHOW ALL SLAVES STATUS", "SHOW REPLICA STATUS", "SHOW SLAVE STATUS"):
        try:
            with conn.cursor(pymysql.cursors.DictCursor) as cur:
                cur.execute(statement)
                return [{str(k).lower(): v for k, v in row.items()} for row in cur.fetchall()]
        except pymysql.err.ProgrammingError as exc:
            if exc.args and exc.args[0] == _SYNTAX:
                continue
            return None
        except pymysql.err.MySQLError:
            return None
    return None


def _check_replica_logging(conn: pymysql.Connection, address: str) -> tuple[str, ...]:
    """Raise REPLICA_UPDATES_NOT_LOGGED on a replica that applies its source's changes
    without writing them to its own binlog (``log_slave_updates`` off): a pipeline reading
    it would see only what is written on it directly. A replication channel configured
    but not running is a warning (it will be so once started)."""
    rows = query(conn, "SHOW GLOBAL VARIABLES WHERE Variable_name IN "
                       "('log_slave_updates', 'log_replica_updates')")
    if any(str(value).upper() in ("ON", "1") for _, value in rows):
        return ()
    # status counters anyone may read (MariaDB); the channels' listing needs a privilege
    # a capture account may lack (REPLICA MONITOR), and names the sources
    status = query(conn, "SHOW GLOBAL STATUS WHERE Variable_name IN "
                         "('Slaves_running', 'Slave_running')")
    counted = any(str(v).upper() == "ON" or (str(v).isdigit() and int(v) > 0)
                  for _, v in status)
    channels = _replication_channels(conn) or []
    running = [c for c in channels
               if str(c.get("slave_sql_running") or c.get("replica_sql_running") or "") == "Yes"]
    names = ", ".join(str(c.get("master_host") or c.get("source_host") or "?") for c in
                      (running or channels)) or "its source"
    if running or counted:
        raise ReplicaUpdatesNotLoggedError(
            f"{address} is a replica of {names} with log_slave_updates OFF: the changes it "
            f"replicates are not written to its binlog, so a pipeline reading it would miss them")
    if not channels:
        return ()
    return (f"{address} has a replication channel from {names} configured but not running, "
            f"and log_slave_updates is OFF: once it runs, the changes it replicates will not "
            f"be in this server's binlog",)


def _list_tables(conn: pymysql.Connection) -> list[tuple]:
    """(db, table, TABLE_TYPE) of every table on the server but views."""
    return query(conn, "SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_TYPE FROM "
                       "information_schema.TABLES WHERE TABLE_TYPE <> 'VIEW'")


def _check_binlog_filters(conn: pymysql.Connection, address: str, listed: list[tuple],
                          include: tuple[str, ...], exclude: tuple[str, ...]) -> None:
    """Raise BINLOG_FILTERED when the server's ``binlog_do_db`` / ``binlog_ignore_db``
    keep the changes of a database whose tables the pipeline captures out of the binlog:
    it would read their snapshot and then never a change."""
    from mysqlcdc.capture.filters import TableFilter

    if not include:
        return
    row = _binlog_status(conn)
    if len(row) < 4:
        return
    do = {d.strip() for d in str(row[2] or "").split(",") if d.strip()}
    ignore = {d.strip() for d in str(row[3] or "").split(",") if d.strip()}
    if not do and not ignore:
        return
    captured = TableFilter(tuple(include), tuple(exclude))
    dbs = sorted({str(db) for db, t, _ in listed if captured.user(str(db), str(t))})
    lost = [db for db in dbs if db in ignore or (do and db not in do)]
    if lost:
        setting = (f"binlog_do_db={','.join(sorted(do))}" if do else "") + \
            (" and " if do and ignore else "") + \
            (f"binlog_ignore_db={','.join(sorted(ignore))}" if ignore else "")
        raise BinlogFilteredError(
            f"{address} keeps the changes of {', '.join(lost)} out of its binlog ({setting}), "
            f"and the pipeline captures tables there: it would never see their changes")


@dataclass(frozen=True)
class SourceIdentity:
    """What tells one server from another across a reconnect: its ``server_id``, MySQL's
    ``server_uuid``, and MariaDB's GTID binlog state (sequence numbers per domain and
    server only grow on one server; a new datadir or RESET MASTER starts them again)."""

    server_id: int
    server_uuid: str | None
    gtid_seq: dict[str, int]     # "domain-server" -> its last seq in @@gtid_binlog_state

    def as_json(self) -> dict:
        return {"server_id": self.server_id, "server_uuid": self.server_uuid,
                "gtid_seq": dict(self.gtid_seq)}

    @classmethod
    def from_json(cls, data: dict) -> "SourceIdentity":
        return cls(int(data["server_id"]), data.get("server_uuid"),
                   {str(k): int(v) for k, v in (data.get("gtid_seq") or {}).items()})

    def differs(self, now: "SourceIdentity") -> str | None:
        """Why ``now`` is not this server (None: it may well be)."""
        if self.server_uuid and now.server_uuid and self.server_uuid != now.server_uuid:
            return f"server_uuid was {self.server_uuid}, is {now.server_uuid}"
        if self.server_id != now.server_id:
            return f"@@server_id was {self.server_id}, is {now.server_id}"
        for key, seq in self.gtid_seq.items():
            if now.gtid_seq.get(key, 0) < seq:
                return (f"GTID {key}-{seq} was logged, but the server's binlog state is now "
                        f"{_gtid_text(now.gtid_seq) or 'empty'} (RESET MASTER or another datadir)")
        return None


def _gtid_text(seqs: dict[str, int]) -> str:
    return ",".join(f"{k}-{v}" for k, v in sorted(seqs.items()))


def source_identity(conn: pymysql.Connection) -> SourceIdentity:
    server_id = int(query(conn, "SELECT @@server_id")[0][0])
    try:
        uuid = query(conn, "SELECT @@server_uuid")[0][0]
    except ProtocolError:
        uuid = None                     # MariaDB has no server_uuid
    seqs: dict[str, int] = {}
    try:
        text = str(query(conn, "SELECT @@global.gtid_binlog_state")[0][0] or "")
    except ProtocolError:
        text = ""                       # MySQL: gtid_executed is not per-server monotonic here
    for part in filter(None, (p.strip() for p in text.split(","))):
        domain, server, seq = part.split("-")
        seqs[f"{domain}-{server}"] = max(seqs.get(f"{domain}-{server}", 0), int(seq))
    return SourceIdentity(server_id, str(uuid) if uuid else None, seqs)


def check_position(logs: list[tuple[str, int]], position: BinlogPosition) -> str | None:
    """Why the server's binlog cannot hold ``position`` any more (None: it can).

    A file that is gone but older than the oldest one left was purged (the read says
    BINLOG_PURGED); here only what a reset or another server explains: the file is
    missing yet not older than the oldest, or shorter than the position."""
    if not logs:
        return None
    sizes = dict(logs)
    if position.file in sizes:
        if sizes[position.file] < position.pos:
            return (f"{position.file} is {sizes[position.file]} bytes long now, shorter than "
                    f"the pipeline's position {position}")
        return None
    oldest = BinlogPosition.of(logs[0][0], 4)
    if position.file_number >= oldest.file_number:
        return (f"{position.file} is not on the server, whose binlog runs from {logs[0][0]} to "
                f"{logs[-1][0]}")
    return None


def earliest_position(conn: pymysql.Connection) -> BinlogPosition:
    """The start of the oldest binlog file still on the server."""
    logs = list_binlogs(conn)
    if not logs:
        raise BinlogDisabledError("the server lists no binlog files: the binary log is off")
    return BinlogPosition.of(logs[0][0], 4)


_GRANT_PRIVS = re.compile(r"^GRANT (?P<privs>.+?) ON (?P<obj>\S+) TO ", re.IGNORECASE)
_GRANT_ROLES = re.compile(r"^GRANT (?P<roles>(?:(?! ON ).)+?) TO ", re.IGNORECASE)
_SPLIT_PRIVS = re.compile(r",\s*(?![^()]*\))")  # commas outside column lists


def _parse_grants(lines: Iterable[str]) -> tuple[set[str], list[str]]:
    """Privilege names (global ones, plus SELECT at any level) and granted role names."""
    privileges: set[str] = set()
    roles: list[str] = []
    for line in lines:
        m = _GRANT_PRIVS.match(line)
        if m:
            names = {p.split("(")[0].strip().upper() for p in _SPLIT_PRIVS.split(m["privs"])}
            if m["obj"] == "*.*":
                privileges |= names
            elif "SELECT" in names or "ALL PRIVILEGES" in names or "ALL" in names:
                privileges.add("SELECT")
        elif (m := _GRANT_ROLES.match(line)):
            roles += [r.strip() for r in _SPLIT_PRIVS.split(m["roles"])]
    return privileges, roles


def granted_privileges(conn: pymysql.Connection) -> set[str]:
    """Privileges of the current user, through its active roles too (ALL expanded).

    Privileges SHOW GRANTS lists are then confirmed by running SHOW BINARY LOGS
    in preflight, since grants can promise more than a session really has.
    """
    privileges, pending = _parse_grants(r[0] for r in query(conn, "SHOW GRANTS FOR CURRENT_USER()"))
    seen: set[str] = set()
    while pending:
        role = pending.pop()
        if role in seen:
            continue
        seen.add(role)
        try:
            more, nested = _parse_grants(r[0] for r in query(conn, f"SHOW GRANTS FOR {role}"))
        except MissingPrivilegeError:
            continue  # the server hides grants of roles not active for us: they do not apply
        privileges |= more
        pending += nested
    if privileges & {"ALL", "ALL PRIVILEGES"}:
        privileges |= {name for names in REQUIRED_PRIVILEGES.values() for name in names}
    return privileges


def _check_privileges(conn: pymysql.Connection, settings: ConnectionSettings) -> None:
    have = granted_privileges(conn)
    missing = [need for need, names in REQUIRED_PRIVILEGES.items() if not have & names]
    if missing:
        raise MissingPrivilegeError(
            f"user {settings.user!r} lacks {', '.join(missing)} "
            f"(has: {', '.join(sorted(have)) or 'nothing'}) on {settings.address}")
    list_binlogs(conn)  # confirm: raises MissingPrivilegeError if refused after all


def _check_start(logs: list[tuple[str, int]], start: BinlogPosition) -> None:
    sizes = dict(logs)
    oldest = logs[0][0] if logs else "none"
    if start.file not in sizes:
        raise BinlogPurgedError(
            f"start {start}: binlog file {start.file} is not on the server (purged, or never "
            f"written); the oldest binlog still on the server is {oldest}")
    if start.pos > sizes[start.file]:
        raise BinlogPurgedError(
            f"start {start}: position {start.pos} lies beyond the end of {start.file} "
            f"({sizes[start.file]} bytes); the oldest binlog still on the server is {oldest}")


def _replica_ids(conn: pymysql.Connection) -> set[int] | None:
    """Server ids of registered replicas, or None if the user may not list them."""
    for statement in ("SHOW SLAVE HOSTS", "SHOW REPLICAS"):
        try:
            rows = query(conn, statement)
        except MissingPrivilegeError:
            return None
        except ProtocolError:
            continue
        return {int(row[0]) for row in rows}
    return None


def _capture_warnings(conn: pymysql.Connection, listed: list[tuple], include: tuple[str, ...],
                      exclude: tuple[str, ...]) -> tuple[str, ...]:
    """A warning for each include pattern that matches no table on the server now, with
    the closest names it has, and for each MariaDB sequence the patterns capture."""
    import difflib

    from mysqlcdc.capture.filters import TableFilter

    if not include:
        return ()
    tables = [f"{db}.{t}" for db, t, _ in listed]
    captured = TableFilter(tuple(include), tuple(exclude))
    out = [f"{db}.{t} is a SEQUENCE that source.tables.include matches: each refill of its "
           f"cache is captured as a row of a table without a key (leave it out with "
           f"source.tables.exclude)"
           for db, t, kind in listed if str(kind) == "SEQUENCE" and captured(db, t)]
    out += _cascade_warnings(conn, captured)
    patterns = [p for p in include if p != "*.*"]
    for pattern in patterns:
        match = TableFilter((pattern,))
        if any(match(*name.split(".", 1)) for name in tables):
            continue
        close = difflib.get_close_matches(pattern, tables, n=3, cutoff=0.6)
        out.append(f"source.tables.include {pattern!r} matches no table on the server now"
                   + (f" (did you mean {', '.join(close)}?)" if close else
                      "; its tables are captured once they are created"))
    return tuple(out)


def _cascade_warnings(conn: pymysql.Connection, captured) -> list[str]:
    """A warning for each captured table a foreign key's ON DELETE / ON UPDATE action
    changes: the storage engine runs that action and the server does not log the rows it
    changes, so no reader of the binlog sees them."""
    rows = query(conn, "SELECT CONSTRAINT_SCHEMA, TABLE_NAME, CONSTRAINT_NAME, "
                       "UNIQUE_CONSTRAINT_SCHEMA, REFERENCED_TABLE_NAME, DELETE_RULE, UPDATE_RULE "
                       "FROM information_schema.REFERENTIAL_CONSTRAINTS")
    out = []
    for db, table, name, parent_db, parent, on_delete, on_update in rows:
        acts = [f"ON {what} {rule}" for what, rule in (("DELETE", on_delete), ("UPDATE", on_update))
                if str(rule).upper() in ("CASCADE", "SET NULL", "SET DEFAULT")]
        if acts and captured(db, table):
            out.append(f"{db}.{table}: its foreign key {name} to {parent_db}.{parent} is "
                       f"{' and '.join(acts)}, and the server does not log the rows such an "
                       f"action changes: the stream never sees them, so sinks keep rows it "
                       f"deleted or changed (see README, Limits)")
    return out


def _check_server_id(conn: pymysql.Connection, info: ServerInfo,
                     server_id: int | range) -> tuple[str, ...]:
    """Raise if a server id of ``server_id`` (one id or a pipeline's whole range) is taken;
    return a warning if replicas cannot be listed."""
    ids = server_id if isinstance(server_id, range) else range(server_id, server_id + 1)
    shown = str(ids.start) if len(ids) == 1 else f"{ids.start}..{ids.stop - 1}"
    if info.server_id in ids:
        raise ServerIdInUseError(
            f"server_id {info.server_id} is the source server's own @@server_id"
            + ("" if len(ids) == 1 else f", inside the pipeline ids {shown}"))
    replicas = _replica_ids(conn)
    if replicas is None:
        return (f"could not list connected replicas (SHOW SLAVE HOSTS was refused), so server_id "
                f"{shown} was not checked against them",)
    taken = sorted(r for r in replicas if r in ids)
    if taken:
        raise ServerIdInUseError(
            f"server_id {taken[0]}{'' if len(ids) == 1 else f' (of the pipeline ids {shown})'} "
            f"is used by a replica or reader connected to the server now (SHOW SLAVE HOSTS lists {sorted(replicas)})")
    return ()


def preflight(settings: ConnectionSettings, *, server_id: int | range,
              start: BinlogPosition | None, resuming: bool = False,
              include: tuple[str, ...] = (), exclude: tuple[str, ...] = ()) -> ServerInfo:
    """Check the server can serve capture from ``start`` for ``server_id``; see module doc.

    ``resuming``: ``start`` is where a checkpoint stands, so a binlog that no longer
    holds it though it was not purged (past the end of its file, or a file newer than the
    server has) means a reset or another server: SOURCE_CHANGED, not BINLOG_PURGED.
    ``include``/``exclude``: the pipeline's table patterns; an include pattern that matches
    no table on the server (a typo, or a table still to come) is a warning, and so is a
    sequence they capture."""
    conn = connect_sql(settings)  # ServerUnreachableError, AuthenticationError
    try:
        info = server_info(conn)
        if not info.log_bin:
            raise BinlogDisabledError(f"the binary log is off on {settings.address} (log_bin=OFF)")
        if info.binlog_format != "ROW":
            raise BinlogFormatError(f"binlog_format is {info.binlog_format} on {settings.address}, "
                                    "and only ROW carries the changed rows")
        _check_privileges(conn, settings)
        listed = _list_tables(conn) if include else []
        _check_binlog_filters(conn, settings.address, listed, include, exclude)
        replica = _check_replica_logging(conn, settings.address)
        if start is not None:
            logs = list_binlogs(conn)
            if resuming and (why := check_position(logs, start)) is not None:
                raise SourceChangedError(
                    f"the binlog of {settings.address} no longer holds the checkpoint's "
                    f"position: {why} (RESET MASTER, a restored backup or another server on "
                    f"this address)")
            _check_start(logs, start)
        more = (_check_server_id(conn, info, server_id) + replica
                + _capture_warnings(conn, listed, include, exclude))
        return dataclasses.replace(info, warnings=info.warnings + more)
    finally:
        conn.close()
