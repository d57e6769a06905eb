"""``python -m mysqlcdc.api.reference > docs/API.md``: the REST API's reference, from the
OpenAPI spec the running service serves at ``/openapi.json``."""

from __future__ import annotations


def render() -> str:
    from mysqlcdc.api import PipelineService
    from mysqlcdc.api.app import create_app

    spec = create_app(PipelineService.__new__(PipelineService)).openapi()
    lines = ["# REST API of `mysqlcdc serve`", "",
             "Generated from the OpenAPI spec (`python -m mysqlcdc.api.reference > docs/API.md`);",
             "a running instance serves it at `/openapi.json` and as pages at `/docs`.", "",
             "Errors are JSON `{\"code\", \"message\", \"hint\"}`: 404 unknown pipeline, 409 name "
             "in use, 422 invalid config (with `problems`: `FILE:LINE: field: message` lines), "
             "503 source unreachable.", "",
             "| method | path | what |", "|---|---|---|"]
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            lines.append(f"| {method.upper()} | `{path}` | {op.get('summary', '')} |")
    lines += ["", "```bash",
              "curl -s localhost:8080/pipelines",
              "curl -s -X POST --data-binary @shop.yaml -H 'content-type: application/yaml' "
              "localhost:8080/pipelines",
              "curl -s -X POST localhost:8080/pipelines/shop-cdc/stop",
              "curl -s -X POST localhost:8080/pipelines/shop-cdc/start",
              "curl -s -X DELETE localhost:8080/pipelines/shop-cdc",
              "curl -s localhost:8080/metrics", "```", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    print(render(), end="")
