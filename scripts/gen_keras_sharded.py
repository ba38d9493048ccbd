#!/usr/bin/env python3
"""Generate ``tests/fixtures/keras/sharded_functional/`` with REAL Keras 3 (``tf.keras``, Keras 3.15.1).

How to run (the test virtualenv, as for ``gen_keras_fixtures.py``)::

    ~/.cache/tfmount-test-venv/bin/python scripts/gen_keras_sharded.py tests/fixtures/keras

What is written
---------------
* ``sharded_functional/model.weights.json`` + ``model_0000N.weights.h5``: ``model.save_weights(
  "model.weights.json", max_shard_size=...)`` of a functional model (Embedding, MultiHeadAttention,
  LayerNormalization, Conv1D, Dense) trained one step with Adam. Keras's ``ShardedH5IOStore`` writes a
  group's ``weight_map`` entry as a **string** when it wrote one dataset of it, and turns it into a
  **list** when it writes a second (``__setitem__``): the embedding's group (one dataset) is a string, the
  others lists, and the optimizer's group names several shards. The script asserts that the manifest has
  both forms and a group spread over several shards, and that Keras loads the files back into a fresh
  model with the same weights and optimizer variables.
* ``expected/sharded_functional/<shard>.json``: h5py's view of each shard (``describe_h5`` of
  ``gen_keras_fixtures.py``: every dataset's path, dtype, shape and the sha256 of its bytes), and
  ``expected/sharded_functional/model.weights.json.json``: the manifest and the shard names.

Weights are seeded; the shard split depends only on the variables' sizes.
"""

import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import gen_keras_fixtures as g  # noqa: E402

keras = g.keras
layers = g.layers
np = g.np

# Largest variable: the embedding's 50 x 8 float32 (1,600 bytes); ~2 KiB shards spread the ~10 KiB of
# weights and Adam slots over several files.
SHARD_GB = 2048 / 1024**3


def build():
    keras.utils.set_random_seed(g.SEED)
    inp = keras.Input(shape=(6,), dtype="int32")
    x = layers.Embedding(50, 8)(inp)
    x = layers.MultiHeadAttention(num_heads=2, key_dim=4)(x, x)
    x = layers.LayerNormalization()(x)
    x = layers.Conv1D(8, 3)(x)
    out = layers.Dense(4)(x)
    model = keras.Model(inp, out)
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse")
    rng = np.random.default_rng(g.SEED)
    xs = rng.integers(0, 50, size=(4, 6)).astype("int32")
    ys = rng.standard_normal((4, 4, 4)).astype("float32")
    model.fit(xs, ys, epochs=1, batch_size=4, verbose=0)
    return model


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/keras"
    d = os.path.join(out, "sharded_functional")
    shutil.rmtree(d, ignore_errors=True)
    shutil.rmtree(os.path.join(out, "expected", "sharded_functional"), ignore_errors=True)
    os.makedirs(d)
    model = build()
    model.save_weights(os.path.join(d, "model.weights.json"), max_shard_size=SHARD_GB)
    with open(os.path.join(d, "model.weights.json")) as fh:
        manifest = json.load(fh)
    forms = [type(v).__name__ for v in manifest["weight_map"].values()]
    assert "str" in forms and "list" in forms, manifest
    assert any(isinstance(v, list) and len(v) > 1 for v in manifest["weight_map"].values()), manifest
    fresh = build()
    fresh.load_weights(os.path.join(d, "model.weights.json"))
    g.same_weights(model, fresh, "sharded_functional")
    g.same_optimizer(model, fresh, "sharded_functional")
    shards = sorted(n for n in os.listdir(d) if n.endswith(".h5"))
    assert len(shards) > 2, shards
    g.expect(out, "sharded_functional/model.weights.json", {"json": manifest, "shards": shards},
             "keras.Model.save_weights(max_shard_size=...) of a functional model")
    for n in shards:
        g.expect(out, "sharded_functional/" + n, g.describe_h5(os.path.join(d, n)),
                 "sharded save_weights of a functional model")
    total = sum(len(g.describe_h5(os.path.join(d, n))["datasets"]) for n in shards)
    print(f"{d}: {len(shards)} shards, {total} datasets; weight_map forms {sorted(set(forms))}")


if __name__ == "__main__":
    main()
