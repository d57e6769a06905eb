"""Transforms alone, in one process: microseconds per row of a chain over one record batch.

No Spark, no server: 8,192 envelope rows shaped like the ``narrow`` and ``wide`` bench
workloads (one update per two inserts), run through

* ``builtins``: mask (keep the last 4) + hash (salted) + filter (a predicate on an image
  field that keeps every row), the chain of ``bench/transforms_bench.py``;
* ``python``: a per-event python function that changes one field, with typed values
  (the table's columns in a schema history, as a pipeline has them);

best of ``--reps`` runs each, alternating, CPU time of this process.

    .venv/bin/python bench/transforms_micro.py --reps 7
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "src")]

from mysqlcdc.schema.history import SchemaHistory  # noqa: E402
from mysqlcdc.schema.model import ColumnDef, TableDef  # noqa: E402
from mysqlcdc.transforms.api import TaskPlace  # noqa: E402
from mysqlcdc.types import BinlogPosition  # noqa: E402
from mysqlcdc.transforms.builtins import Filter, Hash, Mask  # noqa: E402
from mysqlcdc.transforms.chain import Chain  # noqa: E402
from mysqlcdc.transforms.python import PythonTransform  # noqa: E402
from tests.unit.transforms.rows import batch, row  # noqa: E402

CODE = '''
def touch(event):
    after = event["after"]
    if after is not None and after.get("{column}") is not None:
        after["{column}"] = after["{column}"].upper()
    return event
'''


def _image(workload: str, i: int) -> dict:
    # like bench/workload.py's text (its alphabet has a backslash and a quote): a third
    # of the values hold a character JSON escapes
    odd = "\\'" if i % 3 == 0 else ""
    if workload == "narrow":
        return {"id": i, "val": i * 7, "name": f"name-{i}-abcdefgh{odd}"}
    return {"id": i, "c_tiny": 1, "c_small": -300, "c_int": i, "c_ubig": 18446744073709551615,
            "c_dec": "-1234.567890", "c_float": 1.5, "c_double": 0.1, "c_vc": f"vc-{i}-ü{odd}",
            "c_text": "text " * 20 + odd, "c_date": "2024-02-29", "c_dt": "2024-02-29 13:45:07.123456",
            "c_ts": "2024-02-29T13:45:07.123Z", "c_time": "-12:00:01.500", "c_year": 2024,
            "c_enum": "red", "c_set": ["a", "c"], "c_bit": 5, "c_blob": "AAEC/w=="}


def _batch(workload: str):
    rows = []
    for i in range(8192):
        image = _image(workload, i)
        if i % 3 == 0:
            rows.append(row("u", workload, db="bench", before=image, after=image))
        else:
            rows.append(row("c", workload, db="bench", after=image))
    return batch(*rows)


def _definition(workload: str) -> TableDef:
    """The bench table's columns as the schema history holds them (typed python values)."""
    if workload == "narrow":
        cols = [ColumnDef("id", "int", is_primary_key=True), ColumnDef("val", "int"),
                ColumnDef("name", "varchar", charset="utf8mb4")]
    else:
        cols = [ColumnDef("id", "bigint", is_primary_key=True), ColumnDef("c_tiny", "tinyint"),
                ColumnDef("c_small", "smallint"), ColumnDef("c_int", "int"),
                ColumnDef("c_ubig", "bigint", unsigned=True),
                ColumnDef("c_dec", "decimal", precision=20, scale=6),
                ColumnDef("c_float", "float"), ColumnDef("c_double", "double"),
                ColumnDef("c_vc", "varchar", charset="utf8mb4"),
                ColumnDef("c_text", "text", charset="utf8mb4"), ColumnDef("c_date", "date"),
                ColumnDef("c_dt", "datetime", fsp=6), ColumnDef("c_ts", "timestamp", fsp=3),
                ColumnDef("c_time", "time", fsp=3), ColumnDef("c_year", "year"),
                ColumnDef("c_enum", "enum", enum_values=("red", "green", "blue", "cyan")),
                ColumnDef("c_set", "set", set_values=("a", "b", "c", "d")),
                ColumnDef("c_bit", "bit", length=8), ColumnDef("c_blob", "blob", charset="binary")]
    return TableDef("bench", workload, tuple(cols))


def _chains(workload: str, history: str | None = None) -> dict[str, Chain]:
    masked, hashed, field = ("name", "val", "val") if workload == "narrow" else \
        ("c_vc", "c_text", "c_int")
    table = f"bench.{workload}"
    return {
        "builtins": Chain([Mask([f"{table}.{masked}"], keep_last=4),
                           Hash([f"{table}.{hashed}"], salt="s"),
                           Filter(keep=f"after.{field} is not None or op == 'd'")]),
        "python": Chain([PythonTransform(f"bench_micro_{workload}:touch")], history_dir=history),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="trmicro-"))
    sys.path.insert(0, str(folder))
    place = TaskPlace("p", "0-bench", "q", 0, 0, 0)
    print("| workload | chain | µs per row (CPU, best of reps) |\n|---|---|---:|")
    for workload in ("narrow", "wide"):
        column = "name" if workload == "narrow" else "c_vc"
        (folder / f"bench_micro_{workload}.py").write_text(CODE.replace("{column}", column))
        b = _batch(workload)
        history = folder / f"history-{workload}"
        SchemaHistory(history).bootstrap(BinlogPosition.of("mariadb-bin.000001", 4),
                                         {("bench", workload): _definition(workload)})
        chains = _chains(workload, str(history))
        best = {name: float("inf") for name in chains}
        for _ in range(args.reps):
            for name, chain in chains.items():
                started = time.process_time()
                out = list(chain.run_stage(0, [b], place, b.schema))
                best[name] = min(best[name], time.process_time() - started)
                assert sum(x.num_rows for x in out) == b.num_rows
        for name, seconds in best.items():
            print(f"| {workload} | {name} | {seconds / b.num_rows * 1e6:.1f} |")


if __name__ == "__main__":
    main()
