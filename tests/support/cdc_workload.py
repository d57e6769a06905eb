"""A table with every column type, a random workload over it, and rows in one canonical
form whichever way they were read: ``SELECT *``, the envelope's JSON (docs/ENVELOPE.md)
or Debezium's encodings (read through the field schemas each message carries, the way
a Kafka Connect consumer reads them; the rules are Debezium MySQL's documented ones).

Canonical values: integers (BIT too), float32-rounded FLOAT, Decimal, str, bytes, a
frozenset for SET, ISO text for DATE, microseconds for TIME/DATETIME/TIMESTAMP (UTC),
parsed JSON, and SRID + WKB bytes for spatial values.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import random
import struct
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Callable

__all__ = ["Col", "ALL_TYPES", "ALLT", "ALLNN", "PK2", "NOPK", "create_tables", "seed",
           "random_workload",
           "select_rows", "from_envelope", "from_debezium", "row_key", "apply_per_key",
           "last_per_key"]


@dataclass(frozen=True)
class Col:
    name: str
    sql: str
    kind: str
    gen: Callable[[random.Random], Any]
    write: str = "%s"


def _choice(*values):
    return lambda r: r.choice(values)


def _dec(r: random.Random) -> str:
    return f"{r.choice('-+')}{r.randint(0, 10**14 - 1)}.{r.randint(0, 999999):06d}"


def _datetime(fsp: int) -> Callable:
    def gen(r: random.Random) -> str:
        base = dt.datetime(1960, 1, 1) + dt.timedelta(seconds=r.randint(0, 2_000_000_000))
        frac = f".{r.randint(0, 10**fsp - 1):0{fsp}d}" if fsp else ""
        return base.strftime("%Y-%m-%d %H:%M:%S") + frac
    return gen


def _ts(r: random.Random) -> str:
    base = dt.datetime(1971, 1, 1) + dt.timedelta(seconds=r.randint(0, 2_000_000_000))
    return base.strftime("%Y-%m-%d %H:%M:%S") + f".{r.randint(0, 99):02d}"


def _time(r: random.Random) -> str:
    us = r.randint(-838 * 3600 * 1000, 838 * 3600 * 1000)
    sign, us = ("-" if us < 0 else ""), abs(us)
    return f"{sign}{us // 3600000}:{us // 60000 % 60:02d}:{us // 1000 % 60:02d}.{us % 1000:03d}"


ALL_TYPES: tuple[Col, ...] = (
    Col("ti", "TINYINT", "int", lambda r: r.randint(-128, 127)),
    Col("tiu", "TINYINT UNSIGNED", "int", lambda r: r.randint(0, 255)),
    Col("si", "SMALLINT", "int", lambda r: r.randint(-32768, 32767)),
    Col("mi", "MEDIUMINT UNSIGNED", "int", lambda r: r.randint(0, 2**24 - 1)),
    Col("iu", "INT UNSIGNED", "int", lambda r: r.randint(0, 2**32 - 1)),
    Col("bi", "BIGINT", "int", lambda r: r.randint(-2**63, 2**63 - 1)),
    Col("biu", "BIGINT UNSIGNED", "int", lambda r: r.choice([r.randint(0, 2**64 - 1), 2**64 - 1])),
    Col("f", "FLOAT", "float32", lambda r: r.randint(-4000, 4000) / 4),
    Col("d", "DOUBLE", "double", lambda r: r.randint(-10**9, 10**9) / 64),
    Col("dc", "DECIMAL(20,6)", "decimal", _dec),
    Col("dc0", "DECIMAL(4,0) UNSIGNED", "decimal", lambda r: str(r.randint(0, 9999))),
    Col("b1", "BIT(1)", "int", lambda r: r.randint(0, 1)),
    Col("b12", "BIT(12)", "int", lambda r: r.randint(0, 4095)),
    Col("c", "CHAR(4)", "str", _choice("", "ab", "wxyz", "é")),
    Col("vc", "VARCHAR(30)", "str", lambda r: "".join(r.choice("aé€𝄞 '\"\\") for _ in range(r.randint(0, 12)))),
    Col("tx", "TEXT", "str", lambda r: "t" * r.randint(0, 300)),
    Col("bn", "BINARY(3)", "bytes", lambda r: bytes(r.randint(0, 255) for _ in range(r.randint(0, 3)))),
    Col("vb", "VARBINARY(10)", "bytes", lambda r: bytes(r.randint(0, 255) for _ in range(r.randint(0, 10)))),
    Col("bl", "BLOB", "bytes", lambda r: r.randbytes(r.randint(0, 64))),
    Col("e", "ENUM('x','y','z')", "str", _choice("x", "y", "z")),
    Col("st", "SET('p','q','r')", "set", _choice("", "p", "q,r", "p,q,r")),
    Col("y", "YEAR", "int", lambda r: r.randint(1901, 2155)),
    Col("dt", "DATE", "date", lambda r: (dt.date(1000, 1, 1) + dt.timedelta(days=r.randint(0, 3_000_000))).isoformat()),
    Col("tm", "TIME(3)", "time", _time),
    Col("dtm", "DATETIME", "datetime", _datetime(0)),
    Col("dtm6", "DATETIME(6)", "datetime", _datetime(6)),
    Col("ts", "TIMESTAMP(2)", "timestamp", _ts),
    Col("j", "JSON", "json", lambda r: json.dumps({"k": r.randint(0, 9), "l": [1, "a", None]})),
    Col("g", "GEOMETRY", "geometry", lambda r: f"LINESTRING({r.randint(0, 9)} 0, 1 {r.randint(0, 9)})",
        "ST_GeomFromText(%s, 4326)"),
    Col("pt", "POINT", "geometry", lambda r: f"POINT({r.randint(-9, 9)} {r.randint(0, 9)}.5)",
        "ST_GeomFromText(%s)"),
)
ALLT = "allt"      # id INT PRIMARY KEY and every type, nullable
ALLNN = "allnn"    # the same without spatial columns, every column NOT NULL
PK2 = "pk2"        # (a INT, b VARCHAR(8)) PRIMARY KEY, v INT NOT NULL
NOPK = "nopk"      # a INT, b INT, v VARCHAR(8) NOT NULL: no key at all
NOT_NULL = tuple(c for c in ALL_TYPES if c.kind != "geometry")
COLUMNS = {ALLT: ALL_TYPES, ALLNN: NOT_NULL}

KINDS = {t: {"id": "int"} | {c.name: c.kind for c in cols} for t, cols in COLUMNS.items()}
KINDS |= {PK2: {"a": "int", "b": "str", "v": "int"}, NOPK: {"a": "int", "b": "int", "v": "str"}}


def create_tables(cur, db: str) -> None:
    for table, cols in COLUMNS.items():
        spec = " NULL" if table == ALLT else " NOT NULL"
        defs = ", ".join(f"`{c.name}` {c.sql}{spec}" for c in cols)
        cur.execute(f"CREATE TABLE `{db}`.{table} (id INT NOT NULL PRIMARY KEY, {defs})")
    cur.execute(f"CREATE TABLE `{db}`.{PK2} (a INT NOT NULL, b VARCHAR(8) NOT NULL, "
                "v INT NOT NULL, PRIMARY KEY (a, b))")
    cur.execute(f"CREATE TABLE `{db}`.{NOPK} (a INT, b INT, v VARCHAR(8) NOT NULL)")


def _insert(cur, db: str, table: str, rnd: random.Random, ident: int) -> None:
    nulls = 0.2 if table == ALLT else 0.0
    cols = [c for c in COLUMNS[table] if rnd.random() >= nulls]
    names = ", ".join(["id"] + [f"`{c.name}`" for c in cols])
    marks = ", ".join(["%s"] + [c.write for c in cols])
    cur.execute(f"INSERT INTO `{db}`.{table} ({names}) VALUES ({marks})",
                [ident] + [c.gen(rnd) for c in cols])


def seed(conn, db: str, rnd: random.Random, rows: int = 20) -> None:
    with conn.cursor() as cur:
        for i in range(1, rows + 1):
            for table in COLUMNS:
                _insert(cur, db, table, rnd, i)
            cur.execute(f"INSERT INTO `{db}`.{PK2} VALUES (%s, 'k', %s)", (i, i))
            cur.execute(f"INSERT INTO `{db}`.{NOPK} VALUES (%s, %s, 'v')", (i, i))
    conn.commit()


def _ids(cur, db: str, table: str) -> list[int]:
    cur.execute(f"SELECT id FROM `{db}`.{table} ORDER BY id")
    return [r[0] for r in cur.fetchall()]


def _step(cur, db: str, rnd: random.Random) -> None:
    """One random statement (or a small group of them) on one of the tables."""
    kind = rnd.choice(["insert", "insert", "update", "update", "nulls", "delete", "move",
                       "move_many", "swap", "pk2_shift", "nopk_swap", "nopk_update"])
    table = rnd.choice([ALLT, ALLT, ALLNN])
    ids = _ids(cur, db, table)
    top = max(ids, default=0)
    if kind == "insert" or not ids:
        _insert(cur, db, table, rnd, top + 1)
    elif kind in ("update", "nulls"):
        nulls = kind == "nulls" and table == ALLT
        cols = rnd.sample(COLUMNS[table], rnd.randint(1, 6))
        sets = ", ".join(f"`{c.name}` = {'NULL' if nulls else c.write}" for c in cols)
        args = [] if nulls else [c.gen(rnd) for c in cols]
        cur.execute(f"UPDATE `{db}`.{table} SET {sets} WHERE id = %s", args + [rnd.choice(ids)])
    elif kind == "delete":
        cur.execute(f"DELETE FROM `{db}`.{table} WHERE id = %s", (rnd.choice(ids),))
    elif kind == "move":                      # one row's primary key changes
        cur.execute(f"UPDATE `{db}`.{table} SET id = %s, vc = 'moved' WHERE id = %s",
                    (top + 1 + rnd.randint(0, 5), rnd.choice(ids)))
    elif kind == "move_many":                 # several rows move, onto each other's old keys
        cur.execute(f"UPDATE `{db}`.{table} SET id = id + 2 WHERE id >= %s ORDER BY id DESC",
                    (rnd.choice(ids),))
    elif kind == "swap" and len(ids) >= 2:    # MariaDB checks the key per row: swap via a gap
        a, b = rnd.sample(ids, 2)
        for old, new in ((a, top + 100), (b, a), (top + 100, b)):
            cur.execute(f"UPDATE `{db}`.{table} SET id = %s WHERE id = %s", (new, old))
    elif kind == "pk2_shift":
        cur.execute(f"UPDATE `{db}`.{PK2} SET a = a + 1 WHERE b = 'k' ORDER BY a DESC")
        cur.execute(f"UPDATE IGNORE `{db}`.{PK2} SET b = %s WHERE a = %s",
                    (rnd.choice("kmn"), rnd.randint(1, 30)))
    elif kind == "nopk_swap":                 # no unique key: a true swap in one statement
        x, y = rnd.sample(range(1, 25), 2)
        cur.execute(f"UPDATE `{db}`.{NOPK} SET a = CASE a WHEN %s THEN %s WHEN %s THEN %s END "
                    "WHERE a IN (%s, %s)", (x, y, y, x, x, y))
    elif kind == "nopk_update":
        cur.execute(f"UPDATE `{db}`.{NOPK} SET v = %s WHERE b = %s",
                    (rnd.choice("wxy"), rnd.randint(1, 25)))


def random_workload(conn, db: str, rnd: random.Random, txns: int) -> None:
    """``txns`` transactions of one to four random statements each."""
    with conn.cursor() as cur:
        for _ in range(txns):
            for _ in range(rnd.randint(1, 4)):
                _step(cur, db, rnd)
            conn.commit()


# --- canonical rows ---------------------------------------------------------------

_EPOCH = dt.datetime(1970, 1, 1)
_US = dt.timedelta(microseconds=1)


def _f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def _time_us(text: str) -> int:
    sign = -1 if text.startswith("-") else 1
    hms, _, frac = text.lstrip("-").partition(".")
    h, m, s = (int(p) for p in hms.split(":"))
    return sign * (((h * 60 + m) * 60 + s) * 1_000_000 + int((frac + "000000")[:6]))


def _dt_us(text: str) -> int:
    return (dt.datetime.fromisoformat(text.rstrip("Z").replace("T", " ")) - _EPOCH) // _US


def _select_value(kind: str, v: Any) -> Any:
    if v is None:
        return None
    if kind == "int":
        return int.from_bytes(v, "big") if isinstance(v, bytes) else int(v)
    return {
        "float32": _f32, "double": float, "decimal": Decimal, "str": str, "bytes": bytes,
        "set": lambda s: frozenset(x for x in (s.split(",") if isinstance(s, str) else s) if x),
        "date": lambda d: d.isoformat(), "time": lambda t: t // _US,
        "datetime": lambda d: (d - _EPOCH) // _US, "timestamp": lambda d: (d - _EPOCH) // _US,
        "json": json.loads, "geometry": bytes,
    }[kind](v)


def select_rows(conn, db: str, table: str) -> dict[tuple, dict]:
    """``SELECT *`` of a table, canonical, by key (all columns for ``nopk``)."""
    with conn.cursor() as cur:
        cur.execute(f"SELECT * FROM `{db}`.`{table}`")
        names = [d[0] for d in cur.description]
        kinds = KINDS[table]
        rows = [{n: _select_value(kinds[n], v) for n, v in zip(names, r)} for r in cur.fetchall()]
    return {row_key(table, r): r for r in rows}


def row_key(table: str, row: dict) -> tuple:
    if table in COLUMNS:
        return (row["id"],)
    if table == PK2:
        return (row["a"], row["b"])
    return tuple(sorted((k, repr(v)) for k, v in row.items()))


def _envelope_value(kind: str, v: Any) -> Any:
    if v is None:
        return None
    return {
        "int": int, "float32": _f32, "double": float, "decimal": Decimal, "str": str,
        "bytes": base64.b64decode, "set": frozenset, "date": str, "time": _time_us,
        "datetime": _dt_us, "timestamp": _dt_us, "json": json.loads, "geometry": bytes.fromhex,
    }[kind](v)


def from_envelope(table: str, image: dict) -> dict:
    """A row image of the ``mysqlcdc`` format (docs/ENVELOPE.md), canonical."""
    kinds = KINDS[table]
    return {n: _envelope_value(kinds[n], v) for n, v in image.items()}


# Debezium's encodings, read through each field's Connect schema (name, type, parameters)

def _decimal(v: str, schema: dict) -> Decimal:
    unscaled = int.from_bytes(base64.b64decode(v), "big", signed=True)
    return Decimal(unscaled).scaleb(-int(schema["parameters"]["scale"]))


def _spatial(v: dict, schema: dict) -> bytes:
    return (v["srid"] or 0).to_bytes(4, "little") + base64.b64decode(v["wkb"])


_BY_NAME: dict[str, Callable[[Any, dict], Any]] = {
    "org.apache.kafka.connect.data.Decimal": _decimal,
    "io.debezium.time.Date": lambda v, s: (dt.date(1970, 1, 1) + dt.timedelta(days=v)).isoformat(),
    "io.debezium.time.MicroTime": lambda v, s: v,
    "io.debezium.time.Timestamp": lambda v, s: v * 1000,
    "io.debezium.time.MicroTimestamp": lambda v, s: v,
    "io.debezium.time.ZonedTimestamp": lambda v, s: _dt_us(v),
    "io.debezium.time.Year": lambda v, s: v,
    "io.debezium.data.Bits": lambda v, s: int.from_bytes(base64.b64decode(v), "little"),
    "io.debezium.data.Enum": lambda v, s: v,
    "io.debezium.data.EnumSet": lambda v, s: frozenset(x for x in v.split(",") if x),
    "io.debezium.data.Json": lambda v, s: json.loads(v),
    "io.debezium.data.geometry.Geometry": _spatial,
    "io.debezium.data.geometry.Point": _spatial,
}


def _debezium_value(kind: str, v: Any, schema: dict) -> Any:
    if v is None:
        return None
    if "name" in schema:
        return _BY_NAME[schema["name"]](v, schema)
    t = schema["type"]
    if t == "bytes":
        return base64.b64decode(v)
    if t == "boolean":
        return int(v)
    if t == "float":
        return _f32(v)
    if kind == "json":                        # MariaDB's JSON is LONGTEXT: a plain string
        return json.loads(v)
    return v


def from_debezium(table: str, image: dict, value_schema: dict) -> dict:
    """A ``before``/``after`` payload, decoded by the field schemas of ``value_schema``."""
    fields, kinds = {f["field"]: f for f in value_schema["fields"]}, KINDS[table]
    return {n: _debezium_value(kinds[n], v, fields[n]) for n, v in image.items()}


# --- consumers of a keyed topic -----------------------------------------------------

def apply_per_key(messages: list[tuple[bytes, dict | None]], decode) -> dict[bytes, dict]:
    """Apply (key, value) messages in order: a delete or a tombstone removes the key,
    anything else puts its ``after`` (decoded by ``decode``) under the key."""
    state: dict[bytes, dict] = {}
    for key, value in messages:
        if value is None or value["op"] == "d":
            state.pop(key, None)
        elif value["op"] == "t":
            state.clear()
        else:
            state[key] = decode(value)
    return state


def last_per_key(messages: list[tuple[bytes, dict | None]], decode) -> dict[bytes, dict]:
    """What a compacted topic leaves: only the last message of each key counts."""
    last: dict[bytes, dict | None] = {}
    for key, value in messages:
        last.pop(key, None)
        last[key] = value
    return {k: decode(v) for k, v in last.items() if v is not None and v["op"] != "d"}
