#!/usr/bin/env python3
"""Record the real ``saved_model_cli show --all`` output of every graph fixture tfmount renders a
``signatures.txt`` for; ``tests/core/graphs.rs`` compares each meta graph's ``signatures.txt`` with it.

How to run
----------
In the TensorFlow virtualenv kept OUTSIDE the repository (``saved_model_cli`` must be installed
next to its python), from the repository root::

    python3 -m venv /work/tfvenv
    /work/tfvenv/bin/pip install tensorflow-cpu numpy safetensors ml_dtypes h5py
    /work/tfvenv/bin/python scripts/record_saved_model_cli.py

It only reads the fixtures (nothing is regenerated) and rewrites
``tests/fixtures/graphs/expected/saved_model_cli/``: one ``<name>.txt`` per fixture (the exact
stdout) and ``manifest.json`` (name, source relative to ``tests/fixtures``, kind, command, TF version).

What is recorded
----------------
* SavedModel directories: ``saved_model_cli show --all --dir <dir>``.
* Bare ``.meta`` files (a TF1 ``Saver``'s MetaGraphDef): ``saved_model_cli`` only reads SavedModel
  directories, so the ``.meta`` is wrapped unchanged as the only meta graph of a temporary
  ``saved_model.pb`` (``saved_model_schema_version: 1``) and the real ``saved_model_cli show --all``
  is run on that directory.
* Frozen GraphDef files (``graphs/frozen/``) are not comparable: tfmount shows no
  ``signatures.txt`` for them and ``saved_model_cli`` cannot read a bare GraphDef.

``show --all`` prints each meta graph's ops as a Python ``set``, in hash order: it is run with
``PYTHONHASHSEED=0`` (the order is still not meaningful; the test compares that line as a set).
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
OUT = os.path.join(FIXTURES, "graphs", "expected", "saved_model_cli")
SMCLI = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")

# (name, source relative to tests/fixtures, kind)
SOURCES = [
    ("demo_savedmodel", "demo_savedmodel", "saved_model"),
    ("tf1_two_tags", "graphs/tf1_two_tags", "saved_model"),
    ("tf1_two_tags_pbtxt", "graphs/tf1_two_tags_pbtxt", "saved_model"),
    ("tf2_module", "graphs/tf2_module", "saved_model"),
    ("tf2_signatures", "graphs/tf2_signatures", "saved_model"),
    ("tf1_meta", "graphs/tf1_meta/model.ckpt.meta", "meta_graph"),
    ("tf1_adam.model.ckpt-2", "tf1_adam/model.ckpt-2.meta", "meta_graph"),
    ("tf1_adam.model.ckpt-3", "tf1_adam/model.ckpt-3.meta", "meta_graph"),
    ("v1_single.model.ckpt-1", "v1/single/model.ckpt-1.meta", "meta_graph"),
    ("v1_single.model.ckpt-2", "v1/single/model.ckpt-2.meta", "meta_graph"),
]


# Fixtures not written by gen_fixtures.py / gen_graph_fixtures.py.
NOTES = {"tf2_signatures": "written by scripts/gen_signatures_fixture.py with the TensorFlow named here"}


def show_all(directory):
    env = dict(os.environ, PYTHONHASHSEED="0", TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([SMCLI, "show", "--all", "--dir", directory], env=env,
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError("saved_model_cli on %s failed: %s" % (directory, proc.stderr[-2000:]))
    return proc.stdout


def wrap_meta(meta_path, tmp):
    from tensorflow.core.protobuf import meta_graph_pb2, saved_model_pb2

    with open(meta_path, "rb") as f:
        mg = meta_graph_pb2.MetaGraphDef.FromString(f.read())
    sm = saved_model_pb2.SavedModel(saved_model_schema_version=1)
    sm.meta_graphs.add().CopyFrom(mg)
    with open(os.path.join(tmp, "saved_model.pb"), "wb") as f:
        f.write(sm.SerializeToString(deterministic=True))
    return tmp


def main():
    import tensorflow as tf

    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    records = []
    for name, rel, kind in SOURCES:
        src = os.path.join(FIXTURES, rel)
        if kind == "saved_model":
            stdout = show_all(src)
            command = "saved_model_cli show --all --dir %s" % rel
        else:
            tmp = tempfile.mkdtemp(prefix="tfmount_smcli_")
            try:
                stdout = show_all(wrap_meta(src, tmp))
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            command = "saved_model_cli show --all --dir <a SavedModel whose only meta graph is %s>" % rel
        with open(os.path.join(OUT, name + ".txt"), "w", newline="") as f:
            f.write(stdout)
        rec = {"name": name, "source": rel, "kind": kind, "file": name + ".txt", "command": command}
        if name in NOTES:
            rec["note"] = NOTES[name]
        records.append(rec)
        print("recorded", name)
    manifest = {
        "tf_version": tf.__version__,
        "env": {"PYTHONHASHSEED": "0"},
        "script": "scripts/record_saved_model_cli.py",
        "not_comparable": {"graphs/frozen/graph.pb, graphs/frozen/graph.pbtxt":
                           "bare GraphDefs: no signatures.txt in tfmount, not readable by saved_model_cli"},
        "fixtures": records,
    }
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
