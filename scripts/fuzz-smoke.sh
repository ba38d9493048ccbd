#!/usr/bin/env bash
# Fuzz smoke run: every fuzz target for FUZZ_SECS seconds (default 10), from the fixture seeds.
# Exits non-zero if any target fails (a panic, a failed invariant, an abort, a hang); the input
# is saved under fuzz/artifacts/.
#
#   FUZZ_ENGINE=stable     (default; what CI runs) the stable-toolchain harness examples/fuzz.rs:
#                          random mutation without coverage feedback, reusing the debug build
#                          of `cargo test`, so it costs seconds, not minutes.
#   FUZZ_ENGINE=libfuzzer  `cargo fuzz` with libFuzzer and AddressSanitizer: installs cargo-fuzz
#                          if missing and builds the fuzz crate (several minutes on 2 cores the
#                          first time); a stable toolchain works through RUSTC_BOOTSTRAP=1.
#   FUZZ_TARGETS="table strings"   only these targets (default: all).
#   FUZZ_SEED=N            the stable harness's mutation seed (default: from the clock; printed).
set -euo pipefail
cd "$(dirname "$0")/.."

secs="${FUZZ_SECS:-10}"
engine="${FUZZ_ENGINE:-stable}"
targets="${FUZZ_TARGETS:-table bundle_entry strings checkpoint_state checkpoint graph v1 keras tfjs tflite ocdbt zarr orbax_meta npy object_graph safetensors nfs edits}"

case "$engine" in
stable)
    seed=()
    if [ -n "${FUZZ_SEED:-}" ]; then seed=(--seed "$FUZZ_SEED"); fi
    # shellcheck disable=SC2086
    cargo run -q --example fuzz -- run --secs "$secs" "${seed[@]}" $targets
    ;;
libfuzzer)
    if ! cargo fuzz --version >/dev/null 2>&1; then
        echo "installing cargo-fuzz"
        cargo install cargo-fuzz --locked
    fi
    export RUSTC_BOOTSTRAP=1 # cargo fuzz needs nightly features; harmless on a nightly toolchain
    fuzz/seed.sh fuzz/corpus >/dev/null
    log="$(mktemp)"
    trap 'rm -f "$log"' EXIT
    for t in $targets; do
        status=0
        cargo fuzz run -O "$t" -- -max_total_time="$secs" -timeout=10 -malloc_limit_mb=256 \
            -print_final_stats=1 >"$log" 2>&1 || status=$?
        echo "$t: $(grep -oE 'number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' || echo '?') execs"
        if [ "$status" -ne 0 ]; then
            tail -n 40 "$log"
            echo "$t: FAILED (exit $status); the input is in fuzz/artifacts/$t/" >&2
            exit 1
        fi
    done
    ;;
*)
    echo "FUZZ_ENGINE must be stable or libfuzzer" >&2
    exit 2
    ;;
esac
