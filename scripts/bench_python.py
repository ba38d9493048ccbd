#!/usr/bin/env python3
"""The Python module's benchmark (scripts/bench.sh, section `python`; issue 27's rows).

    bench_python.py write DIR          # with TensorFlow (the test venv): the model files
    bench_python.py run DIR REPS       # the timings; prints one table

`write` makes the same tensors three ways: a TF2 checkpoint (tf.train.Checkpoint, N float32
variables, TOTAL_MIB in all), a Keras-layout `model.weights.h5` written with h5py (contiguous
datasets), and `model.safetensors` (safetensors.numpy.save_file). `run` times, each in a fresh
Python process with the source files in the page cache, the median of REPS:

  tf        TensorFlow's reader: tf.train.load_checkpoint + get_tensor of every key, import
            excluded (the timer starts after `import tensorflow`);
  st        safetensors.numpy.load_file of model.safetensors, the process (import included);
  mnt       the route before the module: `tfmount ckpt MNT`, safetensors' load_file of
            MNT/model.safetensors, unmount, the process;
  tfm       tfmount.open(ckpt) and m[k] for every key, the process (import included);
  h5py      h5py: every dataset of model.weights.h5 read, the process;
  tfm_h5    tfmount.open(model.weights.h5) and every tensor, the process;
  first     tfmount.open of a 1M-tensor checkpoint (DIR/big1m, written by mkckpt) to its first
            array, timed inside the process (after `import numpy, tfmount`).

tfmount's row is also printed with its imports excluded, as TF's row is, for scale.

Every reader's arrays are touched one byte per 4 KiB page (and their last byte), so that every
page of every array is resident and mapped in whether the array is a mapped view (tfmount:
whose CRC-32C check on first access has read every byte anyway) or a copy (the others): what
"loaded" means is the same for all rows.
"""

import json
import os
import statistics
import subprocess
import sys
import time

N = int(os.environ.get("PY_BENCH_TENSORS", "338"))
TOTAL_MIB = int(os.environ.get("PY_BENCH_MIB", "524"))


def write(d):
    import numpy as np
    import tensorflow as tf
    import h5py
    from safetensors.numpy import save_file

    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(27)
    total = TOTAL_MIB << 20
    # Sizes like a model's: a few large matrices, many small vectors.
    weights = rng.pareto(1.2, N) + 0.05
    elems = np.maximum((weights / weights.sum() * total / 4).astype(np.int64), 1)
    arrays = {}
    for i, n in enumerate(elems):
        cols = 256 if n >= 4096 else 1
        rows = max(int(n) // cols, 1)
        arrays[f"layer_{i:03d}/kernel"] = rng.standard_normal((rows, cols), dtype=np.float32)
    ck = tf.train.Checkpoint(**{k.replace("/", "_"): tf.Variable(v) for k, v in arrays.items()})
    ck.write(os.path.join(d, "ckpt"))
    with h5py.File(os.path.join(d, "model.weights.h5"), "w") as f:
        layers = f.create_group("layers")
        for i, (k, v) in enumerate(arrays.items()):
            g = layers.create_group(f"dense_{i}").create_group("vars")
            g.create_dataset("0", data=v)
        f.create_group("optimizer").create_group("vars")
    save_file({k: v for k, v in arrays.items()}, os.path.join(d, "model.safetensors"))
    mib = sum(v.nbytes for v in arrays.values()) / 2**20
    print(f"wrote {len(arrays)} float32 tensors, {mib:.0f} MiB, three ways, in {d}")


TOUCH = """
import numpy
def touch(a):
    # One byte of every page the array's bytes lie in, and the last: resident, mapped in.
    if isinstance(a, bytes) or a.dtype == object:
        return
    v = a.reshape(-1).view(numpy.uint8)
    if v.size:
        int(v[::4096].sum()) + int(v[-1])
"""

PROGRAMS = {
    "tf": TOUCH + """
import sys, time, tensorflow as tf
t0 = time.perf_counter()
r = tf.train.load_checkpoint(sys.argv[1] + "/ckpt")
for k in r.get_variable_to_shape_map():
    touch(r.get_tensor(k))
print(time.perf_counter() - t0)
""",
    "st": TOUCH + """
import sys
from safetensors.numpy import load_file
for a in load_file(sys.argv[1] + "/model.safetensors").values():
    touch(a)
""",
    "tfm": TOUCH + """
import sys, time, tfmount
t0 = time.perf_counter()
m = tfmount.open(sys.argv[1] + "/ckpt")
for k in m:
    touch(m[k])
print(time.perf_counter() - t0)
""",
    "mnt": TOUCH + """
import os, subprocess, sys, tempfile
from safetensors.numpy import load_file
mnt = tempfile.mkdtemp()
subprocess.run([os.path.join(os.path.dirname(sys.executable), "tfmount"), sys.argv[1] + "/ckpt", mnt], check=True)
try:
    for a in load_file(mnt + "/model.safetensors").values():
        touch(a)
finally:
    subprocess.run(["fusermount3", "-u", mnt], check=True)
    os.rmdir(mnt)
""",
    "h5py": TOUCH + """
import sys, h5py
with h5py.File(sys.argv[1] + "/model.weights.h5", "r") as f:
    def visit(name, obj):
        if isinstance(obj, h5py.Dataset):
            touch(obj[()])
    f.visititems(visit)
""",
    "tfm_h5": TOUCH + """
import sys, tfmount
m = tfmount.open(sys.argv[1] + "/model.weights.h5")
for k in m:
    touch(m[k])
""",
    "first": """
import sys, time
import numpy, tfmount
t1 = time.perf_counter()
m = tfmount.open(sys.argv[1] + "/big1m/ckpt")
a = m[sys.argv[2]]
a.sum()
print(time.perf_counter() - t1)
""",
}


def timed(py, prog, *args):
    """(wall time of the process, the time it printed: from after its imports)."""
    t0 = time.perf_counter()
    out = subprocess.run([py, "-c", PROGRAMS[prog], *args], check=True, capture_output=True, text=True).stdout
    wall = time.perf_counter() - t0
    inner = out.strip().splitlines()[-1] if out.strip() else None
    return wall, (float(inner) if inner else None)


def run(d, reps, tf_py, py, first_key):
    # Page cache warm: one untimed pass of every file.
    for name in os.listdir(d):
        p = os.path.join(d, name)
        if os.path.isfile(p):
            with open(p, "rb") as f:
                while f.read(1 << 24):
                    pass
    order = ["tf", "st", "mnt", "tfm", "h5py", "tfm_h5"] + (["first"] if first_key else [])
    walls = {k: [] for k in order}
    inners = {k: [] for k in order}
    for _ in range(reps):  # interleaved, so that noise hits every row alike
        for k in order:
            interp = tf_py if k == "tf" else py
            extra = [first_key] if k == "first" else []
            w, i = timed(interp, k, d, *extra)
            walls[k].append(w)
            if i is not None:
                inners[k].append(i)
    # TF's row and the 1M row are timed inside the process (after the imports), the others
    # as whole processes; tfm_in is tfmount's own loop, after its imports, for scale.
    rows = {k: statistics.median(walls[k]) for k in order}
    rows["tf"] = statistics.median(inners["tf"])
    rows["tfm_in"] = statistics.median(inners["tfm"])
    if first_key:
        rows["first"] = statistics.median(inners["first"])
    return rows


def main():
    if sys.argv[1] == "write":
        write(sys.argv[2])
        return
    d, reps = sys.argv[2], int(sys.argv[3])
    tf_py, py = os.environ["TF_PYTHON"], os.environ["TFMOUNT_PY"]
    first_key = os.environ.get("FIRST_KEY")
    r = run(d, reps, tf_py, py, first_key)
    print(json.dumps(r))
    print(f"{'row':<58} {'seconds':>8}  {'ratio':>6}  target")
    def line(what, t, ratio=None, target=""):
        rs = f"{ratio:6.2f}" if ratio is not None else "      "
        print(f"{what:<58} {t:8.3f}  {rs}  {target}")
    line("TF reader, every tensor (import excluded)", r["tf"])
    line("safetensors load_file of the plain file (process)", r["st"])
    line("before: tfmount mount + load_file(model.safetensors) + unmount", r["mnt"], r["tf"] / r["mnt"], "info (the route before the module)")
    line("tfmount.open + every tensor (process, import included)", r["tfm"], r["tf"] / r["tfm"], ">= 2.0 vs TF: " + ("PASS" if r["tf"] / r["tfm"] >= 2 else "MISS"))
    line("  ... vs safetensors load_file", r["tfm"], r["st"] / r["tfm"], ">= 1.5 vs st: " + ("PASS" if r["st"] / r["tfm"] >= 1.5 else "MISS"))
    line("  ... its imports excluded (as TF's row), for scale", r["tfm_in"], r["tf"] / r["tfm_in"], "info")
    line("h5py, every dataset of model.weights.h5 (process)", r["h5py"])
    line("tfmount.open(model.weights.h5) + every tensor (process)", r["tfm_h5"], r["h5py"] / r["tfm_h5"], ">= 1.5 vs h5py: " + ("PASS" if r["h5py"] / r["tfm_h5"] >= 1.5 else "MISS"))
    if "first" in r:
        line("tfmount.open(1M tensors) -> first array (in process)", r["first"], None, "< 0.100 s: " + ("PASS" if r["first"] < 0.1 else "MISS"))


if __name__ == "__main__":
    main()
