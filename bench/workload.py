"""Generate the benchmark binlogs on a private mariadbd.

Two tables, each driven through about ``--rows`` row changes (inserts, updates
and deletes) in transactions of 1, 10 and 1000 rows, roughly a third of the
rows in each size:

* ``bench.wide``: 19 columns of mixed types (integers signed and unsigned,
  DECIMAL, FLOAT/DOUBLE, utf8mb4 VARCHAR/TEXT, every temporal type, ENUM, SET,
  BIT, BLOB), the decoder's hard case;
* ``bench.narrow``: three small columns, the per-event overhead case.

Each workload lands in binlog files of its own (``FLUSH BINARY LOGS`` before
and after), so either can be decoded alone. The table seed rows that updates
and deletes need go to an earlier file, so each workload's file is a
representative mix from its first event. Everything is drawn from a seeded
``random.Random``: the same ``--rows``/``--seed`` give the same row data
(``CHECKSUM TABLE`` is recorded to check it).

The datadir is kept under ``bench/data/rows<N>-seed<S>/`` with a
``manifest.json`` saying which file holds which workload, the row-change counts
per operation and the generation time; ``--reuse`` keeps an existing one.

    python bench/workload.py              # ~1M row changes per table
    python bench/workload.py --small      # ~50k, for quick runs
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from server import BenchServer, data_dir_for  # noqa: E402

import pymysql  # noqa: E402
from pymysql.constants import CLIENT  # noqa: E402
from pymysql.converters import escape_string  # noqa: E402

DEFAULT_ROWS = 1_000_000
SMALL_ROWS = 50_000
DEFAULT_SEED = 42
MANIFEST_VERSION = 1
TXN_SIZES = (1, 10, 1000)
OP_WEIGHTS = (("insert", 0.45), ("update", 0.35), ("delete", 0.20))
BATCH_BYTES = 4 << 20   # statements are sent to the server in ~4 MB multi-statement packets

WIDE_DDL = """
CREATE TABLE wide (
  id       BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  c_tiny   TINYINT,
  c_small  SMALLINT,
  c_int    INT NOT NULL,
  c_ubig   BIGINT UNSIGNED,
  c_dec    DECIMAL(20,6),
  c_float  FLOAT,
  c_double DOUBLE,
  c_vc     VARCHAR(64) CHARACTER SET utf8mb4,
  c_text   TEXT CHARACTER SET utf8mb4,
  c_date   DATE,
  c_dt     DATETIME(6),
  c_ts     TIMESTAMP(3) NULL DEFAULT NULL,
  c_time   TIME(3),
  c_year   YEAR,
  c_enum   ENUM('red','green','blue','cyan'),
  c_set    SET('a','b','c','d'),
  c_bit    BIT(8),
  c_blob   BLOB
) ENGINE=InnoDB"""

NARROW_DDL = """
CREATE TABLE narrow (
  id   INT NOT NULL PRIMARY KEY,
  val  INT NOT NULL,
  name VARCHAR(32)
) ENGINE=InnoDB"""


# --------------------------------------------------------------------------- values

class ValuePools:
    """Pre-rendered SQL literals, drawn by index: cheap, varied, deterministic."""

    SIZE = 4096

    def __init__(self, rng: random.Random) -> None:
        n = self.SIZE
        self.vc = [_quote(_text(rng, rng.randint(0, 60))) for _ in range(n)]
        self.text = [_quote(_text(rng, rng.randint(20, 240))) for _ in range(n)]
        self.name = [_quote(_text(rng, rng.randint(3, 30))) for _ in range(n)]
        self.blob = [f"X'{rng.randbytes(rng.randint(0, 96)).hex()}'" for _ in range(n)]
        self.date = [f"'{_date(rng)}'" for _ in range(n)]
        self.dt = [f"'{_date(rng)} {_clock(rng)}.{rng.randint(0, 999999):06d}'" for _ in range(n)]
        self.ts = [f"'{_date(rng, 2001, 2037)} {_clock(rng)}.{rng.randint(0, 999):03d}'" for _ in range(n)]
        self.time = [f"'{_duration(rng)}'" for _ in range(n)]
        self.set = ["''", "'a'", "'b'", "'a,b'", "'c'", "'a,c'", "'b,c,d'", "'a,b,c,d'"]
        self.enum = ["'red'", "'green'", "'blue'", "'cyan'"]


_ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _-'\\%"
_WIDE_CHARS = "éüßçøå日本語中文한국어Ωπ€😀🚀"


def _text(rng: random.Random, length: int) -> str:
    if rng.random() < 0.2:   # some rows carry multi-byte utf8mb4 (incl. 4-byte emoji)
        return "".join(rng.choice(_WIDE_CHARS + _ALPHABET) for _ in range(length))
    return "".join(rng.choice(_ALPHABET) for _ in range(length))


def _quote(s: str) -> str:
    return "'" + escape_string(s) + "'"


def _date(rng: random.Random, lo: int = 1970, hi: int = 2030) -> str:
    start = dt.date(lo, 1, 1).toordinal()
    return dt.date.fromordinal(rng.randint(start, dt.date(hi, 12, 31).toordinal())).isoformat()


def _clock(rng: random.Random) -> str:
    return f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"


def _duration(rng: random.Random) -> str:
    sign = "-" if rng.random() < 0.2 else ""
    return f"{sign}{rng.randint(0, 838)}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}.{rng.randint(0, 999):03d}"


def wide_row(rng: random.Random, pools: ValuePools, row_id: int) -> str:
    r = rng.getrandbits
    p = ValuePools.SIZE - 1
    values = [
        str(rng.randint(-128, 127)),
        str(rng.randint(-32768, 32767)),
        str(rng.randint(-2**31, 2**31 - 1 - 10**7)),       # headroom for c_int + 1 updates
        str(r(64)),                                         # half above 2^63: unsigned exactness
        f"{rng.randint(-10**13, 10**13)}.{r(20) % 1000000:06d}",
        repr(round(rng.uniform(-1e6, 1e6), 2)),
        repr(rng.uniform(-1e12, 1e12)),
        pools.vc[r(12) & p],
        pools.text[r(12) & p],
        pools.date[r(12) & p],
        pools.dt[r(12) & p],
        pools.ts[r(12) & p],
        pools.time[r(12) & p],
        str(rng.randint(1901, 2155)),
        pools.enum[r(2)],
        pools.set[r(3)],
        str(r(8)),
        pools.blob[r(12) & p],
    ]
    if rng.random() < 0.3:                # one nullable column NULL in ~30% of rows
        values[rng.choice((0, 1, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17))] = "NULL"
    return f"({row_id},{','.join(values)})"


def narrow_row(rng: random.Random, pools: ValuePools, row_id: int) -> str:
    name = "NULL" if rng.random() < 0.05 else pools.name[rng.getrandbits(12)]
    return f"({row_id},{rng.randint(-2**31, 2**31 - 1 - 10**7)},{name})"


@dataclass(frozen=True)
class TableSpec:
    name: str
    ddl: str
    make_row: object   # (rng, pools, id) -> "(…)" literal

    def insert(self, rows: list[str]) -> str:
        return f"INSERT INTO {self.name} VALUES {','.join(rows)}"

    def update(self, ids: str, rng: random.Random, pools: ValuePools) -> str:
        # c_int / val are NOT NULL and always change, so every matched row is logged.
        if self.name == "wide":
            return (f"UPDATE wide SET c_int = c_int + 1, c_vc = {pools.vc[rng.getrandbits(12)]}, "
                    f"c_dec = c_dec + 1.25, c_dt = c_dt + INTERVAL 1 SECOND WHERE id IN ({ids})")
        return f"UPDATE narrow SET val = val + 1, name = {pools.name[rng.getrandbits(12)]} WHERE id IN ({ids})"

    def delete(self, ids: str) -> str:
        return f"DELETE FROM {self.name} WHERE id IN ({ids})"


TABLES = {
    "wide": TableSpec("wide", WIDE_DDL, wide_row),
    "narrow": TableSpec("narrow", NARROW_DDL, narrow_row),
}


# --------------------------------------------------------------------------- driving the server

class StatementBatcher:
    """Sends statements in large multi-statement packets.

    Each statement outside BEGIN/COMMIT autocommits, so a 1-row transaction
    costs no extra round trip.
    """

    def __init__(self, conn: pymysql.Connection) -> None:
        self.conn = conn
        self.pending: list[str] = []
        self.size = 0

    def add(self, *statements: str) -> None:
        for stmt in statements:
            self.pending.append(stmt)
            self.size += len(stmt) + 1
        if self.size >= BATCH_BYTES:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        with self.conn.cursor() as cur:
            cur.execute(";\n".join(self.pending))
            while cur.nextset():
                pass
        self.pending, self.size = [], 0


@dataclass
class Workload:
    """One table's row changes: the live ids and what has been done so far."""

    spec: TableSpec
    rng: random.Random
    pools: ValuePools
    next_id: int = 1
    live: list[int] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=lambda: {"insert": 0, "update": 0, "delete": 0})
    transactions: dict[str, int] = field(default_factory=lambda: {str(s): 0 for s in TXN_SIZES})

    def insert_rows(self, n: int) -> str:
        rows = [self.spec.make_row(self.rng, self.pools, i) for i in range(self.next_id, self.next_id + n)]
        self.live.extend(range(self.next_id, self.next_id + n))
        self.next_id += n
        return self.spec.insert(rows)

    def take_ids(self, n: int, remove: bool) -> str:
        picks = sorted(self.rng.sample(range(len(self.live)), n), reverse=True)
        ids = [self.live[i] for i in picks]
        if remove:                       # swap-remove, highest index first
            for i in picks:
                self.live[i] = self.live[-1]
                self.live.pop()
        return ",".join(map(str, ids))

    def statement(self, op: str, size: int) -> tuple[str, str]:
        if op != "insert" and len(self.live) < size:
            op = "insert"                # not enough rows yet: keep the row count, change the op
        if op == "insert":
            stmt = self.insert_rows(size)
        elif op == "update":
            stmt = self.spec.update(self.take_ids(size, remove=False), self.rng, self.pools)
        else:
            stmt = self.spec.delete(self.take_ids(size, remove=True))
        self.counts[op] += size
        self.transactions[str(size)] += 1
        return op, stmt


def schedule(rng: random.Random, rows: int) -> list[tuple[int, str]]:
    """(size, op) per transaction; a third of the rows per size, shuffled."""
    ops, weights = zip(*OP_WEIGHTS)
    txns = []
    for size in TXN_SIZES:
        n = max(1, round(rows / len(TXN_SIZES) / size))
        txns.extend((size, op) for op in rng.choices(ops, weights, k=n))
    rng.shuffle(txns)
    return txns


def run_workload(batcher: StatementBatcher, work: Workload, rows: int) -> None:
    for size, op in schedule(work.rng, rows):
        _, stmt = work.statement(op, size)
        if size == 1:
            batcher.add(stmt)
        else:
            batcher.add("BEGIN", stmt, "COMMIT")
    batcher.flush()


def seed_table(batcher: StatementBatcher, work: Workload, n: int) -> None:
    while n > 0:
        step = min(n, 1000)
        batcher.add(work.insert_rows(step))
        n -= step
    batcher.flush()


# --------------------------------------------------------------------------- binlog bookkeeping

def current_binlog(conn: pymysql.Connection) -> str:
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        return cur.fetchone()[0]


def binlog_sizes(conn: pymysql.Connection) -> dict[str, int]:
    with conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        return {row[0]: int(row[1]) for row in cur.fetchall()}


def flush_binlogs(conn: pymysql.Connection) -> None:
    with conn.cursor() as cur:
        cur.execute("FLUSH BINARY LOGS")


def files_between(sizes: dict[str, int], first: str, last_exclusive: str) -> list[str]:
    return [name for name in sorted(sizes) if first <= name < last_exclusive]


def checksum(conn: pymysql.Connection, table: str) -> int:
    with conn.cursor() as cur:
        cur.execute(f"CHECKSUM TABLE bench.{table}")
        return int(cur.fetchone()[1])


# --------------------------------------------------------------------------- main

def generate(server: BenchServer, rows: int, seed: int) -> dict:
    conn = server.connect(client_flag=CLIENT.MULTI_STATEMENTS, max_allowed_packet=256 << 20)
    batcher = StatementBatcher(conn)
    pools = ValuePools(random.Random(f"{seed}-pools"))
    works = {name: Workload(spec, random.Random(f"{seed}-{name}"), pools) for name, spec in TABLES.items()}
    seed_rows = max(2000, rows // 20)

    batcher.add("RESET MASTER", "CREATE DATABASE bench", "USE bench",
                *(spec.ddl for spec in TABLES.values()))
    batcher.flush()
    for work in works.values():
        seed_table(batcher, work, seed_rows)
    flush_binlogs(conn)

    manifest_workloads = {}
    for name, work in works.items():
        started, first = time.perf_counter(), current_binlog(conn)
        run_workload(batcher, work, rows)
        flush_binlogs(conn)
        sizes = binlog_sizes(conn)
        files = files_between(sizes, first, current_binlog(conn))
        manifest_workloads[name] = {
            "table": f"bench.{name}",
            "files": files,
            "bytes": sum(sizes[f] for f in files),
            "counts": {**work.counts, "total": sum(work.counts.values())},
            "transactions": work.transactions,
            "seed_rows_in_earlier_file": seed_rows,
            "live_rows_at_end": len(work.live),
            "checksum": checksum(conn, name),
            "seconds": round(time.perf_counter() - started, 1),
        }
        print(f"  {name}: {manifest_workloads[name]['counts']} in {files} "
              f"({manifest_workloads[name]['bytes'] / 1e6:.1f} MB, {manifest_workloads[name]['seconds']} s)",
              flush=True)
    conn.close()
    return manifest_workloads


def load_manifest(basedir: Path) -> dict | None:
    path = basedir / "manifest.json"
    if not path.exists():
        return None
    manifest = json.loads(path.read_text())
    return manifest if manifest.get("version") == MANIFEST_VERSION else None


def ensure_workload(rows: int, seed: int, reuse: bool) -> tuple[Path, dict]:
    """Return (basedir, manifest), generating the binlogs unless reusable ones exist."""
    basedir = data_dir_for(rows, seed)
    manifest = load_manifest(basedir)
    if reuse and manifest is not None:
        print(f"reusing {basedir} (generated {manifest['generated_at']})")
        return basedir, manifest
    if basedir.exists():
        shutil.rmtree(basedir)
    print(f"generating ~{rows} row changes per table into {basedir}", flush=True)
    started = time.perf_counter()
    server = BenchServer(basedir=basedir).start()
    try:
        version = server.sql("SELECT VERSION()")[0][0]
        workloads = generate(server, rows, seed)
    finally:
        server.stop()
    manifest = {
        "version": MANIFEST_VERSION,
        "rows": rows,
        "seed": seed,
        "server_version": version,
        "binlog_row_metadata": "NO_LOG (server default; column names from information_schema)",
        "generated_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "generation_seconds": round(time.perf_counter() - started, 1),
        "workloads": workloads,
    }
    (basedir / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"done in {manifest['generation_seconds']} s")
    return basedir, manifest


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=DEFAULT_ROWS, help="row changes per table (default 1,000,000)")
    ap.add_argument("--small", action="store_true", help=f"quick mode: {SMALL_ROWS} row changes per table")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--reuse", action="store_true", help="keep an existing generated datadir")
    args = ap.parse_args(argv)
    if args.small:
        args.rows = SMALL_ROWS
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    ensure_workload(args.rows, args.seed, args.reuse)


if __name__ == "__main__":
    main()
