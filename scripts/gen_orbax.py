#!/usr/bin/env python3
"""Writes the Orbax fixtures (tests/fixtures/orbax/) with orbax-checkpoint, and records what
Orbax's own restore gives as the expected values.

Run in a venv OUTSIDE the repo with `jax[cpu] orbax-checkpoint tensorstore` installed:

    python3 -m venv /tmp/orbaxvenv && /tmp/orbaxvenv/bin/pip install "jax[cpu]" orbax-checkpoint tensorstore
    /tmp/orbaxvenv/bin/python scripts/gen_orbax.py tests/fixtures/orbax

Writes:
  ocdbt/ckpt/        StandardCheckpointer.save of TREE (Orbax's default: OCDBT + zarr3)
  zarr/ckpt/         the same tree without OCDBT (one zarr array directory per leaf)
  manager/           a CheckpointManager directory: steps 1, 9 and 10 (`10` sorts after `9`
                     by number, not by name), each a step directory with the item `default`
  keras/orbax/       Keras 3's OrbaxCheckpoint callback (KERAS_BACKEND=jax; needs `keras` in
                     the venv too): a small model fit for 2 epochs, both steps kept; beside it
                     keras/model.weights.h5, the same model's save_weights, for diff
  expected/*.json    per checkpoint: every leaf's pytree path (keys joined by `/`), dtype (numpy's
                     name), shape, sha256 of its little-endian row-major bytes, as Orbax restores
                     it to numpy; the writer's versions; the files written
"""

import hashlib
import json
import os
import shutil
import sys

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp


def tree(step=0):
    rng = np.random.default_rng(28 + step)
    f32 = lambda *s: rng.standard_normal(s).astype(np.float32)
    return {
        "params": {
            "dense": {"kernel": f32(8, 4), "bias": f32(4)},
            "conv": {"kernel": f32(3, 3, 2, 5), "bias": np.zeros(5, np.float32)},
            # Saved in chunks of at most 8 KiB (save_args below): 4 x ... chunks.
            "embed": {"embedding": f32(128, 64)},
            "layers": [
                {"w": jnp.asarray(f32(4, 4), dtype=jnp.bfloat16)},
                {"w": jnp.asarray(f32(4, 4), dtype=jnp.float16)},
            ],
        },
        "opt_state": {
            "count": np.int32(7 + step),
            "mu": {"dense": {"kernel": f32(8, 4)}},
        },
        "dtypes": {
            "int8": rng.integers(-128, 127, (3, 5), dtype=np.int8),
            "uint8": rng.integers(0, 255, (6,), dtype=np.uint8),
            "int64": rng.integers(-(2**40), 2**40, (2, 3), dtype=np.int64),
            "bool": rng.integers(0, 2, (7,)).astype(bool),
            "float64": rng.standard_normal((2, 2)),
            "int4": jnp.asarray(rng.integers(-8, 7, (4, 3)), dtype=jnp.int4),
            "float8_e4m3fn": jnp.asarray(f32(5), dtype=jnp.float8_e4m3fn),
            "scalar0d": np.float32(3.5),
        },
        # Python scalars: Orbax stores them as 0-d arrays.
        "step": 100 + step,
        "lr": 0.001,
    }


def save_args(t):
    """Orbax's defaults, but the embedding in chunks of at most 8 KiB, so that one array of each
    checkpoint is stored in several chunks."""
    args = jax.tree.map(lambda _: ocp.SaveArgs(), t)
    args["params"]["embed"]["embedding"] = ocp.SaveArgs(chunk_byte_size=8192)
    return args


def leaves(restored):
    out = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(restored)[0]:
        key = "/".join(
            str(getattr(p, "key", getattr(p, "idx", getattr(p, "name", p)))) for p in path
        )
        a = np.asarray(leaf)
        data = np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
        out.append({
            "key": key,
            "dtype": str(a.dtype),
            "shape": list(a.shape),
            "python_type": type(leaf).__name__,
            "sha256": hashlib.sha256(data).hexdigest(),
        })
    return sorted(out, key=lambda r: r["key"])


def files(root):
    return sorted(
        os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs
    )


def record(out, name, ckpt_dir, restored):
    exp = {
        "written_by": {
            "orbax-checkpoint": ocp.__version__ if hasattr(ocp, "__version__") else "?",
            "jax": jax.__version__,
            "numpy": np.__version__,
        },
        "files": files(ckpt_dir),
        "leaves": leaves(restored),
    }
    os.makedirs(os.path.join(out, "expected"), exist_ok=True)
    with open(os.path.join(out, "expected", f"{name}.json"), "w") as f:
        json.dump(exp, f, indent=1, sort_keys=True)
        f.write("\n")


def keras_fixture(out):
    os.environ.setdefault("KERAS_BACKEND", "jax")
    try:
        import keras
    except ImportError:
        print("keras not installed: keras/ not written", file=sys.stderr)
        return
    root = os.path.join(out, "keras")
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    keras.utils.set_random_seed(28)
    model = keras.Sequential([
        keras.Input((4,)),
        keras.layers.Dense(3, activation="relu", name="hidden"),
        keras.layers.Dense(2, name="out"),
    ])
    model.compile(optimizer="adam", loss="mse")
    x = np.random.default_rng(1).standard_normal((16, 4)).astype(np.float32)
    y = np.random.default_rng(2).standard_normal((16, 2)).astype(np.float32)
    cb = keras.callbacks.OrbaxCheckpoint(os.path.join(root, "orbax"), save_freq="epoch", max_to_keep=2,
                                         save_on_background=False)
    model.fit(x, y, epochs=2, batch_size=8, verbose=0, callbacks=[cb])
    model.save_weights(os.path.join(root, "model.weights.h5"))
    weights = [{"path": v.path, "dtype": str(np.asarray(v).dtype), "shape": list(v.shape),
                "sha256": hashlib.sha256(np.ascontiguousarray(np.asarray(v)).tobytes()).hexdigest()}
               for v in model.weights]
    # Keras writes with Orbax's v1 API (items `pytree` and `model_config`): read back with it.
    import orbax.checkpoint.experimental.v1 as ocp1

    path = os.path.join(root, "orbax")
    steps = sorted(int(d) for d in os.listdir(path) if d.isdigit())
    for step in steps:
        step_dir = os.path.join(path, str(step))
        restored = ocp1.load_checkpointables(step_dir)
        record(out, f"keras_{step}", step_dir, restored)
    with open(os.path.join(out, "expected", "keras_model_weights.json"), "w") as f:
        json.dump({"keras": keras.__version__, "steps": list(steps), "weights": weights}, f, indent=1)
        f.write("\n")


def main():
    out = os.path.abspath(sys.argv[1])
    for d in ("ocdbt", "zarr", "manager", "expected"):
        shutil.rmtree(os.path.join(out, d), ignore_errors=True)

    # OCDBT (the default).
    path = os.path.join(out, "ocdbt", "ckpt")
    with ocp.StandardCheckpointer() as c:
        c.save(path, tree(), save_args=save_args(tree()))
    with ocp.StandardCheckpointer() as c:
        record(out, "ocdbt", path, c.restore(path))

    # Per-array zarr directories, no OCDBT.
    path = os.path.join(out, "zarr", "ckpt")
    handler = ocp.StandardCheckpointHandler(use_ocdbt=False)
    with ocp.Checkpointer(handler) as c:
        c.save(path, args=ocp.args.StandardSave(tree(), save_args=save_args(tree())))
    with ocp.Checkpointer(ocp.StandardCheckpointHandler(use_ocdbt=False)) as c:
        record(out, "zarr", path, c.restore(path))

    # A CheckpointManager directory of steps.
    path = os.path.join(out, "manager")
    with ocp.CheckpointManager(path) as m:
        for step in (1, 9, 10):
            m.save(step, args=ocp.args.StandardSave(tree(step), save_args=save_args(tree(step))))
        m.wait_until_finished()
    with ocp.CheckpointManager(path) as m:
        for step in m.all_steps():
            record(out, f"manager_{step}", os.path.join(path, str(step)), m.restore(step))
    keras_fixture(out)
    print("wrote", out)
    for root, _, fs in os.walk(out):
        for f in fs:
            p = os.path.join(root, f)
            print(f"{os.path.getsize(p):9d} {os.path.relpath(p, out)}")


if __name__ == "__main__":
    main()
