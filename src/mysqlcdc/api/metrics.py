"""Prometheus metrics of a ``mysqlcdc serve`` instance, rendered from the service's state
at scrape time (a collector, so a deleted pipeline's series disappear with it).

Every series carries ``pipeline``; per-table ones ``db``, ``table`` and ``op`` too.
Counters of rows per table count what the read tasks read (a batch replayed after a
crash counts again); ``mysqlcdc_rows_total`` counts Spark's input rows of the first
sink's query since the service started it.
"""

from __future__ import annotations

from mysqlcdc.api.service import BATCH_BUCKETS, PipelineService

__all__ = ["render_metrics", "STATES"]

STATES = ("stopped", "running", "paused", "failed")


def _families():
    from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily,
                                        HistogramMetricFamily)

    p, t = ["pipeline"], ["pipeline", "db", "table", "op"]
    g, c = GaugeMetricFamily, CounterMetricFamily
    return {
        "state": g("mysqlcdc_pipeline_state", "1 for the pipeline's current state",
                   labels=["pipeline", "state"]),
        "rows": c("mysqlcdc_rows", "Row changes delivered since the service started it",
                  labels=p),
        "batches": c("mysqlcdc_batches", "Micro-batches completed since start", labels=p),
        "rate": g("mysqlcdc_rows_per_second", "Rows per second of the last batch with rows",
                  labels=p),
        "duration": HistogramMetricFamily("mysqlcdc_batch_duration_seconds",
                                          "Duration of micro-batches", labels=p),
        "last_duration": g("mysqlcdc_last_batch_duration_seconds",
                           "Duration of the last micro-batch", labels=p),
        "lag_bytes": g("mysqlcdc_lag_bytes", "Binlog bytes between the pipeline's position "
                       "and the server's end", labels=p),
        "lag_seconds": g("mysqlcdc_lag_seconds", "Seconds since the commit of the last "
                         "transaction the pipeline read (0 at the server's end)", labels=p),
        "t_rows": c("mysqlcdc_table_rows", "Row changes read, per table and op", labels=t),
        "t_events": c("mysqlcdc_table_events", "Rows events read, per table and op", labels=t),
        "t_rows_rate": g("mysqlcdc_table_rows_per_second",
                         "Row changes per second over the last minute", labels=t),
        "t_events_rate": g("mysqlcdc_table_events_per_second",
                           "Rows events per second over the last minute", labels=t),
        "sink_retries": c("mysqlcdc_sink_retries", "Sink delivery attempts that failed and "
                          "were retried", labels=["pipeline", "sink"]),
        "sink_errors": c("mysqlcdc_sink_errors", "Sink deliveries that failed after every "
                         "retry", labels=["pipeline", "sink"]),
        "failures": c("mysqlcdc_pipeline_failures", "Times the pipeline stopped with an error",
                      labels=p),
        "quarantines": g("mysqlcdc_schema_quarantines", "Tables quarantined by the schema "
                         "history", labels=["pipeline", "state"]),
        "reconnects": c("mysqlcdc_source_reconnects", "Outages of the source survived",
                        labels=p),
        "runway": g("mysqlcdc_binlog_runway_seconds", "Time before the server purges the "
                    "oldest binlog file the pipeline still needs", labels=p),
        "runway_warning": g("mysqlcdc_binlog_runway_warning", "1 when the runway is under "
                            "source.runway_warning", labels=p),
        "beats": c("mysqlcdc_heartbeats", "Heartbeats written to the source", labels=p),
        "beat_errors": c("mysqlcdc_heartbeat_errors", "Heartbeats that failed", labels=p),
        "beat_last": g("mysqlcdc_heartbeat_last_timestamp_seconds",
                       "When the last heartbeat was written", labels=p),
    }


def _pipeline(f: dict, service: PipelineService, p) -> None:
    name = p.name
    for s in STATES:
        f["state"].add_metric([name, s], 1.0 if p.state == s else 0.0)
    f["rows"].add_metric([name], p.rows_total)
    f["batches"].add_metric([name], p.batches_total)
    f["rate"].add_metric([name], p.rows_per_s)
    f["failures"].add_metric([name], p.failures_total)
    bounds = [str(b) for b in BATCH_BUCKETS] + ["+Inf"]
    running, buckets = 0, []
    for bound, n in zip(bounds, p.duration_counts):
        running += n
        buckets.append((bound, running))
    f["duration"].add_metric([name], buckets, p.duration_sum)
    if p.last_batch_s is not None:
        f["last_duration"].add_metric([name], p.last_batch_s)
    if p.lag_bytes is not None:
        f["lag_bytes"].add_metric([name], p.lag_bytes)
    if p.lag_seconds is not None:
        f["lag_seconds"].add_metric([name], p.lag_seconds)
    if p.config is None:
        return
    _tables(f, service, p)
    qs = service.quarantines(p)
    f["quarantines"].add_metric([name, "open"], sum(1 for q in qs if not q["resolved"]))
    f["quarantines"].add_metric([name, "resolved"], sum(1 for q in qs if q["resolved"]))
    f["reconnects"].add_metric([name], service.reconnects(p))
    if p.runway is not None and p.runway.seconds is not None:
        f["runway"].add_metric([name], p.runway.seconds)
    f["runway_warning"].add_metric([name], 1.0 if p.runway_low else 0.0)
    beat = p.heartbeat
    if beat is not None:
        f["beats"].add_metric([name], beat.beats)
        f["beat_errors"].add_metric([name], beat.errors)
        if beat.last_ok is not None:
            f["beat_last"].add_metric([name], beat.last_ok)


def _tables(f: dict, service: PipelineService, p) -> None:
    for (db, table, op), (rows, events) in sorted(service.table_counts(p).items()):
        labels = [p.name, db, table, op]
        f["t_rows"].add_metric(labels, rows)
        f["t_events"].add_metric(labels, events)
        rates = p.table_rates.get((db, table, op))
        if rates is not None:
            f["t_rows_rate"].add_metric(labels, rates[0])
            f["t_events_rate"].add_metric(labels, rates[1])


def render_metrics(service: PipelineService) -> tuple[str, str]:
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

    from mysqlcdc import stats

    class _Collector:
        def collect(self):
            f = _families()
            with service.reading():
                for p in list(service.pipelines.values()):
                    _pipeline(f, service, p)
            for (kind, pipeline, sink), n in sorted(stats.totals().items()):
                if kind in ("sink_retries", "sink_errors") and pipeline in service.pipelines:
                    f[kind].add_metric([pipeline, sink], n)
            yield from f.values()

    registry = CollectorRegistry()
    registry.register(_Collector())
    return generate_latest(registry).decode(), CONTENT_TYPE_LATEST
