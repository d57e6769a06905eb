#!/usr/bin/env bash
# One command: install what is needed, then run the whole test suite
# (unit, integration and e2e tiers; extra args go to pytest, e.g. -m unit).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export PYSPARK_PYTHON="$PWD/.venv/bin/python" PYSPARK_DRIVER_PYTHON="$PWD/.venv/bin/python"
exec .venv/bin/python -m pytest "$@"
