"""What TensorFlow reads from each TFLite fixture, for tests/core/conformance.rs.

For every model in tests/fixtures/tflite/ (or the paths given), subgraph 0's tensors that hold
data, as `tf.lite.Interpreter.get_tensor` returns them: name, numpy dtype, shape, and the sha256
of the array's bytes (numpy `tobytes()`: row-major, little-endian). Written to
tests/fixtures/tflite/expected/index.json; rerun after scripts/gen_tflite.py:

    ~/.cache/tfmount-test-venv/bin/python scripts/gen_tflite_index.py
"""
import hashlib
import json
import os
import sys

import tensorflow as tf
from tensorflow.lite.tools import flatbuffer_utils as fu

here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "tflite")
paths = sys.argv[1:] or sorted(
    os.path.join(here, f) for f in os.listdir(here) if f.endswith(".tflite"))
out = {"written_by": "scripts/gen_tflite_index.py", "tf_version": tf.__version__, "models": {}}
for path in paths:
    m = fu.read_model(path)
    it = tf.lite.Interpreter(model_path=path)
    it.allocate_tensors()
    tensors = []
    for i, t in enumerate(m.subgraphs[0].tensors):
        b = m.buffers[t.buffer]
        if b.data is None or len(b.data) == 0:
            continue
        v = it.get_tensor(i)
        tensors.append({"name": t.name.decode(), "dtype": v.dtype.name,
                        "shape": [int(x) for x in v.shape],
                        "sha256": hashlib.sha256(v.tobytes()).hexdigest()})
    out["models"][os.path.basename(path)] = tensors
with open(os.path.join(here, "expected", "index.json"), "w") as f:
    json.dump(out, f, indent=1, sort_keys=True)
    f.write("\n")
