#!/usr/bin/env bash
# Writes the seed corpora, fuzz/corpus/<target>/<seed>, from the fixture checkpoints in
# tests/fixtures (index files, their entries, string tensors, whole checkpoints, state files).
# Runs the stable harness (examples/fuzz.rs); the corpus is not committed (.gitignore).
# Usage: fuzz/seed.sh [OUT_DIR]      (default fuzz/corpus)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo run -q --example fuzz -- seeds "${1:-fuzz/corpus}"
