#!/usr/bin/env python3
"""What h5py reads from HDF5 and .keras files, damaged or not: one JSON record per input.

Used by tests/formats/keras_hostile.rs, which damages the Keras fixtures thousands of ways and checks
that every tensor tfmount serves from a damaged file is what h5py reads from it (or that tfmount
fails where h5py does). One process for all inputs: spawning a Python per input would cost
more than the test's whole time budget.

Usage:
    h5_digest.py FILE...        one record per file, as one JSON object {file: record}
    h5_digest.py --spec         damaged copies described on stdin, one per line:
                                    ID <TAB> FILE <TAB> cut=N        the first N bytes of FILE
                                    ID <TAB> FILE <TAB> flip=AT:MASK byte AT xor MASK
                                one JSON line per input: {"id": ID, "record": record}

A record maps what was read to its digest, or says why it could not be read:
    {"error": "..."}                               the file (or its zip) does not open
    {"datasets": {PATH: {"sha256": HEX, "shape": [..]} | {"error": "..."}},
     "attrs": {NAME: HEX | {"error": ..}},          root attributes model_config, training_config
     "members": {NAME: HEX | {"error": ..}},        .keras: config.json, metadata.json
     "walk_error": "..." (when a group could not be listed: the datasets found before are kept)}

PATH is the dataset's HDF5 path without the leading "/". A dataset's bytes are its elements as
libhdf5 reads them with the file's own type as the memory type (no conversion: an h5py bool
holding 2 reads as 2), big-endian elements swapped to little-endian: what tfmount's `.bin`
files hold.

A .keras input (a zip, by its first bytes) is read as Python's zipfile locates
`model.weights.h5`: a stored member without the CRC-32 check (tfmount reads stored members in
place and leaves their CRC to `verify`), a deflated one inflated and checked (as tfmount does).
"""

import hashlib
import io
import json
import sys
import zipfile

import h5py
import numpy as np

WEIGHTS = "model.weights.h5"
MEMBERS = ("config.json", "metadata.json")
ROOT_ATTRS = ("model_config", "training_config")
MAX_DEPTH = 64
# Datasets larger than this are not read (every fixture dataset is far smaller; a damaged shape
# can claim anything).
MAX_BYTES = 64 << 20


def err(e):
    return {"error": f"{type(e).__name__}: {e}"}


def dataset_digest(d):
    """`d`: a low-level DatasetID (the high-level wrappers cost more than the reads)."""
    t = d.get_type()
    size = t.get_size()
    space = d.get_space()
    if space.get_simple_extent_type() == h5py.h5s.NULL:
        raise ValueError("null dataspace")
    shape = space.shape
    n = 1
    for x in shape:
        n *= int(x)
    if n * size > MAX_BYTES:
        raise ValueError(f"{n * size} bytes, more than this script reads")
    buf = np.zeros(n * size, dtype=np.uint8)
    if n:
        d.read(h5py.h5s.ALL, h5py.h5s.ALL, buf, mtype=t)
    big = False
    if isinstance(t, (h5py.h5t.TypeIntegerID, h5py.h5t.TypeFloatID)):
        big = t.get_order() == h5py.h5t.ORDER_BE
    if big and size > 1:
        buf = buf.reshape(-1, size)[:, ::-1].copy()
    return {"sha256": hashlib.sha256(buf.tobytes()).hexdigest(), "shape": [int(x) for x in shape]}


def attr_digest(obj, name):
    v = obj.attrs[name]
    if isinstance(v, np.ndarray):
        v = v.reshape(-1)[0] if v.size else b""
    if isinstance(v, str):
        v = v.encode("utf-8", "surrogateescape")
    if not isinstance(v, (bytes, np.bytes_)):
        raise ValueError(f"not a string: {type(v).__name__}")
    return hashlib.sha256(bytes(v)).hexdigest()


def walk(f, rec):
    """Every dataset below the root, through the low-level API: links listed by iteration,
    each opened by its name (as h5py's `group[name]` does)."""
    datasets = rec["datasets"]
    seen = set()
    todo = [(h5py.h5g.open(f.id, b"/"), "", 0)]
    while todo:
        g, path, depth = todo.pop()
        try:
            key = h5py.h5o.get_info(g).addr
        except Exception:  # noqa: BLE001 - any failure: fall back to the path
            key = path
        if key in seen:
            continue
        seen.add(key)
        names = []
        try:
            g.links.iterate(names.append)
        except Exception as e:  # noqa: BLE001
            rec["walk_error"] = f"{path or '/'}: {type(e).__name__}: {e}"
            continue
        for bname in names:
            name = bname.decode("utf-8", "replace")
            p = f"{path}/{name}" if path else name
            try:
                if g.links.get_info(bname).type != h5py.h5l.TYPE_HARD:
                    continue
            except KeyError:
                # Listed, but not found by name (a symbol table out of order).
                datasets.setdefault(p, {"error": "listed, not found by its name"})
                continue
            except Exception as e:  # noqa: BLE001
                datasets.setdefault(p, err(e))
                continue
            try:
                obj = h5py.h5o.open(g, bname)
            except Exception as e:  # noqa: BLE001
                datasets.setdefault(p, err(e))
                continue
            if isinstance(obj, h5py.h5d.DatasetID):
                try:
                    datasets[p] = dataset_digest(obj)
                except Exception as e:  # noqa: BLE001
                    datasets[p] = err(e)
            elif isinstance(obj, h5py.h5g.GroupID) and depth + 1 < MAX_DEPTH:
                todo.append((obj, p, depth + 1))


def hdf5_record(data):
    rec = {"datasets": {}, "attrs": {}}
    try:
        f = h5py.File(io.BytesIO(data), "r")
    except Exception as e:  # noqa: BLE001
        return err(e)
    with f:
        for a in ROOT_ATTRS:
            try:
                if a in f.attrs:
                    rec["attrs"][a] = attr_digest(f, a)
            except Exception as e:  # noqa: BLE001
                rec["attrs"][a] = err(e)
        try:
            walk(f, rec)
        except Exception as e:  # noqa: BLE001
            rec["walk_error"] = f"{type(e).__name__}: {e}"
    return rec


def keras_record(data):
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
        info = zf.getinfo(WEIGHTS)
        with zf.open(info) as m:
            if info.compress_type == zipfile.ZIP_STORED:
                m._expected_crc = None  # noqa: SLF001 - see the module docstring
            weights = m.read()
    except Exception as e:  # noqa: BLE001
        return err(e)
    rec = hdf5_record(weights)
    members = {}
    for name in MEMBERS:
        try:
            members[name] = hashlib.sha256(zf.read(name)).hexdigest()
        except KeyError:
            pass
        except Exception as e:  # noqa: BLE001
            members[name] = err(e)
    rec["members"] = members
    return rec


def record(data):
    if data[:4] == b"PK\x03\x04":
        return keras_record(data)
    return hdf5_record(data)


def main():
    args = sys.argv[1:]
    if args != ["--spec"]:
        out = {}
        for path in args:
            with open(path, "rb") as fh:
                out[path] = record(fh.read())
        json.dump(out, sys.stdout, indent=1, sort_keys=True)
        print()
        return
    originals = {}
    for line in sys.stdin:
        line = line.rstrip("\n")
        if not line:
            continue
        ident, path, op = line.split("\t")
        if path not in originals:
            with open(path, "rb") as fh:
                originals[path] = fh.read()
        data = originals[path]
        kind, _, arg = op.partition("=")
        if kind == "cut":
            data = data[: int(arg)]
        elif kind == "flip":
            at, mask = (int(x) for x in arg.split(":"))
            b = bytearray(data)
            b[at] ^= mask
            data = bytes(b)
        else:
            raise SystemExit(f"bad operation {op!r}")
        print(json.dumps({"id": ident, "record": record(data)}, sort_keys=True), flush=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
