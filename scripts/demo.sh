#!/usr/bin/env bash
# One command: install what is needed, then run the demo (extra args go to `mysqlcdc demo`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
exec .venv/bin/mysqlcdc demo "$@"
