"""GTID sets at positions, positions of GTID sets and of timestamps, on a real server."""

from __future__ import annotations

import time

import pytest

from mysqlcdc.capture.positions import PositionFinder
from mysqlcdc.errors import BinlogPurgedError, GtidPositionError
from mysqlcdc.gtidset import GtidSet
from mysqlcdc.protocol.connection import ConnectionSettings, connect_sql

from tests.support.mariadb import binlog_position

pytestmark = pytest.mark.integration


@pytest.fixture
def finder(mariadb):
    settings = ConnectionSettings(mariadb.host, port=mariadb.port, user=mariadb.user,
                                  password=mariadb.password)
    conn = connect_sql(settings)
    yield PositionFinder(settings, 7301, lambda: conn)
    conn.close()


def _gtid_now(mariadb) -> GtidSet:
    return GtidSet.parse(mariadb.sql("SELECT @@gtid_binlog_pos")[0][0])


def _transactions(mariadb, db: str, n: int, rotate_every: int = 0):
    """n transactions; the position and the server's GTID position after each."""
    mariadb.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v INT)")
    marks = []
    for i in range(n):
        if rotate_every and i and i % rotate_every == 0:
            mariadb.sql("FLUSH BINARY LOGS")
        mariadb.sql(f"INSERT INTO `{db}`.t VALUES ({i}, {i})")
        marks.append((binlog_position(mariadb), _gtid_now(mariadb)))
    return marks


def test_gtid_at_and_back(mariadb, fresh_db, finder):
    marks = _transactions(mariadb, fresh_db, 7, rotate_every=3)
    assert len({m[0].file for m in marks}) == 3         # the walk crosses rotations
    for i, (position, gtid) in enumerate(marks):
        assert finder.gtid_at(position) == gtid          # BINLOG_GTID_POS
        assert finder.gtid_by_walk(position) == gtid     # GTID_LIST + GTID events
        found, _ = finder.resolve_gtid(gtid)
        # the start of the next transaction: right after this one, or after the next
        # file's header events when the binlog rotated in between
        assert position <= found and finder.gtid_by_walk(found) == gtid, (gtid, found)
        between = list(finder.walk(position, found))
        assert not any(u.transaction for u in between), between   # ROTATE, checkpoints
    # a file's first position: the GTID_LIST alone
    first = type(marks[3][0]).of(marks[3][0].file, 4)
    assert finder.gtid_by_walk(first) == marks[2][1]
    # the whole set: the server's end
    assert finder.resolve_gtid(_gtid_now(mariadb))[0] == binlog_position(mariadb)


def test_gtid_sets_that_interleave_have_no_position(mariadb, fresh_db, finder):
    mariadb.sql(f"CREATE TABLE `{fresh_db}`.t (id INT PRIMARY KEY)")
    base = _gtid_now(mariadb).domains()[0]
    conn = mariadb.connect()
    try:
        with conn.cursor() as cur:
            marks = []
            for i, domain in enumerate((0, 1, 0, 1)):
                cur.execute(f"SET SESSION gtid_domain_id = {domain}")
                cur.execute(f"INSERT INTO `{fresh_db}`.t VALUES ({i})")
                marks.append(binlog_position(mariadb))
            cur.execute("SET SESSION gtid_domain_id = 0")
    finally:
        conn.close()
    d1 = _gtid_now(mariadb).domains()[1]
    # 0-1-(base+2) then 1-1-(d1-1), 0-1-(base+2)... : the first transaction outside the
    # set is the third, yet the fourth (domain 1) is inside it
    with pytest.raises(GtidPositionError, match="GTID_POSITION_AMBIGUOUS|comes after"):
        finder.resolve_gtid(GtidSet.parse(f"0-1-{base + 1},1-1-{d1}"))
    ok, _ = finder.resolve_gtid(GtidSet.parse(f"0-1-{base + 2},1-1-{d1 - 1}"))
    assert ok == marks[2]


def test_a_purged_gtid_set():
    from tests.support.mariadb import MariaDB

    with MariaDB() as server:
        server.sql("CREATE DATABASE p", "CREATE TABLE p.t (id INT PRIMARY KEY)",
                   *[f"INSERT INTO p.t VALUES ({i})" for i in range(5)], "FLUSH BINARY LOGS")
        last = server.sql("SHOW BINARY LOGS")[-1][0]
        deadline = time.monotonic() + 20
        while len(server.sql("SHOW BINARY LOGS")) > 1 and time.monotonic() < deadline:
            server.sql(f"PURGE BINARY LOGS TO '{last}'")     # once the checkpoint moved on
            time.sleep(0.2)
        assert len(server.sql("SHOW BINARY LOGS")) == 1
        settings = ConnectionSettings(server.host, port=server.port, user=server.user)
        conn = connect_sql(settings)
        try:
            finder = PositionFinder(settings, 7302, lambda: conn)
            with pytest.raises(BinlogPurgedError, match="purged"):
                finder.resolve_gtid(GtidSet.parse("0-1-2"))
            now = GtidSet.parse(server.sql("SELECT @@gtid_binlog_pos")[0][0])
            assert finder.resolve_gtid(now)[0] == binlog_position(server)
        finally:
            conn.close()


def test_resolve_timestamp(mariadb, fresh_db, finder):
    mariadb.sql(f"CREATE TABLE `{fresh_db}`.t (id INT PRIMARY KEY)")
    marks = []
    for i in range(3):
        mariadb.sql("FLUSH BINARY LOGS")
        time.sleep(1.1)
        before = binlog_position(mariadb)
        now_s = int(mariadb.sql("SELECT UNIX_TIMESTAMP()")[0][0])
        mariadb.sql(f"INSERT INTO `{fresh_db}`.t VALUES ({i})")
        marks.append((before, now_s))
    heads = []
    head = finder.head
    finder.head = lambda f: (heads.append(f), head(f))[1]
    for before, now_s in marks:
        assert finder.resolve_timestamp(now_s * 1000) == before
    assert len(set(heads)) < len(mariadb.sql("SHOW BINARY LOGS"))   # a search, not a scan
    assert finder.resolve_timestamp((marks[-1][1] + 5) * 1000) == binlog_position(mariadb)
