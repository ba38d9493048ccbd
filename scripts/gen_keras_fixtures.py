#!/usr/bin/env python3
"""Generate tfmount's Keras fixtures (tests/fixtures/keras/) with REAL Keras 3 (``tf.keras``) and h5py.

How to run
----------
With the test virtualenv (TensorFlow 2.21 whose ``tf.keras`` is Keras 3.15, h5py 3.14, numpy, ml_dtypes;
``scripts/requirements-fixtures.txt`` pins them)::

    ~/.cache/tfmount-test-venv/bin/python scripts/gen_keras_fixtures.py tests/fixtures/keras

Optional Keras 2 file (``k2_weights.h5``): ``tf_keras`` (Keras 2, pure Python) is installed OUTSIDE that venv and put
on the path for this script only, so the venv keeps Keras 3::

    ~/.cache/tfmount-test-venv/bin/pip install --no-deps --target /tmp/tfkeras tf_keras==2.21.0
    TFKERAS_PATH=/tmp/tfkeras ~/.cache/tfmount-test-venv/bin/python scripts/gen_keras_fixtures.py tests/fixtures/keras

Without ``TFKERAS_PATH`` ``k2_weights.h5`` (and its ``expected/`` record) already in the output directory is
kept as it is.
The rest of the output directory, but for its ``README.md``, is deleted and rewritten. Weights are seeded, so tensor values (and their
sha256 in ``expected/``) are the same on a re-run, and so were the HDF5 files' bytes (h5py stores no object
times by default); ``.keras`` zips hold the date of saving, so their bytes and member offsets change.

What is written (file names are part of the test contract)
-------------------------------------------------------------
* ``model.weights.h5``   ``model.save_weights`` of the functional model ``full`` (``build_full``), trained one
  step with Adam: Embedding (its (4, 4, 3) output is an image for) Conv2D, BatchNormalization, Reshape, LSTM
  (``lstm/cell``), MultiHeadAttention (nested ``query_dense``/``key_dense``/``value_dense``/``output_dense``
  EinsumDense sublayers), LayerNormalization, a custom layer ``DtypeZoo`` (non-trainable int8 / int64 / uint8 /
  bool / float16 / float64 variables and a trainable float64 one), a float16 Dense and a bfloat16 Dense (opaque
  2-byte datasets with attribute ``dtype = "bfloat16"``); Adam's slots are float32, float64, float16 and
  bfloat16. Groups are ``layers/<snake_case class name>[_N]`` (``layers/dense_1``), NOT the layer names
  (``head_bf16``): only ``config.json`` (``.keras``) or the model code maps them back. Optimizer state under
  ``optimizer/vars/<i>`` (iterations int64, learning rate, then m/v slots in variable order).
  Every layer costs two symbol-table groups (~1.9 KB, mostly zeros) in these files: hence few layers.
* ``model.keras``        ``model.save`` of the same model: a zip whose members are STORED.
* ``model_deflated.keras`` the same members rezipped with ``ZIP_DEFLATED`` (what other zip writers do).
* ``legacy_model.h5``    ``model.save("legacy_model.h5")``: Keras 3's legacy HDF5 saver (root attributes
  ``model_config``, ``training_config``, ``backend``, ``keras_version``; ``model_weights/`` with
  ``weight_names`` per layer group; ``optimizer_weights/``). Keras 3.15's ``load_model`` fails on this very
  file ("No cast function available": its bfloat16 datasets are opaque and carry no dtype), so the weights
  are checked against the model here dataset by dataset. Keras 3 refuses ``save_weights("x.h5")``
  ("The filename must end in `.weights.h5`"), so legacy weights-only files come only from Keras 2 (below).
* ``checkpoints/ckpt-01.weights.h5`` .. ``ckpt-03.weights.h5``: ``ModelCheckpoint("ckpt-{epoch:02d}.weights.h5",
  save_weights_only=True)`` during a 3-epoch ``fit`` of a one-Dense Sequential model (``build_small``).
* ``sharded/model.weights.json`` + ``sharded/model_0000N.weights.h5``: ``save_weights(..., max_shard_size=...)``
  of that model after the 3 epochs, with a tiny shard size (Keras 3's sharded weights: a JSON ``weight_map`` naming,
  for each ``layers/<name>/vars`` group, the shard holding it).
* ``other_writer.weights.h5`` NOT written by Keras: ``model.weights.h5``'s ``layers/`` (not the optimizer)
  copied by h5py with
  ``libver="latest"`` (superblock v3, link-message groups, object header v2), every dataset chunked with
  shuffle + gzip + fletcher32 except scalars (compact layout). Keras loads it (checked below): what
  another writer may hand us.
* ``k2_weights.h5`` (only with ``TFKERAS_PATH``): Keras 2 (``tf_keras``) ``save_weights`` to ``.h5`` of a small
  Sequential model with a bfloat16 layer: root attributes ``layer_names``, ``backend``, ``keras_version``; one
  group per layer with ``weight_names`` (ending in ``:0``); bfloat16 stored opaque WITHOUT a dtype attribute;
  tf_keras cannot load it back ("No cast function available", recorded as ``keras_load``).
* ``expected/<file>.json`` (``expected/checkpoints/ckpt-01.weights.h5.json`` ...): h5py's view, see
  ``describe_h5`` below: every dataset with its TF dtype name, shape, byte offset in the file
  (``dset.id.get_offset()``, null unless contiguous), layout, chunks, filters, sha256 of the row-major
  little-endian bytes h5py reads (bfloat16: the raw 2-byte values), the attributes with their HDF5 types;
  every group with its storage type (symbol table / compact links / dense links) and attributes; the
  superblock version. For ``.keras``: every zip member with its local-header offset, data offset,
  compression and sizes, and the inner ``model.weights.h5`` described as above, each contiguous dataset also
  with ``zip_offset`` (its offset in the ``.keras`` file; null when the member is deflated). For legacy
  ``.h5``: ``legacy.weight_names`` per group and the root attributes ``model_config`` / ``training_config``
  parsed as JSON (the attribute itself is listed with its length and sha256 only).
  ``model_deflated.keras.json`` lists the zip members; its ``model.weights.h5`` member is model.keras's byte for
  byte (asserted), so its datasets are in ``model.keras.json``.

Every written file is loaded back with Keras and compared with the model it came from (legacy ``.h5``:
dataset by dataset, as Keras cannot load them; the outcome is recorded as ``keras_load_model``).
"""

import ctypes
import glob
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import h5py  # noqa: E402
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

keras = tf.keras
layers = keras.layers

SEED = 1234
SHARD_GB = 40e-9  # max_shard_size in GB: ~40 bytes, so the small model's variables spread over shards


# ---------------------------------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------------------------------


@keras.utils.register_keras_serializable(package="tfmount")
class DtypeZoo(layers.Layer):
    """Holds variables of the dtypes Keras writes but no built-in layer has: int8, int64, uint8, bool,
    float16, float64 (non-trainable) and one trainable float64 scale (gives float64 Adam slots)."""

    def build(self, input_shape):
        self.scale64 = self.add_weight(name="scale64", shape=(), dtype="float64", initializer="ones")
        self.i8 = self.add_weight(name="i8", shape=(4,), dtype="int8", initializer="zeros", trainable=False)
        self.i64 = self.add_weight(name="i64", shape=(2,), dtype="int64", initializer="zeros", trainable=False)
        self.u8 = self.add_weight(name="u8", shape=(2, 3), dtype="uint8", initializer="zeros", trainable=False)
        self.flags = self.add_weight(name="flags", shape=(3,), dtype="bool", initializer="zeros",
                                     trainable=False)
        self.h16 = self.add_weight(name="h16", shape=(3,), dtype="float16", initializer="zeros",
                                   trainable=False)
        self.d64 = self.add_weight(name="d64", shape=(2, 2), dtype="float64", initializer="zeros",
                                   trainable=False)
        self.i8.assign(np.array([-128, -1, 0, 127], np.int8))
        self.i64.assign(np.array([2**40 + 3, -(2**62)], np.int64))
        self.u8.assign(np.array([[0, 1, 2], [128, 200, 255]], np.uint8))
        self.flags.assign(np.array([True, False, True]))
        self.h16.assign(np.array([0.5, -2.0, 65504.0], np.float16))
        self.d64.assign(np.array([[np.pi, -np.e], [1e300, 5e-324]], np.float64))

    def call(self, x):
        return x * tf.cast(self.scale64, x.dtype)


def build_full():
    """Few weightless layers: every layer costs two HDF5 groups (~1 KB each) in a .weights.h5 file."""
    tokens = keras.Input((4, 4), dtype="int32", name="tokens")
    t = layers.Embedding(11, 3, name="embedding")(tokens)  # (4, 4, 3): an image for Conv2D
    t = layers.Conv2D(2, 3, padding="same", name="conv")(t)
    t = layers.BatchNormalization(name="batch_norm")(t)
    t = layers.Reshape((4, 8), name="reshape")(t)
    t = layers.LSTM(4, return_sequences=True, name="lstm")(t)
    t = layers.MultiHeadAttention(num_heads=2, key_dim=2, name="mha")(t, t)
    t = layers.LayerNormalization(name="layer_norm")(t)
    t = DtypeZoo(name="dtype_zoo")(t)
    t = layers.Dense(3, dtype="float16", name="dense_f16")(t)
    out = layers.Dense(2, dtype="bfloat16", name="head_bf16")(t)
    model = keras.Model(tokens, out, name="full")
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=0.01), loss="mse")
    return model


def full_data(n=4):
    rng = np.random.default_rng(SEED)
    return rng.integers(0, 11, size=(n, 4, 4)).astype(np.int32), rng.normal(size=(n, 4, 2)).astype(np.float32)


def build_small():
    model = keras.Sequential([keras.Input((3,)), layers.Dense(2, name="dense")], name="small")
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=0.01), loss="mse")
    return model


def small_data(n=4):
    rng = np.random.default_rng(SEED + 1)
    return rng.normal(size=(n, 3)).astype(np.float32), rng.normal(size=(n, 2)).astype(np.float32)


# ---------------------------------------------------------------------------------------------------------
# h5py's view of a file
# ---------------------------------------------------------------------------------------------------------

H5T_CLASS = {
    h5py.h5t.INTEGER: "integer", h5py.h5t.FLOAT: "float", h5py.h5t.TIME: "time", h5py.h5t.STRING: "string",
    h5py.h5t.BITFIELD: "bitfield", h5py.h5t.OPAQUE: "opaque", h5py.h5t.COMPOUND: "compound",
    h5py.h5t.REFERENCE: "reference", h5py.h5t.ENUM: "enum", h5py.h5t.VLEN: "vlen", h5py.h5t.ARRAY: "array",
}
LAYOUT = {h5py.h5d.COMPACT: "compact", h5py.h5d.CONTIGUOUS: "contiguous", h5py.h5d.CHUNKED: "chunked"}
GROUP_STORAGE = {0: "symbol_table", 1: "compact_links", 2: "dense_links"}  # H5G_STORAGE_TYPE_*


class _H5GInfo(ctypes.Structure):
    _fields_ = [("storage_type", ctypes.c_int), ("nlinks", ctypes.c_uint64), ("max_corder", ctypes.c_int64),
                ("mounted", ctypes.c_bool)]


def _libhdf5():
    """h5py has no H5Gget_info: call it in the libhdf5 that h5py's wheel bundles (None if not found)."""
    libs = glob.glob(os.path.join(os.path.dirname(h5py.__file__), os.pardir, "h5py.libs", "libhdf5-*.so*"))
    libs = [p for p in libs if not os.path.basename(p).startswith("libhdf5_hl")]
    return ctypes.CDLL(libs[0]) if libs else None


LIBHDF5 = _libhdf5()


def group_storage(gid):
    """How a group stores its links: symbol table (v1 B-tree + local heap), link messages, or dense."""
    if LIBHDF5 is None:
        return None
    info = _H5GInfo()
    if LIBHDF5.H5Gget_info(ctypes.c_int64(gid.id), ctypes.byref(info)) < 0:
        return None
    return GROUP_STORAGE.get(info.storage_type, info.storage_type)


def h5type_info(tid):
    info = {"class": H5T_CLASS.get(tid.get_class(), str(tid.get_class())), "size": tid.get_size()}
    cls = tid.get_class()
    if cls == h5py.h5t.STRING:
        info["variable_length"] = bool(tid.is_variable_str())
        info["charset"] = "utf-8" if tid.get_cset() == h5py.h5t.CSET_UTF8 else "ascii"
    if cls in (h5py.h5t.INTEGER, h5py.h5t.FLOAT, h5py.h5t.ENUM):
        base = tid.get_super() if cls == h5py.h5t.ENUM else tid
        info["byte_order"] = "big" if base.get_order() == h5py.h5t.ORDER_BE else "little"
    if cls == h5py.h5t.ENUM:
        info["members"] = {tid.get_member_name(i).decode(): int(tid.get_member_value(i))
                           for i in range(tid.get_nmembers())}
    if cls == h5py.h5t.OPAQUE:
        info["tag"] = tid.get_tag().decode("utf-8", "replace")
    return info


def h5type_short(tid):
    """'float/4/le', 'integer/8/le', 'enum/1/le{FALSE:0,TRUE:1}', 'opaque/2', 'string/vlen/utf-8' ..."""
    t = h5type_info(tid)
    parts = [t["class"], "vlen" if t.get("variable_length") else str(t["size"])]
    if "byte_order" in t:
        parts.append("le" if t["byte_order"] == "little" else "be")
    if "charset" in t:
        parts.append(t["charset"])
    text = "/".join(parts)
    if "members" in t:
        text += "{" + ",".join(f"{k}:{v}" for k, v in t["members"].items()) + "}"
    if t.get("tag"):
        text += "[" + t["tag"] + "]"
    return text


def jsonable(value):
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return {"bytes_hex": value.hex()}
    if isinstance(value, np.ndarray):
        return [jsonable(v) for v in value.tolist()] if value.dtype.kind in "OSU" else value.tolist()
    if isinstance(value, list):
        return [jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return jsonable(value.item())
    if isinstance(value, float) and not np.isfinite(value):
        return repr(value)
    return value


def attrs_of(obj):
    out = {}
    for name in sorted(obj.attrs.keys()):
        aid = obj.attrs.get_id(name)
        value = jsonable(obj.attrs[name])
        if name in ("model_config", "training_config") and isinstance(value, str):
            # parsed in the "legacy" record; here only its identity
            value = {"len": len(value.encode()), "sha256": hashlib.sha256(value.encode()).hexdigest()}
        out[name] = {"value": value, "type": h5type_short(aid.get_type()),
                     "shape": list(aid.shape) if aid.shape is not None else None}
    return out


def tf_dtype_name(dset):
    dt = dset.dtype
    if dt.kind == "V" and dt.itemsize == 2:
        tag = dset.attrs.get("dtype")
        if isinstance(tag, bytes):
            tag = tag.decode()
        return "bfloat16" if tag == "bfloat16" else None  # None: opaque, dtype must come from elsewhere
    if dt.kind in "OSU":
        return "string"
    return tf.dtypes.as_dtype(dt.newbyteorder("=")).name


def raw_bytes(dset):
    arr = dset[()]
    if not isinstance(arr, np.ndarray):
        arr = np.asarray(arr)
    if arr.dtype.kind == "V":
        return np.ascontiguousarray(arr).tobytes(), arr
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    return np.ascontiguousarray(arr).tobytes(), arr


def preview(arr, tf_name):
    """The first 4 values, for eyes (floats with their dtype's shortest repr); the sha256 is the check."""
    flat = arr.reshape(-1)[:4]
    if tf_name == "bfloat16":
        flat = flat.view(ml_dtypes.bfloat16)
    elif flat.dtype.kind == "V":
        return [bytes(v).hex() for v in flat]
    if flat.dtype.kind == "f" or tf_name == "bfloat16":
        return [float(str(v)) if np.isfinite(v) else str(v) for v in flat]
    return jsonable(flat)


def superblock_info(path):
    with open(path, "rb") as fh:
        data = fh.read(4096)
    for base in (0, 512, 1024, 2048):
        if data[base:base + 8] == b"\x89HDF\r\n\x1a\n":
            return {"offset": base, "version": data[base + 8]}
    return None


def describe_h5(path):
    rec = {"file_size": os.path.getsize(path), "superblock": superblock_info(path)}
    datasets, groups = [], []
    with h5py.File(path, "r") as f:
        rec["userblock_size"] = f.userblock_size

        def group_rec(name, g):
            groups.append({"path": "/" + name if name else "/", "links": len(g),
                           "storage": group_storage(g.id), "attributes": attrs_of(g)})

        def visit(name, obj):
            if isinstance(obj, h5py.Group):
                group_rec(name, obj)
                return
            d = obj
            plist = d.id.get_create_plist()
            layout = LAYOUT.get(plist.get_layout(), str(plist.get_layout()))
            filters = []
            for i in range(plist.get_nfilters()):
                code, flags, values, fname = plist.get_filter(i)
                filters.append({"id": code, "name": fname.decode(), "flags": flags, "values": list(values)})
            data, arr = raw_bytes(d)
            tfname = tf_dtype_name(d)
            datasets.append({
                "path": "/" + name,
                "dtype": tfname,
                "numpy_dtype": d.dtype.str,
                "h5type": h5type_short(d.id.get_type()),
                "shape": list(d.shape),
                "offset": d.id.get_offset(),
                "storage_size": d.id.get_storage_size(),
                "layout": layout,
                "chunks": list(d.chunks) if d.chunks else None,
                "filters": filters,
                "sha256": hashlib.sha256(data).hexdigest(),
                "preview": preview(arr, tfname),
                "attributes": attrs_of(d),
            })

        group_rec("", f["/"])
        f.visititems(visit)
    rec["groups"] = sorted(groups, key=lambda g: g["path"])
    rec["datasets"] = sorted(datasets, key=lambda d: d["path"])
    return rec


def describe_zip(path):
    members = []
    with open(path, "rb") as fh:
        raw = fh.read()
    with zipfile.ZipFile(path) as zf:
        for zi in zf.infolist():
            hdr = raw[zi.header_offset:zi.header_offset + 30]
            sig, = struct.unpack("<I", hdr[:4])
            assert sig == 0x04034B50, path
            n, m = struct.unpack("<HH", hdr[26:30])
            members.append({
                "name": zi.filename, "header_offset": zi.header_offset,
                "data_offset": zi.header_offset + 30 + n + m, "compress_type": zi.compress_type,
                "compress_size": zi.compress_size, "file_size": zi.file_size, "crc32": zi.CRC,
                "sha256": hashlib.sha256(zf.read(zi)).hexdigest(),
            })
        rec = {"file_size": len(raw), "members": members,
               "metadata": json.loads(zf.read("metadata.json"))}
        weights = zf.read("model.weights.h5")
    with tempfile.TemporaryDirectory() as tmp:
        inner = os.path.join(tmp, "model.weights.h5")
        with open(inner, "wb") as fh:
            fh.write(weights)
        rec["model.weights.h5"] = describe_h5(inner)
    member = next(m for m in members if m["name"] == "model.weights.h5")
    for d in rec["model.weights.h5"]["datasets"]:
        stored = member["compress_type"] == zipfile.ZIP_STORED
        d["zip_offset"] = member["data_offset"] + d["offset"] if stored and d["offset"] is not None else None
    return rec


def describe_legacy(path):
    rec = describe_h5(path)
    legacy = {"weight_names": {}, "layer_names": {}}
    with h5py.File(path, "r") as f:
        for key in ("backend", "keras_version"):
            if key in f.attrs:
                legacy[key] = jsonable(f.attrs[key])
        for key in ("model_config", "training_config"):
            if key in f.attrs:
                legacy[key] = json.loads(jsonable(f.attrs[key]))

        def visit(name, obj):
            if isinstance(obj, h5py.Group):
                for attr, out in (("weight_names", "weight_names"), ("layer_names", "layer_names")):
                    if attr in obj.attrs:
                        legacy[out]["/" + name] = jsonable(obj.attrs[attr])
        if "layer_names" in f.attrs:
            legacy["layer_names"]["/"] = jsonable(f.attrs["layer_names"])
        if "weight_names" in f.attrs:
            legacy["weight_names"]["/"] = jsonable(f.attrs["weight_names"])
        f.visititems(visit)
    rec["legacy"] = legacy
    return rec


# ---------------------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------------------


def compact_json(obj, indent=0):
    """JSON with one line per dataset / group / zip member (lists of dicts), nested dicts indented."""
    pad = " " * indent
    if isinstance(obj, dict) and any(isinstance(v, (dict, list)) for v in obj.values()) and indent < 4:
        items = [f'{pad} {json.dumps(k)}: {compact_json(v, indent + 1).lstrip()}' for k, v in sorted(obj.items())]
        return pad + "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(obj, list) and obj and all(isinstance(v, dict) for v in obj):
        items = [pad + "  " + json.dumps(v, sort_keys=True, separators=(",", ":")) for v in obj]
        return pad + "[\n" + ",\n".join(items) + "\n" + pad + "]"
    return pad + json.dumps(obj, sort_keys=True, separators=(",", ":"))


def write_json(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    text = compact_json(obj)
    assert json.loads(text) == json.loads(json.dumps(obj)), path
    with open(path, "w") as fh:
        fh.write(text + "\n")


def versions():
    return {"tensorflow": tf.__version__, "keras": keras.version(), "h5py": h5py.__version__,
            "hdf5": h5py.version.hdf5_version, "numpy": np.__version__, "ml_dtypes": ml_dtypes.__version__}


def expect(out, rel, rec, what):
    rec = {"file": rel, "written_by": what, "versions": versions(), **rec}
    write_json(os.path.join(out, "expected", rel + ".json"), rec)


def same_weights(a, b, what):
    wa, wb = a.get_weights(), b.get_weights()
    assert len(wa) == len(wb), what
    for x, y in zip(wa, wb):
        assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes(), what


def same_optimizer(a, b, what):
    va, vb = a.optimizer.variables, b.optimizer.variables
    assert len(va) == len(vb), what
    for x, y in zip(va, vb):
        assert np.asarray(x).tobytes() == np.asarray(y).tobytes(), (what, x.path)


def check_legacy(model, path):
    """Each layer's weights, in order, are the datasets its group's weight_names lists (bfloat16: opaque)."""
    with h5py.File(path, "r") as f:
        mw = f["model_weights"]
        for layer in model.layers:
            names = [jsonable(n) for n in mw[layer.name].attrs.get("weight_names", [])]
            assert len(names) == len(layer.weights), (path, layer.name)
            for name, var in zip(names, layer.weights):
                want = np.asarray(var.numpy())
                got = mw[layer.name][name][()]
                assert got.tobytes() == want.tobytes(), (path, layer.name, name)


def rezip_deflated(src, dst):
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", compression=zipfile.ZIP_DEFLATED) as zout:
        for zi in zin.infolist():
            zout.writestr(zipfile.ZipInfo(zi.filename, date_time=zi.date_time), zin.read(zi),
                          compress_type=zipfile.ZIP_DEFLATED)


def h5_copy_other_writer(src, dst):
    """Copy the model's variables (not the optimizer's) with h5py, libver='latest': chunked + shuffle + gzip
    + fletcher32 (compact for scalars), link-message groups, attributes copied."""
    with h5py.File(src, "r") as fin, h5py.File(dst, "w", libver="latest") as fout:
        for k, v in fin.attrs.items():
            fout.attrs[k] = v

        def visit(name, obj):
            if name.split("/")[0] == "optimizer":
                return  # kept small: the model's variables only
            if isinstance(obj, h5py.Group):
                g = fout.require_group(name)
                for k, v in obj.attrs.items():
                    g.attrs[k] = v
                return
            data = obj[()]
            if obj.shape == ():
                dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
                dcpl.set_layout(h5py.h5d.COMPACT)
                space = h5py.h5s.create(h5py.h5s.SCALAR)
                tid = obj.id.get_type()
                parent = fout.require_group(os.path.dirname(name) or "/")
                dsid = h5py.h5d.create(parent.id, os.path.basename(name).encode(), tid, space, dcpl=dcpl)
                dsid.write(h5py.h5s.ALL, h5py.h5s.ALL, np.asarray(data))
                d = fout[name]
            else:
                d = fout.create_dataset(name, data=data, dtype=obj.dtype, chunks=True, shuffle=True,
                                        compression="gzip", compression_opts=6, fletcher32=True)
            for k, v in obj.attrs.items():
                d.attrs[k] = v
        fin.visititems(visit)


def keras2_files(out):
    """Keras 2 (tf_keras) legacy weights-only .h5 file, in a subprocess with TFKERAS_PATH. (Its model.save to
    .h5 is left out to keep the fixtures small: legacy_model.h5 has that layout.)"""
    code = r'''
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import numpy as np, tensorflow as tf, tf_keras as k
k.utils.set_random_seed(%d)
m = k.Sequential([k.Input((4,)), k.layers.Dense(3, name="dense"),
                  k.layers.Dense(2, dtype="bfloat16", name="dense_bf16"),
                  k.layers.Activation("linear", dtype="float32", name="to_f32"),
                  k.layers.BatchNormalization(name="bn"), k.layers.Dense(1, name="out")], name="k2seq")
m.compile(optimizer=k.optimizers.Adam(0.01), loss="mse")
rng = np.random.default_rng(7)
m.fit(rng.normal(size=(4, 4)).astype("float32"), rng.normal(size=(4, 1)).astype("float32"), verbose=0)
out = sys.argv[1]
m.save_weights(os.path.join(out, "k2_weights.h5"))
import h5py, json
status = {}
for name, root in (("k2_weights.h5", "/"),):
    with h5py.File(os.path.join(out, name), "r") as f:  # each layer's weights = its weight_names datasets
        for layer in m.layers:
            g = f[root][layer.name]
            names = [n.decode() if isinstance(n, bytes) else n for n in g.attrs["weight_names"]]
            assert len(names) == len(layer.weights), (name, layer.name)
            for n, w in zip(names, layer.weights):
                assert g[n][()].tobytes() == w.numpy().tobytes(), (name, n)
    try:
        k.models.clone_model(m).load_weights(os.path.join(out, name))
        status[name] = "ok"
    except ValueError as e:  # tf_keras cannot read back its own opaque bfloat16 datasets either
        status[name] = f"{type(e).__name__}: {e}"
print(json.dumps({"version": k.__version__, "load": status}))
''' % SEED
    env = dict(os.environ, PYTHONPATH=os.environ["TFKERAS_PATH"])
    res = subprocess.run([sys.executable, "-c", code, out], env=env, capture_output=True, text=True)
    if res.returncode != 0:
        sys.stderr.write(res.stderr)
        raise SystemExit("the tf_keras step failed")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/keras"
    out = os.path.abspath(out)
    keep = {}
    if os.path.exists(os.path.join(out, "README.md")):  # hand-written: kept
        keep["README.md"] = open(os.path.join(out, "README.md"), "rb").read()
    if not os.environ.get("TFKERAS_PATH") and os.path.isdir(out):
        for name in ("k2_weights.h5", "expected/k2_weights.h5.json"):
            p = os.path.join(out, name)
            if os.path.exists(p):
                keep[name] = open(p, "rb").read()
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)
    for name, data in keep.items():
        os.makedirs(os.path.dirname(os.path.join(out, name)), exist_ok=True)
        with open(os.path.join(out, name), "wb") as fh:
            fh.write(data)

    # --- the full model: .weights.h5, .keras (stored and deflated), legacy .h5
    keras.utils.set_random_seed(SEED)
    full = build_full()
    x, y = full_data()
    full.fit(x, y, batch_size=len(y), epochs=1, verbose=0)
    assert int(full.optimizer.iterations.numpy()) == 1

    p = os.path.join(out, "model.weights.h5")
    full.save_weights(p)
    fresh = build_full()
    fresh.optimizer.build(fresh.trainable_variables)
    fresh.load_weights(p)
    same_weights(full, fresh, p)
    same_optimizer(full, fresh, p)
    expect(out, "model.weights.h5", describe_h5(p), "keras.Model.save_weights")

    p = os.path.join(out, "model.keras")
    full.save(p)
    loaded = keras.models.load_model(p)
    same_weights(full, loaded, p)
    same_optimizer(full, loaded, p)
    expect(out, "model.keras", describe_zip(p), "keras.Model.save (.keras)")

    q = os.path.join(out, "model_deflated.keras")
    rezip_deflated(p, q)
    same_weights(full, keras.models.load_model(q), q)
    rec = describe_zip(q)
    stored = json.load(open(os.path.join(out, "expected", "model.keras.json")))
    inner = rec.pop("model.weights.h5")
    for d in inner["datasets"]:  # the member's bytes are model.keras's: no need to list them twice
        assert d["zip_offset"] is None
        d.pop("zip_offset")
    for d in stored["model.weights.h5"]["datasets"]:
        d.pop("zip_offset")
    assert inner == stored["model.weights.h5"], "model_deflated.keras's model.weights.h5 differs"
    rec["model.weights.h5"] = "the member is model.keras's model.weights.h5 deflated: see model.keras.json"
    expect(out, "model_deflated.keras", rec, "model.keras rezipped with zipfile.ZIP_DEFLATED")

    p = os.path.join(out, "legacy_model.h5")
    full.save(p)  # Keras 3's legacy HDF5 saver (warns that the format is legacy)
    rec = describe_legacy(p)
    try:
        same_weights(full, keras.models.load_model(p), p)
        rec["keras_load_model"] = "ok"
    except ValueError as e:  # Keras 3.15 cannot read back its own opaque bfloat16 datasets
        rec["keras_load_model"] = f"{type(e).__name__}: {e}"
    check_legacy(full, p)
    expect(out, "legacy_model.h5", rec, "keras.Model.save (.h5, legacy_h5_format)")
    try:
        full.save_weights(os.path.join(out, "refused.h5"))
        raise AssertionError("Keras 3 accepted save_weights('x.h5'): add a fixture for it")
    except ValueError:
        pass

    p = os.path.join(out, "other_writer.weights.h5")
    h5_copy_other_writer(os.path.join(out, "model.weights.h5"), p)
    fresh = build_full()
    fresh.load_weights(p)
    same_weights(full, fresh, p)
    expect(out, "other_writer.weights.h5", describe_h5(p),
           "h5py copy of model.weights.h5: libver=latest, chunked+shuffle+gzip+fletcher32, compact scalars")

    # --- a small Sequential model: ModelCheckpoint, sharded weights
    keras.utils.set_random_seed(SEED)
    small = build_small()
    sx, sy = small_data()
    ckdir = os.path.join(out, "checkpoints")
    os.makedirs(ckdir)
    cb = keras.callbacks.ModelCheckpoint(os.path.join(ckdir, "ckpt-{epoch:02d}.weights.h5"),
                                         save_weights_only=True)
    small.fit(sx, sy, batch_size=len(sy), epochs=3, verbose=0, callbacks=[cb])
    names = sorted(os.listdir(ckdir))
    assert names == ["ckpt-01.weights.h5", "ckpt-02.weights.h5", "ckpt-03.weights.h5"], names
    for n in names:
        expect(out, "checkpoints/" + n, describe_h5(os.path.join(ckdir, n)),
               "keras.callbacks.ModelCheckpoint(save_weights_only=True)")
    fresh = build_small()
    fresh.optimizer.build(fresh.trainable_variables)
    fresh.load_weights(os.path.join(ckdir, names[-1]))
    same_weights(small, fresh, "ckpt-03")
    same_optimizer(small, fresh, "ckpt-03")

    shdir = os.path.join(out, "sharded")
    os.makedirs(shdir)
    small.save_weights(os.path.join(shdir, "model.weights.json"), max_shard_size=SHARD_GB)
    fresh = build_small()
    fresh.load_weights(os.path.join(shdir, "model.weights.json"))
    same_weights(small, fresh, "sharded")
    shards = sorted(n for n in os.listdir(shdir) if n.endswith(".h5"))
    assert len(shards) > 1, shards
    with open(os.path.join(shdir, "model.weights.json")) as fh:
        expect(out, "sharded/model.weights.json", {"json": json.load(fh), "shards": shards},
               "keras.Model.save_weights(max_shard_size=...)")
    for n in shards:
        expect(out, "sharded/" + n, describe_h5(os.path.join(shdir, n)), "sharded save_weights")

    # --- Keras 2 (optional)
    if os.environ.get("TFKERAS_PATH"):
        k2 = keras2_files(out)
        for n, how in (("k2_weights.h5", "save_weights"),):
            rec = describe_legacy(os.path.join(out, n))
            rec["keras_load"] = k2["load"][n]
            expect(out, n, rec, f"tf_keras {k2['version']} Model.{how} (.h5)")
    elif "k2_weights.h5" in keep:
        print("kept the existing k2_weights.h5 and its expected record (no TFKERAS_PATH)")

    total = 0
    for root, _, files in os.walk(out):
        for n in files:
            total += os.path.getsize(os.path.join(root, n))
    print(f"wrote {out}: {total} bytes", versions())


if __name__ == "__main__":
    main()
