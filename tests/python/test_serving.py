"""A TF Serving base directory (tests/fixtures/serving/export: versions 1, 2 and 10 written by
TensorFlow, 11 still being written) through ``tfmount.open``: the tree a mount shows, and the
latest version's variables as the model's tensors (serving/expected.json: TensorFlow's values)."""

import numpy
import pytest

import tfmount
from conftest import FIXTURES, load, sha

EXPORT = FIXTURES / "serving" / "export"


def test_a_base_directory_is_its_versions_and_its_tensors_are_latests():
    exp = load("serving/expected.json")
    with tfmount.open(EXPORT) as m:
        assert sorted(m.listdir("")) == ["1", "10", "2", "latest"]
        assert m.readlink("latest") == "10"
        want = exp["by_version"]["10"]
        keys = [k for k in m if not k.startswith("_CHECKPOINTABLE")]
        assert keys == [t["key"] for t in want["tensors"]]
        for t in want["tensors"]:
            a = m[t["key"]]
            assert a.dtype == numpy.dtype(t["dtype"]) and list(a.shape) == t["shape"], t["key"]
            assert sha(numpy.ascontiguousarray(a).tobytes()) == t["sha256"], t["key"]
        assert numpy.array_equal(m["w/.ATTRIBUTES/VARIABLE_VALUE"],
                                 numpy.array(want["values"]["w"], numpy.float32))
        assert int(m["version/.ATTRIBUTES/VARIABLE_VALUE"]) == 10
        # Every version's tree is there, each with its own values.
        one = m.read("1/variables/version/.ATTRIBUTES/VARIABLE_VALUE.bin")
        assert numpy.frombuffer(one, "<i8").tolist() == [1]


def test_a_base_directory_with_no_complete_version_says_so(tmp_path):
    import shutil

    base = tmp_path / "export"
    shutil.copytree(EXPORT / "11", base / "11")
    with pytest.raises(tfmount.Error, match="TF Serving base directory with no complete version yet"):
        tfmount.open(base)
