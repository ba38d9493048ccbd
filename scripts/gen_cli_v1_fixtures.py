#!/usr/bin/env python3
"""Generate the V1 fixtures of `tfmount verify` and `tfmount diff` (tests/cli/cli.rs) with REAL TensorFlow.

    ~/tfvenv/bin/python scripts/gen_cli_v1_fixtures.py tests/fixtures/cli_v1

Run it after ``scripts/gen_v1_fixtures.py`` (it also records expectations over ``tests/fixtures/v1``).
The output directory is deleted and regenerated; everything is seeded. Every V1 checkpoint is written by
``tf.compat.v1.train.Saver(write_version=tf.compat.v1.train.SaverDef.V1)`` in graph mode. Expected
values come from TensorFlow only: its checkpoint reader (``tf.train.load_checkpoint(p).get_tensor``), or
its ``Restore`` op for the tensors that reader refuses in V1 ("Sliced checkpoints are not supported",
"Data type not supported": partitioned tensors, float16, complex, uint16).

What is written (names are part of the test contract)
------------------------------------------------------
* ``verify/model.ckpt`` (+ the ``checkpoint`` state file naming it) a single-file V1 checkpoint over
  three table blocks (TensorFlow's V1 writer closes a block once it holds 256 KiB):
  block 0 holds the meta entry, a few small tensors and the first two slices of the partitioned
  ``b/emb``; block 1 its third slice and ``c/big``; block 2 small tensors of many dtypes (float16,
  int64 varints, bool, strings, an empty tensor, a partitioned int32). The layout is asserted here.
  Large values are repetitive so that the files compress well in git.
* ``pair/v1/model.ckpt`` (+ state file), ``pair/v2/model.ckpt`` (V2 bundle), ``pair/v2b/model.ckpt``:
  one graph (every dtype, partitioned variables along both axes, strings, an empty tensor, scalars)
  saved as V1 and as V2 with the same values, and as V2 again after changing three variables (no
  partitioned strings: TensorFlow cannot read them back from a V2 bundle, "Dtype string not supported").
* ``expected.json``:
  - ``diff``: for each pair of sources (paths relative to ``tests/fixtures``), the expected
    ``tfmount diff`` lines ``[tag, key]`` sorted by key bytes and the equal keys, computed from
    TensorFlow's values (tag rules as in ``gen_cli_fixtures.py``). A checkpoint directory means its
    latest checkpoint; the path of one V1 shard means the whole sharded checkpoint (as tfmount reads
    it; TensorFlow is given the ``?????`` pattern).
  - ``verify``: ``keys`` of ``verify/model.ckpt`` as ``[key, dtype, how TensorFlow reads it (reader
    or restore), size of its bytes in tfmount's layout]`` (``sharded_keys`` the same for
    ``v1/sharded``), the table layout (blocks, and each entry's block and value offset), and damaged
    variants: ``copy`` (a directory under ``tests/fixtures`` to copy), ``sources`` (what to verify
    in the copy: the checkpoint's path, and the directory ``.``), file operations (``flip`` a byte,
    ``truncate``, ``delete``), and what TensorFlow does then, each key read in a fresh process
    (TensorFlow's readers keep their first error): ``tf_open_failed`` (the reader cannot be opened:
    every key fails) and ``tf_fails`` (the keys that fail). For a deleted shard, ``lost_keys`` are
    the tensors stored only in that shard (from the clean tables): TensorFlow fails on them as
    unknown keys; tfmount cannot name them and reports the missing shard instead.
"""

import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_fixtures import _read_block, layout_bytes, read_varint, write_json  # noqa: E402
from gen_v1_fixtures import load_partitioned, variable  # noqa: E402

SEED = 20250301
V1 = tf.compat.v1.train.SaverDef.V1
V2 = tf.compat.v1.train.SaverDef.V2
BLOCK = 262144
REFUSED = ("Sliced checkpoints are not supported", "Data type not supported")


# ----------------------------------------------------------------------------------------------
# The table layout, from the bytes (an independent small reader)
# ----------------------------------------------------------------------------------------------

def table_layout(path):
    """Blocks [(offset, size)], the index block (offset, size), and entries [{key_hex, block,
    value_offset, value_len}] of a V1 table file (uncompressed blocks only)."""
    with open(path, "rb") as f:
        data = f.read()
    footer = data[-48:]
    assert footer[40:] == bytes.fromhex("57fb808b247547db"), path
    pos = 0
    _mo, pos = read_varint(footer, pos)
    _ms, pos = read_varint(footer, pos)
    idx_off, pos = read_varint(footer, pos)
    idx_size, pos = read_varint(footer, pos)
    stats = {"snappy_blocks": 0}
    index = _read_block(data, idx_off, idx_size, stats)
    blocks, entries = [], []
    for _sep, handle, _voff in iter_entries(index):
        off, p = read_varint(handle, 0)
        size, _ = read_varint(handle, p)
        blocks.append({"offset": off, "size": size})
        block = _read_block(data, off, size, stats)
        assert stats["snappy_blocks"] == 0
        for key, value, voff in iter_entries(block):
            entries.append({"key_hex": key.hex(), "block": len(blocks) - 1,
                            "value_offset": off + voff, "value_len": len(value)})
    return {"blocks": blocks, "index_block": {"offset": idx_off, "size": idx_size}, "entries": entries}


def iter_entries(block):
    """(key, value, value offset in the block) of each entry."""
    (num_restarts,) = struct.unpack_from("<I", block, len(block) - 4)
    end = len(block) - 4 * (num_restarts + 1)
    pos, key = 0, b""
    while pos < end:
        shared, pos = read_varint(block, pos)
        non_shared, pos = read_varint(block, pos)
        vlen, pos = read_varint(block, pos)
        key = key[:shared] + block[pos:pos + non_shared]
        pos += non_shared
        yield key, block[pos:pos + vlen], pos
        pos += vlen


def entry_name(key_hex):
    """The tensor name of a slice key (0x00, then the name as OrderedCode string: 0x00 escaped as
    0x00 0xff and 0xff as 0xff 0x00, ended by
    0x00 0x01), or '' for the meta entry."""
    k = bytes.fromhex(key_hex)
    if not k:
        return ""
    assert k[0] == 0, k
    out, i = bytearray(), 1
    while True:
        if k[i] == 0 and k[i + 1] == 1:
            return out.decode()
        if k[i] == 0 and k[i + 1] == 0xFF:
            out.append(0)
            i += 2
        elif k[i] == 0xFF and k[i + 1] == 0:
            out.append(0xFF)
            i += 2
        else:
            out.append(k[i])
            i += 1


# ----------------------------------------------------------------------------------------------
# TensorFlow's view
# ----------------------------------------------------------------------------------------------

def reader_maps(path):
    r = tf.train.load_checkpoint(path)
    return r.get_variable_to_shape_map(), r.get_variable_to_dtype_map()


def read_tensor(path, key, dtype, method):
    """The value of `key`, read by TensorFlow's checkpoint reader or its V1 Restore op."""
    if method == "reader":
        return tf.train.load_checkpoint(path).get_tensor(key)
    return tf.raw_ops.Restore(file_pattern=path, tensor_name=key, dt=dtype).numpy()


def how_to_read(path, key, dtype):
    """'reader', or 'restore' where the reader refuses V1 tensors of this kind."""
    try:
        tf.train.load_checkpoint(path).get_tensor(key)
        return "reader"
    except Exception as e:  # noqa: BLE001
        if not any(r in str(e) for r in REFUSED):
            raise
    read_tensor(path, key, dtype, "restore")
    return "restore"


def tf_tensors(path):
    """{key: (dtype name, shape list, layout bytes)} of a checkpoint, read by TensorFlow."""
    shapes, dtypes = reader_maps(path)
    out = {}
    for k in shapes:
        dt = dtypes[k]
        v = read_tensor(path, k, dt, how_to_read(path, k, dt))
        v = np.asarray(v, dtype=object) if dt == tf.string else np.asarray(v)
        v = v.reshape(shapes[k])
        out[k] = (dt.name, list(shapes[k]), layout_bytes(v, dt))
    return out


def expected_diff(a, b):
    ta, tb = tf_tensors(a), tf_tensors(b)
    lines, equal = [], []
    for k in sorted(set(ta) | set(tb), key=lambda s: s.encode()):
        if k not in ta:
            lines.append(["A", k])
        elif k not in tb:
            lines.append(["D", k])
        elif ta[k][:2] != tb[k][:2]:
            lines.append(["T", k])
        elif ta[k][2] != tb[k][2]:
            lines.append(["M", k])
        else:
            equal.append(k)
    return {"lines": lines, "equal": equal}


def probe_worker(path, plan_file, start):
    """Child process: reads keys[start:] of `path` (each by its method), printing `ok N` or
    `fail N` (flushed); stops at the first failure, so that each key is read by TensorFlow code
    that has not failed before in this process. `open_failed` if the reader cannot be opened."""
    with open(plan_file) as f:
        plan = json.load(f)
    try:
        tf.train.load_checkpoint(path)
    except Exception as e:  # noqa: BLE001
        print("open_failed %s" % type(e).__name__, flush=True)
        return 0
    for i in range(start, len(plan)):
        key, dtype, method = plan[i][:3]
        try:
            read_tensor(path, key, tf.as_dtype(dtype), method)
            print("ok %d" % i, flush=True)
        except Exception:  # noqa: BLE001
            print("fail %d" % i, flush=True)
            break
    print("end", flush=True)
    return 0


def tf_failing(path, plan):
    """(keys whose read fails or aborts the process, reader open failed?, notes)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(plan, f)
        plan_file = f.name
    bad, notes, start = [], [], 0
    try:
        while start < len(plan):
            p = subprocess.run([sys.executable, os.path.abspath(__file__), "--probe", path, plan_file,
                                str(start)], capture_output=True, text=True)
            done, ended = start, False
            for line in p.stdout.splitlines():
                word, _, arg = line.partition(" ")
                if word == "end":
                    ended = True
                    continue
                if word == "open_failed":
                    return [p[0] for p in plan], True, "reader cannot be opened: %s" % arg
                i = int(arg)
                if word == "fail":
                    bad.append(plan[i][0])
                done = i + 1
            if not ended:
                bad.append(plan[done][0])
                notes.append("reading %r aborted the process (exit %d)" % (plan[done][0], p.returncode))
                done += 1
            start = done
    finally:
        os.unlink(plan_file)
    return bad, False, "; ".join(notes) or None


# ----------------------------------------------------------------------------------------------
# Checkpoints
# ----------------------------------------------------------------------------------------------

def save(d, values, parts, version, write_state=True):
    """Saves a graph of `values` {name: (value, dtype)} and partitioned `parts` {name: (value,
    dtype, num_shards, axis)} to d/model.ckpt with a Saver of `version`."""
    os.makedirs(d, exist_ok=True)
    g = tf.Graph()
    with g.as_default():
        vs = [(variable(n, v, dt), v) for n, (v, dt) in values.items()]
        pvs = []
        for n, (v, dt, k, axis) in parts.items():
            pv = tf.compat.v1.get_variable(n, shape=v.shape, dtype=dt, use_resource=False,
                                           partitioner=tf.compat.v1.fixed_size_partitioner(k, axis=axis),
                                           initializer=tf.compat.v1.zeros_initializer())
            pvs.append((pv, v))
        s = tf.compat.v1.train.Saver(write_version=version, save_relative_paths=True)
        with tf.compat.v1.Session(graph=g) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            for v, val in vs:
                v.load(val, sess)
            for pv, val in pvs:
                load_partitioned(pv, val, sess)
            s.save(sess, os.path.join(d, "model.ckpt"), write_meta_graph=False, write_state=write_state)


def repetitive(n, period, scale):
    """n float32 values repeating every `period` (compresses well, still a real tensor)."""
    return ((np.arange(n) % period).astype(np.float32) - period / 2) * np.float32(scale)


def gen_verify(out):
    d = os.path.join(out, "verify")
    rng = np.random.default_rng(SEED)
    # b/emb: 3 slices of 33,000 float32 (132 KB each); two of them close block 0.
    emb = repetitive(3 * 330 * 100, 997, 0.25).reshape(990, 100)
    big = repetitive(33000, 1009, -0.5)
    values = {
        "a/bias": (rng.normal(size=8).astype(np.float32), tf.float32),
        "a/step": (np.array(1234, np.int64), tf.int64),
        "a/words": (np.array([b"alpha", b"", b"\xff\x00beta"], dtype=object), tf.string),
        "c/big": (big, tf.float32),
        "d/bias": (rng.normal(size=16).astype(np.float32), tf.float32),
        "d/empty": (np.zeros([0, 3], np.float32), tf.float32),
        "d/half": ((rng.normal(size=8) * 10).astype(np.float16), tf.float16),
        "d/ids": (rng.integers(-2**62, 2**62, size=300, dtype=np.int64), tf.int64),
        "d/mask": (rng.integers(0, 2, size=10).astype(bool), tf.bool),
        "d/words": (np.array([b"one", b"two", b"", b"four\x00"], dtype=object), tf.string),
        "z/last": (np.array([1.5, -2.5, 3.5], np.float32), tf.float32),
    }
    parts = {
        "b/emb": (emb, tf.float32, 3, 0),
        "e/part": (rng.integers(-1000, 1000, size=(6, 2)).astype(np.int32), tf.int32, 2, 0),
    }
    save(d, values, parts, V1)
    path = os.path.join(d, "model.ckpt")
    lay = table_layout(path)
    names = [entry_name(e["key_hex"]) for e in lay["entries"]]
    blocks = {}
    for n, e in zip(names, lay["entries"]):
        e["name"] = n
        blocks.setdefault(e["block"], set()).add(n)
    # The layout the variants rely on.
    assert len(lay["blocks"]) == 3, lay["blocks"]
    assert blocks[0] == {"", "a/bias", "a/step", "a/words", "b/emb"}, blocks
    assert blocks[1] == {"b/emb", "c/big"}, blocks
    assert blocks[2] == {"d/bias", "d/empty", "d/half", "d/ids", "d/mask", "d/words", "e/part", "z/last"}, blocks
    return lay


def gen_pair(out):
    rng = np.random.default_rng(SEED + 1)
    values = {
        "f32": (rng.normal(size=(3, 4)).astype(np.float32), tf.float32),
        "f64": (rng.normal(size=5), tf.float64),
        "f16": ((rng.normal(size=(2, 3)) * 100).astype(np.float16), tf.float16),
        "c64": (np.array([1 + 2j, -0.5 - 0j, complex(np.nan, np.inf)], np.complex64), tf.complex64),
        "i8": (np.array([-128, 0, 127], np.int8), tf.int8),
        "i32": (np.array([-2**31, 7, 2**31 - 1], np.int32), tf.int32),
        "i64": (rng.integers(-2**63, 2**63 - 1, size=20, dtype=np.int64, endpoint=True), tf.int64),
        "u8": (np.array([0, 128, 255], np.uint8), tf.uint8),
        "u16": (np.array([[0, 65535]], np.uint16), tf.uint16),
        "mask": (np.array([True, False, True]), tf.bool),
        "words": (np.array([b"", b"\x00\xff", b"caf\xc3\xa9", b"x" * 200], dtype=object), tf.string),
        "nan": (np.array([np.nan, -0.0, np.inf], np.float32), tf.float32),
        "empty": (np.zeros([2, 0], np.int64), tf.int64),
        "scalar": (np.array(-2.5, np.float64), tf.float64),
        "step": (np.array(41, np.int64), tf.int64),
    }
    parts = {
        "part/rows": (rng.normal(size=(7, 3)).astype(np.float32), tf.float32, 3, 0),
        "part/cols": (rng.normal(size=(2, 5)), tf.float64, 2, 1),
    }
    save(os.path.join(out, "pair", "v1"), values, parts, V1)
    save(os.path.join(out, "pair", "v2"), values, parts, V2)
    changed = dict(values)
    changed["step"] = (np.array(42, np.int64), tf.int64)
    w = values["words"][0].copy()
    w[3] = b"y" * 200
    changed["words"] = (w, tf.string)
    cparts = dict(parts)
    rows = parts["part/rows"][0].copy()
    rows[6, 2] += 1.0  # in the last slice
    cparts["part/rows"] = (rows,) + parts["part/rows"][1:]
    save(os.path.join(out, "pair", "v2b"), changed, cparts, V2)


# ----------------------------------------------------------------------------------------------
# Damage
# ----------------------------------------------------------------------------------------------

def apply(src_dir, dst_dir, ops):
    for fn in os.listdir(src_dir):
        shutil.copy(os.path.join(src_dir, fn), dst_dir)
    for op in ops:
        p = os.path.join(dst_dir, op["file"])
        if op["op"] == "flip":
            with open(p, "r+b") as f:
                f.seek(op["offset"])
                b = f.read(1)
                f.seek(op["offset"])
                f.write(bytes([b[0] ^ 0xFF]))
        elif op["op"] == "truncate":
            os.truncate(p, op["length"])
        elif op["op"] == "delete":
            os.unlink(p)
        else:
            raise ValueError(op)


def read_plan(path):
    """[(key, dtype name, method, layout bytes)] of a clean checkpoint, sorted by key bytes."""
    shapes, dtypes = reader_maps(path)
    keys = sorted(shapes, key=lambda s: s.encode())
    plan = []
    for k in keys:
        dt = dtypes[k]
        how = how_to_read(path, k, dt)
        v = read_tensor(path, k, dt, how)
        v = np.asarray(v, dtype=object) if dt == tf.string else np.asarray(v)
        plan.append([k, dt.name, how, len(layout_bytes(v, dt))])
    return plan


def verify_expectations(root, out, lay):
    vpath = os.path.join(out, "verify", "model.ckpt")
    plan = read_plan(vpath)
    by_name = {}
    for e in lay["entries"]:
        by_name.setdefault(e["name"], []).append(e)
    B = lay["blocks"]

    def inside(name, slice_no=0):
        e = by_name[name][slice_no]
        return {"op": "flip", "file": "model.ckpt", "offset": e["value_offset"] + e["value_len"] // 2}

    b1 = B[1]
    variants = [
        # A byte inside c/big's values: its block (block 1) fails its CRC.
        {"name": "flipped_value", "ops": [inside("c/big")]},
        # A byte inside d/ids' values: block 2, shared by small tensors of many dtypes.
        {"name": "damaged_block", "ops": [inside("d/ids")]},
        # The stored CRC of block 2 (its trailer: type byte, then the masked CRC-32C).
        {"name": "damaged_block_crc", "ops": [{"op": "flip", "file": "model.ckpt",
                                               "offset": B[2]["offset"] + B[2]["size"] + 2}]},
        # Block 0 holds the meta entry.
        {"name": "damaged_meta_block", "ops": [inside("a/words")]},
        {"name": "damaged_index_block", "ops": [{"op": "flip", "file": "model.ckpt",
                                                 "offset": lay["index_block"]["offset"] + 2}]},
        {"name": "truncated_file", "ops": [{"op": "truncate", "file": "model.ckpt",
                                            "length": b1["offset"] + b1["size"] // 2}]},
    ]
    for v in variants:
        v.update({"copy": "cli_v1/verify", "sources": ["model.ckpt", "."], "checkpoint_name": "model.ckpt"})
        tmp = tempfile.mkdtemp(prefix="tfmount_v1dmg_")
        try:
            apply(os.path.join(out, "verify"), tmp, v["ops"])
            bad, open_failed, note = tf_failing(os.path.join(tmp, "model.ckpt"), plan)
        finally:
            shutil.rmtree(tmp)
        v["tf_fails"], v["tf_open_failed"] = bad, open_failed
        if note:
            v["tf_note"] = note
        print("  %s: TensorFlow fails on %d of %d keys%s: %s" % (
            v["name"], len(bad), len(plan), " (open failed)" if open_failed else "", bad), flush=True)
    # What the damage means, checked against TensorFlow: a damaged block fails exactly the tensors
    # with an entry in it; the meta block, the index block or the footer fail everything.
    in_block = lambda b: sorted({e["name"] for e in lay["entries"] if e["block"] == b and e["name"]})  # noqa: E731
    v = {x["name"]: x for x in variants}
    assert sorted(v["flipped_value"]["tf_fails"]) == in_block(1), (v["flipped_value"], in_block(1))
    assert sorted(v["damaged_block"]["tf_fails"]) == in_block(2), (v["damaged_block"], in_block(2))
    assert sorted(v["damaged_block_crc"]["tf_fails"]) == in_block(2)
    for n in ("damaged_meta_block", "damaged_index_block", "truncated_file"):
        assert v[n]["tf_open_failed"], v[n]

    # The sharded fixture of tests/fixtures/v1: a missing shard, a truncated shard.
    sdir = os.path.join(root, "v1", "sharded")
    pattern = os.path.join(sdir, "model.ckpt-?????-of-00003")
    splan = read_plan(pattern)
    held = {}
    for i in range(3):
        f = "model.ckpt-%05d-of-00003" % i
        for e in table_layout(os.path.join(sdir, f))["entries"]:
            n = entry_name(e["key_hex"])
            if n:
                held.setdefault(n, set()).add(i)
    lost = sorted(n for n, s in held.items() if s == {1})
    sharded = [
        {"name": "sharded_missing_shard", "ops": [{"op": "delete", "file": "model.ckpt-00001-of-00003"}],
         "lost_keys": lost, "missing_shard": "model.ckpt-00001-of-00003"},
        {"name": "sharded_truncated_shard",
         "ops": [{"op": "truncate", "file": "model.ckpt-00002-of-00003",
                  "length": os.path.getsize(os.path.join(sdir, "model.ckpt-00002-of-00003")) // 2}]},
    ]
    for v in sharded:
        v.update({"copy": "v1/sharded", "sources": ["model.ckpt-?????-of-00003", "."],
                  "checkpoint_name": "model.ckpt"})
        tmp = tempfile.mkdtemp(prefix="tfmount_v1dmg_")
        try:
            apply(sdir, tmp, v["ops"])
            bad, open_failed, note = tf_failing(os.path.join(tmp, "model.ckpt-?????-of-00003"), splan)
        finally:
            shutil.rmtree(tmp)
        v["tf_fails"], v["tf_open_failed"] = bad, open_failed
        if note:
            v["tf_note"] = note
        print("  %s: TensorFlow fails on %d of %d keys%s: %s" % (
            v["name"], len(bad), len(splan), " (open failed)" if open_failed else "", bad), flush=True)
    ms = sharded[0]
    assert not ms["tf_open_failed"] and set(lost) <= set(ms["tf_fails"]), ms
    assert sharded[1]["tf_open_failed"], sharded[1]
    return {"source": "cli_v1/verify/model.ckpt", "keys": plan, "layout": lay,
            "sharded_keys": splan, "variants": variants + sharded}


# ----------------------------------------------------------------------------------------------
# Diff expectations
# ----------------------------------------------------------------------------------------------

SHARD = re.compile(r"^(.*)-\d{5}-of-(\d{5})$")


def tf_path(root, p):
    """What TensorFlow is given for a source tfmount reads as one checkpoint."""
    full = os.path.join(root, p)
    if os.path.isdir(full):
        return tf.train.latest_checkpoint(full)
    if full.endswith(".index"):
        return full[:-len(".index")]
    m = SHARD.match(full)
    if m:
        return "%s-?????-of-%s" % (m.group(1), m.group(2))
    return full


def diff_expectations(root):
    pairs = [
        ("v1/single/model.ckpt-1", "v1/single/model.ckpt-2"),
        ("v1/single", "v1/single/model.ckpt-1"),
        ("v1/single/model.ckpt-2", "v1/single"),
        ("v1/sharded", "v1/sharded/model.ckpt-00002-of-00003"),
        ("v1/partitioned/model.ckpt", "v1/dtypes/model.ckpt"),
        ("v1/dtypes/model.ckpt", "v1/dtypes/model.ckpt"),
        ("cli_v1/pair/v1/model.ckpt", "cli_v1/pair/v2/model.ckpt"),
        ("cli_v1/pair/v2/model.ckpt.index", "cli_v1/pair/v1"),
        ("cli_v1/pair/v1/model.ckpt", "cli_v1/pair/v2b/model.ckpt"),
        ("cli_v1/pair/v2b", "cli_v1/pair/v1/model.ckpt"),
    ]
    out = []
    for a, b in pairs:
        e = expected_diff(tf_path(root, a), tf_path(root, b))
        e.update({"a": a, "b": b})
        out.append(e)
        print("  diff %s %s: %s" % (a, b, e["lines"]), flush=True)
    return out


README = """\
Generated by `scripts/gen_cli_v1_fixtures.py` with TensorFlow %s -- do not edit by hand.
Regenerate (after `scripts/gen_v1_fixtures.py`): `~/tfvenv/bin/python scripts/gen_cli_v1_fixtures.py
tests/fixtures/cli_v1` (a few minutes: every damaged key is read by TensorFlow in a fresh process). What each
directory is, and what `expected.json` holds: the script's docstring. Used by `tests/cli/cli.rs` (`tfmount
verify` and `tfmount diff` on V1 checkpoints).
"""


def main(argv):
    if len(argv) == 5 and argv[1] == "--probe":
        return probe_worker(argv[2], argv[3], int(argv[4]))
    if len(argv) != 2:
        print(__doc__)
        return 2
    out = os.path.abspath(argv[1])
    root = os.path.dirname(out)
    assert os.path.isdir(os.path.join(root, "v1", "sharded")), "run gen_v1_fixtures.py first"
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    print("generating verify", flush=True)
    lay = gen_verify(out)
    print("generating pair", flush=True)
    gen_pair(out)
    print("diffs", flush=True)
    diffs = diff_expectations(root)
    print("damaging", flush=True)
    expected = {
        "generator": "scripts/gen_cli_v1_fixtures.py, TensorFlow %s" % tf.__version__,
        "diff": diffs,
        "verify": verify_expectations(root, out, lay),
    }
    write_json(os.path.join(out, "expected.json"), expected)
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write(README % tf.__version__)
    total = sum(os.path.getsize(os.path.join(dp, fn)) for dp, _, fns in os.walk(out) for fn in fns)
    print("done: %d bytes in %s" % (total, out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
