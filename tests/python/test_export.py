"""tfmount.export: the engine of `tfmount export` through the module (its outputs are judged by
TensorFlow and safetensors in tests/cli/export.rs; here the binding: edits in keyword order, the
summary, the plan, refusals as tfmount.Error with nothing left at OUT)."""

import numpy
import pytest

import tfmount
from conftest import FIXTURES

SRC = FIXTURES / "tf2_keras/ckpt-1"


def test_weights_only_then_a_rename_in_keyword_order(tmp_path):
    out = tmp_path / "w" / "ckpt"
    s = tfmount.export(SRC, out, weights_only=True, rename="^optimizer/_trainable_variables/=optimizer/weights/")
    assert s["to"] == "tf" and s["dropped"] == 11 and s["renamed"] == 4, s
    assert sorted(p.name for p in out.parent.iterdir()) == ["ckpt.data-00000-of-00001", "ckpt.index"]
    assert any(l.startswith("R optimizer/_trainable_variables/0/") for l in s["plan"]), s["plan"]
    with tfmount.open(SRC) as a, tfmount.open(out) as b:
        for k in a:
            if k.startswith("optimizer/_trainable_variables/"):
                new = k.replace("optimizer/_trainable_variables/", "optimizer/weights/", 1)
                numpy.testing.assert_array_equal(a[k], b[new])
    # A move to another depth: refused, in words, nothing written.
    with pytest.raises(tfmount.Error, match="from depth 3 to 2"):
        tfmount.export(SRC, tmp_path / "d" / "ckpt", rename="^optimizer/_trainable_variables/=weights/")
    assert not (tmp_path / "d" / "ckpt.index").exists()
    # A dry run writes nothing and says the plan.
    s2 = tfmount.export(SRC, tmp_path / "rw" / "ckpt", drop="save_counter/**", dry_run=True)
    assert s2["dry_run"] and s2["files"] == [] and s2["plan"] == ["D save_counter/.ATTRIBUTES/VARIABLE_VALUE"], s2
    assert not (tmp_path / "rw").exists()


def test_safetensors_cast_and_refusals(tmp_path):
    out = tmp_path / "w.safetensors"
    s = tfmount.export(SRC, out, weights_only=True, cast="bfloat16")
    assert s["to"] == "safetensors" and out.exists(), s
    assert sum(l.startswith("C ") for l in s["plan"]) == 4, s["plan"]
    with pytest.raises(tfmount.Error, match="exists"):
        tfmount.export(SRC, out, weights_only=True)
    with pytest.raises(tfmount.Error, match="string"):
        tfmount.export(FIXTURES / "partitioned/model.ckpt", tmp_path / "p.safetensors", drop="nibbles")
    assert not (tmp_path / "p.safetensors").exists()
    with pytest.raises(TypeError):
        tfmount.export(SRC, tmp_path / "x", shuffle=True)
    with pytest.raises(ValueError, match="float32, float64"):
        tfmount.export(SRC, tmp_path / "y", cast="int8")
