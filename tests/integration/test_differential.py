"""Differential test: random values of every common type, written to a real MariaDB,
decoded by mysqlcdc from the binlog, must equal what SELECT returns (in the envelope's
encoding) — for inserts, for both images of updates and for deletes."""

from __future__ import annotations

import base64
import datetime as dt
import json
import random
import re
import struct
import subprocess
from decimal import Decimal

import pytest

from mysqlcdc.capture.filters import TableFilter
from mysqlcdc.capture.server import current_position
from mysqlcdc.capture.task import RangeTask, read_range
from mysqlcdc.pipeline.localserver import find_binary
from mysqlcdc.protocol.connection import ConnectionSettings, connect_sql
from mysqlcdc.schema.introspect import load_tables

pytestmark = pytest.mark.integration

COLUMNS = {
    "ti": "TINYINT", "tiu": "TINYINT UNSIGNED", "si": "SMALLINT", "mi": "MEDIUMINT UNSIGNED",
    "i": "INT", "bi": "BIGINT", "biu": "BIGINT UNSIGNED",
    "d1": "DECIMAL(65,30)", "d2": "DECIMAL(10,2) UNSIGNED", "d3": "DECIMAL(5,0)",
    "f": "FLOAT", "db": "DOUBLE", "dt": "DATE", "dtm": "DATETIME", "dtm6": "DATETIME(6)",
    "ts3": "TIMESTAMP(3) NULL", "tm": "TIME", "tm6": "TIME(6)", "yr": "YEAR",
    "c": "CHAR(8) CHARACTER SET utf8mb4", "vc": "VARCHAR(300) CHARACTER SET utf8mb4",
    "l1": "VARCHAR(40) CHARACTER SET latin1", "cp": "VARCHAR(40) CHARACTER SET cp1250",
    "tx": "TEXT CHARACTER SET utf8mb4", "bn": "BINARY(4)", "vb": "VARBINARY(64)", "bl": "BLOB",
    "en": "ENUM('red','green','blue')", "st": "SET('a','b','c','d')", "bt1": "BIT(1)",
    "bt64": "BIT(64)", "js": "JSON",
}

EDGES = {
    "ti": [-128, 127], "tiu": [0, 255], "si": [-32768, 32767], "mi": [0, 16777215],
    "i": [-2147483648, 2147483647], "bi": [-9223372036854775808, 9223372036854775807],
    "biu": [0, 18446744073709551615],
    "d1": ["-" + "9" * 35 + "." + "9" * 30, "0." + "0" * 29 + "1", "-0.5"],
    "tm": ["-838:59:59", "838:59:59", "-00:00:01"], "tm6": ["-838:59:59.000000", "100:00:00.000001"],
    "yr": [1901, 2155], "st": [""], "bt64": [2**64 - 1], "vc": ["", "😀 ünïcödé"],
}


def _random_value(rnd: random.Random, name: str):
    if rnd.random() < 0.08:
        return None
    if name in EDGES and rnd.random() < 0.3:
        return rnd.choice(EDGES[name])
    r = rnd.randint
    return {
        "ti": lambda: r(-128, 127), "tiu": lambda: r(0, 255), "si": lambda: r(-32768, 32767),
        "mi": lambda: r(0, 16777215), "i": lambda: r(-2**31, 2**31 - 1),
        "bi": lambda: r(-2**63, 2**63 - 1), "biu": lambda: r(0, 2**64 - 1),
        "d1": lambda: f"{r(-10**20, 10**20)}.{r(0, 10**30 - 1):030d}",
        "d2": lambda: f"{r(0, 10**8 - 1)}.{r(0, 99):02d}", "d3": lambda: str(r(-99999, 99999)),
        "f": lambda: rnd.uniform(-1e6, 1e6), "db": lambda: rnd.uniform(-1e300, 1e300),
        "dt": lambda: dt.date(r(1000, 9999), r(1, 12), r(1, 28)),
        "dtm": lambda: dt.datetime(r(1000, 9999), r(1, 12), r(1, 28), r(0, 23), r(0, 59), r(0, 59)),
        "dtm6": lambda: dt.datetime(r(1000, 9999), r(1, 12), r(1, 28), r(0, 23), r(0, 59), r(0, 59),
                                    r(0, 999999)),
        "ts3": lambda: dt.datetime(r(1971, 2037), r(1, 12), r(1, 28), r(0, 23), r(0, 59), r(0, 59),
                                   r(0, 999) * 1000),
        "tm": lambda: f"{rnd.choice(['', '-'])}{r(0, 838)}:{r(0, 59):02d}:{r(0, 59):02d}",
        "tm6": lambda: f"{rnd.choice(['', '-'])}{r(0, 837)}:{r(0, 59):02d}:{r(0, 59):02d}.{r(0, 999999):06d}",
        "yr": lambda: r(1901, 2155), "c": lambda: _text(rnd, 8),
        "vc": lambda: _text(rnd, 300), "l1": lambda: "".join(rnd.choice("aé€ÿ ") for _ in range(r(0, 40))),
        "cp": lambda: "".join(rnd.choice("ačřžĚ ") for _ in range(r(0, 40))),
        "tx": lambda: _text(rnd, 2000), "bn": lambda: rnd.randbytes(r(0, 4)),
        "vb": lambda: rnd.randbytes(r(0, 64)), "bl": lambda: rnd.randbytes(r(0, 3000)),
        "en": lambda: rnd.choice(["red", "green", "blue"]),
        "st": lambda: ",".join(sorted(rnd.sample("abcd", r(0, 4)))),
        "bt1": lambda: r(0, 1), "bt64": lambda: r(0, 2**64 - 1),
        "js": lambda: json.dumps({"k": r(-5, 5), "s": _text(rnd, 10), "a": [1, None, True]}),
    }[name]()


def _text(rnd: random.Random, most: int) -> str:
    return "".join(rnd.choice("abcxyz ÄÖü日本😀\"'\\\n") for _ in range(rnd.randint(0, most)))


def _expected(name: str, value):
    """A SELECT result in the envelope's encoding (docs/ENVELOPE.md)."""
    if value is None:
        return None
    kind = COLUMNS[name].split("(")[0].split()[0]
    if isinstance(value, Decimal):
        return format(value, "f")
    if kind in ("BINARY", "VARBINARY", "BLOB"):
        return base64.b64encode(bytes(value)).decode()
    if kind == "BIT":
        return int.from_bytes(value, "big")
    if kind == "SET":
        return [] if value == "" else sorted(value.split(",")) if isinstance(value, str) else sorted(value)
    if kind == "DATE":
        return value.isoformat()
    if kind == "DATETIME":
        fmt = "%Y-%m-%d %H:%M:%S.%f" if name == "dtm6" else "%Y-%m-%d %H:%M:%S"
        return value.strftime(fmt)
    if kind == "TIMESTAMP":
        return value.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    if kind == "TIME":
        return _time_text(value, 6 if name == "tm6" else 0)
    return value


def _time_text(delta: dt.timedelta, fsp: int) -> str:
    micros = delta.days * 86_400_000_000 + delta.seconds * 1_000_000 + delta.microseconds
    sign = "-" if micros < 0 else ""
    secs, frac = divmod(abs(micros), 1_000_000)
    text = f"{sign}{secs // 3600:02d}:{secs // 60 % 60:02d}:{secs % 60:02d}"
    return f"{text}.{frac:06d}" if fsp else text


def _same(name: str, got, want) -> bool:
    if name == "f" and got is not None and want is not None:
        return struct.pack("<f", got) == struct.pack("<f", want)
    if name == "st" and isinstance(got, list):
        return sorted(got) == want
    if name == "js" and got is not None and want is not None:
        return json.loads(got) == json.loads(want)
    return got == want


def _snapshot(conn, db: str) -> dict[int, dict]:
    with conn.cursor() as cur:
        # FLOAT as DOUBLE: the exact stored float32, not the 6-digit text MariaDB shows
        select = ", ".join("CAST(f AS DOUBLE)" if n == "f" else n for n in COLUMNS)
        cur.execute(f"SELECT id, {select} FROM `{db}`.v ORDER BY id")
        return {row[0]: {n: _expected(n, v) for n, v in zip(COLUMNS, row[1:])} for row in cur.fetchall()}


def _decode(mariadb, db: str, start, end) -> list[dict]:
    settings = ConnectionSettings(mariadb.host, port=mariadb.port, user=mariadb.user)
    conn = connect_sql(settings)
    tables = TableFilter((f"{db}.v",))
    defs = load_tables(conn, tables)
    conn.close()
    task = RangeTask(settings, 3901, start, end, tables, defs)
    return [row for batch in read_range(task) for row in batch.to_pylist()]


def _compare(name_id: int, got: dict, want: dict) -> list[str]:
    return [f"id={name_id} {c}: decoded {got.get(c)!r} != selected {want[c]!r}"
            for c in COLUMNS if not _same(c, got.get(c, "<absent>"), want[c])]


_OPS = {"INSERT INTO": "c", "UPDATE": "u", "DELETE FROM": "d"}


def _reference_changes(mariadb, db: str, start, end) -> list[tuple[str, int]]:
    """(op, id) per row change as the server's own mariadb-binlog decodes them."""
    if start.file != end.file:
        pytest.fail("the workload crossed a binlog rotation; the reference decode reads one file")
    out = subprocess.run(
        [find_binary("mariadb-binlog"), "--base64-output=decode-rows", "--verbose",
         f"--start-position={start.pos}", f"--stop-position={end.pos}",
         str(mariadb.basedir / "data" / start.file)],
        capture_output=True, check=True).stdout.decode("utf-8", "replace")
    changes, op = [], None
    for line in out.splitlines():
        m = re.match(rf"### (INSERT INTO|UPDATE|DELETE FROM) `{db}`\.`v`", line)
        if m:
            op = _OPS[m.group(1)]
        elif op and (m := re.match(r"###   @1=(-?\d+)", line)):
            changes.append((op, int(m.group(1))))
            op = None
    return changes


@pytest.mark.parametrize("seed", [1, 2])
def test_binlog_values_equal_select(mariadb, fresh_db, seed):
    rnd = random.Random(seed)
    mariadb.sql(f"CREATE TABLE `{fresh_db}`.v (id INT PRIMARY KEY, "
                + ", ".join(f"{n} {t}" for n, t in COLUMNS.items()) + ")")
    conn = mariadb.connect(database=fresh_db)
    conn.cursor().execute("SET time_zone = '+00:00'")
    start = current_position(conn)
    placeholders = ", ".join(["%s"] * (len(COLUMNS) + 1))
    with conn.cursor() as cur:
        for i in range(1, 121):
            cur.execute(f"INSERT INTO v VALUES ({placeholders})",
                        [i, *(_random_value(rnd, n) for n in COLUMNS)])
    inserted = _snapshot(conn, fresh_db)
    with conn.cursor() as cur:
        for i in range(1, 121, 2):
            sets = ", ".join(f"{n} = %s" for n in COLUMNS)
            cur.execute(f"UPDATE v SET {sets} WHERE id = %s", [*(_random_value(rnd, n) for n in COLUMNS), i])
    updated = _snapshot(conn, fresh_db)
    with conn.cursor() as cur:
        cur.execute("DELETE FROM v WHERE id % 3 = 0")
    end = current_position(conn)
    conn.close()

    rows = _decode(mariadb, fresh_db, start, end)
    problems: list[str] = []
    for r in rows:
        before = json.loads(r["before"]) if r["before"] else None
        after = json.loads(r["after"]) if r["after"] else None
        key = json.loads(r["key"])["id"]
        if r["op"] == "c":
            problems += _compare(key, after, inserted[key])
        elif r["op"] == "u":
            problems += _compare(key, before, inserted[key])
            problems += _compare(key, after, updated[key])
        else:
            problems += _compare(key, before, updated[key])
    ours = [(r["op"], json.loads(r["key"])["id"]) for r in rows]
    assert ours == _reference_changes(mariadb, fresh_db, start, end)
    ops = [r["op"] for r in rows]
    assert ops.count("c") == 120 and ops.count("d") == 40
    assert ops.count("u") >= 55          # an UPDATE that changes nothing is not logged
    assert not problems, "\n".join(problems[:20])
