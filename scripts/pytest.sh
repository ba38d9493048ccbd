#!/usr/bin/env bash
# The Python module's tests: builds the wheel from the checkout (maturin, cargo's target/),
# installs it into a FRESH virtualenv with what the tests import
# (scripts/requirements-python.txt: numpy, pytest, fsspec, ml_dtypes), and runs pytest on
# tests/python/ there. Arguments go to pytest. scripts/test.sh runs it after cargo test.
#
# Environment: PYTEST_PROFILE (cargo profile of the wheel: dev, the default, reuses the test
# build's dependencies; release for benchmarks), PYTHON (the interpreter for the venvs,
# default python3). The build venv (maturin) is kept in target/wheel-smoke/venv, shared with
# scripts/wheel-smoke.sh; pip's cache makes the fresh venv's installs quick after the first.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1

PY=${PYTHON:-python3}
BVENV=target/wheel-smoke/venv
if ! "$BVENV/bin/python" -c "import maturin" 2>/dev/null; then
    echo "pytest.sh: installing maturin into $BVENV"
    rm -rf "$BVENV"
    "$PY" -m venv "$BVENV"
    "$BVENV/bin/pip" install -q "maturin>=1.9,<2.0"
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/tfmount-pytest.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
t0=$SECONDS
"$BVENV/bin/maturin" build --profile "${PYTEST_PROFILE:-dev}" --out "$WORK/dist" >"$WORK/build.log" 2>&1 || {
    tail -n 30 "$WORK/build.log" >&2
    echo "pytest.sh: building the wheel failed" >&2
    exit 1
}
"$PY" -m venv "$WORK/venv"
"$WORK/venv/bin/pip" install -q "$WORK"/dist/tfmount-*.whl -r scripts/requirements-python.txt
echo "pytest.sh: wheel built and installed in a fresh venv in $((SECONDS - t0)) s"
# The installed package, not the checkout's python/ directory, is what is imported.
cd tests/python
PATH="$WORK/venv/bin:$PATH" "$WORK/venv/bin/python" -m pytest -q -p no:cacheprovider "$@" .
