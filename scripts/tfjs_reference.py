#!/usr/bin/env python3
"""What tfjs-core's loader makes of a TF.js model directory, with numpy: the reference of
tests/formats/tfjs_hostile.rs.

Reads directory paths on stdin, one a line; for each prints one JSON line:
``{"dir": ..., "parsed": bool, "weights": {name: sha256 hex of the served bytes | null}}``.

Each group's shards are concatenated as they are (tfjs-core's ``loadWeights``) and its weights
decoded in order as ``decodeWeights`` (``tfjs-core/src/io/io_utils.ts``) does: uint8/uint16 values
``q * scale + min`` in float64 then float32 (int32 weights: ``Math.round``, halves up, then
ToInt32), float16 widened bit for bit as its lookup tables do (NaN payloads moved up, no quiet
bit), strings (4-byte length + bytes each) in tfmount's layout (8-byte length + bytes). ``null``:
tfjs-core cannot decode that weight from these bytes (bytes missing, a quantization it refuses).
A shard path that is absolute, has a ``..`` or ``.`` component or is a URL counts as missing (tfmount
does not follow it). Needs numpy only.
"""

import hashlib
import json
import math
import os
import sys

import numpy as np

SIZES = {"float32": 4, "int32": 4, "bool": 1, "complex64": 8}
QSIZES = {"uint8": 1, "uint16": 2, "float16": 2}


def safe(p):
    return (
        isinstance(p, str)
        and p != ""
        and not p.startswith("/")
        and "\\" not in p
        and "://" not in p
        and all(c not in ("", ".", "..") for c in p.split("/"))
    )


def widen_f16(bits):
    bits = bits.astype(np.uint32)
    sign = (bits >> 15) << 31
    exp = (bits >> 10) & 0x1F
    man = bits & 0x3FF
    out = bits.astype(np.uint16).view(np.float16).astype(np.float32).view(np.uint32)
    special = exp == 31
    out = np.where(special, sign | 0x7F800000 | (man << 13), out)
    return out.astype("<u4").tobytes()


def js_round_int32(x):
    f = np.floor(x)
    r = np.where(x - f >= 0.5, f + 1.0, f)
    r = np.where(np.isfinite(r), r, 0.0)
    return np.mod(r, 4294967296.0).astype(np.uint64).astype(np.uint32).view(np.int32)


def decode(w, data, offset):
    """(served bytes or None, stored length or None)."""
    n = math.prod(w["shape"])
    dtype = w["dtype"]
    q = w.get("quantization")
    if q is not None:
        if not isinstance(q, dict) or q.get("dtype") not in QSIZES:
            return None, None
        ln = n * QSIZES[q["dtype"]]
        raw = data[offset:offset + ln]
        if len(raw) != ln:
            return None, ln
        if q["dtype"] == "float16":
            if dtype != "float32":
                return None, ln
            return widen_f16(np.frombuffer(raw, "<u2")), ln
        scale, mn = q.get("scale"), q.get("min")
        if not isinstance(scale, (int, float)) or not isinstance(mn, (int, float)) or isinstance(scale, bool) or isinstance(mn, bool):
            return None, ln
        vals = np.frombuffer(raw, "u1" if q["dtype"] == "uint8" else "<u2").astype(np.float64)
        x = vals * float(scale) + float(mn)
        if dtype == "float32":
            return x.astype("<f4").tobytes(), ln
        if dtype == "int32":
            return js_round_int32(x).astype("<i4").tobytes(), ln
        return None, ln
    if dtype == "string":
        out = bytearray()
        at = offset
        for _ in range(n):
            b = data[at:at + 4]
            if len(b) != 4:
                return None, None
            ln = int.from_bytes(b, "little")
            s = data[at + 4:at + 4 + ln]
            if len(s) != ln:
                return None, None
            out += ln.to_bytes(8, "little") + s
            at += 4 + ln
        return bytes(out), at - offset
    if dtype not in SIZES:
        return None, None
    ln = n * SIZES[dtype]
    raw = data[offset:offset + ln]
    return (raw if len(raw) == ln else None), ln


def reference(d):
    try:
        with open(os.path.join(d, "model.json"), "rb") as f:
            m = json.loads(f.read())
        groups = m["weightsManifest"]
        assert isinstance(groups, list)
    except Exception:
        return {"dir": d, "parsed": False, "weights": {}}
    weights = {}
    for g in groups:
        try:
            paths, ws = g["paths"], g["weights"]
            data = b""
            for p in paths:
                if not safe(p):
                    raise OSError("unsafe")
                with open(os.path.join(d, p), "rb") as f:
                    data += f.read()
        except Exception:
            data = None
        offset = 0
        try:
            for w in ws:
                name = w["name"]
                if not isinstance(name, str):
                    break
                if data is None or offset is None:
                    weights[name] = None
                    continue
                try:
                    served, ln = decode(w, data, offset)
                except Exception:
                    served, ln = None, None
                weights[name] = hashlib.sha256(served).hexdigest() if served is not None else None
                offset = None if ln is None else offset + ln
        except Exception:
            pass
    return {"dir": d, "parsed": True, "weights": weights}


def main():
    for line in sys.stdin:
        d = line.rstrip("\n")
        if d:
            print(json.dumps(reference(d)), flush=True)


if __name__ == "__main__":
    main()
