"""Shared pieces of the Python module's tests: the fixtures (files written by each format's
real writer, tests/fixtures/) and their expected values (what the writer's own reader read:
TensorFlow's checkpoint reader, h5py, tensorflowjs.read_weights, the TFLite interpreter),
as tests/conformance.rs reads them."""

import hashlib
import io
import json
import os
import shutil
import subprocess
import tempfile
import time
import zipfile
from pathlib import Path

import numpy
import pytest

# Object storage without the default disk cache (~/.cache/tfmount), as cargo's tests run
# (.cargo/config.toml): no test reads pieces another one cached. Tests of the cache set their own.
os.environ.setdefault("TFMOUNT_CACHE_DIR", "none")

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"


def sha(b):
    return hashlib.sha256(b).hexdigest()


def load(rel):
    return json.loads((FIXTURES / rel).read_text())


def key_of(rec):
    if rec.get("key_is_hex"):
        return bytes.fromhex(rec["key_hex"])
    return rec["key"]


class Want:
    def __init__(self, key, sha256, dtype, shape, numbers=True):
        self.key, self.sha256, self.dtype, self.shape, self.numbers = key, sha256, dtype, tuple(shape), numbers


def v2_wants(rel):
    exp = load(rel)
    out = [Want(key_of(r), r["sha256"], r["dtype"], r["shape"]) for r in exp["tensors"]]
    # Variants: no numbers; their .bin is the stored bytes.
    out += [Want(key_of(r), r["stored"]["sha256"], r["dtype"], r["shape"], numbers=False)
            for r in exp.get("unreadable_entries") or []]
    return out


def v1_wants(rel):
    return [Want(r["key"], r["sha256"], r["dtype"], r["shape"]) for r in load(rel)["tensors"]]


def keras_wants(rel, pointer):
    node = load(rel)
    for part in pointer.strip("/").split("/"):
        node = node[part]
    return [Want(d["path"].lstrip("/"), d["sha256"], d["dtype"], d["shape"]) for d in node if isinstance(d.get("dtype"), str)]


def keras_sharded_wants(d):
    """Every dataset of every shard of a sharded Keras model (h5py's view of each shard)."""
    out = []
    for shard in load(f"keras/expected/{d}/model.weights.json.json")["shards"]:
        out += keras_wants(f"keras/expected/{d}/{shard}.json", "/datasets")
    return out


def tfjs_wants(d):
    out = []
    names = {"<f4": "float32", "<i4": "int32", "|b1": "bool", "<c8": "complex64"}
    with zipfile.ZipFile(FIXTURES / d / "expected.npz") as z:
        for member in z.namelist():
            arr = numpy.load(io.BytesIO(z.read(member)))
            out.append(Want(member[: -len(".npy")], sha(arr.tobytes()), names[arr.dtype.str], arr.shape))
    strings = FIXTURES / d / "expected_strings.json"
    if strings.exists():
        for name, items in json.loads(strings.read_text()).items():
            layout = b"".join(len(s.encode()).to_bytes(8, "little") + s.encode() for s in items)
            out.append(Want(name, sha(layout), "string", [len(items)]))
    return out


def tflite_wants(source):
    return [Want(t["name"], t["sha256"], t["dtype"], t["shape"]) for t in load("tflite/expected/index.json")["models"][source]]


# (id, source relative to tests/fixtures, expected tensors, tensors that are views of the file)
FIXTURE_TABLE = [
    ("v2-tf2_keras", "tf2_keras/ckpt-1", lambda: v2_wants("expected/tf2_keras.json"), "mapped"),
    ("v2-all_dtypes", "all_dtypes/ckpt", lambda: v2_wants("expected/all_dtypes.json"), "mapped"),
    ("v2-partitioned", "partitioned/model.ckpt", lambda: v2_wants("expected/partitioned.json"), "mixed"),
    ("v2-sharded", "sharded/model.ckpt", lambda: v2_wants("expected/sharded.json"), "mixed"),
    ("v1-single", "v1/single/model.ckpt-2", lambda: v1_wants("v1/expected/single.model.ckpt-2.json"), "decoded"),
    ("v1-dtypes", "v1/dtypes/model.ckpt", lambda: v1_wants("v1/expected/dtypes.json"), "decoded"),
    ("v1-sharded", "v1/sharded/model.ckpt-?????-of-00003", lambda: v1_wants("v1/expected/sharded.json"), "decoded"),
    ("keras-weights_h5", "keras/model.weights.h5", lambda: keras_wants("keras/expected/model.weights.h5.json", "/datasets"), "mapped"),
    ("keras-legacy_h5", "keras/legacy_model.h5", lambda: keras_wants("keras/expected/legacy_model.h5.json", "/datasets"), "mapped"),
    ("keras-keras", "keras/model.keras", lambda: keras_wants("keras/expected/model.keras.json", "/model.weights.h5/datasets"), "mixed"),
    # Keras's own manifest: string and list entries in its weight_map.
    ("keras-sharded_manifest", "keras/sharded_functional/model.weights.json", lambda: keras_sharded_wants("sharded_functional"), "mixed"),
    ("tfjs-layers", "tfjs/layers", lambda: tfjs_wants("tfjs/layers"), "mixed"),
    ("tfjs-layers_sharded", "tfjs/layers_sharded", lambda: tfjs_wants("tfjs/layers_sharded"), "mixed"),
    ("tfjs-graph_uint8", "tfjs/graph_uint8", lambda: tfjs_wants("tfjs/graph_uint8"), "mixed"),
    ("tflite-float", "tflite/float.tflite", lambda: tflite_wants("float.tflite"), "mixed"),
    ("tflite-dynamic_int8", "tflite/dynamic_int8.tflite", lambda: tflite_wants("dynamic_int8.tflite"), "mixed"),
    ("tflite-with_metadata", "tflite/with_metadata.tflite", lambda: tflite_wants("with_metadata.tflite"), "mixed"),
]


@pytest.fixture(params=FIXTURE_TABLE, ids=[f[0] for f in FIXTURE_TABLE])
def fixture(request):
    _, source, wants, mapping = request.param
    return FIXTURES / source, wants(), mapping


def unmount(mnt):
    for cmd in (["fusermount3", "-u", str(mnt)], ["umount", str(mnt)]):
        if shutil.which(cmd[0]) and subprocess.run(cmd, stderr=subprocess.DEVNULL).returncode == 0:
            return


def fuse_ready():
    return os.path.exists("/dev/fuse") and shutil.which("fusermount3") is not None


def require_fuse():
    if not fuse_ready():
        if os.environ.get("TFMOUNT_REQUIRE_ALL") == "1":
            pytest.fail("FUSE is needed (/dev/fuse and fusermount3: apt-get install fuse3)")
        pytest.skip("no FUSE here (/dev/fuse, fusermount3)")


@pytest.fixture
def mounted():
    """mounted(SOURCE) -> mount point: `tfmount SOURCE MNT` with the installed command,
    unmounted at the test's end."""
    done = []

    def mount(source, *opts):
        require_fuse()
        mnt = Path(tempfile.mkdtemp(prefix="tfmount-py-"))
        subprocess.run([shutil.which("tfmount"), *opts, str(source), str(mnt)], check=True, stdin=subprocess.DEVNULL)
        for _ in range(100):
            if os.path.ismount(mnt):
                break
            time.sleep(0.05)
        assert os.path.ismount(mnt), f"{mnt} is not mounted"
        done.append(mnt)
        return mnt

    yield mount
    for mnt in done:
        unmount(mnt)
        try:
            mnt.rmdir()
        except OSError:
            pass
