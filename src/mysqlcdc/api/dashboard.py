"""The web dashboard at ``/``: every pipeline's state, and its lag and throughput over the
last hour as server-rendered SVG (no script, no library, nothing fetched from elsewhere:
the page works offline and behind any proxy). It reloads itself every 10 seconds.

Each plotted sample is an SVG ``circle`` of class ``point`` with its value in
``data-value``, so a test (or a curious user) can read the data back from the DOM.
"""

from __future__ import annotations

import html
import time

from mysqlcdc.api.service import PipelineService, PipelineState
from mysqlcdc.protocol.retry import format_duration

__all__ = ["render_dashboard", "render_login", "chart"]

_WINDOW_S = 3600.0
_MIN_WINDOW_S = 300.0
_STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#1d2733;
background:#f6f8fa}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:0 0 8px}
.sub{color:#5b6b7c;margin-bottom:18px;font-size:13px}
table{border-collapse:collapse;background:#fff;font-size:13px;margin-bottom:20px}
th,td{padding:6px 10px;border-bottom:1px solid #e3e8ee;text-align:left;vertical-align:top}
th{background:#eef2f6;font-weight:600}
.state{font-weight:600;border-radius:10px;padding:1px 8px;color:#fff}
.running{background:#2da44e}.paused{background:#bf8700}.stopped{background:#6e7781}
.failed{background:#cf222e}
.card{background:#fff;border:1px solid #e3e8ee;border-radius:6px;padding:12px 14px;
margin-bottom:16px}
.charts{display:flex;gap:16px;flex-wrap:wrap}
.warn{color:#cf222e;font-weight:600}
a{color:#0969da;text-decoration:none}
code{font-size:12px}
"""


def chart(title: str, unit: str, points: list[tuple[float, float]], now: float,
          color: str, width: int = 520, height: int = 150) -> str:
    """An SVG line chart of ``points`` (time, value) over the hour before ``now`` (over
    the time since the first point when that is shorter, but at least five minutes)."""
    left, right, top, bottom = 52, 10, 22, 22
    w, h = width - left - right, height - top - bottom
    first = min((t for t, v in points if v is not None), default=now)
    window = min(_WINDOW_S, max(_MIN_WINDOW_S, now - first))
    start = now - window
    shown = [(t, v) for t, v in points if t >= start and v is not None]
    peak = max([v for _, v in shown] + [0.0])
    scale = peak * 1.15 if peak > 0 else 1.0

    def x(t: float) -> float:
        return left + (t - start) / window * w

    def y(v: float) -> float:
        return top + h - (v / scale) * h

    parts = [f'<svg class="chart" width="{width}" height="{height}" role="img" '
             f'aria-label="{html.escape(title)}" xmlns="http://www.w3.org/2000/svg">',
             f'<text x="{left}" y="14" font-size="12" font-weight="600">'
             f'{html.escape(title)}</text>',
             f'<rect x="{left}" y="{top}" width="{w}" height="{h}" fill="#fbfcfd" '
             'stroke="#d0d7de"/>']
    for frac in (0.25, 0.5, 0.75):
        gy = top + h * (1 - frac)
        parts.append(f'<line x1="{left}" x2="{left + w}" y1="{gy:.1f}" y2="{gy:.1f}" '
                     'stroke="#eef1f4"/>')
    parts += [f'<text x="{left - 4}" y="{top + 9}" font-size="10" text-anchor="end">'
              f'{_short(scale)}{unit}</text>',
              f'<text x="{left - 4}" y="{top + h}" font-size="10" text-anchor="end">0</text>',
              f'<text x="{left}" y="{height - 6}" font-size="10">-{window / 60:.0f} min</text>',
              f'<text x="{left + w}" y="{height - 6}" font-size="10" text-anchor="end">now'
              '</text>']
    if shown:
        line = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in shown)
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" '
                     f'points="{line}"/>')
        parts += [f'<circle class="point" cx="{x(t):.1f}" cy="{y(v):.1f}" r="2.5" '
                  f'fill="{color}" data-value="{v:g}"/>' for t, v in shown]
    else:
        parts.append(f'<text x="{left + w / 2}" y="{top + h / 2}" font-size="11" '
                     'text-anchor="middle" fill="#8c959f">no data yet</text>')
    parts.append("</svg>")
    return "".join(parts)


def _short(v: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if v >= size:
            return f"{v / size:.1f}{unit}"
    return f"{v:.0f}" if v >= 10 else f"{v:.1f}"


def _cell(value) -> str:
    return "-" if value is None else html.escape(str(value))


def _row(p: PipelineState) -> str:
    s = p.summary()
    runway = s["binlog_runway_s"]
    runway_text = "-" if runway is None else format_duration(max(0.0, runway))
    if runway is None and p.runway is not None and p.runway.expire_s is None:
        runway_text = "no expiry"
    if p.runway_low:
        runway_text = f'<span class="warn">{runway_text}</span>'
    error = f'[{html.escape(p.error_code or "")}] {html.escape(p.error)}' if p.error else "-"
    name = html.escape(p.name)
    links = (f'<a href="pipelines/{name}/schema">schema history</a> · '
             f'<a href="pipelines/{name}/quarantines">quarantines</a> · '
             f'<a href="pipelines/{name}/tables">tables</a>')
    return (f'<tr><td><b>{name}</b></td><td><span class="state {p.state}">{p.state}</span></td>'
            f'<td><code>{_cell(s["position"])}</code></td><td><code>{_cell(s["gtid"])}</code>'
            f'</td><td>{_cell(s["lag_seconds"])}</td><td>{_cell(s["lag_bytes"])}</td>'
            f'<td>{s["rows_total"]}</td><td>{s["rows_per_s"]}</td><td>{runway_text}</td>'
            f'<td>{error}</td><td>{links}</td></tr>')


def _card(p: PipelineState, now: float) -> str:
    samples = list(p.samples)
    lag = [(x["t"], x["lag_s"]) for x in samples]
    rows = [(x["t"], x["rows_per_s"]) for x in samples]
    return (f'<div class="card" id="pipeline-{html.escape(p.name)}">'
            f'<h2>{html.escape(p.name)}</h2><div class="charts">'
            + chart("lag behind the source (seconds)", " s", lag, now, "#cf222e")
            + chart("throughput (row changes per second)", "", rows, now, "#0969da")
            + "</div></div>")


def render_dashboard(service: PipelineService) -> str:
    now = time.time()
    with service.reading():
        pipelines = sorted(service.pipelines.values(), key=lambda p: p.name)
        rows, cards = "".join(_row(p) for p in pipelines), "".join(_card(p, now) for p in pipelines)
    head = ("<tr><th>pipeline</th><th>state</th><th>position</th><th>GTID set</th>"
            "<th>lag s</th><th>lag bytes</th><th>rows</th><th>rows/s</th>"
            "<th>binlog runway</th><th>error</th><th></th></tr>")
    body = rows or '<tr><td colspan="11">no pipelines: POST one to /pipelines</td></tr>'
    return (f'<!doctype html><html><head><meta charset="utf-8"><title>mysqlcdc</title>'
            f'<meta http-equiv="refresh" content="10"><style>{_STYLE}</style></head><body>'
            f'<h1>mysqlcdc</h1><div class="sub">{len(pipelines)} pipeline(s) · '
            f'{time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(now))} · '
            f'<a href="metrics">metrics</a> · <a href="docs">API</a></div>'
            f'<table>{head}{body}</table>{cards}</body></html>')


def render_login(failed: bool = False) -> str:
    note = '<p class="warn">That token is not this instance\'s.</p>' if failed else ""
    return (f'<!doctype html><html><head><meta charset="utf-8"><title>mysqlcdc</title>'
            f'<style>{_STYLE}</style></head><body><h1>mysqlcdc</h1>'
            '<p>This instance needs its API token.</p>' + note +
            '<form method="post" action="login"><input type="password" name="token" '
            'autocomplete="current-password" size="40"> <button>open</button></form>'
            '</body></html>')
