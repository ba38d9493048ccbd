#!/usr/bin/env python3
"""TensorFlow's view of the TF2 fixtures' variable names, for ``names/`` and ``weights.safetensors``.

How to run (reads the existing fixtures, writes one JSON file; writes no checkpoint)::

    ~/.cache/tfmount-test-venv/bin/python scripts/gen_names_fixtures.py tests/fixtures

Writes ``graphs/expected/variable_names.json``: for each TF2 source (checkpoint prefix or SavedModel), read by
TensorFlow (``tf.train.load_checkpoint``, the object graph parsed by TensorFlow's own
``TrackableObjectGraph`` class):

* ``attributes``: every ``VARIABLE_VALUE`` attribute in node order: ``[node id, full_name, checkpoint_key]``;
* ``slot_keys``: the keys of optimizer slot variables (``TrackableObject.slot_variables``);
* ``sha256``: ``{key: sha256 of numpy's tobytes() of get_tensor(key)}`` for every non-string key, and
  ``dtype``/``shape`` of each;
* for ``tf2_keras/ckpt-1`` also ``model_weights``: ``{variable.path: checkpoint key}`` for every variable of
  the Keras model (``model.weights``), found by rebuilding the fixture's model and optimizer
  (``gen_fixtures.gen_tf2_keras``), restoring the checkpoint with ``tf.train.Checkpoint.read`` and asking the
  restore which object graph node each variable was restored from; the restored values must equal the
  checkpoint's.
"""

import hashlib
import json
import os
import sys

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import trackable_object_graph_pb2

SOURCES = [
    ("tf2_keras/ckpt-1", "tf2_keras/ckpt-1"),
    ("tf2_slots/ckpt-1", "tf2_slots/ckpt-1"),
    ("cli/run/ckpt-1", "cli/run/ckpt-1"),
    ("demo_savedmodel", "demo_savedmodel/variables/variables"),
    ("graphs/tf2_module", "graphs/tf2_module/variables/variables"),
]


def object_graph(reader):
    g = trackable_object_graph_pb2.TrackableObjectGraph()
    g.ParseFromString(reader.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
    return g


def view(fixtures, prefix):
    r = tf.train.load_checkpoint(os.path.join(fixtures, prefix))
    g = object_graph(r)
    attrs, slots = [], []
    for i, n in enumerate(g.nodes):
        for a in n.attributes:
            if a.name == "VARIABLE_VALUE":
                attrs.append([i, a.full_name, a.checkpoint_key])
    for n in g.nodes:
        for s in n.slot_variables:
            for a in g.nodes[s.slot_variable_node_id].attributes:
                if a.name == "VARIABLE_VALUE":
                    slots.append(a.checkpoint_key)
    sha, dtypes, shapes = {}, r.get_variable_to_dtype_map(), r.get_variable_to_shape_map()
    for k in sorted(dtypes):
        if dtypes[k] != tf.string:
            sha[k] = hashlib.sha256(np.ascontiguousarray(r.get_tensor(k)).tobytes()).hexdigest()
    return {
        "attributes": attrs,
        "slot_keys": slots,
        "sha256": sha,
        "dtype": {k: dtypes[k].name for k in sorted(dtypes)},
        "shape": {k: list(shapes[k]) for k in sorted(shapes)},
    }


def keras_model_weights(fixtures):
    """{variable.path: key} of tf2_keras's model, as TensorFlow's restore matches them."""
    import keras

    prefix = os.path.join(fixtures, "tf2_keras/ckpt-1")
    model = keras.Sequential([keras.Input((3,)),
                              keras.layers.Dense(4, activation="relu", name="hidden"),
                              keras.layers.Dense(2, name="logits")], name="seq")
    opt = keras.optimizers.Adam(learning_rate=0.01)
    opt.build(model.trainable_variables)
    ckpt = tf.train.Checkpoint(model=model, optimizer=opt)
    status = ckpt.read(prefix)
    status.assert_existing_objects_matched()
    r = tf.train.load_checkpoint(prefix)
    g = object_graph(r)
    by_id = status._checkpoint.object_by_proto_id  # node id -> restored object (TF's own matching)
    out = {}
    for v in model.weights:
        nodes = [i for i, o in by_id.items() if o is v or o is getattr(v, "value", None)]
        assert len(nodes) == 1, (v.path, nodes)
        (key,) = [a.checkpoint_key for a in g.nodes[nodes[0]].attributes if a.name == "VARIABLE_VALUE"]
        assert np.array_equal(np.asarray(v.numpy()), r.get_tensor(key)), v.path
        out[v.path] = key
    assert len(out) == len(model.weights) == 4, out
    return out


def main():
    fixtures = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures"
    out = {"tf_version": tf.__version__, "doc": __doc__.strip().split("\n\n")[-1], "sources": {}}
    for name, prefix in SOURCES:
        out["sources"][name] = view(fixtures, prefix)
    out["sources"]["tf2_keras/ckpt-1"]["model_weights"] = keras_model_weights(fixtures)
    path = os.path.join(fixtures, "graphs/expected/variable_names.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(path)


if __name__ == "__main__":
    main()
