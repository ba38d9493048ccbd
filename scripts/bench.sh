#!/usr/bin/env bash
# tfmount benchmark. Run by hand (NOT in CI):   scripts/bench.sh
#
# Builds the daemon and the `mkckpt` example (release), writes synthetic checkpoints into a
# temporary directory under /tmp (removed at exit, mounts unmounted by a trap), and measures, each
# against a baseline taken in the same run, every timing repeated REPS times (median):
#   1. cold sequential read of a BIG_GIB float32 tensor through a fresh mount, vs the same bytes
#      read from a fresh mount of `memfuse` (examples/memfuse.rs: a minimal in-memory fuser file,
#      same kernel settings and read_ahead_kb)                      ratio = memfuse / mount, >= 0.9
#   2. the second (warm) read of each, same ratio                                          >= 0.9
#      (`dd` straight from the .data file is printed too, for scale)
#   3. time from starting `tfmount -f` until `cat MNT/variables/KEY.shape` succeeds, for 1 000
#      and 1 000 000 tensors                                   1M <= 2 x 1k, and 1M < 0.2 s
#   4. `find MNT/variables -name '*.shape' | xargs cat` over WALK_TENSORS (20 000) tensors on a
#      fresh mount (variables/: the tree the plain copy holds),
#      vs the same walk over an ordinary directory tree of the same files (target: mount <= 2x
#      plain) and over a memfuse mount of that tree (what FUSE alone costs), started as a child
#      of this script and in a session of its own as tfmount's daemon is (`setsid`; with
#      scheduler autogroups that decides how soon a server runs: mount / that memfuse <= 1.1;
#      ONLY=walk runs this section alone); 100 000 tensors vs
#      tf.train.list_variables when a Python with TensorFlow is found ($TF_PYTHON, else
#      /work/tfvenv/bin/python)
#   5. the daemons' RssAnon (/proc/PID/status) after 1-4 (the largest)            <= 64 MiB
#   6. `ls MNT/graph` of a 100 000-node graph (fresh mount: includes indexing the nodes), then
#      `cat` of one node's .pbtxt, and `ls` of a plain 100 000-file directory for calibration
#   7. the subcommands without FUSE (bench_cli, at the end): verify vs dd, diff of 100k-tensor
#      checkpoints (time, data bytes read), ls -R vs find over a fresh mount
#   8. V1 checkpoints (bench_v1): large V1 tensors read vs dd of the V1 file and vs V2
#      (int64 V2/V1 >= 0.7; ONLY=v1 runs this section alone)
#   9. the views (bench_views): big/tensor read through model.safetensors vs its .bin (>= 0.9),
#      the header of model.safetensors of 100 000 tensors (< 1 s), stats/ and text/ of
#      big/tensor (time, throughput, RssAnon)
#  10. object storage (bench_remote, moto_server and nginx on 127.0.0.1): requests at mount,
#      bytes for a small tensor, sequential read vs curl, diff of two checkpoints on S3
#      (ONLY=remote runs this section alone)
#  11. a ~1 GiB Keras 3 `.keras` file written by real Keras (bench_keras, scripts/gen_keras_bench.py;
#      a Python with Keras: $KERAS_PYTHON, $TF_PYTHON or the test venv): start -> first stat
#      of a tensor's .shape (< 100 ms) and the bytes the daemon read for it (rchar); sequential
#      read of a 256 MiB dataset, memfuse / mount (>= 0.9); the daemon's peak RssAnon while
#      reading it (<= 64 MiB) (ONLY=keras runs this section alone)
#  12. direct I/O (bench_direct_io, -o direct_io): cold and warm reads of big/tensor vs dd of its
#      data file for direct_io=never and =auto (>= 0.6 cold, >= 0.9 warm), memfuse with and
#      without FOPEN_DIRECT_IO as baselines, what answering OPEN costs the walk, cat/cp/Python
#      read() (ONLY=direct_io runs this section alone)
#  13. one fetch per byte over http:// with the CRC on (bench_stream_crc, nginx on 127.0.0.1,
#      plain and with `limit_rate 100m`): 256 MiB and BIG_GIB tensors vs curl, default /
#      -o crc_first / -o nocrc / -o remote_cache=2G, and TFMOUNT_BEFORE's defaults
#      (ONLY=stream_crc runs this section alone)
#  issue 19 (bench_issue19, ONLY=issue19, needs TFMOUNT_BEFORE): every row of issue 19's table
#      (cold and warm 1 GiB reads vs dd with direct_io=auto, memfuse through the page cache and
#      with FOPEN_DIRECT_IO, 256 MiB over http:// vs curl plain and with nginx limit_rate 100m,
#      1 GiB over http:// default / nocrc / remote_cache=2G vs curl, stats/ of 1 GiB float32 vs
#      numpy, a 64 MiB V1 int64 tensor vs V2, the walk vs memfuse), for TFMOUNT_BEFORE and this
#      tree alternating, printed as one table: row, before, after, target, PASS/MISS
#  15. TF2 object-based checkpoints (bench_tf2_names, mkckpt --tf2; ONLY=tf2names runs this
#      section alone): start -> first cat of a .shape for 20 000 and 1 000 000 variables whose
#      own names are all distinct or all `Variable` (names/ and weights.safetensors are made on
#      first use, never at mount: 20k < 50 ms, 1M < 100 ms, each beside 1k plain tensors), then
#      `ls -f MNT/names | wc -l` of the 1M-identical mount (the object graph decoded, 1M names
#      uniquified, the tree of 4M links built and listed; target < 2 s)
#  16. the whole tree at the model's size (bench_whole_tree; ONLY=whole_tree runs this section
#      alone): two checkpoints of WHOLE_MIB (200) MiB of float32 tensors, one tensor in 40
#      changed; `du -s --apparent-size` of a mount vs the tensor bytes (<= 2.05x), and `diff -rq`
#      of two fresh mounts vs `diff -rq` of their variables/ on two fresh mounts (<= 2x), with
#      the derived views hidden (the default) and, for scale, listed (-o views=visible)
#  17. the Python module (bench_python, scripts/bench_python.py; ONLY=python runs this section
#      alone): every tensor of a 524 MiB TF2 checkpoint into numpy with tfmount.open (fresh
#      process, import included) vs TensorFlow's reader (import excluded; >= 2x) and vs
#      safetensors' load_file of the same bytes (>= 1.5x); the same model as `.weights.h5` vs
#      h5py (>= 1.5x); tfmount.open of a 1M-tensor checkpoint to its first array (< 100 ms)
#  18. a 1 GiB Orbax checkpoint (bench_orbax, scripts/bench_orbax.py; ORBAX_PYTHON, a Python
#      with orbax-checkpoint, jax[cpu] and tensorstore; ONLY=orbax runs this section alone):
#      start -> first stat of an array's .shape (< 50 ms) and the bytes read for it (< 1 MiB);
#      a 256 MiB array in 4 MiB zstd chunks read whole, tensorstore / tfmount (>= 0.5)
#  14. a ~100 MB TFLite model written by TensorFlow's converter (bench_tflite,
#      `scripts/gen_tflite.py --big`; a Python with TensorFlow): start -> first stat of its
#      largest tensor's .shape (< 50 ms) and the bytes the daemon read for it (rchar); sequential
#      read of that tensor's .bin (~100 MB) cold and warm, memfuse / mount (>= 0.9)
#      (ONLY=tflite runs this section alone)
#  19. object storage at scale (bench_cache; ONLY=cache runs this section alone): a 1 GiB
#      checkpoint of 300 tensors served by nginx (limit_rate RATE per connection, default 100m)
#      behind examples/latency_proxy (LAT_MS per request, default 20): cold through the mount
#      (safetensors load_file of model.safetensors; cat of every .bin) vs aria2c -x 8 then the
#      same read of a local mount (>= 1.0); warm after a remount from cache_dir vs a local mount
#      (>= 0.9); the GETs of one 4 MiB tensor from a cold mount (<= 2); the 256 MiB and BIG_GIB
#      tensors of section 13 through the proxy vs curl and aria2c. CACHE_PYTHON: a Python with
#      numpy and safetensors (default: the test venv's).
#  20. the mount at FUSE's floor (bench_floor; ONLY=floor runs this section alone): load_file of
#      a 524 MiB model.safetensors, cold dd of BIG_GIB (page cache and direct_io=auto) and the warm
#      re-read, each vs memfuse serving the same bytes (>= 0.9, warm >= 0.95), and the daemon's
#      CPU per GiB served; TFMOUNT_BEFORE measured alternating in the same repetitions
#  21. diff --values of two 1 GiB checkpoints whose every tensor changed, vs cat of both data
#      files (bench_diff_values; ONLY=diff_values): cat / diff >= 0.5
#  22. a TF.js model at FUSE's floor (bench_tfjs_floor; ONLY=tfjs_floor): cold dd of a 1 GiB
#      float32 weight stored in 256 shards of 4 MiB, vs memfuse serving the shards' bytes as one
#      file (>= 0.9); TFMOUNT_BEFORE measured alternating in the same repetitions
# and prints a summary table with PASS/MISS.
#
# Environment: REPS (default 3), BIG_GIB (default 1), WALK_TENSORS (default 20000), TF_PYTHON,
# KERAS_PYTHON, KERAS_BENCH_FILE (a .keras written by gen_keras_bench.py earlier: reused, kept),
# REPS_MOTO (repetitions of 10c, default REPS; each takes minutes), ONLY=remote|keras|direct_io|stream_crc|tflite|v1|walk|issue19|python|orbax|cache|floor|diff_values|tfjs_floor,
# LAT_MS, RATE, CACHE_PYTHON (section 19)
# (section 10, 11, 12, 13, 14, 8, 4 or the issue 19 table alone), TFLITE_BENCH_FILE (a .tflite written by
# gen_tflite.py --big earlier: reused, kept), V1_MIB (size of section 8's float32 tensor, default 1024),
# CARGO_TARGET_DIR (where the binaries are built), TFMOUNT_ARGS (extra daemon
# arguments, e.g. "--cache-size 64M"), BENCH_TMP (default /tmp),
# TFMOUNT_BEFORE: another tfmount binary (e.g. built from an older commit with
# `git worktree add /tmp/before REV && (cd /tmp/before && cargo build --release)`), measured in
# the same repetitions for figures 1, 2, 4, 5 and 8: a before/after comparison from one run.
# The machine is probably shared and noisy: compare ratios, not absolute figures, and re-run
# before believing a MISS.

set -uo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
REPO=$(pwd)
REPS=${REPS:-3}
BIG_GIB=${BIG_GIB:-1}
TFMOUNT_ARGS=${TFMOUNT_ARGS:-}
PY=${TF_PYTHON:-/work/tfvenv/bin/python}

die() { echo "bench: $*" >&2; exit 1; }
command -v fusermount3 >/dev/null || die "fusermount3 not found (apt-get install fuse3)"
[ -e /dev/fuse ] || die "/dev/fuse is missing"

echo "== building (release)"
cargo build --release --quiet || die "cargo build --release failed"
cargo build --release --quiet --example mkckpt || die "building mkckpt failed"
cargo build --release --quiet --example mkgraph || die "building mkgraph failed"
cargo build --release --quiet --example memfuse || die "building memfuse failed"
cargo build --release --quiet --example latency_proxy || die "building latency_proxy failed"
TARGET=${CARGO_TARGET_DIR:-$REPO/target}
MKGRAPH=$TARGET/release/examples/mkgraph
MEMFUSE=$TARGET/release/examples/memfuse
WALK_TENSORS=${WALK_TENSORS:-20000}
BEFORE=${TFMOUNT_BEFORE:-}
[ -z "$BEFORE" ] || [ -x "$BEFORE" ] || die "TFMOUNT_BEFORE=$BEFORE is not an executable"
# The binaries compared: "after" (this tree) and, with TFMOUNT_BEFORE, "before".
VERSIONS=(after)
[ -n "$BEFORE" ] && VERSIONS+=(before)
TFMOUNT=$TARGET/release/tfmount
MKCKPT=$TARGET/release/examples/mkckpt
[ -x "$TFMOUNT" ] || die "$TFMOUNT missing"

WORK=$(mktemp -d "${BENCH_TMP:-/tmp}/tfmount-bench.XXXXXX") || die "mktemp failed"
MOUNTS=()
FG_PIDS=()
cleanup() {
    local mp pid
    for mp in "${MOUNTS[@]}"; do
        if mountpoint -q "$mp" 2>/dev/null; then
            fusermount3 -u "$mp" 2>/dev/null || fusermount3 -uz "$mp" 2>/dev/null
        fi
    done
    for pid in "${FG_PIDS[@]}"; do
        kill "$pid" 2>/dev/null
    done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------
now() { echo "$EPOCHREALTIME"; }
# Arithmetic on decimal seconds; a missing figure is "nan" and stays so.
NUM='^[0-9]+([.][0-9]*)?$'
sub() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.6f", b - a }'; }
div() {
    awk -v a="$1" -v b="$2" -v re="$NUM" 'BEGIN {
        if (a !~ re || b !~ re) print "nan"; else if (b == 0) print "inf"; else printf "%.3f", a / b }'
}
mbps() {
    awk -v n="$1" -v t="$2" -v re="$NUM" 'BEGIN {
        if (t !~ re) print "nan"; else if (t == 0) print "inf"; else printf "%.0f", n / t / 1e6 }'
}
row() { printf '%-44s %-26s %-14s %s\n' "$@"; }
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
# medians UNIT: the median of each key's runs in the caller's S into the caller's M (both
# associative arrays, seen through bash's dynamic scope), and the runs printed, in UNIT
medians() {
    local k
    for k in "${!S[@]}"; do
        # shellcheck disable=SC2086
        M[$k]=$(median ${S[$k]})
    done
    echo "   runs ($1):"
    for k in $(printf '%s\n' "${!S[@]}" | sort); do
        printf '     %-12s %s\n' "$k" "${S[$k]}"
    done
}
ms() { awk -v t="$1" -v re="$NUM" 'BEGIN { if (t !~ re) print "nan"; else printf "%.1f ms", t * 1000 }'; }
# cmp_ok VALUE OP TARGET -> PASS/MISS
cmp_ok() {
    awk -v v="$1" -v t="$3" -v op="$2" -v re="$NUM" 'BEGIN {
        if (v !~ re) { print "MISS"; exit }
        ok = (op == ">=") ? (v + 0 >= t + 0) : (op == "<=") ? (v + 0 <= t + 0) : (v + 0 < t + 0);
        print (ok ? "PASS" : "MISS") }'
}

# new_mountpoint: sets MP (not via $(...): MOUNTS must be updated in this shell for the trap)
new_mountpoint() {
    MP=$(mktemp -d "$WORK/mnt.XXXX") || die "mktemp failed"
    MOUNTS+=("$MP")
}

# mount_bg SOURCE MNT [VERSION]: the daemonizing form; returns once the mount is ready.
mount_bg() {
    local bin=$TFMOUNT
    [ "${3:-after}" = before ] && bin=$BEFORE
    # shellcheck disable=SC2086
    "$bin" $TFMOUNT_ARGS "$1" "$2" || { echo "bench: tfmount $1 $2 failed" >&2; return 1; }
    mountpoint -q "$2" || { echo "bench: $2 is not a mount after tfmount returned" >&2; return 1; }
}

# memfuse_bg SRC MNT [--direct-io]: a memfuse mount of SRC (loaded into memory) in the
# background; sets MEMFUSE_PID; returns once the mount is ready. With MEMFUSE_SETSID=1, memfuse
# runs in a session of its own (`setsid`), as tfmount's daemon does: with the kernel's
# scheduler autogroups (/proc/sys/kernel/sched_autogroup_enabled) a session is a scheduling
# group, and on a loaded machine a server in another group than its client answers later.
memfuse_bg() {
    local log=$WORK/memfuse.$RANDOM.log
    local wrap=()
    [ "${MEMFUSE_SETSID:-0}" = 1 ] && wrap=(setsid)
    # shellcheck disable=SC2086
    "${wrap[@]}" "$MEMFUSE" ${3:-} "$1" "$2" 2>"$log" &
    MEMFUSE_PID=$!
    FG_PIDS+=("$MEMFUSE_PID")
    local i
    # Ready once it says so: after its readahead was raised, as tfmount's daemon form does.
    for i in $(seq 1200); do
        grep -q ready "$log" 2>/dev/null && mountpoint -q "$2" && return 0
        kill -0 "$MEMFUSE_PID" 2>/dev/null || break
        sleep 0.05
    done
    echo "bench: memfuse $1 did not mount" >&2
    return 1
}

unmount() {
    local i
    fusermount3 -u "$1" 2>/dev/null
    for i in $(seq 100); do
        mountpoint -q "$1" || return 0
        sleep 0.05
    done
    fusermount3 -uz "$1" 2>/dev/null
}

# The processes serving mountpoint $1: the daemon and any helper it forks (tfmount runs a
# watchdog child), found by command line as `pgrep -f "tfmount .*MOUNTPOINT"`.
mount_pids() { pgrep -f "tfmount .*$1\$"; }

# starts_to_stat SOURCE MOUNTPOINT PATH LOG: REPS times, `tfmount -f SOURCE MOUNTPOINT` to the
# first successful `stat MOUNTPOINT/PATH` (STARTS: seconds each) and what the daemon had read by
# then (RCHARS: /proc/PID/io rchar); unmounted after each. Stops at a run whose PATH never
# appears (the daemon's log, LOG, tail shown).
starts_to_stat() {
    local src=$1 mp=$2 probe=$3 log=$4 r t0 t1 n pid
    STARTS=()
    RCHARS=()
    for r in $(seq "$REPS"); do
        t0=$(now)
        # shellcheck disable=SC2086
        "$TFMOUNT" -f $TFMOUNT_ARGS "$src" "$mp" >/dev/null 2>>"$log" &
        pid=$!
        FG_PIDS+=("$pid")
        t1=
        n=0
        while [ $((n += 1)) -lt 200000 ]; do
            if stat "$mp/$probe" >/dev/null 2>&1; then
                t1=$(now)
                break
            fi
            kill -0 "$pid" 2>/dev/null || break
        done
        if [ -z "$t1" ]; then
            echo "bench: $probe never appeared in the mount of $src; daemon log:" >&2
            tail -5 "$log" >&2
            kunmount "$mp"
            return
        fi
        STARTS+=("$(sub "$t0" "$t1")")
        RCHARS+=("$(kdaemon_io "$mp" rchar)")
        kunmount "$mp"
    done
}

# kunmount MOUNTPOINT: unmounts a mount whose daemon runs in the foreground (started with
# `tfmount -f ... &`), then waits up to 5 s for its processes to end, so that the next run
# starts on a free mount point with no daemon left reading.
kunmount() {
    local i
    unmount "$1"
    for i in $(seq 100); do
        [ -z "$(mount_pids "$1")" ] && return 0
        sleep 0.05
    done
    echo "bench: the daemon of $1 is still running 5 s after the unmount" >&2
}

RSS_MAX=0
RSS_NOTES=()
# note_rss LABEL MOUNTPOINT: records the summed RssAnon of the mount's processes.
note_rss() {
    local pid kib total=0 parts=()
    for pid in $(mount_pids "$2"); do
        kib=$(awk '/^RssAnon:/ { print $2 }' "/proc/$pid/status" 2>/dev/null)
        [ -n "$kib" ] || continue
        total=$((total + kib))
        parts+=("pid $pid $(awk -v k="$kib" 'BEGIN { printf "%.1f", k / 1024 }') MiB")
    done
    if [ ${#parts[@]} -eq 0 ]; then
        RSS_NOTES+=("$1: no tfmount process found for $2")
        return
    fi
    RSS_NOTES+=("$1: $(awk -v k="$total" 'BEGIN { printf "%.1f", k / 1024 }') MiB (${parts[*]})")
    [ "$total" -gt "$RSS_MAX" ] && RSS_MAX=$total
}

key_of() { sed -n "s/^$2=//p" "$1"; }

# ---------------------------------------------------------------------------------------------
# one measurement each (shared by the sections and the issue 19 table): a fresh mount of
# VERSION (after | before) with extra daemon OPTIONS, what is timed, the unmount
# ---------------------------------------------------------------------------------------------
# timed CMD...: prints the seconds CMD took (its output discarded)
timed() {
    local t0
    t0=$(now)
    "$@" >/dev/null || echo "bench: $* failed" >&2
    sub "$t0" "$(now)"
}
ddr() { dd if="$1" of=/dev/null bs=1M status=none; }
walkr() { find "$1" -name '*.shape' | xargs cat; }
# unmount_wait MOUNTPOINT: unmounts, then waits for the daemon (and its watchdog) to exit: the
# next mount on the same path must not race with the old watchdog's cleanup.
unmount_wait() {
    local i
    unmount "$1"
    for i in $(seq 200); do
        [ -z "$(mount_pids "$1")" ] && return 0
        sleep 0.05
    done
    echo "bench: the daemon of $1 is still running" >&2
}
# mount_v SOURCE MNT VERSION [OPTIONS]: a fresh mount of VERSION with OPTIONS (e.g.
# "-o direct_io=auto") besides TFMOUNT_ARGS
mount_v() {
    TFMOUNT_ARGS="$TFMOUNT_ARGS ${4:-}" mount_bg "$1" "$2" "$3"
}
# cold_warm SOURCE MNT FILE VERSION [OPTIONS]: dd of MNT/FILE on a fresh mount, then again;
# sets CW_COLD and CW_WARM (seconds, nan if the mount failed)
cold_warm() {
    CW_COLD=nan CW_WARM=nan
    mount_v "$1" "$2" "$4" "${5:-}" || return 1
    CW_COLD=$(timed ddr "$2/$3")
    CW_WARM=$(timed ddr "$2/$3")
    unmount_wait "$2"
}
# memfuse_cold_warm FILE MNT [--direct-io]: the same bytes from a fresh memfuse mount; sets
# MF_COLD and MF_WARM
memfuse_cold_warm() {
    MF_COLD=nan MF_WARM=nan
    memfuse_bg "$1" "$2" "${3:-}" || return 1
    MF_COLD=$(timed ddr "$2/data")
    MF_WARM=$(timed ddr "$2/data")
    unmount "$2"
    wait "$MEMFUSE_PID" 2>/dev/null
}
# walk_v SOURCE MNT VERSION [OPTIONS]: prints the seconds of the walk of 4 on a fresh mount
walk_v() {
    mount_v "$1" "$2" "$3" "${4:-}" || { echo nan; return; }
    timed walkr "$2/variables"
    unmount_wait "$2"
}
# walk_memfuse TREE MNT: prints the seconds of the same walk over memfuse of TREE
walk_memfuse() {
    memfuse_bg "$1" "$2" || { echo nan; return; }
    timed walkr "$2"
    unmount "$2"
    wait "$MEMFUSE_PID" 2>/dev/null
}
# read_v SOURCE MNT FILE VERSION: prints the seconds of dd of MNT/FILE on a fresh mount
read_v() {
    mount_v "$1" "$2" "$4" || { echo nan; return; }
    timed ddr "$2/$3"
    unmount_wait "$2"
}
# stats_v SOURCE MNT KEY VERSION: prints the seconds of `cat stats/KEY.txt` on a fresh mount
# (the text is kept in $WORK/stats.VERSION.txt)
stats_v() {
    local t0
    mount_v "$1" "$2" "$4" || { echo nan; return; }
    t0=$(now)
    cat "$2/stats/$3.txt" >"$WORK/stats.$4.txt" || echo "bench: cat stats/$3.txt failed" >&2
    sub "$t0" "$(now)"
    unmount_wait "$2"
}
# numpy_stats DATAFILE OFFSET ELEMENTS: prints the seconds numpy takes for the figures of
# stats/ of a float32 tensor stored there (read from the file, page cache warm): counts of
# finite/NaN/+inf/-inf/zero values, min, max, float64 mean and std, 16-bin histogram
numpy_stats() {
    "$PY" - "$@" <<'PYEOF' 2>/dev/null || echo nan
import sys, time
import numpy as np
path, off, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
t0 = time.perf_counter()
a = np.fromfile(path, dtype="<f4", count=n, offset=off)
fin = np.isfinite(a)
counts = (int(fin.sum()), int(np.isnan(a).sum()), int((a == np.inf).sum()),
          int((a == -np.inf).sum()), int((a == 0).sum()))
f = a[fin]
lo, hi = f.min(), f.max()
d = f.astype(np.float64)
mean, std = d.mean(), d.std()
hist = np.histogram(f, bins=16, range=(lo, hi))
print(f"{time.perf_counter() - t0:.6f}")
PYEOF
}
# v1_write DIR MIB: a float32 tensor f32 of MIB MiB and an int64 tensor i64 of MIB/2 MiB,
# saved by TensorFlow's V1 Saver as DIR/v1.ckpt and as the V2 checkpoint DIR/v2.ckpt
v1_write() {
    TF_CPP_MIN_LOG_LEVEL=3 "$PY" - "$1" "$2" <<'PYEOF'
import os, sys
import numpy as np
import tensorflow as tf
out, mib = sys.argv[1], int(sys.argv[2])
os.makedirs(out, exist_ok=True)
tf.compat.v1.disable_eager_execution()
f = np.arange(mib * (1 << 18), dtype=np.float32) * np.float32(0.5)
i = (np.arange(mib * (1 << 16), dtype=np.int64) * 2654435761) - (1 << 40)
vf = tf.compat.v1.get_variable("f32", initializer=f)
vi = tf.compat.v1.get_variable("i64", initializer=i)
with tf.compat.v1.Session() as s:
    s.run(tf.compat.v1.global_variables_initializer())
    tf.compat.v1.train.Saver(write_version=tf.compat.v1.train.SaverDef.V1).save(
        s, os.path.join(out, "v1.ckpt"), write_meta_graph=False)
    tf.compat.v1.train.Saver().save(s, os.path.join(out, "v2.ckpt"), write_meta_graph=False)
PYEOF
}
# plain_tree MNT: $WORK/plain, the walk's files (variables/ of twalk) copied to a plain directory
# tree, made once (through a mount on MNT)
plain_tree() {
    [ -d "$WORK/plain" ] && return 0
    mount_bg "$WORK/twalk/ckpt" "$1" || return 1
    cp -r "$1/variables" "$WORK/plain" || { echo "bench: copying the walk tree failed" >&2; unmount_wait "$1"; return 1; }
    unmount_wait "$1"
}
has_tf() { [ -x "$PY" ] && "$PY" -c 'import tensorflow' >/dev/null 2>&1; }
# mount_cpu MOUNTPOINT: CPU time (user + system, clock ticks) the mount's processes used so far.
mount_cpu() {
    local pid t=0 c
    for pid in $(mount_pids "$1"); do
        c=$(awk '{ print $14 + $15 }' "/proc/$pid/stat" 2>/dev/null) && t=$((t + c))
    done
    echo "$t"
}

echo "== machine: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); timings are the median of $REPS"
echo "   (shared machines are noisy: read the ratios, each against a baseline from this same run)"
echo "== work dir $WORK"

# ---------------------------------------------------------------------------------------------
# 10: object storage (S3 on moto_server, 127.0.0.1): requests, bytes, read speed
# ---------------------------------------------------------------------------------------------
# 10a. mount of a WALK_TENSORS-tensor checkpoint on S3 to the first successful stat of a
#      tensor's .shape: time and requests (the daemon logs its request counts at unmount)
# 10b. cat of one 16 KiB tensor of a checkpoint that also holds the BIG_GIB tensor: bytes fetched
#      (target: under 1 MiB plus the index)
# 10c. sequential read (bs=1M) of the BIG_GIB tensor through the mount vs one ranged GET of the
#      same bytes with curl from the same server: ratio curl/mount (target >= 0.8), RssAnon
# 10d. tfmount diff of two WALK_TENSORS-tensor checkpoints on S3 (1% differ): time, data bytes
# 10e. what one ranged GET costs moto: 1 MiB, and the whole tensor (10c's curl) - moto copies the
#      whole object for every ranged GET, which bounds any reader that fetches in parts
# 10f. 10c over http:// from nginx (ranges served from the file): ratio curl/mount (>= 0.8), RssAnon;
#      and with -o nocrc (the CRC pass fetches a tensor larger than remote_cache a second time)
# read_big MNT DELAY: reads MNT's big/tensor.bin with dd; sets READ_T (seconds) and READ_RSS
# (the daemon's RssAnon in MiB, sampled DELAY seconds into the read).
read_big() {
    local t0 ddp
    t0=$(now)
    dd if="$1/variables/big/tensor.bin" of=/dev/null bs=1M status=none &
    ddp=$!
    sleep "$2"
    READ_RSS=$(mount_pids "$1" | head -1 | xargs -I{} awk '/^RssAnon:/ { printf "%.1f", $2 / 1024 }' /proc/{}/status)
    wait "$ddp"
    READ_T=$(sub "$t0" "$(now)")
}
bench_remote() {
    echo "== 10: object storage (moto_server on 127.0.0.1)"
    command -v moto_server >/dev/null || { echo "   (moto_server not found: scripts/install-test-servers.sh)"; return; }
    local port home url log t0 r
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    moto_server -H 127.0.0.1 -p "$port" >"$WORK/moto.log" 2>&1 &
    FG_PIDS+=("$!")
    for r in $(seq 100); do curl -s "http://127.0.0.1:$port/" >/dev/null && break; sleep 0.1; done
    url=http://127.0.0.1:$port
    curl -s -X PUT "$url/bench" >/dev/null
    home=$WORK/home
    mkdir -p "$home"
    export AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing AWS_REGION=us-east-1 \
        AWS_ENDPOINT_URL=$url AWS_EC2_METADATA_DISABLED=true HOME=$home
    mk mix --tensors 1 --elems 4096 --big-gib "$BIG_GIB"
    mk twalk_b --tensors "$WALK_TENSORS" --alter-every 100
    put() { curl -s -f -X PUT --upload-file "$1" "$url/bench/$2" >/dev/null || echo "bench: upload $2 failed" >&2; }
    local f
    for f in "$WORK"/twalk/ckpt.* "$WORK"/twalk_b/ckpt.* "$WORK"/mix/ckpt.*; do
        put "$f" "${f#"$WORK"/}"
    done
    new_mountpoint
    local mnt=$MP key small off size
    key=$(key_of "$WORK/twalk.out" last_key)
    # 10a
    log=$WORK/remote_a.log
    t0=$(now)
    RUST_LOG=info "$TFMOUNT" --log-file "$log" s3://bench/twalk/ckpt "$mnt" || return
    stat "$mnt/variables/$key.shape" >/dev/null
    T10A=$(sub "$t0" "$(now)")
    unmount "$mnt"
    sleep 0.5
    R10A=$(sed -n 's/.*requests \([0-9]*\).*/\1/p' "$log" | tail -1)
    printf '   10a: mount to first stat, %s tensors: %s, requests %s\n' "$WALK_TENSORS" "$(ms "$T10A")" "${R10A:-nan}"
    # 10b
    small=$(key_of "$WORK/mix.out" last_key)
    log=$WORK/remote_b.log
    RUST_LOG=info "$TFMOUNT" --log-file "$log" s3://bench/mix/ckpt "$mnt" || return
    cat "$mnt/variables/$small.bin" >/dev/null
    unmount "$mnt"
    sleep 0.5
    B10B=$(sed -n 's/.*bytes fetched \([0-9]*\).*/\1/p' "$log" | tail -1)
    printf '   10b: cat of the 16 KiB tensor %s: bytes fetched %s (index %s bytes)\n' "$small" "${B10B:-nan}" "$(stat -c %s "$WORK/mix/ckpt.index")"
    # 10c: where big/tensor lies in its shard (tensors.tsv: shard and offset columns).
    read -r off size < <("$TFMOUNT" cat "$WORK/mix/ckpt" tensors.tsv | awk -F'\t' '$1 == "big/tensor" { print $8, $4 }')
    local cur=() mnt_t=() rss=nan
    for r in $(seq "${REPS_MOTO:-$REPS}"); do
        t0=$(now)
        curl -s -f --aws-sigv4 "aws:amz:us-east-1:s3" --user testing:testing \
            -r "$off-$((off + size - 1))" "$url/bench/mix/ckpt.data-00000-of-00001" -o /dev/null ||
            echo "bench: curl of the ranged GET failed" >&2
        cur+=("$(sub "$t0" "$(now)")")
        "$TFMOUNT" s3://bench/mix/ckpt "$mnt" || break
        read_big "$mnt" 1
        mnt_t+=("$READ_T")
        rss=$READ_RSS
        unmount "$mnt"
    done
    T10C_CURL=$(median "${cur[@]}")
    T10C_MNT=$(median "${mnt_t[@]:-nan}")
    printf '   10c: %s bytes: curl %s, mount %s, curl/mount %s, daemon RssAnon during the read %s MiB\n' \
        "$size" "$(ms "$T10C_CURL")" "$(ms "$T10C_MNT")" "$(div "$T10C_CURL" "$T10C_MNT")" "$rss"
    # 10d
    t0=$(now)
    "$TFMOUNT" diff --stats s3://bench/twalk/ckpt s3://bench/twalk_b/ckpt >"$WORK/rdiff.out" 2>"$WORK/rdiff.err"
    T10D=$(sub "$t0" "$(now)")
    printf '   10d: diff on S3: %s lines in %s; %s\n' "$(wc -l <"$WORK/rdiff.out")" "$(ms "$T10D")" "$(tail -1 "$WORK/rdiff.err")"
    # 10e: what one ranged GET costs moto, by its length (moto copies the whole object for
    # each ranged GET, so a reader that fetches in parts pays per part what curl pays once).
    local t1m tall
    t0=$(now)
    curl -s -f --aws-sigv4 "aws:amz:us-east-1:s3" --user testing:testing \
        -r "$off-$((off + (1 << 20) - 1))" "$url/bench/mix/ckpt.data-00000-of-00001" -o /dev/null
    t1m=$(sub "$t0" "$(now)")
    printf '   10e: one ranged GET from moto: 1 MiB %s, the whole %s bytes %s (curl, above)\n' "$(ms "$t1m")" "$size" "$(ms "$T10C_CURL")"
    # 10f: the same sequential read over http:// from nginx (Range served from the file), vs one
    # ranged GET of the same bytes with curl from that server.
    local nport ndir ncur=() nmnt=() nnocrc=() nrss=nan
    if command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]; then
        nport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
        ndir=$WORK/nginx
        mkdir -p "$ndir/root" "$ndir/tmp"
        ln -s "$WORK/mix" "$ndir/root/mix"
        cat >"$ndir/nginx.conf" <<NGINX
daemon off;
master_process off;
worker_processes 1;
pid $ndir/nginx.pid;
error_log $ndir/error.log;
events { worker_connections 64; }
http {
  access_log off;
  client_body_temp_path $ndir/tmp;
  proxy_temp_path $ndir/tmp;
  fastcgi_temp_path $ndir/tmp;
  uwsgi_temp_path $ndir/tmp;
  scgi_temp_path $ndir/tmp;
  default_type application/octet-stream;
  server { listen 127.0.0.1:$nport; root $ndir/root; }
}
NGINX
        "$(command -v nginx || echo /usr/sbin/nginx)" -c "$ndir/nginx.conf" -p "$ndir" -e "$ndir/error.log" &
        FG_PIDS+=("$!")
        for r in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$nport/" && break; sleep 0.1; done
        for r in $(seq "$REPS"); do
            cat "$WORK/mix/ckpt.data-00000-of-00001" >/dev/null
            t0=$(now)
            curl -s -f -r "$off-$((off + size - 1))" "http://127.0.0.1:$nport/mix/ckpt.data-00000-of-00001" -o /dev/null ||
                echo "bench: curl from nginx failed" >&2
            ncur+=("$(sub "$t0" "$(now)")")
            "$TFMOUNT" "http://127.0.0.1:$nport/mix/ckpt" "$mnt" || break
            read_big "$mnt" 0.3
            nmnt+=("$READ_T")
            nrss=$READ_RSS
            unmount "$mnt"
            # The same without the CRC pass (-o nocrc): a tensor larger than remote_cache is
            # otherwise fetched twice on its first read (once to check it, once to serve it).
            "$TFMOUNT" -o nocrc "http://127.0.0.1:$nport/mix/ckpt" "$mnt" || break
            read_big "$mnt" 0.3
            nnocrc+=("$READ_T")
            unmount "$mnt"
        done
        T10F_CURL=$(median "${ncur[@]}")
        T10F_MNT=$(median "${nmnt[@]:-nan}")
        T10F_NOCRC=$(median "${nnocrc[@]:-nan}")
        printf '   10f: nginx, %s bytes: curl %s, mount %s, curl/mount %s, daemon RssAnon during the read %s MiB (runs: %s / %s)\n' \
            "$size" "$(ms "$T10F_CURL")" "$(ms "$T10F_MNT")" "$(div "$T10F_CURL" "$T10F_MNT")" "$nrss" "${ncur[*]}" "${nmnt[*]:-}"
        printf '   10f: the same with -o nocrc: mount %s, curl/mount %s (runs: %s)\n' \
            "$(ms "$T10F_NOCRC")" "$(div "$T10F_CURL" "$T10F_NOCRC")" "${nnocrc[*]:-}"
    fi
    echo
    row "10a. S3 mount -> first stat, $WALK_TENSORS tensors" "$(ms "$T10A"), ${R10A:-nan} requests" "a handful" "info"
    row "10b. S3 cat of a 16 KiB tensor: bytes" "${B10B:-nan}" "< 1 MiB + index" "info"
    row "10c. S3 sequential read, curl/mount" "$(div "$T10C_CURL" "$T10C_MNT") (RssAnon $rss MiB)" ">= 0.8" "$(cmp_ok "$(div "$T10C_CURL" "$T10C_MNT")" '>=' 0.8)"
    row "10d. S3 diff of two $WALK_TENSORS-tensor ckpts" "$(ms "$T10D")" "-" "info"
    row "10e. moto: one ranged GET, 1 MiB / whole" "$(ms "$t1m") / $(ms "$T10C_CURL")" "-" "info"
    if [ -n "${T10F_MNT:-}" ]; then
        row "10f. HTTP (nginx) sequential read, curl/mount" "$(div "$T10F_CURL" "$T10F_MNT") (RssAnon $nrss MiB)" ">= 0.8" "$(cmp_ok "$(div "$T10F_CURL" "$T10F_MNT")" '>=' 0.8)"
        row "10f. same, -o nocrc (one fetch)" "$(div "$T10F_CURL" "$T10F_NOCRC")" ">= 0.8" "$(cmp_ok "$(div "$T10F_CURL" "$T10F_NOCRC")" '>=' 0.8)"
    fi
}

# ---------------------------------------------------------------------------------------------
# 11: a ~1 GiB Keras 3 .keras file (real Keras; stored weights member)
# ---------------------------------------------------------------------------------------------
# 11a. `tfmount -f FILE MNT` to the first successful `stat MNT/variables/KEY.shape`, REPS times
#      (median; page cache warm), and what the daemon read for it: /proc/PID/io rchar and syscr
#      of its processes right after that stat (file reads, plus the few FUSE request bytes)
#                                                                                 < 100 ms
# 11b. sequential read (dd bs=1M) of the 256 MiB kernel layers/dense/vars/0 through a fresh
#      mount, cold and warm, vs the same bytes from a fresh memfuse mount     memfuse/mount >= 0.9
# 11c. the daemon's RssAnon while it serves the read of 11b (another fresh mount, sampled every
#      20 ms, the peak)                                                              <= 64 MiB
# keras_python: the first Python that imports keras.
keras_python() {
    local py
    for py in "${KERAS_PYTHON:-}" "${TF_PYTHON:-}" "$HOME/.cache/tfmount-test-venv/bin/python" /work/tfvenv/bin/python; do
        [ -n "$py" ] && [ -x "$py" ] && "$py" -c 'import keras' 2>/dev/null && { echo "$py"; return 0; }
    done
    return 1
}
# kdaemon_io MOUNTPOINT FIELD: the summed /proc/PID/io FIELD of the mount's processes.
kdaemon_io() {
    local pid v total=0
    for pid in $(mount_pids "$1"); do
        v=$(awk -v f="$2:" '$1 == f { print $2 }' "/proc/$pid/io" 2>/dev/null)
        [ -n "$v" ] && total=$((total + v))
    done
    echo "$total"
}
# krss MOUNTPOINT: the summed RssAnon of the mount's processes, KiB.
krss() {
    local pid kib total=0
    for pid in $(mount_pids "$1"); do
        kib=$(awk '/^RssAnon:/ { print $2 }' "/proc/$pid/status" 2>/dev/null)
        [ -n "$kib" ] && total=$((total + kib))
    done
    echo "$total"
}
bench_keras() {
    echo
    echo "== 11: a ~1 GiB Keras 3 .keras file"
    local py kfile key kbytes r t0 t1 n pid pids f v mp ddp peak kib starts=() rchars=() syscrs=() mcold=() mwarm=() cold=() warm=() peaks=()
    K_START=nan K_RCHAR=nan K_SYSCR=nan K_RCOLD=nan K_RWARM=nan K_RSS=nan
    py=$(keras_python) || { echo "   (no Python with keras: set KERAS_PYTHON; scripts/test.sh installs one)"; return; }
    kfile=${KERAS_BENCH_FILE:-$WORK/keras/big.keras}
    if [ ! -f "$kfile" ]; then
        mkdir -p "$(dirname "$kfile")"
        echo "   writing $kfile with Keras ($py)"
        TF_CPP_MIN_LOG_LEVEL=3 "$py" "$REPO/scripts/gen_keras_bench.py" "$kfile" >"$WORK/keras.out" 2>"$WORK/keras.err" \
            || { echo "bench: gen_keras_bench.py failed:" >&2; tail -5 "$WORK/keras.err" >&2; return; }
    fi
    key=layers/dense/vars/0
    echo "   $kfile: $(stat -c %s "$kfile") bytes; $key: $("$TFMOUNT" cat "$kfile" "variables/$key.shape")"
    cat "$kfile" >/dev/null # the page cache warm, for every run alike
    # 11a
    new_mountpoint
    mp=$MP
    for r in $(seq "$REPS"); do
        t0=$(now)
        # shellcheck disable=SC2086
        "$TFMOUNT" -f $TFMOUNT_ARGS "$kfile" "$mp" >/dev/null 2>>"$WORK/keras.daemon.log" &
        pid=$!
        FG_PIDS+=("$pid")
        t1=
        n=0
        while [ $((n += 1)) -lt 200000 ]; do
            if stat "$mp/variables/$key.shape" >/dev/null 2>&1; then
                t1=$(now)
                break
            fi
            kill -0 "$pid" 2>/dev/null || break
        done
        if [ -z "$t1" ]; then
            echo "bench: keras: $key.shape never appeared; daemon log:" >&2
            tail -5 "$WORK/keras.daemon.log" >&2
            unmount_wait "$mp"
            break
        fi
        starts+=("$(sub "$t0" "$t1")")
        rchars+=("$(kdaemon_io "$mp" rchar)")
        syscrs+=("$(kdaemon_io "$mp" syscr)")
        unmount_wait "$mp"
    done
    K_START=$(median "${starts[@]:-nan}")
    K_RCHAR=$(median "${rchars[@]:-nan}")
    K_SYSCR=$(median "${syscrs[@]:-nan}")
    printf '   11a: start -> stat .shape: %s (runs: %s); daemon read %s bytes in %s read calls (runs: %s)\n' \
        "$(ms "$K_START")" "${starts[*]:-}" "$K_RCHAR" "$K_SYSCR" "${rchars[*]:-}"
    # 11b + 11c
    kbytes=$("$TFMOUNT" cat "$kfile" "variables/$key.bin" | tee "$WORK/keras_kernel.bin" | wc -c)
    for r in $(seq "$REPS"); do
        if memfuse_bg "$WORK/keras_kernel.bin" "$mp"; then
            t0=$(now)
            dd if="$mp/data" of=/dev/null bs=1M status=none || echo "bench: memfuse cold dd failed" >&2
            mcold+=("$(sub "$t0" "$(now)")")
            t0=$(now)
            dd if="$mp/data" of=/dev/null bs=1M status=none || echo "bench: memfuse warm dd failed" >&2
            mwarm+=("$(sub "$t0" "$(now)")")
            unmount "$mp"
            wait "$MEMFUSE_PID" 2>/dev/null
        fi
        mount_bg "$kfile" "$mp" || break
        t0=$(now)
        dd if="$mp/variables/$key.bin" of=/dev/null bs=1M status=none || echo "bench: keras cold dd failed" >&2
        cold+=("$(sub "$t0" "$(now)")")
        t0=$(now)
        dd if="$mp/variables/$key.bin" of=/dev/null bs=1M status=none || echo "bench: keras warm dd failed" >&2
        warm+=("$(sub "$t0" "$(now)")")
        unmount_wait "$mp"
        # 11c, on another fresh mount, untimed: sampled with shell builtins only (no process
        # started per sample), the daemon's processes found once.
        mount_bg "$kfile" "$mp" || break
        pids=$(mount_pids "$mp")
        peak=0
        dd if="$mp/variables/$key.bin" of=/dev/null bs=1M status=none &
        ddp=$!
        while kill -0 "$ddp" 2>/dev/null; do
            kib=0
            for pid in $pids; do
                while read -r f v _; do
                    [ "$f" = RssAnon: ] && kib=$((kib + v))
                done <"/proc/$pid/status"
            done
            [ "$kib" -gt "$peak" ] && peak=$kib
            sleep 0.02
        done
        wait "$ddp" || echo "bench: keras dd (11c) failed" >&2
        kib=$(krss "$mp")
        [ "$kib" -gt "$peak" ] && peak=$kib
        peaks+=("$(awk -v k="$peak" 'BEGIN { printf "%.1f", k / 1024 }')")
        unmount_wait "$mp"
    done
    local tm_cold tm_warm tk_cold tk_warm
    tm_cold=$(median "${mcold[@]:-nan}")
    tm_warm=$(median "${mwarm[@]:-nan}")
    tk_cold=$(median "${cold[@]:-nan}")
    tk_warm=$(median "${warm[@]:-nan}")
    K_RCOLD=$(div "$tm_cold" "$tk_cold")
    K_RWARM=$(div "$tm_warm" "$tk_warm")
    K_RSS=$(printf '%s\n' "${peaks[@]:-nan}" | sort -g | tail -1)
    printf '   11b: %s (%s bytes), cold: mount %s %s MB/s, memfuse %s %s MB/s, memfuse/mount %s (runs: %s | %s)\n' \
        "$key" "$kbytes" "$(ms "$tk_cold")" "$(mbps "$kbytes" "$tk_cold")" "$(ms "$tm_cold")" "$(mbps "$kbytes" "$tm_cold")" "$K_RCOLD" "${cold[*]:-}" "${mcold[*]:-}"
    printf '   11b: warm: mount %s %s MB/s, memfuse %s %s MB/s, memfuse/mount %s (runs: %s | %s)\n' \
        "$(ms "$tk_warm")" "$(mbps "$kbytes" "$tk_warm")" "$(ms "$tm_warm")" "$(mbps "$kbytes" "$tm_warm")" "$K_RWARM" "${warm[*]:-}" "${mwarm[*]:-}"
    printf '   11c: daemon RssAnon while reading, peak: %s MiB (runs: %s)\n' "$K_RSS" "${peaks[*]:-}"
    echo
    echo "== summary of 11"
    row "figure" "value" "target" "result"
    row "11a. start -> stat .shape, 1 GiB .keras" "$(ms "$K_START"), read $K_RCHAR B" "< 100 ms" "$(cmp_ok "$K_START" '<' 0.1)"
    row "11b. cold read 256 MiB, memfuse/mount" "$K_RCOLD" ">= 0.9" "$(cmp_ok "$K_RCOLD" '>=' 0.9)"
    row "11b. warm read 256 MiB, memfuse/mount" "$K_RWARM" ">= 0.9" "$(cmp_ok "$K_RWARM" '>=' 0.9)"
    row "11c. RssAnon while reading, peak" "$K_RSS MiB" "<= 64 MiB" "$(cmp_ok "$K_RSS" '<=' 64)"
}

# ---------------------------------------------------------------------------------------------
# 12: direct I/O (-o direct_io): the large-tensor streaming path around the page cache
# ---------------------------------------------------------------------------------------------
# Same repetitions, alternating, each against baselines from this run (big/tensor, BIG_GIB):
# 12a. cold sequential read (dd bs=1M, fresh mount) vs `dd` of the .data file (page cache warm):
#      ratio dd/mount for direct_io=never and =auto                              target >= 0.6
# 12b. the warm re-read (same mount, second dd), same ratio                   target >= 0.9
# 12c. the baselines: memfuse through the page cache, and `memfuse --direct-io` (FOPEN_DIRECT_IO):
#      cold and warm, dd/memfuse
# 12d. what answering OPEN costs the metadata walk (direct_io=auto needs an OPEN per file; never
#      lets the kernel open files by itself): find | xargs cat of the WALK_TENSORS .shape files,
#      auto/never and each against memfuse of the same tree
# 12e. cat, cp (to /dev/shm) and Python's read() of big/tensor.bin on a fresh mount, never vs auto
# With TFMOUNT_BEFORE, 11a/b also for that binary (mounted without -o direct_io).
# ONLY=direct_io runs this section alone.
bench_direct_io() {
    local data=$WORK/big/ckpt.data-00000-of-00001 bytes r v t0 mnt tree
    bytes=$(stat -c %s "$data")
    echo
    echo "== 12: direct I/O: big/tensor ($bytes bytes) and the walk, direct_io=never/auto (fresh mount per run)"
    local -a dd_runs=() mpc=() mpw=() mdc=() mdw=() mfw=()
    local -A cold=() warm=() walk=() tool=()
    local modes=(never auto)
    [ -n "$BEFORE" ] && modes+=(before)
    new_mountpoint
    mnt=$MP
    dio_opts() { # dio_opts MODE: the version and options of a mode (before: that binary's defaults)
        if [ "$1" = before ]; then echo before; else echo "after -o direct_io=$1"; fi
    }
    # The walk's plain tree: section 4's copy, or made here (ONLY=direct_io).
    tree=$WORK/plain
    plain_tree "$mnt" || return
    local ver opts
    for r in $(seq "$REPS"); do
        cat "$data" >/dev/null
        dd_runs+=("$(timed ddr "$data")")
        memfuse_cold_warm "$data" "$mnt" && mpc+=("$MF_COLD") && mpw+=("$MF_WARM")
        memfuse_cold_warm "$data" "$mnt" --direct-io && mdc+=("$MF_COLD") && mdw+=("$MF_WARM")
        for v in "${modes[@]}"; do
            read -r ver opts <<<"$(dio_opts "$v")"
            cold_warm "$WORK/big/ckpt" "$mnt" variables/big/tensor.bin "$ver" "$opts" || break
            cold[$v]+="$CW_COLD "
            warm[$v]+="$CW_WARM "
        done
        mfw+=("$(walk_memfuse "$tree" "$mnt")")
        for v in never auto; do
            walk[$v]+="$(walk_v "$WORK/twalk/ckpt" "$mnt" after "-o direct_io=$v") "
        done
        for v in never auto; do
            mount_v "$WORK/big/ckpt" "$mnt" after "-o direct_io=$v" || break
            tool[cat.$v]+="$(timed cat "$mnt/variables/big/tensor.bin") "
            unmount_wait "$mnt"
            mount_v "$WORK/big/ckpt" "$mnt" after "-o direct_io=$v" || break
            tool[cp.$v]+="$(timed cp "$mnt/variables/big/tensor.bin" /dev/shm/tfmount-bench-cp.$$) "
            rm -f /dev/shm/tfmount-bench-cp.$$
            unmount_wait "$mnt"
            if command -v python3 >/dev/null; then
                mount_v "$WORK/big/ckpt" "$mnt" after "-o direct_io=$v" || break
                tool[py.$v]+="$(timed python3 -c 'import sys; open(sys.argv[1], "rb").read()' "$mnt/variables/big/tensor.bin") "
                unmount_wait "$mnt"
            fi
        done
    done
    local T_DD T_MPC T_MPW T_MDC T_MDW T_MFW
    T_DD=$(median "${dd_runs[@]}")
    T_MPC=$(median "${mpc[@]:-nan}")
    T_MPW=$(median "${mpw[@]:-nan}")
    T_MDC=$(median "${mdc[@]:-nan}")
    T_MDW=$(median "${mdw[@]:-nan}")
    T_MFW=$(median "${mfw[@]:-nan}")
    local -A tc=() tw=() twk=() tt=()
    for v in "${modes[@]}"; do
        # shellcheck disable=SC2086
        tc[$v]=$(median ${cold[$v]:-nan})
        # shellcheck disable=SC2086
        tw[$v]=$(median ${warm[$v]:-nan})
    done
    for v in never auto; do
        # shellcheck disable=SC2086
        twk[$v]=$(median ${walk[$v]:-nan})
        for k in cat cp py; do
            # shellcheck disable=SC2086
            tt[$k.$v]=$(median ${tool[$k.$v]:-nan})
        done
    done
    printf '   dd of .data          : %s  %s MB/s (runs: %s)\n' "$(ms "$T_DD")" "$(mbps "$bytes" "$T_DD")" "${dd_runs[*]}"
    printf '   memfuse              : cold %s  %s MB/s, warm %s  %s MB/s (cold runs: %s)\n' "$(ms "$T_MPC")" "$(mbps "$bytes" "$T_MPC")" "$(ms "$T_MPW")" "$(mbps "$bytes" "$T_MPW")" "${mpc[*]:-}"
    printf '   memfuse --direct-io  : cold %s  %s MB/s, warm %s  %s MB/s (cold runs: %s)\n' "$(ms "$T_MDC")" "$(mbps "$bytes" "$T_MDC")" "$(ms "$T_MDW")" "$(mbps "$bytes" "$T_MDW")" "${mdc[*]:-}"
    for v in "${modes[@]}"; do
        printf '   tfmount %-12s : cold %s  %s MB/s  dd/mount %s, warm %s  %s MB/s  dd/mount %s (runs: %s/ %s)\n' "$v" \
            "$(ms "${tc[$v]}")" "$(mbps "$bytes" "${tc[$v]}")" "$(div "$T_DD" "${tc[$v]}")" \
            "$(ms "${tw[$v]}")" "$(mbps "$bytes" "${tw[$v]}")" "$(div "$T_DD" "${tw[$v]}")" "${cold[$v]:-}" "${warm[$v]:-}"
    done
    printf '   walk, %s tensors    : memfuse %s, never %s, auto %s (runs: %s/ %s)\n' "$WALK_TENSORS" "$(ms "$T_MFW")" \
        "$(ms "${twk[never]}")" "$(ms "${twk[auto]}")" "${walk[never]:-}" "${walk[auto]:-}"
    for k in cat cp py; do
        printf '   %-4s of the .bin     : never %s, auto %s (runs: %s/ %s)\n' "$k" "$(ms "${tt[$k.never]}")" "$(ms "${tt[$k.auto]}")" "${tool[$k.never]:-}" "${tool[$k.auto]:-}"
    done
    echo
    echo "== summary of 12 (median of $REPS)"
    row "figure" "value" "target" "result"
    local rc rw
    for v in "${modes[@]}"; do
        rc=$(div "$T_DD" "${tc[$v]}")
        rw=$(div "$T_DD" "${tw[$v]}")
        row "12a. cold read, dd/mount ($v)" "$rc ($(mbps "$bytes" "${tc[$v]}") vs $(mbps "$bytes" "$T_DD") MB/s)" ">= 0.6" "$(cmp_ok "$rc" '>=' 0.6)"
        row "12b. warm re-read, dd/mount ($v)" "$rw ($(mbps "$bytes" "${tw[$v]}") MB/s)" ">= 0.9" "$(cmp_ok "$rw" '>=' 0.9)"
    done
    row "12a. cold read, auto / never (speed-up)" "$(div "${tc[never]}" "${tc[auto]}")" "-" "info"
    row "12c. memfuse cold, dd/memfuse" "$(div "$T_DD" "$T_MPC") ($(mbps "$bytes" "$T_MPC") MB/s)" "-" "info"
    row "12c. memfuse --direct-io cold, dd/memfuse" "$(div "$T_DD" "$T_MDC") ($(mbps "$bytes" "$T_MDC") MB/s)" "-" "info"
    row "12c. memfuse --direct-io / auto, cold" "$(div "$T_MDC" "${tc[auto]}")" "-" "info"
    row "12d. walk, auto/never (OPEN per file)" "$(div "${twk[auto]}" "${twk[never]}")" "-" "info"
    row "12d. walk, never/memfuse; auto/memfuse" "$(div "${twk[never]}" "$T_MFW"); $(div "${twk[auto]}" "$T_MFW")" "<= 1.1" "info"
    for k in cat cp py; do
        row "12e. $k of the .bin, never/auto" "$(div "${tt[$k.never]}" "${tt[$k.auto]}") ($(ms "${tt[$k.never]}") / $(ms "${tt[$k.auto]}"))" "-" "info"
    done
}

# ---------------------------------------------------------------------------------------------
# 13: one fetch per byte over http:// with the CRC on (bench_stream_crc; ONLY=stream_crc alone)
# ---------------------------------------------------------------------------------------------
# A 256 MiB and a BIG_GIB float32 tensor served by nginx over http://, read sequentially
# (dd bs=1M, fresh mount each run) against one curl of the same bytes from the same server:
# 13a. 256 MiB, default options (CRC on: checked while streamed)       curl/mount, target >= 0.9
# 13b. the same, nginx with `limit_rate 100m` per connection (as object stores cap one
#      connection), vs one curl stream: the mount's parallel ranged GETs  target >= 3
# 13c. BIG_GIB tensor: default / -o nocrc / -o remote_cache=2G, mount/curl (time ratio,
#      target <= 1.1 for the default: one fetch)
# Each read also with -o crc_first (the check-first pass: the behaviour before streaming), with
# -o direct_io=auto (the reply copied straight into the reader's buffer, no page cache), and,
# with TFMOUNT_BEFORE, with that binary's defaults: before and after from the same repetitions,
# alternating. The daemon's "bytes fetched" (logged at unmount) shows one fetch per byte.
sc_nginx() { # sc_nginx NAME DIRECTIVES: starts nginx serving $WORK; sets SC_PORT
    local d=$WORK/sc_$1 r
    mkdir -p "$d/tmp"
    SC_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    cat >"$d/nginx.conf" <<NGINX
daemon off;
master_process off;
worker_processes 1;
pid $d/nginx.pid;
error_log $d/error.log;
events { worker_connections 256; }
http {
  access_log off;
  client_body_temp_path $d/tmp;
  proxy_temp_path $d/tmp;
  fastcgi_temp_path $d/tmp;
  uwsgi_temp_path $d/tmp;
  scgi_temp_path $d/tmp;
  default_type application/octet-stream;
  server { listen 127.0.0.1:$SC_PORT; root $WORK; $2 }
}
NGINX
    "$(command -v nginx || echo /usr/sbin/nginx)" -c "$d/nginx.conf" -p "$d" -e "$d/error.log" &
    FG_PIDS+=("$!")
    for r in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$SC_PORT/" && break; sleep 0.1; done
}
# sc_read BIN OPTS URL: a fresh mount of URL, dd of big/tensor.bin; sets SC_T (seconds) and
# SC_BYTES (bytes fetched, from the daemon's log at unmount)
sc_read() {
    local log=$WORK/sc_read.$RANDOM.log t0 i
    new_mountpoint
    # shellcheck disable=SC2086
    RUST_LOG=info "$1" $2 --log-file "$log" "$3" "$MP" || { SC_T=nan; SC_BYTES=nan; return; }
    t0=$(now)
    dd if="$MP/variables/big/tensor.bin" of=/dev/null bs=1M status=none || echo "bench: read of $3 failed" >&2
    SC_T=$(sub "$t0" "$(now)")
    unmount "$MP"
    for i in $(seq 50); do grep -q 'bytes fetched' "$log" 2>/dev/null && break; sleep 0.1; done
    SC_BYTES=$(sed -n 's/.*bytes fetched \([0-9]*\).*/\1/p' "$log" | tail -1)
}
bench_stream_crc() {
    echo "== 13: one fetch per byte over http:// with the CRC on (nginx, 127.0.0.1)"
    command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || { echo "   (nginx not found)"; return; }
    [ -d "$WORK/sc256" ] || mk sc256 --tensors 0 --big-gib 0.25
    [ -d "$WORK/big" ] || mk big --tensors 0 --big-gib "$BIG_GIB"
    sc_nginx plain ""
    local plain=$SC_PORT
    sc_nginx capped "limit_rate 100m;"
    local capped=$SC_PORT
    # variants: label|binary|options|port|checkpoint
    local variants=(
        "256|$TFMOUNT||$plain|sc256"
        "256 crc_first|$TFMOUNT|-o crc_first|$plain|sc256"
        "256 direct_io=auto|$TFMOUNT|-o direct_io=auto|$plain|sc256"
        "256 capped|$TFMOUNT||$capped|sc256"
        "256 capped crc_first|$TFMOUNT|-o crc_first|$capped|sc256"
        "big|$TFMOUNT||$plain|big"
        "big crc_first|$TFMOUNT|-o crc_first|$plain|big"
        "big nocrc|$TFMOUNT|-o nocrc|$plain|big"
        "big direct_io=auto|$TFMOUNT|-o direct_io=auto|$plain|big"
        "big remote_cache=2G|$TFMOUNT|-o remote_cache=2G|$plain|big"
        "big remote_cache=2G crc_first|$TFMOUNT|-o remote_cache=2G,crc_first|$plain|big"
    )
    if [ -n "$BEFORE" ]; then
        variants+=(
            "256 before|$BEFORE||$plain|sc256"
            "256 capped before|$BEFORE||$capped|sc256"
            "big before|$BEFORE||$plain|big"
            "big remote_cache=2G before|$BEFORE|-o remote_cache=2G|$plain|big"
        )
    fi
    declare -A T B OFF SIZE
    local r v label bin opts port ck t0 key
    for ck in sc256 big; do
        read -r "OFF[$ck]" "SIZE[$ck]" < <("$TFMOUNT" cat "$WORK/$ck/ckpt" tensors.tsv | awk -F'\t' '$1 == "big/tensor" { print $8, $4 }')
    done
    for r in $(seq "$REPS"); do
        cat "$WORK"/sc256/ckpt.data-* "$WORK"/big/ckpt.data-* >/dev/null
        # Baselines: one curl stream of the tensor's bytes, plain and capped, in this repetition.
        for key in "sc256 $plain" "sc256 $capped" "big $plain"; do
            read -r ck port <<<"$key"
            t0=$(now)
            curl -s -f -r "${OFF[$ck]}-$((OFF[$ck] + SIZE[$ck] - 1))" "http://127.0.0.1:$port/$ck/ckpt.data-00000-of-00001" -o /dev/null ||
                echo "bench: curl failed" >&2
            T["curl $key"]="${T["curl $key"]:-} $(sub "$t0" "$(now)")"
        done
        for v in "${variants[@]}"; do
            IFS='|' read -r label bin opts port ck <<<"$v"
            sc_read "$bin" "$opts" "http://127.0.0.1:$port/$ck/ckpt"
            T[$label]="${T[$label]:-} $SC_T"
            B[$label]=$SC_BYTES
        done
    done
    local c256 c256cap cbig base t
    # shellcheck disable=SC2086
    c256=$(median ${T["curl sc256 $plain"]}) c256cap=$(median ${T["curl sc256 $capped"]}) cbig=$(median ${T["curl big $plain"]})
    printf '   12: curl: 256 MiB %s, 256 MiB capped at 100m %s, %s GiB %s (runs: %s |%s |%s)\n' "$(ms "$c256")" "$(ms "$c256cap")" "$BIG_GIB" "$(ms "$cbig")" \
        "${T["curl sc256 $plain"]}" "${T["curl sc256 $capped"]}" "${T["curl big $plain"]}"
    echo
    for v in "${variants[@]}"; do
        IFS='|' read -r label bin opts port ck <<<"$v"
        # shellcheck disable=SC2086
        t=$(median ${T[$label]})
        case $label in
            *capped*) base=$c256cap ;;
            256*) base=$c256 ;;
            *) base=$cbig ;;
        esac
        case $label in
            big*) row "13c. $label: mount/curl" "$(div "$t" "$base") ($(ms "$t"))" "one fetch: <= 1.1" "fetched ${B[$label]:-nan} B; runs:${T[$label]}" ;;
            *capped*) row "13b. $label: curl/mount" "$(div "$base" "$t") ($(ms "$t"))" ">= 3" "fetched ${B[$label]:-nan} B; runs:${T[$label]}" ;;
            *) row "13a. $label: curl/mount" "$(div "$base" "$t") ($(ms "$t"))" ">= 0.9" "fetched ${B[$label]:-nan} B; runs:${T[$label]}" ;;
        esac
    done
}

# ---------------------------------------------------------------------------------------------
# issue 19: every row of its table, TFMOUNT_BEFORE and this tree (ONLY=issue19)
# ---------------------------------------------------------------------------------------------
# Each repetition takes the baselines once (dd of the data file, memfuse through the page cache
# and with FOPEN_DIRECT_IO, curl of the tensor's bytes from nginx plain and capped at
# `limit_rate 100m`, numpy's statistics, memfuse's walk), then measures both binaries, in
# alternating order, with the helpers above and section 13's sc_read. "after" reads the 1 GiB
# tensor with -o direct_io=auto (the cold row, the memfuse FOPEN_DIRECT_IO row, the "no page
# cache" warm row) and with the default direct_io=never (the page-cache rows, the warm row with
# the target); "before" has only the page cache. The table: row, before, after, target,
# PASS/MISS (after).
bench_issue19() {
    local data=$WORK/big/ckpt.data-00000-of-00001 mnt r v order big_n
    echo "== issue 19: before ($BEFORE) and after ($TFMOUNT), $REPS repetitions, alternating"
    [ -d "$WORK/sc256" ] || mk sc256 --tensors 0 --big-gib 0.25
    new_mountpoint
    mnt=$MP
    plain_tree "$mnt" || return
    local v1=
    if has_tf; then
        v1_write "$WORK/v1" 128 >/dev/null && v1=$WORK/v1 # int64: 64 MiB
    else
        echo "   (no Python with TensorFlow at $PY: no V1 row; set TF_PYTHON)"
    fi
    local nginx=
    if command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]; then
        sc_nginx plain ""
        local plain=$SC_PORT
        sc_nginx capped "limit_rate 100m;"
        local capped=$SC_PORT
        nginx=yes
    else
        echo "   (nginx not found: no HTTP rows)"
    fi
    declare -A OFF SIZE S
    local ck
    for ck in sc256 big; do
        read -r "OFF[$ck]" "SIZE[$ck]" < <("$TFMOUNT" cat "$WORK/$ck/ckpt" tensors.tsv | awk -F'\t' '$1 == "big/tensor" { print $8, $4 }')
    done
    big_n=$((SIZE[big] / 4))
    put() { S[$1]+="$2 "; }
    curl_t() { # curl_t CHECKPOINT PORT: prints the seconds of one curl of big/tensor's bytes
        timed curl -s -f -r "${OFF[$1]}-$((OFF[$1] + SIZE[$1] - 1))" "http://127.0.0.1:$2/$1/ckpt.data-00000-of-00001" -o /dev/null
    }
    bin_of() { if [ "$1" = before ]; then echo "$BEFORE"; else echo "$TFMOUNT"; fi; }
    for r in $(seq "$REPS"); do
        cat "$data" "$WORK"/sc256/ckpt.data-* >/dev/null
        put dd "$(timed ddr "$data")"
        memfuse_cold_warm "$data" "$mnt" && put mf.pc "$MF_COLD" && put mf.pcwarm "$MF_WARM"
        memfuse_cold_warm "$data" "$mnt" --direct-io && put mf.dio "$MF_COLD"
        put mf.walk "$(walk_memfuse "$WORK/plain" "$mnt")"
        # The like-for-like floor: memfuse in a session of its own, as tfmount's daemon is.
        put mf.swalk "$(MEMFUSE_SETSID=1 walk_memfuse "$WORK/plain" "$mnt")"
        put numpy "$(numpy_stats "$data" "${OFF[big]}" "$big_n")"
        if [ -n "$nginx" ]; then
            put curl.256 "$(curl_t sc256 "$plain")"
            put curl.cap "$(curl_t sc256 "$capped")"
            put curl.big "$(curl_t big "$plain")"
        fi
        order=(before after)
        [ $((r % 2)) = 0 ] && order=(after before)
        for v in "${order[@]}"; do
            if [ "$v" = after ]; then
                cold_warm "$WORK/big/ckpt" "$mnt" variables/big/tensor.bin after "-o direct_io=auto"
                put cold.$v "$CW_COLD"
                put warm.$v "$CW_WARM"
                cold_warm "$WORK/big/ckpt" "$mnt" variables/big/tensor.bin after "-o direct_io=never"
                put pc.$v "$CW_COLD"
                put pcwarm.$v "$CW_WARM"
            else
                cold_warm "$WORK/big/ckpt" "$mnt" variables/big/tensor.bin before
                put cold.$v "$CW_COLD"
                put warm.$v "$CW_WARM"
                put pc.$v "$CW_COLD"
                put pcwarm.$v "$CW_WARM"
            fi
            if [ -n "$nginx" ]; then
                sc_read "$(bin_of $v)" "" "http://127.0.0.1:$plain/sc256/ckpt" && put h256.$v "$SC_T"
                sc_read "$(bin_of $v)" "" "http://127.0.0.1:$capped/sc256/ckpt" && put hcap.$v "$SC_T"
                sc_read "$(bin_of $v)" "" "http://127.0.0.1:$plain/big/ckpt" && put hbig.$v "$SC_T"
                sc_read "$(bin_of $v)" "-o nocrc" "http://127.0.0.1:$plain/big/ckpt" && put hnocrc.$v "$SC_T"
                sc_read "$(bin_of $v)" "-o remote_cache=2G" "http://127.0.0.1:$plain/big/ckpt" && put hrc.$v "$SC_T"
            fi
            put stats.$v "$(stats_v "$WORK/big/ckpt" "$mnt" big/tensor $v)"
            if [ -n "$v1" ]; then
                put v1.$v "$(read_v "$v1/v1.ckpt" "$mnt" variables/i64.bin $v)"
                put v2.$v "$(read_v "$v1/v2.ckpt" "$mnt" variables/i64.bin $v)"
            fi
            put walk.$v "$(walk_v "$WORK/twalk/ckpt" "$mnt" $v)"
        done
    done
    declare -A M
    medians seconds
    if cmp -s "$WORK/stats.before.txt" "$WORK/stats.after.txt"; then
        echo "   stats/big/tensor.txt: the same text before and after"
    else
        echo "   stats/big/tensor.txt differs before / after:"
        diff "$WORK/stats.before.txt" "$WORK/stats.after.txt" | sed 's/^/     /'
    fi
    local mb_dd mb_pc mb_dio mb_pcw
    mb_dd=$(mbps "${SIZE[big]}" "${M[dd]}")
    mb_pc=$(mbps "${SIZE[big]}" "${M[mf.pc]:-nan}")
    mb_pcw=$(mbps "${SIZE[big]}" "${M[mf.pcwarm]:-nan}")
    mb_dio=$(mbps "${SIZE[big]}" "${M[mf.dio]:-nan}")
    echo
    echo "== issue 19 table (median of $REPS; load now $(cut -d' ' -f1-3 /proc/loadavg))"
    # t19 LABEL BEFORE AFTER OP TARGET: one row; PASS/MISS of the after column ("info" without OP)
    t19() {
        local res=info
        [ -n "${4:-}" ] && res=$(cmp_ok "$3" "$4" "$5")
        printf '%-66s %-10s %-10s %-9s %s\n' "$1" "$2" "$3" "${4:+$4 ${5:-}}" "$res"
    }
    # ratio A B per version: A/B with A and B keys ("=KEY" for a baseline shared by both)
    ratio() {
        local a=$1 b=$2 v=$3
        [ "${a#=}" != "$a" ] && a=${M[${a#=}]:-nan} || a=${M[$a.$v]:-nan}
        [ "${b#=}" != "$b" ] && b=${M[${b#=}]:-nan} || b=${M[$b.$v]:-nan}
        div "$a" "$b"
    }
    both() { echo "$(ratio "$1" "$2" before) $(ratio "$1" "$2" after)"; }
    local rb ra
    printf '%-66s %-10s %-10s %-9s %s\n' "figure (ratios; the baseline of this run)" "before" "after" "target" "result"
    read -r rb ra <<<"$(both =dd cold)"
    t19 "cold read 1 GiB, dd/mount (dd $mb_dd MB/s; after: direct_io=auto)" "$rb" "$ra" '>=' 0.6
    read -r rb ra <<<"$(both =dd pcwarm)"
    t19 "warm re-read, dd/mount (default direct_io=never: the page cache)" "$rb" "$ra" '>=' 0.9
    read -r rb ra <<<"$(both =mf.pcwarm pcwarm)"
    t19 "same: memfuse page cache warm ($mb_pcw MB/s) / mount" "$rb" "$ra"
    read -r rb ra <<<"$(both =dd warm)"
    t19 "warm re-read, dd/mount (after: direct_io=auto, no page cache)" "$rb" "$ra"
    read -r rb ra <<<"$(both =mf.pc pc)"
    t19 "page cache, cold: memfuse ($mb_pc MB/s) / mount" "$rb" "$ra"
    read -r rb ra <<<"$(both =mf.dio cold)"
    t19 "memfuse FOPEN_DIRECT_IO cold ($mb_dio MB/s) / mount cold" "$rb" "$ra"
    if [ -n "$nginx" ]; then
        read -r rb ra <<<"$(both =curl.256 h256)"
        t19 "256 MiB over http://, curl ($(ms "${M[curl.256]}")) / mount" "$rb" "$ra" '>=' 0.9
        read -r rb ra <<<"$(both =curl.cap hcap)"
        t19 "same, nginx limit_rate 100m: one curl ($(ms "${M[curl.cap]}")) / mount" "$rb" "$ra" '>=' 3
        read -r rb ra <<<"$(both hbig =curl.big)"
        t19 "1 GiB over http://, default: mount / curl ($(ms "${M[curl.big]}"))" "$rb" "$ra" '<=' 1.1
        read -r rb ra <<<"$(both hnocrc =curl.big)"
        t19 "1 GiB over http://, -o nocrc: mount / curl" "$rb" "$ra" '<=' 1.1
        read -r rb ra <<<"$(both hrc =curl.big)"
        t19 "1 GiB over http://, -o remote_cache=2G: mount / curl" "$rb" "$ra" '<=' 1.1
    fi
    read -r rb ra <<<"$(both =numpy stats)"
    t19 "stats/ of 1 GiB float32: numpy ($(ms "${M[numpy]}")) / mount" "$rb" "$ra" '>=' 5
    if [ -n "$v1" ]; then
        read -r rb ra <<<"$(both v2 v1)"
        t19 "64 MiB int64 saved by TF's V1 saver: V2 / V1 read time" "$rb" "$ra" '>=' 0.7
    fi
    read -r rb ra <<<"$(both walk =mf.walk)"
    t19 "walk of $WALK_TENSORS tensors: mount / memfuse ($(ms "${M[mf.walk]}"))" "$rb" "$ra"
    read -r rb ra <<<"$(both walk =mf.swalk)"
    t19 "same: mount / memfuse in its own session ($(ms "${M[mf.swalk]}"))" "$rb" "$ra" '<=' 1.1
    echo "   (times: stats before $(ms "${M[stats.before]:-nan}"), after $(ms "${M[stats.after]:-nan}"); cold before $(ms "${M[cold.before]:-nan}"), after $(ms "${M[cold.after]:-nan}"))"
}

# ---------------------------------------------------------------------------------------------
# 20: the mount at FUSE's floor (bench_floor; ONLY=floor runs this section alone; TFMOUNT_BEFORE
# is measured in the same repetitions, alternating, when set). Each against memfuse serving the
# same bytes from memory (examples/memfuse.rs, same kernel settings), fresh mounts, medians:
# 20a. safetensors' load_file of MNT/model.safetensors of a 524 MiB checkpoint of 338 tensors
#      (scripts/bench_python.py write: TensorFlow's writer; without TensorFlow, mkckpt's 338
#      tensors of 1.55 MiB) vs load_file of memfuse serving a copy of that model.safetensors
#                                                                      memfuse / mount >= 0.9
#      (a plain local file, for scale)
# 20b. cold dd bs=1M of the BIG_GIB tensor's .bin (page cache) vs memfuse cold     >= 0.9
# 20c. the same with -o direct_io=auto vs memfuse --direct-io                      >= 0.9
# 20d. warm re-read, memfuse warm / mount                                          >= 0.95
# 20e. the daemon's CPU (user + system, /proc/PID/stat) per GiB served in 20b and 20a
# ---------------------------------------------------------------------------------------------
bench_floor() {
    echo
    echo "== 20: the mount at FUSE's floor, vs memfuse; $REPS repetitions${BEFORE:+, before ($BEFORE) and after alternating}"
    local data=$WORK/big/ckpt.data-00000-of-00001 mnt r v order py=$WORK/floorpy st cpu0
    [ -d "$WORK/big" ] || mk big --tensors 0 --big-gib "$BIG_GIB"
    if "$CPY" -c 'import tensorflow, h5py, safetensors' 2>/dev/null; then
        "$CPY" "$REPO/scripts/bench_python.py" write "$py" 2>/dev/null | tail -1 | sed 's/^/   /'
    else
        echo "   (no TensorFlow in $CPY: mkckpt's 338 tensors instead of TensorFlow's writer)"
        mkdir -p "$py" && "$MKCKPT" "$py/ckpt" --tensors 338 --elems 406000 --depth 1 >/dev/null
    fi
    new_mountpoint
    mnt=$MP
    mount_bg "$py/ckpt" "$mnt" && cp "$mnt/model.safetensors" "$WORK/floor.safetensors"
    unmount_wait "$mnt"
    st=$WORK/floor.safetensors
    [ -s "$st" ] || { echo "   (could not copy model.safetensors)"; return; }
    local st_bytes big_bytes
    st_bytes=$(stat -c %s "$st")
    big_bytes=$(stat -c %s "$data")
    declare -A S
    put() { S[$1]+="$2 "; }
    lf_t() { # lf_t FILE: load_file's seconds, timed in the process after its imports
        "$CPY" -c 'import sys, time
from safetensors.numpy import load_file
t = time.perf_counter(); d = load_file(sys.argv[1]); print("%.6f" % (time.perf_counter() - t))' "$1"
    }
    cpu_of() { mount_cpu "$1"; } # clock ticks of the mount's processes so far
    for r in $(seq "$REPS"); do
        cat "$data" "$py"/ckpt.* "$st" >/dev/null
        memfuse_cold_warm "$data" "$mnt" && put mf.cold "$MF_COLD" && put mf.warm "$MF_WARM"
        memfuse_cold_warm "$data" "$mnt" --direct-io && put mf.dio "$MF_COLD"
        if memfuse_bg "$st" "$mnt"; then
            put mf.lf "$(lf_t "$mnt/data")"
            unmount "$mnt"
            wait "$MEMFUSE_PID" 2>/dev/null
        fi
        put plain.lf "$(lf_t "$st")"
        order=(after)
        [ -n "$BEFORE" ] && order=(before after) && [ $((r % 2)) = 0 ] && order=(after before)
        for v in "${order[@]}"; do
            mount_v "$WORK/big/ckpt" "$mnt" "$v" "-o direct_io=never" || continue
            cpu0=$(cpu_of "$mnt")
            put cold.$v "$(timed ddr "$mnt/variables/big/tensor.bin")"
            put cpu.$v "$(( $(cpu_of "$mnt") - cpu0 ))"
            put warm.$v "$(timed ddr "$mnt/variables/big/tensor.bin")"
            unmount_wait "$mnt"
            mount_v "$WORK/big/ckpt" "$mnt" "$v" "-o direct_io=auto" || continue
            put dio.$v "$(timed ddr "$mnt/variables/big/tensor.bin")"
            unmount_wait "$mnt"
            mount_v "$py/ckpt" "$mnt" "$v" || continue
            cpu0=$(cpu_of "$mnt")
            put lf.$v "$(lf_t "$mnt/model.safetensors")"
            put lfcpu.$v "$(( $(cpu_of "$mnt") - cpu0 ))"
            unmount_wait "$mnt"
        done
    done
    declare -A M
    medians "seconds; cpu: clock ticks of $(getconf CLK_TCK) per second"
    echo "   (load now $(cut -d' ' -f1-3 /proc/loadavg))"
    t20() { # t20 LABEL VALUE OP TARGET
        local res=info
        [ -n "${3:-}" ] && res=$(cmp_ok "$2" "$3" "$4")
        printf '   %-74s %-8s %-9s %s\n' "$1" "$2" "${3:+$3 $4}" "$res"
    }
    cpu_gib() { # cpu_gib TICKS BYTES: CPU seconds per GiB served
        awk -v t="$1" -v n="$2" -v hz="$(getconf CLK_TCK)" -v re="$NUM" 'BEGIN {
            if (t !~ re) print "nan"; else printf "%.3f", t / hz / (n / 1073741824) }'
    }
    local vs=(after)
    [ -n "$BEFORE" ] && vs=(before after)
    for v in "${vs[@]}"; do
        echo "   -- $v"
        t20 "20a load_file 524 MiB: memfuse ($(ms "${M[mf.lf]}")) / mount ($(ms "${M[lf.$v]:-nan}")); plain $(ms "${M[plain.lf]}")" \
            "$(div "${M[mf.lf]}" "${M[lf.$v]:-nan}")" '>=' 0.9
        t20 "20b cold dd 1 GiB, page cache: memfuse ($(mbps "$big_bytes" "${M[mf.cold]}") MB/s) / mount ($(mbps "$big_bytes" "${M[cold.$v]:-nan}") MB/s)" \
            "$(div "${M[mf.cold]}" "${M[cold.$v]:-nan}")" '>=' 0.9
        t20 "20c cold dd, direct_io=auto: memfuse --direct-io ($(mbps "$big_bytes" "${M[mf.dio]}") MB/s) / mount" \
            "$(div "${M[mf.dio]}" "${M[dio.$v]:-nan}")" '>=' 0.9
        t20 "20d warm re-read: memfuse ($(mbps "$big_bytes" "${M[mf.warm]}") MB/s) / mount" \
            "$(div "${M[mf.warm]}" "${M[warm.$v]:-nan}")" '>=' 0.95
        t20 "20e daemon CPU s per GiB served: 20b's cold read" "$(cpu_gib "${M[cpu.$v]:-nan}" "$big_bytes")"
        t20 "20e daemon CPU s per GiB served: 20a's load_file" "$(cpu_gib "${M[lfcpu.$v]:-nan}" "$st_bytes")"
    done
    echo "   dd of the data file itself: $(mbps "$big_bytes" "$(timed ddr "$data")") MB/s (for scale)"
}

# ---------------------------------------------------------------------------------------------
# 22: a TF.js model at FUSE's floor (bench_tfjs_floor; ONLY=tfjs_floor; TFMOUNT_BEFORE measured
# in the same repetitions, alternating, when set): a layers-model whose one float32 weight of
# 1 GiB is stored as the converter stores weights, in shards of 4 MiB (256 of them; random bytes:
# only the layout matters), cold dd bs=1M of its .bin through a fresh mount vs memfuse serving the
# same bytes as one file                                                    memfuse / mount >= 0.9
# ---------------------------------------------------------------------------------------------
bench_tfjs_floor() {
    echo
    echo "== 22: a TF.js weight of 1 GiB in 256 shards, cold dd vs memfuse; $REPS repetitions${BEFORE:+, before ($BEFORE) and after alternating}"
    local dir=$WORK/tfjs_floor mnt r v order
    if [ ! -s "$dir/whole" ]; then
        mkdir -p "$dir"
        python3 - "$dir" <<'PY' || die "writing the TF.js model failed"
import json, os, sys
d, n, shard = sys.argv[1], 256, 4 << 20
paths = [f"group1-shard{i + 1}of{n}.bin" for i in range(n)]
with open(os.path.join(d, "whole"), "wb") as whole:
    for p in paths:
        b = os.urandom(shard)
        with open(os.path.join(d, p), "wb") as f:
            f.write(b)
        whole.write(b)
weights = [{"name": "big/kernel", "shape": [n * shard // 4], "dtype": "float32"}]
model = {"format": "layers-model", "generatedBy": "bench.sh", "convertedBy": None,
         "modelTopology": {}, "weightsManifest": [{"paths": paths, "weights": weights}]}
with open(os.path.join(d, "model.json"), "w") as f:
    json.dump(model, f)
PY
    fi
    local bytes
    bytes=$(stat -c %s "$dir/whole")
    new_mountpoint
    mnt=$MP
    declare -A S
    put() { S[$1]+="$2 "; }
    for r in $(seq "$REPS"); do
        cat "$dir"/* >/dev/null
        memfuse_cold_warm "$dir/whole" "$mnt" && put mf.cold "$MF_COLD"
        order=(after)
        [ -n "$BEFORE" ] && order=(before after) && [ $((r % 2)) = 0 ] && order=(after before)
        for v in "${order[@]}"; do
            mount_v "$dir/model.json" "$mnt" "$v" || continue
            cpu0=$(mount_cpu "$mnt")
            put cold.$v "$(timed ddr "$mnt/variables/big/kernel.bin")"
            put cpu.$v "$(($(mount_cpu "$mnt") - cpu0))"
            unmount_wait "$mnt"
        done
    done
    declare -A M
    medians "seconds; cpu: clock ticks of $(getconf CLK_TCK) per second"
    echo "   (load now $(cut -d' ' -f1-3 /proc/loadavg))"
    local vs=(after)
    [ -n "$BEFORE" ] && vs=(before after)
    for v in "${vs[@]}"; do
        printf '   %-74s %-8s %-9s %s\n' \
            "22 ($v) cold dd: memfuse ($(mbps "$bytes" "${M[mf.cold]}") MB/s) / mount ($(mbps "$bytes" "${M[cold.$v]:-nan}") MB/s)" \
            "$(div "${M[mf.cold]}" "${M[cold.$v]:-nan}")" '>= 0.9' "$(cmp_ok "$(div "${M[mf.cold]}" "${M[cold.$v]:-nan}")" '>=' 0.9)"
        echo "   22 ($v) the daemon's CPU: ${M[cpu.$v]:-nan} clock ticks for the 1 GiB"
    done
}

# ---------------------------------------------------------------------------------------------
# 21: diff by value (bench_diff_values; ONLY=diff_values runs this section alone): two
# checkpoints of 256 float32 tensors of 4 MiB (1 GiB each) whose every tensor differs
# (mkckpt --alter-every 1): `tfmount diff --values A B` vs `cat` of both data files, page cache
# warm                                                        cat / diff --values >= 0.5 (issue 31)
# ---------------------------------------------------------------------------------------------
# diff_values_ok A B: tfmount diff --values A B, its status 1 (differences) a success
diff_values_ok() {
    local rc=0
    "$TFMOUNT" diff --values "$1" "$2" >/dev/null || rc=$?
    [ "$rc" -le 1 ]
}
bench_diff_values() {
    echo
    echo "== 21: diff --values of two 1 GiB checkpoints, every tensor changed, vs cat of both"
    mkdir -p "$WORK/dv"
    "$MKCKPT" "$WORK/dv/a" --tensors 256 --elems 1048576 --depth 2 >/dev/null || die "mkckpt dv/a failed"
    "$MKCKPT" "$WORK/dv/b" --tensors 256 --elems 1048576 --depth 2 --alter-every 1 >/dev/null ||
        die "mkckpt dv/b failed"
    local r runs_d=() runs_c=() lines
    lines=$("$TFMOUNT" diff --values "$WORK/dv/a" "$WORK/dv/b" | grep -c '^M')
    for r in $(seq "$REPS"); do
        cat "$WORK"/dv/*.data-* >/dev/null
        runs_c+=("$(timed cat "$WORK"/dv/a.data-00000-of-00001 "$WORK"/dv/b.data-00000-of-00001)")
        runs_d+=("$(timed diff_values_ok "$WORK/dv/a" "$WORK/dv/b")")
    done
    local c d
    c=$(median "${runs_c[@]}")
    d=$(median "${runs_d[@]}")
    echo "   runs: cat ${runs_c[*]} | diff --values ${runs_d[*]} ($lines tensors changed)"
    printf '   %-74s %-8s %-9s %s\n' "21 diff --values 2 x 1 GiB: cat ($(ms "$c")) / diff ($(ms "$d"))" \
        "$(div "$c" "$d")" ">= 0.5" "$(cmp_ok "$(div "$c" "$d")" '>=' 0.5)"
}

# ---------------------------------------------------------------------------------------------
# 14: a ~100 MB TFLite model (TensorFlow's converter; buffers inside the flatbuffer)
# ---------------------------------------------------------------------------------------------
# 14a. `tfmount -f FILE MNT` to the first successful `stat MNT/variables/KEY.shape` of its largest
#      tensor, REPS times (median; page cache warm), and the daemon's /proc/PID/io rchar right
#      after: opening reads the flatbuffer's tables, not its weights                  < 50 ms
# 14b. sequential read (dd bs=1M) of that tensor's .bin through a fresh mount, cold and warm, vs
#      the same bytes from a fresh memfuse mount                              memfuse/mount >= 0.9
bench_tflite() {
    echo
    echo "== 14: a ~100 MB TFLite model"
    local py tfile key kbytes r t0 t1 n pid mp starts=() rchars=() mcold=() mwarm=() cold=() warm=()
    L_START=nan L_RCHAR=nan L_RCOLD=nan L_RWARM=nan
    py=$(keras_python) || { echo "   (no Python with TensorFlow: set TF_PYTHON; scripts/test.sh installs one)"; return; }
    tfile=${TFLITE_BENCH_FILE:-$WORK/tflite/big.tflite}
    if [ ! -f "$tfile" ]; then
        mkdir -p "$(dirname "$tfile")"
        echo "   writing $tfile with TensorFlow's converter ($py)"
        TF_CPP_MIN_LOG_LEVEL=3 "$py" "$REPO/scripts/gen_tflite.py" --big "$tfile" 100 >"$WORK/tflite.out" 2>"$WORK/tflite.err" \
            || { echo "bench: gen_tflite.py --big failed:" >&2; tail -5 "$WORK/tflite.err" >&2; return; }
    fi
    # The largest tensor, by tensors.tsv's nbytes column.
    key=$("$TFMOUNT" cat "$tfile" tensors.tsv | awk -F'\t' 'NR > 1 && $4 > max { max = $4; key = $1 } END { print key }')
    [ -n "$key" ] || { echo "bench: tflite: no tensor in $tfile" >&2; return; }
    echo "   $tfile: $(stat -c %s "$tfile") bytes; $key: $("$TFMOUNT" cat "$tfile" "variables/$key.shape")"
    cat "$tfile" >/dev/null # the page cache warm, for every run alike
    new_mountpoint
    mp=$MP
    starts_to_stat "$tfile" "$mp" "variables/$key.shape" "$WORK/tflite.daemon.log"
    starts=("${STARTS[@]}")
    rchars=("${RCHARS[@]}")
    L_START=$(median "${starts[@]:-nan}")
    L_RCHAR=$(median "${rchars[@]:-nan}")
    printf '   14a: start -> stat .shape: %s (runs: %s); daemon read %s bytes (runs: %s)\n' \
        "$(ms "$L_START")" "${starts[*]:-}" "$L_RCHAR" "${rchars[*]:-}"
    kbytes=$("$TFMOUNT" cat "$tfile" "variables/$key.bin" | tee "$WORK/tflite_kernel.bin" | wc -c)
    for r in $(seq "$REPS"); do
        if memfuse_bg "$WORK/tflite_kernel.bin" "$mp"; then
            t0=$(now)
            dd if="$mp/data" of=/dev/null bs=1M status=none || echo "bench: memfuse cold dd failed" >&2
            mcold+=("$(sub "$t0" "$(now)")")
            t0=$(now)
            dd if="$mp/data" of=/dev/null bs=1M status=none || echo "bench: memfuse warm dd failed" >&2
            mwarm+=("$(sub "$t0" "$(now)")")
            unmount "$mp"
            wait "$MEMFUSE_PID" 2>/dev/null
        fi
        mount_bg "$tfile" "$mp" || break
        t0=$(now)
        dd if="$mp/variables/$key.bin" of=/dev/null bs=1M status=none || echo "bench: tflite cold dd failed" >&2
        cold+=("$(sub "$t0" "$(now)")")
        t0=$(now)
        dd if="$mp/variables/$key.bin" of=/dev/null bs=1M status=none || echo "bench: tflite warm dd failed" >&2
        warm+=("$(sub "$t0" "$(now)")")
        kunmount "$mp"
    done
    rm -f "$WORK/tflite_kernel.bin"
    local tm_cold tm_warm tk_cold tk_warm
    tm_cold=$(median "${mcold[@]:-nan}")
    tm_warm=$(median "${mwarm[@]:-nan}")
    tk_cold=$(median "${cold[@]:-nan}")
    tk_warm=$(median "${warm[@]:-nan}")
    L_RCOLD=$(div "$tm_cold" "$tk_cold")
    L_RWARM=$(div "$tm_warm" "$tk_warm")
    printf '   14b: %s (%s bytes), cold: mount %s %s MB/s, memfuse %s %s MB/s, memfuse/mount %s (runs: %s | %s)\n' \
        "$key" "$kbytes" "$(ms "$tk_cold")" "$(mbps "$kbytes" "$tk_cold")" "$(ms "$tm_cold")" "$(mbps "$kbytes" "$tm_cold")" "$L_RCOLD" "${cold[*]:-}" "${mcold[*]:-}"
    printf '   14b: warm: mount %s %s MB/s, memfuse %s %s MB/s, memfuse/mount %s (runs: %s | %s)\n' \
        "$(ms "$tk_warm")" "$(mbps "$kbytes" "$tk_warm")" "$(ms "$tm_warm")" "$(mbps "$kbytes" "$tm_warm")" "$L_RWARM" "${warm[*]:-}" "${mwarm[*]:-}"
    echo
    echo "== summary of 14"
    row "figure" "value" "target" "result"
    row "14a. start -> stat .shape, 100 MB .tflite" "$(ms "$L_START"), read $L_RCHAR B" "< 50 ms" "$(cmp_ok "$L_START" '<' 0.05)"
    row "14b. cold read, memfuse/mount" "$L_RCOLD" ">= 0.9" "$(cmp_ok "$L_RCOLD" '>=' 0.9)"
    row "14b. warm read, memfuse/mount" "$L_RWARM" ">= 0.9" "$(cmp_ok "$L_RWARM" '>=' 0.9)"
}

# ---------------------------------------------------------------------------------------------
# 8: V1 checkpoints (needs a Python with TensorFlow: the V1 files are written by its V1 Saver)
# ---------------------------------------------------------------------------------------------
# A float32 tensor of V1_MIB MiB (packed fixed-width values, served by offset) and an int64
# tensor of V1_MIB/2 MiB (V1_MIB x 64 Ki values as varints, decoded from position marks), saved by
# TensorFlow as one V1 file and as a V2 checkpoint. Each is read sequentially (bs=1M) through a
# fresh mount and compared with the same tensor in the V2 mount (V2/V1: >= 0.7 for int64) and
# with `dd` of the V1 file (warm page cache); with TFMOUNT_BEFORE, that binary's V1 and V2 reads
# too, alternating with this tree's in the same repetitions.
bench_v1() {
    echo "== 8: V1 checkpoints: sequential reads of large V1 tensors"
    if ! has_tf; then
        echo "   (no Python with TensorFlow at $PY: set TF_PYTHON)"
        return
    fi
    local mib=${V1_MIB:-1024}
    v1_write "$WORK/v1" "$mib" || { echo "bench: writing V1 failed" >&2; return; }
    local v1file=$WORK/v1/v1.ckpt key r t0 v
    new_mountpoint
    local m1=$MP
    new_mountpoint
    local m2=$MP
    declare -A T8
    for key in f32 i64; do
        local dd=() c0
        # Wall times, and the daemon's CPU ticks per read (steadier than wall time on a
        # loaded machine).
        declare -A d1=() d2=() c1=() c2=()
        for r in $(seq "$REPS"); do
            cat "$v1file" "$WORK/v1/v2.ckpt.data-00000-of-00001" >/dev/null
            t0=$(now)
            dd if="$v1file" of=/dev/null bs=1M status=none
            dd+=("$(sub "$t0" "$(now)")")
            # Each version's V1 read, then its V2 read, alternating with the other version's.
            for v in "${VERSIONS[@]}"; do
                mount_bg "$v1file" "$m1" "$v" || return
                c0=$(mount_cpu "$m1")
                t0=$(now)
                dd if="$m1/variables/$key.bin" of=/dev/null bs=1M status=none || echo "bench: V1 read failed" >&2
                d1[$v]+="$(sub "$t0" "$(now)") "
                c1[$v]+="$(($(mount_cpu "$m1") - c0)) "
                [ "$r" = "$REPS" ] && note_rss "V1 mount after reading $key ($v)" "$m1"
                unmount "$m1"
                mount_bg "$WORK/v1/v2.ckpt" "$m2" "$v" || return
                c0=$(mount_cpu "$m2")
                t0=$(now)
                dd if="$m2/variables/$key.bin" of=/dev/null bs=1M status=none || echo "bench: V2 read failed" >&2
                d2[$v]+="$(sub "$t0" "$(now)") "
                c2[$v]+="$(($(mount_cpu "$m2") - c0)) "
                unmount "$m2"
            done
        done
        T8[$key.dd]=$(median "${dd[@]}")
        for v in "${VERSIONS[@]}"; do
            # shellcheck disable=SC2086
            T8[$key.v1.$v]=$(median ${d1[$v]:-nan})
            # shellcheck disable=SC2086
            T8[$key.v2.$v]=$(median ${d2[$v]:-nan})
            # shellcheck disable=SC2086
            T8[$key.c1.$v]=$(median ${c1[$v]:-nan})
            # shellcheck disable=SC2086
            T8[$key.c2.$v]=$(median ${c2[$v]:-nan})
            printf '   %s %-6s: V1 mount %s, V2 mount %s, V2/V1 %s (runs V1: %s; V2: %s)\n' "$key" "$v" \
                "$(ms "${T8[$key.v1.$v]}")" "$(ms "${T8[$key.v2.$v]}")" \
                "$(div "${T8[$key.v2.$v]}" "${T8[$key.v1.$v]}")" "${d1[$v]:-}" "${d2[$v]:-}"
            printf '   %s %-6s: daemon CPU ticks per read, V1 %s, V2 %s (runs V1: %s; V2: %s)\n' "$key" "$v" \
                "${T8[$key.c1.$v]}" "${T8[$key.c2.$v]}" "${c1[$v]:-}" "${c2[$v]:-}"
        done
        printf '   %s: dd of the whole V1 file (%s bytes) %s\n' "$key" "$(stat -c %s "$v1file")" "$(ms "${T8[$key.dd]}")"
        unset d1 d2 c1 c2
    done
    echo
    for v in "${VERSIONS[@]}"; do
        row "8a. V1 float32 ${mib} MiB read ($v)" "$(ms "${T8[f32.v1.$v]}") (V2 $(ms "${T8[f32.v2.$v]}"), V2/V1 $(div "${T8[f32.v2.$v]}" "${T8[f32.v1.$v]}"))" "-" "info"
        local r8b
        r8b=$(div "${T8[i64.v2.$v]}" "${T8[i64.v1.$v]}")
        row "8b. V1 int64 $((mib / 2)) MiB, varints ($v)" "$(ms "${T8[i64.v1.$v]}") (V2 $(ms "${T8[i64.v2.$v]}"), V2/V1 $r8b)" ">= 0.7" "$(cmp_ok "$r8b" '>=' 0.7)"
        row "8b. int64 daemon CPU ticks, V1 / V2 ($v)" "${T8[i64.c1.$v]} / ${T8[i64.c2.$v]}" "-" "info"
    done
    row "8. dd of the whole V1 file" "$(ms "${T8[f32.dd]}")" "-" "info"
}
# ---------------------------------------------------------------------------------------------
# 4: metadata walk
# ---------------------------------------------------------------------------------------------
# bench_walk: figure 4 (sets T_PLAIN, T_MWALK, T_MSWALK, T_WALKV, R_WALK, R_WALKM, R_WALKS).
bench_walk() {
    echo "== 4: find MNT/variables -name '*.shape' | xargs cat, $WALK_TENSORS tensors (fresh mount per run)"
    # The plain tree: the mount's files copied to $WORK (same names and contents).
    new_mountpoint
    plain_tree "$MP" || die "making the plain walk tree failed"
    declare -gA WALK R_WALK
    plain=()
    mfw=()
    mfs=()
    new_mountpoint
    mnt=$MP
    for r in $(seq "$REPS"); do
        t0=$(now)
        find "$WORK/plain" -name '*.shape' | xargs cat >/dev/null
        plain+=("$(sub "$t0" "$(now)")")
        if memfuse_bg "$WORK/plain" "$mnt"; then
            t0=$(now)
            find "$mnt" -name '*.shape' | xargs cat >/dev/null
            mfw+=("$(sub "$t0" "$(now)")")
            unmount "$mnt"
            wait "$MEMFUSE_PID" 2>/dev/null
        fi
        # The same floor served from a session of its own, as tfmount's daemon is (setsid).
        if MEMFUSE_SETSID=1 memfuse_bg "$WORK/plain" "$mnt"; then
            t0=$(now)
            find "$mnt" -name '*.shape' | xargs cat >/dev/null
            mfs+=("$(sub "$t0" "$(now)")")
            unmount "$mnt"
            wait "$MEMFUSE_PID" 2>/dev/null
        fi
        for v in "${VERSIONS[@]}"; do
            mount_bg "$WORK/twalk/ckpt" "$mnt" "$v" || break
            t0=$(now)
            # variables/ only: the plain tree holds those files (the views beside them, text/ and
            # stats/, are more directories that the plain tree does not have).
            find "$mnt/variables" -name '*.shape' | xargs cat >/dev/null
            WALK[$v]+="$(sub "$t0" "$(now)") "
            [ "$r" = "$REPS" ] && note_rss "$WALK_TENSORS-tensor mount after find | xargs cat ($v)" "$mnt"
            unmount "$mnt"
        done
    done
    T_PLAIN=$(median "${plain[@]}")
    T_MWALK=$(median "${mfw[@]:-nan}")
    T_MSWALK=$(median "${mfs[@]:-nan}")
    printf '   plain directory tree: %s (runs: %s)\n' "$(ms "$T_PLAIN")" "${plain[*]}"
    printf '   memfuse of that tree: %s  memfuse/plain %s (runs: %s)\n' "$(ms "$T_MWALK")" "$(div "$T_MWALK" "$T_PLAIN")" "${mfw[*]:-}"
    printf '   memfuse, own session: %s  memfuse/plain %s (runs: %s)\n' "$(ms "$T_MSWALK")" "$(div "$T_MSWALK" "$T_PLAIN")" "${mfs[*]:-}"
    declare -gA T_WALKV R_WALKM R_WALKS
    for v in "${VERSIONS[@]}"; do
        # shellcheck disable=SC2086
        T_WALKV[$v]=$(median ${WALK[$v]:-nan})
        R_WALK[$v]=$(div "${T_WALKV[$v]}" "$T_PLAIN")
        R_WALKM[$v]=$(div "${T_WALKV[$v]}" "$T_MWALK")
        R_WALKS[$v]=$(div "${T_WALKV[$v]}" "$T_MSWALK")
        printf '   tfmount %-6s : %s  mount/plain %s  mount/memfuse %s, own session %s (runs: %s)\n' "$v" "$(ms "${T_WALKV[$v]}")" "${R_WALK[$v]}" "${R_WALKM[$v]}" "${R_WALKS[$v]}" "${WALK[$v]:-}"
    done
    [ -n "$BEFORE" ] && printf '   after/before: %s\n' "$(div "${T_WALKV[after]}" "${T_WALKV[before]}")"
    T_WALK=${T_WALKV[after]}
    T_TF=nan
    T_WALK100K=nan
    if [ ! -d "$WORK/t100k" ]; then
        : # ONLY=walk: no 100k-tensor checkpoint written
    elif has_tf; then
        if mount_bg "$WORK/t100k/ckpt" "$mnt"; then
            t0=$(now)
            find "$mnt" -name '*.shape' | xargs cat >/dev/null
            T_WALK100K=$(sub "$t0" "$(now)")
            unmount "$mnt"
        fi
        T_TF=$(TF_CPP_MIN_LOG_LEVEL=3 "$PY" - "$WORK/t100k/ckpt" "$REPS" <<'EOF' 2>/dev/null
import statistics, sys, time
import tensorflow as tf
runs = []
for _ in range(int(sys.argv[2])):
    t0 = time.perf_counter()
    v = tf.train.list_variables(sys.argv[1])
    runs.append(time.perf_counter() - t0)
assert len(v) == 100000, len(v)
print(f"{statistics.median(runs):.6f}")
EOF
        ) || T_TF=nan
        printf '   100k tensors: mount walk %s; tf.train.list_variables (in-process, TF already imported): %s\n' \
            "$(ms "$T_WALK100K")" "$(ms "$T_TF")"
    else
        echo "   (no Python with TensorFlow at $PY: set TF_PYTHON for the comparison)"
    fi
}

# walk_rows: the summary rows of figure 4.
walk_rows() {
    for v in "${VERSIONS[@]}"; do
        row "4. walk $WALK_TENSORS tensors, mount/plain ($v)" "${R_WALK[$v]} ($(ms "${T_WALKV[$v]}") vs $(ms "$T_PLAIN"))" "<= 2" "$(cmp_ok "${R_WALK[$v]}" '<=' 2)"
    done
    row "4. same walk, memfuse/plain (FUSE floor)" "$(div "$T_MWALK" "$T_PLAIN")" "-" "info"
    for v in "${VERSIONS[@]}"; do
        row "4. walk, mount/memfuse ($v)" "${R_WALKM[$v]}" "-" "info"
        row "4. walk, mount/memfuse own session ($v)" "${R_WALKS[$v]} ($(ms "$T_MSWALK"))" "<= 1.1" "$(cmp_ok "${R_WALKS[$v]}" '<=' 1.1)"
    done
    [ -n "$BEFORE" ] && row "4. walk, after/before" "$(div "${T_WALKV[after]}" "${T_WALKV[before]}")" "-" "info"
    return 0
}

# startup NAME: sets T_START = median seconds from exec of `tfmount -f` to a successful
# `cat KEY.shape` (KEY = the checkpoint's last key), or nan. Runs in this shell (no $(...)), so
# the trap knows the daemons and mountpoints.
startup() {
    local name=$1 key mp t0 t1 pid r n runs=()
    T_START=nan
    key=$(key_of "$WORK/$name.out" last_key)
    new_mountpoint
    mp=$MP
    for r in $(seq "$REPS"); do
        t0=$(now)
        # shellcheck disable=SC2086
        "$TFMOUNT" -f $TFMOUNT_ARGS "$WORK/$name/ckpt" "$mp" >/dev/null 2>>"$WORK/$name.daemon.log" &
        pid=$!
        FG_PIDS+=("$pid")
        t1=
        # Tight poll (a counter, not `seq`: expanding a long list would itself take ~100 ms).
        n=0
        while [ $((n += 1)) -lt 200000 ]; do
            if cat "$mp/variables/$key.shape" >/dev/null 2>&1; then
                t1=$(now)
                break
            fi
            kill -0 "$pid" 2>/dev/null || break
        done
        if [ -z "$t1" ]; then
            echo "bench: $name: $key.shape never became readable; daemon log:" >&2
            tail -5 "$WORK/$name.daemon.log" >&2
            unmount "$mp"
            kill "$pid" 2>/dev/null
            return 1
        fi
        runs+=("$(sub "$t0" "$t1")")
        [ "$r" = "$REPS" ] && note_rss "$name mount after its first cat" "$mp"
        unmount "$mp"
        wait "$pid" 2>/dev/null
    done
    echo "   $name: key $key, runs ${runs[*]}"
    T_START=$(median "${runs[@]}")
}

# ---------------------------------------------------------------------------------------------
# 15: TF2 checkpoints: mount cost independent of the object graph, names/ at 1M (bench_tf2_names)
# ---------------------------------------------------------------------------------------------
bench_tf2_names() {
    echo "== 15: TF2 object-based checkpoints: start to first cat, and names/ of 1M identical names"
    local n mode runs=() t0 t1 r mp
    startup t1k
    T15_BASE=$T_START
    declare -gA T15=()
    for n in 20k 1m; do
        for mode in distinct identical; do
            mk "tf2_${n}_$mode" --tensors "$([ "$n" = 20k ] && echo 20000 || echo 1000000)" \
                --elems 1 --tf2 "$mode"
            startup "tf2_${n}_$mode"
            T15[$n.$mode]=$T_START
        done
    done
    new_mountpoint
    mp=$MP
    for r in $(seq "$REPS"); do
        # shellcheck disable=SC2086
        "$TFMOUNT" $TFMOUNT_ARGS "$WORK/tf2_1m_identical/ckpt" "$mp" || die "mount tf2_1m_identical"
        t0=$(now)
        N15=$(ls -f "$mp/names" | wc -l)
        t1=$(now)
        runs+=("$(sub "$t0" "$t1")")
        unmount "$mp"
    done
    T15_LS=$(median "${runs[@]}")
    printf '   1k plain: %s; 20k distinct %s identical %s; 1M distinct %s identical %s\n' \
        "$(ms "$T15_BASE")" "$(ms "${T15[20k.distinct]}")" "$(ms "${T15[20k.identical]}")" \
        "$(ms "${T15[1m.distinct]}")" "$(ms "${T15[1m.identical]}")"
    printf '   ls -f names/ of 1M identical: %s entries, %s (runs: %s)\n' "$N15" "$(ms "$T15_LS")" "${runs[*]}"
    tf2_rows() {
        local k
        for k in 20k.distinct 20k.identical 1m.distinct 1m.identical; do
            local target=0.05
            [ "${k%%.*}" = 1m ] && target=0.1
            row "15. TF2 $k: start -> first cat" "$(ms "${T15[$k]}") ($(div "${T15[$k]}" "$T15_BASE")x 1k)" "< ${target} s" "$(cmp_ok "${T15[$k]}" '<' "$target")"
        done
        row "15. ls -f names/, 1M identical" "$(ms "$T15_LS")" "< 2 s" "$(cmp_ok "$T15_LS" '<' 2)"
    }
    echo
    row "figure" "value" "target" "result"
    tf2_rows
}

# ---------------------------------------------------------------------------------------------
# 17: the Python module (bench_python; ONLY=python runs this section alone)
# ---------------------------------------------------------------------------------------------
# Issue 27's rows, from scripts/bench_python.py: the same 524 MiB of 338 float32 tensors as a
# TF2 checkpoint, a `.weights.h5` and a plain `.safetensors`, each reader in a fresh process
# (REPS, median, interleaved): tfmount.open + every tensor vs TensorFlow's reader (import
# excluded: >= 2x) and vs safetensors' load_file (>= 1.5x); tfmount on the `.weights.h5` vs
# h5py (>= 1.5x); tfmount.open of a 1M-tensor checkpoint to its first array (< 100 ms). The
# wheel is built with the release profile into a venv of its own (with safetensors and h5py);
# TensorFlow's Python ($TF_PYTHON, else the test venv) writes the files and times its reader.
bench_python() {
    echo "== 17: the Python module: every tensor into numpy, vs TensorFlow, safetensors, h5py"
    local tfpy=$PY bvenv=$WORK/pyvenv first
    if ! "$tfpy" -c 'import tensorflow, h5py, safetensors' 2>/dev/null; then
        tfpy=$HOME/.cache/tfmount-test-venv/bin/python
    fi
    "$tfpy" -c 'import tensorflow, h5py, safetensors' 2>/dev/null ||
        { echo "   (no Python with tensorflow, h5py and safetensors: set TF_PYTHON; scripts/test.sh installs one)"; return; }
    "$REPO/target/wheel-smoke/venv/bin/python" -c 'import maturin' 2>/dev/null || {
        python3 -m venv "$REPO/target/wheel-smoke/venv" &&
            "$REPO/target/wheel-smoke/venv/bin/pip" install -q "maturin>=1.9,<2.0"
    } || die "installing maturin failed"
    "$REPO/target/wheel-smoke/venv/bin/maturin" build --release --out "$WORK/pywheel" >"$WORK/pywheel.log" 2>&1 ||
        die "building the release wheel failed: $WORK/pywheel.log"
    "$tfpy" -m venv "$bvenv" && "$bvenv/bin/pip" install -q "$WORK"/pywheel/tfmount-*.whl safetensors h5py ||
        die "installing the wheel into $bvenv failed"
    "$tfpy" "$REPO/scripts/bench_python.py" write "$WORK/py" 2>/dev/null | tail -1
    first=$("$MKCKPT" "$WORK/py/big1m/ckpt" --tensors 1000000 --elems 16 | sed -n 's/^last_key=//p')
    TF_PYTHON=$tfpy TFMOUNT_PY=$bvenv/bin/python FIRST_KEY=$first \
        "$bvenv/bin/python" "$REPO/scripts/bench_python.py" run "$WORK/py" "$REPS" | tail -n +2
}

# ---------------------------------------------------------------------------------------------
# 18: Orbax (bench_orbax, scripts/bench_orbax.py; ONLY=orbax runs this section alone; needs
# ORBAX_PYTHON, a Python with orbax-checkpoint, jax[cpu] and tensorstore, outside the repo)
# ---------------------------------------------------------------------------------------------
# Issue 28's rows, on a 1 GiB checkpoint StandardCheckpointer saved (OCDBT, zarr, zstd; ~300
# float32 arrays, one of 256 MiB in 4 MiB chunks):
# 18a. `tfmount -f CKPT MNT` to the first successful `stat` of the 256 MiB array's `.shape`
#      (median of REPS, page cache warm), and what the daemon read for it (rchar)   < 50 ms, < 1 MiB
# 18b. that array's `.bin` read whole (dd bs=1M, a fresh mount each time) vs tensorstore reading
#      it as Orbax's restore does (zarr over OCDBT, a fresh context, timed in the process after
#      its imports): tensorstore's time / tfmount's                                     >= 0.5
bench_orbax() {
    echo
    echo "== 18: a 1 GiB Orbax checkpoint"
    local opy=${ORBAX_PYTHON:-} ckpt r t0 t1 n pid mp starts=() rchars=() reads=() ts
    O_START=nan O_RCHAR=nan O_READ=nan O_TS=nan
    [ -n "$opy" ] && "$opy" -c 'import orbax.checkpoint, tensorstore, jax' 2>/dev/null ||
        { echo "   (no Python with orbax-checkpoint, jax and tensorstore: set ORBAX_PYTHON)"; return; }
    ckpt=$WORK/orbax/ckpt
    if [ ! -d "$ckpt" ]; then
        mkdir -p "$WORK/orbax"
        (cd "$WORK" && "$opy" "$REPO/scripts/bench_orbax.py" write "$WORK/orbax" 1024 2>"$WORK/orbax.err" | tail -1) ||
            { echo "bench: bench_orbax.py write failed:" >&2; tail -5 "$WORK/orbax.err" >&2; return; }
    fi
    find "$ckpt" -type f -exec cat {} + >/dev/null # the page cache warm, for every run alike
    new_mountpoint
    mp=$MP
    starts_to_stat "$ckpt" "$mp" variables/big.shape "$WORK/orbax.daemon.log"
    starts=("${STARTS[@]}")
    rchars=("${RCHARS[@]}")
    [ "${#starts[@]}" -gt 0 ] || return
    O_START=$(median "${starts[@]:-nan}")
    O_RCHAR=$(median "${rchars[@]:-nan}")
    printf '   18a: start -> stat big.shape: %s (runs: %s); daemon read %s bytes (runs: %s)\n' \
        "$(ms "$O_START")" "${starts[*]:-}" "$O_RCHAR" "${rchars[*]:-}"
    for r in $(seq "$REPS"); do
        mount_bg "$ckpt" "$mp" || break
        t0=$(now)
        if dd if="$mp/variables/big.bin" of=/dev/null bs=1M status=none; then
            reads+=("$(sub "$t0" "$(now)")")
        else
            echo "bench: orbax: reading big.bin failed (a failed read counts as no figure)" >&2
            reads+=(nan)
        fi
        kunmount "$mp"
    done
    O_READ=$(median "${reads[@]:-nan}")
    O_TS=$(cd "$WORK" && "$opy" "$REPO/scripts/bench_orbax.py" read "$WORK/orbax" "$REPS" 2>/dev/null | sed -n 's/^tensorstore_s=//p')
    O_TS=${O_TS:-nan}
    printf '   18b: 256 MiB array read whole: tfmount %s (runs: %s), tensorstore %s\n' \
        "$(ms "$O_READ")" "${reads[*]:-}" "$(ms "$O_TS")"
    local ratio
    ratio=$(div "$O_TS" "$O_READ")
    printf '   %-58s %12s %8s %s\n' "18a Orbax start -> first stat (target < 50 ms)" "$(ms "$O_START")" "" \
        "$(cmp_ok "$(awk -v t="$O_START" 'BEGIN { print t * 1000 }')" "<" 50)"
    printf '   %-58s %12s %8s %s\n' "18a bytes read to mount and stat (target < 1 MiB)" "$O_RCHAR" "" \
        "$(cmp_ok "$O_RCHAR" "<" 1048576)"
    printf '   %-58s %12s %8s %s\n' "18b 256 MiB chunked read, tensorstore/tfmount (>= 0.5)" "$ratio" "" \
        "$(cmp_ok "$ratio" ">=" 0.5)"
}

# ---------------------------------------------------------------------------------------------
# 19: object storage at scale (bench_cache; ONLY=cache runs this section alone)
# ---------------------------------------------------------------------------------------------
LAT_MS=${LAT_MS:-20}
RATE=${RATE:-100m}
CPY=${CACHE_PYTHON:-$HOME/.cache/tfmount-test-venv/bin/python}
# lf_read DIR: safetensors' load_file of DIR/model.safetensors (every tensor, into memory)
lf_read() {
    "$CPY" -c 'import sys
from safetensors.numpy import load_file
d = load_file(sys.argv[1])
assert sum(v.nbytes for v in d.values()) > 0' "$1/model.safetensors"
}
# cat_bins DIR: cat of every tensor's .bin, in key order
cat_bins() { find "$1/variables" -name '*.bin' -print0 | sort -z | xargs -0 cat >/dev/null; }
# gets_of LOG: the GETs the daemon counted (logged at unmount)
gets_of() {
    local i
    for i in $(seq 50); do grep -q 'bytes fetched' "$1" 2>/dev/null && break; sleep 0.1; done
    sed -n 's/.*(GET \([0-9]*\),.*/\1/p' "$1" | tail -1
}
# fetched_of LOG: the body bytes the daemon's GETs received (logged at unmount)
fetched_of() { sed -n 's/.*bytes fetched \([0-9]*\),.*/\1/p' "$1" | tail -1; }
# timed_mount SOURCE OPTS WHAT: a fresh mount of SOURCE with OPTS, WHAT (lf_read or cat_bins)
# over it, the mount itself timed in; sets TM_T (seconds), TM_GETS and TM_BYTES (fetched).
# Without cache_dir in OPTS the mount has the default disk cache: $XDG_CACHE_HOME/tfmount, here
# $WORK/xdg (emptied by the caller for a fresh one), never the user's own.
timed_mount() {
    local log=$WORK/tm.$RANDOM.log t0
    new_mountpoint
    t0=$(now)
    # shellcheck disable=SC2086
    XDG_CACHE_HOME=$WORK/xdg TFMOUNT_CACHE_DIR='' RUST_LOG=info "$TFMOUNT" $2 --log-file "$log" "$1" "$MP" ||
        { TM_T=nan; TM_GETS=nan; TM_BYTES=nan; return; }
    "$3" "$MP" || echo "bench: $3 of $1 failed" >&2
    TM_T=$(sub "$t0" "$(now)")
    unmount "$MP"
    TM_GETS=$(gets_of "$log")
    TM_BYTES=$(fetched_of "$log")
}
bench_cache() {
    echo "== 19: object storage at scale: +$LAT_MS ms per request, nginx limit_rate $RATE per connection"
    command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || { echo "   (nginx not found)"; return; }
    command -v aria2c >/dev/null || { echo "   (aria2c not found: apt-get install aria2)"; return; }
    "$CPY" -c 'import safetensors, numpy' 2>/dev/null || { echo "   ($CPY lacks safetensors/numpy: set CACHE_PYTHON)"; return; }
    [ -d "$WORK/c300" ] || mk c300 --tensors 300 --elems 894784 --depth 2
    [ -d "$WORK/sc256" ] || mk sc256 --tensors 0 --big-gib 0.25
    [ -d "$WORK/big" ] || mk big --tensors 0 --big-gib "$BIG_GIB"
    sc_nginx lat "limit_rate $RATE;"
    local up=$SC_PORT port r
    "$TARGET/release/examples/latency_proxy" "$up" "$LAT_MS" >"$WORK/proxy.port" &
    FG_PIDS+=("$!")
    for r in $(seq 50); do [ -s "$WORK/proxy.port" ] && break; sleep 0.1; done
    port=$(cat "$WORK/proxy.port")
    local base=http://127.0.0.1:$port url=http://127.0.0.1:$port/c300/ckpt
    local cache=$WORK/cache dl=$WORK/dl one t0 k
    one=$("$TFMOUNT" cat "$WORK/c300/ckpt" tensors.tsv | awk -F'\t' 'NR == 151 { print $1 }')
    declare -A T
    add() { T[$1]="${T[$1]:-} $2"; }
    for r in $(seq "$REPS"); do
        # aria2c -x 8 of the checkpoint's files, then the same reads of a local mount.
        rm -rf "$dl" && mkdir -p "$dl"
        t0=$(now)
        aria2c -q -Z -x 8 -s 8 -k 1M -j 2 -d "$dl" --allow-overwrite=true "$url.index" "$url.data-00000-of-00001" ||
            echo "bench: aria2c failed" >&2
        add dl "$(sub "$t0" "$(now)")"
        sync
        timed_mount "$dl/ckpt" "" lf_read && add local_lf "$TM_T"
        timed_mount "$dl/ckpt" "" cat_bins && add local_cat "$TM_T"
        # Cold through the mount, an empty cache_dir each time; then warm: a remount on it.
        # The warm remounts read a settled cache, as the local mounts read settled files: what
        # the cold pass wrote is written back by the kernel (`sync`) before, not beside, them.
        rm -rf "$cache"
        timed_mount "$url" "-o cache_dir=$cache" lf_read && add cold_lf "$TM_T"
        sync
        timed_mount "$url" "-o cache_dir=$cache" lf_read && add warm_lf "$TM_T" && add warm_lf_gets "$TM_GETS"
        rm -rf "$cache"
        timed_mount "$url" "-o cache_dir=$cache" cat_bins && add cold_cat "$TM_T"
        sync
        timed_mount "$url" "-o cache_dir=$cache" cat_bins && add warm_cat "$TM_T"
        # No options at all: the default disk cache, fresh ($XDG_CACHE_HOME/tfmount emptied).
        rm -rf "$WORK/xdg"
        timed_mount "$url" "" cat_bins && add def_cat "$TM_T" && add def_cat_b "$TM_BYTES"
        rm -rf "$WORK/xdg"
        timed_mount "$url" "" lf_read && add def_lf "$TM_T" && add def_lf_b "$TM_BYTES"
        # Without a disk cache (the mount's memory only).
        timed_mount "$url" "-o cache_dir=none" lf_read && add nocache_lf "$TM_T" && add nocache_lf_b "$TM_BYTES"
        timed_mount "$url" "-o cache_dir=none" cat_bins && add nocache_cat "$TM_T" && add nocache_cat_b "$TM_BYTES"
        # One tensor of 4 MiB from a cold mount: GETs beyond those of mounting and stat.
        k=$one
        one_read() { stat "$1/variables/$k.shape" >/dev/null && cat "$1/variables/$k.bin" >/dev/null; }
        one_stat() { stat "$1/variables/$k.shape" >/dev/null; }
        timed_mount "$url" "-o cache_dir=none" one_stat && local g0=$TM_GETS
        timed_mount "$url" "-o cache_dir=none" one_read && add one_t "$TM_T" && add one_gets "$((TM_GETS - g0))"
        # Section 13's tensors through the proxy: the mount vs curl and aria2c.
        for ck in sc256 big; do
            read -r off size < <("$TFMOUNT" cat "$WORK/$ck/ckpt" tensors.tsv | awk -F'\t' '$1 == "big/tensor" { print $8, $4 }')
            t0=$(now)
            curl -s -f -r "$off-$((off + size - 1))" "$base/$ck/ckpt.data-00000-of-00001" -o /dev/null || echo "bench: curl failed" >&2
            add "curl_$ck" "$(sub "$t0" "$(now)")"
            rm -f "$dl/$ck.data"
            t0=$(now)
            aria2c -q -x 8 -s 8 -k 1M -d "$dl" -o "$ck.data" --allow-overwrite=true "$base/$ck/ckpt.data-00000-of-00001" ||
                echo "bench: aria2c failed" >&2
            add "aria_$ck" "$(sub "$t0" "$(now)")"
            sc_read "$TFMOUNT" "" "$base/$ck/ckpt"
            add "mnt_$ck" "$SC_T"
        done
    done
    med() { # shellcheck disable=SC2086
        median ${T[$1]}; }
    local dl_t llf lcat clf ccat wlf wcat nlf
    dl_t=$(med dl) llf=$(med local_lf) lcat=$(med local_cat) clf=$(med cold_lf) ccat=$(med cold_cat)
    wlf=$(med warm_lf) wcat=$(med warm_cat) nlf=$(med nocache_lf)
    printf '   aria2c -x 8 of the checkpoint %s; local mount: load_file %s, cat of every .bin %s (runs: %s)\n' \
        "$(ms "$dl_t")" "$(ms "$llf")" "$(ms "$lcat")" "${T[dl]}"
    printf '   warm remounts sent %s GETs (runs); one 4 MiB tensor: %s GETs after mount+stat, %s (runs: %s)\n' \
        "${T[warm_lf_gets]}" "${T[one_gets]}" "$(ms "$(med one_t)")" "${T[one_t]}"
    local a b
    a=$(awk -v x="$dl_t" -v y="$llf" 'BEGIN { print x + y }')
    b=$(awk -v x="$dl_t" -v y="$lcat" 'BEGIN { print x + y }')
    row "19a. cold load_file, (aria2c+local)/mount" "$(div "$a" "$clf") ($(ms "$clf"))" ">= 1.0" "$(cmp_ok "$(div "$a" "$clf")" '>=' 1.0) runs:${T[cold_lf]}"
    row "19a'. the same without cache_dir" "$(div "$a" "$nlf") ($(ms "$nlf"))" "" "runs:${T[nocache_lf]}"
    # The issue's rows: no options (the default disk cache, fresh), and cache_dir=none; bytes
    # fetched per byte of tensors (the checkpoint's data file).
    local tb dcat dlf ncat
    tb=$(stat -c %s "$WORK/c300/ckpt.data-00000-of-00001")
    dcat=$(med def_cat) dlf=$(med def_lf) ncat=$(med nocache_cat)
    per() { # shellcheck disable=SC2086
        div "$(median $1)" "$tb"; }
    row "19g. default mount, cat of every .bin, (aria2c+local)/mount" "$(div "$b" "$dcat") ($(ms "$dcat"))" ">= 1.0" \
        "$(cmp_ok "$(div "$b" "$dcat")" '>=' 1.0) fetched/tensor bytes $(per "${T[def_cat_b]}") runs:${T[def_cat]}"
    row "19h. default mount, load_file, (aria2c+local)/mount" "$(div "$a" "$dlf") ($(ms "$dlf"))" ">= 1.0" \
        "$(cmp_ok "$(div "$a" "$dlf")" '>=' 1.0) fetched/tensor bytes $(per "${T[def_lf_b]}") runs:${T[def_lf]}"
    row "19i. cache_dir=none, cat of every .bin, (aria2c+local)/mount" "$(div "$b" "$ncat") ($(ms "$ncat"))" ">= 0.8" \
        "$(cmp_ok "$(div "$b" "$ncat")" '>=' 0.8) fetched/tensor bytes $(per "${T[nocache_cat_b]}") runs:${T[nocache_cat]}"
    row "19j. cache_dir=none, load_file: fetched/tensor bytes" "$(per "${T[nocache_lf_b]}")" "<= 1.05" \
        "$(cmp_ok "$(per "${T[nocache_lf_b]}")" '<=' 1.05) runs:${T[nocache_lf_b]}"
    row "19b. cold cat of every .bin, (aria2c+local)/mount" "$(div "$b" "$ccat") ($(ms "$ccat"))" ">= 1.0" "$(cmp_ok "$(div "$b" "$ccat")" '>=' 1.0) runs:${T[cold_cat]}"
    row "19c. warm load_file (remount), local/mount" "$(div "$llf" "$wlf") ($(ms "$wlf"))" ">= 0.9" "$(cmp_ok "$(div "$llf" "$wlf")" '>=' 0.9) runs:${T[warm_lf]}"
    row "19d. warm cat of every .bin, local/mount" "$(div "$lcat" "$wcat") ($(ms "$wcat"))" ">= 0.9" "$(cmp_ok "$(div "$lcat" "$wcat")" '>=' 0.9) runs:${T[warm_cat]}"
    local g
    g=$(median ${T[one_gets]})
    row "19e. one 4 MiB tensor, GETs after the mount's" "$g ($(ms "$(med one_t)"))" "<= 2" "$(cmp_ok "$g" '<=' 2)"
    for ck in sc256 big; do
        row "19f. $ck via proxy: curl/mount, aria2c/mount" "$(div "$(med "curl_$ck")" "$(med "mnt_$ck")") $(div "$(med "aria_$ck")" "$(med "mnt_$ck")")" "" \
            "mount $(ms "$(med "mnt_$ck")"), curl $(ms "$(med "curl_$ck")"), aria2c $(ms "$(med "aria_$ck")")"
    done
}

# ---------------------------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------------------------
if [ "${ONLY:-}" = keras ]; then
    bench_keras
    exit 0
fi
if [ "${ONLY:-}" = tflite ]; then
    bench_tflite
    exit 0
fi
if [ "${ONLY:-}" = python ]; then
    bench_python
    exit 0
fi
if [ "${ONLY:-}" = orbax ]; then
    bench_orbax
    exit 0
fi
echo "== writing checkpoints"
bench_whole_tree() {
    echo "== 16: the whole tree: du and diff -rq of a mount vs its tensors"
    local mib=${WHOLE_MIB:-200} n=200 elems tensor_bytes mode a b ta tb t0 t1 runs_all runs_vars r du_b
    elems=$((mib * 1024 * 1024 / 4 / n))
    tensor_bytes=$((n * elems * 4))
    mk wt_a --tensors "$n" --elems "$elems" --depth 2
    mk wt_b --tensors "$n" --elems "$elems" --depth 2 --alter-every 40
    a=$WORK/wt_a/ckpt
    b=$WORK/wt_b/ckpt
    for mode in hidden visible; do
        local args=$TFMOUNT_ARGS
        TFMOUNT_ARGS="$args -o views=$mode"
        new_mountpoint
        ta=$MP
        mount_bg "$a" "$ta" || die "mount $a"
        du_b=$(du -s --apparent-size -B1 "$ta" | cut -f1)
        unmount "$ta"
        runs_all=()
        runs_vars=()
        for r in $(seq "$REPS"); do
            new_mountpoint; ta=$MP
            new_mountpoint; tb=$MP
            mount_bg "$a" "$ta" && mount_bg "$b" "$tb" || die "mount"
            t0=$(now)
            diff -rq "$ta" "$tb" >"$WORK/wt_diff.$mode" 2>&1
            t1=$(now)
            runs_all+=("$(sub "$t0" "$t1")")
            unmount "$ta"; unmount "$tb"
            new_mountpoint; ta=$MP
            new_mountpoint; tb=$MP
            mount_bg "$a" "$ta" && mount_bg "$b" "$tb" || die "mount"
            t0=$(now)
            diff -rq "$ta/variables" "$tb/variables" >/dev/null 2>&1
            t1=$(now)
            runs_vars+=("$(sub "$t0" "$t1")")
            unmount "$ta"; unmount "$tb"
        done
        TFMOUNT_ARGS=$args
        declare -g "WT_DU_$mode=$(div "$du_b" "$tensor_bytes")"
        declare -g "WT_ALL_$mode=$(median "${runs_all[@]}")"
        declare -g "WT_VARS_$mode=$(median "${runs_vars[@]}")"
        printf '   views=%s: du %s bytes for %s tensor bytes; diff -rq %s lines, %s (runs %s); of variables/ %s (runs %s)\n' \
            "$mode" "$du_b" "$tensor_bytes" "$(wc -l <"$WORK/wt_diff.$mode")" \
            "$(ms "$(median "${runs_all[@]}")")" "${runs_all[*]}" \
            "$(ms "$(median "${runs_vars[@]}")")" "${runs_vars[*]}"
    done
    echo
    row "figure" "value" "target" "result"
    row "16. du --apparent-size / tensor bytes" "${WT_DU_hidden}x" "<= 2.05x" "$(cmp_ok "$WT_DU_hidden" '<=' 2.05)"
    local ratio
    ratio=$(div "$WT_ALL_hidden" "$WT_VARS_hidden")
    row "16. diff -rq mounts / of variables/" "${ratio}x" "<= 2x" "$(cmp_ok "$ratio" '<=' 2)"
    row "16. (views=visible) du / tensor bytes" "${WT_DU_visible}x" "(was 8.0x)" "-"
    row "16. (views=visible) diff -rq / variables/" "$(div "$WT_ALL_visible" "$WT_VARS_visible")x" "(was 21-78x)" "-"
}

mk() { # mk NAME ARGS...
    local name=$1
    shift
    mkdir -p "$WORK/$name"
    "$MKCKPT" "$WORK/$name/ckpt" "$@" >"$WORK/$name.out" || die "mkckpt $name failed"
    sed 's/^/   /' "$WORK/$name.out" | grep -v '_key=\|prefix='
}
if [ "${ONLY:-}" = direct_io ]; then
    mk big --tensors 0 --big-gib "$BIG_GIB"
    mk twalk --tensors "$WALK_TENSORS"
    bench_direct_io
    exit 0
fi
if [ "${ONLY:-}" = cache ]; then
    bench_cache
    exit 0
fi
if [ "${ONLY:-}" = floor ]; then
    bench_floor
    exit 0
fi
if [ "${ONLY:-}" = diff_values ]; then
    bench_diff_values
    exit 0
fi
if [ "${ONLY:-}" = tfjs_floor ]; then
    bench_tfjs_floor
    exit 0
fi
if [ "${ONLY:-}" = stream_crc ]; then
    bench_stream_crc
    exit 0
fi
if [ "${ONLY:-}" = issue19 ]; then
    [ -n "$BEFORE" ] || die "ONLY=issue19 compares with TFMOUNT_BEFORE: set it to the older binary"
    mk big --tensors 0 --big-gib "$BIG_GIB"
    mk twalk --tensors "$WALK_TENSORS"
    bench_issue19
    exit 0
fi
if [ "${ONLY:-}" = v1 ]; then
    bench_v1
    exit 0
fi
if [ "${ONLY:-}" = whole_tree ]; then
    bench_whole_tree

bench_python
    exit 0
fi
if [ "${ONLY:-}" = tf2names ]; then
    mk t1k --tensors 1000
    bench_tf2_names
    exit 0
fi
if [ "${ONLY:-}" = walk ]; then
    mk twalk --tensors "$WALK_TENSORS"
    bench_walk
    echo
    row "figure" "value" "target" "result"
    walk_rows
    exit 0
fi
mk big --tensors 0 --big-gib "$BIG_GIB"
mk t1k --tensors 1000
mk t1m --tensors 1000000
mk t100k --tensors 100000
mk twalk --tensors "$WALK_TENSORS"
if [ "${ONLY:-}" = remote ]; then
    bench_remote
    exit 0
fi
BIG_DATA=$WORK/big/ckpt.data-00000-of-00001
BIG_BYTES=$(stat -c %s "$BIG_DATA")

# ---------------------------------------------------------------------------------------------
# 1 + 2: sequential reads
# ---------------------------------------------------------------------------------------------
echo "== 1/2: sequential read of big/tensor ($BIG_BYTES bytes), bs=1M, cold (fresh mount) then warm"
cat "$BIG_DATA" >/dev/null # warm the page cache for the baselines and for the daemon's reads
declare -A COLD WARM
base=()
mcold=()
mwarm=()
new_mountpoint
mnt=$MP
for r in $(seq "$REPS"); do
    # Baselines are taken in each repetition, right before the mount's reads, so that both
    # sides of a ratio see the same machine load; the page cache is warmed again first (the
    # kernel may have reclaimed some of it since: DAMON, other processes).
    cat "$BIG_DATA" >/dev/null
    t0=$(now)
    dd if="$BIG_DATA" of=/dev/null bs=1M status=none
    base+=("$(sub "$t0" "$(now)")")
    if memfuse_bg "$BIG_DATA" "$mnt"; then
        t0=$(now)
        dd if="$mnt/data" of=/dev/null bs=1M status=none || echo "bench: memfuse cold dd failed" >&2
        mcold+=("$(sub "$t0" "$(now)")")
        t0=$(now)
        dd if="$mnt/data" of=/dev/null bs=1M status=none || echo "bench: memfuse warm dd failed" >&2
        mwarm+=("$(sub "$t0" "$(now)")")
        unmount "$mnt"
        wait "$MEMFUSE_PID" 2>/dev/null
    fi
    for v in "${VERSIONS[@]}"; do
        # A fresh mount per repetition: nothing of the file is in the mount's page cache.
        mount_bg "$WORK/big/ckpt" "$mnt" "$v" || break
        t0=$(now)
        dd if="$mnt/variables/big/tensor.bin" of=/dev/null bs=1M status=none || echo "bench: cold dd failed" >&2
        COLD[$v]+="$(sub "$t0" "$(now)") "
        t0=$(now)
        dd if="$mnt/variables/big/tensor.bin" of=/dev/null bs=1M status=none || echo "bench: warm dd failed" >&2
        WARM[$v]+="$(sub "$t0" "$(now)") "
        [ "$r" = "$REPS" ] && note_rss "big-file mount after the reads ($v)" "$mnt"
        unmount "$mnt"
    done
done
T_BASE=$(median "${base[@]}")
T_MCOLD=$(median "${mcold[@]:-nan}")
T_MWARM=$(median "${mwarm[@]:-nan}")
printf '   dd from .data   : %s  %s MB/s   (runs: %s)\n' "$(ms "$T_BASE")" "$(mbps "$BIG_BYTES" "$T_BASE")" "${base[*]}"
printf '   memfuse, cold   : %s  %s MB/s   (runs: %s)\n' "$(ms "$T_MCOLD")" "$(mbps "$BIG_BYTES" "$T_MCOLD")" "${mcold[*]:-}"
printf '   memfuse, warm   : %s  %s MB/s   (runs: %s)\n' "$(ms "$T_MWARM")" "$(mbps "$BIG_BYTES" "$T_MWARM")" "${mwarm[*]:-}"
declare -A R_COLD R_WARM T_COLD T_WARM
for v in "${VERSIONS[@]}"; do
    # shellcheck disable=SC2086
    T_COLD[$v]=$(median ${COLD[$v]:-nan})
    # shellcheck disable=SC2086
    T_WARM[$v]=$(median ${WARM[$v]:-nan})
    R_COLD[$v]=$(div "$T_MCOLD" "${T_COLD[$v]}")
    R_WARM[$v]=$(div "$T_MWARM" "${T_WARM[$v]}")
    printf '   tfmount %-6s cold: %s  %s MB/s  memfuse/mount %s (runs: %s)\n' "$v" "$(ms "${T_COLD[$v]}")" "$(mbps "$BIG_BYTES" "${T_COLD[$v]}")" "${R_COLD[$v]}" "${COLD[$v]:-}"
    printf '   tfmount %-6s warm: %s  %s MB/s  memfuse/mount %s (runs: %s)\n' "$v" "$(ms "${T_WARM[$v]}")" "$(mbps "$BIG_BYTES" "${T_WARM[$v]}")" "${R_WARM[$v]}" "${WARM[$v]:-}"
done

# ---------------------------------------------------------------------------------------------
# 3: time to first answer
# ---------------------------------------------------------------------------------------------
echo "== 3: start to first successful cat of a .shape"
startup t1k
T_1K=$T_START
startup t1m
T_1M=$T_START
R_START=$(div "$T_1M" "$T_1K")
printf '   1k tensors: %s   1M tensors: %s   ratio 1M/1k %s\n' "$(ms "$T_1K")" "$(ms "$T_1M")" "$R_START"

# ---------------------------------------------------------------------------------------------
# 4: metadata walk
# ---------------------------------------------------------------------------------------------
bench_walk
bench_tf2_names

# ---------------------------------------------------------------------------------------------
# 6: a 100 000-node graph directory
# ---------------------------------------------------------------------------------------------
echo "== 6: ls of a 100k-node graph directory, then cat of one node (fresh mount per run)"
"$MKGRAPH" "$WORK/g100k" --nodes 100000 --flat 1 >/dev/null || die "mkgraph failed"
new_mountpoint
gmnt=$MP
gls=()
gcat=()
for r in $(seq "$REPS"); do
    mount_bg "$WORK/g100k" "$gmnt" || break
    t0=$(now)
    n=$(ls "$gmnt/graph" | wc -l)
    t1=$(now)
    cat "$gmnt/graph/node_054321.pbtxt" >/dev/null || echo "bench: cat of a node failed" >&2
    t2=$(now)
    gls+=("$(sub "$t0" "$t1")")
    gcat+=("$(sub "$t1" "$t2")")
    [ "$n" = 100000 ] || echo "bench: ls listed $n nodes, expected 100000" >&2
    [ "$r" = "$REPS" ] && note_rss "100k-node graph after ls + cat" "$gmnt"
    unmount "$gmnt"
done
T_GLS=nan
T_GCAT=nan
[ ${#gls[@]} -gt 0 ] && T_GLS=$(median "${gls[@]}") && T_GCAT=$(median "${gcat[@]}")
# Calibration: ls of a plain directory of 100 000 files on this machine.
mkdir -p "$WORK/plain_g"
(cd "$WORK/plain_g" && seq -f 'node_%06g.pbtxt' 0 99999 | xargs touch)
pls=()
for r in $(seq "$REPS"); do
    t0=$(now)
    ls "$WORK/plain_g" | wc -l >/dev/null
    pls+=("$(sub "$t0" "$(now)")")
done
T_PLS=$(median "${pls[@]}")
printf '   ls via mount: %s (first listing builds the node index)   cat one node: %s   ls of a plain 100k-file dir: %s\n' \
    "$(ms "$T_GLS")" "$(ms "$T_GCAT")" "$(ms "$T_PLS")"

# ---------------------------------------------------------------------------------------------
# 5 + summary
# ---------------------------------------------------------------------------------------------
echo "== 5: RssAnon (summed over each mount's tfmount processes)"
for n in "${RSS_NOTES[@]}"; do echo "   $n"; done
RSS_MIB=$(awk -v k="$RSS_MAX" 'BEGIN { printf "%.1f", k / 1024 }')

echo
echo "== summary (median of $REPS; noisy machine, load now $(cut -d' ' -f1-3 /proc/loadavg))"
row "figure" "value" "target" "result"
for v in "${VERSIONS[@]}"; do
    row "1. cold read, memfuse/mount ($v)" "${R_COLD[$v]} ($(mbps "$BIG_BYTES" "${T_COLD[$v]}") vs $(mbps "$BIG_BYTES" "$T_MCOLD") MB/s)" ">= 0.9" "$(cmp_ok "${R_COLD[$v]}" '>=' 0.9)"
    row "2. warm read, memfuse/mount ($v)" "${R_WARM[$v]} ($(mbps "$BIG_BYTES" "${T_WARM[$v]}") vs $(mbps "$BIG_BYTES" "$T_MWARM") MB/s)" ">= 0.9" "$(cmp_ok "${R_WARM[$v]}" '>=' 0.9)"
done
row "1/2. dd of the .data file (scale)" "$(mbps "$BIG_BYTES" "$T_BASE") MB/s" "-" "info"
row "3a. start -> cat .shape, 1k tensors" "$(ms "$T_1K")" "-" "info"
row "3b. start -> cat .shape, 1M tensors" "$(ms "$T_1M")" "< 200 ms" "$(cmp_ok "$T_1M" '<' 0.2)"
row "3c. 1M / 1k" "$R_START" "<= 2" "$(cmp_ok "$R_START" '<=' 2)"
walk_rows
declare -F tf2_rows >/dev/null && tf2_rows
if [ "$T_TF" != nan ]; then
    row "4. 100k: walk / tf.train.list_variables" "$(ms "$T_WALK100K") / $(ms "$T_TF")" "-" "info"
fi
row "6a. ls graph/, 100k-node graph" "$(ms "$T_GLS") (plain dir $(ms "$T_PLS"))" "-" "info"
row "6b. then cat one node .pbtxt" "$(ms "$T_GCAT")" "-" "info"
row "5. daemon RssAnon (largest, after 1-4)" "$RSS_MIB MiB" "<= 64 MiB" "$(cmp_ok "$RSS_MIB" '<=' 64)"

# ---------------------------------------------------------------------------------------------
# 7: the subcommands without FUSE (verify, diff, ls -R)
# ---------------------------------------------------------------------------------------------
# bench_cli: after the summary above, its own figures and summary rows:
#   7a. `tfmount verify` of the BIG_GIB single-tensor checkpoint (big/) vs `dd` of its data
#       file, page cache warm for both                                ratio = dd / verify >= 0.5
#   7b. `tfmount diff --stats` of two 100 000-tensor checkpoints (t100k/ and a copy written with
#       `mkckpt --alter-every 100`: 1% of the tensors differ): time < 1 s, data bytes read = 0
#       (the count tfmount prints; the process's whole rchar, indexes included, is shown too)
#   7c. `tfmount ls -R` of the 100 000-tensor checkpoint vs `find` over a fresh mount of it
# Uses $WORK/big and $WORK/t100k written in "data" above, and the helpers of this script.
bench_cli() {
    local r t0 out n base=() ver=() dif=() lsr=() fnd=() mnt lines_ls lines_find
    echo "== 7: subcommands (no FUSE): verify, diff, ls -R"
    # 7a
    "$TFMOUNT" verify "$WORK/big/ckpt" >/dev/null 2>"$WORK/verify.err" # warms the page cache
    for r in $(seq "$REPS"); do
        cat "$BIG_DATA" >/dev/null
        t0=$(now)
        dd if="$BIG_DATA" of=/dev/null bs=1M status=none
        base+=("$(sub "$t0" "$(now)")")
        t0=$(now)
        "$TFMOUNT" verify "$WORK/big/ckpt" >"$WORK/verify.out" 2>"$WORK/verify.err"
        n=$?
        ver+=("$(sub "$t0" "$(now)")")
        [ "$n" = 0 ] && [ ! -s "$WORK/verify.out" ] || echo "bench: verify found problems (exit $n)" >&2
    done
    T7_DD=$(median "${base[@]}")
    T7_VERIFY=$(median "${ver[@]}")
    R7_VERIFY=$(div "$T7_DD" "$T7_VERIFY")
    printf '   dd of .data: %s  %s MB/s   verify: %s  %s MB/s   ratio %s   (%s)\n' \
        "$(ms "$T7_DD")" "$(mbps "$BIG_BYTES" "$T7_DD")" "$(ms "$T7_VERIFY")" \
        "$(mbps "$BIG_BYTES" "$T7_VERIFY")" "$R7_VERIFY" "$(cat "$WORK/verify.err")"
    # 7b
    mk t100k_b --tensors 100000 --alter-every 100
    for r in $(seq "$REPS"); do
        t0=$(now)
        out=$("$TFMOUNT" diff --stats "$WORK/t100k/ckpt" "$WORK/t100k_b/ckpt" 2>"$WORK/diff.err" | wc -l)
        dif+=("$(sub "$t0" "$(now)")")
    done
    T7_DIFF=$(median "${dif[@]}")
    B7_DIFF=$(sed -n 's/.*data bytes read \([0-9]*\).*/\1/p' "$WORK/diff.err")
    B7_DIFF=${B7_DIFF:-nan}
    [ "$out" = 1000 ] || echo "bench: diff printed $out lines, expected 1000" >&2
    printf '   diff: %s lines in %s   (runs: %s)\n   %s\n' "$out" "$(ms "$T7_DIFF")" "${dif[*]}" "$(cat "$WORK/diff.err")"
    # 7c
    new_mountpoint
    mnt=$MP
    for r in $(seq "$REPS"); do
        t0=$(now)
        lines_ls=$("$TFMOUNT" ls -R "$WORK/t100k/ckpt" | wc -l)
        lsr+=("$(sub "$t0" "$(now)")")
        mount_bg "$WORK/t100k/ckpt" "$mnt" || break
        t0=$(now)
        lines_find=$(find "$mnt" -mindepth 1 | wc -l)
        fnd+=("$(sub "$t0" "$(now)")")
        unmount "$mnt"
    done
    T7_LS=$(median "${lsr[@]}")
    T7_FIND=nan
    [ ${#fnd[@]} -gt 0 ] && T7_FIND=$(median "${fnd[@]}")
    [ "$lines_ls" = "${lines_find:-}" ] || echo "bench: ls -R listed $lines_ls paths, find $lines_find" >&2
    printf '   ls -R: %s (%s paths)   find over a fresh mount: %s   ratio find/ls %s\n' \
        "$(ms "$T7_LS")" "$lines_ls" "$(ms "$T7_FIND")" "$(div "$T7_FIND" "$T7_LS")"
    echo
    row "7a. verify 1 GiB tensor / dd (.data)" "$R7_VERIFY ($(mbps "$BIG_BYTES" "$T7_VERIFY") vs $(mbps "$BIG_BYTES" "$T7_DD") MB/s)" ">= 0.5" "$(cmp_ok "$R7_VERIFY" '>=' 0.5)"
    row "7b. diff 100k vs 100k (1% differ)" "$(ms "$T7_DIFF")" "< 1000 ms" "$(cmp_ok "$T7_DIFF" '<' 1)"
    row "7b. diff: data bytes read" "$B7_DIFF" "0" "$(cmp_ok "$B7_DIFF" '<=' 0)"
    row "7c. ls -R 100k (find, fresh mount)" "$(ms "$T7_LS") ($(ms "$T7_FIND"))" "-" "info"
}
bench_cli

bench_v1

# ---------------------------------------------------------------------------------------------
# 9: the views (model.safetensors, text/, stats/)
# ---------------------------------------------------------------------------------------------
# 9a. sequential read (dd bs=1M, fresh mount) of big/tensor's bytes through model.safetensors
#     vs its .bin, same repetitions                                      ratio bin/st >= 0.9
# 9b. model.safetensors of the 100 000-tensor checkpoint on a fresh mount: stat, then read its
#     header (8-byte length + JSON)                                                  < 1 s
# 9c. cat stats/big/tensor.txt on a fresh mount (two passes over the bytes), and RssAnon after
# 9d. text/big/tensor.txt on a fresh mount: time to its first 100 bytes (head -c 100), then the
#     throughput of `cat` of the whole text (once), and RssAnon after
bench_views() {
    echo
    echo "== 9: views of big/tensor and of the 100k-tensor checkpoint (fresh mount per run)"
    new_mountpoint
    vmnt=$MP
    st_runs=()
    bin_runs=()
    hdr_runs=()
    stats_runs=()
    head_runs=()
    V_RSS_STATS=nan
    V_RSS_TEXT=nan
    rss_mib() { # rss_mib MOUNTPOINT: summed RssAnon of the mount's processes, MiB
        local pid kib total=0
        for pid in $(mount_pids "$1"); do
            kib=$(awk '/^RssAnon:/ { print $2 }' "/proc/$pid/status" 2>/dev/null)
            [ -n "$kib" ] && total=$((total + kib))
        done
        awk -v k="$total" 'BEGIN { printf "%.1f", k / 1024 }'
    }
    for r in $(seq "$REPS"); do
        cat "$BIG_DATA" >/dev/null
        bin_runs+=("$(read_v "$WORK/big/ckpt" "$vmnt" variables/big/tensor.bin after)")
        st_runs+=("$(read_v "$WORK/big/ckpt" "$vmnt" model.safetensors after)")
        mount_bg "$WORK/t100k/ckpt" "$vmnt" || break
        t0=$(now)
        size=$(stat -c %s "$vmnt/model.safetensors")
        hlen=$(od -An -t u8 -N8 "$vmnt/model.safetensors" | tr -d ' ')
        head -c $((8 + hlen)) "$vmnt/model.safetensors" | tail -c 1 >/dev/null
        hdr_runs+=("$(sub "$t0" "$(now)")")
        [ "$r" = 1 ] && echo "   100k: model.safetensors $size bytes, header $hlen bytes"
        unmount_wait "$vmnt"
        stats_runs+=("$(stats_v "$WORK/big/ckpt" "$vmnt" big/tensor after)")
        if [ "$r" = "$REPS" ]; then # the daemon's memory after computing the statistics
            mount_bg "$WORK/big/ckpt" "$vmnt" || break
            cat "$vmnt/stats/big/tensor.txt" >/dev/null
            V_RSS_STATS=$(rss_mib "$vmnt")
            unmount_wait "$vmnt"
        fi
        mount_bg "$WORK/big/ckpt" "$vmnt" || break
        t0=$(now)
        head -c 100 "$vmnt/text/big/tensor.txt" >/dev/null || echo "bench: head of text failed" >&2
        head_runs+=("$(sub "$t0" "$(now)")")
        unmount_wait "$vmnt"
    done
    T_ST=$(median "${st_runs[@]:-nan}")
    T_STBIN=$(median "${bin_runs[@]:-nan}")
    T_HDR=$(median "${hdr_runs[@]:-nan}")
    T_STATS=$(median "${stats_runs[@]:-nan}")
    T_HEAD=$(median "${head_runs[@]:-nan}")
    R_ST=$(div "$T_STBIN" "$T_ST")
    sed 's/^/   stats: /' "$WORK/stats.after.txt" | head -12
    # The whole text once: its size, time and the daemon's memory at the end.
    T_TEXT=nan
    TEXT_BYTES=0
    if mount_bg "$WORK/big/ckpt" "$vmnt"; then
        first=$(stat -c %s "$vmnt/text/big/tensor.txt")
        t0=$(now)
        TEXT_BYTES=$(cat "$vmnt/text/big/tensor.txt" | wc -c)
        T_TEXT=$(sub "$t0" "$(now)")
        last=$(stat -c %s "$vmnt/text/big/tensor.txt")
        V_RSS_TEXT=$(rss_mib "$vmnt")
        echo "   text/big/tensor.txt: stat $first before, $last after reading $TEXT_BYTES bytes"
        [ "$last" = "$TEXT_BYTES" ] || echo "bench: text size after cat ($last) != bytes read ($TEXT_BYTES)" >&2
        unmount_wait "$vmnt"
    fi
    printf '   .bin via mount     : %s  %s MB/s (runs: %s)\n' "$(ms "$T_STBIN")" "$(mbps "$BIG_BYTES" "$T_STBIN")" "${bin_runs[*]:-}"
    printf '   model.safetensors  : %s  %s MB/s  bin/safetensors %s (runs: %s)\n' "$(ms "$T_ST")" "$(mbps "$BIG_BYTES" "$T_ST")" "$R_ST" "${st_runs[*]:-}"
    printf '   100k header        : %s (runs: %s)\n' "$(ms "$T_HDR")" "${hdr_runs[*]:-}"
    printf '   stats/ of big      : %s  %s MB/s of .bin (runs: %s), RssAnon after %s MiB\n' "$(ms "$T_STATS")" "$(mbps "$BIG_BYTES" "$T_STATS")" "${stats_runs[*]:-}" "$V_RSS_STATS"
    printf '   text/: first 100 B : %s (runs: %s)\n' "$(ms "$T_HEAD")" "${head_runs[*]:-}"
    printf '   text/: whole cat   : %s  %s MB/s of text, %s MB/s of .bin, RssAnon after %s MiB\n' "$(ms "$T_TEXT")" "$(mbps "$TEXT_BYTES" "$T_TEXT")" "$(mbps "$BIG_BYTES" "$T_TEXT")" "$V_RSS_TEXT"
    echo
    echo "== summary of 9"
    row "figure" "value" "target" "result"
    row "9a. seq read, .bin/model.safetensors" "$R_ST ($(mbps "$BIG_BYTES" "$T_ST") vs $(mbps "$BIG_BYTES" "$T_STBIN") MB/s)" ">= 0.9" "$(cmp_ok "$R_ST" '>=' 0.9)"
    row "9b. 100k tensors: stat + header" "$(ms "$T_HDR")" "< 1 s" "$(cmp_ok "$T_HDR" '<' 1)"
    row "9c. stats/ of big/tensor" "$(ms "$T_STATS"), $V_RSS_STATS MiB" "-" "info"
    row "9d. text/: first 100 bytes" "$(ms "$T_HEAD")" "-" "info"
    row "9d. text/: cat throughput" "$(mbps "$TEXT_BYTES" "$T_TEXT") MB/s, $V_RSS_TEXT MiB" "-" "info"
}
bench_views

bench_direct_io

bench_remote

bench_stream_crc

bench_keras

bench_tflite

bench_whole_tree

bench_python

bench_floor

bench_diff_values
bench_tfjs_floor
