"""Expected values of `tfmount diff --values` on tests/fixtures/cli/pair (a, b), as numpy computes
them on the tensors TensorFlow's checkpoint reader returns.

    python scripts/gen_diff_values.py tests/fixtures/cli

Writes tests/fixtures/cli/diff_values.json: for each tolerance (atol, rtol), every tensor present
in both with the same dtype and shape whose values are not all equal (or every one with -s), its
max |a - b|, max |a - b| / |b| (where b != 0 and a != b), the RMS of a - b, how many elements are
not close (numpy.isclose(a, b, rtol, atol, equal_nan=True)), and the first of them (row-major).
Needs tensorflow and numpy (scripts/requirements-fixtures.txt); run in a venv outside the repo.
"""
import json
import os
import sys

import numpy as np
import tensorflow as tf

TOLERANCES = [(0.0, 0.0), (0.5, 0.0), (0.0, 0.5), (1e-6, 1e-6)]


def main(out_dir):
    pair = os.path.join(out_dir, "pair")
    ra = tf.train.load_checkpoint(os.path.join(pair, "a"))
    rb = tf.train.load_checkpoint(os.path.join(pair, "b"))
    sa, sb = ra.get_variable_to_shape_map(), rb.get_variable_to_shape_map()
    da, db = ra.get_variable_to_dtype_map(), rb.get_variable_to_dtype_map()
    out = []
    for atol, rtol in TOLERANCES:
        rows = {}
        for key in sorted(set(sa) & set(sb)):
            if sa[key] != sb[key] or da[key] != db[key]:
                continue
            if da[key] == tf.string:
                continue
            a = np.asarray(ra.get_tensor(key))
            b = np.asarray(rb.get_tensor(key))
            if a.dtype == np.bool_:
                a, b = a.astype(np.float64), b.astype(np.float64)
            a64 = a.astype(np.complex128 if np.iscomplexobj(a) else np.float64)
            b64 = b.astype(np.complex128 if np.iscomplexobj(b) else np.float64)
            d = np.abs(a64 - b64)
            both_nan = np.isnan(a64) & np.isnan(b64)
            d = np.where(both_nan, 0.0, d)
            num = ~np.isnan(d)
            close = np.isclose(a64, b64, rtol=rtol, atol=atol, equal_nan=True)
            bad = np.flatnonzero(~close.reshape(-1))
            mb = np.abs(b64)
            rel_ok = num & (mb != 0) & (d != 0)
            rows[key] = {
                "max_abs": float(d[num].max()) if num.any() else 0.0,
                "max_rel": float((d[rel_ok] / mb[rel_ok]).max()) if rel_ok.any() else 0.0,
                "rms": float(np.sqrt(np.mean(d[num] ** 2))) if num.any() else 0.0,
                "differing": int(bad.size),
                "elements": int(a.size),
                "first_index": ",".join(str(int(i)) for i in np.unravel_index(int(bad[0]), a.shape))
                if bad.size
                else "",
            }
        out.append({"atol": atol, "rtol": rtol, "tensors": rows})
    with open(os.path.join(out_dir, "diff_values.json"), "w") as f:
        json.dump({"tensorflow": tf.__version__, "numpy": np.__version__, "runs": out}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
