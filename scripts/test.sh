#!/usr/bin/env bash
# Installs what the tests need, then runs them all: `scripts/test.sh [cargo test arguments]`.
# `scripts/test.sh --setup` installs only (CI runs the wheel smoke test in between).
#
# Idempotent: each step installs only what is missing, so a second run goes straight to the tests.
#   - fuse3 (fusermount3, mount.fuse3), libcap2-bin (capsh), libnfs-utils (nfs-ls, nfs-cat) and
#     nginx-light, from Debian's packages (apt-get; run as root);
#   - a virtualenv OUTSIDE the repo, $TFMOUNT_TEST_VENV (default ~/.cache/tfmount-test-venv),
#     with scripts/requirements-tests.txt: numpy, safetensors, ml_dtypes, h5py, tensorflow-cpu,
#     moto[server], fake-gcs-server (reinstalled only when that file changes).
# Then `cargo test` runs with TFMOUNT_REQUIRE_ALL=1, so a test whose component is still missing
# fails, naming it, instead of being skipped; after it the Python module's tests
# (scripts/pytest.sh: pytest on tests/python against a wheel built from the checkout, installed
# in a fresh venv). Plain `cargo test` skips such tests and names what
# it skipped in one line at the end (src/testkit/requires.rs).
set -euo pipefail
cd "$(dirname "$0")/.."

venv="${TFMOUNT_TEST_VENV:-$HOME/.cache/tfmount-test-venv}"
t0=$SECONDS

apt_install() {
    if [ "$(id -u)" != 0 ]; then
        echo "scripts/test.sh: $* missing and not root: install it (apt-get install $*) and run again" >&2
        exit 1
    fi
    if [ -z "${APT_UPDATED:-}" ]; then
        apt-get update -qq
        APT_UPDATED=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

if ! command -v fusermount3 >/dev/null 2>&1; then
    echo "installing fuse3"
    apt_install fuse3
fi
# tests/cli/containers.rs: capsh drops CAP_SYS_ADMIN (unshare and setpriv are util-linux's).
if ! command -v capsh >/dev/null 2>&1 && [ ! -x /usr/sbin/capsh ] && [ ! -x /sbin/capsh ]; then
    echo "installing libcap2-bin (capsh)"
    apt_install libcap2-bin
fi
# tests/mount/nfs.rs: libnfs's nfs-ls and nfs-cat, the NFS client the NFS server is checked with.
if ! command -v nfs-ls >/dev/null 2>&1; then
    echo "installing libnfs-utils (nfs-ls, nfs-cat)"
    apt_install libnfs-utils
fi
if [ ! -e /dev/fuse ]; then
    echo "scripts/test.sh: /dev/fuse is missing: the mount tests need FUSE (modprobe fuse, or run the container with --device /dev/fuse)" >&2
    exit 1
fi

stamp="$venv/.tfmount-requirements"
if [ ! -x "$venv/bin/python" ]; then
    echo "creating the test virtualenv $venv"
    mkdir -p "$(dirname "$venv")"
    python3 -m venv "$venv"
fi
if ! cmp -s scripts/requirements-tests.txt "$stamp"; then
    echo "installing scripts/requirements-tests.txt into $venv (a few minutes the first time)"
    "$venv/bin/python" -m pip install -q --upgrade pip
    "$venv/bin/python" -m pip install -q -r scripts/requirements-tests.txt
    cp scripts/requirements-tests.txt "$stamp"
fi

# nginx-light, and the server executables on the virtualenv's PATH.
PYTHON="$venv/bin/python" scripts/install-test-servers.sh

if [ "${1:-}" = "--setup" ]; then
    echo "test setup ready in $((SECONDS - t0)) s"
    exit 0
fi

export PATH="$venv/bin:$PATH"
export TFMOUNT_PYTHON="$venv/bin/python"
export TFMOUNT_REQUIRE_ALL=1
echo "test setup ready in $((SECONDS - t0)) s; running cargo test $*"
status=0
cargo test "$@" || status=$?
# The Python module: its wheel built from the checkout, in a fresh venv (TFMOUNT_PYTEST=0 skips
# it, for a run of some Rust tests only).
if [ "${TFMOUNT_PYTEST:-1}" != 0 ]; then
    scripts/pytest.sh || status=$?
fi
exit "$status"
