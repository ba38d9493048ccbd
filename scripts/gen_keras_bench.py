#!/usr/bin/env python3
"""Writes a large Keras 3 model file for scripts/bench.sh (figure 11), with real Keras.

usage: gen_keras_bench.py OUT.keras [LAYERS [WIDTH]]

A Sequential model of LAYERS (default 4) Dense layers of WIDTH x WIDTH float32 kernels (default
8192: 256 MiB each, ~1 GiB in all), saved with `Model.save` (a `.keras` zip whose
`model.weights.h5` member is stored). Not compiled: no optimizer state. Prints what the bench
needs, one `name=value` a line:

    big_key=layers/dense/vars/0     a 256 MiB kernel (the first layer's)
    big_bytes=268435456
    file_bytes=...
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import keras  # noqa: E402


def main():
    out = sys.argv[1]
    layers = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    width = int(sys.argv[3]) if len(sys.argv) > 3 else 8192
    keras.utils.set_random_seed(1)
    model = keras.Sequential(
        [keras.Input((width,))] + [keras.layers.Dense(width) for _ in range(layers)]
    )
    model.save(out)
    print("big_key=layers/dense/vars/0")
    print(f"big_bytes={width * width * 4}")
    print(f"file_bytes={os.path.getsize(out)}")


if __name__ == "__main__":
    main()
