"""tfmount.open(source, edits=DIR): the model as an editable mount's edits leave it (docs/edit.md),
read from the edits directory (its journal written here as the mount writes it), never changed."""

import json
import os

import numpy
import pytest

import tfmount
from conftest import FIXTURES

SRC = FIXTURES / "tf2_slots/ckpt-1"


def edits_dir(tmp_path, records, arrays=()):
    d = tmp_path / "edits"
    (d / "tensors").mkdir(parents=True)
    for i, a in enumerate(arrays):
        numpy.save(d / "tensors" / f"{i}.npy", a)
    lines = [json.dumps({"tfmount-edits": 1, "source": str(SRC)})]
    lines += [json.dumps(r) for r in records]
    (d / "journal").write_text("\n".join(lines) + "\n")
    return d


def test_the_edits_are_read_over_the_source(tmp_path):
    w = numpy.arange(6, dtype=numpy.float32).reshape(2, 3)
    d = edits_dir(
        tmp_path,
        [
            {"drop": "opt", "subtree": True},
            {"rename": "net", "to": "model", "subtree": True},
            {"set": "model/bias/.ATTRIBUTES/VARIABLE_VALUE", "npy": "tensors/0.npy"},
        ],
        [w],
    )
    before = {p.name: p.stat().st_mtime_ns for p in d.rglob("*")}
    with tfmount.open(SRC) as a, tfmount.open(SRC, edits=d) as b:
        keys = list(b)
        assert not any(k.startswith("opt/") for k in keys), keys
        assert not any(k.startswith("net/") for k in keys), keys
        numpy.testing.assert_array_equal(
            a["net/kernel/.ATTRIBUTES/VARIABLE_VALUE"], b["model/kernel/.ATTRIBUTES/VARIABLE_VALUE"]
        )
        got = b["model/bias/.ATTRIBUTES/VARIABLE_VALUE"]
        assert got.dtype == numpy.float32 and got.shape == (2, 3)
        numpy.testing.assert_array_equal(got, w)
        # The tree too: tensors.tsv lists the edited keys.
        tsv = b.read("tensors.tsv").decode()
        assert "model/bias/.ATTRIBUTES/VARIABLE_VALUE\tfloat32\t2 3" in tsv, tsv
        assert "opt/" not in tsv.split("\n", 1)[1].split("\t")[0]
    # Read, never changed: no file made, none touched.
    assert {p.name: p.stat().st_mtime_ns for p in d.rglob("*")} == before


def test_an_edits_directory_of_another_source_is_refused(tmp_path):
    d = edits_dir(tmp_path, [])
    j = d / "journal"
    j.write_text(json.dumps({"tfmount-edits": 1, "source": "/elsewhere/ckpt"}) + "\n")
    with pytest.raises(tfmount.Error, match="holds the edits of /elsewhere/ckpt"):
        tfmount.open(SRC, edits=d)
    with pytest.raises(tfmount.Error, match="not an edits directory"):
        tfmount.open(SRC, edits=tmp_path / "missing")
