#!/usr/bin/env python3
"""Writes checkpoints into DIR with real TensorFlow while a test watches a live mount of DIR
(tests/mount/live.rs).

usage: live_writer.py tf2|tf1 DIR

Saves two checkpoints, prints "ready", then for each line "next" on stdin saves one more and
prints "saved NAME V0 V1 V2 V3": the checkpoint's directory name in the mount and the float32
values of its variable. TF2 uses tf.train.CheckpointManager(max_to_keep=2) (key
v/.ATTRIBUTES/VARIABLE_VALUE); TF1 uses tf.compat.v1.train.Saver(max_to_keep=2) (key v).
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf  # noqa: E402


def values(step):
    return [float(step), step * 0.5, -float(step), float(step * step)]


def main():
    mode, out = sys.argv[1], sys.argv[2]
    if mode == "tf2":
        v = tf.Variable(tf.zeros([4]), name="v")
        mgr = tf.train.CheckpointManager(tf.train.Checkpoint(v=v), out, max_to_keep=2)

        def save(step):
            v.assign(values(step))
            return os.path.basename(mgr.save())

    elif mode == "tf1":
        tf.compat.v1.disable_eager_execution()
        v = tf.compat.v1.get_variable("v", shape=[4], initializer=tf.compat.v1.zeros_initializer())
        ph = tf.compat.v1.placeholder(tf.float32, [4])
        assign = v.assign(ph)
        saver = tf.compat.v1.train.Saver(max_to_keep=2)
        sess = tf.compat.v1.Session()
        sess.run(tf.compat.v1.global_variables_initializer())

        def save(step):
            sess.run(assign, {ph: values(step)})
            return os.path.basename(saver.save(sess, os.path.join(out, "model.ckpt"), global_step=step))

    else:
        sys.exit(f"unknown mode {mode}")
    step = 0
    for _ in range(2):
        step += 1
        save(step)
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() != "next":
            continue
        step += 1
        name = save(step)
        print("saved", name, *values(step), flush=True)


if __name__ == "__main__":
    main()
