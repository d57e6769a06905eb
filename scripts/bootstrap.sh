#!/usr/bin/env bash
# Install everything mysqlcdc needs on a fresh Debian/Ubuntu machine, then
# create ./.venv with mysqlcdc and its dev tools. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi

need_apt=()
command -v java >/dev/null 2>&1 || need_apt+=(openjdk-17-jre-headless)
{ command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ]; } || need_apt+=(mariadb-server)
command -v mariadb >/dev/null 2>&1 || need_apt+=(mariadb-client)
# the mirror sinks' and the dashboard's tests start these themselves
[ -x /usr/lib/postgresql/15/bin/postgres ] || ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || need_apt+=(postgresql)
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)

PY="${PYTHON:-python3}"
if ! "$PY" -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null; then
  need_apt+=(python3.11 python3.11-venv); PY=python3.11
fi
"$PY" -c 'import venv, ensurepip' 2>/dev/null || need_apt+=(python3-venv)

if [ ${#need_apt[@]} -gt 0 ]; then
  echo "==> apt-get install ${need_apt[*]}"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${need_apt[@]}"
fi

if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv with $PY"
  "$PY" -m venv .venv
fi
echo "==> installing mysqlcdc and its dev dependencies into .venv"
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[dev]"
