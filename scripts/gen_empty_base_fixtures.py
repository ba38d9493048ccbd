#!/usr/bin/env python3
"""Generate tfmount's fixtures of checkpoints whose prefix has an EMPTY BASE NAME, with REAL TensorFlow.

A checkpoint written to the prefix ``dir/`` (``tf.train.Checkpoint.write("dir/")``, or Keras 2's
``model.save_weights("dir/")`` and so ``ModelCheckpoint("dir/", save_weights_only=True)``) is the files
``dir/.index`` and ``dir/.data-00000-of-00001``; the state file Keras writes beside them says
``model_checkpoint_path: "."``.

How to run
----------
Same virtualenv as ``scripts/gen_fixtures.py``, and AFTER it (that script rewrites ``manifest.json``
and keeps ``empty_base/``)::

    ~/tfvenv/bin/python scripts/gen_empty_base_fixtures.py tests/fixtures

``tests/fixtures/empty_base/`` is deleted and regenerated, and the manifest entries named ``empty_base*``
are replaced. Everything is seeded.

What is written
---------------
* ``empty_base/keras/``  a small Keras model's weights, saved as Keras 2's ``save_weights("keras/")`` does
  (``tf_keras/src/engine/training.py``): ``tf.train.Checkpoint(root=model).write("keras/")``, then
  ``update_checkpoint_state_internal(save_dir="keras", model_checkpoint_path="keras/",
  save_relative_paths=True, all_model_checkpoint_paths=["keras/"])``. State file: ``"."``.
* ``empty_base/abs/``    a ``tf.Module`` (float32, int64 and string variables) written to the ABSOLUTE prefix
  ``<out>/empty_base/abs/`` with an absolute state file, then rewritten with a STALE absolute path
  (``/nonexistent/moved/abs/``: the directory was moved), as ``tf1_adam`` does.
* ``empty_base/expected.<name>.json``  TensorFlow's view of each checkpoint, as ``expected/*.json``
  (``gen_fixtures.tf_view``), read through ``CheckpointReader("dir/")``: ``tf.train.load_checkpoint("dir/")``
  cannot read these (with the state file it opens ``tf.train.latest_checkpoint(dir)``, which is ``dir/.``;
  without it the directory has no checkpoint): recorded in the notes.
"""

import contextlib
import json
import os
import shutil
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.python.checkpoint import checkpoint_management  # noqa: E402
from tensorflow.python.training import py_checkpoint_reader  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_fixtures  # noqa: E402
from gen_fixtures import SEED, err_text, write_json  # noqa: E402

NAME = "empty_base"


@contextlib.contextmanager
def reader_of_prefix():
    """tf_view reads through tf.train.load_checkpoint / list_variables, which refuse a prefix that is a
    directory: read through the CheckpointReader they wrap instead (the same C++ reader, given the prefix)."""
    load, listv = tf.train.load_checkpoint, tf.train.list_variables
    tf.train.load_checkpoint = py_checkpoint_reader.NewCheckpointReader

    def list_variables(prefix):
        return sorted(py_checkpoint_reader.NewCheckpointReader(prefix).get_variable_to_shape_map().items())

    tf.train.list_variables = list_variables
    try:
        yield
    finally:
        tf.train.load_checkpoint, tf.train.list_variables = load, listv


def tf_notes(d):
    """What TensorFlow's own entry points make of directory d."""
    notes = []
    top = os.path.dirname(os.path.dirname(d))
    try:
        latest = tf.train.latest_checkpoint(d)
    except Exception as e:
        latest = "error: " + err_text(e)
    notes.append("tf.train.latest_checkpoint(dir) returns %r" % (
        latest.replace(top, "<fixtures>") if isinstance(latest, str) else latest,))
    for arg in (d, d + "/"):
        try:
            n = len(tf.train.load_checkpoint(arg).get_variable_to_shape_map())
            notes.append("tf.train.load_checkpoint(%r) reads %d tensors" % (os.path.basename(d) + arg[len(d):], n))
        except Exception as e:
            notes.append("tf.train.load_checkpoint(%r) fails: %s" % (
                os.path.basename(d) + arg[len(d):], err_text(e).replace(top, "<fixtures>")))
    n = len(py_checkpoint_reader.NewCheckpointReader(d + "/").get_variable_to_shape_map())
    notes.append("CheckpointReader(\"dir/\") (what load_checkpoint wraps) reads all %d entries" % n)
    return notes


def gen_keras(out):
    import keras

    d = os.path.join(out, NAME, "keras")
    os.makedirs(d)
    keras.utils.set_random_seed(SEED)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="dense")], name="tiny")
    prefix = d + "/"
    tf.train.Checkpoint(root=model).write(prefix)
    checkpoint_management.update_checkpoint_state_internal(
        save_dir=os.path.dirname(prefix), model_checkpoint_path=prefix, save_relative_paths=True,
        all_model_checkpoint_paths=[prefix])
    files = sorted(os.listdir(d))
    assert files == [".data-00000-of-00001", ".index", "checkpoint"], files
    with open(os.path.join(d, "checkpoint")) as f:
        state = f.read()
    assert state == 'model_checkpoint_path: "."\nall_model_checkpoint_paths: "."\n', state
    notes = ["Keras %s model saved as tf_keras' save_weights(\"keras/\") does; state file as TF wrote it: %r"
             % (keras.__version__, state)] + tf_notes(d)
    rel = NAME + "/expected.keras.json"
    with reader_of_prefix():
        write_json(os.path.join(out, rel), gen_fixtures.tf_view(out, NAME + "/keras/", extra_notes=notes))
    return [{"name": "empty_base_keras_dir", "source": NAME + "/keras", "kind": "ckpt_dir",
             "views": {"ckpt/variables": rel}, "symlinks": {"latest": "ckpt"}, "absent": [],
             "checkpoints": ["ckpt"]},
            {"name": "empty_base_keras_index", "source": NAME + "/keras/.index", "kind": "prefix",
             "views": {"variables": rel}}]


def gen_abs(out):
    d = os.path.join(out, NAME, "abs")
    os.makedirs(d)
    rng = np.random.default_rng(SEED + 40)

    class Net(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(rng.normal(size=(2, 3)).astype(np.float32), name="w")
            self.step = tf.Variable(np.int64(41), name="step")
            self.label = tf.Variable([b"empty", b"base name"], name="label")

    prefix = os.path.abspath(d) + "/"
    tf.train.Checkpoint(net=Net()).write(prefix)
    checkpoint_management.update_checkpoint_state_internal(
        save_dir=os.path.abspath(d), model_checkpoint_path=prefix, save_relative_paths=False,
        all_model_checkpoint_paths=[prefix])
    with open(os.path.join(d, "checkpoint")) as f:
        tf_state = f.read()
    assert tf_state == 'model_checkpoint_path: "%s"\nall_model_checkpoint_paths: "%s"\n' % (prefix, prefix), tf_state
    notes = ["TF wrote the state file with absolute paths (%r); rewritten as stale (the directory was moved)"
             % tf_state.replace(os.path.abspath(out), "<fixtures>")]
    with open(os.path.join(d, "checkpoint"), "w") as f:
        f.write('model_checkpoint_path: "/nonexistent/moved/abs/"\n'
                'all_model_checkpoint_paths: "/nonexistent/moved/abs/"\n')
    notes += tf_notes(d)
    rel = NAME + "/expected.abs.json"
    with reader_of_prefix():
        write_json(os.path.join(out, rel), gen_fixtures.tf_view(out, NAME + "/abs/", extra_notes=notes))
    return [{"name": "empty_base_abs_dir", "source": NAME + "/abs", "kind": "ckpt_dir",
             "views": {"ckpt/variables": rel}, "symlinks": {"latest": "ckpt"}, "absent": [],
             "checkpoints": ["ckpt"]}]


def main(argv):
    if len(argv) != 2:
        print(__doc__)
        print("usage: gen_empty_base_fixtures.py FIXTURES_DIR")
        return 2
    out = os.path.abspath(argv[1])
    shutil.rmtree(os.path.join(out, NAME), ignore_errors=True)
    tf.random.set_seed(SEED)
    entries = gen_keras(out) + gen_abs(out)
    mpath = os.path.join(out, "manifest.json")
    with open(mpath) as f:
        manifest = [e for e in json.load(f) if not e["name"].startswith(NAME)]
    write_json(mpath, manifest + entries)
    print("done: %s" % ", ".join(e["name"] for e in entries))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
