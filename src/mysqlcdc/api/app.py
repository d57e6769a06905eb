"""The REST API of ``mysqlcdc serve`` (FastAPI; OpenAPI at ``/docs``), ``/metrics`` in
Prometheus' text format and ``/healthz``.

Errors are JSON ``{"code", "message", "hint"}`` with the HTTP status their kind calls
for: 404 an unknown pipeline, 409 a name or a server id in use, 422 a config that does not validate
(its problems as the same ``FILE:LINE: field: message`` lines the CLI prints), 503 a
source that cannot be reached.
"""

from __future__ import annotations

import threading

from mysqlcdc.api.service import PipelineConflictError, PipelineService, UnknownPipelineError
from mysqlcdc.errors import ConfigError, MysqlcdcError, ServerIdInUseError

__all__ = ["create_app", "Poller"]


def _status(err: MysqlcdcError) -> int:
    if isinstance(err, UnknownPipelineError):
        return 404
    if isinstance(err, (PipelineConflictError, ServerIdInUseError)):
        return 409
    if isinstance(err, ConfigError):
        return 422
    return 503 if err.transient else 400


def create_app(service: PipelineService):
    from fastapi import Body, FastAPI, Request
    from fastapi.responses import JSONResponse, PlainTextResponse

    from mysqlcdc.api.metrics import render_metrics

    app = FastAPI(title="mysqlcdc", description="Change data capture pipelines of one "
                  "mysqlcdc serve instance.", version="1")

    @app.exception_handler(MysqlcdcError)
    async def _named(request: Request, err: MysqlcdcError):  # noqa: ARG001
        body = {"code": err.code, "message": err.message, "hint": err.hint or None}
        problems = getattr(err, "problems", None)
        if problems:
            body["problems"] = [str(p) for p in problems]
        return JSONResponse(body, status_code=_status(err))

    @app.get("/healthz", summary="Liveness")
    def healthz() -> dict:
        return {"ok": True, "pipelines": len(service.pipelines)}

    @app.get("/pipelines", summary="Every pipeline with its state, position, lag and rates")
    def list_pipelines() -> list[dict]:
        return [p.summary() for p in service.pipelines.values()]

    @app.get("/pipelines/{name}", summary="One pipeline")
    def get_pipeline(name: str) -> dict:
        return service.get(name).summary()

    @app.post("/pipelines", status_code=201,
              summary="Create a pipeline from its YAML (or JSON) text and start it")
    def create_pipeline(body: str = Body(..., media_type="application/yaml"),
                        start: bool = True) -> dict:
        return service.create(body, start=start).summary()

    @app.post("/pipelines/{name}/start", summary="Start a stopped or failed pipeline")
    def start_pipeline(name: str) -> dict:
        return service.start(name).summary()

    @app.post("/pipelines/{name}/stop", summary="Stop a pipeline (its checkpoint is kept)")
    def stop_pipeline(name: str) -> dict:
        return service.stop(name).summary()

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
