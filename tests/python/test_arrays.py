"""Every tensor of every fixture as a numpy array: the values the writer's own reader read, in
place (a read-only view of the mapped file) where the bytes lie there as served, decoded into
an array of its own elsewhere."""

from collections.abc import Mapping
import shutil

import numpy
import pytest

import tfmount
from conftest import FIXTURES, sha


def served(arr, dtype):
    """The `.bin` layout of an array: its bytes, or (strings) an 8-byte length and the bytes of
    each element."""
    if dtype == "string":
        return b"".join(len(b).to_bytes(8, "little") + b for b in arr.reshape(-1))
    return numpy.ascontiguousarray(arr).tobytes()


def is_view(arr):
    base = arr
    while base is not None:
        if type(base).__name__ == "Mapped":
            return True
        base = getattr(base, "base", None)
    return False


def test_every_tensor_is_what_the_writers_reader_read(fixture):
    source, wants, mapping = fixture
    with tfmount.open(source) as m:
        assert isinstance(m, Mapping)
        assert sorted(map(str, m.keys())) == sorted(str(w.key) for w in wants)
        assert len(m) == len(wants)
        views = decoded = 0
        for w in wants:
            assert w.key in m
            assert m.dtype(w.key) == w.dtype, w.key
            assert m.shape(w.key) == w.shape, w.key
            if not w.numbers:
                with pytest.raises(tfmount.Error, match="holds no numbers"):
                    m[w.key]
                continue
            arr = m[w.key]
            assert arr.shape == w.shape, w.key
            assert sha(served(arr, w.dtype)) == w.sha256, w.key
            if w.dtype == "string" or arr.nbytes == 0:
                continue
            if is_view(arr):
                views += 1
                assert not arr.flags.writeable and not arr.flags.owndata, w.key
            else:
                decoded += 1
                assert arr.flags.writeable, w.key
        if mapping == "mapped":
            assert views > 0 and decoded == 0, (views, decoded)
        elif mapping == "decoded":
            assert views == 0 and decoded > 0, (views, decoded)
        else:
            assert views > 0, "no tensor of this fixture was mapped in place"


def test_mmap_false_gives_every_array_its_own_memory():
    with tfmount.open(FIXTURES / "tf2_keras/ckpt-1", mmap=False) as m:
        for k in m:
            if m.dtype(k) != "string":
                a = m[k]
                assert a.flags.writeable and not is_view(a), k


def test_views_of_one_file_share_one_mapping():
    with tfmount.open(FIXTURES / "tf2_keras/ckpt-1") as m:
        keys = [k for k in m if m.dtype(k) == "float32" and numpy.prod(m.shape(k)) > 0]
        a, b = m[keys[0]], m[keys[0]]
        assert a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
        assert numpy.shares_memory(a, b)


def test_keys_are_tensors_tsv_keys_in_its_order():
    with tfmount.open(FIXTURES / "tf2_keras/ckpt-1") as m:
        lines = m.read("tensors.tsv").decode().splitlines()
        assert lines[0].split("\t")[0] == "key"
        assert m.keys() == [line.split("\t")[0] for line in lines[1:]]


def test_arrays_outlive_close():
    m = tfmount.open(FIXTURES / "tf2_keras/ckpt-1")
    k = next(k for k in m if m.dtype(k) == "float32" and numpy.prod(m.shape(k)) > 1)
    a = m[k]
    want = a.copy()
    m.close()
    assert m.closed
    with pytest.raises(ValueError, match="closed"):
        m[k]
    assert (a == want).all()


def flip_copy(tmp_path, src_dir, prefix, key):
    """A copy of V2 checkpoint `prefix` with one byte of tensor `key`'s stored data flipped."""
    dst = tmp_path / "ck"
    shutil.copytree(FIXTURES / src_dir, dst)
    with tfmount.open(dst / prefix) as m:
        info = m.info(key)
    data = dst / f"{prefix}.data-{int(info['shard']):05d}-of-00001"
    raw = bytearray(data.read_bytes())
    raw[int(info["offset"])] ^= 0x01
    data.write_bytes(bytes(raw))
    return dst / prefix


def a_float_key():
    with tfmount.open(FIXTURES / "tf2_keras/ckpt-1") as m:
        return next(k for k in m if m.dtype(k) == "float32" and numpy.prod(m.shape(k)) > 1)


def test_a_damaged_tensor_fails_its_crc_and_no_other(tmp_path):
    key = a_float_key()
    damaged = flip_copy(tmp_path, "tf2_keras", "ckpt-1", key)
    with tfmount.open(damaged) as m:
        with pytest.raises(tfmount.IntegrityError, match="checksum mismatch"):
            m[key]
        # Asked again: still refused (the outcome is kept, not forgotten).
        with pytest.raises(tfmount.IntegrityError):
            m[key]
        for k in m:
            if k != key and m.dtype(k) != "variant":
                m[k]
        problems = m.verify()
        assert [p[0] for p in problems] == [key], problems
    with tfmount.open(damaged, verify=False) as m:
        with tfmount.open(FIXTURES / "tf2_keras/ckpt-1") as pristine:
            assert m[key].tobytes() != pristine[key].tobytes()
    assert ("M", key) in tfmount.diff(FIXTURES / "tf2_keras/ckpt-1", damaged, exact=True)


def test_a_file_truncated_under_an_open_model_is_an_error_not_a_crash(tmp_path):
    dst = tmp_path / "ck"
    shutil.copytree(FIXTURES / "tf2_keras", dst)
    with tfmount.open(dst / "ckpt-1") as m:
        keys = [k for k in m if m.dtype(k) == "float32" and numpy.prod(m.shape(k)) > 1]
        last = max(keys, key=lambda k: int(m.info(k)["offset"]))
        data = dst / "ckpt-1.data-00000-of-00001"
        with open(data, "r+b") as f:
            f.truncate(int(m.info(last)["offset"]))
        with pytest.raises(tfmount.IntegrityError):
            m[last]


def test_verify_and_diff_of_pristine_fixtures():
    for src in ("tf2_keras/ckpt-1", "v1/single/model.ckpt-2", "keras/model.weights.h5"):
        with tfmount.open(FIXTURES / src) as m:
            assert m.verify() == [], src
        assert tfmount.diff(FIXTURES / src, FIXTURES / src) == [], src


def test_diff_by_names_matches_a_keras_file_with_its_legacy_h5():
    # The same weights under other keys: by key nothing matches, by names/ the layers' do
    # (tests/keras.rs checks every line against Keras' records).
    k, legacy = FIXTURES / "keras/model.keras", FIXTURES / "keras/legacy_model.h5"
    assert not any(s == "=" for s, _ in tfmount.diff(k, legacy, same=True))
    lines = tfmount.diff(k, legacy, same=True, names=True)
    assert ("=", "conv/kernel") in lines and ("=", "adam/conv_kernel_momentum") in lines, lines
    assert ("D", "head_bf16/kernel") in lines, lines
    with pytest.raises(tfmount.Error, match="model.weights.h5.*no names/"):
        tfmount.diff(k, FIXTURES / "keras/model.weights.h5", names=True)


def test_info_is_the_index():
    with tfmount.open(FIXTURES / "tf2_keras/ckpt-1") as m:
        for k in m:
            i = m.info(k)
            assert i["key"] == k
            assert i["dtype"] == m.dtype(k)
            assert i["shape"] == " ".join(map(str, m.shape(k)))
            assert len(i["crc32c"]) == 8 and int(i["crc32c"], 16) >= 0


def test_errors_name_what_is_wrong(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        tfmount.open(tmp_path / "nowhere")
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\0" * 100)
    with pytest.raises(tfmount.Error, match="not a TensorFlow checkpoint"):
        tfmount.open(junk)
    with pytest.raises(tfmount.Error, match="unknown mount option"):
        tfmount.open(FIXTURES / "tf2_keras/ckpt-1", no_such_option=True)
    with tfmount.open(FIXTURES / "tf2_keras/ckpt-1") as m:
        with pytest.raises(KeyError):
            m["no/such/key"]
        assert "no/such/key" not in m
        with pytest.raises(FileNotFoundError, match="no/such/file"):
            m.read("no/such/file")
        with pytest.raises(IsADirectoryError):
            m.read("variables")
        with pytest.raises(NotADirectoryError):
            m.listdir("tensors.tsv")


def test_a_checkpoint_directory_is_its_latest():
    with tfmount.open(FIXTURES / "tf2_keras") as d, tfmount.open(FIXTURES / "tf2_keras/ckpt-1") as one:
        assert d.keys() == one.keys()
        k = a_float_key()
        assert (d[k] == one[k]).all()


def test_a_graph_file_has_no_tensors_but_a_tree():
    graphs = sorted(p for p in (FIXTURES / "graphs").rglob("*") if p.suffix in (".pb", ".pbtxt") and "saved_model" not in p.name)
    assert graphs, "no graph fixture"
    with tfmount.open(graphs[0]) as m:
        assert m.keys() == [] and len(m) == 0
        assert m.listdir("")
