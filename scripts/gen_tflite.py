#!/usr/bin/env python3
"""Generate tfmount's TensorFlow Lite fixtures (tests/fixtures/tflite/) with TensorFlow's own converter.

How to run
----------
With a Python that has TensorFlow 2.21 (``/work/tfvenv`` or the test virtualenv), outside the repository's
own venv::

    /work/tfvenv/bin/python scripts/gen_tflite.py tests/fixtures/tflite

Metadata (``with_metadata.tflite``) is written by tflite-support's metadata writer, which does not install
beside TensorFlow 2.21: it runs in a virtualenv of its own, named by ``TFLS_PYTHON``::

    apt-get install libusb-1.0-0    # tflite-support's metadata module loads it
    python3 -m venv /tmp/tfls && /tmp/tfls/bin/pip install tflite-support
    TFLS_PYTHON=/tmp/tfls/bin/python /work/tfvenv/bin/python scripts/gen_tflite.py tests/fixtures/tflite

Without ``TFLS_PYTHON`` an existing ``with_metadata.tflite`` is kept. Everything else in the output directory
but ``README.md`` is rewritten; weights are seeded.

``--big PATH [MB]`` instead writes one float model of about MB megabytes (default 100) for
``scripts/bench.sh``: one large FULLY_CONNECTED weight plus a few small ones.

What is written (file names are part of the test contract)
-------------------------------------------------------------
One ``tf.Module`` (``Net``: CONV_2D with bias, RELU, RESHAPE, FULLY_CONNECTED, a second FULLY_CONNECTED), saved
as a SavedModel with the signature ``serving_default`` and converted with ``tf.lite.TFLiteConverter``:

* ``float.tflite``        no optimization: float32 constants.
* ``float_offsets.tflite`` the same with ``_experimental_use_buffer_offset``: every buffer's bytes stored
  after the flatbuffer (``Buffer.offset``/``size``), as the converter does for models over 2 GB.
* ``dynamic_int8.tflite`` ``optimizations = [DEFAULT]``: weights with >= 1024 elements int8, per-channel
  or per-tensor scales, float activations.
* ``full_int8.tflite``    ``DEFAULT`` + a representative dataset + ``TFLITE_BUILTINS_INT8``, int8
  input/output: every tensor quantized (int32 biases, per-channel conv/FC weights).
* ``float16.tflite``      ``DEFAULT`` + ``supported_types = [float16]``: float16 weights behind DEQUANTIZE.
* ``multi.tflite``        a module with two signatures (``add``, ``scale``) and a ``tf.cond``: several
  subgraphs (one per signature, plus the branches), constants in each.
* ``sparse.tflite``       a 64x64 weight 90% zeros, ``optimizations = [EXPERIMENTAL_SPARSITY]``: a sparse
  constant (``Tensor.sparsity``, CSR); the interpreter's ``get_tensor`` gives its stored values, 1-D.
* ``with_metadata.tflite`` an image classifier (``Classifier``) with TFLite metadata (``TFLITE_METADATA``:
  normalization, a label file) and the associated file ``labels.txt`` zipped onto its end, by tflite-support's
  ``ImageClassifierWriter``.

Expected values are not committed: the tests ask TensorFlow (``tf.lite.Interpreter`` and
``tensorflow.lite.tools.flatbuffer_utils``) through ``TFMOUNT_PYTHON``.
"""

import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import tensorflow as tf

rng = np.random.default_rng(20)


def f32(*shape):
    return rng.normal(size=shape).astype(np.float32)


class Net(tf.Module):
    def __init__(self):
        super().__init__()
        self.conv_kernel = tf.Variable(f32(3, 3, 2, 4), name="conv/kernel")
        self.conv_bias = tf.Variable(f32(4), name="conv/bias")
        self.fc1_kernel = tf.Variable(f32(8 * 8 * 4, 16), name="fc1/kernel")
        self.fc1_bias = tf.Variable(f32(16), name="fc1/bias")
        self.fc2_kernel = tf.Variable(f32(16, 3), name="fc2/kernel")
        self.fc2_bias = tf.Variable(f32(3), name="fc2/bias")

    @tf.function(input_signature=[tf.TensorSpec([1, 8, 8, 2], tf.float32, name="image")])
    def __call__(self, x):
        y = tf.nn.conv2d(x, self.conv_kernel, 1, "SAME") + self.conv_bias
        y = tf.nn.relu(y)
        y = tf.reshape(y, [1, -1])
        y = tf.nn.relu(tf.matmul(y, self.fc1_kernel) + self.fc1_bias)
        return {"logits": tf.matmul(y, self.fc2_kernel) + self.fc2_bias}


class Multi(tf.Module):
    def __init__(self):
        super().__init__()
        self.w = tf.Variable(f32(4, 4), name="w")
        self.a = tf.Variable(f32(4), name="a")
        self.b = tf.Variable(f32(4), name="b")

    @tf.function(input_signature=[tf.TensorSpec([1, 4], tf.float32, name="x")])
    def add(self, x):
        return {"sum": tf.matmul(x, self.w) + self.a}

    @tf.function(input_signature=[tf.TensorSpec([1, 4], tf.float32, name="x")])
    def scale(self, x):
        y = tf.cond(tf.reduce_sum(x) > 0.0, lambda: tf.matmul(x, self.w) * self.a, lambda: x - self.b)
        return {"scaled": y}


class Sparse(tf.Module):
    def __init__(self):
        super().__init__()
        w = f32(64, 64)
        w[rng.uniform(size=w.shape) < 0.9] = 0
        self.w = tf.Variable(w, name="w")

    @tf.function(input_signature=[tf.TensorSpec([1, 64], tf.float32, name="x")])
    def __call__(self, x):
        return {"y": tf.matmul(x, self.w)}


class Classifier(tf.Module):
    def __init__(self):
        super().__init__()
        self.kernel = tf.Variable(f32(3, 3, 3, 4), name="conv/kernel")
        self.fc = tf.Variable(f32(8 * 8 * 4, 3), name="fc/kernel")

    @tf.function(input_signature=[tf.TensorSpec([1, 8, 8, 3], tf.float32, name="image")])
    def __call__(self, x):
        y = tf.nn.relu(tf.nn.conv2d(x, self.kernel, 1, "SAME"))
        return {"probability": tf.nn.softmax(tf.matmul(tf.reshape(y, [1, -1]), self.fc))}


class Big(tf.Module):
    def __init__(self, n):
        super().__init__()
        self.w = tf.Variable(f32(n, n), name="big/kernel")
        self.b = tf.Variable(f32(n), name="big/bias")
        self.w2 = tf.Variable(f32(n, 8), name="head/kernel")

    def call(self, x):
        return {"y": tf.matmul(tf.nn.relu(tf.matmul(x, self.w) + self.b), self.w2)}


def saved(module, tmp, name, signatures):
    d = os.path.join(tmp, name)
    tf.saved_model.save(module, d, signatures=signatures)
    return d


def convert(saved_dir, keys=None, **opts):
    c = tf.lite.TFLiteConverter.from_saved_model(saved_dir, signature_keys=keys)
    for k, v in opts.items():
        setattr(c, k, v)
    return c.convert()


def write(out, name, data):
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)
    print(f"{name}: {len(data)} bytes")


def representative():
    for _ in range(16):
        yield [rng.uniform(-1, 1, size=(1, 8, 8, 2)).astype(np.float32)]


def metadata(out, tmp, classifier_tflite):
    """with_metadata.tflite through tflite-support in its own interpreter (TFLS_PYTHON)."""
    py = os.environ.get("TFLS_PYTHON")
    if not py:
        print("TFLS_PYTHON not set: with_metadata.tflite kept as it is")
        return
    model = os.path.join(tmp, "classifier.tflite")
    with open(model, "wb") as f:
        f.write(classifier_tflite)
    labels = os.path.join(tmp, "labels.txt")
    with open(labels, "w") as f:
        f.write("cat\ndog\nbird\n")
    code = f"""
from tflite_support.metadata_writers import image_classifier, writer_utils
w = image_classifier.MetadataWriter.create_for_inference(
    writer_utils.load_file({model!r}), [127.5], [127.5], [{labels!r}])
writer_utils.save_file(w.populate(), {os.path.join(out, 'with_metadata.tflite')!r})
print(w.get_metadata_json())
"""
    subprocess.run([py, "-c", code], check=True)


def big(path, mb):
    n = int((mb * (1 << 20) / 4) ** 0.5)
    m = Big(n)
    fn = tf.function(m.call, input_signature=[tf.TensorSpec([1, n], tf.float32, name="x")])
    with tempfile.TemporaryDirectory() as tmp:
        d = saved(m, tmp, "big", {"serving_default": fn.get_concrete_function()})
        data = convert(d)
    with open(path, "wb") as f:
        f.write(data)
    print(f"{path}: {len(data)} bytes, largest weight {n}x{n} float32")


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "--big":
        big(sys.argv[2], float(sys.argv[3]) if len(sys.argv) > 3 else 100.0)
        return
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for n in os.listdir(out):
        if n not in ("README.md", "with_metadata.tflite"):
            p = os.path.join(out, n)
            shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)
    with tempfile.TemporaryDirectory() as tmp:
        net = Net()
        d = saved(net, tmp, "net", {"serving_default": net.__call__.get_concrete_function()})
        write(out, "float.tflite", convert(d))
        write(out, "float_offsets.tflite", convert(d, _experimental_use_buffer_offset=True))
        write(out, "dynamic_int8.tflite", convert(d, optimizations=[tf.lite.Optimize.DEFAULT]))
        ops = tf.lite.TargetSpec(supported_ops=[tf.lite.OpsSet.TFLITE_BUILTINS_INT8])
        write(
            out,
            "full_int8.tflite",
            convert(
                d,
                optimizations=[tf.lite.Optimize.DEFAULT],
                representative_dataset=representative,
                target_spec=ops,
                inference_input_type=tf.int8,
                inference_output_type=tf.int8,
            ),
        )
        f16 = tf.lite.TargetSpec(supported_types=[tf.float16])
        write(out, "float16.tflite", convert(d, optimizations=[tf.lite.Optimize.DEFAULT], target_spec=f16))

        multi = Multi()
        sigs = {
            "add": multi.add.get_concrete_function(),
            "scale": multi.scale.get_concrete_function(),
        }
        d = saved(multi, tmp, "multi", sigs)
        write(out, "multi.tflite", convert(d, keys=["add", "scale"]))

        sp = Sparse()
        d = saved(sp, tmp, "sparse", {"serving_default": sp.__call__.get_concrete_function()})
        write(out, "sparse.tflite", convert(d, optimizations=[tf.lite.Optimize.EXPERIMENTAL_SPARSITY]))

        cls = Classifier()
        d = saved(cls, tmp, "cls", {"serving_default": cls.__call__.get_concrete_function()})
        metadata(out, tmp, convert(d))


if __name__ == "__main__":
    main()
