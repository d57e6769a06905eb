"""Every error mysqlcdc raises on purpose.

The tree has two axes. Each error has a stable ``code`` (used in logs, docs and
tests) and is either *terminal* (retrying the same thing fails the same way: a
config typo, a purged binlog, corrupt bytes) or *transient* (the same call may
work later: a dropped connection, a server restarting). Errors from other
libraries are wrapped at the boundary where they occur; none is swallowed.

::

    MysqlcdcError
    ├── TerminalError
    │   ├── ConfigError                 config file or option is invalid
    │   │   └── SnapshotRequestError    an on-demand snapshot request that cannot run
    │   ├── DecodeError                 bytes that cannot be decoded exactly
    │   │   ├── TruncatedEventError
    │   │   ├── ChecksumMismatchError
    │   │   ├── MalformedEventError
    │   │   ├── EncryptedBinlogError
    │   │   ├── UnsupportedEventError   an event that can carry rows, not decodable
    │   │   └── StatementChangeError    a captured table's change logged as a statement
    │   ├── SchemaError                 row does not fit the table definition
    │   │   ├── UnsupportedDdlError     a DDL the schema history cannot apply with certainty
    │   │   ├── KafkaSchemaUnknownError the Kafka sink has no definition for a row
    │   │   ├── SchemaBootstrapError    history cannot start at that position
    │   │   ├── TableQuarantinedError   a table's rows are held back
    │   │   ├── UnsupportedTableError   a captured table of a kind mysqlcdc does not capture
    │   │   └── SnapshotTableError      a table cannot be snapshotted (keeps changing, bad key)
    │   ├── SnapshotTimeoutError        a snapshot chunk's SELECT outlives the time limit
    │   ├── PreflightError              server not usable for CDC
    │   │   ├── BinlogDisabledError
    │   │   ├── BinlogFormatError
    │   │   ├── MissingPrivilegeError
    │   │   ├── BinlogPurgedError
    │   │   ├── ServerIdInUseError
    │   │   └── AuthenticationError
    │   ├── ProtocolError               the server said something we do not accept
    │   ├── GtidPositionError           a GTID set has no single position on this server
    │   ├── SeekError                   a seek cannot be done as asked
    │   │   └── SeekNotConfirmedError   a seek that skips or replays, not confirmed as such
    │   ├── ServerBinaryMissingError    the demo's throwaway server is not installed
    │   ├── LocalServerError            the demo's throwaway server did not start
    │   ├── SparkStartError             Spark would not start the session or a query
    │   ├── UnauthorizedError           an API request without the instance's bearer token
    │   ├── MirrorTableStoppedError     a change a mirror target cannot apply (that table stops)
    │   ├── MirrorAuthError             a mirror target refused the credentials
    │   ├── TransformError              user code (a transform, a helper) raised on an event
    │   │   └── TransformResultError    a transform returned something that is not an event
    │   └── PluginError                 a plugin callback raised
    └── TransientError
        ├── ServerUnreachableError
        ├── SparkMasterUnreachableError no standalone Spark master answers at spark.master
        ├── ConnectionLostError
        ├── MirrorUnavailableError      a mirror target is down after every retry
        └── DeadLetterWriteError        the dead-letter folder or topic refused a write

Every error carries ``hint``: one sentence that says what to do. Errors about user
code also carry ``detail``: the user's traceback, printed after the hint.
"""

from __future__ import annotations

__all__ = [
    "MysqlcdcError",
    "TerminalError",
    "TransientError",
    "ConfigError",
    "DecodeError",
    "TruncatedEventError",
    "ChecksumMismatchError",
    "MalformedEventError",
    "EncryptedBinlogError",
    "UnsupportedEventError",
    "StatementChangeError",
    "XaPrepareNotFoundError",
    "BinlogFilteredError",
    "ReplicaUpdatesNotLoggedError",
    "RowImageNotFullError",
    "SchemaError",
    "UnsupportedDdlError",
    "PreflightError",
    "BinlogDisabledError",
    "BinlogFormatError",
    "MissingPrivilegeError",
    "BinlogPurgedError",
    "ServerIdInUseError",
    "AuthenticationError",
    "ProtocolError",
    "ServerUnreachableError",
    "ConnectionLostError",
    "SchemaBootstrapError",
    "TableQuarantinedError",
    "UnsupportedTableError",
    "StorageWriteError",
    "MirrorTableStoppedError",
    "MirrorAuthError",
    "MirrorUnavailableError",
    "ChangelogWriteError",
    "KafkaSchemaUnknownError",
    "SourceChangedError",
    "OutageTooLongError",
    "SnapshotTableError",
    "SnapshotTimeoutError",
    "SnapshotRequestError",
    "TransformError",
    "TransformResultError",
    "PluginError",
    "DeadLetterWriteError",
    "GtidPositionError",
    "SeekError",
    "SeekNotConfirmedError",
    "ServerBinaryMissingError",
    "LocalServerError",
    "SparkStartError",
    "SparkMasterUnreachableError",
    "UnauthorizedError",
    "from_text",
]


class MysqlcdcError(Exception):
    """Root of every error mysqlcdc raises on purpose."""

    code = "MYSQLCDC_ERROR"
    hint = ""
    transient = False

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if hint is not None:
            self.hint = hint

    def __reduce__(self):  # picklable across Spark worker boundaries
        return (_rebuild, (type(self), self.message, self.hint, dict(self.__dict__)))

    def __str__(self) -> str:
        text = f"[{self.code}] {self.message}"
        if self.hint:
            text += f"\n  hint: {self.hint}"
        detail = getattr(self, "detail", None)
        if detail:
            text += "".join(f"\n  | {line}" for line in detail.rstrip("\n").split("\n"))
        return text


def _rebuild(cls, message, hint, state):
    err = cls.__new__(cls)
    MysqlcdcError.__init__(err, message, hint=hint)
    err.__dict__.update(state)
    return err


class TerminalError(MysqlcdcError):
    """Retrying does not help; a person must change something."""


class TransientError(MysqlcdcError):
    """The same call may succeed later (network, restarts)."""

    transient = True


class ConfigError(TerminalError):
    code = "CONFIG_INVALID"
    hint = "Fix the named field in the config file and run again."


class DecodeError(TerminalError):
    """Bytes that cannot be decoded exactly. Carries where they are."""

    code = "DECODE_FAILED"
    hint = "Run `mysqlcdc decode FILE` on the binlog file to inspect the event, and report it."

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        pos: int | None = None,
        event_type: int | None = None,
        hint: str | None = None,
    ) -> None:
        where = []
        if file is not None:
            where.append(f"file={file}")
        if pos is not None:
            where.append(f"pos={pos}")
        if event_type is not None:
            where.append(f"event_type={event_type}")
        if where:
            message = f"{message} ({', '.join(where)})"
        super().__init__(message, hint=hint)
        self.file = file
        self.pos = pos
        self.event_type = event_type


class TruncatedEventError(DecodeError):
    code = "EVENT_TRUNCATED"
    hint = "The binlog ends inside an event: the file was cut or is still being written."


class ChecksumMismatchError(DecodeError):
    code = "CHECKSUM_MISMATCH"
    hint = "The event's CRC32 does not match its bytes: the binlog is corrupt at this position."


class MalformedEventError(DecodeError):
    code = "EVENT_MALFORMED"


class EncryptedBinlogError(DecodeError):
    code = "BINLOG_ENCRYPTED"
    hint = (
        "This binlog file is encrypted at rest; read it through the server's replication "
        "protocol (which sends it decrypted) instead of as a file."
    )


class UnsupportedEventError(DecodeError):
    code = "EVENT_UNSUPPORTED"
    hint = (
        "This event can carry row changes that mysqlcdc cannot decode yet; it stopped rather "
        "than skip them. Disable the server feature that writes it or upgrade mysqlcdc."
    )


class StatementChangeError(DecodeError):
    """The binlog holds a change of a captured table as a statement, not as rows: nothing
    in it says which rows changed, and passing over it would lose them in silence."""

    code = "CHANGE_LOGGED_AS_STATEMENT"
    hint = ("A session changed binlog_format to STATEMENT or MIXED (SET SESSION needs "
            "SUPER or BINLOG ADMIN): stop that. Then run once with the table in "
            "source.tables.exclude (the statement is passed over), put it back, and read it "
            "again with `mysqlcdc snapshot PIPELINE.yaml DB.TABLE`.")


class XaPrepareNotFoundError(DecodeError):
    """An XA COMMIT whose XA PREPARE (where the transaction's rows are) is in no binlog
    the server still has: its changes cannot be read, and passing over the commit would
    lose them in silence."""

    code = "XA_PREPARE_NOT_FOUND"
    hint = ("The binlog file holding the transaction's XA PREPARE was purged while it stayed "
            "prepared (XA RECOVER lists such transactions): keep binlogs longer than "
            "transactions stay prepared. Its rows are not readable: start the pipeline over "
            "with a new checkpoint and snapshot (or snapshot the tables it changed into a "
            "new sink).")


class SchemaError(TerminalError):
    code = "SCHEMA_MISMATCH"
    hint = "The table definition does not match the row events; see the schema docs in README."


class PreflightError(TerminalError):
    code = "PREFLIGHT_FAILED"


class BinlogDisabledError(PreflightError):
    code = "BINLOG_DISABLED"
    hint = "Start the server with log_bin (e.g. log_bin=mysql-bin) and binlog_format=ROW."


class BinlogFormatError(PreflightError):
    code = "BINLOG_FORMAT_NOT_ROW"
    hint = "Set binlog_format=ROW (SET GLOBAL binlog_format='ROW' and in the server config)."


class BinlogFilteredError(PreflightError):
    """The server's binlog filters (``binlog_do_db``, ``binlog_ignore_db``) leave out the
    changes of a database the pipeline captures."""

    code = "BINLOG_FILTERED"
    hint = ("Leave those databases out (source.tables.exclude: ['db.*']), or remove them from "
            "the server's binlog-ignore-db (add them to binlog-do-db) and restart it.")


class ReplicaUpdatesNotLoggedError(PreflightError):
    """The source is a replica that does not write the changes it replicates to its own
    binlog."""

    code = "REPLICA_UPDATES_NOT_LOGGED"
    hint = ("Set log_slave_updates=ON (MySQL: log_replica_updates) in the replica's server "
            "config and restart it, or capture from its source server.")


class RowImageNotFullError(PreflightError):
    """A sink that keeps whole rows (a mirror, changelog tables) reads from a server whose
    row images leave columns out (``binlog_row_image`` MINIMAL or NOBLOB)."""

    code = "ROW_IMAGE_NOT_FULL"
    hint = ("SET GLOBAL binlog_row_image = 'FULL' (and in the server config), then run "
            "again; changes logged before keep their partial images: snapshot those tables "
            "again (mysqlcdc snapshot).")


class MissingPrivilegeError(PreflightError):
    code = "MISSING_PRIVILEGE"
    hint = "GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO the capture user."


class BinlogPurgedError(PreflightError):
    code = "BINLOG_PURGED"
    hint = (
        "The start position is no longer on the server. Start from `earliest` (accepting the "
        "gap), or set source.snapshot.mode: when_needed to snapshot the tables again on the "
        "same checkpoint; keep binlogs longer (binlog_expire_logs_seconds)."
    )


class ServerIdInUseError(PreflightError):
    code = "SERVER_ID_IN_USE"
    hint = "Choose a server_id no other replica or reader of this server uses."


class AuthenticationError(PreflightError):
    code = "AUTHENTICATION_FAILED"
    hint = "Check the user and the password (password_env names the variable that holds it)."


class ProtocolError(TerminalError):
    code = "PROTOCOL_ERROR"


class ServerUnreachableError(TransientError):
    code = "SERVER_UNREACHABLE"
    hint = "Check host and port, that the server is running and that no firewall is in the way."


class OutageTooLongError(ServerUnreachableError):
    """The source stayed away longer than ``source.reconnect.max_wait_s``: terminal, so
    that no retry loop further up starts a second wait."""

    transient = False
    hint = ("Start the server (or fix the network) and run the pipeline again: it resumes "
            "from its checkpoint. Raise source.reconnect.max_wait_s to wait longer.")


class ConnectionLostError(TransientError):
    code = "CONNECTION_LOST"
    hint = "The connection dropped; mysqlcdc reconnects and resumes from the last position."


class SourceChangedError(TerminalError):
    """After a reconnect the server is not the one the pipeline read from, or its binlog
    no longer holds the pipeline's position (RESET MASTER, another datadir)."""

    code = "SOURCE_CHANGED"
    hint = ("Point source.host/port back at the server this pipeline captured from; to "
            "capture this server instead, start a new pipeline (a new spark.checkpoint) "
            "from a position on it. Nothing after the checkpoint was skipped.")


class SchemaBootstrapError(SchemaError):
    """The schema history cannot start at the requested position with certainty."""

    code = "SCHEMA_BOOTSTRAP_UNSAFE"
    hint = ("Start from a position after the listed DDL, or set source.schema_bootstrap: current "
            "(Spark option schemaBootstrap=current) to accept today's definitions for the older "
            "events.")


class TableQuarantinedError(SchemaError):
    """A table's rows cannot be decoded with certainty; it is held back, others flow."""

    code = "TABLE_QUARANTINED"
    hint = ("Run `mysqlcdc schema resolve PIPELINE.yaml DB.TABLE --reload` (use the server's "
            "current definition from the quarantine position on) or `--skip` (drop the table's "
            "held-back rows); see README 'Schema history'.")


class UnsupportedTableError(SchemaError):
    """A captured table whose changes the binlog does not carry as rows (a MariaDB table
    versioned by transaction ids, whose changes are logged as statements)."""

    code = "TABLE_UNSUPPORTED"
    hint = ("Leave the table out of the capture (`source.tables.exclude`, or a narrower "
            "`include`) and start again; the other tables are captured as before.")


class UnsupportedDdlError(SchemaError):
    """A DDL statement the schema history cannot apply with certainty.

    ``tables`` holds the (db, table) pairs the statement touches, or None when even
    those cannot be told; ``sql`` is the statement as the server logged it.
    """

    code = "DDL_UNSUPPORTED"
    hint = (
        "The schema history stopped the tables this statement touches rather than guess their "
        "columns; re-read their definitions from the server or skip them (see the schema docs "
        "in README)."
    )

    def __init__(self, message: str, *, tables: set[tuple[str, str]] | None = None,
                 sql: str | None = None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.tables = tables
        self.sql = sql


class SnapshotTableError(SchemaError):
    """A table's snapshot cannot go on: its definition keeps changing under the chunk
    reads, or the configured chunk key does not fit the table."""

    code = "SNAPSHOT_TABLE_FAILED"
    hint = ("Check source.snapshot.chunk_keys against the table, or exclude the table; a "
            "table altered while its snapshot ran is read again by the next run.")


class SnapshotTimeoutError(TerminalError):
    """A snapshot chunk's SELECT ran past the statement time limit, even split down to
    its smallest parts."""

    code = "SNAPSHOT_QUERY_TIMEOUT"
    hint = ("Raise source.snapshot.query_timeout_s (or the server's max_statement_time / "
            "max_execution_time for the capture user), or name an indexed chunk key; run "
            "again to resume with the chunks not yet committed.")


class SnapshotRequestError(ConfigError):
    """An on-demand snapshot request (``mysqlcdc snapshot``, a signal row) that cannot
    run: a table the pipeline does not capture, a filter the server refuses."""

    code = "SNAPSHOT_REQUEST_INVALID"
    hint = ("Name a DB.TABLE this pipeline captures and a --where filter the server "
            "accepts, then send the request again; a refused request changes nothing.")


class MirrorTableStoppedError(TerminalError):
    """A change the mirror target cannot apply; that table stops, the others keep flowing.

    Recorded in the target's ``mysqlcdc_mirror_stopped`` table (same transaction as the
    batch; a Delta mirror: a ``kind = 'stopped'`` row of its ``_mysqlcdc_offsets`` table);
    ``db``/``table`` name the source table.
    """

    code = "MIRROR_TABLE_STOPPED"
    hint = ("Fix or recreate the target table, delete its row from mysqlcdc_mirror_stopped and "
            "re-snapshot the table; the mirror skips it until then.")

    def __init__(self, message: str, *, db: str = "", table: str = "", hint: str | None = None):
        super().__init__(message, hint=hint)
        self.db, self.table = db, table


class MirrorAuthError(TerminalError):
    """The mirror target refused the credentials."""

    code = "MIRROR_AUTH_FAILED"
    hint = ("Check the target user and the password in the environment variable named by "
            "password_env.")


class MirrorUnavailableError(TransientError):
    """The mirror target could not be reached or dropped the connection, after every retry."""

    code = "MIRROR_TARGET_UNAVAILABLE"
    hint = ("Start the target server (or fix host/port); run the pipeline again: the batch is "
            "replayed and applied exactly once.")


class ChangelogWriteError(TransientError):
    """The changelog's storage refused a write (disk full, permissions, a lost mount)."""

    code = "CHANGELOG_WRITE_FAILED"
    hint = ("Fix the storage (space, permissions, mount) and run the pipeline again: the "
            "batch is replayed and committed exactly once.")


class TransformError(TerminalError):
    """A transform's user code (or a helper it called) raised on an event.

    The message names the transform, the event's table, key and binlog position;
    ``detail`` holds the user's traceback. With ``on_error: dead_letter`` the event goes
    to the dead-letter sink instead and the pipeline continues."""

    code = "TRANSFORM_FAILED"
    hint = ("Fix the transform (its traceback follows), or set on_error: dead_letter to "
            "park such events and keep going; the batch is replayed when run again.")

    def __init__(self, message: str, *, detail: str = "", hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.detail = detail      # the user's traceback


class TransformResultError(TransformError):
    """A transform returned something that is not an event (a wrong type, a missing field)."""

    code = "TRANSFORM_BAD_RESULT"
    hint = ("A python transform returns an event dict, a list of them or None (drop); "
            "transform_batch returns a RecordBatch with the columns it received.")


class PluginError(TerminalError):
    """A plugin callback raised; the batch's callbacks run again when the pipeline runs again
    (at least once per batch: ``ctx.batch_id`` tells a repeat)."""

    code = "PLUGIN_FAILED"
    hint = ("Fix the plugin (its traceback follows) and run the pipeline again: the batch's "
            "callbacks are replayed from its first transaction.")

    def __init__(self, message: str, *, detail: str = "", hint: str | None = None) -> None:
        TerminalError.__init__(self, message, hint=hint)
        self.detail = detail      # the plugin's traceback


class StorageWriteError(TerminalError):
    """A file the pipeline writes (the changelog's, the checkpoint's) could not be written:
    the disk is full, the folder read-only or not the user's. The batch fails before it
    is committed, so nothing is lost."""

    code = "STORAGE_WRITE_FAILED"
    hint = ("Free space on (or fix the permissions of) the file system the message names, "
            "then run the pipeline again: it resumes from its checkpoint and writes the "
            "failed batch again.")


_STORAGE_SIGNS = ("No space left on device", "Disk quota exceeded", "Read-only file system")


def storage_failure(text: str) -> StorageWriteError | None:
    """A write that failed for lack of space (or a read-only file system) anywhere in a
    failed query's text (Python's OSError, Java's IOException), as a named error."""
    for line in text.splitlines():
        sign = next((s for s in _STORAGE_SIGNS if s in line), None)
        if sign is not None:
            where = line.strip()
            return StorageWriteError(f"a write failed: {sign.lower()} ({where[:200]})")
    return None


class DeadLetterWriteError(TransientError):
    """The dead-letter folder or topic refused a write; the batch fails, nothing is lost."""

    code = "DEAD_LETTER_WRITE_FAILED"
    hint = ("Fix the dead-letter target (disk space, permissions, the Kafka brokers) and run "
            "the pipeline again: the batch and its dead letters are written again.")


class KafkaSchemaUnknownError(SchemaError):
    """The Kafka sink's ``debezium`` format found no table definition for a row (or one
    without the row's columns) in the schema history it reads."""

    code = "KAFKA_SCHEMA_UNKNOWN"
    hint = ("The kafka sink reads table definitions from the source's schema history: run it "
            "through `mysqlcdc run` (or give the source's schemaHistory folder to "
            "KafkaSettings.history_dir); the batch is replayed when the pipeline runs again.")


class GtidPositionError(TerminalError):
    """A GTID set that does not end at one binlog position of this server: a transaction
    of the set is logged after one that is not in it (replication domains or sources
    applied in another order here)."""

    code = "GTID_POSITION_AMBIGUOUS"
    hint = ("Start from a GTID set that includes every transaction before the named one, "
            "or from a FILE:POS on this server; nothing was skipped.")


class SeekError(TerminalError):
    """A seek of a pipeline cannot be done as asked."""

    code = "SEEK_FAILED"
    hint = "Stop the pipeline first; seek needs its checkpoint folder to be local."


class SeekNotConfirmedError(SeekError):
    """A seek forward skips changes and a seek backward replays them: the request must
    say which it expects."""

    code = "SEEK_NOT_CONFIRMED"
    hint = ("Repeat the request with confirm set to the direction named in the message "
            "(skip: changes in between are never delivered; replay: they are delivered again).")


class ServerBinaryMissingError(TerminalError):
    code = "SERVER_BINARY_MISSING"
    hint = ("Install the MariaDB server (apt-get install mariadb-server) or point the demo at "
            "a server you have: mysqlcdc demo --mysql mysql://user:password@host:3306")


class LocalServerError(TerminalError):
    code = "LOCAL_SERVER_FAILED"
    hint = ("Read the server's error log named in the message, or point the demo at a server "
            "you have: mysqlcdc demo --mysql mysql://user:password@host:3306")


class SparkStartError(TerminalError):
    code = "SPARK_START_FAILED"
    hint = ("Fix what the message, or the lines above it from Java or spark-submit, names: "
            "a spark.conf setting (such as spark.driver.memory), JAVA_HOME (Java 17 or 21), "
            "or a path whose URI scheme Spark has no file system for (its jars in spark.jars).")


class SparkMasterUnreachableError(TransientError):
    code = "SPARK_MASTER_UNREACHABLE"
    hint = ("Start the Spark master (pyspark's sbin/start-master.sh) or fix spark.master in "
            "the pipeline file (spark://host:7077, or local[*] to run without a cluster).")


class UnauthorizedError(TerminalError):
    code = "UNAUTHORIZED"
    hint = "Send the header `Authorization: Bearer <token>` with the instance's API token."


_NAMED = None


def from_text(text: str) -> MysqlcdcError | None:
    """The mysqlcdc error inside a wrapped exception's text (Spark re-raises a Python
    data source's exception as a Java one whose message holds the Python traceback):
    rebuilt from its last ``mysqlcdc.errors.Name: [CODE] message`` line and hint."""
    import re

    global _NAMED
    if _NAMED is None:
        _NAMED = re.compile(r"mysqlcdc\.[\w.]*?(\w+): \[([A-Z][A-Z0-9_]*)\] ([^\n]*)"
                            r"(?:\n\s*hint: ([^\n]*))?")
    found = None
    for found in _NAMED.finditer(text):
        pass
    if found is None:
        return None
    name, code, message, hint = found.groups()
    cls = globals().get(name)
    if not (isinstance(cls, type) and issubclass(cls, MysqlcdcError)):
        cls = type(name, (MysqlcdcError,), {"code": code})
    err = cls(message.strip(), hint=hint.strip() if hint else None)
    if err.code != code:          # a subclass sharing its parent's class name space
        err.code = code           # type: ignore[misc]
    detail = _detail_after(text, found.end())
    if detail:
        err.detail = detail       # type: ignore[attr-defined]
    return err


def _detail_after(text: str, end: int) -> str:
    """The ``  | line`` block right after a rebuilt error (the user's traceback)."""
    lines = []
    for line in text[end:].lstrip("\n").split("\n"):
        if not line.startswith("  | "):
            break
        lines.append(line[4:])
    return "\n".join(lines)

