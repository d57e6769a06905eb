"""preflight() and the server facts, each failure produced by a real server in that state."""

from __future__ import annotations

import time

import pytest

from mysqlcdc.capture.server import (
    current_position,
    earliest_position,
    granted_privileges,
    list_binlogs,
    preflight,
    server_info,
)
from mysqlcdc.errors import (
    AuthenticationError,
    BinlogDisabledError,
    BinlogFormatError,
    BinlogPurgedError,
    MissingPrivilegeError,
    PreflightError,
    ServerIdInUseError,
    ServerUnreachableError,
)
from mysqlcdc.protocol.connection import ConnectionSettings
from mysqlcdc.protocol.stream import ReplicationStream
from mysqlcdc.types import BinlogPosition
from tests.support.mariadb import MariaDB, free_port

pytestmark = pytest.mark.integration


def settings_for(db: MariaDB, user: str = "root", password: str = "") -> ConnectionSettings:
    return ConnectionSettings(db.host, port=db.port, user=user, password=password)


def create_user(db: MariaDB, name: str, *grants: str) -> ConnectionSettings:
    db.sql(f"CREATE USER IF NOT EXISTS {name}@'%' IDENTIFIED BY 'pw-{name}'",
           *(g.format(user=f"{name}@'%'") for g in grants))
    return settings_for(db, name, f"pw-{name}")


@pytest.fixture(scope="module")
def own():
    """A server this module may purge binlogs on and register replicas with."""
    db = MariaDB().start()
    yield db
    db.stop()


def test_facts_about_a_healthy_server(mariadb):
    conn = mariadb.connect()
    try:
        info = server_info(conn)
        logs = list_binlogs(conn)
        here, first = current_position(conn), earliest_position(conn)
    finally:
        conn.close()
    assert (info.flavor, info.log_bin, info.binlog_format, info.binlog_checksum) == \
        ("mariadb", True, "ROW", "CRC32")
    assert info.server_id == 1 and info.binlog_row_image == "FULL" and info.warnings == ()
    assert first == BinlogPosition.of(logs[0][0], 4)
    assert here.file == logs[-1][0] and here.pos == logs[-1][1]
    assert preflight(settings_for(mariadb), server_id=900, start=here).version == info.version


def test_unreachable_port():
    port = free_port()
    with pytest.raises(ServerUnreachableError, match=f"127.0.0.1:{port}") as caught:
        preflight(ConnectionSettings("127.0.0.1", port=port, user="root", connect_timeout=2),
                  server_id=900, start=None)
    assert caught.value.hint


def test_wrong_password(mariadb):
    with pytest.raises(AuthenticationError, match="'root'@127.0.0.1") as caught:
        preflight(settings_for(mariadb, "root", "not-the-password"), server_id=900, start=None)
    assert "password" in caught.value.hint


def test_binlog_off_server_and_login_is_checked_before_it():
    with MariaDB(options={"log-bin": False}) as db:
        with pytest.raises(AuthenticationError):
            preflight(settings_for(db, "root", "wrong"), server_id=900, start=None)
        with pytest.raises(BinlogDisabledError, match="log_bin=OFF") as caught:
            preflight(settings_for(db), server_id=900, start=None)
        assert "log_bin" in caught.value.hint


def test_statement_format_server_and_format_is_checked_before_privileges():
    with MariaDB(options={"binlog-format": "STATEMENT"}) as db:
        nobody = create_user(db, "nobody")
        with pytest.raises(BinlogFormatError, match="binlog_format is STATEMENT") as caught:
            preflight(nobody, server_id=900, start=None)
        assert "ROW" in caught.value.hint


def test_a_user_without_privileges_is_told_which_are_missing(mariadb):
    nobody = create_user(mariadb, "pf_nobody")
    with pytest.raises(MissingPrivilegeError,
                       match="lacks REPLICATION SLAVE, REPLICATION CLIENT, SELECT") as caught:
        preflight(nobody, server_id=900, start=None)
    assert "GRANT REPLICATION SLAVE" in caught.value.hint
    slave_only = create_user(mariadb, "pf_slave", "GRANT REPLICATION SLAVE, SELECT ON *.* TO {user}")
    with pytest.raises(MissingPrivilegeError, match=r"lacks REPLICATION CLIENT \(has: "):
        preflight(slave_only, server_id=900, start=None)


@pytest.mark.parametrize("grants", [
    ("GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO {user}",),
    ("GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO {user}", "GRANT SELECT ON mysql.* TO {user}"),
    ("GRANT ALL PRIVILEGES ON *.* TO {user}",),
    ("CREATE ROLE IF NOT EXISTS pf_cdc_role",
     "GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO pf_cdc_role",
     "GRANT pf_cdc_role TO {user}", "SET DEFAULT ROLE pf_cdc_role FOR {user}"),
], ids=["replication-client", "binlog-monitor", "all-privileges", "default-role"])
def test_each_way_of_granting_the_privileges_passes(mariadb, grants, request):
    name = "pf_" + request.node.callspec.id.replace("-", "_")
    settings = create_user(mariadb, name, *grants)
    info = preflight(settings, server_id=900, start=None)
    assert info.log_bin
    # a user who may not SHOW SLAVE HOSTS gets a warning, never a silent pass
    assert all("SHOW SLAVE HOSTS" in w for w in info.warnings)


def test_a_role_that_is_not_active_does_not_count(mariadb):
    mariadb.sql("CREATE ROLE IF NOT EXISTS pf_inactive",
                "GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO pf_inactive")
    settings = create_user(mariadb, "pf_norole", "GRANT pf_inactive TO {user}")
    with pytest.raises(MissingPrivilegeError, match="lacks REPLICATION SLAVE"):
        preflight(settings, server_id=900, start=None)


def purge_to(db: MariaDB, name: str) -> None:
    """PURGE waits for MariaDB's binlog checkpoint, which comes a moment after FLUSH."""
    deadline = time.monotonic() + 10
    while db.sql("SHOW BINARY LOGS")[0][0] != name:
        assert time.monotonic() < deadline, "PURGE BINARY LOGS did not remove the old files"
        db.sql(f"PURGE BINARY LOGS TO '{name}'")
        time.sleep(0.1)


def test_purged_start_names_the_oldest_binlog_still_present(own):
    first = own.sql("SHOW BINARY LOGS")[0][0]
    own.sql("FLUSH BINARY LOGS", "FLUSH BINARY LOGS")
    oldest = own.sql("SHOW BINARY LOGS")[-1][0]
    purge_to(own, oldest)
    with pytest.raises(BinlogPurgedError, match=f"oldest binlog still on the server is {oldest}") as caught:
        preflight(settings_for(own), server_id=900, start=BinlogPosition.of(first, 4))
    assert "earliest" in caught.value.hint
    size = own.sql("SHOW BINARY LOGS")[-1][1]
    with pytest.raises(BinlogPurgedError, match="beyond the end"):
        preflight(settings_for(own), server_id=900, start=BinlogPosition.of(oldest, size + 1))
    assert preflight(settings_for(own), server_id=900, start=BinlogPosition.of(oldest, 4))


def test_server_id_of_the_server_itself(own):
    with pytest.raises(ServerIdInUseError, match="own @@server_id") as caught:
        preflight(settings_for(own), server_id=1, start=None)
    assert "server_id" in caught.value.hint


def test_server_id_of_a_connected_reader(own):
    start = BinlogPosition.of(*own.sql("SHOW MASTER STATUS")[0][:2])
    with ReplicationStream(settings_for(own), server_id=77, start=start) as stream:
        next(iter(stream))  # registered and dumping
        with pytest.raises(ServerIdInUseError, match="server_id 77 is used by a replica"):
            preflight(settings_for(own), server_id=77, start=start)
        assert preflight(settings_for(own), server_id=78, start=start).server_id == 1
        # A pipeline's whole block of ids (one per sink query and parallel reader) is checked.
        with pytest.raises(ServerIdInUseError, match=r"server_id 77 \(of the pipeline ids 75\.\.80\)"):
            preflight(settings_for(own), server_id=range(75, 81), start=start)


def test_a_closed_reader_frees_its_server_id_within_a_few_heartbeats(own):
    """A dump thread learns that its reader is gone only when it next writes: the
    stream's heartbeat period bounds how long a stopped pipeline's id stays taken, and
    so how long its next start waits in the preflight."""
    start = BinlogPosition.of(*own.sql("SHOW MASTER STATUS")[0][:2])
    stream = ReplicationStream(settings_for(own), server_id=79, start=start)
    next(iter(stream))   # registered, and waiting at the binlog's end
    with pytest.raises(ServerIdInUseError):
        preflight(settings_for(own), server_id=79, start=start)
    stream.close()
    closed, freed = time.monotonic(), None
    while freed is None and time.monotonic() - closed < 30:
        try:
            preflight(settings_for(own), server_id=79, start=start)
            freed = time.monotonic() - closed
        except ServerIdInUseError:
            time.sleep(0.1)
    # a second's heartbeat: free after one or two of them, where 5 s took 5 to 10 s
    assert freed is not None and freed < 6, freed


def test_row_image_other_than_full_is_a_warning_not_an_error(own):
    own.sql("SET GLOBAL binlog_row_image = 'MINIMAL'")
    try:
        info = preflight(settings_for(own), server_id=900, start=None)
    finally:
        own.sql("SET GLOBAL binlog_row_image = 'FULL'")
    assert info.binlog_row_image == "MINIMAL"
    assert [w for w in info.warnings if "binlog_row_image is MINIMAL" in w]


def test_warnings_reach_the_run_and_a_pattern_matching_no_table_is_one(own, tmp_path, caplog):
    """``mysqlcdc run`` logs what preflight found that does not stop capture: a row image
    other than FULL, and an include pattern that matches no table (a typo: with the
    closest names; a table still to come: said so)."""
    import logging

    from mysqlcdc.config.loader import load_pipeline_from_dict
    from mysqlcdc.pipeline.runner import checked_preflight

    own.sql("CREATE DATABASE IF NOT EXISTS shop", "CREATE TABLE IF NOT EXISTS shop.orders (id INT)")
    info = preflight(settings_for(own), server_id=901, start=None,
                     include=("shop.order", "shop.ord*", "later.*", "*.*"))
    assert [w for w in info.warnings if "shop.order'" in w and "did you mean shop.orders" in w]
    assert [w for w in info.warnings if "'later.*'" in w and "once they are created" in w]
    assert not [w for w in info.warnings if "ord*" in w or "'*.*'" in w]
    own.sql("CREATE SEQUENCE IF NOT EXISTS shop.ids")
    warned = preflight(settings_for(own), server_id=901, start=None, include=("shop.*",)).warnings
    assert [w for w in warned if "shop.ids is a SEQUENCE" in w and "exclude" in w]
    assert not [w for w in warned if "shop.orders" in w]
    assert not [w for w in preflight(settings_for(own), server_id=901, start=None,
                                     include=("shop.*",), exclude=("shop.ids",)).warnings
                if "SEQUENCE" in w]

    cfg = load_pipeline_from_dict({
        "name": "warned", "source": {"host": own.host, "port": own.port, "user": "root",
                                     "server_id": 902, "tables": {"include": ["shop.order"]}},
        "spark": {"checkpoint": str(tmp_path / "ck")}, "sinks": [{"console": {}}]})
    own.sql("SET GLOBAL binlog_row_image = 'NOBLOB'")
    try:
        with caplog.at_level(logging.WARNING):
            checked_preflight(cfg)
    finally:
        own.sql("SET GLOBAL binlog_row_image = 'FULL'")
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("binlog_row_image is NOBLOB" in m for m in said), said
    assert any("did you mean shop.orders" in m for m in said), said


def test_every_preflight_error_says_what_to_do():
    from mysqlcdc.errors import BinlogFilteredError, RowImageNotFullError

    for cls in (BinlogDisabledError, BinlogFormatError, MissingPrivilegeError, BinlogPurgedError,
                ServerIdInUseError, AuthenticationError, BinlogFilteredError, RowImageNotFullError):
        assert issubclass(cls, PreflightError) and cls.hint


def test_a_table_a_cascading_foreign_key_changes_is_a_warning(own):
    """The server runs a foreign key's ON DELETE / ON UPDATE action in the engine and logs
    only the parent's rows (shown here from the binlog itself): preflight names each
    captured child table of such a key, and no other."""
    own.sql("CREATE DATABASE IF NOT EXISTS fk",
            "CREATE TABLE fk.parent (id INT PRIMARY KEY)",
            "CREATE TABLE fk.child (id INT PRIMARY KEY, pid INT, CONSTRAINT to_parent "
            "FOREIGN KEY (pid) REFERENCES fk.parent (id) ON DELETE CASCADE)",
            "CREATE TABLE fk.plain (id INT PRIMARY KEY, pid INT, "
            "FOREIGN KEY (pid) REFERENCES fk.parent (id))",
            "INSERT INTO fk.parent VALUES (1)", "INSERT INTO fk.child VALUES (10, 1)")
    own.sql("FLUSH BINARY LOGS")
    own.sql("DELETE FROM fk.parent WHERE id = 1")
    assert own.sql("SELECT COUNT(*) FROM fk.child") == [(0,)]
    last = own.sql("SHOW MASTER STATUS")[0][0]
    kinds = [str(r[2]) for r in own.sql(f"SHOW BINLOG EVENTS IN '{last}'")]
    assert kinds.count("Delete_rows_v1") == 1          # the parent's row only
    warned = preflight(settings_for(own), server_id=901, start=None, include=("fk.*",)).warnings
    said = [w for w in warned if "foreign key" in w]
    assert len(said) == 1 and said[0].startswith("fk.child: its foreign key to_parent to "
                                                 "fk.parent is ON DELETE CASCADE")
    assert not [w for w in preflight(settings_for(own), server_id=901, start=None,
                                     include=("fk.parent", "fk.plain")).warnings
                if "foreign key" in w]


def test_a_captured_database_the_server_does_not_log_is_named(tmp_path):
    """``binlog-ignore-db`` (or a ``binlog-do-db`` list without it) keeps a database's
    changes out of the binlog (shown here: its INSERT is not there): a pipeline that
    captures its tables stops at preflight with BINLOG_FILTERED naming it; one that
    leaves it out runs."""
    from mysqlcdc.errors import BinlogFilteredError

    server = MariaDB(basedir=tmp_path / "server", options={"binlog-ignore-db": "quiet"}).start()
    try:
        server.sql("CREATE DATABASE quiet", "CREATE DATABASE loud",
                   "CREATE TABLE quiet.t (id INT PRIMARY KEY)", "CREATE TABLE loud.t (id INT PRIMARY KEY)")
        server.sql("INSERT INTO quiet.t VALUES (1)", db="quiet")
        server.sql("INSERT INTO loud.t VALUES (1)", db="loud")
        logged = [str(r[5]) for r in server.sql("SHOW BINLOG EVENTS")]
        assert any("loud.t" in i for i in logged) and not any("quiet.t VALUES" in i for i in logged)
        with pytest.raises(BinlogFilteredError) as info:
            preflight(settings_for(server), server_id=901, start=None, include=("*.*",))
        assert info.value.code == "BINLOG_FILTERED" and "quiet" in str(info.value) \
            and "binlog_ignore_db=quiet" in str(info.value) and "loud" not in info.value.message
        preflight(settings_for(server), server_id=901, start=None, include=("*.*",),
                  exclude=("quiet.*",))
        preflight(settings_for(server), server_id=901, start=None, include=("loud.*",))
    finally:
        server.stop()


def test_a_replica_that_does_not_log_what_it_replicates_is_refused(tmp_path):
    """A replica with log_slave_updates OFF (MariaDB's default) applies its source's
    changes without writing them to its own binlog (shown: the replicated row is not
    there): reading it stops at preflight with REPLICA_UPDATES_NOT_LOGGED; with its
    replication stopped it is a warning."""
    from mysqlcdc.errors import ReplicaUpdatesNotLoggedError

    primary = MariaDB(basedir=tmp_path / "primary").start()
    replica = MariaDB(basedir=tmp_path / "replica", options={"server-id": "7"}).start()
    try:
        primary.sql("CREATE DATABASE shop", "CREATE TABLE shop.t (id INT PRIMARY KEY)")
        replica.sql(f"CHANGE MASTER TO MASTER_HOST='{primary.host}', MASTER_PORT={primary.port}, "
                    "MASTER_USER='root', MASTER_PASSWORD='', MASTER_USE_GTID=slave_pos",
                    "START SLAVE")
        primary.sql("INSERT INTO shop.t VALUES (1)")
        deadline = time.monotonic() + 30
        while not replica.sql("SHOW DATABASES LIKE 'shop'") or \
                not replica.sql("SELECT 1 FROM shop.t WHERE id = 1"):
            assert time.monotonic() < deadline, replica.sql("SHOW SLAVE STATUS")
            time.sleep(0.2)
        logged = [str(r[5]) for r in replica.sql("SHOW BINLOG EVENTS")]
        assert not any("shop.t" in i for i in logged)
        with pytest.raises(ReplicaUpdatesNotLoggedError) as info:
            preflight(settings_for(replica), server_id=901, start=None, include=("shop.*",))
        assert info.value.code == "REPLICA_UPDATES_NOT_LOGGED" and primary.host in str(info.value)
        # an account that may not list the replica's channels is refused too
        limited = create_user(replica, "cdclimited",
                              "GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO {user}")
        with pytest.raises(ReplicaUpdatesNotLoggedError):
            preflight(limited, server_id=901, start=None, include=("shop.*",))
        replica.sql("STOP SLAVE")
        warned = preflight(settings_for(replica), server_id=901, start=None,
                           include=("shop.*",)).warnings
        assert [w for w in warned if "not running" in w and "log_slave_updates" in w]
        assert not [w for w in preflight(settings_for(primary), server_id=901, start=None,
                                         include=("shop.*",)).warnings if "replica" in w]
    finally:
        replica.stop()
        primary.stop()


def test_a_mirror_on_partial_row_images_is_refused(own, tmp_path):
    """binlog_row_image MINIMAL or NOBLOB leaves columns out of the images: a mirror (or
    changelog tables) would write NULLs for them, or rows without their key, so preflight
    refuses such a sink; a changelog beside it alone would only be warned about."""
    from mysqlcdc.config.loader import load_pipeline_from_dict
    from mysqlcdc.errors import RowImageNotFullError
    from mysqlcdc.pipeline.runner import checked_preflight

    def config(sinks):
        return load_pipeline_from_dict({
            "name": "partial", "source": {"host": own.host, "port": own.port, "user": "root",
                                          "server_id": 903},
            "spark": {"checkpoint": str(tmp_path / f"ck{len(sinks)}")}, "sinks": sinks})

    mirrored = config([{"changelog": {"path": str(tmp_path / "cl")}},
                       {"mirror": {"target": "delta", "path": str(tmp_path / "lake")}}])
    plain = config([{"changelog": {"path": str(tmp_path / "cl")}}])
    own.sql("SET GLOBAL binlog_row_image = 'NOBLOB'")
    try:
        with pytest.raises(RowImageNotFullError) as info:
            checked_preflight(mirrored)
        checked_preflight(plain)
    finally:
        own.sql("SET GLOBAL binlog_row_image = 'FULL'")
    assert info.value.code == "ROW_IMAGE_NOT_FULL"
    assert "NOBLOB" in str(info.value) and "mirror" in str(info.value)
    assert "binlog_row_image = 'FULL'" in info.value.hint
    checked_preflight(mirrored)
