"""Session fixtures: one private mariadbd and one SparkSession for the whole run."""

from __future__ import annotations

import itertools
import os
import sys

import pytest

from tests.support.mariadb import MariaDB

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

_db_counter = itertools.count(1)

# The order files are handed to the test workers in (scripts/test.sh runs pytest-xdist with
# `--dist loadfile --no-loadscope-reorder`, so in collection order): the longest first,
# then the tiers from slow to fast, so the run ends on short files. xdist's own order
# (most tests per file first) put the single-test chaos files last, where one of them
# kept a worker busy for minutes with nothing left for the other. The list: the files
# over about 40 s in a CI run on this project's two-core machine, slowest first.
_LONGEST = ("e2e/test_mirror_chaos.py", "e2e/test_source_outage.py", "e2e/test_snapshot.py",
            "e2e/test_crash.py", "e2e/test_warm_start.py", "e2e/test_kafka.py",
            "e2e/test_cli_errors.py", "e2e/test_mirror.py", "e2e/test_backfill.py",
            "e2e/test_reservations.py", "integration/test_spark_home_jars.py")
_TIERS = ("e2e", "integration", "corpus", "unit")


def _file_rank(path: str) -> tuple[int, str]:
    rel = path.split("tests/", 1)[-1]
    if rel in _LONGEST:
        return _LONGEST.index(rel), rel
    tier = rel.split("/", 1)[0]
    return len(_LONGEST) + (_TIERS.index(tier) if tier in _TIERS else len(_TIERS)), rel


def pytest_collection_modifyitems(config, items):
    """Files longest first (see ``_LONGEST``); a file's tests keep their order."""
    items.sort(key=lambda item: _file_rank(item.nodeid.split("::", 1)[0]))


@pytest.fixture(scope="session")
def mariadb():
    """A private mariadbd with binlog ROW on a free port (no optional metadata: MariaDB's default)."""
    server = MariaDB().start()
    yield server
    server.stop()


@pytest.fixture
def fresh_db(mariadb):
    """A new, empty database name on the session server."""
    name = f"t{os.getpid()}_{next(_db_counter)}"
    mariadb.sql(f"CREATE DATABASE `{name}`")
    yield name
    mariadb.sql(f"DROP DATABASE IF EXISTS `{name}`")


@pytest.fixture(scope="session")
def spark():
    """One SparkSession (local[2]) for the whole run, mysqlcdc registered."""
    from mysqlcdc.spark import build_session

    session = build_session("local[2]", "mysqlcdc-tests", {"spark.sql.shuffle.partitions": "2"})
    yield session
    session.stop()


@pytest.fixture
def source_options(mariadb):
    """Spark options for format('mysqlcdc') against the session server."""
    counter = next(_db_counter)

    def make(**extra):
        opts = {"host": mariadb.host, "port": str(mariadb.port), "user": mariadb.user,
                "password": mariadb.password, "serverId": str(1000 + counter * 10)}
        opts.update({k: str(v) for k, v in extra.items()})
        return opts
    return make


@pytest.fixture(scope="session")
def kafka():
    """A Kafka-protocol broker: the cluster at KAFKA_BOOTSTRAP if set, else a private Tansu."""
    from tests.support.kafka import Broker

    broker = Broker(os.environ.get("KAFKA_BOOTSTRAP") or None).start()
    yield broker
    broker.kill()


@pytest.fixture(scope="session")
def postgres():
    """A private PostgreSQL 15 (temp datadir, free loopback port) for the mirror tests."""
    from tests.support.postgres import PostgreSQL

    server = PostgreSQL().start()
    yield server
    server.destroy()


@pytest.fixture(scope="session")
def mariadb_target():
    """A SECOND private mariadbd: the mirror's MySQL/MariaDB target (no binlog needed)."""
    server = MariaDB().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_server():
    """A private redis-server (password, free loopback port) for the mirror tests."""
    from tests.support.redis import RedisServer

    server = RedisServer().start()
    yield server
    server.destroy()
