#!/usr/bin/env python3
"""Generate ``tests/fixtures/graphs/tf2_signatures/``: a small TF2 SavedModel whose functions
exercise every branch of ``saved_model_cli show --all``'s ``Concrete Functions:`` printer, for
tfmount's ``signatures.txt`` test (``tests/core/graphs.rs``).

How to run (TensorFlow virtualenv kept OUTSIDE the repository), from the repository root::

    /work/tfvenv/bin/python scripts/gen_signatures_fixture.py
    /work/tfvenv/bin/python scripts/record_saved_model_cli.py   # records its show --all

The directory is replaced. ``fingerprint.pb`` (a random uuid) and the empty ``assets/`` are not
kept: neither tfmount's test nor ``saved_model_cli`` needs them.

What the root object has (``saved_model_cli`` lists the root's functions, sorted by name):

* ``multi``: a ``tf.function`` traced five times (five ``Option``s): a TensorSpec plus a Python
  int, float or bool positional argument, and a keyword-only Python argument (``Named Argument``).
* ``bare``: a bare concrete function of ``multi`` with a string argument (``s'q``: quotes).
* ``nested``: an input signature with a tuple of TensorSpecs (``DType: tuple``, ``\\b\\b]``).
* ``dictarg``: a dict of tensors (``DType: dict``, entries printed in the protobuf runtime's hash
  order, which changes from run to run).
* ``odd``: an unknown-rank TensorSpec and a RaggedTensorSpec (a TypeSpec's repr).
* ``point``: a namedtuple argument and a None argument.
* ``noargs``: no arguments (a ``Function Name`` without options).
* ``sub.f``: a function of a child object (not listed by ``saved_model_cli``).
* signature ``s``: a serving signature over ``nested``.
"""

import collections
import os
import shutil
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "graphs", "tf2_signatures")

Point = collections.namedtuple("Point", ["x", "label"])


class M(tf.Module):
    def __init__(self):
        super().__init__()
        self.v = tf.Variable(1.0)
        self.sub = tf.Module()
        self.sub.f = tf.function(lambda x: x * 2.0, input_signature=[tf.TensorSpec([None], tf.float32)])

    @tf.function
    def multi(self, x, k=2, *, flag=True):
        return x * self.v * (k if not isinstance(k, str) else 1.0)

    @tf.function(input_signature=[(tf.TensorSpec([2], tf.int32, name="a"), tf.TensorSpec([], tf.string))])
    def nested(self, pair):
        return pair[0]

    @tf.function
    def dictarg(self, d):
        return d["a"]

    @tf.function(input_signature=[tf.TensorSpec(None, tf.float64, name="un"),
                                  tf.RaggedTensorSpec([None, None], tf.float32)])
    def odd(self, u, r):
        return u

    @tf.function
    def point(self, p, nothing):
        return p.x * 2.0

    @tf.function
    def noargs(self):
        return self.v


def main():
    tf.random.set_seed(1)
    m = M()
    m.multi(tf.constant([1.0]))
    m.multi(tf.constant([1.0, 2.0]), 3)
    m.multi(tf.constant(1.0), k=-1.5, flag=False)
    m.multi(tf.constant([[1.0]]), True)
    m.dictarg({"a": tf.constant(1), "b": tf.constant([2.0])})
    m.point(Point(tf.constant([1.0]), "lbl"), None)
    m.noargs()
    m.bare = m.multi.get_concrete_function(tf.TensorSpec([5], tf.float32, name="bx"), "s'q")
    if os.path.exists(OUT):
        shutil.rmtree(OUT)
    tf.saved_model.save(m, OUT, signatures={"s": m.nested.get_concrete_function()})
    for extra in ("fingerprint.pb", "assets"):
        p = os.path.join(OUT, extra)
        if os.path.isdir(p):
            shutil.rmtree(p)
        elif os.path.exists(p):
            os.remove(p)
    print("wrote", OUT, "with TensorFlow", tf.__version__, file=sys.stderr)


if __name__ == "__main__":
    main()
