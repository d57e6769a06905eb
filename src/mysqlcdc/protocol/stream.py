"""The binlog as a replica receives it: raw events, in order, resumable.

``ReplicationStream`` logs in with pymysql, registers as a replica
(COM_REGISTER_SLAVE), asks for the binlog from a file and position
(COM_BINLOG_DUMP) and yields every event as :class:`RawEvent`, bytes exactly
as stored in the binlog file (header, body, CRC32 trailer when the server
checksums). It does not decode rows and never decides where to stop; the
caller stops iterating, or passes ``stop_at``.

On a dropped connection (socket error, EOF, no heartbeat within the read
timeout, the dump thread killed, the server restarting) it reconnects with
exponential backoff (``protocol.retry``: the time budget per outage, the one
reading of transient vs terminal) and resumes where the last yielded event
ended, so no event is lost or repeated (artificial events, which carry no
position of their own, are sent again).

>>> settings = ConnectionSettings("127.0.0.1", user="cdc", password="...")
>>> with ReplicationStream(settings, server_id=1001,
...                        start=BinlogPosition.of("mysql-bin.000042", 4)) as stream:
...     for event in stream:                      # doctest: +SKIP
...         print(event.file, event.pos, len(event.data))
"""

from __future__ import annotations

import socket
import struct
import time
import uuid
from collections.abc import Callable, Iterator
from itertools import islice
from dataclasses import dataclass

import pymysql

from mysqlcdc.errors import (
    ConnectionLostError,
    ConfigError,
    MysqlcdcError,
    ProtocolError,
    ServerIdInUseError,
)
from mysqlcdc.protocol.connection import ConnectionSettings, connect_sql, query, show_binary_logs
from mysqlcdc.protocol.dump_errors import TRANSIENT_CODES, map_dump_error
from mysqlcdc.protocol.packet import (MAX_PACKET, Disconnected, PacketChannel, lenenc_str,
                                      parse_error_packet)
from mysqlcdc.protocol.retry import Outage, RetryPolicy, is_transient
from mysqlcdc.types import BinlogPosition

__all__ = ["RawEvent", "RetryPolicy", "ReplicationStream"]

ROTATE_EVENT = 4
FORMAT_DESCRIPTION_EVENT = 15
HEARTBEAT_LOG_EVENT = 27
LOG_EVENT_ARTIFICIAL_F = 0x20
HEADER_SIZE = 19
_EVENT_HEADER = struct.Struct("<IBIIIH").unpack_from  # timestamp, type, server_id, size, log_pos, flags
_EVENT_TAIL = struct.Struct("<4xB4xIIH").unpack_from  # the same without timestamp and server_id
# an event's packet read from its start: the packet's length (with its sequence id in the
# top byte), the byte before the event (0x00), then the event header's type, size, log_pos
# and flags
_PACKET_EVENT_HEADER = struct.Struct("<IB4xB4xIIH").unpack_from
_PACKET_HEAD_SIZE = 4 + 1 + HEADER_SIZE
_U32 = struct.Struct("<I").unpack_from
_POSITION_EVENTS = frozenset((ROTATE_EVENT, FORMAT_DESCRIPTION_EVENT, HEARTBEAT_LOG_EVENT))
# a transaction's first event: MySQL's GTID, anonymous GTID and tagged GTID, MariaDB's GTID
_TXN_STARTS = frozenset((33, 34, 42, 162))
_NO_STOP = 1 << 64
# Seconds without any packet from the dump thread (events or heartbeats) that count as a
# dropped connection, whatever the heartbeat period below this.
SILENT_DROP_SECONDS = 15.0
COM_BINLOG_DUMP = 0x12
COM_REGISTER_SLAVE = 0x15
MARIADB_SLAVE_CAPABILITY_GTID = 4  # GTID events and annotate-rows events, not rewritten
BINLOG_SEND_ANNOTATE_ROWS_EVENT = 2  # MariaDB dump flag; without it ANNOTATE_ROWS is skipped


@dataclass(slots=True)
class RawEvent:
    """One whole binlog event and where it starts; read-only by convention.

    ``pos`` is the event's start offset in ``file``. Artificial events (the
    fake ROTATE and FORMAT_DESCRIPTION sent at dump start, heartbeats) are not
    in the file; they carry the position the stream is at.

    Not frozen: one is built per event, and a frozen dataclass's ``__init__``
    costs four times as much as a plain one.
    """

    file: str
    pos: int
    data: bytes
    artificial: bool

    @property
    def event_type(self) -> int:
        return self.data[4]

    @property
    def end(self) -> int:
        """Offset just past this event in ``file`` (== header log_pos for real events)."""
        return self.pos + len(self.data)


class ReplicationStream:
    """Iterate the binlog from ``start`` as a replica with ``server_id``.

    ``reconnect=None`` turns reconnecting off (a drop raises at once).
    ``stop_at`` ends iteration once the next event would start at or after it.
    ``server_id`` 0 is a reader of a bounded range that the server never waits for
    (it ends the dump at the end of its binlog): such readers do not displace each
    other, so any number of them may run at once (snapshot chunks' windows).
    ``heartbeat_seconds``: the period the server's dump thread sends heartbeats at while
    it has no event to send. A drop is :data:`SILENT_DROP_SECONDS` without any packet (or
    three missed heartbeats, where they are slower): a busy server may miss a few
    one-second heartbeats without being gone. The period is also how long the
    server keeps a closed reader registered: a dump thread learns that its reader is
    gone only when it next writes, so until then its ``server_id`` still shows in ``SHOW
    SLAVE HOSTS`` and a new reader with that id waits (the pipeline's preflight). At
    1 s a pipeline that stopped can start again at once.
    Not thread-safe; ``close()`` is idempotent.
    """

    def __init__(self, settings: ConnectionSettings, *, server_id: int, start: BinlogPosition,
                 heartbeat_seconds: float = 1.0, reconnect: RetryPolicy | None = RetryPolicy(),
                 stop_at: BinlogPosition | None = None) -> None:
        if not 0 <= server_id < 2**32 or (server_id == 0 and stop_at is None):
            raise ConfigError(f"server_id must be between 1 and 4294967295, got {server_id}")
        if heartbeat_seconds < 0:
            raise ConfigError(f"heartbeat_seconds must be >= 0, got {heartbeat_seconds}")
        if not 4 <= start.pos < 2**32:
            raise ConfigError(f"start position {start} is outside 4..4294967295")
        self.settings = settings
        self.server_id = server_id
        self.heartbeat_seconds = heartbeat_seconds
        self.reconnect = reconnect
        self.stop_at = stop_at
        # the resume point, kept as parts so that an event moves only _pos
        self._file, self._file_number, self._pos = start.file, start.file_number, start.pos
        self._carry: list[bytes] = []   # events read but not yet handed out (see __iter__)
        self._checksum_len = 0
        self._replica_uuid = str(uuid.uuid4())
        self._conn: pymysql.Connection | None = None
        self._channel: PacketChannel | None = None
        self._streamed = False
        self._closed = False
        self.passed = 0                 # events ``passing`` passed over
        # set by a reader that captures only some tables (capture.changes.PassOver): the
        # inner events of a transaction of other tables are passed over, not handed out
        self.pass_over = None

    @property
    def position(self) -> BinlogPosition:
        """Where the next real event starts: the resume point."""
        return BinlogPosition(self._file_number, self._pos, self._file)

    @property
    def connection_id(self) -> int | None:
        """The server's id for the current replication connection (for KILL)."""
        return self._conn.thread_id() if self._conn is not None else None

    @property
    def read_timeout(self) -> float | None:
        """Seconds without any packet (heartbeats included) that count as a drop."""
        if self.heartbeat_seconds == 0:
            return self.settings.read_timeout
        return max(self.settings.read_timeout or 0.0, 3 * self.heartbeat_seconds,
                   SILENT_DROP_SECONDS)

    def __iter__(self) -> Iterator[RawEvent]:
        outage = None if self.reconnect is None else Outage(
            self.reconnect, self.settings.address, "source")
        while not self._closed and not self._reached_stop():
            batch, self._carry = self._carry, []
            if not batch:
                try:
                    batch = self._read_batch()
                except Exception as exc:
                    self._drop()  # of no further use either way
                    if not is_transient(exc):
                        raise
                    self._wait_or_give_up(outage, exc)
                    continue
                if outage is not None and outage.active:
                    outage.recovered()
            # The events of a batch go out one by one, the resume point moving
            # with each. If the caller stops in between (break, stop_at, close),
            # what is left of ``rest`` is kept for the next iteration, so that
            # nothing the channel has read is skipped. Per event only the header's
            # last four fields are read and one offset compared against ``limit``
            # (where ``stop_at`` falls in the current file), as ``passing`` does.
            skip = self.pass_over
            file, limit = self._file, self._limit()
            rest = iter(batch)
            try:
                for data in rest:
                    if len(data) < HEADER_SIZE:
                        raise ProtocolError(
                            f"event of {len(data)} bytes at {self.position} is shorter than a header")
                    kind, size, log_pos, flags = _EVENT_TAIL(data)
                    if (log_pos and not flags & LOG_EVENT_ARTIFICIAL_F and size == len(data)
                            and kind not in _POSITION_EVENTS):
                        self._pos = log_pos   # an ordinary event: the file stays, the offset moves
                        if skip is None or kind not in _TXN_STARTS:
                            yield RawEvent(file, log_pos - size, data, False)
                        else:
                            span = skip.span(batch, len(batch) - rest.__length_hint__() - 1)
                            yield RawEvent(file, log_pos - size, data, False)
                            if span and not self._closed and skip.end() < limit:
                                # the transaction's events up to its XID, of tables not captured
                                self._pos = skip.passed(span)
                                next(islice(rest, span, span), None)
                        if self._closed or self._pos >= limit:
                            return
                    else:
                        yield self._advance(data)
                        if self._closed or self._reached_stop():
                            return
                        file, limit = self._file, self._limit()
            except MysqlcdcError:
                rest = iter(())   # terminal: nothing of this connection is handed out later
                self._drop()
                raise
            finally:
                self._carry = list(rest)

    def passing(self, wanted: frozenset[int],
                every_batch: Callable[[], None] | None = None) -> Iterator[RawEvent]:
        """Iterate as ``iter(stream)`` does, but hand out only the events whose type is
        in ``wanted`` and those that move the stream otherwise (artificial ones, ROTATE,
        FORMAT_DESCRIPTION); every other event is passed over without an object and
        counted in ``passed``: read from its packet where the channel buffered it, never
        cut out. For a reader that looks at few events of many (a slice task before its
        slice, the schema bootstrap's DDL walk). ``every_batch`` runs before each batch
        of events the server sent is gone through (progress reports). Stopping and
        reconnecting work as in ``__iter__``."""
        outage = None if self.reconnect is None else Outage(
            self.reconnect, self.settings.address, "source")
        while not self._closed and not self._reached_stop():
            carried, self._carry = self._carry, []
            buf, at = b"", 0
            if not carried:
                try:
                    if self._channel is None:
                        self._open()
                    assert self._channel is not None
                    buf, at = self._channel.buffered_events()
                    if not buf:
                        carried = self._read_batch()   # a payload of another kind
                except Exception as exc:
                    self._drop()
                    if not is_transient(exc):
                        raise
                    self._wait_or_give_up(outage, exc)
                    continue
                if outage is not None and outage.active:
                    outage.recovered()
            if every_batch is not None:
                every_batch()
            done = yield from (self._pass_events(carried, wanted) if carried
                               else self._pass_packets(buf, at, wanted))
            if done:
                return

    def _limit(self) -> int:
        """The offset in the current file at which ``stop_at`` is reached."""
        stop = self.stop_at
        if stop is None:
            return _NO_STOP
        if stop.file_number == self._file_number:
            return stop.pos
        return _NO_STOP if stop.file_number > self._file_number else 0

    def _pass_packets(self, buf: bytes, at: int, wanted: frozenset[int]):
        """``passing`` over the event packets the channel buffered in ``buf`` from
        ``at``; True when it must stop. The channel is told how far it got. An event
        passed over costs one read of its packet and event headers: the resume point
        and ``passed`` are brought up to date before anything is handed out, and when
        it stops."""
        channel, n, limit = self._channel, len(buf), self._limit()
        passed, last = 0, 0          # events passed over; the end of the last one (0: none)
        handed = _POSITION_EVENTS | wanted
        try:
            while n - at >= 4:
                # the common case, in a loop of its own: an ordinary event, whole in a
                # packet of its own, not wanted (one test each of what the general
                # path below checks one by one; anything else goes there)
                while n - at >= _PACKET_HEAD_SIZE:
                    head, ok, kind, size, log_pos, flags = _PACKET_EVENT_HEADER(buf, at)
                    end = at + 5 + size
                    if (end > n or ok or kind in handed or not log_pos
                            or flags & LOG_EVENT_ARTIFICIAL_F or head & MAX_PACKET != size + 1
                            or not HEADER_SIZE <= size < MAX_PACKET - 1):
                        break
                    at = end
                    passed += 1
                    last = log_pos
                    if log_pos >= limit:
                        return True
                if n - at < 4:
                    break
                if n - at < _PACKET_HEAD_SIZE:     # a packet too short for an event header
                    length = _U32(buf, at)[0] & MAX_PACKET
                    if at + 4 + length <= n and length and not buf[at + 4]:
                        raise ProtocolError(f"event of {length - 1} bytes at {self.position} "
                                            "is shorter than a header")
                    break                    # cut short, or no event: read on or elsewhere
                head, ok, kind, size, log_pos, flags = _PACKET_EVENT_HEADER(buf, at)
                length = head & MAX_PACKET
                end = at + 4 + length
                if end > n or ok or not 0 < length < MAX_PACKET:
                    break
                if length <= HEADER_SIZE:
                    raise ProtocolError(f"event of {length - 1} bytes at {self.position} is "
                                        "shorter than a header")
                first, at = at + 5, end
                if (log_pos and not flags & LOG_EVENT_ARTIFICIAL_F and size == length - 1
                        and kind not in _POSITION_EVENTS):
                    if kind not in wanted:
                        passed += 1
                        last = log_pos
                        if log_pos >= limit:
                            return True
                        continue
                    self._pos, last = log_pos, 0
                    self.passed += passed
                    passed = 0
                    channel.consumed(buf, at)
                    yield RawEvent(self._file, log_pos - size, buf[first:end], False)
                    if log_pos >= limit or self._closed:
                        return True
                    continue
                if last:
                    self._pos, last = last, 0
                self.passed += passed
                passed = 0
                channel.consumed(buf, at)
                yield self._advance(buf[first:end])
                if self._closed or self._reached_stop():
                    return True
                limit = self._limit()
            return False
        except MysqlcdcError:
            self._drop()
            raise
        finally:
            self.passed += passed
            if last:
                self._pos = last
            if self._channel is channel and channel is not None:
                channel.consumed(buf, at)

    def _pass_events(self, batch: list[bytes], wanted: frozenset[int]):
        """``passing`` over events already cut out (carried from ``__iter__``, or a
        payload read whole); True when it must stop. What it does not go through is
        carried on."""
        limit = self._limit()
        rest = iter(batch)
        try:
            for data in rest:
                if len(data) < HEADER_SIZE:
                    raise ProtocolError(
                        f"event of {len(data)} bytes at {self.position} is shorter than a header")
                _ts, kind, _sid, size, log_pos, flags = _EVENT_HEADER(data)
                if (log_pos and not flags & LOG_EVENT_ARTIFICIAL_F and size == len(data)
                        and kind not in _POSITION_EVENTS):
                    self._pos = log_pos
                    if kind in wanted:
                        yield RawEvent(self._file, log_pos - size, data, False)
                    else:
                        self.passed += 1
                    if log_pos >= limit or self._closed:
                        return True
                    continue
                yield self._advance(data)
                if self._closed or self._reached_stop():
                    return True
                limit = self._limit()
            return False
        except MysqlcdcError:
            rest = iter(())
            self._drop()
            raise
        finally:
            self._carry = list(rest)

    def close(self) -> None:
        self._closed = True
        self._drop()

    def __enter__(self) -> "ReplicationStream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"ReplicationStream({self.settings.address}, server_id={self.server_id}, "
                f"at={self.position}, stop_at={self.stop_at})")

    # -- iteration ---------------------------------------------------------

    def _reached_stop(self) -> bool:
        return self.stop_at is not None and self.position >= self.stop_at

    def _read_batch(self) -> list[bytes]:
        """The next events as the server sent them (at least one), or an error."""
        if self._channel is None:
            self._open()
        assert self._channel is not None
        events = self._channel.read_events()
        if events:
            return events
        first, body = self._channel.read_payload()
        if first == 0x00:
            return [body]    # an event of 16 MiB or more, joined
        if first == 0xFF:
            raise self._dump_error(body)
        if first == 0xFE and len(body) < 8:  # EOF: we never ask for non-blocking dumps, so
            raise Disconnected("the server ended the binlog stream (shutting down?)")
        raise ProtocolError(f"unexpected packet 0x{first:02x} in the binlog stream at {self.position}")

    def _advance(self, data: bytes) -> RawEvent:
        """Wrap one event and move the resume point past it (any event; __iter__
        handles the ordinary ones inline)."""
        if len(data) < HEADER_SIZE:
            raise ProtocolError(f"event of {len(data)} bytes at {self.position} is shorter than a header")
        _ts, kind, _sid, size, log_pos, flags = _EVENT_HEADER(data)
        if size != len(data):
            raise ProtocolError(f"event at {self.position} says {size} bytes but {len(data)} arrived")
        artificial = log_pos == 0 or bool(flags & LOG_EVENT_ARTIFICIAL_F) or kind == HEARTBEAT_LOG_EVENT
        if kind == FORMAT_DESCRIPTION_EVENT:
            self._checksum_len = _fde_checksum_len(data, self._checksum_len)
        file = self._file
        pos = self._pos if artificial else log_pos - size
        if kind == ROTATE_EVENT:
            target = self._rotate_target(data)
            self._file, self._file_number, self._pos = target.file, target.file_number, target.pos
            if artificial:
                file, pos = target.file, target.pos
        elif not artificial:
            self._pos = log_pos
        return RawEvent(file, pos, data, artificial)

    def _rotate_target(self, data: bytes) -> BinlogPosition:
        body = data[HEADER_SIZE:len(data) - self._checksum_len]
        name = body[8:].decode("utf-8", "replace")
        return BinlogPosition.of(name, int.from_bytes(body[:8], "little"))

    def _wait_or_give_up(self, outage: Outage | None, exc: Exception) -> None:
        """Sleep before the next reconnect, or raise once the outage's budget is spent
        (a terminal error: callers further up must not start a second budget)."""
        if outage is not None:
            try:
                outage.failed(exc, position=self.position)
                return
            except MysqlcdcError as spent:
                if not self._streamed and isinstance(exc, MysqlcdcError) and \
                        self.reconnect is not None and self.reconnect.attempts is not None \
                        and outage.failures > self.reconnect.attempts:
                    raise _terminal(exc) from exc
                if self.reconnect is not None and self.reconnect.attempts is not None \
                        and outage.failures > self.reconnect.attempts:
                    raise _terminal(ConnectionLostError(
                        f"lost the binlog stream from {self.settings.address} at "
                        f"{self.position} and {self.reconnect.attempts} reconnect attempts "
                        f"failed: {exc}")) from exc
                raise spent
        if not self._streamed and isinstance(exc, MysqlcdcError):
            raise _terminal(exc)
        raise _terminal(ConnectionLostError(
            f"lost the binlog stream from {self.settings.address} at {self.position} and "
            f"reconnecting is off: {exc}")) from exc

    # -- connecting --------------------------------------------------------

    def _open(self) -> None:
        conn = connect_sql(self.settings, read_timeout=None)
        try:
            self._prepare_session(conn)
            channel = PacketChannel(conn)
            channel.set_timeout(self.read_timeout)
            channel.send_command(self._register_command())
            self._expect_ok(channel)
            channel.send_command(self._dump_command("mariadb" in conn.get_server_info().lower()))
        except BaseException:
            conn.close()
            raise
        self._conn, self._channel, self._streamed = conn, channel, True

    def _prepare_session(self, conn: pymysql.Connection) -> None:
        """Check our id is not the server's own and declare what we understand."""
        period = int(self.heartbeat_seconds * 1_000_000_000)
        rows = query(conn, "SELECT @@server_id, @@global.binlog_checksum")
        own_id, checksum = int(rows[0][0]), str(rows[0][1] or "NONE").upper()
        if own_id == self.server_id:
            raise ServerIdInUseError(
                f"server_id {self.server_id} is the server's own @@server_id at {self.settings.address}")
        self._checksum_len = 4 if checksum == "CRC32" else 0
        query(conn,
                 "SET @master_binlog_checksum = @@global.binlog_checksum,"
                 " @source_binlog_checksum = @@global.binlog_checksum,"
                 f" @mariadb_slave_capability = {MARIADB_SLAVE_CAPABILITY_GTID},"
                 f" @master_heartbeat_period = {period}, @source_heartbeat_period = {period},"
                 f" @slave_uuid = '{self._replica_uuid}', @replica_uuid = '{self._replica_uuid}'")

    def _register_command(self) -> bytes:
        host = socket.gethostname().encode("utf-8", "replace")[:60]
        return (bytes([COM_REGISTER_SLAVE]) + struct.pack("<I", self.server_id)
                + lenenc_str(host) + lenenc_str(b"") + lenenc_str(b"")
                + struct.pack("<HII", 0, 0, 0))

    def _dump_command(self, mariadb: bool) -> bytes:
        flags = BINLOG_SEND_ANNOTATE_ROWS_EVENT if mariadb else 0
        return (bytes([COM_BINLOG_DUMP]) + struct.pack("<IHI", self._pos, flags, self.server_id)
                + self._file.encode("utf-8"))

    def _expect_ok(self, channel: PacketChannel) -> None:
        first, body = channel.read_payload()
        if first == 0xFF:
            raise self._dump_error(body)
        if first != 0x00:
            raise ProtocolError(f"COM_REGISTER_SLAVE answered with packet 0x{first:02x}, not OK")

    def _dump_error(self, body: bytes) -> Exception:
        err = parse_error_packet(body)
        if err.code in TRANSIENT_CODES:
            return Disconnected(f"server error {err.code}: {err.message}")
        oldest = self._oldest_binlog() if err.code == 1236 else None
        return map_dump_error(err, start=str(self.position), server_id=self.server_id, oldest=oldest)

    def _oldest_binlog(self) -> str | None:
        """The oldest binlog file still on the server, asked on a side connection."""
        try:
            conn = connect_sql(self.settings)
            try:
                logs = show_binary_logs(conn)
            finally:
                conn.close()
        except (MysqlcdcError, pymysql.err.MySQLError):
            return None  # the message then says the list could not be read
        return logs[0][0] if logs else None

    def _drop(self) -> None:
        conn, self._conn, self._channel = self._conn, None, None
        self._carry = []   # read on the dropped connection: the next one resends them
        if conn is not None and conn.open:
            conn.close()


def _terminal(err: MysqlcdcError) -> MysqlcdcError:
    """The same error, marked so that no retry loop further up tries again."""
    err.transient = False   # type: ignore[misc]  - an instance attribute; pickles along
    return err


def _fde_checksum_len(data: bytes, current: int) -> int:
    """FORMAT_DESCRIPTION ends with the checksum algorithm byte and a CRC32."""
    algorithm = data[-5]
    return {0: 0, 1: 4}.get(algorithm, current)
