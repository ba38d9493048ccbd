#!/usr/bin/env python3
"""Generate tfmount's V1 checkpoint fixtures (pre-0.11 single-table format) with REAL TensorFlow.

How to run (the virtualenv of ``scripts/gen_fixtures.py``)::

    ~/tfvenv/bin/python scripts/gen_v1_fixtures.py tests/fixtures/v1

The output directory is deleted and regenerated; everything is seeded. Every checkpoint is written by
``tf.compat.v1.train.Saver(write_version=tf.compat.v1.train.SaverDef.V1)`` in graph mode.

What is written (directory names are part of the test contract)
-----------------------------------------------------------------
* ``single/``       a single-file V1 checkpoint saved at steps 1 and 2 (``model.ckpt-1``, ``model.ckpt-2``),
  each with its ``.meta``, and the ``checkpoint`` state file (relative paths) naming both.
* ``sharded/``      ``Saver(sharded=True)`` with variables on 3 logical CPUs: ``model.ckpt-0000N-of-00003``,
  the state file naming the pattern ``model.ckpt-?????-of-00003``, and a partitioned variable whose 3 slices
  land on 3 different shards (each shard's meta lists only the slice it holds).
* ``partitioned/``  one file ``model.ckpt`` with variables partitioned along axis 0 and axis 1
  (``fixed_size_partitioner(3, axis=...)``), in float32, float64, int64, float16, bool and string.
* ``dtypes/``       one file ``model.ckpt`` with every dtype the V1 writer stores (float16/32/64, complex64/128,
  int8/16/32/64, uint8, uint16, bool, string), edge values (NaN, inf, -0.0, subnormals, integer limits, binary
  strings with NUL and non-UTF-8 bytes), empty tensors (a dimension of 0) and scalars.
* ``large/``        one file ``model.ckpt``: float32 [512, 1024] (2 MiB) and int64 [1024, 256] with large and
  negative values (long varints, ~2.3 MB); each one table entry far larger than the 256 KiB block size.
* ``expected/<name>.json``  per checkpoint: the raw file list (name, size, sha256) and, per tensor, key, dtype
  (``tf.as_dtype(x).name``), shape, nbytes and sha256 of tfmount's layout bytes (numpy ``tobytes()``;
  strings: per element an 8-byte little-endian length then the bytes), ``hex`` of those bytes and ``values``
  for tensors of at most 64 elements, and ``expected_from``: ``tf_reader`` (``tf.train.load_checkpoint(p)
  .get_tensor``), ``tf_restore_op`` (``tf.raw_ops.Restore``, where the reader says "Sliced checkpoints are
  not supported" or "Data type not supported": float16, complex64, complex128, uint16) or ``written`` (the
  values this script wrote, should both refuse). Wherever TensorFlow reads a tensor back, the script asserts it equals what was
  written. ``tables`` describes each file as parsed by a small independent SSTable reader here (blocks,
  entries, which typed TensorProto field holds each slice's values).
"""

import json
import os
import shutil
import struct
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_fixtures import (  # noqa: E402  (shared helpers: SSTable walking, layout bytes, hashing)
    _iter_block,
    _read_block,
    err_text,
    file_sha,
    layout_bytes,
    read_varint,
    sha,
    write_json,
)

SEED = 20250117
V1 = tf.compat.v1.train.SaverDef.V1
SMALL = 64

LAYOUT_DOC = (
    "sha256/nbytes are of the tensor bytes in tfmount's layout: row-major little-endian element bytes exactly "
    "as numpy's tobytes() (bool 1 byte 0/1, complex as (re, im) pairs); strings = for each element in "
    "row-major order an 8-byte little-endian length followed by the bytes. hex = those bytes in hex (tensors "
    "of at most 64 elements). values = the elements (floats as Python floats, NaN/inf as strings, complex as "
    "[re, im], strings as hex). expected_from = tf_reader | tf_restore_op | written (see the script)."
)


# ----------------------------------------------------------------------------------------------
# An independent look at the V1 tables (facts recorded for the tests; not used as expected values).
# ----------------------------------------------------------------------------------------------

TYPED_FIELDS = {5: "float_val", 6: "double_val", 7: "int_val", 8: "string_val", 9: "scomplex_val",
                10: "int64_val", 11: "bool_val", 12: "dcomplex_val", 13: "half_val"}


def proto_fields(buf):
    """(field number, wire type, payload bytes or int) of a serialized message."""
    pos = 0
    while pos < len(buf):
        key, pos = read_varint(buf, pos)
        num, wire = key >> 3, key & 7
        if wire == 0:
            v, pos = read_varint(buf, pos)
            yield num, wire, v
        elif wire == 1:
            yield num, wire, buf[pos:pos + 8]
            pos += 8
        elif wire == 5:
            yield num, wire, buf[pos:pos + 4]
            pos += 4
        elif wire == 2:
            n, pos = read_varint(buf, pos)
            yield num, wire, buf[pos:pos + n]
            pos += n
        else:
            raise ValueError("wire type %d" % wire)


def describe_table(path):
    from tensorflow.core.util import saved_tensor_slice_pb2

    with open(path, "rb") as f:
        data = f.read()
    footer = data[-48:]
    assert footer[40:] == bytes.fromhex("57fb808b247547db"), path
    pos = 0
    _mo, pos = read_varint(footer, pos)
    _ms, pos = read_varint(footer, pos)
    idx_off, pos = read_varint(footer, pos)
    idx_size, pos = read_varint(footer, pos)
    stats = {"data_blocks": 0, "snappy_blocks": 0}
    index_block = _read_block(data, idx_off, idx_size, stats)
    blocks, entries, meta = [], [], None
    for _sep, handle in _iter_block(index_block):
        off, p = read_varint(handle, 0)
        size, _ = read_varint(handle, p)
        block = _read_block(data, off, size, stats)
        blocks.append({"offset": off, "size": size})
        for key, value in _iter_block(block):
            sts = saved_tensor_slice_pb2.SavedTensorSlices()
            sts.ParseFromString(value)
            if key == b"":
                assert sts.HasField("meta") and not sts.HasField("data")
                meta = [{"name": t.name, "type": tf.as_dtype(t.type).name,
                         "shape": [d.size for d in t.shape.dim],
                         "slices": [slice_str(s) for s in t.slice]} for t in sts.meta.tensor]
                continue
            fields = {}
            for num, wire, _v in proto_fields(sts.data.data.SerializeToString()):
                name = TYPED_FIELDS.get(num, str(num))
                fields.setdefault(name, {"occurrences": 0, "packed": wire == 2 and num != 8})
                fields[name]["occurrences"] += 1
            entries.append({"key_hex": key.hex(), "name": sts.data.name, "slice": slice_str(sts.data.slice),
                            "block": len(blocks) - 1, "value_bytes": len(value), "typed_fields": fields})
    return {"file": os.path.basename(path), "size": len(data), "data_blocks": len(blocks),
            "snappy_blocks": stats["snappy_blocks"], "largest_block": max(b["size"] for b in blocks),
            "meta": meta, "entries": entries}


def slice_str(s):
    return ":".join("-" if not e.HasField("length") else "%d,%d" % (e.start, e.length) for e in s.extent)


# ----------------------------------------------------------------------------------------------
# Expected values
# ----------------------------------------------------------------------------------------------

def json_values(arr, dtype):
    flat = np.asarray(arr).reshape(-1)
    out = []
    for x in flat:
        if dtype == tf.string:
            out.append(bytes(x).hex())
        elif dtype.is_complex:
            out.append([fnum(x.real), fnum(x.imag)])
        elif dtype.is_floating:
            out.append(fnum(x))
        elif dtype == tf.bool:
            out.append(bool(x))
        else:
            out.append(int(x))
    return out


def fnum(x):
    x = float(x)
    if np.isnan(x):
        return "nan"
    if np.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def same(a, b, dtype):
    if dtype == tf.string:
        return [bytes(x) for x in np.asarray(a, dtype=object).flat] == [bytes(x) for x in np.asarray(b).flat]
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and layout_bytes(a, dtype) == layout_bytes(b.astype(a.dtype), dtype)


def read_back(pattern, name, dtype, shape):
    """TensorFlow's own view: the checkpoint reader, else the Restore op; None (+ reasons) if both refuse."""
    reasons = []
    try:
        return tf.train.load_checkpoint(pattern).get_tensor(name), "tf_reader", reasons
    except Exception as e:  # noqa: BLE001
        reasons.append("tf.train.load_checkpoint(...).get_tensor: " + err_text(e))
    try:
        v = tf.raw_ops.Restore(file_pattern=pattern, tensor_name=name, dt=dtype).numpy()
        return v.reshape(shape), "tf_restore_op", reasons
    except Exception as e:  # noqa: BLE001
        reasons.append("tf.raw_ops.Restore: " + err_text(e))
    return None, "written", reasons


def expected_view(out, rel_dir, pattern_rel, files, written):
    """`written`: {name: (numpy value, tf dtype)}."""
    pattern = os.path.join(out, pattern_rel)
    tensors = []
    refused = {}
    for name in sorted(written, key=lambda n: n.encode()):
        value, dtype = written[name]
        tf_value, source, reasons = read_back(pattern, name, dtype, value.shape)
        if tf_value is not None:
            assert same(value, tf_value, dtype), (name, value, tf_value)
            value = tf_value if dtype != tf.string else np.asarray(tf_value, dtype=object)
        if source != "tf_reader":
            refused[name] = reasons
        b = layout_bytes(value, dtype)
        rec = {"key": name, "dtype": dtype.name, "shape": [int(d) for d in value.shape], "nbytes": len(b),
               "sha256": sha(b), "expected_from": source}
        if int(np.prod(value.shape)) <= SMALL:
            rec["hex"] = b.hex()
            rec["values"] = json_values(value, dtype)
        tensors.append(rec)
    d = os.path.join(out, rel_dir)
    listing = [{"name": f, "size": os.path.getsize(os.path.join(d, f)), "sha256": file_sha(os.path.join(d, f))}
               for f in sorted(os.listdir(d))]
    return {"tf_version": tf.__version__, "layout": LAYOUT_DOC, "source": pattern_rel,
            "v1_files": files, "files": listing, "tensors": tensors, "tf_refused": refused,
            "tables": [describe_table(os.path.join(d, f)) for f in files]}


# ----------------------------------------------------------------------------------------------
# Fixture builders
# ----------------------------------------------------------------------------------------------

def variable(name, value, dtype, device=None):
    """A TF1 ref variable initialised to zeros; its value is fed later with `load` (the graph stays small)."""
    with tf.device(device) if device else _null():
        return tf.compat.v1.get_variable(name, shape=value.shape, dtype=dtype, use_resource=False,
                                         initializer=tf.compat.v1.zeros_initializer())


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def load_partitioned(pv, full, sess):
    for part in pv:
        info = part._get_save_slice_info()  # noqa: SLF001 (the slice this partition holds)
        idx = tuple(slice(o, o + n) for o, n in zip(info.var_offset, info.var_shape))
        part.load(full[idx], sess)


def saver(var_list=None, **kw):
    return tf.compat.v1.train.Saver(var_list, write_version=V1, save_relative_paths=True, **kw)


def gen_single(out):
    d = os.path.join(out, "single")
    os.makedirs(d)
    rng = np.random.default_rng(SEED)
    g = tf.Graph()
    written = {}
    with g.as_default():
        k = rng.normal(size=(3, 4)).astype(np.float32)
        b = np.array([0.5, -1.5, 2.25, 0.0], np.float32)
        kv = variable("dense/kernel", k, tf.float32)
        bv = variable("dense/bias", b, tf.float32)
        step = tf.compat.v1.train.get_or_create_global_step()
        names = variable("vocab", np.empty([3], object), tf.string)
        s = saver()
        with tf.compat.v1.Session(graph=g) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            for i in (1, 2):
                kk, bb = k * i, b + i
                voc = np.array([b"step", str(i).encode(), b"\x00\xff"], dtype=object)
                kv.load(kk, sess)
                bv.load(bb, sess)
                step.load(i, sess)
                names.load(voc, sess)
                p = s.save(sess, os.path.join(d, "model.ckpt"), global_step=i)
                assert p.endswith("model.ckpt-%d" % i), p
                written[i] = {"dense/kernel": (kk, tf.float32), "dense/bias": (bb, tf.float32),
                              "global_step": (np.array(i, np.int64), tf.int64),
                              "vocab": (voc, tf.string)}
    state = open(os.path.join(d, "checkpoint")).read()
    assert 'model_checkpoint_path: "model.ckpt-2"' in state, state
    for i in (1, 2):
        f = "model.ckpt-%d" % i
        view = expected_view(out, "single", "single/" + f, [f], written[i])
        view["state_file"] = state
        write_json(os.path.join(out, "expected", "single.model.ckpt-%d.json" % i), view)


def gen_sharded(out):
    d = os.path.join(out, "sharded")
    os.makedirs(d)
    rng = np.random.default_rng(SEED + 1)
    devs = ["/device:CPU:0", "/device:CPU:1", "/device:CPU:2"]
    g = tf.Graph()
    written = {}
    with g.as_default():
        loads = []
        for i, dev in enumerate(devs):
            w = rng.normal(size=(4, 3)).astype(np.float32)
            bias = np.full([3], i + 0.5, np.float64)
            loads.append((variable("layer%d/w" % i, w, tf.float32, dev), w))
            loads.append((variable("layer%d/b" % i, bias, tf.float64, dev), bias))
            written["layer%d/w" % i] = (w, tf.float32)
            written["layer%d/b" % i] = (bias, tf.float64)
        c = np.array(123456789012, np.int64)
        loads.append((variable("counter", c, tf.int64, devs[1]), c))
        written["counter"] = (c, tf.int64)
        counter = [0]

        def round_robin(op):
            if op.type in ("VarHandleOp", "VariableV2"):
                dev = devs[counter[0] % len(devs)]
                counter[0] += 1
                return dev
            return ""

        emb = rng.normal(size=(9, 2)).astype(np.float32)
        with g.device(round_robin):
            pv = tf.compat.v1.get_variable("emb", shape=[9, 2], use_resource=False,
                                           partitioner=tf.compat.v1.fixed_size_partitioner(3),
                                           initializer=tf.compat.v1.zeros_initializer())
        written["emb"] = (emb, tf.float32)
        s = saver(sharded=True)
        cfg = tf.compat.v1.ConfigProto(device_count={"CPU": 3}, allow_soft_placement=True)
        with tf.compat.v1.Session(graph=g, config=cfg) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            for v, val in loads:
                v.load(val, sess)
            load_partitioned(pv, emb, sess)
            p = s.save(sess, os.path.join(d, "model.ckpt"), write_meta_graph=False)
    assert p.endswith("model.ckpt-?????-of-00003"), p
    files = ["model.ckpt-%05d-of-00003" % i for i in range(3)]
    state = open(os.path.join(d, "checkpoint")).read()
    view = expected_view(out, "sharded", "sharded/model.ckpt-?????-of-00003", files, written)
    view["state_file"] = state
    holders = {t["file"]: [e["slice"] for e in t["entries"] if e["name"] == "emb"] for t in view["tables"]}
    assert sum(1 for v in holders.values() if v) == 3, holders  # the 3 slices of emb are in 3 files
    write_json(os.path.join(out, "expected", "sharded.json"), view)


def gen_partitioned(out):
    d = os.path.join(out, "partitioned")
    os.makedirs(d)
    rng = np.random.default_rng(SEED + 2)
    specs = [
        ("emb0", (10, 3), tf.float32, 0, rng.normal(size=(10, 3)).astype(np.float32)),
        ("layer/wide1", (4, 7), tf.float32, 1, rng.normal(size=(4, 7)).astype(np.float32)),
        ("dbl0", (5, 2), tf.float64, 0, rng.normal(size=(5, 2))),
        ("ids1", (3, 8), tf.int64, 1, rng.integers(-2**62, 2**62, size=(3, 8), dtype=np.int64)),
        ("half1", (2, 6), tf.float16, 1, (rng.normal(size=(2, 6)) * 100).astype(np.float16)),
        ("mask0", (7, 2), tf.bool, 0, rng.integers(0, 2, size=(7, 2)).astype(bool)),
        ("words1", (2, 5), tf.string, 1,
         np.array([[b"a", b"", b"\x00\x01", b"long" * 40, b"\xff\xfe"],
                   [b"row1", b"x", b"", b"\x80", b"end"]], dtype=object)),
    ]
    g = tf.Graph()
    written = {}
    with g.as_default():
        parts = []
        for name, shape, dtype, axis, val in specs:
            pv = tf.compat.v1.get_variable(name, shape=shape, dtype=dtype, use_resource=False,
                                           partitioner=tf.compat.v1.fixed_size_partitioner(3, axis=axis),
                                           initializer=tf.compat.v1.zeros_initializer())
            parts.append((pv, val))
            written[name] = (val, dtype)
        s = saver()
        with tf.compat.v1.Session(graph=g) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            for pv, val in parts:
                load_partitioned(pv, val, sess)
            s.save(sess, os.path.join(d, "model.ckpt"), write_meta_graph=False, write_state=False)
    view = expected_view(out, "partitioned", "partitioned/model.ckpt", ["model.ckpt"], written)
    for t in view["tables"][0]["meta"]:
        assert len(t["slices"]) == 3, t
    write_json(os.path.join(out, "expected", "partitioned.json"), view)


def dtype_values(rng):
    f32 = np.array([[np.nan, np.inf, -np.inf], [-0.0, 1e-45, np.finfo(np.float32).max]], np.float32)
    f16 = np.array([np.nan, np.inf, -0.0, 6e-8, 65504, -1.5, 0.1], np.float16)
    f64 = np.array([[np.pi, -np.e], [5e-324, -np.inf], [np.nan, 1e300]], np.float64)
    c64 = np.array([1 + 2j, -0.5 - 0j, complex(np.nan, np.inf), 3e38 - 1e-40j], np.complex64)
    c128 = np.array([[1e300 + 1j, -1e-300 - 2j], [complex(0, np.nan), 7 + 0j]], np.complex128)
    out = {
        "float16": (f16, tf.float16),
        "float32": (f32, tf.float32),
        "float64": (f64, tf.float64),
        "complex64": (c64, tf.complex64),
        "complex128": (c128, tf.complex128),
        "int8": (np.array([-128, -1, 0, 1, 127], np.int8), tf.int8),
        "int16": (np.array([[-32768, -300], [300, 32767]], np.int16), tf.int16),
        "int32": (np.array([-2**31, -1, 0, 1, 2**31 - 1, 1 << 20], np.int32), tf.int32),
        "int64": (np.array([-2**63, -1, 0, 2**63 - 1, 1 << 40, -(1 << 40)], np.int64), tf.int64),
        "uint8": (np.array([0, 1, 127, 128, 255], np.uint8), tf.uint8),
        "uint16": (np.array([[0, 1, 32767], [32768, 65534, 65535]], np.uint16), tf.uint16),
        "bool": (np.array([[True, False, True], [False, False, True]]), tf.bool),
        "string": (np.array([b"", b"\x00", b"nul\x00inside", b"\xff\xfe\x80 not utf-8", "caf\u00e9".encode(),
                             b"x" * 300], dtype=object), tf.string),
        # empty tensors: a dimension of 0
        "empty/float32": (np.zeros([0], np.float32), tf.float32),
        "empty/int64_3x0": (np.zeros([3, 0], np.int64), tf.int64),
        "empty/string": (np.zeros([0, 2], dtype=object), tf.string),
        "empty/float16": (np.zeros([2, 0, 3], np.float16), tf.float16),
        # scalars
        "scalar/float32": (np.array(-2.5, np.float32), tf.float32),
        "scalar/int8": (np.array(-7, np.int8), tf.int8),
        "scalar/bool": (np.array(True), tf.bool),
        "scalar/string": (np.array(b"\x00scalar\xff", dtype=object), tf.string),
        "scalar/complex128": (np.array(-1.25 + 4j, np.complex128), tf.complex128),
        "scalar/float16": (np.array(-0.0, np.float16), tf.float16),
        "scalar/uint16": (np.array(54321, np.uint16), tf.uint16),
        # a rank-4 tensor, values a numpy arange so row-major order is visible
        "rank4/int32": (np.arange(2 * 3 * 2 * 4, dtype=np.int32).reshape(2, 3, 2, 4) - 20, tf.int32),
        "rank3/uint8": (rng.integers(0, 256, size=(4, 5, 6), dtype=np.uint8), tf.uint8),
    }
    return out


def gen_dtypes(out):
    d = os.path.join(out, "dtypes")
    os.makedirs(d)
    written = dtype_values(np.random.default_rng(SEED + 3))
    g = tf.Graph()
    with g.as_default():
        vs = [(variable(n, v, dt), v) for n, (v, dt) in written.items()]
        s = saver()
        with tf.compat.v1.Session(graph=g) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            for v, val in vs:
                v.load(val, sess)
            s.save(sess, os.path.join(d, "model.ckpt"), write_meta_graph=False, write_state=False)
    view = expected_view(out, "dtypes", "dtypes/model.ckpt", ["model.ckpt"], written)
    write_json(os.path.join(out, "expected", "dtypes.json"), view)


def gen_large(out):
    d = os.path.join(out, "large")
    os.makedirs(d)
    rng = np.random.default_rng(SEED + 4)
    big_f = rng.normal(size=(512, 1024)).astype(np.float32)
    n = 1024 * 256
    big_i = rng.integers(-2**63, 2**63 - 1, size=n, dtype=np.int64, endpoint=True)
    big_i[::7] = rng.integers(-1000, 1000, size=len(big_i[::7]))  # some short varints, some 10-byte ones
    big_i[0], big_i[1], big_i[-1] = -2**63, 2**63 - 1, -1
    big_i = big_i.reshape(1024, 256)
    written = {"big/float32": (big_f, tf.float32), "big/int64": (big_i, tf.int64),
               "z_after/float32": (np.array([1.5, -2.5, 3.5], np.float32), tf.float32),
               "a_before/int32": (np.array([[1, -2], [3, -4]], np.int32), tf.int32)}
    g = tf.Graph()
    with g.as_default():
        vs = [(variable(nm, v, dt), v) for nm, (v, dt) in written.items()]
        s = saver()
        with tf.compat.v1.Session(graph=g) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            for v, val in vs:
                v.load(val, sess)
            s.save(sess, os.path.join(d, "model.ckpt"), write_meta_graph=False, write_state=False)
    view = expected_view(out, "large", "large/model.ckpt", ["model.ckpt"], written)
    t = view["tables"][0]
    assert t["data_blocks"] >= 3 and t["largest_block"] > 8 * 262144, (t["data_blocks"], t["largest_block"])
    write_json(os.path.join(out, "expected", "large.json"), view)


def main(argv):
    if len(argv) != 2:
        print(__doc__)
        return 2
    out = argv[1]
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    for gen in (gen_single, gen_sharded, gen_partitioned, gen_dtypes, gen_large):
        gen(out)
    write_readme(out)
    total = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(out) for f in fs)
    print("wrote %s (%d bytes)" % (out, total))
    return 0


def write_readme(out):
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write(README)


README = """\
# V1 checkpoint fixtures

Generated by `scripts/gen_v1_fixtures.py` with real TensorFlow (`tf.compat.v1.train.Saver(write_version=
tf.compat.v1.train.SaverDef.V1)`, graph mode) -- do not edit by hand. Regenerate with
`~/tfvenv/bin/python scripts/gen_v1_fixtures.py tests/fixtures/v1`.

| directory | files | what it covers |
|---|---|---|
| `single/` | `model.ckpt-1`, `model.ckpt-2` (+ `.meta`), `checkpoint` | single-file V1 saved at two steps, with meta graphs and a state file (relative paths) |
| `sharded/` | `model.ckpt-0000N-of-00003`, `checkpoint` | `Saver(sharded=True)` over 3 CPU devices; the state file names the pattern `model.ckpt-?????-of-00003`; `emb` is partitioned and its 3 slices are in 3 different files |
| `partitioned/` | `model.ckpt` | `fixed_size_partitioner(3, axis=0/1)` variables of float32, float64, int64, float16, bool, string |
| `dtypes/` | `model.ckpt` | every dtype the V1 writer stores, edge values, empty tensors, scalars, binary strings |
| `large/` | `model.ckpt` | float32 [512,1024] and int64 [1024,256] (long varints): single table entries far over the 256 KiB block size |

`expected/<name>.json` holds, per checkpoint, the file list and every tensor's key, dtype, shape, nbytes and
sha256 of tfmount's `.bin` bytes (plus `hex` and `values` for tensors of at most 64 elements), where the
values come from (`expected_from`): TensorFlow's checkpoint reader (`tf.train.load_checkpoint`), else its
`Restore` op where the reader refuses -- partitioned tensors ("Sliced checkpoints are not supported") and
float16, complex64, complex128, uint16 ("Data type not supported"; `tf_refused` lists them) -- else the
values written (with TensorFlow 2.21 the Restore op reads every fixture tensor). `tables` describes each file
as parsed by the script's own small SSTable reader (blocks, entries, which typed `TensorProto` field holds
each slice's values). Snappy-compressed V1 tables (2015 writers) cannot be written by current TensorFlow;
the Rust tests re-encode these fixtures with Snappy blocks instead.
"""


if __name__ == "__main__":
    sys.exit(main(sys.argv))
