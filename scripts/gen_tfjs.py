#!/usr/bin/env python3
"""Generate tfmount's TensorFlow.js fixtures (tests/fixtures/tfjs/) with the REAL converter (``tensorflowjs``).

How to run
----------
``tensorflowjs`` 4.22 lists jax, flax and tensorflow-decision-forests as requirements; none is needed to convert
Keras models and SavedModels, and TF-DF has no build for TensorFlow 2.21. So it goes in a venv of its own, OUTSIDE
the repo, on top of the fixture venv's TensorFlow (``scripts/requirements-fixtures.txt``)::

    python3 -m venv /work/tfjsvenv
    echo /work/tfvenv/lib/python3.11/site-packages > /work/tfjsvenv/lib/python3.11/site-packages/tfvenv.pth
    /work/tfjsvenv/bin/pip install --no-deps tensorflowjs==4.22.0 tf-keras==2.21.0 tensorflow-hub==0.16.1 \
        importlib_resources six packaging
    # tensorflowjs imports TF-DF only to register its ops: an empty module stands in for it.
    mkdir /work/tfjsvenv/lib/python3.11/site-packages/tensorflow_decision_forests
    touch /work/tfjsvenv/lib/python3.11/site-packages/tensorflow_decision_forests/__init__.py
    /work/tfjsvenv/bin/python scripts/gen_tfjs.py tests/fixtures/tfjs

The output directory, but for its ``README.md``, is deleted and rewritten. Weights are seeded: values are the same
on a re-run.

What is written (directory names are part of the test contract)
-----------------------------------------------------------------
Layers models (``tensorflowjs.converters.save_keras_model`` of a ``tf_keras`` Sequential model: Dense 4->8 relu,
Dense 8->3; weights ``dense/kernel``, ``dense/bias``, ``dense_1/kernel``, ``dense_1/bias``):

* ``layers/``          float32, one shard.
* ``layers_uint8/``    ``quantization_dtype_map={'uint8': True}``: every float32 weight stored as uint8 with scale/min.
* ``layers_uint16/``   the same with uint16.
* ``layers_float16/``  the same with float16.
* ``layers_sharded/``  float32 cut into 48-byte shards (``weight_shard_size_bytes=48``): ``dense/kernel``
  (128 bytes) spans three shards.

Graph models (``convert_tf_saved_model`` of a SavedModel of a ``tf.Module``: matmul + bias, a gather by an int32
index vector, a string label constant returned as a second output):

* ``graph/``           float32, int32 and string weights.
* ``graph_uint8/``     ``quantization_dtype_map={'uint8': True}`` (only float32 weights are quantized), cut into
  64-byte shards so that the quantized kernel crosses a shard boundary.

Expected values: ``<fixture>/expected.npz`` holds every numeric weight as the converter's own reader gives it
(``tensorflowjs.read_weights.read_weights``: numpy, ``q * scale + min`` in float64 then float32, float16 widened);
string weights go in ``<fixture>/expected_strings.json`` (``{name: [utf-8 strings]}``). ``tensors.json`` beside them
lists each weight's manifest entry (name, dtype, shape, quantization) for the tests.
"""

import json
import os
import shutil
import sys
import tempfile
import types

# tensorflowjs.converters imports its JAX converter eagerly; it is not used here and JAX is not installed.
_jax = types.ModuleType("tensorflowjs.converters.jax_conversion")
_jax.convert_jax = None
sys.modules["tensorflowjs.converters.jax_conversion"] = _jax

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402
from tensorflowjs import read_weights  # noqa: E402
from tensorflowjs.converters import keras_h5_conversion  # noqa: E402
from tensorflowjs.converters import tf_saved_model_conversion_v2 as sm  # noqa: E402


def layers_model():
    tf_keras.utils.set_random_seed(7)
    m = tf_keras.Sequential(
        [
            tf_keras.Input(shape=(4,)),
            tf_keras.layers.Dense(8, activation="relu", name="dense"),
            tf_keras.layers.Dense(3, name="dense_1"),
        ]
    )
    rng = np.random.default_rng(11)
    # Biases not zero, values spread over a range that quantizes unevenly.
    m.set_weights([rng.normal(size=w.shape).astype(np.float32) for w in m.get_weights()])
    return m


class Graph(tf.Module):
    def __init__(self):
        super().__init__()
        rng = np.random.default_rng(5)
        self.w = tf.Variable(rng.normal(size=(4, 6)).astype(np.float32), name="w")
        self.b = tf.Variable(rng.normal(size=(6,)).astype(np.float32), name="b")
        self.order = tf.Variable(np.array([5, 0, 3, 1], np.int32), name="order")
        self.labels = tf.constant(["cat", "dög", "", "a longer label"])

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def __call__(self, x):
        y = tf.matmul(x, self.w) + self.b
        y = tf.gather(y, self.order, axis=1)
        return {"scores": y, "labels": tf.identity(self.labels)}


def expected(out):
    with open(os.path.join(out, "model.json")) as f:
        manifest = json.load(f)["weightsManifest"]
    groups = read_weights.read_weights(manifest, out)
    nums, strs = {}, {}
    for group in groups:
        for e in group:
            v = e["data"]
            if v.dtype == object:
                strs[e["name"]] = [
                    x.decode("utf-8") if isinstance(x, bytes) else str(x) for x in v.flatten().tolist()
                ]
            else:
                nums[e["name"]] = v
    np.savez(os.path.join(out, "expected.npz"), **nums)
    if strs:
        with open(os.path.join(out, "expected_strings.json"), "w") as f:
            json.dump(strs, f, indent=1, ensure_ascii=False)
            f.write("\n")
    entries = [w for g in manifest for w in g["weights"]]
    with open(os.path.join(out, "tensors.json"), "w") as f:
        json.dump(entries, f, indent=1)
        f.write("\n")


def main(out_root):
    os.makedirs(out_root, exist_ok=True)
    for name in os.listdir(out_root):
        if name != "README.md":
            p = os.path.join(out_root, name)
            shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)

    m = layers_model()
    for name, qmap, shard in [
        ("layers", None, 4 << 20),
        ("layers_uint8", {"uint8": True}, 4 << 20),
        ("layers_uint16", {"uint16": True}, 4 << 20),
        ("layers_float16", {"float16": True}, 4 << 20),
        ("layers_sharded", None, 48),
    ]:
        out = os.path.join(out_root, name)
        keras_h5_conversion.save_keras_model(
            m, out, quantization_dtype_map=qmap, weight_shard_size_bytes=shard
        )
        expected(out)

    with tempfile.TemporaryDirectory() as tmp:
        g = Graph()
        sm_dir = os.path.join(tmp, "sm")
        tf.saved_model.save(g, sm_dir, signatures=g.__call__.get_concrete_function())
        for name, qmap, shard in [
            ("graph", None, 4 << 20),
            ("graph_uint8", {"uint8": True}, 64),
        ]:
            out = os.path.join(out_root, name)
            sm.convert_tf_saved_model(
                sm_dir,
                out,
                quantization_dtype_map=qmap,
                weight_shard_size_bytes=shard,
                skip_op_check=True,
            )
            expected(out)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
