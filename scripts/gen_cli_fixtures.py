#!/usr/bin/env python3
"""Generate the fixtures of `tfmount ls/cat/verify/diff` (tests/cli/cli.rs) with REAL TensorFlow.

    ~/tfvenv/bin/python scripts/gen_cli_fixtures.py tests/fixtures/cli

The output directory is deleted and regenerated; everything is seeded. The Rust tests read only
the committed outputs (TensorFlow is not needed to run them). Expected values come from
TensorFlow's own reader (``tf.train.load_checkpoint(...).get_tensor``), never from tfmount.

What is written (names are part of the test contract)
------------------------------------------------------
* ``run/``        one training run: ``tf.train.Checkpoint`` of a ``tf.Module`` (kernel, bias, a frozen
  embedding, a string vocabulary, an int64 step) and a ``tf.compat.v1`` Adam optimizer, saved by a
  ``CheckpointManager`` after 2 steps (``ckpt-1``) and after 5 steps (``ckpt-2``, the ``latest``).
* ``unrelated/``  ``ckpt-1`` of a different model (some keys shared with ``run`` with other shapes,
  dtypes or values).
* ``pair/a``, ``pair/b``  two ``tf.raw_ops.SaveV2`` bundles built to hold every kind of difference:
  equal tensors (float, string, NaN), changed values, a changed shape (same bytes), a changed dtype,
  keys only in ``a`` and only in ``b``, partitioned variables saved with different partitionings
  (row cuts, axis 0 vs axis 1, partitioned vs whole) but equal values, partitioned variables with
  equal partitioning and one changed value, 0.0 vs -0.0, and keys with a tab, a newline and a
  backslash.
* ``verify/ckpt`` a 2-shard checkpoint (``MergeV2Checkpoints`` of two ``SaveV2`` bundles) whose
  ``.index`` has two data blocks (TensorFlow writes 256 KiB index blocks: 540 filler tensors with
  500-byte keys fill the first one), plus a partitioned variable and a string tensor.
* ``expected.json``:
  - ``diff``: for each pair of sources, the expected ``tfmount diff`` lines ``[tag, key]`` (sorted by
    key bytes) and the keys of equal tensors, computed from TensorFlow's values: a key only in B is
    ``A``, only in A ``D``; different dtype or shape ``T``; same dtype and shape, different bytes
    (numpy ``tobytes()``; strings element by element) ``M``; else equal.
  - ``verify``: the clean keys (fillers as a pattern) and damaged variants of ``verify/ckpt`` (a flipped byte in two
    tensors' data, a truncated shard, a missing shard, a damaged data block of the ``.index``), each
    as file operations (offsets found by parsing the index here) and the keys TensorFlow's reader
    fails on (``get_tensor`` raising) after the damage, and the keys of the damaged index block
    (its separators, from the index block) for the index variant: the keys TensorFlow fails on
    are checked here to be exactly the keys of that block. The Rust test applies the
    operations to a copy of the clean checkpoint.
"""

import json
import os
import shutil
import struct
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_fixtures import _iter_block, _read_block, read_bundle_index, read_varint  # noqa: E402

SEED = 20240917


def save_v2(prefix, items):
    """items: (name, numpy array or list of bytes, None | list of (start, length) per dim)."""
    names, specs, tensors = [], [], []
    for name, arr, cuts in items:
        if cuts is None:
            names.append(name)
            specs.append("")
            tensors.append(tf.constant(arr))
            continue
        for cut in cuts:
            idx = tuple(slice(s, s + n) for s, n in cut)
            names.append(name)
            specs.append(" ".join(str(d) for d in arr.shape) + " "
                         + ":".join("%d,%d" % c for c in cut))
            tensors.append(tf.constant(arr[idx]))
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=specs, tensors=tensors)


def rows(shape0, ncols, starts):
    """Row cuts [(start, len)] of a [shape0, ncols] tensor, as per-dim cuts."""
    ends = starts[1:] + [shape0]
    return [[(s, e - s), (0, ncols)] for s, e in zip(starts, ends)]


def cols(nrows, shape1, starts):
    ends = starts[1:] + [shape1]
    return [[(0, nrows), (s, e - s)] for s, e in zip(starts, ends)]


# ----------------------------------------------------------------------------------------------
# TensorFlow's view
# ----------------------------------------------------------------------------------------------

def tf_tensors(prefix):
    """{key: (dtype name, shape list, comparable bytes)} from TensorFlow's reader."""
    r = tf.train.load_checkpoint(prefix)
    shapes = r.get_variable_to_shape_map()
    dtypes = r.get_variable_to_dtype_map()
    out = {}
    for k in shapes:
        v = r.get_tensor(k)
        dt = dtypes[k]
        if dt == tf.string:
            arr = np.asarray(v, dtype=object)
            data = b"".join(struct.pack("<Q", len(s)) + bytes(s) for s in arr.flat)
        else:
            data = np.ascontiguousarray(v).tobytes()
        out[k] = (dt.name, list(shapes[k]), data)
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


def probe_worker(prefix, keys_file, start):
    """Child process: tries get_tensor on keys[start:] in a fresh reader, printing `ok N` or
    `fail N` per key (flushed), so that a reader that aborts the process (TensorFlow CHECK-fails
    on some damaged slices) is seen as failing on the key it was reading. Stops at the first
    failure: each key is read by a reader that has not failed before."""
    with open(keys_file) as f:
        keys = json.load(f)
    try:
        r = tf.train.load_checkpoint(prefix)
    except Exception as e:  # noqa: BLE001
        print("open_failed %s" % type(e).__name__, flush=True)
        return 0
    for i in range(start, len(keys)):
        try:
            r.get_tensor(keys[i])
            print("ok %d" % i, flush=True)
        except Exception:  # noqa: BLE001
            # TensorFlow's BundleReader keeps its first error: every later call on it fails or
            # aborts. The parent goes on from the next key with a fresh reader.
            print("fail %d" % i, flush=True)
            break
    print("end", flush=True)
    return 0


def tf_failing(prefix, keys):
    """The keys whose get_tensor raises (or aborts the process) in a fresh reader; all of them
    if the reader cannot be opened. Returns (keys, note)."""
    import subprocess

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(keys, f)
        keys_file = f.name
    bad, notes, start = [], [], 0
    try:
        while start < len(keys):
            p = subprocess.run([sys.executable, os.path.abspath(__file__), "--probe", prefix, keys_file,
                                str(start)], capture_output=True, text=True)
            done, ended = start, False
            for line in p.stdout.splitlines():
                word, _, arg = line.partition(" ")
                if word == "end":
                    ended = True
                    continue
                if word == "open_failed":
                    return list(keys), "reader cannot be opened: %s" % arg
                i = int(arg)
                if word == "fail":
                    bad.append(keys[i])
                done = i + 1
            if not ended:
                # The process died on keys[done] (a CHECK failure: abort).
                bad.append(keys[done])
                notes.append("get_tensor(%r) aborted the process (exit %d)" % (keys[done][:60], p.returncode))
                done += 1
            start = done
    finally:
        os.unlink(keys_file)
    return bad, "; ".join(notes) or None


# ----------------------------------------------------------------------------------------------
# generators
# ----------------------------------------------------------------------------------------------

def gen_run(out):
    d = os.path.join(out, "run")
    rng = np.random.default_rng(SEED)

    class Net(tf.Module):
        def __init__(self):
            super().__init__()
            self.kernel = tf.Variable(rng.normal(size=(3, 4)).astype(np.float32), name="kernel")
            self.bias = tf.Variable(np.zeros(4, np.float32), name="bias")
            self.frozen = tf.Variable(rng.normal(size=(5, 2)).astype(np.float32), trainable=False)
            self.vocab = tf.Variable([b"<pad>", b"the", b"model"], trainable=False)

    net = Net()
    step = tf.Variable(0, dtype=tf.int64)
    opt = tf.compat.v1.train.AdamOptimizer(0.05)
    xs = rng.normal(size=(6, 3)).astype(np.float32)
    ys = rng.normal(size=(6, 4)).astype(np.float32)
    ckpt = tf.train.Checkpoint(net=net, opt=opt, step=step)
    mgr = tf.train.CheckpointManager(ckpt, d, max_to_keep=5)
    for i in range(5):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(xs, net.kernel) + net.bias - ys))
        grads = tape.gradient(loss, [net.kernel, net.bias])
        opt.apply_gradients(zip(grads, [net.kernel, net.bias]))
        step.assign_add(1)
        if i + 1 in (2, 5):
            mgr.save()
    assert sorted(os.listdir(d)) == ["checkpoint", "ckpt-1.data-00000-of-00001", "ckpt-1.index",
                                     "ckpt-2.data-00000-of-00001", "ckpt-2.index"], os.listdir(d)
    # A relative state file (CheckpointManager writes the paths it was given).
    with open(os.path.join(d, "checkpoint"), "w") as f:
        f.write('model_checkpoint_path: "ckpt-2"\nall_model_checkpoint_paths: "ckpt-1"\n'
                'all_model_checkpoint_paths: "ckpt-2"\n')


def gen_unrelated(out):
    d = os.path.join(out, "unrelated")
    rng = np.random.default_rng(SEED + 1)

    class Net(tf.Module):
        def __init__(self):
            super().__init__()
            self.kernel = tf.Variable(rng.normal(size=(4, 4)).astype(np.float32), name="kernel")
            self.bias = tf.Variable(np.zeros(4, np.float64), name="bias")
            self.head = tf.Variable(rng.normal(size=(4, 2)).astype(np.float32), name="head")

    net = Net()
    ckpt = tf.train.Checkpoint(net=net, step=tf.Variable(7, dtype=tf.int64))
    ckpt.save(os.path.join(d, "ckpt"))


def gen_pair(out):
    d = os.path.join(out, "pair")
    os.makedirs(d)
    rng = np.random.default_rng(SEED + 2)
    f = lambda *s: rng.normal(size=s).astype(np.float32)  # noqa: E731
    same = f(3, 4)
    nan = np.array([1.0, np.nan, -np.inf, 2.5], np.float32)
    words = np.array([b"alpha", b"", b"\xff\x00bytes"], dtype=object)
    changed = f(5)
    changed_b = changed.copy()
    changed_b[3] += 1.0
    shape_w = f(2, 6)
    dtype_w = np.arange(4, dtype=np.int32)
    part = f(6, 4)
    wide = f(4, 6)
    whole = f(6, 2)
    pc = f(6, 4)
    pc_b = pc.copy()
    pc_b[5, 1] = -pc_b[5, 1] + 0.5
    pr = f(6, 4)
    pr_b = pr.copy()
    pr_b[0, 0] += 2.0
    esc = f(3)
    a = [
        ("same/f32", same, None),
        ("same/nan", nan, None),
        ("same/words", words, None),
        ("changed/f32", changed, None),
        ("changed/step", np.int64(41), None),
        ("changed/words", np.array([b"a", b"b"], dtype=object), None),
        ("changed/zero", np.array([0.0, 1.0], np.float32), None),
        ("shape/w", shape_w, None),
        ("dtype/w", dtype_w, None),
        ("removed/only_a", f(2), None),
        ("part/resliced", part, rows(6, 4, [0, 3])),
        ("part/axis", wide, rows(4, 6, [0, 2])),
        ("part/vs_whole", whole, rows(6, 2, [0, 4])),
        ("part/changed_same_slicing", pc, rows(6, 4, [0, 2, 4])),
        ("part/changed_resliced", pr, rows(6, 4, [0, 3])),
        ("esc/tab\there", esc, None),
        ("esc/new\nline", esc, None),
        ("esc/back\\slash", esc, None),
    ]
    b = [
        ("same/f32", same, None),
        ("same/nan", nan.copy(), None),
        ("same/words", words, None),
        ("changed/f32", changed_b, None),
        ("changed/step", np.int64(42), None),
        ("changed/words", np.array([b"a", b"c"], dtype=object), None),
        ("changed/zero", np.array([-0.0, 1.0], np.float32), None),
        ("shape/w", shape_w.reshape(3, 4), None),
        ("dtype/w", dtype_w.view(np.float32), None),
        ("added/only_b", f(2), None),
        ("part/resliced", part, rows(6, 4, [0, 2, 4])),
        ("part/axis", wide, cols(4, 6, [0, 2, 4])),
        ("part/vs_whole", whole, None),
        ("part/changed_same_slicing", pc_b, rows(6, 4, [0, 2, 4])),
        ("part/changed_resliced", pr_b, rows(6, 4, [0, 2, 4])),
        ("esc/tab\there", esc + 1, None),
        ("esc/new\nline", esc + 1, None),
        ("esc/back\\slash", esc + 1, None),
    ]
    save_v2(os.path.join(d, "a"), a)
    save_v2(os.path.join(d, "b"), b)


FILLERS = 540
FILLER_KEY = "a_filler/%03d/" + "w" * 480


def gen_verify(out):
    d = os.path.join(out, "verify")
    os.makedirs(d)
    rng = np.random.default_rng(SEED + 3)
    tmp = tempfile.mkdtemp(prefix="tfmount_cli_")
    try:
        first = [(FILLER_KEY % i, np.float32(i), None) for i in range(FILLERS)]
        first += [
            ("model/dense/kernel", rng.normal(size=(8, 8)).astype(np.float32), None),
            ("model/dense/bias", rng.normal(size=(8,)).astype(np.float32), None),
            ("model/words", np.array([b"one", b"two", b"three", b"", b"five"], dtype=object), None),
            ("model/emb", rng.normal(size=(6, 4)).astype(np.float32), rows(6, 4, [0, 3])),
        ]
        second = [
            ("model/head/kernel", rng.normal(size=(8, 4)).astype(np.float32), None),
            ("model/step", np.int64(1234), None),
            ("z_last", rng.normal(size=(3,)).astype(np.float32), None),
        ]
        save_v2(os.path.join(tmp, "p0"), first)
        save_v2(os.path.join(tmp, "p1"), second)
        tf.raw_ops.MergeV2Checkpoints(checkpoint_prefixes=[os.path.join(tmp, "p0"), os.path.join(tmp, "p1")],
                                      destination_prefix=os.path.join(d, "ckpt"), delete_old_dirs=False)
    finally:
        shutil.rmtree(tmp)


# ----------------------------------------------------------------------------------------------
# damage
# ----------------------------------------------------------------------------------------------

def index_blocks(index_path):
    """[(separator key, offset, size)] of the data blocks, from the footer and the index block."""
    with open(index_path, "rb") as f:
        data = f.read()
    footer = data[-48:]
    pos = 0
    _mo, pos = read_varint(footer, pos)
    _ms, pos = read_varint(footer, pos)
    io, pos = read_varint(footer, pos)
    isz, pos = read_varint(footer, pos)
    stats = {"snappy_blocks": 0}
    out = []
    for sep, handle in _iter_block(_read_block(data, io, isz, stats)):
        off, p = read_varint(handle, 0)
        size, p = read_varint(handle, p)
        out.append((sep, off, size))
    return out


def apply(src_prefix, dst_dir, ops):
    base = os.path.basename(src_prefix)
    src_dir = os.path.dirname(src_prefix)
    for fn in os.listdir(src_dir):
        if fn.startswith(base + "."):
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
    return os.path.join(dst_dir, base)


def verify_expectations(out):
    prefix = os.path.join(out, "verify", "ckpt")
    header, entries, _ = read_bundle_index(prefix)
    assert header.num_shards == 2, header
    by_key = {k: e for k, e in entries}
    keys = sorted(tf.train.load_checkpoint(prefix).get_variable_to_shape_map(), key=lambda s: s.encode())
    shard = lambda i: "ckpt.data-%05d-of-00002" % i  # noqa: E731

    def inside(key):
        e = by_key[key.encode()]
        return {"op": "flip", "file": shard(e.shard_id), "offset": e.offset + e.size // 2}

    # A slice of the partitioned variable: its key is a slice key (NUL, name, extents), the one
    # entry of model/emb's slices stored first in its shard.
    emb_slices = [e for k, e in entries if k.startswith(b"\x00") and b"model/emb" in k]
    assert len(emb_slices) == 2, emb_slices
    sl = min(emb_slices, key=lambda e: e.offset)
    flip_slice = {"op": "flip", "file": shard(sl.shard_id), "offset": sl.offset + 1}

    # Truncate shard 0 in the middle of model/dense/kernel.
    k = by_key[b"model/dense/kernel"]
    assert k.shard_id == 0
    cut = k.offset + k.size // 2
    blocks = index_blocks(prefix + ".index")
    assert len(blocks) == 2, "the index must have two data blocks: %d" % len(blocks)
    sep0, off1, size1 = blocks[0][0], blocks[1][1], blocks[1][2]
    variants = [
        {"name": "flipped_byte", "ops": [inside("model/dense/kernel"), flip_slice, inside("model/words")]},
        {"name": "truncated_shard", "ops": [{"op": "truncate", "file": shard(0), "length": cut}]},
        {"name": "missing_shard", "ops": [{"op": "delete", "file": shard(1)}]},
        {"name": "damaged_index_block", "ops": [{"op": "flip", "file": "ckpt.index",
                                                 "offset": off1 + size1 // 2}],
         "block": 1,
         # Keys of block 1: above the separator of block 0 (the last block has no upper bound
         # that matters: its separator is >= every key).
         "block_keys_after": sep0.decode("utf-8"),
         "block_keys_up_to": blocks[1][0].decode("utf-8")},
    ]
    for v in variants:
        tmp = tempfile.mkdtemp(prefix="tfmount_dmg_")
        try:
            damaged = apply(prefix, tmp, v["ops"])
            bad, err = tf_failing(damaged, keys)
        finally:
            shutil.rmtree(tmp)
        v["tf_fails"] = bad
        if err:
            v["tf_note"] = err
        print("  %s: TensorFlow fails on %d of %d keys: %s" % (
            v["name"], len(bad), len(keys), [b[:40] for b in bad][:12]), flush=True)
    # What the damage should mean, checked against TensorFlow (the expectations are TF's).
    stored_after_cut = {kk.decode() for kk, e in entries if e.shard_id == 0 and e.offset + e.size > cut
                        and not kk.startswith(b"\x00")}
    print("  (shard-0 tensors past the cut: %s)" % sorted(stored_after_cut), flush=True)
    # The damaged index block holds exactly the keys TensorFlow then fails on.
    ix = variants[-1]
    lo, hi = ix["block_keys_after"].encode(), ix["block_keys_up_to"].encode()
    in_block = [k for k in keys if lo < k.encode() <= hi]
    assert sorted(in_block) == sorted(ix["tf_fails"]), (in_block, ix["tf_fails"])
    # The 540 fillers (FILLER_KEY) are not listed, to keep this file small.
    return {"source": "verify/ckpt", "num_keys": len(keys),
            "keys_not_fillers": [k for k in keys if not k.startswith("a_filler/")],
            "filler_key_pattern": FILLER_KEY, "fillers": FILLERS, "variants": variants}


def write_readme(out, tf_version):
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write("Generated by `scripts/gen_cli_fixtures.py` with TensorFlow %s -- do not edit by hand.\n"
                "Regenerate: `~/tfvenv/bin/python scripts/gen_cli_fixtures.py tests/fixtures/cli` (about 2\n"
                "minutes). What each directory is, and what `expected.json` holds: the script's docstring.\n"
                "Used by `tests/cli/cli.rs` (`tfmount ls/cat/verify/diff`).\n" % tf_version)


def main(argv):
    if len(argv) == 3 and argv[1] == "--readme":
        write_readme(os.path.abspath(argv[2]), tf.__version__)
        return 0
    if len(argv) == 5 and argv[1] == "--probe":
        return probe_worker(argv[2], argv[3], int(argv[4]))
    if len(argv) != 2:
        print(__doc__)
        return 2
    out = os.path.abspath(argv[1])
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    tf.random.set_seed(SEED)
    for gen in (gen_run, gen_unrelated, gen_pair, gen_verify):
        print("generating", gen.__name__[4:], flush=True)
        gen(out)
    pairs = [
        ("run/ckpt-1", "run/ckpt-2"),
        ("run", "unrelated/ckpt-1"),
        ("unrelated/ckpt-1", "run/ckpt-1"),
        ("pair/a", "pair/b"),
        ("pair/b", "pair/a"),
        ("pair/a", "pair/a.index"),
        ("run/ckpt-2.index", "run"),
    ]
    diffs = []
    for a, b in pairs:
        # A checkpoint directory means its latest checkpoint.
        pa = tf.train.latest_checkpoint(os.path.join(out, a)) if os.path.isdir(os.path.join(out, a)) else a
        pb = tf.train.latest_checkpoint(os.path.join(out, b)) if os.path.isdir(os.path.join(out, b)) else b
        strip = lambda p: os.path.join(out, p[:-len(".index")] if p.endswith(".index") else p)  # noqa: E731
        e = expected_diff(strip(pa), strip(pb))
        e.update({"a": a, "b": b})
        diffs.append(e)
        print("  diff %s %s: %s" % (a, b, e["lines"]), flush=True)
    print("damaging verify/ckpt", flush=True)
    expected = {
        "generator": "scripts/gen_cli_fixtures.py, TensorFlow %s" % tf.__version__,
        "diff": diffs,
        "verify": verify_expectations(out),
    }
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
        f.write("\n")
    write_readme(out, tf.__version__)
    total = sum(os.path.getsize(os.path.join(dp, fn)) for dp, _, fns in os.walk(out) for fn in fns)
    print("done: %d bytes in %s" % (total, out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
