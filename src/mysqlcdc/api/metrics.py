"""Prometheus metrics of a ``mysqlcdc serve`` instance, rendered from the service's state
at scrape time (a collector, so a deleted pipeline's series disappear with it)."""

from __future__ import annotations

from mysqlcdc.api.service import PipelineService

__all__ = ["render_metrics"]

_STATES = ("stopped", "running", "failed")


def render_metrics(service: PipelineService) -> tuple[str, str]:
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    class _Collector:
        def collect(self):
            up = GaugeMetricFamily("mysqlcdc_pipeline_state",
                                   "1 for the pipeline's current state", labels=["pipeline", "state"])
            rows = CounterMetricFamily("mysqlcdc_rows", "Row changes delivered since start",
                                       labels=["pipeline"])
            batches = CounterMetricFamily("mysqlcdc_batches", "Micro-batches completed since start",
                                          labels=["pipeline"])
            rate = GaugeMetricFamily("mysqlcdc_rows_per_second",
                                     "Rows per second of the last batch with rows", labels=["pipeline"])
            duration = GaugeMetricFamily("mysqlcdc_batch_duration_seconds",
                                         "Duration of the last micro-batch", labels=["pipeline"])
            lag = GaugeMetricFamily("mysqlcdc_lag_bytes",
                                    "Binlog bytes between the pipeline's position and the "
                                    "server's end", labels=["pipeline"])
            for p in list(service.pipelines.values()):
                for s in _STATES:
                    up.add_metric([p.name, s], 1.0 if p.state == s else 0.0)
                rows.add_metric([p.name], p.rows_total)
                batches.add_metric([p.name], p.batches_total)
                rate.add_metric([p.name], p.rows_per_s)
                if p.last_batch_s is not None:
                    duration.add_metric([p.name], p.last_batch_s)
                if p.lag_bytes is not None:
                    lag.add_metric([p.name], p.lag_bytes)
            yield from (up, rows, batches, rate, duration, lag)

    registry = CollectorRegistry()
    registry.register(_Collector())
    return generate_latest(registry).decode(), CONTENT_TYPE_LATEST
