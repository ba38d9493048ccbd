#!/usr/bin/env python3
"""Write a TF Hub TF1 module (``tfhub_module.pb`` + ``saved_model.pb`` + ``variables/`` + ``assets/``) with
the REAL writer, ``tensorflow_hub``'s ``create_module_spec(...)`` and ``Module.export``, and TensorFlow's
record of it, into ``tests/fixtures/graphs``.

How to run
----------
The TF1 module writer needs an older stack than the other scripts: ``tensorflow_hub`` 0.16 dropped
``create_module_spec`` and 0.15 needs ``tf.compat.v1.estimator``, which TensorFlow 2.16 removed. So, in a
virtualenv OUTSIDE the repository, with Python 3.11::

    python3.11 -m venv ~/hubvenv
    ~/hubvenv/bin/pip install tensorflow-cpu==2.15.1 tensorflow-hub==0.15.0
    ~/hubvenv/bin/python scripts/gen_tfhub_module.py tests/fixtures/graphs

It (re)writes ``tfhub_tf1_module/``, ``expected/tfhub_tf1_module.json`` (same schema as
``gen_graph_fixtures.py``: every meta graph, node, constant and signature as TensorFlow parses them, and
``saved_model_cli``'s output), ``expected/tfhub_tf1_module.variables.json`` (the checkpoint as TensorFlow
reads it) and ``expected/tfhub_tf1_module.module.json`` (what ``hub.Module`` computes with the module, and
the bytes of ``tfhub_module.pb``), and puts its entry in ``manifest.json``. ``gen_graph_fixtures.py`` keeps
all of these when it regenerates the rest.

What the module is
------------------
A text-embedding module shaped like the TF Hub modules of 2018-2020 (nnlm, universal-sentence-encoder
lite): a vocabulary file as an asset, a lookup table, an embedding matrix, a dense layer; two graph
variants: tags ``{}`` (the default, ``untagged``) and ``{"train"}`` (dropout on); signatures ``default``
(strings in, embeddings out) and ``dense`` (floats in). Seeded: a re-run gives the same variables.
"""

import json
import os
import shutil
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_hub as hub  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_graph_fixtures as g  # noqa: E402
from gen_fixtures import write_json, tf_view  # noqa: E402

NAME = "tfhub_tf1_module"
SEED = 20240611 + 300
WORDS = ["<unk>", "cat", "dog", "model", "tensor", "mount"]


def module_fn(is_training):
    vocab = tf.compat.v1.constant("vocab.txt", name="vocab_path")
    tf.compat.v1.add_to_collection(tf.compat.v1.GraphKeys.ASSET_FILEPATHS, vocab)
    table = tf.compat.v1.lookup.StaticHashTable(
        tf.compat.v1.lookup.TextFileInitializer(
            vocab, tf.string, tf.compat.v1.lookup.TextFileIndex.WHOLE_LINE, tf.int64,
            tf.compat.v1.lookup.TextFileIndex.LINE_NUMBER), default_value=0)
    words = tf.compat.v1.placeholder(tf.string, [None], name="words")
    init = tf.compat.v1.random_normal_initializer(seed=SEED)
    emb = tf.compat.v1.get_variable("embeddings", [len(WORDS), 4], initializer=init)
    with tf.compat.v1.variable_scope("dense"):
        kernel = tf.compat.v1.get_variable("kernel", [4, 3], initializer=tf.compat.v1.glorot_uniform_initializer(
            seed=SEED + 1))
        bias = tf.compat.v1.get_variable("bias", [3], initializer=tf.compat.v1.constant_initializer(0.5))
    step = tf.compat.v1.get_variable("global_step", [], dtype=tf.int64,
                                     initializer=tf.compat.v1.constant_initializer(7), trainable=False)
    x = tf.nn.embedding_lookup(emb, table.lookup(words))
    if is_training:
        x = tf.nn.dropout(x, rate=0.5, seed=SEED)
    y = tf.matmul(x, kernel) + bias
    hub.add_signature(inputs={"text": words}, outputs={"default": y, "embedding": x})
    feats = tf.compat.v1.placeholder(tf.float32, [None, 4], name="features")
    hub.add_signature("dense", inputs=feats, outputs=tf.matmul(feats, kernel) + bias)
    del step


def export(out):
    d = os.path.join(out, NAME)
    if os.path.exists(d):
        shutil.rmtree(d)
    tmp = tempfile.mkdtemp(prefix="tfmount_hub_")
    cwd = os.getcwd()
    try:
        os.chdir(tmp)
        with open("vocab.txt", "w") as f:
            f.write("\n".join(WORDS) + "\n")
        spec = hub.create_module_spec(module_fn, tags_and_args=[(set(), {"is_training": False}),
                                                                ({"train"}, {"is_training": True})])
        with tf.Graph().as_default():
            tf.compat.v1.set_random_seed(SEED)
            m = hub.Module(spec)
            with tf.compat.v1.Session() as sess:
                sess.run(tf.compat.v1.global_variables_initializer())
                sess.run(tf.compat.v1.tables_initializer())
                m.export(d, sess)
    finally:
        os.chdir(cwd)
        shutil.rmtree(tmp)
    # What hub.Module computes with the exported module, read back by TF Hub's own loader.
    with tf.Graph().as_default():
        m = hub.Module(d)
        text = ["cat", "mount", "nope"]
        y = m(text)
        z = m(np.ones([1, 4], np.float32), signature="dense")
        with tf.compat.v1.Session() as sess:
            sess.run([tf.compat.v1.global_variables_initializer(), tf.compat.v1.tables_initializer()])
            yv, zv = sess.run([y, z])
        sigs = sorted(m.get_signature_names())
    return d, {"text": text, "default": yv.tolist(), "dense_of_ones": zv.tolist(), "signatures": sigs}


def main(argv):
    if len(argv) != 2:
        print(__doc__)
        return 2
    out = os.path.abspath(argv[1])
    os.makedirs(os.path.join(out, "expected"), exist_ok=True)
    d, outputs = export(out)
    files = sorted(os.path.relpath(os.path.join(dp, f), d) for dp, _, fs in os.walk(d) for f in fs)
    assert "tfhub_module.pb" in files and "saved_model.pb" in files, files
    exp, sm = g.saved_model_expected(out, NAME, [], [
        "a TF1 Hub module written by tensorflow_hub %s create_module_spec(...) + Module.export with TensorFlow "
        "%s (scripts/gen_tfhub_module.py)" % (hub.__version__, tf.__version__)])
    write_json(os.path.join(out, "expected", NAME + ".json"), exp)
    write_json(os.path.join(out, "expected", NAME + ".variables.json"), tf_view(out, NAME + "/variables/variables"))
    with open(os.path.join(d, "tfhub_module.pb"), "rb") as f:
        outputs["tfhub_module_pb"] = f.read().hex()
    outputs["files"] = files
    outputs["tags"] = [sorted(mg.meta_info_def.tags) for mg in sm.meta_graphs]
    outputs["tf_version"], outputs["hub_version"] = tf.__version__, hub.__version__
    write_json(os.path.join(out, "expected", NAME + ".module.json"), outputs)
    mpath = os.path.join(out, "manifest.json")
    manifest = json.load(open(mpath)) if os.path.exists(mpath) else []
    manifest = [e for e in manifest if e.get("name") != NAME]
    manifest.append({"name": NAME, "source": NAME, "kind": "saved_model", "expected": "expected/%s.json" % NAME,
                     "variables": "expected/%s.variables.json" % NAME})
    write_json(mpath, manifest)
    print("wrote", d, files)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
