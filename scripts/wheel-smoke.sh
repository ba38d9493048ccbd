#!/usr/bin/env bash
# Wheel smoke test: the `pip install` route of pyproject.toml, end to end.
#
#   1. builds the wheel with maturin (release profile, into cargo's target/, so a second run only
#      re-links what changed); maturin lives in a build venv kept at target/wheel-smoke/venv,
#      installed from PyPI the first time ("maturin>=1.9,<2.0", as pyproject.toml requires);
#   2. checks that the wheel holds the tfmount package (the extension and python/tfmount/) and
#      its metadata, nothing else, with the `tfmount` command and the fsspec entry point;
#   3. creates a FRESH venv in a temporary directory, `pip install`s the wheel there,
#      and checks that `tfmount` is on that venv's PATH, `tfmount --version` matches Cargo.toml
#      and `import tfmount` works (numpy, the one dependency, comes from the index);
#   4. mounts tests/fixtures/demo_savedmodel with that binary, lists variables/, reads a .shape
#      file, unmounts (fusermount3 -u, else umount), then uninstalls;
#   5. prints the wall time of each step, the wheel's size and the binary's.
#
# Needs python3 with venv and pip, cargo, and for step 4 FUSE (/dev/fuse and fusermount3; root or
# a user allowed to mount). Without FUSE it prints a SKIP line and exits 0 after step 3, unless
# CI=true, where that is a failure. Idempotent: everything but target/ lives in a temp directory
# removed at exit (a mount left by a failure is unmounted first).
#
# Environment:
#   WHEEL_SMOKE_BUILD=maturin  (default) `maturin build --release`: the distributable wheel, with
#                              the manylinux_2_X tag maturin's audit finds for the binary;
#   WHEEL_SMOKE_BUILD=pip      `pip wheel .` instead: the PEP 517 route `pip install .` takes
#                              (isolated build env with maturin from PyPI, `linux_x86_64` tag).
#   WHEEL_SMOKE_PROFILE=dev    with maturin: cargo's dev profile instead of release (`--profile
#                              dev`): the same packaging route, a binary built without release
#                              optimisation, reusing the dev-profile dependencies an earlier
#                              build compiled (CI: the fuzz smoke run's), minutes less on 2 cores.
#   PYTHON                     the interpreter for both venvs (default python3).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
export LC_ALL=C PIP_DISABLE_PIP_VERSION_CHECK=1

PY=${PYTHON:-python3}
BUILD=${WHEEL_SMOKE_BUILD:-maturin}
STATE=$REPO/target/wheel-smoke # kept between runs: the build venv and the last build log
BVENV=$STATE/venv
MATURIN_REQ="maturin>=1.9,<2.0"

die() {
    echo "wheel-smoke: FAIL: $*" >&2
    exit 1
}
now() { echo "${EPOCHREALTIME/,/.}"; }
T0=$(now)
TIMES=()
# record LABEL START: the wall time since START, for the report at the end.
record() { TIMES+=("$(awk -v l="$1" -v a="$2" -v b="$(now)" 'BEGIN { printf "%-24s %6.1f s", l, b - a }')"); }
mib() { awk -v n="$(stat -c %s "$1")" 'BEGIN { printf "%.1f MiB", n / 1048576 }'; }

command -v "$PY" >/dev/null || die "$PY not found (set PYTHON=)"
"$PY" -c "import venv, ensurepip" 2>/dev/null ||
    die "$PY lacks the venv/ensurepip modules (Debian: apt-get install python3-venv)"
command -v cargo >/dev/null || die "cargo not found: the wheel is built from source"
VERSION=$(sed -n '/^\[package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' Cargo.toml | head -1)
[ -n "$VERSION" ] || die "no version in Cargo.toml's [package]"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/tfmount-wheel.XXXXXX") || die "mktemp -d failed"
MNT=$WORK/mnt
unmount() {
    fusermount3 -u "$1" 2>/dev/null || umount "$1" 2>/dev/null
}
cleanup() {
    if mountpoint -q "$MNT" 2>/dev/null; then
        unmount "$MNT" || fusermount3 -uz "$MNT" 2>/dev/null || umount -l "$MNT" 2>/dev/null ||
            echo "wheel-smoke: could not unmount $MNT" >&2
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$STATE"

# 1. The build venv (reused) and the wheel.
t=$(now)
if ! "$BVENV/bin/python" -c "import maturin" 2>/dev/null; then
    echo "== build venv: installing $MATURIN_REQ into $BVENV"
    rm -rf "$BVENV"
    "$PY" -m venv "$BVENV" || die "creating the build venv $BVENV"
    "$BVENV/bin/pip" install -q "$MATURIN_REQ" || die "pip install $MATURIN_REQ (PyPI) failed"
fi
record "build venv (maturin)" "$t"

LOG=$STATE/build.log
t=$(now)
echo "== building the wheel ($BUILD; log: $LOG)"
case "$BUILD" in
maturin)
    status=0
    # maturin is asked to find the manylinux tag itself (no --compatibility): see pyproject.toml.
    "$BVENV/bin/maturin" build --profile "${WHEEL_SMOKE_PROFILE:-release}" --out "$WORK/dist" >"$LOG" 2>&1 || status=$?
    ;;
pip)
    status=0
    "$BVENV/bin/pip" wheel --no-deps -w "$WORK/dist" . >"$LOG" 2>&1 || status=$?
    ;;
*) die "WHEEL_SMOKE_BUILD=$BUILD: expected maturin or pip" ;;
esac
if [ "$status" != 0 ]; then
    tail -n 30 "$LOG" >&2
    die "building the wheel ($BUILD) exited $status; full log: $LOG"
fi
record "wheel build ($BUILD)" "$t"
shopt -s nullglob
wheels=("$WORK"/dist/tfmount-*.whl)
shopt -u nullglob
[ "${#wheels[@]}" = 1 ] || die "expected one tfmount-*.whl in $WORK/dist, found ${#wheels[@]}"
WHEEL=${wheels[0]}
echo "wheel: $(basename "$WHEEL") ($(mib "$WHEEL"))"

# 2. The wheel holds the package (python/tfmount/ and the extension) and the metadata only.
"$PY" - "$WHEEL" "$VERSION" <<'EOF' || die "unexpected contents in $(basename "$WHEEL")"
import sys, zipfile
wheel, version = sys.argv[1:]
names = zipfile.ZipFile(wheel).namelist()
meta = f"tfmount-{version}.dist-info/"
want = {"tfmount/__init__.py", "tfmount/_cli.py", "tfmount/__main__.py", "tfmount/fsspec.py", "tfmount/_tfmount.abi3.so"}
extra = [n for n in names if n not in want and not n.startswith(meta)]
missing = sorted(want - set(names))
if missing or extra:
    print(f"wheel-smoke: missing {missing}; other entries: {extra}", file=sys.stderr)
    sys.exit(1)
entry = zipfile.ZipFile(wheel).read(meta + "entry_points.txt").decode().replace(" ", "")
if "tfmount=tfmount._cli:main" not in entry or "tfmount=tfmount.fsspec:TfmountFileSystem" not in entry:
    print(f"wheel-smoke: entry points lack the command or the fsspec filesystem:\n{entry}", file=sys.stderr)
    sys.exit(1)
EOF

# 3. A fresh venv and the wheel installed in it (numpy from the index).
t=$(now)
VENV=$WORK/venv
"$PY" -m venv "$VENV" || die "creating the fresh venv $VENV"
"$VENV/bin/pip" install -q "$WHEEL" || die "pip install of $(basename "$WHEEL") into the fresh venv"
record "fresh venv + install" "$t"
found=$(PATH="$VENV/bin:$PATH" command -v tfmount) || die "tfmount is not on the venv's PATH after install"
[ "$found" = "$VENV/bin/tfmount" ] || die "tfmount on the venv's PATH is $found, not $VENV/bin/tfmount"
echo "installed: $found ($(mib "$found"))"
got=$("$VENV/bin/tfmount" --version) || die "$VENV/bin/tfmount --version exited non-zero"
[ "$got" = "tfmount $VERSION" ] || die "tfmount --version printed '$got', expected 'tfmount $VERSION'"
echo "tfmount --version: $got"
"$VENV/bin/python" -c "import tfmount, sys; sys.exit(tfmount.__version__ != '$VERSION')" ||
    die "import tfmount in the fresh venv failed, or its __version__ is not $VERSION"

report() {
    record total "$T0"
    echo "== timings"
    printf '  %s\n' "${TIMES[@]}"
}

# 4. A real mount with the installed binary.
why=
[ -e /dev/fuse ] || why="/dev/fuse is missing"
[ -n "$why" ] || command -v fusermount3 >/dev/null || why="fusermount3 not found (apt-get install fuse3)"
if [ -n "$why" ]; then
    report
    [ "${CI:-}" != true ] || die "cannot mount: $why (CI=true needs FUSE)"
    echo "wheel-smoke: SKIP mount check: $why (build, install and --version passed)"
    exit 0
fi
t=$(now)
mkdir "$MNT"
DEMO=tests/fixtures/demo_savedmodel
"$VENV/bin/tfmount" --log-file "$WORK/tfmount.log" "$DEMO" "$MNT" ||
    die "$VENV/bin/tfmount $DEMO $MNT exited non-zero: $(cat "$WORK/tfmount.log" 2>/dev/null)"
for _ in $(seq 50); do
    mountpoint -q "$MNT" && break
    sleep 0.1
done
mountpoint -q "$MNT" || die "$MNT is not a mount point 5 s after tfmount returned: $(cat "$WORK/tfmount.log" 2>/dev/null)"
listing=$(ls "$MNT/variables") || die "ls $MNT/variables failed"
[ -n "$listing" ] || die "$MNT/variables is empty"
echo "variables/: $(echo "$listing" | tr '\n' ' ')"
SHAPE=variables/w/.ATTRIBUTES/VARIABLE_VALUE.shape
shape=$(cat "$MNT/$SHAPE") || die "reading $SHAPE from the mount failed"
[ "$shape" = "3 2" ] || die "$SHAPE reads '$shape', expected '3 2'"
echo "$SHAPE: $shape"
unmount "$MNT" || die "neither fusermount3 -u nor umount unmounted $MNT"
! mountpoint -q "$MNT" || die "$MNT is still mounted after unmounting"
record "mount, read, unmount" "$t"

# 5. Uninstalling removes the binary.
"$VENV/bin/pip" uninstall -q -y tfmount || die "pip uninstall tfmount failed"
[ ! -e "$VENV/bin/tfmount" ] || die "$VENV/bin/tfmount is still there after pip uninstall"

report
echo "wheel-smoke: OK ($(basename "$WHEEL"), $(mib "$WHEEL"))"
