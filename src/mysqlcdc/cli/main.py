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
from mysqlcdc.process import exit_now

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  rich_markup_mode="markdown",
                  help="Change data capture for MySQL and MariaDB on Apache Spark.")
console = Console(stderr=True)
out = Console()
_VERBOSE = {"on": False}


@app.callback()
def _options(verbose: bool = typer.Option(False, "--verbose", "-v",
                                          help="Show tracebacks and INFO logs.")) -> None:
    """Change data capture for MySQL and MariaDB on Apache Spark."""
    _VERBOSE["on"] = _VERBOSE["on"] or verbose


def _fail(err: MysqlcdcError) -> None:
    """One line (and the hint) for a named error; the traceback only with --verbose."""
    if _VERBOSE["on"]:
        console.print_exception()
    console.print(f"[bold red]error[/] [{err.code}] {err.message}", highlight=False,
                  soft_wrap=True)
    if err.hint:
        console.print(f"  [yellow]hint:[/] {err.hint}", highlight=False, soft_wrap=True)
    detail = getattr(err, "detail", "")
    if detail:     # user code's traceback (a transform, a plugin)
        console.print(detail.rstrip("\n"), highlight=False, markup=False, style="dim")
    raise typer.Exit(2)


def _log_setup(verbose: bool) -> None:
    """Warnings as ``WARNING: what happened``; ``--verbose`` adds INFO and the logger."""
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s" if verbose
                        else "%(levelname)s: %(message)s")


def main() -> None:
    """The ``mysqlcdc`` command. Whatever goes wrong ends in one line and a non-zero exit
    code (2: a named error, 1: an unexpected one, 130: interrupted); ``--verbose`` adds
    the traceback."""
    import click

    try:
        code = app(standalone_mode=False)
    except click.exceptions.Abort:
        console.print("stopped")
        sys.exit(130)
    except click.exceptions.Exit as done:
        sys.exit(done.exit_code)
    except MysqlcdcError as err:
        try:
            _fail(err)
        except click.exceptions.Exit as done:
            sys.exit(done.exit_code)
    except KeyboardInterrupt:
        console.print("stopped")
        sys.exit(130)
    except Exception as err:   # noqa: BLE001 - the last resort: one line, not a stack
        if hasattr(err, "show") and hasattr(err, "exit_code"):   # a usage error
            err.show()
            sys.exit(err.exit_code)
        if _VERBOSE["on"]:
            console.print_exception()
        text = " ".join(str(err).split())[:300]
        console.print(f"[bold red]error[/] [INTERNAL_ERROR] {type(err).__name__}: {text}",
                      highlight=False, soft_wrap=True)
        console.print("  [yellow]hint:[/] Run again with --verbose for the traceback, and "
                      "report it if it is a mysqlcdc bug.", highlight=False, soft_wrap=True)
        sys.exit(1)
    exit_now(code if isinstance(code, int) else 0)


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

    _VERBOSE["on"] = _VERBOSE["on"] or verbose
    verbose = _VERBOSE["on"]
    _log_setup(verbose)
    try:
        cfg = load_pipeline(pipeline)
        with console.status(f"pipeline [bold]{cfg.name}[/]: starting Spark ...") as status:
            finished = _SnapshotLines()

            def progress(p: dict) -> None:
                source = p.get("source") or {}
                note = ""
                if source.get("outage_s") is not None:
                    note = f" · [yellow]source unreachable for {source['outage_s']:.0f} s, retrying[/]"
                elif source.get("reconnects"):
                    note = f" · {source['reconnects']} reconnect(s)"
                snap = p.get("snapshot") or {}
                finished.report(snap)
                status.update(
                    f"pipeline [bold]{cfg.name}[/]: batch {p.get('batchId', '-')} "
                    f"rows {p.get('numInputRows', 0)} "
                    f"({p.get('processedRowsPerSecond', 0) or 0:.0f} rows/s){note}"
                    f"{snapshot_note(snap)}"
                )
            ends = run_pipeline(cfg, until_idle=until_idle, on_progress=progress,
                                resume_from_sink=resume_from_sink, quiet=not verbose)
        if until_idle or cfg.source.snapshot_mode() == "initial_only":
            console.print(caught_up(cfg.name, ends), soft_wrap=True)
    except KeyboardInterrupt:
        _stopped()
    except Exception as err:
        from mysqlcdc.pipeline.runner import stop_requested

        if stop_requested():     # the JVM (sent the same SIGTERM) went first: still a stop
            _stopped()
        if isinstance(err, MysqlcdcError):
            _fail(err)
        raise


def _stopped() -> None:
    console.print("stopped (the checkpoint keeps the position; run again to resume)")
    raise typer.Exit(130)


def caught_up(name: str, ends: list[dict]) -> str:
    """The line a run with ``--until-idle`` ends with: where the server's binlog was read
    to (the earliest end among the sinks' queries, which all read to the server's
    position when they found it)."""
    if not ends:
        return f"pipeline {name}: caught up with the server (nothing new to read)"
    from mysqlcdc.types import BinlogPosition

    first = min(ends, key=lambda e: BinlogPosition.of(e["file"], int(e["pos"])))
    where = f"{first['file']}:{first['pos']}"
    if first.get("gtid"):
        where += f" (GTID set {first['gtid']})"
    return f"pipeline {name}: caught up with the server at {where}"


def snapshot_note(snap: dict) -> str:
    """`` · snapshot shop.orders 12/40 chunks, ETA 1m05s`` (empty when none runs)."""
    if not snap or snap.get("phase") in (None, "idle") or not snap.get("table"):
        return ""
    from mysqlcdc.protocol.retry import format_duration

    total = snap.get("chunks_estimate")
    eta = snap.get("eta_s")
    left = snap.get("tables_left", 0)
    return (f" · {snap['phase']} {snap['table']} {snap.get('chunks_done', 0)}"
            f"{'/~' + str(total) if total else ''} chunks"
            f"{', ETA ' + format_duration(eta) if eta is not None else ''}"
            f"{f', {left} more table(s)' if left else ''}")


class _SnapshotLines:
    """A permanent line each time a snapshot finishes a table, and when it is done (the
    status line is transient)."""

    def __init__(self) -> None:
        self.done: int | None = None
        self.phase: str | None = None

    def report(self, snap: dict) -> None:
        if not snap:
            return
        done, phase = int(snap.get("tables_done") or 0), snap.get("phase")
        if self.phase not in (None, "idle") and phase == "idle":
            console.print(f"[green]•[/] {self.phase} done ({done} table(s) in all)",
                          highlight=False)
        elif self.done is not None and done > self.done:
            console.print(f"[green]•[/] {phase}: {done} table(s) read", highlight=False)
        self.done, self.phase = done, phase


@app.command()
def snapshot(
    pipeline: Path = typer.Argument(..., help="Pipeline YAML file."),
    tables: list[str] = typer.Argument(..., help="DB.TABLE to snapshot (one or more)."),
    where: Optional[str] = typer.Option(None, "--where",
                                        help="Only the rows this SQL condition selects, "
                                        "such as \"id BETWEEN 1 AND 1000\"."),
    user: Optional[str] = typer.Option(None, "--user", help="Write the request as this user "
                                       "(default: the pipeline's source user)."),
    password_env: Optional[str] = typer.Option(None, "--password-env",
                                               help="Environment variable with --user's password."),
) -> None:
    """Ask a pipeline (running or not) to snapshot tables while it streams.

    The request is a row in the pipeline's signal table, which every sink's query reads
    from the binlog."""
    import os

    from mysqlcdc.config.loader import load_pipeline
    from mysqlcdc.errors import ConfigError
    from mysqlcdc.pipeline.snapshot_admin import request_snapshot

    try:
        cfg = load_pipeline(pipeline)
        password = None
        if password_env is not None:
            if password_env not in os.environ:
                raise ConfigError(f"environment variable {password_env} is not set")
            password = os.environ[password_env]
        req = request_snapshot(cfg, tables, where, user=user, password=password)
    except MysqlcdcError as err:
        _fail(err)
    what = ", ".join(req.tables) + (f" WHERE {req.where}" if req.where else "")
    out.print(f"snapshot of {what} requested (signal {req.id} in {req.signal_table}); "
              f"pipeline {cfg.name} reads it when its stream reaches the signal: watch "
              "`mysqlcdc run`'s status line or `mysqlcdc status`", highlight=False,
              soft_wrap=True)


@app.command()
def demo(
    mysql: Optional[str] = typer.Option(None, "--mysql",
                                        help="Capture from this server instead: mysql://user:pass@host:port"),
    out_dir: Path = typer.Option(Path("mysqlcdc-demo"), "--out", help="Where the changelog goes."),
    mirror: bool = typer.Option(False, "--mirror",
                                help="Also keep a Delta Lake mirror of the tables and compare "
                                "it with the source at the end."),
) -> None:
    """Start a throwaway MariaDB, apply changes, capture them with Spark, print them."""
    from mysqlcdc.pipeline.demo import parse_mysql_url, run_demo

    _log_setup(_VERBOSE["on"])
    try:
        server = parse_mysql_url(mysql) if mysql else None
        with console.status("mysqlcdc demo") as status:
            def step(text: str) -> None:
                console.print(f"[green]•[/] {text}")
                status.update(text)
            result = run_demo(out_dir.resolve(), server, step, mirror=mirror)
    except MysqlcdcError as err:
        _fail(err)
    rows = result.changes
    out.print(_changes_table(rows))
    out.print(f"{len(rows)} changes captured into [bold]{out_dir}/changelog[/] "
              "(Parquet, partitioned by db and table).")
    out.print(f"Query it: spark.read.parquet('{out_dir}/changelog').orderBy('seq').show()")
    if mirror:
        _print_mirror(result, out_dir)


def _print_mirror(result, out_dir: Path) -> None:
    for table, rows in result.mirror.items():
        t = Table(title=f"Delta mirror {out_dir}/mirror/mysqlcdc_demo/{table}")
        for name in result.columns.get(table, []):
            t.add_column(name, overflow="fold")
        for r in rows:
            t.add_row(*(str(v) for v in r))
        out.print(t)
        verdict = "[green]equal to[/]" if result.mirror_equal(table) else "[red]DIFFERENT from[/]"
        out.print(f"{table}: {len(rows)} rows, {verdict} SELECT * of the source")
    out.print(f"The mirror reflects the source at binlog position {result.mirror_position}. "
              f"Read it: DeltaTable('{out_dir}/mirror/mysqlcdc_demo/reservation')"
              f".to_pandas(), or mysqlcdc.sinks.mirror.read_consistent('{out_dir}/mirror')")
    if not all(result.mirror_equal(t) for t in result.mirror):
        raise typer.Exit(1)


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
    from mysqlcdc.errors import ConfigError

    try:
        missing = [str(f) for f in files if not f.is_file()]
        if missing:
            raise ConfigError(f"no such binlog file: {', '.join(missing)}",
                              hint="Name binlog files that exist, in order.")
        if changes:
            _numbered(files)
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


def _numbered(files: list[Path]) -> None:
    """Row changes carry a seq made of their file's number: the files must be named as
    the server names its binlogs (``mysql-bin.000042``)."""
    from mysqlcdc.errors import ConfigError
    from mysqlcdc.types import binlog_file_number

    unnamed = []
    for f in files:
        try:
            binlog_file_number(f.name)
        except ValueError:
            unnamed.append(f.name)
    if unnamed:
        raise ConfigError(
            f"decode --changes needs binlog files named as the server names them "
            f"(NAME.000042), not {', '.join(unnamed)}: each change's seq is made of its "
            f"file's number",
            hint=f"Link the file under its binlog name (ln -s {unnamed[0]} mysql-bin.000042), "
                 f"or decode its events without --changes.")


mirror_app = typer.Typer(no_args_is_help=True, help="Inspect a pipeline's mirror targets.")
app.add_typer(mirror_app, name="mirror")


@mirror_app.command("position")
def mirror_position(
    pipeline: Path = typer.Argument(..., help="Pipeline YAML file."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per mirror sink."),
) -> None:
    """Print the binlog position each mirror target's last commit reflects.

    Also for a changelog_table target; for a Delta mirror, each table's last commit too."""
    import json

    try:
        cfg, rows = _mirror_positions(pipeline)
    except MysqlcdcError as err:
        _fail(err)
    if as_json:
        for r in rows:
            sys.stdout.write(json.dumps(r, ensure_ascii=False) + "\n")
        return
    t = Table(title=f"mirror position of {cfg.name}")
    for name in ("sink", "target", "table", "batch", "position", "seq", "stopped tables"):
        t.add_column(name, overflow="fold")
    for r in rows:
        stopped = "; ".join(f"{s['table']} ({s['code']})" for s in r["stopped"]) or "-"
        t.add_row(str(r["sink"]), f"{r['target']} {r['at']}", "every table",
                  str(r["batch_id"]), r["position"] or "-", r["seq"] or "-", stopped)
        for tbl in r.get("tables", []):
            t.add_row("", "", f"{tbl['table']} (version {tbl['version']})",
                      str(tbl["batch_id"]), tbl["position"] or "-", "", "")
    out.print(t)


def _mirror_positions(pipeline: Path):
    from dataclasses import replace

    from mysqlcdc.config.loader import load_pipeline
    from mysqlcdc.config.models import ChangelogTableSinkConfig, MirrorSinkConfig
    from mysqlcdc.pipeline.runner import schema_history_dir, sink_checkpoint
    from mysqlcdc.sinks.changelog_table import from_sink_config as table_settings
    from mysqlcdc.sinks.mirror import from_sink_config, read_position
    from mysqlcdc.sinks.mirror.writer import ledger_key

    cfg = load_pipeline(pipeline)
    rows = []
    for index, sink in enumerate(cfg.sinks):
        settings = None
        if isinstance(sink, MirrorSinkConfig):
            settings = from_sink_config(sink, cfg.name, schema_history_dir(cfg, index), index)
        elif isinstance(sink, ChangelogTableSinkConfig):
            t = table_settings(sink, cfg.name, schema_history_dir(cfg, index))
            settings = replace(t.target, pipeline=t.ledger_name)
        if settings is not None:
            settings = replace(settings, pipeline=ledger_key(settings.pipeline,
                                                             sink_checkpoint(cfg, index)))
            at = settings.path if settings.target == "delta" else \
                f"{settings.host}:{settings.port}"
            rows.append({"sink": index, "type": sink.type, "target": settings.target, "at": at,
                         **read_position(settings)})
    return cfg, rows


@app.command()
def serve(
    config_dir: Path = typer.Option(Path("pipelines"), "--config-dir",
                                    help="Folder of pipeline YAML files; API-created ones go here."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address the API listens on."),
    port: int = typer.Option(8080, "--port", help="Port the API listens on."),
    master: str = typer.Option("local[*]", "--master", help="Spark master of the shared session."),
    token_env: str = typer.Option("MYSQLCDC_API_TOKEN", "--token-env",
                                  help="Environment variable holding the API's bearer token "
                                  "(required when --host is not a loopback address)."),
    verbose: bool = typer.Option(False, "--verbose", "-v"),
) -> None:
    """Run every pipeline of a folder in one process, with a REST API and a dashboard.

    Serves the REST API (/docs), /metrics, /healthz and the dashboard (/) until
    interrupted."""
    import os
    import socket

    from mysqlcdc.errors import ConfigError

    _VERBOSE["on"] = _VERBOSE["on"] or verbose
    _log_setup(_VERBOSE["on"])
    try:
        token = os.environ.get(token_env) or None
        if token is None and not _loopback(host):
            raise ConfigError(f"serve would listen on {host}, beyond this machine, without an "
                              f"API token: set {token_env}",
                              hint=f"export {token_env}=$(openssl rand -hex 24), and send it as "
                              "'Authorization: Bearer <token>'; or listen on 127.0.0.1.")
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((host, port))
            except OSError as err:
                raise ConfigError(f"cannot listen on {host}:{port}: {err.strerror}",
                                  hint="Pick a free port with --port, or stop what uses it.") from None
        _serve(config_dir, host, port, master, token)
    except MysqlcdcError as err:
        _fail(err)
    except KeyboardInterrupt:
        console.print("stopped")
        raise typer.Exit(130)


def _loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _serve(config_dir: Path, host: str, port: int, master: str, token: str | None) -> None:
    import os
    import signal

    import uvicorn

    from mysqlcdc import stats
    from mysqlcdc.api import PipelineService
    from mysqlcdc.api.app import Poller, create_app
    from mysqlcdc.pipeline.runner import interrupt
    from mysqlcdc.spark import build_session

    # executors' sinks (Kafka) count their retries in files the metrics add up
    os.environ.setdefault(stats.ENV, str(config_dir.resolve() / ".mysqlcdc-stats"))
    service = PipelineService(config_dir, lambda: build_session(master, "mysqlcdc-serve", {}))
    held, failed = service.start_folder()
    for name in held:
        console.print(f"pipeline {name} stays stopped (stopped through the API; "
                      f"POST /pipelines/{name}/start starts it)", highlight=False)
    for name, err in failed.items():
        console.print(f"[bold red]pipeline {name} failed[/] [{err.code}] {err.message}",
                      highlight=False)
    poller = Poller(service)
    poller.start()
    console.print(f"serving {len(service.pipelines)} pipeline(s) on http://{host}:{port} "
                  f"(API docs at /docs)", highlight=False)
    # uvicorn shuts down on SIGINT or SIGTERM, raises the signal again under the handler it
    # found, and swallows a KeyboardInterrupt. Under the default SIGTERM handler the process
    # died there, before its pipelines were stopped; both now end as a Ctrl-C of `run` does.
    signals: list[int] = []

    def on_stop(signum, frame) -> None:
        signals.append(signum)
        interrupt(signum, frame)

    for stop_signal in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stop_signal, on_stop)
    try:
        uvicorn.run(create_app(service, token), host=host, port=port, log_level="warning")
    finally:
        poller.stopped.set()
        service.stop_all()
    if signals:
        raise KeyboardInterrupt


@app.command()
def status(
    pipeline: Optional[str] = typer.Argument(None, help="One pipeline; all when omitted."),
    url: str = typer.Option("http://127.0.0.1:8080", "--url", help="The serve instance."),
) -> None:
    """Each pipeline's state, position, lag and rate, from a running `mysqlcdc serve`."""
    import json
    import urllib.error
    import urllib.request

    import os

    target = f"{url.rstrip('/')}/pipelines" + (f"/{pipeline}" if pipeline else "")
    request = urllib.request.Request(target)
    if os.environ.get("MYSQLCDC_API_TOKEN"):
        request.add_header("Authorization", f"Bearer {os.environ['MYSQLCDC_API_TOKEN']}")
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            data = json.loads(resp.read())
    except urllib.error.HTTPError as err:
        body = json.loads(err.read() or b"{}")
        console.print(f"[bold red]error[/] [{body.get('code', err.code)}] "
                      f"{body.get('message', err.reason)}", highlight=False, soft_wrap=True)
        raise typer.Exit(2)
    except (urllib.error.URLError, OSError) as err:
        console.print(f"[bold red]error[/] [SERVE_UNREACHABLE] no mysqlcdc serve at {url}: "
                      f"{getattr(err, 'reason', err)}", highlight=False, soft_wrap=True)
        console.print("  [yellow]hint:[/] Start it with `mysqlcdc serve`, or pass --url.",
                      highlight=False, soft_wrap=True)
        raise typer.Exit(2)
    rows = data if isinstance(data, list) else [data]
    t = Table(title="pipelines")
    for name in ("pipeline", "state", "position", "lag s", "lag bytes", "rows", "rows/s",
                 "snapshot",
                 "error"):
        t.add_column(name, overflow="fold")
    for r in rows:
        t.add_row(r["name"], r["state"], r.get("position") or "-",
                  "-" if r.get("lag_seconds") is None else str(r["lag_seconds"]),
                  "-" if r.get("lag_bytes") is None else str(r["lag_bytes"]),
                  str(r.get("rows_total", 0)), str(r.get("rows_per_s", 0)),
                  snapshot_note(r.get("snapshot") or {}).lstrip(" ·") or "-",
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
    """Committed files and changes, leftover files, what a plain Parquet reader sees.

    Leftover files are those of killed batches. Exits 1 when a plain Parquet reader of
    the folder would not see exactly the committed changes."""
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
    """Delete files no longer needed (safe while the pipeline runs).

    Delta: the files no version within `vacuum_after` needs. Parquet: the leftover files
    of killed batches and tasks."""
    from mysqlcdc.sinks.changelog.maintenance import (maintain_delta, remove_orphans,
                                                      remove_settled_unfinished)

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
                unfinished = remove_settled_unfinished(settings.path)
                if unfinished:
                    line += f" and {unfinished} unfinished file(s) of killed tasks"
            out.print(f"changelog {index}: {line}", highlight=False, soft_wrap=True)
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


@app.command()
def seek(
    pipeline: Path = typer.Argument(..., help="Pipeline YAML file (the pipeline stopped)."),
    to: str = typer.Argument(..., help="FILE:POS, a GTID set, a timestamp "
                             "(2026-11-01T12:00:00Z), earliest or latest."),
    confirm: Optional[str] = typer.Option(None, "--confirm",
                                          help="skip (forward) or replay (backward)."),
) -> None:
    """Move a stopped pipeline: its next start continues at TO."""
    from mysqlcdc.config.loader import load_pipeline
    from mysqlcdc.pipeline.control import seek as do_seek

    try:
        plan = do_seek(load_pipeline(pipeline), to, confirm)
    except MysqlcdcError as err:
        _fail(err)
    for sink in plan.sinks:
        out.print(f"sink {sink['sink']}: {sink['from'] or 'no checkpoint'} -> {plan.to} "
                  f"({sink['direction']})", highlight=False)


@app.command()
def pause(pipeline: Path = typer.Argument(..., help="Pipeline YAML file.")) -> None:
    """Pause a pipeline: it plans no new micro-batch until `mysqlcdc resume`."""
    from mysqlcdc.config.loader import load_pipeline
    from mysqlcdc.pipeline.control import set_paused

    try:
        set_paused(load_pipeline(pipeline), True)
    except MysqlcdcError as err:
        _fail(err)
    out.print("paused")


@app.command()
def resume(pipeline: Path = typer.Argument(..., help="Pipeline YAML file.")) -> None:
    """Resume a paused pipeline."""
    from mysqlcdc.config.loader import load_pipeline
    from mysqlcdc.pipeline.control import set_paused

    try:
        set_paused(load_pipeline(pipeline), False)
    except MysqlcdcError as err:
        _fail(err)
    out.print("resumed")


if __name__ == "__main__":  # pragma: no cover
    main()
