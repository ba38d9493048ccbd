#!/usr/bin/env bash
# The crate compile-checked for macOS (aarch64-apple-darwin) from this Linux machine:
# `cargo check` of the library and the `tfmount` binary, then of the library with the Python
# module (feature `python`). Nothing is linked or run: there is no Mac here (docs/macos.md says
# what that covers and what not). `scripts/check-macos.sh [cargo check arguments]`.
#
# Idempotent; as root it installs what is missing (Debian's clang and libzstd-dev) and the
# target's standard library (`rustup target add`). Two dependencies compile C in their build
# scripts, and Debian has no macOS SDK:
#   - ring (rustls's crypto provider, for s3:// and https://): its C is freestanding, so
#     Debian's clang compiles it for the Apple target with the compiler's own headers only
#     (-nostdlibinc, -DRING_CORE_NOSTDLIBINC: ring's switch for building without libc headers)
#     and a three-line <TargetConditionals.h> (the SDK's, which names the Apple OS).
#   - zstd-sys (the Orbax chunks' zstd decoder) needs libc's headers: it is told to take the
#     library from pkg-config instead (ZSTD_SYS_USE_PKG_CONFIG), which a check never links, so
#     its C is not compiled here. On a Mac, cargo compiles its bundled zstd with Xcode's clang.
# The Python module needs nothing more: built for the stable ABI (pyo3's abi3-py39), it is
# cross-checked without a macOS Python (pyo3 asks for one, PYO3_CROSS_LIB_DIR, only without
# abi3).
set -euo pipefail
cd "$(dirname "$0")/.."

target=aarch64-apple-darwin

missing=()
command -v clang >/dev/null 2>&1 || missing+=(clang)
pkg-config --exists libzstd 2>/dev/null || missing+=(libzstd-dev)
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "scripts/check-macos.sh: ${missing[*]} missing and not root: apt-get install ${missing[*]}" >&2
        exit 1
    fi
    echo "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if ! rustup target list --installed | grep -qx "$target"; then
    rustup target add "$target" >/dev/null 2>&1 || rustup target add "$target"
fi

stub="${CARGO_TARGET_DIR:-target}/apple-check/include"
mkdir -p "$stub"
[ -f "$stub/TargetConditionals.h" ] ||
    printf '%s\n' '#define TARGET_OS_MAC 1' '#define TARGET_OS_OSX 1' '#define TARGET_OS_IPHONE 0' \
        >"$stub/TargetConditionals.h"
stub="$(cd "$stub" && pwd)"

export CC_aarch64_apple_darwin=clang
export CFLAGS_aarch64_apple_darwin="-nostdlibinc -DRING_CORE_NOSTDLIBINC -isystem $stub"
export ZSTD_SYS_USE_PKG_CONFIG=1
export PKG_CONFIG_ALLOW_CROSS_aarch64_apple_darwin=1

cargo check --target "$target" --lib --bins "$@"
cargo check --target "$target" --lib --features python "$@"
