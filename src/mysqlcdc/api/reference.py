"""``python -m mysqlcdc.api.reference > docs/API.md``: the REST API's reference, from the
OpenAPI spec the running service serves at ``/openapi.json``."""

from __future__ import annotations

_EXAMPLES = """\
```bash
export MYSQLCDC_API_TOKEN=...            # when serve listens beyond 127.0.0.1
AUTH="Authorization: Bearer $MYSQLCDC_API_TOKEN"
curl -s -H "$AUTH" localhost:8080/pipelines
curl -s -H "$AUTH" -X POST --data-binary @shop.yaml -H 'content-type: application/yaml' \\
     localhost:8080/pipelines
curl -s -H "$AUTH" -X POST localhost:8080/pipelines/shop-cdc/pause
curl -s -H "$AUTH" -X POST localhost:8080/pipelines/shop-cdc/resume
curl -s -H "$AUTH" -X POST localhost:8080/pipelines/shop-cdc/stop
curl -s -H "$AUTH" -X POST -H 'content-type: application/json' \\
     -d '{"to": "2026-11-01T12:00:00Z", "confirm": "replay"}' \\
     localhost:8080/pipelines/shop-cdc/seek
curl -s -H "$AUTH" -X POST -H 'content-type: application/json' \\
     -d '{"host": "db2.example", "port": 3306}' localhost:8080/pipelines/shop-cdc/source
curl -s -H "$AUTH" -X POST localhost:8080/pipelines/shop-cdc/start
curl -s -H "$AUTH" localhost:8080/pipelines/shop-cdc/tables
curl -s -H "$AUTH" localhost:8080/pipelines/shop-cdc/schema?table=shop.orders
curl -s -H "$AUTH" -X DELETE localhost:8080/pipelines/shop-cdc
curl -s -H "$AUTH" localhost:8080/metrics
```
"""


def _body(spec: dict, op: dict) -> str:
    """The fields of an operation's JSON body, as ``name: description`` lines."""
    ref = (((op.get("requestBody") or {}).get("content") or {}).get("application/json")
           or {}).get("schema", {}).get("$ref")
    if not ref:
        return ""
    schema = spec["components"]["schemas"][ref.rsplit("/", 1)[1]]
    fields = [f"`{name}`" + (f": {prop['description'].rstrip('.')}" if prop.get("description")
                             else "")
              for name, prop in schema.get("properties", {}).items()]
    return ". Body (JSON): " + "; ".join(fields) + "."


def render() -> str:
    from mysqlcdc.api import PipelineService
    from mysqlcdc.api.app import create_app

    spec = create_app(PipelineService.__new__(PipelineService)).openapi()
    lines = ["# REST API of `mysqlcdc serve`", "",
             "Generated from the OpenAPI spec (`python -m mysqlcdc.api.reference > docs/API.md`);",
             "a running instance serves it at `/openapi.json` and as pages at `/docs`; the "
             "dashboard is at `/`.", "",
             "Errors are JSON `{\"code\", \"message\", \"hint\"}`: 401 missing or wrong API token, "
             "404 unknown pipeline, 409 name or server id in use, a pipeline in the wrong "
             "state, a seek not confirmed (`SEEK_NOT_CONFIRMED`) or another server than the "
             "pipeline's source (`SOURCE_CHANGED`), 422 invalid config (with `problems`: "
             "`FILE:LINE: field: message` lines), 503 source unreachable.", "",
             "When the instance has a token (`MYSQLCDC_API_TOKEN`; required when it listens "
             "beyond 127.0.0.1) every path but `/healthz` needs `Authorization: Bearer "
             "<token>`; the dashboard asks for it once and keeps it in an HttpOnly cookie.", "",
             "| method | path | what |", "|---|---|---|"]
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            lines.append(f"| {method.upper()} | `{path}` | {op.get('summary', '')}"
                         f"{_body(spec, op)} |")
    lines += ["", _EXAMPLES]
    return "\n".join(lines)


if __name__ == "__main__":
    print(render(), end="")
