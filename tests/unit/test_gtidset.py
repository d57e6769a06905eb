"""GTID sets of both flavours: parse, format, add, contain; start positions."""

from __future__ import annotations

import datetime

import pytest

from mysqlcdc.gtidset import GtidSet, looks_like_gtid_set
from mysqlcdc.types import BinlogPosition, StartTimestamp, parse_start

pytestmark = pytest.mark.unit

U1 = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
U2 = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"


def test_mariadb_positions_per_domain():
    s = GtidSet.parse("1-2-5, 0-1-100\n")
    assert str(s) == "0-1-100,1-2-5" and s.flavor == "mariadb"
    assert s.contains("0-9-100") and not s.contains("0-1-101") and not s.contains("2-1-1")
    assert str(GtidSet.parse("0-1-5,0-2-9,0-1-7")) == "0-2-9"     # a state: highest seq
    assert str(s.add_all(["0-1-101", "2-3-1", "0-4-102", "1-2-4"])) == "0-4-102,1-2-5,2-3-1"
    assert GtidSet.parse("0-1-5").issubset(s) and not s.issubset(GtidSet.parse("0-1-100"))
    assert GtidSet().issubset(s) and GtidSet().empty


def test_mysql_intervals_and_tags():
    s = GtidSet.parse(f"{U1.upper()}:1-5:7,{U2}:tag_a:1-3:5")
    assert str(s) == f"{U1}:1-5:7,{U2}:tag_a:1-3:5"
    assert s.contains(f"{U1}:3") and not s.contains(f"{U1}:6")
    assert s.contains(f"{U2}:tag_a:5") and not s.contains(f"{U2}:5")
    grown = s.add_all([f"{U1}:6", f"{U2}:tag_a:4", f"{U2}:9"])
    assert str(grown) == f"{U1}:1-7,{U2}:9:tag_a:1-5"
    assert s.issubset(grown) and not grown.issubset(s)
    assert GtidSet.parse(f"{U1}:1-3").issubset(GtidSet.parse(f"{U1}:1-5"))
    assert not GtidSet.parse(f"{U1}:1-3").issubset(GtidSet.parse("0-1-5"))


def test_union_is_adding_the_later_transactions():
    maria = GtidSet.parse("0-1-100,1-2-5")
    later = GtidSet().add_all(["0-3-101", "2-1-7", "0-3-104"])
    assert str(maria.union(later)) == str(maria.add_all(["0-3-101", "2-1-7", "0-3-104"]))
    assert str(maria.union(later)) == "0-3-104,1-2-5,2-1-7"
    mysql = GtidSet.parse(f"{U1}:1-5")
    grown = [f"{U1}:6", f"{U1}:9", f"{U2}:tag_a:1"]
    assert str(mysql.union(GtidSet().add_all(grown))) == str(mysql.add_all(grown))
    assert mysql.union(GtidSet()) is mysql and GtidSet().union(mysql) is mysql
    with pytest.raises(ValueError):
        maria.union(mysql)


@pytest.mark.parametrize("bad", ["x", "1-2", f"{U1}", f"{U1}:0", f"{U1}:5-3", "0-1-2,uuid:1"])
def test_bad_sets(bad):
    with pytest.raises(ValueError):
        GtidSet.parse(bad)
    assert not looks_like_gtid_set(bad)


def test_start_positions():
    assert parse_start("latest") == "latest"
    assert parse_start("mariadb-bin.000003:4") == BinlogPosition.of("mariadb-bin.000003", 4)
    assert parse_start("0-1-100") == GtidSet.parse("0-1-100")
    assert parse_start(f"{U1}:1-5") == GtidSet.parse(f"{U1}:1-5")
    ts = parse_start("2026-11-01T12:00:00Z")
    assert isinstance(ts, StartTimestamp) and str(ts) == "2026-11-01T12:00:00Z"
    assert ts.ms == 1793534400000
    assert parse_start("2026-11-01T14:00:00+02:00") == ts
    assert parse_start(datetime.datetime(2026, 11, 1, 12)) == ts       # YAML's own datetime
    for bad in ("yesterday", "1-2", "mariadb-bin:4"):
        with pytest.raises(ValueError):
            parse_start(bad)
