"""The ``mysqlcdc`` command: thin commands over ``mysqlcdc.pipeline``."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from mysqlcdc.errors import MysqlcdcError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Change data capture for MySQL and MariaDB on Apache Spark.")
console = Console(stderr=True)
out = Console()


def _fail(err: MysqlcdcError) -> None:
    console.print(f"[bold red]error[/] [{err.code}] {err.message}", highlight=False)
    if err.hint:
        console.print(f"  [yellow]hint:[/] {err.hint}", highlight=False)
    raise typer.Exit(2)


@app.command()
def run(
    pipeline: Path = typer.Argument(..., help="Pipeline YAML file.", exists=False),
    until_idle: bool = typer.Option(False, "--until-idle",
                                    help="Stop once everything on the server has been captured."),
    verbose: bool = typer.Option(False, "--verbose", "-v"),
    resume_from_sink: bool = typer.Option(
        False, "--resume-from-sink",
        help="Without a checkpoint, start where the Kafka sink's commit log ends."),
) -> None:
    """Run a pipeline until interrupted (Ctrl-C stops it cleanly)."""
    from mysqlcdc.config.loader import load_pipeline
    from mysqlcdc.pipeline.runner import run_pipeline

    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING)
    try:
        cfg = load_pipeline(pipeline)
        with console.status(f"pipeline [bold]{cfg.name}[/]: starting Spark ...") as status:
            def progress(p: dict) -> None:
                source = p.get("source") or {}
                note = ""
                if source.get("outage_s") is not None:
                    note = f" · [yellow]source unreachable for {source['outage_s']:.0f} s, retrying[/]"
                elif source.get("reconnects"):
                    note = f" · {source['reconnects']} reconnect(s)"
                status.update(
                    f"pipeline [bold]{cfg.name}[/]: batch {p.get('batchId', '-')} "
                    f"rows {p.get('numInputRows', 0)} "
                    f"({p.get('processedRowsPerSecond', 0) or 0:.0f} rows/s){note}"
                )
            run_pipeline(cfg, until_idle=until_idle, on_progress=progress,
                         resume_from_sink=resume_from_sink, quiet=not verbose)
    except MysqlcdcError as err:
        _fail(err)
    except KeyboardInterrupt:
        console.print("stopped")


@app.command()
def demo(
    mysql: Optional[str] = typer.Option(None, "--mysql",
                                        help="Capture from this server instead: mysql://user:pass@host:port"),
    out_dir: Path = typer.Option(Path("mysqlcdc-demo"), "--out", help="Where the changelog goes."),
) -> None:
    """Start a throwaway MariaDB, apply changes, capture them with Spark, print them."""
    from mysqlcdc.pipeline.demo import parse_mysql_url, run_demo

    try:
        server = parse_mysql_url(mysql) if mysql else None
        with console.status("mysqlcdc demo") as status:
            def step(text: str) -> None:
                console.print(f"[green]•[/] {text}")
                status.update(text)
            rows = run_demo(out_dir.resolve(), server, step)
    except MysqlcdcError as err:
        _fail(err)
    out.print(_changes_table(rows))
    out.print(f"{len(rows)} changes captured into [bold]{out_dir}/changelog[/] "
              "(Parquet, partitioned by db and table).")
    out.print(f"Query it: spark.read.parquet('{out_dir}/changelog').orderBy('seq').show()")


def _changes_table(rows: list[dict]) -> Table:
    table = Table(title="captured changes (in seq order)")
    for name in ("seq", "op", "table", "key", "before", "after"):
        table.add_column(name, overflow="fold")
    for r in rows:
        table.add_row(str(r["seq"]), r["op"], r["table"], r["key"] or "",
                      r["before"] or "", r["after"] or "")
    return table


@app.command()
def decode(
    files: list[Path] = typer.Argument(..., help="Local binlog files, in order."),
    changes: bool = typer.Option(
        False, "--changes", help="One JSON line per row change, the envelope the pipeline "
        "writes (op, before, after, key, seq, db, table, file, pos, gtid ...), decoded column "
        "by column; without it, one JSON line per event."),
    table: list[str] = typer.Option(
        [], "--table", metavar="DB.TABLE", help="Only this table's changes (repeatable; globs "
        "as in tables.include)."),
    start_position: int = typer.Option(
        None, "--start-position", min=4, help="Start at the first event of the first file at "
        "or after this position (as mysqlbinlog)."),
    stop_position: int = typer.Option(
        None, "--stop-position", min=4, help="Stop at the first event of the last file at or "
        "after this position (as mysqlbinlog)."),
) -> None:
    """Decode local binlog files offline: one JSON line per event, or per row change."""
    from mysqlcdc.capture.filters import TableFilter
    from mysqlcdc.capture.offline import print_changes, print_events

    try:
        include = TableFilter.parse(",".join(table), None) if table else None
        write = print_changes if changes else print_events
        out = sys.stdout
        write([str(f) for f in files], out, include=include, start=start_position,
              stop=stop_position)
        out.flush()
    except BrokenPipeError:          # `| head`: the reader has all it wanted
        sys.stderr.close()
    except MysqlcdcError as err:
        _fail(err)


mirror_app = typer.Typer(no_args_is_help=True, help="Inspect a pipeline's mirror targets.")
app.add_typer(mirror_app, name="mirror")


@mirror_app.command("position")
def mirror_position(
    pipeline: Path = typer.Argument(..., help="Pipeline YAML file."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per mirror sink."),
) -> None:
    """Print the binlog position each mirror (and changelog_table) target's last commit
    reflects."""
    import json

    from mysqlcdc.config.loader import load_pipeline
    from dataclasses import replace

    from mysqlcdc.config.models import ChangelogTableSinkConfig, MirrorSinkConfig
    from mysqlcdc.pipeline.runner import schema_history_dir
    from mysqlcdc.sinks.changelog_table import from_sink_config as table_settings
    from mysqlcdc.sinks.mirror import from_sink_config, read_position

    try:
        cfg = load_pipeline(pipeline)
        rows = []
        for index, sink in enumerate(cfg.sinks):
            settings = None
            if isinstance(sink, MirrorSinkConfig):
                settings = from_sink_config(sink, cfg.name, schema_history_dir(cfg, index))
            elif isinstance(sink, ChangelogTableSinkConfig):
                t = table_settings(sink, cfg.name, schema_history_dir(cfg, index))
                settings = replace(t.target, pipeline=t.ledger_name)
            if settings is not None:
                rows.append({"sink": index, "type": sink.type, "target": sink.target,
                             "at": f"{settings.host}:{settings.port}",
                             **read_position(settings)})
    except MysqlcdcError as err:
        _fail(err)
    if as_json:
        for r in rows:
            sys.stdout.write(json.dumps(r, ensure_ascii=False) + "\n")
        return
    t = Table(title=f"mirror position of {cfg.name}")
    for name in ("sink", "target", "batch", "position", "seq", "stopped tables"):
        t.add_column(name, overflow="fold")
    for r in rows:
        stopped = "; ".join(f"{s['table']} ({s['code']})" for s in r["stopped"]) or "-"
        t.add_row(str(r["sink"]), f"{r['target']} {r['at']}", str(r["batch_id"]),
                  r["position"] or "-", r["seq"] or "-", stopped)
    out.print(t)


@app.command()
def serve(
    config_dir: Path = typer.Option(Path("pipelines"), "--config-dir",
                                    help="Folder of pipeline YAML files; API-created ones go here."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address the API listens on."),
    port: int = typer.Option(8080, "--port", help="Port the API listens on."),
    master: str = typer.Option("local[*]", "--master", help="Spark master of the shared session."),
    verbose: bool = typer.Option(False, "--verbose", "-v"),
) -> None:
    """Run every pipeline of a folder in one process, with the REST API (/docs),
    /metrics and /healthz, until interrupted."""
    import socket

    from mysqlcdc.errors import ConfigError

    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING)
    try:
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((host, port))
            except OSError as err:
                raise ConfigError(f"cannot listen on {host}:{port}: {err.strerror}",
                                  hint="Pick a free port with --port, or stop what uses it.") from None
        _serve(config_dir, host, port, master)
    except MysqlcdcError as err:
        _fail(err)
    except KeyboardInterrupt:
        console.print("stopped")


def _serve(config_dir: Path, host: str, port: int, master: str) -> None:
    import uvicorn

    from mysqlcdc.api import PipelineService
    from mysqlcdc.api.app import Poller, create_app
    from mysqlcdc.spark import build_session

    service = PipelineService(config_dir, lambda: build_session(master, "mysqlcdc-serve", {}))
    for name in service.load_folder():
        try:
            service.start(name)
        except MysqlcdcError as err:
            console.print(f"[bold red]pipeline {name} failed[/] [{err.code}] {err.message}",
                          highlight=False)
    poller = Poller(service)
    poller.start()
    console.print(f"serving {len(service.pipelines)} pipeline(s) on http://{host}:{port} "
                  f"(API docs at /docs)", highlight=False)
    try:
        uvicorn.run(create_app(service), host=host, port=port, log_level="warning")
    finally:
        poller.stopped.set()
        service.stop_all()


@app.command()
def status(
    pipeline: Optional[str] = typer.Argument(None, help="One pipeline; all when omitted."),
    url: str = typer.Option("http://127.0.0.1:8080", "--url", help="The serve instance."),
) -> None:
    """Each pipeline's state, position, lag and rate, from a running `mysqlcdc serve`."""
    import json
    import urllib.error
    import urllib.request

    target = f"{url.rstrip('/')}/pipelines" + (f"/{pipeline}" if pipeline else "")
    try:
        with urllib.request.urlopen(target, timeout=10) as resp:
            data = json.loads(resp.read())
    except urllib.error.HTTPError as err:
        body = json.loads(err.read() or b"{}")
        console.print(f"[bold red]error[/] [{body.get('code', err.code)}] "
                      f"{body.get('message', err.reason)}", highlight=False)
        raise typer.Exit(2)
    except (urllib.error.URLError, OSError) as err:
        console.print(f"[bold red]error[/] [SERVE_UNREACHABLE] no mysqlcdc serve at {url}: "
                      f"{getattr(err, 'reason', err)}", highlight=False)
        console.print("  [yellow]hint:[/] Start it with `mysqlcdc serve`, or pass --url.",
                      highlight=False)
        raise typer.Exit(2)
    rows = data if isinstance(data, list) else [data]
    t = Table(title="pipelines")
    for name in ("pipeline", "state", "position", "lag bytes", "rows", "rows/s", "error"):
        t.add_column(name, overflow="fold")
    for r in rows:
        t.add_row(r["name"], r["state"], r.get("position") or "-",
                  "-" if r.get("lag_bytes") is None else str(r["lag_bytes"]),
                  str(r.get("rows_total", 0)), str(r.get("rows_per_s", 0)),
                  f"[{r['error_code']}] {r['error']}" if r.get("error") else "-")
    out.print(t)


changelog_app = typer.Typer(no_args_is_help=True,
                            help="Check and maintain a pipeline's changelog sinks.")
app.add_typer(changelog_app, name="changelog")


def _changelog_sinks(pipeline: Path, sink: Optional[int]):
    from mysqlcdc.config.loader import load_pipeline
    from mysqlcdc.config.models import ChangelogSinkConfig
    from mysqlcdc.errors import ConfigError
    from mysqlcdc.sinks.changelog import from_sink_config

    cfg = load_pipeline(pipeline)
    found = [(i, from_sink_config(s, cfg.name, i)) for i, s in enumerate(cfg.sinks)
             if isinstance(s, ChangelogSinkConfig) and (sink is None or sink == i)]
    if not found:
        raise ConfigError(f"{pipeline} has no changelog sink"
                          + (f" at index {sink}" if sink is not None else ""))
    return found


_SINK_OPTION = typer.Option(None, "--sink", help="Only the changelog sink at this index.")


@changelog_app.command("check")
def changelog_check(pipeline: Path = typer.Argument(..., help="Pipeline YAML file."),
                    sink: Optional[int] = _SINK_OPTION) -> None:
    """Committed files and changes, leftover files of killed batches, and what a plain
    Parquet reader of the folder would see. Exits 1 when a plain reader is not exact."""
    from mysqlcdc.sinks.changelog.maintenance import check

    exact = True
    try:
        for index, settings in _changelog_sinks(pipeline, sink):
            result = check(settings)
            exact = exact and result.exact
            out.print(f"changelog {index}: {result.line()}", highlight=False, soft_wrap=True)
    except MysqlcdcError as err:
        _fail(err)
    if not exact:
        raise typer.Exit(1)


@changelog_app.command("compact")
def changelog_compact(pipeline: Path = typer.Argument(..., help="Pipeline YAML file."),
                      sink: Optional[int] = _SINK_OPTION) -> None:
    """Delta: expire changes past `retention`, merge small files, vacuum replaced ones."""
    from mysqlcdc.sinks.changelog.maintenance import maintain_delta

    try:
        for index, settings in _changelog_sinks(pipeline, sink):
            if settings.format != "delta":
                out.print(f"changelog {index}: parquet cannot be compacted safely (Spark's "
                          "metadata log lists every file); use format: delta", highlight=False)
                continue
            out.print(f"changelog {index}: {maintain_delta(settings).line()}", highlight=False)
    except MysqlcdcError as err:
        _fail(err)


@changelog_app.command("vacuum")
def changelog_vacuum(pipeline: Path = typer.Argument(..., help="Pipeline YAML file."),
                     sink: Optional[int] = _SINK_OPTION) -> None:
    """Delta: delete files no version within `vacuum_after` needs. Parquet: delete the
    leftover files of killed batches (safe while the pipeline runs)."""
    from mysqlcdc.sinks.changelog.maintenance import maintain_delta, remove_orphans

    try:
        for index, settings in _changelog_sinks(pipeline, sink):
            if settings.format == "delta":
                done = maintain_delta(settings, compact=False)
                line = f"vacuumed {done.vacuumed} file(s)"
                if done.deleted_rows:
                    line = f"expired {done.deleted_rows} change(s), {line}"
            else:
                line = (f"removed {len(remove_orphans(settings.path, settled_only=True))} "
                        "file(s) of killed batches")
            out.print(f"changelog {index}: {line}", highlight=False)
    except MysqlcdcError as err:
        _fail(err)


schema_app = typer.Typer(no_args_is_help=True,
                         help="Inspect and repair a pipeline's schema history.")
app.add_typer(schema_app, name="schema")


@schema_app.command("history")
def schema_history(
    pipeline: Path = typer.Argument(..., help="Pipeline YAML file."),
    table: Optional[str] = typer.Argument(None, help="DB.TABLE; all tables if omitted."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per line instead."),
) -> None:
    """Show a table's versions and the positions where they changed."""
    import json

    from mysqlcdc.config.loader import load_pipeline
    from mysqlcdc.pipeline.schema_admin import table_timeline

    try:
        rows = table_timeline(load_pipeline(pipeline), table)
    except MysqlcdcError as err:
        _fail(err)
    if as_json:
        for r in rows:
            sys.stdout.write(json.dumps(r, ensure_ascii=False) + "\n")
        return
    t = Table(title=f"schema history{' of ' + table if table else ''}")
    for name in ("position", "table", "what", "columns", "ddl / reason"):
        t.add_column(name, overflow="fold")
    for r in rows:
        if r["what"] == "quarantine":
            state = f"resolved: {r['resolved']}" if r["resolved"] else "OPEN"
            detail = f"{state}; {r['reason']}" + (f"; DDL: {r['ddl']}" if r["ddl"] else "")
            cols = ""
        else:
            detail = r["ddl"] or ""
            cols = "(none)" if r["names"] is None else ", ".join(
                f"{n} {c}" for n, c in zip(r["names"], r["columns"]))
        t.add_row(r["position"], r["table"], r["what"], cols, detail)
    out.print(t)


@schema_app.command("resolve")
def schema_resolve(
    pipeline: Path = typer.Argument(..., help="Pipeline YAML file."),
    table: str = typer.Argument(..., help="The quarantined DB.TABLE."),
    reload: bool = typer.Option(False, "--reload", help="Use the server's current definition "
                                "of the table from the quarantine position on, and re-read the "
                                "rows held back since."),
    skip: bool = typer.Option(False, "--skip", help="Drop the table's held-back rows and stop "
                              "capturing it."),
) -> None:
    """Release a quarantined table: --reload its definition, or --skip it."""
    from mysqlcdc.config.loader import load_pipeline
    from mysqlcdc.errors import ConfigError
    from mysqlcdc.pipeline.schema_admin import resolve_table

    try:
        if reload == skip:
            raise ConfigError("choose exactly one of --reload and --skip")
        for line in resolve_table(load_pipeline(pipeline), table, "reload" if reload else "skip"):
            out.print(line, highlight=False)
    except MysqlcdcError as err:
        _fail(err)


@app.command()
def version() -> None:
    """Print the mysqlcdc version."""
    from importlib.metadata import version as v

    out.print(v("mysqlcdc"))


if __name__ == "__main__":  # pragma: no cover
    app()
