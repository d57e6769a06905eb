"""The REST API of ``mysqlcdc serve`` (FastAPI; OpenAPI at ``/docs``), ``/metrics`` in
Prometheus' text format, ``/healthz`` and the dashboard at ``/``.

Errors are JSON ``{"code", "message", "hint"}`` with the HTTP status their kind calls
for: 401 a missing or wrong API token, 404 an unknown pipeline, 409 a name or a server
id in use, a pipeline in the wrong state, a seek not confirmed or a server that is not
the pipeline's source, 422 a config that does not validate (its problems as the same
``FILE:LINE: field: message`` lines the CLI prints), 503 a source that cannot be reached.

With a token (``mysqlcdc serve`` requires one when it listens beyond 127.0.0.1) every
path but ``/healthz`` needs ``Authorization: Bearer <token>``; a browser gets a form at
``/`` that keeps a digest of the token in an HttpOnly cookie. The token is never logged
or echoed.
"""

from __future__ import annotations

import hmac
import threading
from typing import Literal, Optional

from fastapi import Request
from pydantic import BaseModel, Field

from mysqlcdc.api.service import PipelineConflictError, PipelineService, UnknownPipelineError
from mysqlcdc.errors import (ConfigError, GtidPositionError, MysqlcdcError, SeekError,
                             ServerIdInUseError, SourceChangedError, UnauthorizedError)

__all__ = ["create_app", "Poller", "SeekBody", "SourceBody", "SnapshotBody"]

_COOKIE = "mysqlcdc_token"
_OPEN = ("/healthz", "/login")


class SeekBody(BaseModel):
    """Where a stopped pipeline continues, and the direction the caller expects."""

    to: str = Field(description="FILE:POS, a GTID set (0-1-100, uuid:1-5), a timestamp "
                    "(2026-11-01T12:00:00Z), earliest or latest.")
    confirm: Optional[Literal["skip", "replay"]] = Field(
        None, description="`skip` for a seek forward (changes in between are never "
        "delivered), `replay` for one backward (they are delivered again). A seek whose "
        "direction is not confirmed is refused with SEEK_NOT_CONFIRMED and changes nothing.")


class SnapshotBody(BaseModel):
    """Tables a pipeline snapshots again while it streams (an on-demand backfill)."""

    tables: list[str] = Field(min_length=1, description="DB.TABLE names the pipeline "
                              "captures, one or more.")
    where: Optional[str] = Field(None, description="Only the rows this SQL condition selects, "
                                 "such as `id BETWEEN 1 AND 1000`.")


class SourceBody(BaseModel):
    """The server a stopped pipeline reads from next (a failover)."""

    host: str = Field(min_length=1)
    port: int = Field(3306, ge=1, le=65535)


def _status(err: MysqlcdcError) -> int:
    if isinstance(err, UnauthorizedError):
        return 401
    if isinstance(err, UnknownPipelineError):
        return 404
    if isinstance(err, (PipelineConflictError, ServerIdInUseError, SeekError,
                        SourceChangedError, GtidPositionError)):
        return 409
    if isinstance(err, ConfigError):
        return 422
    return 503 if err.transient else 400


def _cookie_value(token: str) -> str:
    """What the dashboard's cookie holds: a digest of the token, never the token."""
    import hashlib

    return hashlib.sha256(f"mysqlcdc-dashboard:{token}".encode()).hexdigest()


def _authorized(request, token: str) -> bool:
    header = request.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        return hmac.compare_digest(header[7:].strip().encode(), token.encode())
    cookie = request.cookies.get(_COOKIE, "")
    return bool(cookie) and hmac.compare_digest(cookie.encode(), _cookie_value(token).encode())


def create_app(service: PipelineService, token: str | None = None):
    from fastapi import Body, FastAPI
    from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse

    from mysqlcdc.api.dashboard import render_dashboard, render_login
    from mysqlcdc.api.metrics import render_metrics

    app = FastAPI(title="mysqlcdc", description="Change data capture pipelines of one "
                  "mysqlcdc serve instance.", version="1")

    def _error(err: MysqlcdcError) -> JSONResponse:
        body = {"code": err.code, "message": err.message, "hint": err.hint or None}
        problems = getattr(err, "problems", None)
        if problems:
            body["problems"] = [str(p) for p in problems]
        return JSONResponse(body, status_code=_status(err))

    @app.middleware("http")
    async def _token(request: Request, call_next):
        if token is None or request.url.path in _OPEN or _authorized(request, token):
            return await call_next(request)
        if request.url.path == "/" and request.method == "GET":
            return HTMLResponse(render_login(), status_code=401)
        return _error(UnauthorizedError(f"{request.method} {request.url.path} needs this "
                                        "instance's API token"))

    @app.exception_handler(MysqlcdcError)
    async def _named(request: Request, err: MysqlcdcError):  # noqa: ARG001
        return _error(err)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def dashboard():
        return HTMLResponse(render_dashboard(service))

    @app.post("/login", include_in_schema=False)
    async def login(request: Request):
        from urllib.parse import parse_qs

        given = (parse_qs((await request.body()).decode()).get("token") or [""])[0]
        if token is None or not hmac.compare_digest(given.encode(), token.encode()):
            return HTMLResponse(render_login(failed=True), status_code=401)
        response = RedirectResponse("./", status_code=303)
        response.set_cookie(_COOKIE, _cookie_value(token), httponly=True, samesite="strict")
        return response

    @app.get("/healthz", summary="Liveness")
    def healthz() -> dict:
        return {"ok": True, "pipelines": len(service.pipelines)}

    @app.get("/pipelines", summary="Every pipeline with its state, position, lag and rates")
    def list_pipelines() -> list[dict]:
        with service.reading():
            return [p.summary() for p in service.pipelines.values()]

    @app.get("/pipelines/{name}", summary="One pipeline")
    def get_pipeline(name: str) -> dict:
        with service.reading():
            return service.get(name).summary()

    @app.post("/pipelines", status_code=201,
              summary="Create a pipeline from its YAML (or JSON) text and start it "
                      "(?start=false: create it stopped; it stays so until started)")
    def create_pipeline(body: str = Body(..., media_type="application/yaml"),
                        start: bool = True) -> dict:
        return service.create(body, start=start).summary()

    @app.post("/pipelines/{name}/start", summary="Start a stopped or failed pipeline")
    def start_pipeline(name: str) -> dict:
        return service.start(name).summary()

    @app.post("/pipelines/{name}/stop",
              summary="Stop a pipeline (its checkpoint is kept); it stays stopped when the "
                      "service starts again, until started")
    def stop_pipeline(name: str) -> dict:
        return service.stop(name, hold=True).summary()

    @app.post("/pipelines/{name}/pause",
              summary="Pause: plan no new micro-batch (the queries stay up); kept over restarts")
    def pause_pipeline(name: str) -> dict:
        return service.pause(name).summary()

    @app.post("/pipelines/{name}/resume", summary="Resume a paused pipeline")
    def resume_pipeline(name: str) -> dict:
        return service.resume(name).summary()

    @app.post("/pipelines/{name}/seek",
              summary="Move a stopped pipeline to a FILE:POS, GTID set or timestamp "
                      "(confirm skip or replay); takes effect at its next start")
    def seek_pipeline(name: str, body: SeekBody) -> dict:
        return service.seek(name, body.to, body.confirm)

    @app.post("/pipelines/{name}/snapshot", status_code=202,
              summary="Backfill: snapshot tables (optionally some rows) while the pipeline "
                      "streams; a row in its signal table, read in binlog order")
    def snapshot_pipeline(name: str, body: SnapshotBody) -> dict:
        return service.request_snapshot(name, body.tables, body.where)

    @app.post("/pipelines/{name}/source",
              summary="Point a stopped pipeline at another server of its replication "
                      "topology (failover by GTID set at its next start)")
    def set_source(name: str, body: SourceBody) -> dict:
        return service.set_source(name, body.host, body.port).summary()

    @app.get("/pipelines/{name}/schema", summary="The schema history (versions, DDL, "
             "quarantines) of a pipeline, optionally of one table (?table=db.t)")
    def schema_history(name: str, table: Optional[str] = None) -> list[dict]:
        return service.schema_history(service.get(name), table)

    @app.get("/pipelines/{name}/quarantines", summary="Tables the schema history quarantined")
    def quarantines(name: str) -> list[dict]:
        return service.quarantines(service.get(name))

    @app.get("/pipelines/{name}/tables",
             summary="Rows and events read per table and op, with per-second rates")
    def tables(name: str) -> list[dict]:
        state = service.get(name)
        rates = state.table_rates
        return [{"db": db, "table": table, "op": op, "rows": rows, "events": events,
                 "rows_per_s": round(rates.get((db, table, op), (0.0, 0.0))[0], 2),
                 "events_per_s": round(rates.get((db, table, op), (0.0, 0.0))[1], 2)}
                for (db, table, op), (rows, events) in sorted(service.table_counts(state).items())]

    @app.delete("/pipelines/{name}", status_code=204,
                summary="Stop a pipeline and remove its config file (its checkpoint is kept)")
    def delete_pipeline(name: str) -> None:
        service.delete(name)

    @app.get("/metrics", response_class=PlainTextResponse, summary="Prometheus metrics")
    def metrics():
        text, content_type = render_metrics(service)
        return PlainTextResponse(text, media_type=content_type)

    return app


class Poller(threading.Thread):
    """Folds query progress into the service every ``interval_s``; lag every ``lag_s``."""

    def __init__(self, service: PipelineService, interval_s: float = 1.0, lag_s: float = 5.0):
        super().__init__(name="mysqlcdc-poller", daemon=True)
        self.service, self.interval_s, self.lag_s = service, interval_s, lag_s
        self.stopped = threading.Event()

    def run(self) -> None:
        import logging
        import time

        last_lag = 0.0
        while not self.stopped.wait(self.interval_s):
            try:
                self.service.poll()
                if time.monotonic() - last_lag >= self.lag_s:
                    self.service.refresh_lag()
                    last_lag = time.monotonic()
            except Exception:  # noqa: BLE001 - observation must never take the service down
                logging.getLogger(__name__).exception("polling pipelines")
