"""Orbax checkpoints through `import tfmount`: every leaf of every layout Orbax wrote (OCDBT
with zarr v2, the per-array layout, a CheckpointManager step, Keras's OrbaxCheckpoint with zarr
v3) is the array Orbax's own restore gave (tests/fixtures/orbax/expected, from
scripts/gen_orbax.py), dtype (ml_dtypes' for bfloat16, float8 and int4), shape and bytes; a
CheckpointManager directory opens as its highest step."""

import numpy
import pytest

import tfmount
from conftest import FIXTURES, load, sha

CASES = [
    ("ocdbt/ckpt", "ocdbt", ""),
    ("zarr/ckpt", "zarr", ""),
    ("manager/10", "manager_10", "default/"),
    ("manager", "manager_10", "default/"),
    ("keras/orbax/1", "keras_1", ""),
]


@pytest.mark.parametrize("src,name,item", CASES)
def test_every_leaf_is_what_orbax_restored(src, name, item):
    pytest.importorskip("ml_dtypes")
    m = tfmount.open(str(FIXTURES / "orbax" / src))
    leaves = load(f"orbax/expected/{name}.json")["leaves"]
    assert sorted(m.keys()) == sorted(item + leaf["key"] for leaf in leaves)
    for leaf in leaves:
        key = item + leaf["key"]
        a = m[key]
        if leaf["dtype"].startswith("<U"):
            # A string leaf: tfmount gives bytes; Orbax's restore a str.
            text = a.item() if a.shape == () else a[()]
            assert sha(numpy.array(text.decode()).tobytes()) == leaf["sha256"], key
            continue
        assert str(a.dtype) == leaf["dtype"], key
        assert list(a.shape) == leaf["shape"], key
        assert sha(numpy.ascontiguousarray(a).tobytes()) == leaf["sha256"], key
