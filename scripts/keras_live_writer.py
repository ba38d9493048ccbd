#!/usr/bin/env python3
"""Trains a tiny Keras 3 model into DIR with ModelCheckpoint while a test watches a live mount of
DIR (tests/mount/keras_live.rs).

usage: keras_live_writer.py DIR EPOCHS SLEEP

`ModelCheckpoint("DIR/ckpt-{epoch:02d}.weights.h5", save_weights_only=True)` writes one file per
epoch. After each epoch's file is written and closed, prints one line:

    saved NAME SIZE JSON

NAME: the file's name; SIZE: its length; JSON: {dataset path without the leading "/": sha256 of
its values as h5py reads them, little-endian, row-major} - what the mount's `.bin` files hold.
After the first epoch it waits for a line on stdin (the test mounts DIR meanwhile); between the
later epochs it sleeps SLEEP seconds, as a slow training step would.
"""
import hashlib
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import h5py  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402


def hashes(path):
    out = {}

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset):
            a = np.ascontiguousarray(obj[()])
            if a.dtype.byteorder == ">" or (a.dtype.byteorder == "=" and sys.byteorder == "big"):
                a = a.astype(a.dtype.newbyteorder("<"))
            out[name] = hashlib.sha256(a.tobytes()).hexdigest()

    with h5py.File(path, "r") as f:
        f.visititems(visit)
    return out


class Report(keras.callbacks.Callback):
    """Runs after ModelCheckpoint (callbacks run in order): the epoch's file is closed."""

    def __init__(self, pattern, sleep):
        super().__init__()
        self.pattern = pattern
        self.sleep = sleep

    def on_epoch_end(self, epoch, logs=None):
        path = self.pattern.format(epoch=epoch + 1)
        print("saved", os.path.basename(path), os.path.getsize(path), json.dumps(hashes(path)), flush=True)
        if epoch == 0:
            sys.stdin.readline()
        else:
            time.sleep(self.sleep)


def main():
    out, epochs, sleep = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    keras.utils.set_random_seed(1)
    model = keras.Sequential(
        [keras.Input((16,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(4)]
    )
    model.compile(optimizer="adam", loss="mse")
    x = np.random.default_rng(1).normal(size=(64, 16)).astype("float32")
    y = np.random.default_rng(2).normal(size=(64, 4)).astype("float32")
    pattern = os.path.join(out, "ckpt-{epoch:02d}.weights.h5")
    model.fit(
        x,
        y,
        epochs=epochs,
        batch_size=16,
        verbose=0,
        callbacks=[
            keras.callbacks.ModelCheckpoint(pattern, save_weights_only=True),
            Report(pattern, sleep),
        ],
    )


if __name__ == "__main__":
    main()
