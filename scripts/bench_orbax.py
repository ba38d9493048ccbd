#!/usr/bin/env python3
"""Orbax rows of scripts/bench.sh (section `orbax`; issue 28). Run with a Python that has
orbax-checkpoint, jax[cpu] and tensorstore ($ORBAX_PYTHON), outside the repository.

    bench_orbax.py write DIR [MIB]   # DIR/ckpt: StandardCheckpointer's save of ~300 float32
                                     # arrays, MIB (1024) in all, one of 256 MiB saved in chunks
                                     # of 4 MiB (`chunk_byte_size`), the rest Orbax's defaults
    bench_orbax.py read DIR REPS     # tensorstore's read of that 256 MiB array (the array
                                     # opened as Orbax's restore opens it: zarr over OCDBT),
                                     # median seconds of REPS, timed inside the process after
                                     # the imports; prints `tensorstore_s=...`

The written arrays hold random float32 values (zstd keeps them near their size: the bytes read
are the bytes served).
"""

import os
import statistics
import sys
import time

BIG = "big"


def write(d, mib):
    import jax
    import numpy as np
    import orbax.checkpoint as ocp

    jax.config.update("jax_platforms", "cpu")
    rng = np.random.default_rng(28)
    big_elems = (256 << 20) // 4
    rest = (mib << 20) - (256 << 20)
    n = 299
    each = max(256, rest // 4 // n // 256 * 256)
    tree = {BIG: rng.standard_normal(big_elems, dtype=np.float32).reshape(-1, 1024)}
    for i in range(n):
        tree[f"layer_{i:03d}"] = {"kernel": rng.standard_normal(each, dtype=np.float32).reshape(-1, 256)}
    args = jax.tree.map(lambda _: ocp.SaveArgs(), tree)
    args[BIG] = ocp.SaveArgs(chunk_byte_size=4 << 20)
    path = os.path.join(os.path.abspath(d), "ckpt")
    ckptr = ocp.StandardCheckpointer()
    ckptr.save(path, tree, save_args=args, force=True)
    ckptr.wait_until_finished()
    total = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(path) for f in fs)
    print(f"wrote {path}: {len(tree)} arrays, {total / 2**20:.0f} MiB on disk")


def read(d, reps):
    import tensorstore as ts

    path = os.path.join(os.path.abspath(d), "ckpt")
    spec = {
        "driver": "zarr",
        "kvstore": {"driver": "ocdbt", "base": f"file://{path}/"},
        "path": f"{BIG}/",
    }
    times = []
    for _ in range(reps):
        # A fresh context each time: no cache of the previous read.
        t0 = time.perf_counter()
        a = ts.open(spec, context=ts.Context()).result()
        v = a.read().result()
        times.append(time.perf_counter() - t0)
        assert v.nbytes == 256 << 20, v.nbytes
    print(f"tensorstore_s={statistics.median(times):.4f}")


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "write":
        write(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 1024)
    elif len(sys.argv) == 4 and sys.argv[1] == "read":
        read(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
