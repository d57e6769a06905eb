"""Mirror apply rate, end to end, next to the Parquet changelog: `mysqlcdc run --until-idle`.

For each workload (``bench/workload.py``: ``wide``, ``narrow``), in the same run and
alternating (the order rotates every repetition), a whole ``mysqlcdc run PIPELINE.yaml
--until-idle`` process reads the workload's binlog from its first file (``include`` =
its table) into one sink: the Parquet changelog, the Delta mirror, or the PostgreSQL
mirror (a private PostgreSQL 15 from the test support, started once). Each run prints
its wall seconds (Spark's start-up included), row changes per second (the workload's
row changes, which the changelog holds one per row), and the peak resident memory of
the whole process tree and of the driver process (the one that runs ``foreachBatch``,
where the mirror's merge runs), sampled from /proc every 0.2 s. Afterwards each mirror
is checked against ``SELECT id`` of the source table: the keys the workload inserted
are exactly the live ones, and every mirrored key is live (the seed rows of the earlier
binlog file appear only once the workload updates them; the values are held equal by
the e2e and chaos tests).

    python bench/workload.py --rows 200000
    python bench/mirror_bench.py --rows 200000 --reps 2
    python bench/mirror_bench.py --rows 200000 --once delta --workloads narrow

The report gives, per workload, the median rows/s of each sink and the median of the
per-repetition ratios mirror / changelog.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from server import OUT_DIR, BenchServer, data_dir_for  # noqa: E402

KINDS = ("changelog", "delta", "postgresql")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def _sink(kind: str, pg, name: str) -> str:
    if kind == "changelog":
        return "  - changelog:\n      path: ./changelog"
    if kind == "delta":
        return "  - mirror:\n      target: delta\n      path: ./mirror"
    return (f"  - mirror:\n      target: postgresql\n      host: {pg.host}\n      port: {pg.port}\n"
            f"      user: {pg.user}\n      password_env: BENCH_PG_PASSWORD")


def _yaml(server, info: dict, kind: str, server_id: int, pg, max_events: int, name: str) -> str:
    return f"""
name: {name}
source:
  host: {server.host}
  port: {server.port}
  user: {server.user}
  server_id: {server_id}
  start: "{info['files'][0]}:4"
  tables: {{include: ["{info['table']}"]}}
  max_events_per_batch: {max_events}
spark:
  master: "local[2]"
  checkpoint: ./checkpoint
  conf: {{spark.sql.shuffle.partitions: "2", spark.ui.enabled: "false"}}
sinks:
{_sink(kind, pg, name)}
"""


def _rss(root: int) -> tuple[int, int]:
    """(bytes resident in ``root`` and all its descendants, bytes in ``root`` itself)."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry)] = int(fields[1])
        rss[int(entry)] = int(fields[21]) * _PAGE
    tree, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in tree:
                tree.add(pid)
                frontier.append(pid)
    return sum(rss.get(p, 0) for p in tree), rss.get(root, 0)


def run_once(server, info: dict, kind: str, server_id: int, pg, max_events: int) -> dict:
    work = Path(tempfile.mkdtemp(prefix=f"mirbench-{kind}-"))
    name = f"mbench-{kind}-{info['table'].split('.')[1]}-{server_id}"
    try:
        if kind == "postgresql":
            pg.sql(f'DROP SCHEMA IF EXISTS "{info["table"].split(".")[0]}" CASCADE')
        config = work / "pipeline.yaml"
        config.write_text(_yaml(server, info, kind, server_id, pg, max_events, name))
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable,
               "PYSPARK_DRIVER_PYTHON": sys.executable,
               "BENCH_PG_PASSWORD": pg.password if pg else ""}
        peak_tree = peak_driver = 0
        started = time.perf_counter()
        with open(work / "run.log", "w+") as log:
            proc = subprocess.Popen([sys.executable, "-m", "mysqlcdc.cli.main", "run",
                                     str(config), "--until-idle"], env=env, cwd=work,
                                    stdout=log, stderr=subprocess.STDOUT)
            while proc.poll() is None:
                tree, driver = _rss(proc.pid)
                peak_tree, peak_driver = max(peak_tree, tree), max(peak_driver, driver)
                time.sleep(0.2)
            wall = time.perf_counter() - started
            if proc.returncode != 0:
                log.seek(0)
                raise SystemExit(f"{kind} run failed:\n{log.read()[-4000:]}")
        check = _check(kind, work, server, info, pg)
        rows = check.pop("changes", None) or info["counts"]["total"]
        return {"kind": kind, "table": info["table"], "row_changes": rows,
                "wall_s": round(wall, 2), "rows_per_s": round(rows / wall),
                "peak_rss_mb": round(peak_tree / 2**20), "driver_rss_mb": round(peak_driver / 2**20),
                **check}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _source(server, table: str) -> tuple[int, set]:
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT COUNT(*) FROM {table}")
            (count,) = cur.fetchone()
            cur.execute(f"SELECT id FROM {table}")
            return count, {r[0] for r in cur.fetchall()}
    finally:
        conn.close()


def _check(kind: str, work: Path, server, info: dict, pg) -> dict:
    if kind == "changelog":
        import pyarrow.dataset as ds

        return {"changes": ds.dataset(str(work / "changelog"), format="parquet",
                                      partitioning="hive").count_rows()}
    _, ids = _source(server, info["table"])
    db, table = info["table"].split(".")
    if kind == "delta":
        from deltalake import DeltaTable

        got = DeltaTable(str(work / "mirror" / db / table)).to_pyarrow_table(columns=["id"])
        got_ids = {int(i) for i in got.column("id").to_pylist()}
    else:
        got_ids = {int(r[0]) for r in pg.sql(f'SELECT id FROM "{db}"."{table}"')}
    seed = info["seed_rows_in_earlier_file"]
    fresh = {i for i in ids if i > seed}
    if not (got_ids <= ids and {i for i in got_ids if i > seed} == fresh):
        raise SystemExit(f"{kind} mirror of {info['table']} differs from the source: "
                         f"{len(got_ids)} rows ({len(got_ids - ids)} not live)")
    return {"mirror_rows": len(got_ids), "keys_match": True}


def throughput(args, manifest: dict, server, pg) -> list[dict]:
    results = []
    kinds = args.kinds.split(",")
    for rep in range(args.reps):
        for workload in args.workloads.split(","):
            info = manifest["workloads"][workload]
            shift = rep % len(kinds)
            order = kinds[shift:] + kinds[:shift]
            for i, kind in enumerate(order):
                r = run_once(server, info, kind, 7600 + rep * 20 + i * 4, pg, args.max_events)
                r.update(workload=workload, rep=rep)
                print(json.dumps(r), flush=True)
                results.append(r)
    return results


def report(results: list[dict]) -> str:
    kinds = [k for k in KINDS if any(r["kind"] == k for r in results)]
    head = "| workload | " + " | ".join(f"{k} rows/s" for k in kinds) + " | " + \
        " | ".join(f"{k} / changelog" for k in kinds if k != "changelog") + \
        " | peak RSS MB (tree / driver) |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for workload in sorted({r["workload"] for r in results}):
        mine = [r for r in results if r["workload"] == workload]
        rate = {k: [r["rows_per_s"] for r in mine if r["kind"] == k] for k in kinds}
        ratios = []
        for k in kinds:
            if k == "changelog":
                continue
            pairs = [(m["rows_per_s"], c["rows_per_s"]) for m in mine for c in mine
                     if m["kind"] == k and c["kind"] == "changelog" and m["rep"] == c["rep"]]
            ratios.append(f"{statistics.median(a / b for a, b in pairs):.2f}" if pairs else "-")
        rss = "; ".join(f"{k} {max(r['peak_rss_mb'] for r in mine if r['kind'] == k)} / "
                        f"{max(r['driver_rss_mb'] for r in mine if r['kind'] == k)}" for k in kinds)
        lines.append(f"| {workload} | " + " | ".join(
            f"{statistics.median(rate[k]):,.0f}" for k in kinds) + " | " + " | ".join(ratios) +
            f" | {rss} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--workloads", default="wide,narrow")
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--max-events", type=int, default=50_000)
    parser.add_argument("--once", choices=KINDS, help="one run of this sink on the first of "
                        "--workloads (for timing the whole command from outside)")
    args = parser.parse_args()
    basedir = data_dir_for(args.rows, args.seed)
    manifest = json.loads((basedir / "manifest.json").read_text())
    server = BenchServer(basedir=basedir).start()
    pg = None
    try:
        kinds = [args.once] if args.once else args.kinds.split(",")
        if "postgresql" in kinds:
            from tests.support.postgres import PostgreSQL

            pg = PostgreSQL().start()
        if args.once:
            info = manifest["workloads"][args.workloads.split(",")[0]]
            print(json.dumps(run_once(server, info, args.once, 7590, pg, args.max_events)))
            return
        results = throughput(args, manifest, server, pg)
    finally:
        server.stop()
        if pg is not None:
            pg.destroy()
    print(report(results))
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    path = OUT_DIR / f"mirror-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps({"rows": args.rows, "seed": args.seed, "cpus": os.cpu_count(),
                                "max_events": args.max_events, "results": results}, indent=2))
    print(f"written: {path}")


if __name__ == "__main__":
    main()
