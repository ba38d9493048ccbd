"""TensorFlow's side of the export section of scripts/bench.py (23): the same variables written
by `tf.train.Checkpoint.write`, timed without the import and the variables' creation.

    python scripts/bench_export.py PREFIX_SOURCE N_VARS ELEMS OUT_PREFIX [OUT_PREFIX ...]

Writes PREFIX_SOURCE once (the checkpoint tfmount exports), then writes the same checkpoint to
each OUT_PREFIX and prints one line per OUT_PREFIX: its seconds.
"""
import sys
import time

import numpy as np
import tensorflow as tf

src, n, elems = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(0)
variables = {f"v{i:04d}": tf.Variable(rng.standard_normal(elems, dtype=np.float32)) for i in range(n)}
ck = tf.train.Checkpoint(**variables)
ck.write(src)
for out in sys.argv[4:]:
    t = time.perf_counter()
    ck.write(out)
    print("%.6f" % (time.perf_counter() - t))
