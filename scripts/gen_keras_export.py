"""Writes tests/fixtures/keras/export/: a SavedModel written by Keras 3's `Model.export()` (two
Dense layers), and export.json: each weight's `variable.path`, shape and values as Keras holds them.

Keras 3 exports each weight twice, as `variables/N` and `_all_variables/N` (two SavedVariables of
one name, two checkpoint keys with the same bytes): tfmount's `names/` and `weights.safetensors`
must still show each weight once, under the name Keras gives it.

    ~/.cache/tfmount-test-venv/bin/python scripts/gen_keras_export.py tests/fixtures/keras
"""
import json
import os
import shutil
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import keras  # noqa: E402
import numpy as np  # noqa: E402

out = sys.argv[1]
keras.utils.set_random_seed(25)
m = keras.Sequential(
    [keras.Input((3,)), keras.layers.Dense(4, name="dense"), keras.layers.Dense(2, name="out")]
)
d = os.path.join(out, "export")
shutil.rmtree(d, ignore_errors=True)
m.export(d, verbose=False)
rec = {
    "keras": keras.__version__,
    "weights": [
        {"path": v.path, "shape": list(v.shape), "values": np.asarray(v).ravel().tolist()}
        for v in m.weights
    ],
}
with open(os.path.join(out, "expected", "export.json"), "w") as f:
    json.dump(rec, f, indent=1)
print("wrote", d)
