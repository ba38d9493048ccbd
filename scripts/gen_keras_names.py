#!/usr/bin/env python3
"""Keras 3's own names of the variables in tests/fixtures/keras/model.keras, mapped to the HDF5
datasets Keras stores them under: tests/fixtures/keras/expected/names.json.

The expected values of `names/` for `.keras` files (tests/formats/keras.rs). Each variable of the model
and of its optimizer is given a value no other one has (`v.assign`), the weights are saved with
`save_weights`, and each dataset is matched, by its bytes as h5py reads them, to the variable
that holds them: ``{"variable path": "dataset path without the leading /"}``.

    ~/.cache/tfmount-test-venv/bin/python scripts/gen_keras_names.py tests/fixtures/keras
"""
import json
import os
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import h5py  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402

import gen_keras_fixtures as fixtures  # noqa: E402  (the custom layer DtypeZoo)


def main(out_dir):
    model = keras.saving.load_model(
        os.path.join(out_dir, "model.keras"),
        custom_objects={"DtypeZoo": fixtures.DtypeZoo},
        compile=True,
    )
    variables = list(model.weights) + list(model.optimizer.variables)
    values = {}
    for k, v in enumerate(variables):
        dtype = np.dtype(v.dtype) if v.dtype != "bfloat16" else np.dtype("bfloat16")
        if v.dtype == "bool":
            value = np.ones(v.shape, dtype=bool)
        else:
            value = np.full(v.shape, k + 1).astype(dtype)
        v.assign(value)
        values[v.path] = np.asarray(v.numpy()).tobytes()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "unique.weights.h5")
        model.save_weights(path)
        found = {}
        with h5py.File(path, "r") as f:
            def visit(name, obj):
                if isinstance(obj, h5py.Dataset):
                    b = obj[()].tobytes() if obj.shape != () else np.asarray(obj[()]).tobytes()
                    hits = [p for p, vb in values.items() if vb == b]
                    if len(hits) == 1:
                        found[hits[0]] = name
            f.visititems(visit)
    with open(os.path.join(out_dir, "expected", "names.json"), "w") as out:
        json.dump(
            {
                "file": "model.keras",
                "written_by": "scripts/gen_keras_names.py (Keras %s)" % keras.__version__,
                "names": dict(sorted(found.items())),
            },
            out,
            indent=1,
        )
        out.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
