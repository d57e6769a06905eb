"""Where the server is and how to log in; opening a plain SQL connection.

pymysql performs the handshake, authentication (mysql_native_password,
caching_sha2_password, sha256_password, MariaDB ed25519 when ``pynacl`` is
installed) and TLS. Its errors are mapped here, at the boundary, to the
mysqlcdc error tree.
"""

from __future__ import annotations

import socket
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

import pymysql

from mysqlcdc.errors import (
    AuthenticationError,
    BinlogDisabledError,
    ConnectionLostError,
    MissingPrivilegeError,
    MysqlcdcError,
    ProtocolError,
    ServerUnreachableError,
)

__all__ = ["ConnectionSettings", "connect_sql", "query", "show_binary_logs"]

# pymysql / server error numbers that mean "who you are was refused".
_AUTH_CODES = {
    1045: "access denied (wrong user or password)",
    1130: "this host is not allowed to connect",
    1251: "the server wants an authentication plugin the client does not speak",
    1524: "the account's authentication plugin is not loaded on the server",
    1698: "access denied (wrong user or password)",
}
# can't connect, unknown host, gone, lost, too many connections, shutting down, net errors
_UNREACHABLE_CODES = {2002, 2003, 2005, 2006, 2013, 2055, 1040, 1053, 1077, 1152, 1158, 1159,
                      1160, 1161}
_PRIVILEGE_CODES = {1044, 1045, 1142, 1227}
_LOST_CODES = {1053, 1317, 1927, 2006, 2013, 2055, 4031}  # shutdown, interrupted, killed, gone, lost
_NOT_LOGGING = 1381                              # ER_NO_BINARY_LOGGING


@dataclass(frozen=True)
class ConnectionSettings:
    """How to reach and log in to one server. Pickles; repr hides the password.

    ``ssl`` is passed to pymysql unchanged (keys ``ca``, ``cert``, ``key``,
    ``check_hostname`` ...). ``read_timeout`` applies to SQL connections; the
    replication stream derives its own from the heartbeat period.

    >>> ConnectionSettings("db.example", user="cdc", password="s3cret")
    ConnectionSettings(host='db.example', port=3306, user='cdc', ssl=None, connect_timeout=10.0, read_timeout=None)
    """

    host: str
    _: KW_ONLY
    port: int = 3306
    user: str
    password: str = field(default="", repr=False)
    ssl: dict[str, Any] | None = None
    connect_timeout: float = 10.0
    read_timeout: float | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def connect_sql(settings: ConnectionSettings, **kw: Any) -> pymysql.Connection:
    """Open an autocommit utf8mb4 connection; errors become mysqlcdc errors.

    Extra keyword arguments go to ``pymysql.connect`` (e.g. ``database``).
    Raises AuthenticationError, ServerUnreachableError or ProtocolError.
    """
    params: dict[str, Any] = dict(
        host=settings.host, port=settings.port, user=settings.user,
        password=settings.password, ssl=settings.ssl, autocommit=True,
        charset="utf8mb4", connect_timeout=settings.connect_timeout,
        read_timeout=settings.read_timeout,
        # no `ssl` means no TLS (docs/CONFIG.md); pymysql would otherwise try TLS on its
        # own and build an SSL context, loading the system's CA bundle, per connection
        ssl_disabled=settings.ssl is None,
    )
    params.update(kw)
    # The greeting and the login get connect_timeout even on a connection whose statements
    # may take longer (or as long as they take): a server that is hung or stopped still has
    # its kernel accept connections, and without a limit the caller would wait in silence.
    wanted = params.get("read_timeout")
    if wanted is None or wanted > settings.connect_timeout:
        params["read_timeout"] = settings.connect_timeout
    try:
        conn = pymysql.connect(**params)
    except pymysql.err.MySQLError as exc:
        raise _map_connect_error(settings, exc) from exc
    except (OSError, socket.gaierror) as exc:
        raise ServerUnreachableError(f"cannot connect to {settings.address}: {exc}") from exc
    except RuntimeError as exc:  # pymysql: "'pynacl' package is required ..."
        raise AuthenticationError(
            f"cannot log in to {settings.address} as {settings.user!r}: {exc}",
            hint="Install the package named in the message (pip install pynacl for ed25519) "
            "or give the account a password plugin pymysql speaks natively.",
        ) from exc
    conn._read_timeout = wanted        # pymysql applies it at every read from here on
    return conn


def ping_within(conn: pymysql.Connection, timeout_s: float) -> None:
    """Ping ``conn``, waiting at most ``timeout_s`` for the answer (its statements keep
    their own limit): a hung or stopped server answers nothing, and pymysql raises."""
    before = conn._read_timeout
    conn._read_timeout = timeout_s
    try:
        conn.ping(reconnect=False)
    finally:
        conn._read_timeout = before


def _map_connect_error(settings: ConnectionSettings, exc: pymysql.err.MySQLError) -> Exception:
    code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else 0
    text = exc.args[1] if len(exc.args) > 1 else str(exc)
    where = f"{settings.user!r}@{settings.address}"
    if code in _AUTH_CODES:
        return AuthenticationError(f"cannot log in as {where}: {_AUTH_CODES[code]} ({code}: {text})")
    if code == 2013 and "timed out" in str(text):
        return ServerUnreachableError(
            f"cannot connect to {settings.address}: it accepted the connection but did not "
            f"answer within connect_timeout ({settings.connect_timeout:g} s): is the server "
            "hung or overloaded?")
    if code in _UNREACHABLE_CODES:
        return ServerUnreachableError(f"cannot connect to {settings.address}: {text}")
    return ProtocolError(f"connecting as {where} failed: ({code}) {text}",
                         hint="Read the server's message above; it names what it refused.")


def query(conn: pymysql.Connection, statement: str) -> list[tuple]:
    """Rows of one statement (empty if it returns none); errors get mysqlcdc names.

    The server's error number is kept as ``server_code`` on the raised error.
    """
    try:
        with conn.cursor() as cur:
            cur.execute(statement)
            return list(cur.fetchall()) if cur.description else []
    except pymysql.err.MySQLError as exc:
        raise _statement_error(statement, exc, conn._read_timeout or 0) from exc


def _statement_error(statement: str, exc: pymysql.err.MySQLError,
                     limit: float = 0) -> MysqlcdcError:
    code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else 0
    said = f"{statement!r} failed: ({code}) {exc.args[1] if len(exc.args) > 1 else exc}"
    err: MysqlcdcError
    if code in _PRIVILEGE_CODES:
        err = MissingPrivilegeError(f"the user may not run {said}")
    elif code == _NOT_LOGGING:
        err = BinlogDisabledError(f"the server's binary log is off: {said}")
    elif code == 2013 and "timed out" in str(exc):
        err = ConnectionLostError(f"the server did not answer {statement!r} within {limit:g} s "
                                  "(the connection's statement limit): is it hung or overloaded?")
    elif code in _LOST_CODES or (isinstance(exc, pymysql.err.InterfaceError) and not code):
        err = ConnectionLostError(f"the connection dropped: {said}")
    else:
        err = ProtocolError(said, hint="Read the server's message; it names what it refused.")
    err.server_code = code  # type: ignore[attr-defined]
    return err


def show_binary_logs(conn: pymysql.Connection) -> list[tuple[str, int]]:
    """``SHOW BINARY LOGS`` as (file name, size in bytes), oldest first."""
    return [(str(row[0]), int(row[1])) for row in query(conn, "SHOW BINARY LOGS")]
