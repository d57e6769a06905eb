"""ReplicationStream against real mariadbd servers: positions, rotation, bounds,
checksums, reconnects, 16 MiB+ events, authentication and refused streams."""

from __future__ import annotations

import pickle
import zlib
from collections.abc import Iterable
from pathlib import Path

import pymysql
import pytest

from mysqlcdc.capture.server import current_position
from mysqlcdc.errors import (
    AuthenticationError,
    BinlogPurgedError,
    ConnectionLostError,
    MissingPrivilegeError,
    ServerIdInUseError,
    ServerUnreachableError,
)
from mysqlcdc.protocol.connection import ConnectionSettings, connect_sql, ping_within, query
from mysqlcdc.protocol.stream import RawEvent, ReplicationStream, RetryPolicy
from mysqlcdc.types import BinlogPosition
from tests.support.mariadb import MariaDB, free_port

pytestmark = pytest.mark.integration

ROTATE, FDE, XID, HEARTBEAT = 4, 15, 16, 27
WRITE_ROWS_V1, ANNOTATE_ROWS, MARIADB_GTID = 23, 160, 162
FAST_RETRY = RetryPolicy(attempts=5, initial_delay=0.05, max_delay=0.5)


@pytest.fixture(scope="module")
def server():
    """A server that accepts 64 MiB statements, so a single row event can pass 16 MiB."""
    db = MariaDB(options={"max-allowed-packet": "64M"}).start()
    db.sql("CREATE DATABASE p", "CREATE TABLE p.t (id INT PRIMARY KEY, v LONGBLOB)")
    yield db
    db.stop()


def settings_for(db: MariaDB, user: str = "root", password: str = "") -> ConnectionSettings:
    return ConnectionSettings(db.host, port=db.port, user=user, password=password)


def position(db: MariaDB) -> BinlogPosition:
    conn = db.connect()
    try:
        return current_position(conn)
    finally:
        conn.close()


def insert_rows(db: MariaDB, first: int, count: int) -> None:
    db.sql(*(f"INSERT INTO p.t VALUES ({i}, 'row {i}')" for i in range(first, first + count)))


def read_all(db: MariaDB, start: BinlogPosition, stop: BinlogPosition, **kw) -> list[RawEvent]:
    with ReplicationStream(settings_for(db), server_id=kw.pop("server_id", 101), start=start,
                           stop_at=stop, **kw) as stream:
        return list(stream)


def rotate_target(event: RawEvent, checksum_len: int = 4) -> BinlogPosition:
    body = event.data[19:len(event.data) - checksum_len]
    return BinlogPosition.of(body[8:].decode(), int.from_bytes(body[:8], "little"))


def assert_contiguous(events: Iterable[RawEvent], start: BinlogPosition, stop: BinlogPosition,
                      checksum_len: int = 4) -> None:
    """Real events tile [start, stop) exactly: none lost, none repeated."""
    expected = start
    for event in events:
        if event.artificial:
            continue
        assert (event.file, event.pos) == (expected.file, expected.pos), event
        header_log_pos = int.from_bytes(event.data[13:17], "little")
        assert event.end == header_log_pos
        expected = BinlogPosition.of(event.file, event.end)
        if event.event_type == ROTATE:
            expected = rotate_target(event, checksum_len)
    assert expected == stop


def crc_ok(event: RawEvent) -> bool:
    return zlib.crc32(event.data[:-4]) == int.from_bytes(event.data[-4:], "little")


def test_streams_every_event_between_two_positions_with_crc32_trailers(server):
    start = position(server)
    insert_rows(server, 1, 3)
    stop = position(server)
    events = read_all(server, start, stop)
    assert [(e.event_type, e.artificial) for e in events[:2]] == [(ROTATE, True), (FDE, True)]
    assert rotate_target(events[0]) == start
    assert_contiguous(events, start, stop)
    kinds = [e.event_type for e in events if not e.artificial]
    assert kinds.count(MARIADB_GTID) == 3 and kinds.count(XID) == 3
    assert kinds.count(WRITE_ROWS_V1) == 3 and kinds.count(ANNOTATE_ROWS) == 3
    assert all(crc_ok(e) for e in events)


def test_starting_at_offset_4_yields_the_real_format_description(server):
    start = BinlogPosition.of(position(server).file, 4)
    events = read_all(server, start, BinlogPosition.of(start.file, 5))
    assert [(e.event_type, e.artificial, e.pos) for e in events] == [(ROTATE, True, 4), (FDE, False, 4)]


def test_stop_at_ends_before_the_first_event_at_or_after_it(server):
    start = position(server)
    insert_rows(server, 100, 2)
    middle = position(server)
    insert_rows(server, 102, 2)
    events = read_all(server, start, middle)
    assert_contiguous(events, start, middle)
    assert read_all(server, middle, middle) == []


def test_leaving_the_loop_and_iterating_again_resumes_at_the_next_event(server):
    """The stream hands out events from a buffer of many; leaving the loop between
    two of them keeps the rest for the next loop on the same stream."""
    start = position(server)
    insert_rows(server, 150, 30)
    stop = position(server)
    events, kept = [], 0
    with ReplicationStream(settings_for(server), server_id=110, start=start, stop_at=stop,
                           heartbeat_seconds=0.5) as stream:
        while True:
            before = len(events)
            for event in stream:
                # a heartbeat here means the stream waits for events it read and lost
                assert event.event_type != HEARTBEAT, f"stuck at {stream.position} before {stop}"
                events.append(event)
                if len(events) % 7 == 0:
                    break
            if len(events) == before:
                break
            last = [e for e in events if not e.artificial][-1]
            assert stream.position == BinlogPosition.of(last.file, last.end)
            kept += bool(stream._carry)
    assert_contiguous(events, start, stop)
    assert sum(e.event_type == WRITE_ROWS_V1 for e in events) == 30
    assert kept > 0   # some loop did end inside a batch


@pytest.mark.parametrize("carried", [0, 3])
def test_passing_hands_out_the_wanted_events_and_resumes_exactly(server, carried):
    """``passing`` reads the events it passes over in the channel's buffer, without
    cutting them out: it hands out exactly the wanted and the position-moving events a
    full iteration yields, at the same positions and with the same bytes, counts the
    rest, and a loop left between two of them goes on at the next event, across a
    rotation. ``carried``: an ``iter`` first took that many events and left the rest of
    what the channel had read, which ``passing`` goes through first."""
    first = 5000 + carried * 100
    start = position(server)
    insert_rows(server, first, 40)
    server.sql("FLUSH BINARY LOGS")
    insert_rows(server, first + 40, 10)
    stop = position(server)
    every = read_all(server, start, stop)
    wanted = frozenset({MARIADB_GTID})
    moving = (ROTATE, FDE, HEARTBEAT)
    rest = every[carried:]
    want = [(e.file, e.pos, e.data) for e in rest
            if e.event_type in wanted or e.artificial or e.event_type in moving]
    got = []
    with ReplicationStream(settings_for(server), server_id=111, start=start,
                           stop_at=stop) as stream:
        for event in (stream if carried else ()):
            got.append((event.file, event.pos, event.data))
            if len(got) == carried:
                break
        assert got == [(e.file, e.pos, e.data) for e in every[:carried]]
        assert bool(stream._carry) == bool(carried)
        got = []
        while True:
            before = len(got)
            for event in stream.passing(wanted):
                got.append((event.file, event.pos, event.data))
                if event.event_type == MARIADB_GTID:
                    assert stream.position == BinlogPosition.of(event.file, event.end)
                if len(got) % 5 == 0:
                    break
            if len(got) == before:
                break
        assert stream.position == stop
        passed = stream.passed
    assert got == want
    assert passed == sum(1 for e in rest if not e.artificial and e.event_type not in wanted
                         and e.event_type not in moving)


def test_rotation_arrives_as_a_rotate_event_and_the_stream_follows_it(server):
    start = position(server)
    insert_rows(server, 200, 1)
    server.sql("FLUSH BINARY LOGS")
    insert_rows(server, 201, 1)
    stop = position(server)
    assert stop.file_number == start.file_number + 1
    events = read_all(server, start, stop)
    assert_contiguous(events, start, stop)
    rotates = [e for e in events if e.event_type == ROTATE and not e.artificial]
    assert [(e.file, rotate_target(e)) for e in rotates] == [(start.file, BinlogPosition.of(stop.file, 4))]
    assert {e.file for e in events if not e.artificial} == {start.file, stop.file}


def test_reconnects_after_the_server_kills_the_connection_without_loss_or_duplicates(server):
    start = position(server)
    insert_rows(server, 300, 5)
    middle = position(server)
    stream = ReplicationStream(settings_for(server), server_id=102, start=start,
                               heartbeat_seconds=1, reconnect=FAST_RETRY)
    events, killed, stop = [], [], None
    with stream:
        for event in stream:
            events.append(event)
            if not killed and event.end >= middle.pos and not event.artificial:
                killed.append(stream.connection_id)
                server.sql(f"KILL {killed[0]}")
                insert_rows(server, 305, 5)
                stop = position(server)
            if stop is not None and stream.position >= stop:
                break
        assert stream.connection_id not in (None, killed[0])
    assert_contiguous(events, start, stop)
    assert sum(e.event_type == WRITE_ROWS_V1 for e in events) == 10


def test_an_idle_stream_receives_heartbeats_marked_artificial(server):
    start = position(server)
    with ReplicationStream(settings_for(server), server_id=109, start=start,
                           heartbeat_seconds=0.2) as stream:
        for event in stream:
            if event.event_type == HEARTBEAT:
                break
    # MariaDB may still append an event of its own (a BINLOG_CHECKPOINT written
    # asynchronously after an earlier rotation), so the heartbeat is checked against
    # where the stream stands, not against the position read before it started.
    assert event.artificial and (event.file, event.pos) == (stream.position.file, stream.position.pos)
    assert stream.position >= start


def test_gives_up_with_connection_lost_when_the_server_stays_away():
    db = MariaDB().start()
    stream = ReplicationStream(settings_for(db), server_id=103, start=position(db),
                               heartbeat_seconds=1,
                               reconnect=RetryPolicy(attempts=2, initial_delay=0.05))
    iterator = iter(stream)
    assert next(iterator).event_type == ROTATE
    db.stop()
    with pytest.raises(ConnectionLostError, match="2 reconnect attempts failed"):
        list(iterator)
    stream.close()
    stream.close()  # idempotent


def _stop(pid: int) -> None:
    """SIGSTOP ``pid`` and wait until every one of its threads has stopped: a group stop is
    asynchronous, and on a loaded machine a server thread that has not reached it yet can
    still answer a statement sent right after ``kill`` returns."""
    import os
    import signal
    import time

    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        states = []
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                states.append((task / "stat").read_text().rsplit(")", 1)[1].split()[0])
            except (FileNotFoundError, ProcessLookupError):
                continue                              # a thread that just ended
        if states and all(state in "TtZX" for state in states):
            return
        time.sleep(0.01)
    os.kill(pid, signal.SIGCONT)                      # the module's other tests need it
    raise AssertionError(f"process {pid} did not stop within 10 s of SIGSTOP")


def test_a_server_that_accepts_but_never_answers_is_unreachable_not_a_hang(server):
    """A hung or stopped server's kernel still accepts connections: the greeting and the
    login get ``connect_timeout``, while the connection's statements keep no limit (a
    frozen source once held a pipeline's driver and read task in silence)."""
    import os
    import signal
    import time

    settings = ConnectionSettings(server.host, port=server.port, user="root",
                                  connect_timeout=1.0)
    open_before = connect_sql(settings)
    _stop(server.process.pid)
    try:
        began = time.monotonic()
        with pytest.raises(ServerUnreachableError, match="did not answer within connect_timeout"):
            connect_sql(settings)
        with pytest.raises(pymysql.err.OperationalError):     # what a planner asks first
            ping_within(open_before, 1.0)
        assert time.monotonic() - began < 10
    finally:
        os.kill(server.process.pid, signal.SIGCONT)
    conn = connect_sql(settings)
    try:
        with conn.cursor() as cur:                  # longer than connect_timeout: no limit
            cur.execute("SELECT SLEEP(1.5)")
            assert cur.fetchall() == ((0,),)
    finally:
        conn.close()


def test_a_statement_the_server_stops_answering_ends_at_the_connections_limit(server):
    """A connection with a statement limit (the planner's): a server that hangs after the
    ping ends the statement at that limit as a lost connection, which is retried, while
    the greeting of a new connection still gets connect_timeout, not the longer limit."""
    import os
    import signal
    import time

    settings = ConnectionSettings(server.host, port=server.port, user="root",
                                  connect_timeout=1.0)
    limited = connect_sql(settings, read_timeout=2.0)
    _stop(server.process.pid)
    try:
        began = time.monotonic()
        with pytest.raises(ConnectionLostError,
                           match=r"did not answer 'SELECT 1' within 2 s .*hung or overloaded"):
            query(limited, "SELECT 1")
        assert time.monotonic() - began < 10
        began = time.monotonic()
        with pytest.raises(ServerUnreachableError, match="within connect_timeout"):
            connect_sql(settings, read_timeout=300.0)
        assert time.monotonic() - began < 10
    finally:
        os.kill(server.process.pid, signal.SIGCONT)
    conn = connect_sql(settings, read_timeout=300.0)
    try:
        assert conn._read_timeout == 300.0          # the statements' own limit, after login
        assert query(conn, "SELECT SLEEP(1.5)") == [(0,)]
    finally:
        conn.close()


def test_an_event_larger_than_16_mib_arrives_whole(server):
    blob = bytes(range(256)) * (17 * 4096 + 3)  # 17 MiB + 768 bytes
    start = position(server)
    conn = server.connect(max_allowed_packet=64 * 1024 * 1024)
    with conn.cursor() as cur:
        cur.execute("INSERT INTO p.t VALUES (400, %s)", (blob,))
    conn.close()
    stop = position(server)
    events = read_all(server, start, stop)
    assert_contiguous(events, start, stop)
    (rows,) = [e for e in events if e.event_type == WRITE_ROWS_V1]
    assert len(rows.data) > 16 * 1024 * 1024 + len(blob) % 1024 and blob in rows.data
    assert crc_ok(rows)


def test_a_server_without_checksums_sends_events_without_trailers():
    with MariaDB(options={"binlog-checksum": "NONE"}) as db:
        start = position(db)
        db.sql("CREATE DATABASE d", "FLUSH BINARY LOGS", "CREATE TABLE d.x (a INT)")
        stop = position(db)
        events = read_all(db, start, stop)
        assert_contiguous(events, start, stop, checksum_len=0)
        fdes = [e for e in events if e.event_type == FDE]
        assert fdes and all(e.data[-5] == 0 for e in fdes)  # checksum algorithm OFF


def test_a_password_user_with_replication_slave_can_stream(server):
    server.sql("CREATE USER IF NOT EXISTS repl@'%' IDENTIFIED BY 'repl-pw'",
               "GRANT REPLICATION SLAVE ON *.* TO repl@'%'")
    start = position(server)
    insert_rows(server, 500, 1)
    stop = position(server)
    with ReplicationStream(settings_for(server, "repl", "repl-pw"), server_id=104, start=start,
                           stop_at=stop) as stream:
        assert_contiguous(list(stream), start, stop)


def test_ed25519_user_streams_or_fails_naming_the_missing_package(server):
    if not server.sql("SELECT 1 FROM information_schema.PLUGINS WHERE PLUGIN_NAME = 'ed25519'"):
        server.sql("INSTALL SONAME 'auth_ed25519'")
    server.sql("CREATE USER IF NOT EXISTS ed@'%' IDENTIFIED VIA ed25519 USING PASSWORD('ed-pw')",
               "GRANT REPLICATION SLAVE ON *.* TO ed@'%'")
    settings = settings_for(server, "ed", "ed-pw")
    try:
        import nacl  # noqa: F401  (pymysql speaks ed25519 only through pynacl)
    except ImportError:
        with pytest.raises(AuthenticationError, match="pynacl"):
            connect_sql(settings)
        return
    start = position(server)
    with ReplicationStream(settings, server_id=105, start=start, stop_at=start) as stream:
        assert list(stream) == []


def test_a_user_without_replication_slave_is_refused_by_name(server):
    server.sql("CREATE USER IF NOT EXISTS plain@'%' IDENTIFIED BY 'pw'")
    stream = ReplicationStream(settings_for(server, "plain", "pw"), server_id=106,
                               start=position(server))
    with pytest.raises(MissingPrivilegeError, match="refused binlog streaming"):
        next(iter(stream))


def test_a_purged_or_impossible_start_names_the_oldest_binlog(server):
    oldest = server.sql("SHOW BINARY LOGS")[0][0]
    gone = BinlogPosition.of("mariadb-bin.000000", 4)
    with pytest.raises(BinlogPurgedError, match=f"oldest binlog still on the server is {oldest}"):
        next(iter(ReplicationStream(settings_for(server), server_id=107, start=gone)))
    here = position(server)
    beyond = BinlogPosition.of(here.file, here.pos + 10_000)
    with pytest.raises(BinlogPurgedError, match="beyond the end"):
        next(iter(ReplicationStream(settings_for(server), server_id=107, start=beyond)))


def test_server_id_of_the_server_itself_or_of_another_stream_is_refused(server):
    start = position(server)
    with pytest.raises(ServerIdInUseError, match="own @@server_id"):
        next(iter(ReplicationStream(settings_for(server), server_id=1, start=start)))
    first = ReplicationStream(settings_for(server), server_id=108, start=start, reconnect=None)
    second = ReplicationStream(settings_for(server), server_id=108, start=start, reconnect=None)
    with first, second:
        first_events, second_events = iter(first), iter(second)
        next(first_events)
        next(second_events)  # the server drops the older dump with the same id
        with pytest.raises(ServerIdInUseError, match="server_id 108"):
            list(first_events)


def test_settings_pickle_and_never_show_the_password():
    settings = ConnectionSettings("db.example", port=3307, user="cdc", password="s3cret",
                                  ssl={"ca": "/etc/ca.pem"}, read_timeout=30.0)
    assert pickle.loads(pickle.dumps(settings)) == settings
    assert "s3cret" not in repr(settings) and "cdc" in repr(settings)


def test_connect_sql_names_a_wrong_password_and_an_unreachable_port(server):
    with pytest.raises(AuthenticationError, match="access denied"):
        connect_sql(settings_for(server, "root", "wrong"))
    with pytest.raises(ServerUnreachableError, match="cannot connect"):
        connect_sql(ConnectionSettings("127.0.0.1", port=free_port(), user="root", connect_timeout=2))
