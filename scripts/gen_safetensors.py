#!/usr/bin/env python3
"""Generate tfmount's safetensors fixtures (tests/fixtures/safetensors/) with the REAL writer.

How to run
----------
In the test venv (``safetensors`` 0.8.0 and ``ml_dtypes``; TensorFlow for the TF checkpoint of
``tf_pair/``), from the repository root::

    ~/.cache/tfmount-test-venv/bin/python scripts/gen_safetensors.py tests/fixtures/safetensors

The output directory, but for its ``README.md``, is deleted and rewritten. Values are seeded: the
same on a re-run.

What is written (names are part of the test contract)
-----------------------------------------------------
* ``all_dtypes.safetensors``: ``safetensors.numpy.save_file`` of one tensor of every dtype
  safetensors and tfmount share (F64 F32 F16 BF16 I64 I32 I16 I8 U64 U32 U16 U8 BOOL C64 F8_E5M2
  F8_E4M3 F8_E4M3FNUZ F8_E5M2FNUZ; ml_dtypes' types for bfloat16 and float8), shapes scalar,
  zero-size, 1-D to 3-D, names with ``/`` and ``.`` (``dense/kernel``, ``model.layers.0.weight``,
  ``a/b.c/d``), and ``__metadata__`` ``{"format": "pt", "note": "tfmount fixture"}``.
* ``unserved.safetensors``: an F8_E8M0 tensor (no tfmount dtype: listed, not served) beside a
  float32 one.
* ``sharded/``: a Hugging Face sharded set, ``model.safetensors.index.json`` and
  ``model-00001-of-00002.safetensors``, ``model-00002-of-00002.safetensors``. The index is written
  in the layout of transformers' ``save_pretrained`` (``{"metadata": {"total_size": N},
  "weight_map": {tensor: shard}}``, ``json.dumps(index, indent=2, sort_keys=True) + "\\n"``), the
  shards with ``metadata={"format": "pt"}`` as it writes them; ``total_size`` is the bytes of all
  tensors. (huggingface_hub and transformers are not installed: the index is written here.)
* ``several/``: a directory of two files, ``a.safetensors`` and ``b.safetensors``, no index.
* ``tf_pair/``: ``tf/ckpt-1`` (``tf.train.Checkpoint(dense=...).write``: keys
  ``dense/kernel/.ATTRIBUTES/VARIABLE_VALUE`` and ``dense/bias/...``, ``names/`` ``dense/kernel``,
  ``dense/bias``) and ``model.safetensors`` with the keys ``dense/kernel`` (the same values) and
  ``dense/bias`` (one value changed by 0.5), for ``diff --names`` / ``--values``.

Expected values: ``expected/<name>.json`` holds what safetensors' own reader gives
(``safetensors.deserialize`` of the file's bytes, ``safe_open(...).metadata()``): every tensor's
key, dtype name, shape and the sha256 of its bytes, and the metadata; for ``sharded`` every tensor's
shard too; for ``tf_pair`` the changed tensor's largest absolute difference (numpy).
"""

import hashlib
import json
import os
import shutil
import sys

import ml_dtypes
import numpy as np
import safetensors
from safetensors import safe_open
from safetensors.numpy import save_file

SEED = 20240611


def values(rng, shape, dtype):
    """Seeded values of `dtype` (a numpy or ml_dtypes type) and `shape`."""
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)
    if dt.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt)
    return (rng.standard_normal(shape) * 4).astype(np.float32).astype(dt)


def all_dtypes(rng):
    t = {}
    t["f64/vector"] = values(rng, (5,), np.float64)
    t["f32/matrix"] = values(rng, (3, 4), np.float32)
    t["f16/cube"] = values(rng, (2, 3, 2), np.float16)
    t["bf16/weights"] = values(rng, (4, 3), ml_dtypes.bfloat16)
    t["i64/scalar"] = values(rng, (), np.int64)
    t["i32/vector"] = values(rng, (7,), np.int32)
    t["i16/vector"] = values(rng, (6,), np.int16)
    t["i8/vector"] = values(rng, (9,), np.int8)
    t["u64/vector"] = values(rng, (3,), np.uint64)
    t["u32/vector"] = values(rng, (3,), np.uint32)
    t["u16/vector"] = values(rng, (5,), np.uint16)
    t["u8/matrix"] = values(rng, (2, 5), np.uint8)
    t["bool/mask"] = values(rng, (8,), np.bool_)
    t["c64/vector"] = values(rng, (3,), np.complex64)
    t["f8/e5m2"] = values(rng, (6,), ml_dtypes.float8_e5m2)
    t["f8/e4m3"] = values(rng, (6,), ml_dtypes.float8_e4m3fn)
    t["f8/e4m3fnuz"] = values(rng, (4,), ml_dtypes.float8_e4m3fnuz)
    t["f8/e5m2fnuz"] = values(rng, (4,), ml_dtypes.float8_e5m2fnuz)
    t["empty/zero_rows"] = np.zeros((0, 3), dtype=np.float32)
    t["f32/scalar"] = np.array(1.5, dtype=np.float32)
    t["dense/kernel"] = values(rng, (4, 2), np.float32)
    t["model.layers.0.weight"] = values(rng, (2, 2), np.float32)
    t["a/b.c/d"] = values(rng, (3,), np.int32)
    return t


def record(path, rel):
    """What safetensors' reader gives of the file at `path`: its tensors and metadata."""
    with open(path, "rb") as f:
        data = f.read()
    tensors = []
    for k, v in sorted(safetensors.deserialize(data)):
        tensors.append(
            {
                "key": k,
                "dtype": v["dtype"],
                "shape": list(v["shape"]),
                "sha256": hashlib.sha256(bytes(v["data"])).hexdigest(),
                "file": rel,
            }
        )
    with safe_open(path, framework="numpy") as f:
        meta = f.metadata()
    return {"tensors": tensors, "metadata": meta, "file_size": len(data)}


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.write("\n")


def main(out):
    if os.path.isdir(out):
        for e in os.listdir(out):
            if e != "README.md":
                p = os.path.join(out, e)
                shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)
    os.makedirs(os.path.join(out, "expected"), exist_ok=True)
    rng = np.random.default_rng(SEED)
    expected = {}

    # One file of every dtype.
    p = os.path.join(out, "all_dtypes.safetensors")
    save_file(all_dtypes(rng), p, metadata={"format": "pt", "note": "tfmount fixture"})
    expected["all_dtypes"] = record(p, "all_dtypes.safetensors")

    # A dtype tfmount has not.
    p = os.path.join(out, "unserved.safetensors")
    save_file(
        {
            "e8m0/scales": values(rng, (4,), ml_dtypes.float8_e8m0fnu),
            "f32/values": values(rng, (4,), np.float32),
        },
        p,
    )
    expected["unserved"] = record(p, "unserved.safetensors")

    # A Hugging Face sharded set.
    d = os.path.join(out, "sharded")
    os.makedirs(d)
    tensors = {
        "model.embed_tokens.weight": values(rng, (8, 4), np.float32),
        "model.layers.0.self_attn.q_proj.weight": values(rng, (4, 4), ml_dtypes.bfloat16),
        "model.layers.0.mlp.up_proj.weight": values(rng, (6, 4), np.float16),
        "model.layers.1.self_attn.q_proj.weight": values(rng, (4, 4), ml_dtypes.bfloat16),
        "model.norm.weight": values(rng, (4,), np.float32),
        "lm_head.weight": values(rng, (8, 4), np.float32),
    }
    names = sorted(tensors)
    shards = {
        "model-00001-of-00002.safetensors": names[: len(names) // 2],
        "model-00002-of-00002.safetensors": names[len(names) // 2 :],
    }
    weight_map = {}
    total = 0
    records = []
    for shard, keys in shards.items():
        sp = os.path.join(d, shard)
        save_file({k: tensors[k] for k in keys}, sp, metadata={"format": "pt"})
        for k in keys:
            weight_map[k] = shard
            total += tensors[k].nbytes
        records.extend(record(sp, "sharded/" + shard)["tensors"])
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        f.write(json.dumps(index, indent=2, sort_keys=True) + "\n")
    expected["sharded"] = {
        "tensors": sorted(records, key=lambda t: t["key"]),
        "shards": sorted(shards),
        "total_size": total,
    }

    # A directory of two files, no index.
    d = os.path.join(out, "several")
    os.makedirs(d)
    for name in ["a", "b"]:
        sp = os.path.join(d, name + ".safetensors")
        save_file({"w": values(rng, (3, 2), np.float32), "step": np.array(7, dtype=np.int64)}, sp)
        expected["several_" + name] = record(sp, "several/" + name + ".safetensors")

    # A TF checkpoint and a safetensors file of the same names.
    import tensorflow as tf

    d = os.path.join(out, "tf_pair")
    os.makedirs(os.path.join(d, "tf"))
    kernel = values(rng, (3, 2), np.float32)
    bias = values(rng, (2,), np.float32)
    # The variables named as their object paths, so that names/ holds one name each.
    ck = tf.train.Checkpoint(
        dense=tf.train.Checkpoint(
            kernel=tf.Variable(kernel, name="dense/kernel"), bias=tf.Variable(bias, name="dense/bias")
        )
    )
    ck.write(os.path.join(d, "tf", "ckpt-1"))
    changed = bias.copy()
    changed[1] += np.float32(0.5)
    sp = os.path.join(d, "model.safetensors")
    save_file({"dense/kernel": kernel, "dense/bias": changed}, sp)
    rec = record(sp, "tf_pair/model.safetensors")
    rec["changed"] = {
        "dense/bias": {
            "max_abs": float(np.max(np.abs(changed.astype(np.float64) - bias.astype(np.float64)))),
            "differing": int(np.sum(changed != bias)),
        }
    }
    rec["tf_keys"] = sorted(k for k, _ in tf.train.list_variables(os.path.join(d, "tf", "ckpt-1")))
    expected["tf_pair"] = rec

    for name, e in expected.items():
        e["safetensors_version"] = safetensors.__version__
        write_json(os.path.join(out, "expected", name + ".json"), e)
    print("wrote", out)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/safetensors")
