#!/usr/bin/env python3
"""Bare TensorFlow.js weights manifests (tests/fixtures/tfjs/manifest/, tests/fixtures/tfjs/manifests/),
written by the converter's own writer, ``tensorflowjs.write_weights.write_weights`` (what
``tensorflowjs_converter`` calls), with its own reader's values as the expected ones
(``tensorflowjs.read_weights.read_weights``: ``expected_<manifest>.npz``).

How to run
----------
``write_weights``, ``read_weights`` and ``quantization`` need only numpy and TensorFlow; the
package's ``__init__`` imports every converter (jax, flax, TF-DF). So the three modules are
imported from a package directory of their own, OUTSIDE the repo, unchanged::

    python3 -m venv /tmp/tfjsvenv && /tmp/tfjsvenv/bin/pip install --no-deps tensorflowjs==4.22.0
    mkdir -p /tmp/tfjs_min/tensorflowjs && touch /tmp/tfjs_min/tensorflowjs/__init__.py
    cp /tmp/tfjsvenv/lib/python3.11/site-packages/tensorflowjs/{write_weights,read_weights,quantization}.py \\
        /tmp/tfjs_min/tensorflowjs/
    PYTHONPATH=/tmp/tfjs_min ~/.cache/tfmount-test-venv/bin/python scripts/gen_tfjs_manifests.py tests/fixtures/tfjs

What is written
---------------
* ``manifest/``: ``weights_manifest.json`` as ``write_weights`` names it, two groups (float32
  ``dense/kernel`` 4x8 and ``dense/bias``; int32 ``embedding/ids``), cut into 64-byte shards
  (``group1-shard1of3.bin``, ...): the kernel spans shards.
* ``manifests/``: face-api.js's layout (its ``weights/`` directory: ``<model>-weights_manifest.json``
  beside ``<model>-shard1``, ...; the converter's files renamed and the manifest's ``paths``
  rewritten to match, as face-api.js's authors did): ``tiny`` (float32, uint8-quantized) and
  ``landmarks`` (float32 in two shards).

Values are seeded: a re-run writes the same bytes.
"""

import json
import os
import shutil
import sys
import tempfile

import numpy as np
from tensorflowjs import read_weights, write_weights


def write(groups, out, shard, quant=None):
    os.makedirs(out, exist_ok=True)
    write_weights.write_weights(
        groups, out, shard_size_bytes=shard, write_manifest=True, quantization_dtype_map=quant
    )
    with open(os.path.join(out, "weights_manifest.json")) as f:
        return json.load(f)


def expected(manifest, base, npz):
    groups = read_weights.read_weights(manifest, base)
    nums = {e["name"]: e["data"] for g in groups for e in g}
    np.savez(npz, **nums)


def face_api(name, groups, out, shard, quant=None):
    """write_weights into a scratch directory, then face-api.js's names in `out`."""
    with tempfile.TemporaryDirectory() as tmp:
        manifest = write(groups, tmp, shard, quant)
        for g in manifest:
            renamed = []
            for i, p in enumerate(g["paths"]):
                new = f"{name}-shard{i + 1}"
                shutil.copy(os.path.join(tmp, p), os.path.join(out, new))
                renamed.append(new)
            g["paths"] = renamed
    with open(os.path.join(out, f"{name}-weights_manifest.json"), "w") as f:
        json.dump(manifest, f)
    expected(manifest, out, os.path.join(out, f"expected_{name}.npz"))


def main():
    root = sys.argv[1]
    rng = np.random.default_rng(2028)
    one = os.path.join(root, "manifest")
    shutil.rmtree(one, ignore_errors=True)
    groups = [
        [
            {"name": "dense/kernel", "data": rng.standard_normal((4, 8)).astype("float32")},
            {"name": "dense/bias", "data": rng.standard_normal(8).astype("float32")},
        ],
        [{"name": "embedding/ids", "data": np.array([3, 1, 4, 1, 5], "int32")}],
    ]
    manifest = write(groups, one, 64)
    expected(manifest, one, os.path.join(one, "expected.npz"))

    many = os.path.join(root, "manifests")
    shutil.rmtree(many, ignore_errors=True)
    os.makedirs(many)
    face_api(
        "tiny",
        [[
            {"name": "conv0/filters", "data": rng.standard_normal((3, 3, 3, 4)).astype("float32")},
            {"name": "conv0/bias", "data": rng.standard_normal(4).astype("float32")},
        ]],
        many,
        4 << 20,
        {"uint8": True},
    )
    face_api(
        "landmarks",
        [[
            {"name": "fc/weights", "data": rng.standard_normal((16, 6)).astype("float32")},
            {"name": "fc/bias", "data": rng.standard_normal(6).astype("float32")},
        ]],
        many,
        256,
    )
    print(f"wrote {one} and {many}")


if __name__ == "__main__":
    main()
