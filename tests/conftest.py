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
