#!/usr/bin/env bash
# The benchmarks moved to scripts/bench.py (a declarative table of rows, JSON output, --before
# to compare with a previous run's JSON). This wrapper keeps the old spelling working:
#   ONLY=walk REPS=5 scripts/bench.sh      ==  scripts/bench.py --only walk --reps 5
# Every other variable (BIG_GIB, WALK_TENSORS, V1_MIB, TFMOUNT_BEFORE, TF_PYTHON, ...) is read by
# bench.py itself; arguments are passed on. `scripts/bench.py --help-long` lists them.
set -euo pipefail
cd "$(dirname "$0")/.."
args=()
[ -n "${ONLY:-}" ] && args+=(--only "$ONLY")
[ -n "${REPS:-}" ] && args+=(--reps "$REPS")
exec python3 scripts/bench.py "${args[@]}" "$@"
