#!/usr/bin/env python3
"""Generate tfmount's test fixtures with REAL TensorFlow.

How to run
----------
Keep the virtualenv OUTSIDE the repository::

    python3 -m venv ~/tfvenv
    ~/tfvenv/bin/pip install -r scripts/requirements-fixtures.txt
    ~/tfvenv/bin/python scripts/gen_fixtures.py tests/fixtures

The output directory is deleted and regenerated. Everything is seeded, so a re-run
gives the same tensor values (and the same sha256 values in the expected records).
The Rust tests only read the committed outputs; TensorFlow is not needed to run them.

What is written (directory names are part of the test contract)
-----------------------------------------------------------------
* ``tf1_adam/``        TF1 graph-mode ``Saver(max_to_keep=2)`` checkpoint DIRECTORY: a dense layer trained
  with ``AdamOptimizer`` (slots ``dense/kernel/Adam``, ``.../Adam_1``, ``beta1_power``, ``beta2_power``,
  ``global_step`` int64). Saved at steps 1, 2, 3 so ``model.ckpt-1`` is deleted. ``.meta`` files kept.
  The ``checkpoint`` state file is then rewritten with STALE ABSOLUTE paths
  (``/nonexistent/moved/dir/model.ckpt-N``) plus a relative entry ``model.ckpt-1`` whose files are gone.
* ``tf2_keras/``       ``tf.train.Checkpoint(model=keras.Sequential, optimizer=Adam).save`` -> ``ckpt-1``
  (with ``_CHECKPOINTABLE_OBJECT_GRAPH`` and a relative ``checkpoint`` state file).
* ``tf2_slots/``       ``tf.train.Checkpoint`` of a ``tf.Module`` + ``tf.compat.v1.train.AdamOptimizer`` in eager
  mode, which yields the classic ``.OPTIMIZER_SLOT`` keys (Keras 3 optimizers do not).
* ``partitioned/``     TF1 ``Saver`` with partitioned variables (axis 0 and axis 1) merged
  (``MergeV2Checkpoints``) with a bundle written by ``tf.raw_ops.SaveV2`` holding explicitly sliced int32,
  float16 and string tensors. Prefix ``partitioned/model.ckpt`` (2 data shards).
* ``sharded/``         TF1 ``Saver(sharded=True)`` with variables on 3 logical CPUs, including a partitioned
  variable whose slices land on different shards. Prefix ``sharded/model.ckpt`` (3 data shards).
* ``all_dtypes/``      one ``tf.raw_ops.SaveV2`` bundle with one tensor per savable dtype plus empty, scalar,
  rank-4, binary-string, non-finite and odd-name tensors. Prefix ``all_dtypes/ckpt``.
* ``demo_savedmodel/`` ``tf.saved_model.save`` of a ``tf.Module`` with an asset and ``assets.extra/README.txt``.
* ``expected/*.json``  TensorFlow's own view of every tensor (see ``LAYOUT_DOC`` below).
* ``manifest.json``    the mounts the Rust tests perform (run ``scripts/gen_empty_base_fixtures.py`` after this
  script: it adds its ``empty_base*`` entries).

The expected records come from TensorFlow's reader (``tf.train.load_checkpoint(...).get_tensor``), falling
back to ``tf.raw_ops.RestoreV2`` where the Python reader cannot be used (non-UTF-8 key names, or partitioned
dtypes that TF's reader refuses to reassemble: then each stored slice is read with RestoreV2 and assembled
here, and the tensor is listed BOTH in ``tensors`` (flag ``tf_reader_refused``) and in ``unreadable``).
A small independent parser of the ``.index`` SSTable (below) records the raw stored bytes of every entry
and cross-checks block CRCs, tensor CRCs and the raw bytes against TF's values.
"""

import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_npy import key_to_npy_path  # noqa: E402  (the path-escaping contract, shared with the checker)

SEED = 20240611

LAYOUT_DOC = (
    "sha256/nbytes are of the tensor bytes in tfmount's layout: non-string dtypes = row-major little-endian "
    "element bytes exactly as numpy's tobytes() of the array TensorFlow returns (1 byte per element for "
    "int4/uint4/int2/uint2/float8/float4, value in the low bits); strings = for each element in row-major "
    "order an 8-byte little-endian length followed by the bytes. sha256_tf_numpy = sha256 of numpy tobytes() "
    "of TF's array (null for strings, whose numpy form is an object array). stored.sha256 = sha256 of the raw "
    "bytes of the entry in the .data shard; stored.matches_layout tells whether they equal the layout bytes "
    "(always false for strings, whose on-disk form is varint lengths + crc + bytes). npy_path = the tensor's "
    ".npy file relative to the view directory per the escaping contract in scripts/check_npy.py "
    "(npy_path_hex when it is not UTF-8)."
)


# ----------------------------------------------------------------------------------------------
# Minimal independent reader for the V2 bundle index (SSTable) -- used for raw bytes and checks.
# ----------------------------------------------------------------------------------------------

def _make_crc_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE = _make_crc_table()


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = _CRC_TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def crc_mask(c):
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def read_varint(buf, pos):
    result = 0
    shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def snappy_decompress(src):
    n, pos = read_varint(src, 0)
    out = bytearray()
    while pos < len(src):
        tag = src[pos]
        pos += 1
        kind = tag & 3
        if kind == 0:
            ln = tag >> 2
            if ln >= 60:
                nb = ln - 59
                ln = int.from_bytes(src[pos:pos + nb], "little")
                pos += nb
            ln += 1
            out += src[pos:pos + ln]
            pos += ln
            continue
        if kind == 1:
            ln = ((tag >> 2) & 7) + 4
            off = ((tag >> 5) << 8) | src[pos]
            pos += 1
        elif kind == 2:
            ln = (tag >> 2) + 1
            off = int.from_bytes(src[pos:pos + 2], "little")
            pos += 2
        else:
            ln = (tag >> 2) + 1
            off = int.from_bytes(src[pos:pos + 4], "little")
            pos += 4
        for _ in range(ln):
            out.append(out[-off])
    if len(out) != n:
        raise ValueError("snappy: length mismatch")
    return bytes(out)


def _read_block(data, offset, size, stats):
    block = data[offset:offset + size]
    btype = data[offset + size]
    (stored_crc,) = struct.unpack_from("<I", data, offset + size + 1)
    if crc_mask(crc32c(block + bytes([btype]))) != stored_crc:
        raise ValueError("block crc mismatch at %d" % offset)
    if btype == 1:
        stats["snappy_blocks"] += 1
        block = snappy_decompress(block)
    elif btype != 0:
        raise ValueError("bad block type %d" % btype)
    return block


def _iter_block(block):
    (num_restarts,) = struct.unpack_from("<I", block, len(block) - 4)
    end = len(block) - 4 * (num_restarts + 1)
    pos = 0
    key = b""
    while pos < end:
        shared, pos = read_varint(block, pos)
        non_shared, pos = read_varint(block, pos)
        vlen, pos = read_varint(block, pos)
        key = key[:shared] + block[pos:pos + non_shared]
        pos += non_shared
        value = block[pos:pos + vlen]
        pos += vlen
        yield key, value


def read_bundle_index(prefix):
    """Returns (header BundleHeaderProto, [(key bytes, BundleEntryProto)], stats)."""
    from tensorflow.core.protobuf import tensor_bundle_pb2

    with open(prefix + ".index", "rb") as f:
        data = f.read()
    footer = data[-48:]
    if footer[40:] != bytes.fromhex("57fb808b247547db"):
        raise ValueError("bad sstable magic")
    pos = 0
    _meta_off, pos = read_varint(footer, pos)
    _meta_size, pos = read_varint(footer, pos)
    idx_off, pos = read_varint(footer, pos)
    idx_size, pos = read_varint(footer, pos)
    stats = {"data_blocks": 0, "snappy_blocks": 0, "index_file_size": len(data)}
    index_block = _read_block(data, idx_off, idx_size, stats)
    header = None
    entries = []
    for _sep, handle in _iter_block(index_block):
        boff, p = read_varint(handle, 0)
        bsize, p = read_varint(handle, p)
        stats["data_blocks"] += 1
        for key, value in _iter_block(_read_block(data, boff, bsize, stats)):
            if key == b"":
                header = tensor_bundle_pb2.BundleHeaderProto.FromString(value)
            else:
                entries.append((key, tensor_bundle_pb2.BundleEntryProto.FromString(value)))
    keys = [k for k, _ in entries]
    assert keys == sorted(keys), "index keys not sorted"
    return header, entries, stats


def shard_path(prefix, shard_id, num_shards):
    return "%s.data-%05d-of-%05d" % (prefix, shard_id, num_shards)


def read_raw(prefix, header, entry):
    with open(shard_path(prefix, entry.shard_id, header.num_shards), "rb") as f:
        f.seek(entry.offset)
        raw = f.read(entry.size)
    if len(raw) != entry.size:
        raise ValueError("short data read")
    return raw


def decode_raw_strings(raw, n):
    """Decodes the on-disk DT_STRING form (varint lengths, masked crc, bytes); checks both crcs."""
    pos = 0
    lens = []
    crc = 0
    for _ in range(n):
        ln, pos = read_varint(raw, pos)
        lens.append(ln)
        crc = crc32c(struct.pack("<I", ln) if ln <= 0xFFFFFFFF else struct.pack("<Q", ln), crc)
    (stored,) = struct.unpack_from("<I", raw, pos)
    if stored != crc_mask(crc):
        raise ValueError("string length checksum mismatch")
    crc = crc32c(raw[pos:pos + 4], crc)
    pos += 4
    out = []
    for ln in lens:
        out.append(raw[pos:pos + ln])
        crc = crc32c(raw[pos:pos + ln], crc)
        pos += ln
    if pos != len(raw):
        raise ValueError("string tensor size mismatch")
    return out, crc_mask(crc)


def decode_raw_variants(raw, n, entry_crc):
    """Checks the on-disk DT_VARIANT form (per element: varint64 len, VariantTensorDataProto, masked running crc)
    and returns the type_name of each element."""
    from tensorflow.core.framework import tensor_pb2

    pos = 0
    crc = 0
    names = []
    for _ in range(n):
        ln, pos = read_varint(raw, pos)
        body = raw[pos:pos + ln]
        pos += ln
        crc = crc32c(body, crc32c(struct.pack("<Q", ln), crc))
        (stored,) = struct.unpack_from("<I", raw, pos)
        if stored != crc_mask(crc):
            raise ValueError("variant element checksum mismatch")
        crc = crc32c(raw[pos:pos + 4], crc)
        pos += 4
        names.append(tensor_pb2.VariantTensorDataProto.FromString(body).type_name)
    if pos != len(raw) or crc_mask(crc) != entry_crc:
        raise ValueError("variant tensor size/crc mismatch")
    return names


def _num_increasing(v):
    b = v.to_bytes(8, "big").lstrip(b"\x00")
    return bytes([len(b)]) + b


_LEN_HEADER = {2: (0xC0, 0x00), 3: (0xE0, 0x00), 4: (0xF0, 0x00), 5: (0xF8, 0x00), 6: (0xFC, 0x00),
               7: (0xFE, 0x00), 8: (0xFF, 0x00), 9: (0xFF, 0x80), 10: (0xFF, 0xC0)}


def _signed_num_increasing(v):
    x = ~v if v < 0 else v
    if x < 64:
        return bytes([(0x80 ^ v) & 0xFF])
    n = 1 + x.bit_length() // 7
    buf = bytearray((b"\xff\xff" if v < 0 else b"\x00\x00") + (v & (2 ** 64 - 1)).to_bytes(8, "big"))
    out = buf[10 - n:]
    out[0] ^= _LEN_HEADER[n][0]
    out[1] ^= _LEN_HEADER[n][1]
    return bytes(out)


def encode_tensor_name_slice(name, tslice):
    """checkpoint::EncodeTensorNameSlice (OrderedCode), as described in docs/tf-format.md section 5.2."""
    out = bytearray(_num_increasing(0))
    esc = bytearray()
    for c in name:
        esc += b"\x00\xff" if c == 0 else (b"\xff\x00" if c == 0xFF else bytes([c]))
    out += esc + b"\x00\x01"
    out += _num_increasing(len(tslice.extent))
    for e in tslice.extent:
        if not e.HasField("length"):
            start, length = 0, -1
        else:
            start, length = e.start, e.length
        out += _signed_num_increasing(start) + _signed_num_increasing(length)
    return bytes(out)


def slice_to_str(tslice):
    parts = []
    for e in tslice.extent:
        if not e.HasField("length"):
            parts.append("-")
        else:
            parts.append("%d,%d" % (e.start, e.length))
    return ":".join(parts)


def slice_to_index(tslice, full_shape):
    idx = []
    for d, e in enumerate(tslice.extent):
        if not e.HasField("length"):
            idx.append(slice(0, full_shape[d]))
        else:
            idx.append(slice(e.start, e.start + e.length))
    return tuple(idx)


# ----------------------------------------------------------------------------------------------
# Expected records
# ----------------------------------------------------------------------------------------------

def sha(b):
    return hashlib.sha256(b).hexdigest()


def layout_bytes(arr, dtype):
    if dtype == tf.string:
        return b"".join(struct.pack("<Q", len(s)) + bytes(s) for s in np.asarray(arr, dtype=object).flat)
    return np.ascontiguousarray(arr).tobytes()


def err_text(e):
    msg = getattr(e, "message", None) or str(e)
    msg = msg.strip().splitlines()[0] if msg.strip() else ""
    return ("%s: %s" % (type(e).__name__, msg)).strip()


def key_fields(key):
    path = key_to_npy_path(key)
    try:
        out = {"key": key.decode("utf-8")}
    except UnicodeDecodeError:
        out = {"key": key.hex(), "key_hex": key.hex(), "key_is_hex": True}
    try:
        out["npy_path"] = path.decode("utf-8")
    except UnicodeDecodeError:
        out["npy_path"] = path.hex()
        out["npy_path_hex"] = path.hex()
    return out


def restore_v2(prefix, key, spec, dtype):
    out = tf.raw_ops.RestoreV2(prefix=prefix, tensor_names=tf.constant([key]),
                               shape_and_slices=tf.constant([spec]), dtypes=[dtype])
    return out[0].numpy()


def tf_view(root, prefix_rel, unsavable=None, extra_notes=()):
    """TensorFlow's view of the checkpoint at root/prefix_rel, as a json-able dict."""
    prefix = os.path.join(root, prefix_rel)
    header, entries, stats = read_bundle_index(prefix)
    notes = list(extra_notes)
    reader = tf.train.load_checkpoint(prefix)
    listed = None
    try:
        dmap = reader.get_variable_to_dtype_map()
        smap = reader.get_variable_to_shape_map()
        listed = dict(tf.train.list_variables(prefix))
        if set(dmap) != set(listed) or set(smap) != set(listed):
            notes.append("TF's dtype/shape maps and list_variables disagree")
    except Exception as e:  # e.g. a non-UTF-8 key makes TF's Python listing fail
        notes.append("TF's Python reader cannot LIST this checkpoint (%s); keys come from the index and "
                     "tensors whose key is not UTF-8 are read with tf.raw_ops.RestoreV2" % err_text(e))
        dmap = smap = None

    full = [(k, e) for k, e in entries if k[:1] != b"\x00"]
    slice_entries = [(k, e) for k, e in entries if k[:1] == b"\x00"]
    if listed is not None:
        want = sorted(k.encode("utf-8") for k in listed)
        if want != [k for k, _ in full]:
            raise AssertionError("TF lists %r but the index holds %r" % (want, [k for k, _ in full]))

    tensors = []
    unreadable = {}
    by_key = dict(entries)
    slice_owner = {}
    raw_mismatch = []
    for key, entry in full:
        dt = tf.as_dtype(entry.dtype)
        shape = [d.size for d in entry.shape.dim]
        rec = dict(key_fields(key))
        rec["dtype"] = dt.name
        rec["dtype_enum"] = int(entry.dtype)
        rec["shape"] = shape
        if dmap is not None:
            skey = key.decode("utf-8")
            if dmap[skey] != dt or list(smap[skey]) != shape:
                raise AssertionError("TF dtype/shape differ for %r" % key)
        value = None
        try:
            if dmap is not None or not rec.get("key_is_hex"):
                value = reader.get_tensor(key.decode("utf-8"))
            else:
                value = restore_v2(prefix, key, "", dt)
        except Exception as e:
            unreadable[rec["key"]] = err_text(e)
            if entry.slices:
                # TF refuses to reassemble this dtype: read each stored slice with RestoreV2 (exact-match path)
                value = np.empty(shape, dtype=object if dt == tf.string else dt.as_numpy_dtype)
                for s in entry.slices:
                    spec = " ".join(str(d) for d in shape) + " " + slice_to_str(s)
                    value[slice_to_index(s, shape)] = restore_v2(prefix, key, spec, dt)
                rec["tf_reader_refused"] = unreadable[rec["key"]]
                rec["assembled_by"] = ("gen_fixtures: tf.raw_ops.RestoreV2 of each stored slice "
                                       "(exact slice spec), placed into the full shape")
            else:
                rec["stored"] = raw_record(prefix, header, entry, dt, shape, None)
                rec["tf_reader_refused"] = unreadable[rec["key"]]
                rec["not_in_tensors_reason"] = "TF cannot return a value"
                tensors.append(("unreadable", rec))
                continue
        if dt == tf.string:
            value = np.asarray(value, dtype=object)
            if value.shape == () and not isinstance(value.item(), bytes):
                value = np.asarray(value.item(), dtype=object)
        else:
            value = np.asarray(value)
            if value.dtype != np.dtype(dt.as_numpy_dtype):
                notes.append("%s: TF returned numpy dtype %s for %s" % (rec["key"], value.dtype, dt.name))
        if list(value.shape) != shape:
            raise AssertionError("shape mismatch for %r: %r vs %r" % (key, value.shape, shape))
        lb = layout_bytes(value, dt)
        rec["nbytes"] = len(lb)
        rec["sha256"] = sha(lb)
        rec["sha256_tf_numpy"] = None if dt == tf.string else sha(value.tobytes())
        if len(lb) <= 64:
            rec["hex"] = lb.hex()
        if entry.slices:
            rec["slices"] = [slice_to_str(s) for s in entry.slices]
            for s in entry.slices:
                skey = encode_tensor_name_slice(key, s)
                if skey not in by_key:
                    raise AssertionError("slice entry for %r %s not found" % (key, slice_to_str(s)))
                slice_owner[skey] = (rec["key"], slice_to_str(s), value[slice_to_index(s, shape)])
        else:
            rec["stored"] = raw_record(prefix, header, entry, dt, shape, value)
            if dt != tf.string and not rec["stored"]["matches_layout"]:
                raw_mismatch.append(rec["key"])
        tensors.append(("ok", rec))

    slice_recs = []
    for key, entry in slice_entries:
        dt = tf.as_dtype(entry.dtype)
        shape = [d.size for d in entry.shape.dim]
        owner, spec, sub = slice_owner.get(key, (None, None, None))
        srec = {"key_hex": key.hex(), "of": owner, "slice": spec, "dtype": dt.name, "shape": shape}
        srec["stored"] = raw_record(prefix, header, entry, dt, shape, sub)
        if owner is None:
            notes.append("slice entry %s is not referenced by any full entry" % key.hex())
        elif dt != tf.string and not srec["stored"]["matches_layout"]:
            raise AssertionError("slice %s data differs from TF's assembled tensor" % key.hex())
        slice_recs.append(srec)
    if raw_mismatch:
        notes.append("raw stored bytes differ from TF's numpy bytes for: %s" % ", ".join(raw_mismatch))
    out = {
        "tf_version": tf.__version__,
        "prefix": prefix_rel,
        "layout": LAYOUT_DOC,
        "header": {"num_shards": header.num_shards, "endianness": int(header.endianness),
                   "version_producer": header.version.producer},
        "index_stats": stats,
        "tensors": [r for status, r in tensors if status == "ok"],
        "unreadable": unreadable,
        "unreadable_entries": [r for status, r in tensors if status != "ok"],
        "slice_entries": slice_recs,
        "unsavable": unsavable or {},
        "notes": notes,
    }
    return out


def raw_record(prefix, header, entry, dt, shape, value):
    raw = read_raw(prefix, header, entry)
    rec = {"shard_id": entry.shard_id, "offset": entry.offset, "size": entry.size,
           "crc32c_masked": entry.crc32c, "sha256": sha(raw)}
    n = int(np.prod(shape)) if shape else 1
    if dt == tf.string:
        strs, crc = decode_raw_strings(raw, n)
        if crc != entry.crc32c:
            raise ValueError("string tensor crc mismatch")
        if value is not None and list(np.asarray(value, dtype=object).flat) != strs:
            raise AssertionError("raw strings differ from TF's values")
        rec["matches_layout"] = False
    elif dt == tf.variant:
        rec["variant_type_names"] = decode_raw_variants(raw, n, entry.crc32c)
        rec["matches_layout"] = False
    else:
        if crc_mask(crc32c(raw)) != entry.crc32c:
            raise ValueError("tensor crc mismatch")
        rec["matches_layout"] = value is not None and raw == np.ascontiguousarray(value).tobytes()
    return rec


def write_json(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, ensure_ascii=False, sort_keys=False)
        f.write("\n")


def file_sha(path):
    with open(path, "rb") as f:
        return sha(f.read())


# ----------------------------------------------------------------------------------------------
# Fixture builders
# ----------------------------------------------------------------------------------------------

def gen_tf1_adam(out):
    d = os.path.join(out, "tf1_adam")
    os.makedirs(d)
    rng = np.random.default_rng(SEED + 1)
    xs = rng.normal(size=(8, 3)).astype(np.float32)
    ys = rng.normal(size=(8, 4)).astype(np.float32)
    g = tf.Graph()
    with g.as_default():
        tf.compat.v1.set_random_seed(SEED)
        x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
        y = tf.compat.v1.placeholder(tf.float32, [None, 4], name="y")
        with tf.compat.v1.variable_scope("dense"):
            kernel = tf.compat.v1.get_variable(
                "kernel", [3, 4], initializer=tf.compat.v1.glorot_uniform_initializer(seed=1))
            bias = tf.compat.v1.get_variable("bias", [4], initializer=tf.compat.v1.zeros_initializer())
        pred = tf.matmul(x, kernel) + bias
        loss = tf.reduce_mean(tf.square(pred - y))
        global_step = tf.compat.v1.train.get_or_create_global_step()
        train = tf.compat.v1.train.AdamOptimizer(0.01).minimize(loss, global_step=global_step)
        saver = tf.compat.v1.train.Saver(max_to_keep=2)
        with tf.compat.v1.Session(graph=g) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            for _ in range(3):
                sess.run(train, {x: xs, y: ys})
                saver.save(sess, os.path.join(d, "model.ckpt"), global_step=global_step)
    files = sorted(os.listdir(d))
    assert not any(f.startswith("model.ckpt-1.") for f in files), files
    with open(os.path.join(d, "checkpoint")) as f:
        tf_state = f.read()
    state = (
        'model_checkpoint_path: "/nonexistent/moved/dir/model.ckpt-3"\n'
        'all_model_checkpoint_paths: "model.ckpt-1"\n'
        'all_model_checkpoint_paths: "/nonexistent/moved/dir/model.ckpt-2"\n'
        'all_model_checkpoint_paths: "/nonexistent/moved/dir/model.ckpt-3"\n'
        "all_model_checkpoint_timestamps: 1700000001.5\n"
        "all_model_checkpoint_timestamps: 1700000002.5\n"
        "all_model_checkpoint_timestamps: 1700000003.5\n"
        "last_preserved_timestamp: 1699999999.25\n"
    )
    with open(os.path.join(d, "checkpoint"), "w") as f:
        f.write(state)
    notes = ["state file rewritten: model_checkpoint_path is a stale absolute path; the first "
             "all_model_checkpoint_paths entry (model.ckpt-1) was deleted by max_to_keep=2. TF originally wrote:\n"
             + re.sub(r"/\S*/tf1_adam/", "<dir>/", re.sub(r"timestamps?: [0-9.e+]+", "timestamp: <t>", tf_state))]
    try:
        latest = tf.train.latest_checkpoint(d)
    except Exception as e:
        latest = "error: " + err_text(e)
    notes.append("tf.train.latest_checkpoint(dir) on the rewritten state file returns %r "
                 "(TF does not resolve stale absolute paths by base name)" % (latest,))
    views = {}
    for step in (3, 2):
        name = "model.ckpt-%d" % step
        rel = "expected/tf1_adam.%s.json" % name
        write_json(os.path.join(out, rel), tf_view(out, "tf1_adam/" + name, extra_notes=notes))
        views[name + "/variables"] = rel
    return [{"name": "tf1_adam", "source": "tf1_adam", "kind": "ckpt_dir", "views": views,
             "symlinks": {"latest": "model.ckpt-3"}, "absent": ["model.ckpt-1"],
             "checkpoints": ["model.ckpt-2", "model.ckpt-3"],
             "meta_files": ["model.ckpt-2.meta", "model.ckpt-3.meta"],
             "tf_latest_checkpoint": latest}]


def gen_tf2_keras(out):
    import keras

    d = os.path.join(out, "tf2_keras")
    os.makedirs(d)
    keras.utils.set_random_seed(SEED)
    tf.random.set_seed(SEED)
    rng = np.random.default_rng(SEED + 2)
    model = keras.Sequential([keras.Input((3,)),
                              keras.layers.Dense(4, activation="relu", name="hidden"),
                              keras.layers.Dense(2, name="logits")], name="seq")
    opt = keras.optimizers.Adam(learning_rate=0.01)
    xs = rng.normal(size=(6, 3)).astype(np.float32)
    ys = rng.normal(size=(6, 2)).astype(np.float32)
    for _ in range(2):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(xs) - ys))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
    ckpt = tf.train.Checkpoint(model=model, optimizer=opt)
    path = ckpt.save(os.path.join(d, "ckpt"))
    assert os.path.basename(path) == "ckpt-1", path
    note = ("Keras %s optimizer: its slots are plain tracked lists (optimizer/_variables/N), not "
            ".OPTIMIZER_SLOT entries; the model's variables are reached first (BFS, shortest path) through "
            "optimizer/_trainable_variables/N, so no model/... keys appear" % keras.__version__)
    write_json(os.path.join(out, "expected/tf2_keras.json"), tf_view(out, "tf2_keras/ckpt-1", extra_notes=[note]))
    return [{"name": "tf2_keras", "source": "tf2_keras/ckpt-1", "kind": "prefix",
             "views": {"variables": "expected/tf2_keras.json"}},
            {"name": "tf2_keras_dir", "source": "tf2_keras", "kind": "ckpt_dir",
             "views": {"ckpt-1/variables": "expected/tf2_keras.json"},
             "symlinks": {"latest": "ckpt-1"}, "absent": [], "checkpoints": ["ckpt-1"]}]


def gen_tf2_slots(out):
    d = os.path.join(out, "tf2_slots")
    os.makedirs(d)
    tf.random.set_seed(SEED)
    rng = np.random.default_rng(SEED + 3)

    class Net(tf.Module):
        def __init__(self):
            super().__init__()
            self.kernel = tf.Variable(rng.normal(size=(3, 4)).astype(np.float32), name="kernel")
            self.bias = tf.Variable(np.zeros(4, np.float32), name="bias")

    net = Net()
    opt = tf.compat.v1.train.AdamOptimizer(0.01)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.square(tf.matmul(tf.ones([2, 3]), net.kernel) + net.bias))
    grads = tape.gradient(loss, [net.kernel, net.bias])
    opt.apply_gradients(zip(grads, [net.kernel, net.bias]))
    extra = {"step": tf.Variable(5, dtype=tf.int64)}
    # a local name with '.' and '/' to exercise escape_local_name ('.' -> '..', '/' -> '.S')
    extra["odd.name/x"] = tf.Variable(np.arange(3, dtype=np.int32))
    ckpt = tf.train.Checkpoint(net=net, opt=opt, **extra)
    path = ckpt.write(os.path.join(d, "ckpt-1"))
    assert path.endswith("ckpt-1")
    write_json(os.path.join(out, "expected/tf2_slots.json"), tf_view(out, "tf2_slots/ckpt-1"))
    return [{"name": "tf2_slots", "source": "tf2_slots/ckpt-1", "kind": "prefix",
             "views": {"variables": "expected/tf2_slots.json"}}]


def gen_partitioned(out):
    d = os.path.join(out, "partitioned")
    os.makedirs(d)
    tmp = tempfile.mkdtemp(prefix="tfmount_part_")
    try:
        g = tf.Graph()
        with g.as_default():
            tf.compat.v1.set_random_seed(SEED)
            emb = tf.compat.v1.get_variable(
                "emb", shape=[10, 3], partitioner=tf.compat.v1.fixed_size_partitioner(3),
                initializer=tf.compat.v1.random_normal_initializer(seed=11))
            wide = tf.compat.v1.get_variable(
                "layer/wide", shape=[4, 6], partitioner=tf.compat.v1.fixed_size_partitioner(2, axis=1),
                initializer=tf.compat.v1.random_uniform_initializer(seed=12))
            plain = tf.compat.v1.get_variable("plain", shape=[2, 2],
                                              initializer=tf.compat.v1.ones_initializer())
            del emb, wide, plain
            saver = tf.compat.v1.train.Saver()
            with tf.compat.v1.Session(graph=g) as sess:
                sess.run(tf.compat.v1.global_variables_initializer())
                pa = saver.save(sess, os.path.join(tmp, "a"), write_meta_graph=False, write_state=False)
        ints = np.arange(24, dtype=np.int32).reshape(6, 4) * 7 - 50
        halves = (np.arange(12, dtype=np.float16).reshape(4, 3) / 4 - 1)
        strs = np.array([[b"r0c0", b"", b"r0c2"], [b"r1\x00c1", b"\xff\xfe", b"x" * 150],
                         [b"r2", b"row2", b"c"], [b"", b"", b"last"]], dtype=object)
        nibbles = np.array([[-8, -1, 0], [7, 3, -4], [1, 2, -2], [-7, 5, 6]], dtype=tf.as_dtype("int4").as_numpy_dtype)
        pb = os.path.join(tmp, "b")
        names, specs, tensors = [], [], []
        for nm, arr, cuts in (("ints", ints, [(0, 2), (2, 4)]),
                              ("halves", halves, [(0, 1), (1, 3)]),
                              ("strs", strs, [(0, 3), (3, 1)]),
                              ("nibbles", nibbles, [(0, 3), (3, 1)])):
            for start, length in cuts:
                names.append(nm)
                specs.append("%d %d %d,%d:-" % (arr.shape[0], arr.shape[1], start, length))
                tensors.append(tf.constant(arr[start:start + length]))
        tf.raw_ops.SaveV2(prefix=pb, tensor_names=names, shape_and_slices=specs, tensors=tensors)
        notes = []
        tf.raw_ops.MergeV2Checkpoints(checkpoint_prefixes=[pa, pb], destination_prefix=os.path.join(d, "model.ckpt"),
                                      delete_old_dirs=False)
    finally:
        shutil.rmtree(tmp)
    notes.append("prefix = MergeV2Checkpoints([Saver checkpoint with emb/layer/wide/plain, SaveV2 bundle with "
                 "ints(int32)/halves(float16)/strs(string)/nibbles(int4) slices]) -> 2 data shards")
    write_json(os.path.join(out, "expected/partitioned.json"),
               tf_view(out, "partitioned/model.ckpt", extra_notes=notes))
    return [{"name": "partitioned", "source": "partitioned/model.ckpt", "kind": "prefix",
             "views": {"variables": "expected/partitioned.json"}}]


def gen_sharded(out):
    d = os.path.join(out, "sharded")
    os.makedirs(d)
    devs = ["/device:CPU:0", "/device:CPU:1", "/device:CPU:2"]
    g = tf.Graph()
    with g.as_default():
        tf.compat.v1.set_random_seed(SEED)
        for i, dev in enumerate(devs):
            with tf.device(dev):
                tf.compat.v1.get_variable("layer%d/w" % i, shape=[4, 3],
                                          initializer=tf.compat.v1.random_normal_initializer(seed=20 + i))
                tf.compat.v1.get_variable("layer%d/b" % i, shape=[3], dtype=tf.float64,
                                          initializer=tf.compat.v1.constant_initializer(i + 0.5))
        with tf.device(devs[1]):
            tf.compat.v1.get_variable("counter", shape=[], dtype=tf.int64,
                                      initializer=tf.compat.v1.constant_initializer(123456789012))
        counter = [0]

        def round_robin(op):
            if op.type in ("VarHandleOp", "VariableV2"):
                dev = devs[counter[0] % len(devs)]
                counter[0] += 1
                return dev
            return ""

        with g.device(round_robin):
            tf.compat.v1.get_variable("emb", shape=[9, 2], partitioner=tf.compat.v1.fixed_size_partitioner(3),
                                      initializer=tf.compat.v1.random_normal_initializer(seed=30))
        saver = tf.compat.v1.train.Saver(sharded=True)
        cfg = tf.compat.v1.ConfigProto(device_count={"CPU": 3}, allow_soft_placement=True)
        with tf.compat.v1.Session(graph=g, config=cfg) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            p = saver.save(sess, os.path.join(d, "model.ckpt"), write_meta_graph=False, write_state=False)
    assert p.endswith("model.ckpt"), p
    view = tf_view(out, "sharded/model.ckpt")
    assert view["header"]["num_shards"] == 3, view["header"]
    write_json(os.path.join(out, "expected/sharded.json"), view)
    return [{"name": "sharded", "source": "sharded/model.ckpt", "kind": "prefix",
             "views": {"variables": "expected/sharded.json"}}]


ALL_DTYPES = ["float16", "float32", "float64", "bfloat16", "int8", "int16", "int32", "int64", "uint8", "uint16",
              "uint32", "uint64", "bool", "complex64", "complex128", "string", "qint8", "quint8", "qint16",
              "quint16", "qint32", "float8_e5m2", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e4m3b11fnuz",
              "float8_e5m2fnuz", "int4", "uint4", "int2", "uint2", "float4_e2m1fn", "variant", "resource"]

_QBASE = {"qint8": np.int8, "quint8": np.uint8, "qint16": np.int16, "quint16": np.uint16, "qint32": np.int32}


def make_dtype_tensor(name, rng):
    """A [2,3] tensor (or [3] for strings) of dtype `name` with a spread of values."""
    if name == "string":
        return tf.constant(np.array([b"alpha", b"", b"\x00\xff mixed"], dtype=object))
    if name == "variant":
        return tf.raw_ops.TensorListFromTensor(tensor=tf.constant([1.0, 2.0, 3.0]),
                                               element_shape=tf.constant([], tf.int32))
    if name == "resource":
        raise RuntimeError("checked in a subprocess")
    dt = tf.as_dtype(name)
    if name in _QBASE:
        info = np.iinfo(_QBASE[name])
        base = np.array([info.min, info.min // 2 + 1, 0, 1, info.max // 3, info.max], dtype=_QBASE[name])
        return tf.bitcast(tf.constant(base.reshape(2, 3)), dt)
    if name == "bool":
        return tf.constant(np.array([[True, False, True], [False, False, True]]))
    if name.startswith("complex"):
        v = rng.normal(size=(2, 3)) + 1j * rng.normal(size=(2, 3))
        return tf.constant(v.astype(dt.as_numpy_dtype))
    if name in ("int4", "uint4", "int2", "uint2"):
        vals = {"int4": [-8, -3, -1, 0, 1, 7], "uint4": [0, 1, 5, 9, 14, 15],
                "int2": [-2, -1, 0, 1, 1, -2], "uint2": [0, 1, 2, 3, 3, 0]}[name]
        return tf.constant(np.array(vals, dtype=dt.as_numpy_dtype).reshape(2, 3))
    if dt.is_integer:
        npdt = np.dtype(dt.as_numpy_dtype)
        info = np.iinfo(npdt)
        vals = [info.min, -1 if info.min < 0 else 2, 0, 1, info.max // 7, info.max]
        return tf.constant(np.array(vals, dtype=npdt).reshape(2, 3))
    if name.startswith("float8") or name.startswith("float4"):
        vals = np.array([-2.0, -0.5, 0.0, 0.25, 1.5, 3.0], dtype=np.float32).reshape(2, 3)
        return tf.constant(vals.astype(dt.as_numpy_dtype))
    vals = (rng.normal(size=(2, 3)) * 10).astype(np.float32)
    return tf.constant(vals.astype(dt.as_numpy_dtype))


def try_resource_in_subprocess():
    """SaveV2 of a DT_RESOURCE tensor CHECK-fails (aborts the process), so try it in a child."""
    code = ("import os\nos.environ['TF_CPP_MIN_LOG_LEVEL']='2'\nimport tempfile, tensorflow as tf\n"
            "v = tf.Variable(1.0)\n"
            "p = os.path.join(tempfile.mkdtemp(), 'r')\n"
            "tf.raw_ops.SaveV2(prefix=p, tensor_names=['r'], shape_and_slices=[''], tensors=[v.handle])\n"
            "print('SAVED')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    if "SAVED" in proc.stdout:
        return None
    lines = [ln for ln in proc.stderr.splitlines() if "Check failed" in ln or "Error" in ln]
    msg = lines[0] if lines else "exit code %d" % proc.returncode
    msg = re.sub(r"^F\d+ [\d:.]+\s+\d+ ", "", msg)
    return "process aborted (exit %d): %s" % (proc.returncode, msg)


def gen_all_dtypes(out):
    d = os.path.join(out, "all_dtypes")
    os.makedirs(d)
    rng = np.random.default_rng(SEED + 5)
    prefix = os.path.join(d, "ckpt")
    names, tensors = [], []
    unsavable = {}

    def add(key, t):
        names.append(key.encode("utf-8") if isinstance(key, str) else key)
        tensors.append(t)

    probe_dir = tempfile.mkdtemp(prefix="tfmount_probe_")
    try:
        for name in ALL_DTYPES:
            if name == "resource":
                err = try_resource_in_subprocess()
                if err:
                    unsavable[name] = err
                    continue
            try:
                tf.as_dtype(name)  # TypeError if this TensorFlow has no such dtype
                t = make_dtype_tensor(name, rng)
                # probe: each dtype alone, so one refusal does not sink the whole bundle
                tf.raw_ops.SaveV2(prefix=os.path.join(probe_dir, name), tensor_names=["x"],
                                  shape_and_slices=[""], tensors=[t])
            except Exception as e:
                unsavable[name] = err_text(e)
                continue
            add("dtypes/" + name, t)
    finally:
        shutil.rmtree(probe_dir)

    i4 = tf.as_dtype("int4").as_numpy_dtype
    # empty tensors
    add("empty/float32_0", tf.zeros([0], tf.float32))
    add("empty/int32_2x0x3", tf.zeros([2, 0, 3], tf.int32))
    add("empty/string_0", tf.constant(np.array([], dtype=object).astype(bytes), dtype=tf.string))
    add("empty/bfloat16_0x4", tf.zeros([0, 4], tf.bfloat16))
    # scalars
    add("scalar/float32", tf.constant(3.25, tf.float32))
    add("scalar/float64", tf.constant(-1e300, tf.float64))
    add("scalar/int64", tf.constant(-9007199254740993, tf.int64))
    add("scalar/uint8", tf.constant(200, tf.uint8))
    add("scalar/bool", tf.constant(True))
    add("scalar/string", tf.constant(b"scalar string"))
    add("scalar/float16", tf.constant(0.1, tf.float16))
    add("scalar/bfloat16", tf.constant(1.5, tf.bfloat16))
    add("scalar/complex64", tf.constant(1 - 2j, tf.complex64))
    add("scalar/int4", tf.constant(np.array(-5, dtype=i4)))
    # rank 4
    add("rank4/float32", tf.constant(rng.normal(size=(2, 3, 2, 2)).astype(np.float32)))
    add("rank4/int16", tf.constant(np.arange(-12, 12, dtype=np.int16).reshape(1, 2, 3, 4)))
    # strings
    add("strings/bytes_256", tf.constant(np.array([bytes([i]) for i in range(256)], dtype=object)))
    add("strings/binary", tf.constant(np.array(
        [bytes(range(256)), b"nul\x00in\x00the\x00middle", b"", b"\x00", rng.bytes(333), b"\xff" * 128],
        dtype=object)))
    add("strings/2d", tf.constant(np.array([[b"a", b"bb", b""], [b"\xe2\x9c\x93 utf8", b"dd\x00", b"c" * 127]],
                                           dtype=object)))
    # special values
    f32 = np.array([np.nan, np.inf, -np.inf, -0.0, 1e-45, 3.4028235e38, -1.0, 0.0], dtype=np.float32)
    add("special/float32_nonfinite", tf.constant(f32))
    add("special/float64_nonfinite", tf.constant(
        np.array([np.nan, np.inf, -np.inf, -0.0, 5e-324, 1.7976931348623157e308], dtype=np.float64)))
    add("special/float16_nonfinite", tf.constant(np.array([np.nan, np.inf, -np.inf, -0.0, 6e-8, 65504],
                                                          dtype=np.float16)))
    add("special/bfloat16_nonfinite", tf.constant(f32.astype(tf.as_dtype("bfloat16").as_numpy_dtype)))
    add("special/int4_all", tf.constant(np.arange(-8, 8).astype(i4)))
    add("special/uint4_all", tf.constant(np.arange(0, 16).astype(tf.as_dtype("uint4").as_numpy_dtype)))
    add("special/int8_minmax", tf.constant(np.array([-128, 127, -1], dtype=np.int8)))
    # odd names
    long_comp = "a" * 198 + "%" + "b" * 101  # 300 bytes; escaped, the %25 straddles byte 200
    assert len(long_comp.encode()) == 300
    odd = [
        "odd//x", "odd/./y", "odd/../z", "/leading", "odd/trailing/",
        "odd/long/" + long_comp,
        "odd/name", "odd/name.bin", "odd/name/child", "odd/name.bin/leaf", "odd/dir.npy/leaf",
        "odd/x.shape/y.dtype/z",
        b"odd/bad\xff\xfebyte",
        b"odd/nul\x00byte",
        "odd/with space and \u00fcn\u00efc\u00f6d\u00e9 \u2713/\u03c4",
        "pct/100%", "pct/%25", "pct/%2E", "pct/%", "pct/a%00b",
    ]
    for i, key in enumerate(odd):
        add(key, tf.constant(np.arange(i, i + 3, dtype=np.float32) + 0.5))

    assert len(set(names)) == len(names)
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=tf.constant(names), shape_and_slices=[""] * len(names),
                      tensors=tensors)
    notes = ["all dtypes saved in one SaveV2 call; each was first probed alone",
             "an EMPTY key ('') cannot be saved: SaveV2 CHECK-fails (key != kHeaderEntryKey) and aborts the process",
             "variant: SaveV2 writes it, but TF's reader cannot return it (see unreadable / unreadable_entries)"]
    write_json(os.path.join(out, "expected/all_dtypes.json"),
               tf_view(out, "all_dtypes/ckpt", unsavable=unsavable, extra_notes=notes))
    return [{"name": "all_dtypes", "source": "all_dtypes/ckpt", "kind": "prefix",
             "views": {"variables": "expected/all_dtypes.json"}}]


def gen_demo_savedmodel(out):
    d = os.path.join(out, "demo_savedmodel")
    tf.random.set_seed(SEED)
    rng = np.random.default_rng(SEED + 6)
    tmp = tempfile.mkdtemp(prefix="tfmount_asset_")
    try:
        vocab = os.path.join(tmp, "vocab.txt")
        with open(vocab, "w") as f:
            f.write("<pad>\n<unk>\nhello\nworld\ntensor\nflow\n")

        class Demo(tf.Module):
            def __init__(self):
                super().__init__(name="demo")
                self.w = tf.Variable(rng.normal(size=(3, 2)).astype(np.float32), name="w")
                self.b = tf.Variable(np.full([2], 0.5, np.float32), name="b")
                self.step = tf.Variable(7, dtype=tf.int64, name="step")
                self.label = tf.Variable(b"tfmount demo model", dtype=tf.string, name="label")
                self.vocab = tf.saved_model.Asset(vocab)

            @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
            def __call__(self, x):
                return tf.matmul(x, self.w) + self.b

        m = Demo()
        tf.saved_model.save(m, d, signatures=m.__call__)
    finally:
        shutil.rmtree(tmp)
    # fingerprint.pb carries a random uuid (FingerprintDef field 7); pin it so regeneration is byte-identical
    from tensorflow.core.protobuf import fingerprint_pb2

    fp_path = os.path.join(d, "fingerprint.pb")
    fp = fingerprint_pb2.FingerprintDef.FromString(open(fp_path, "rb").read())
    if fp.uuid:
        fp.uuid = str(int.from_bytes(hashlib.sha256(b"tfmount-demo-%d" % SEED).digest()[:16], "big"))
        with open(fp_path, "wb") as f:
            f.write(fp.SerializeToString(deterministic=True))
    os.makedirs(os.path.join(d, "assets.extra"), exist_ok=True)
    with open(os.path.join(d, "assets.extra", "README.txt"), "w") as f:
        f.write("tfmount demo SavedModel.\nassets.extra/ is ignored by the TensorFlow loader.\n")
    assert os.path.exists(os.path.join(d, "assets", "vocab.txt"))
    write_json(os.path.join(out, "expected/demo_savedmodel.json"),
               tf_view(out, "demo_savedmodel/variables/variables"))
    passthrough = {}
    for rel in ("assets/vocab.txt", "assets.extra/README.txt"):
        passthrough[rel] = file_sha(os.path.join(d, rel))
    return [{"name": "demo_savedmodel", "source": "demo_savedmodel", "kind": "saved_model",
             "views": {"variables": "expected/demo_savedmodel.json"},
             "passthrough": passthrough,
             "notes": ["fingerprint.pb: TF writes a random uuid; gen_fixtures re-serialises it with a pinned uuid"]}]


GRAPHS_README = """
## Graph fixtures: `graphs/`

Written by `scripts/gen_graph_fixtures.py` (kept when this script regenerates the rest; run it AFTER this one,
it reads `tf2_keras/` and `tf2_slots/`):
`~/tfvenv/bin/python scripts/gen_graph_fixtures.py tests/fixtures/graphs` (about 5 minutes: it runs the real
`saved_model_cli` ~20 times). Check a mount with `scripts/check_pbtxt.py MOUNT graphs/expected/<name>.json`
(`--selftest` checks the checker). Details: the docstring of `gen_graph_fixtures.py` and `graphs/manifest.json`.

* `graphs/tf1_two_tags/` TF1 `SavedModelBuilder` SavedModel, meta graphs `serve` and `train,gpu`, an asset,
  resource + ref variables, collections of every kind, ~50 Const nodes covering every TensorProto form
  (tensor_content, typed `*_val` lists, splat / repeated-last, zero fill, string tensor_content) and odd node names.
* `graphs/tf1_two_tags_pbtxt/` the same SavedModel as `saved_model.pbtxt` only.
* `graphs/tf2_module/` `tf.saved_model.save` of a `tf.Module`: two signatures, float and string variables,
  functions with nodes, SavedObjectGraph -> checkpoint-key names.
* `graphs/frozen/graph.pb`, `graph.pbtxt` a frozen GraphDef (variables turned into Consts) with a function library.
* `graphs/tf1_meta/` TF1 `Saver` checkpoint with `model.ckpt.meta` (the bare `.meta` is a SOURCE too).
* `graphs/expected/<name>.json` TensorFlow's view (serialized messages, node/function/signature lists,
  `saved_model_cli` output, Const values in the tensor layout); `<name>.variables.json` the checkpoint
  tensors; `names_tf2_keras.json`, `names_tf2_slots.json` TF2 object-path names of `tf2_keras/`, `tf2_slots/`.
"""


def main(argv):
    if len(argv) != 2:
        print(__doc__)
        print("usage: gen_fixtures.py OUTPUT_DIR")
        return 2
    out = os.path.abspath(argv[1])
    if os.path.exists(out):
        for fn in os.listdir(out):  # graphs/, cli/, keras/, tfjs/ and empty_base/ belong to other scripts: keep them
            if fn not in ("graphs", "cli", "keras", "tfjs", "empty_base"):  # cli/: gen_cli_fixtures.py, keras/: gen_keras_fixtures.py, tfjs/: gen_tfjs.py
                p = os.path.join(out, fn)
                shutil.rmtree(p) if os.path.isdir(p) and not os.path.islink(p) else os.unlink(p)
    os.makedirs(out, exist_ok=True)
    tf.random.set_seed(SEED)
    tf.config.experimental.enable_op_determinism()
    manifest = []
    for gen in (gen_tf1_adam, gen_tf2_keras, gen_tf2_slots, gen_partitioned, gen_sharded, gen_all_dtypes,
                gen_demo_savedmodel):
        print("generating", gen.__name__[4:], flush=True)
        manifest.extend(gen(out))
    write_json(os.path.join(out, "manifest.json"), manifest)
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write("Generated by `scripts/gen_fixtures.py` with TensorFlow %s -- do not edit by hand.\n"
                "See the docstring of that script for what each fixture is, and `manifest.json` for the mounts.\n"
                % tf.__version__ + GRAPHS_README)
    total = 0
    for dp, _dn, fns in os.walk(out):
        total += sum(os.path.getsize(os.path.join(dp, fn)) for fn in fns)
    print("done: %d bytes in %s" % (total, out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
