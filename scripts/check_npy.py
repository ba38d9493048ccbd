#!/usr/bin/env python3
"""Check a mounted tfmount variables directory against an expected record (numpy only, no TensorFlow).

Usage::

    python3 scripts/check_npy.py MOUNTED_VARIABLES_DIR EXPECTED_JSON [--skip-refused]

For every tensor in EXPECTED_JSON (written by scripts/gen_fixtures.py) whose dtype numpy has natively
(float16/32/64, int8/16/32/64, uint8/16/32/64, bool, complex64/128), the file ``key_to_npy_path(key)`` under
MOUNTED_VARIABLES_DIR is loaded with ``numpy.load`` and its dtype name, shape and
``sha256(arr.tobytes())`` are compared with the record. One line is printed per failure, then exactly
``N passed, M failed``; the exit status is 1 if anything failed.

``--skip-refused`` skips tensors that TensorFlow's own reader refuses to reassemble (field
``tf_reader_refused``; e.g. a partitioned float16 tensor). Without it they are checked too, since the
expected value was assembled from TF's per-slice reads.

Path escaping contract (shared with the Rust code -- keep them identical)
--------------------------------------------------------------------------
The key bytes are split on ``b'/'``. For each component:

1. ``%`` -> ``%25`` and NUL (``\\x00``) -> ``%00``;
2. an empty component -> ``%``; ``.`` -> ``%2E``; ``..`` -> ``%2E%2E``;
3. a DIRECTORY component (every component but the last) whose escaped text ends with ``.bin``, ``.shape``,
   ``.dtype`` or ``.npy`` gets its LAST ``.`` replaced by ``%2E`` (so it cannot collide with a tensor's files);
4. an escaped component longer than 200 bytes keeps its first 200 bytes -- the cut moved left while it
   would split a ``%XX`` triple or fall inside a UTF-8 multi-byte sequence (while the byte after the cut is a
   continuation byte 0x80..0xBF) -- followed by ``%#`` and the 16 lowercase hex digits of the FNV-1a 64-bit
   hash of the RAW component. The full key is in the file's ``user.tfmount.key`` extended attribute.

The tensor's file is ``<escaped dir components>/<escaped last component>.npy``.
"""

import hashlib
import json
import os
import sys

import numpy as np

NUMPY_NATIVE = {
    "float16", "float32", "float64",
    "int8", "int16", "int32", "int64",
    "uint8", "uint16", "uint32", "uint64",
    "bool", "complex64", "complex128",
}

MAX_COMPONENT = 200
_DIR_SUFFIXES = (b".bin", b".shape", b".dtype", b".npy", b".pbtxt", b".txt")


def fnv1a64(b):
    h = 0xCBF29CE484222325
    for x in b:
        h ^= x
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def _shorten(e, raw):
    if len(e) <= MAX_COMPONENT:
        return e
    p = MAX_COMPONENT
    while p > 0 and (e[p - 1:p] == b"%" or e[p - 2:p - 1] == b"%" or 0x80 <= e[p] < 0xC0):
        p -= 1
    if p == 0:  # only for pathological bytes; never loop forever
        p = MAX_COMPONENT
    return e[:p] + b"%#" + b"%016x" % fnv1a64(raw)


def escape_component(comp, is_dir, dir_suffixes=None):
    """Escapes one key component into one path component (`dir_suffixes`: the directory
    suffixes rule 3 reserves, default the mount's)."""
    e = comp.replace(b"%", b"%25").replace(b"\x00", b"%00").replace(b"/", b"%2F")
    if e == b"":
        e = b"%"
    elif e == b".":
        e = b"%2E"
    elif e == b"..":
        e = b"%2E%2E"
    sfx = _DIR_SUFFIXES if dir_suffixes is None else tuple(
        x.encode() if isinstance(x, str) else x for x in dir_suffixes)
    if is_dir and sfx and e.endswith(sfx):
        i = e.rindex(b".")
        e = e[:i] + b"%2E" + e[i + 1:]
    return _shorten(e, comp)


def key_to_npy_path(key):
    """Relative path (bytes) of the .npy file of tensor `key` (bytes) inside a variables directory."""
    comps = key.split(b"/")
    levels = []
    for i, comp in enumerate(comps):
        levels.append(escape_component(comp, is_dir=i < len(comps) - 1))
    levels[-1] += b".npy"
    return b"/".join(levels)


def key_bytes(rec):
    if rec.get("key_is_hex"):
        return bytes.fromhex(rec["key_hex"])
    return rec["key"].encode("utf-8")


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    flags = {a for a in argv[1:] if a.startswith("--")}
    if len(args) != 2 or flags - {"--skip-refused"}:
        sys.stderr.write(__doc__)
        return 2
    root = os.fsencode(args[0])
    with open(args[1], encoding="utf-8") as f:
        expected = json.load(f)
    passed = failed = skipped = 0
    for rec in expected["tensors"]:
        if rec["dtype"] not in NUMPY_NATIVE or ("--skip-refused" in flags and rec.get("tf_reader_refused")):
            skipped += 1
            continue
        key = key_bytes(rec)
        path = os.path.join(root, key_to_npy_path(key))
        label = "%r (%s)" % (key, os.fsdecode(path))
        try:
            arr = np.load(path, allow_pickle=False)
        except Exception as e:  # missing file, bad header, ...
            print("FAIL %s: cannot load: %s: %s" % (label, type(e).__name__, e))
            failed += 1
            continue
        problems = []
        if arr.dtype.name != rec["dtype"]:
            problems.append("dtype %s != %s" % (arr.dtype.name, rec["dtype"]))
        if list(arr.shape) != rec["shape"]:
            problems.append("shape %s != %s" % (list(arr.shape), rec["shape"]))
        digest = hashlib.sha256(np.ascontiguousarray(arr).tobytes()).hexdigest()
        if digest != rec["sha256"]:
            problems.append("sha256 %s != %s" % (digest, rec["sha256"]))
        if problems:
            note = " (TF's own reader refuses this tensor)" if rec.get("tf_reader_refused") else ""
            print("FAIL %s: %s%s" % (label, "; ".join(problems), note))
            failed += 1
        else:
            passed += 1
    if skipped:
        print("(%d tensors skipped: dtype not native to numpy%s)"
              % (skipped, " or refused by TF" if "--skip-refused" in flags else ""))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
