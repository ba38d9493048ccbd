#!/usr/bin/env python3
"""Generate tfmount's fixture of a TF SERVING BASE DIRECTORY, with REAL TensorFlow.

TensorFlow Serving is given a base directory (``--model_base_path=export``) holding numbered
SavedModel versions ``export/1``, ``export/2``, ...: every child whose name is a non-negative
integer is a version, and the highest number is the one served (``latest`` policy; the number,
not the name: ``10`` after ``9``). tfmount mounts such a directory as one directory per version and
``latest`` -> the highest (docs/serving.md).

How to run
----------
Same virtualenv as ``scripts/gen_fixtures.py`` (any TensorFlow 2)::

    ~/tfvenv/bin/python scripts/gen_serving_fixtures.py tests/fixtures

``tests/fixtures/serving/`` is deleted and regenerated. Everything is seeded; ``fingerprint.pb``'s
random uuid is pinned (as ``gen_fixtures.gen_demo_savedmodel`` does).

What is written
---------------
* ``serving/export/{1,2,10}/``  ``tf.saved_model.save`` of a tiny ``tf.Module`` (variables ``w``
  float32 [2, 3], ``b`` float32 [3], ``version`` int64; one ``serving_default`` signature computing
  ``x @ w + b``), each version with its own values. ``10`` is there so that numeric order (10 > 2)
  differs from lexical order ("2" > "10").
* ``serving/export/11/``  a version still being written: the ``variables/`` of a fourth model, no
  ``saved_model.pb`` yet (TF writes the variables first and ``saved_model.pb`` last). Not a version
  until ``saved_model.pb`` is there.
* ``serving/export/tmp-1700000000/``  a complete SavedModel under a name that is not a number (an
  exporter's temporary directory): ignored, as TF Serving ignores it.
* ``serving/export/README.txt``  a file: ignored.
* ``serving/expected.json``  TensorFlow's view of each version: ``tf.train.load_checkpoint`` of
  ``export/N/variables/variables`` (key, dtype, shape, sha256 and length of the row-major bytes) and
  the values ``tf.saved_model.load`` gives for ``w``, ``b``, ``version`` and ``serving_default`` of
  a fixed input; ``latest`` (the highest version) and the versions in numeric order.
"""

import hashlib
import json
import os
import shutil
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

SEED = 20261129
NAME = "serving"
VERSIONS = [1, 2, 10]
INPUT = [[1.0, 2.0], [-1.0, 0.5]]


def sha(b):
    return hashlib.sha256(b).hexdigest()


def write_json(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, ensure_ascii=False)
        f.write("\n")


class Tiny(tf.Module):
    def __init__(self, version, rng):
        super().__init__(name="tiny")
        self.w = tf.Variable(rng.normal(size=(2, 3)).astype(np.float32), name="w")
        self.b = tf.Variable(np.full([3], version / 4, np.float32), name="b")
        self.version = tf.Variable(np.int64(version), name="version")

    @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32)])
    def __call__(self, x):
        return {"y": tf.matmul(x, self.w) + self.b}


def save(d, version):
    rng = np.random.default_rng(SEED + version)
    m = Tiny(version, rng)
    tf.saved_model.save(m, d, signatures=m.__call__)
    fp_path = os.path.join(d, "fingerprint.pb")
    if os.path.exists(fp_path):
        from tensorflow.core.protobuf import fingerprint_pb2

        fp = fingerprint_pb2.FingerprintDef.FromString(open(fp_path, "rb").read())
        if fp.uuid:
            fp.uuid = str(int.from_bytes(hashlib.sha256(b"tfmount-serving-%d-%d" % (SEED, version)).digest()[:16], "big"))
            with open(fp_path, "wb") as f:
                f.write(fp.SerializeToString(deterministic=True))


def tf_view(d):
    """TensorFlow's reading of SavedModel directory d: its checkpoint and the loaded model."""
    prefix = os.path.join(d, "variables", "variables")
    reader = tf.train.load_checkpoint(prefix)
    tensors = []
    for key, shape in sorted(reader.get_variable_to_shape_map().items()):
        if key == "_CHECKPOINTABLE_OBJECT_GRAPH":
            continue
        v = np.asarray(reader.get_tensor(key))
        tensors.append({"key": key, "dtype": v.dtype.name, "shape": list(shape),
                        "sha256": sha(np.ascontiguousarray(v).tobytes()), "nbytes": v.nbytes})
    loaded = tf.saved_model.load(d)
    y = loaded.signatures["serving_default"](x=tf.constant(INPUT, tf.float32))["y"].numpy()
    return {"tensors": tensors,
            "values": {"w": loaded.w.numpy().tolist(), "b": loaded.b.numpy().tolist(),
                       "version": int(loaded.version.numpy())},
            "serving_default": {"x": INPUT, "y": y.tolist()}}


def main(argv):
    if len(argv) != 2:
        print(__doc__)
        print("usage: gen_serving_fixtures.py FIXTURES_DIR")
        return 2
    out = os.path.join(os.path.abspath(argv[1]), NAME)
    shutil.rmtree(out, ignore_errors=True)
    export = os.path.join(out, "export")
    tf.random.set_seed(SEED)
    for v in VERSIONS:
        save(os.path.join(export, str(v)), v)
    # A version still being written: TF has written variables/ (and assets/) but not yet
    # saved_model.pb, which tf.saved_model.save writes after them.
    tmp = os.path.join(out, "tmp11")
    save(tmp, 11)
    os.makedirs(os.path.join(export, "11"))
    shutil.copytree(os.path.join(tmp, "variables"), os.path.join(export, "11", "variables"))
    shutil.rmtree(tmp)
    save(os.path.join(export, "tmp-1700000000"), 99)
    with open(os.path.join(export, "README.txt"), "w") as f:
        f.write("A TF Serving base directory: versions 1, 2 and 10; 11 is still being written.\n")
    versions = {str(v): tf_view(os.path.join(export, str(v))) for v in VERSIONS}
    latest = str(max(VERSIONS))
    notes = ["TensorFlow %s wrote every SavedModel with tf.saved_model.save" % tf.__version__,
             "11/ has variables/ but no saved_model.pb: not a version yet",
             "tmp-1700000000/ is a complete SavedModel whose name is not a number: not a version",
             "tf.saved_model.contains_saved_model(export) is %r" % tf.saved_model.contains_saved_model(export)]
    write_json(os.path.join(out, "expected.json"),
               {"versions": [str(v) for v in sorted(VERSIONS)], "latest": latest,
                "ignored": ["11", "tmp-1700000000", "README.txt"], "by_version": versions,
                "notes": notes})
    total = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(out) for f in fs)
    print("done: %s (%d bytes)" % (out, total))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
