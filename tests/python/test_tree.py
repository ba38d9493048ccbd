"""The tree ``tfmount.open`` shows (listdir, stat, read), the fsspec filesystem and
``tfmount.mount``, each against a real mount of the same SOURCE by the installed ``tfmount``
command; and the command itself."""

import os
import subprocess
import sys

import fsspec
import pytest

import tfmount
from conftest import FIXTURES, require_fuse

SOURCES = ["demo_savedmodel", "tf2_keras/ckpt-1", "keras/model.keras", "tflite/float.tflite", "tfjs/layers"]


def walk_mount(mnt, rel=""):
    """(path, kind, size) of every entry under mnt, listing order, links not followed."""
    out = []
    for name in os.listdir(os.path.join(mnt, rel) if rel else mnt):
        p = f"{rel}/{name}" if rel else name
        full = os.path.join(mnt, p)
        if os.path.islink(full):
            out.append((p, "link", None))
        elif os.path.isdir(full):
            out.append((p, "directory", 0))
            out += walk_mount(mnt, p)
        else:
            out.append((p, "file", os.stat(full).st_size))
    return out


def walk_model(m, rel=""):
    out = []
    for name in m.listdir(rel):
        p = f"{rel}/{name}" if rel else name
        st = m.stat(p, follow_symlinks=False)
        if st["type"] == "link":
            out.append((p, "link", None))
        elif st["type"] == "directory":
            out.append((p, "directory", 0))
            out += walk_model(m, p)
        else:
            out.append((p, "file", st["size"]))
    return out


@pytest.mark.parametrize("source", SOURCES)
def test_the_tree_is_the_mounts(source, mounted):
    mnt = mounted(FIXTURES / source)
    with tfmount.open(FIXTURES / source) as m:
        seen = walk_mount(mnt)
        assert walk_model(m) == seen
        files = [p for p, kind, _ in seen if kind == "file"]
        assert files
        for p in files:
            with open(os.path.join(mnt, p), "rb") as f:
                assert m.read(p) == f.read(), p
        for p, kind, _ in seen:
            if kind == "link":
                assert m.readlink(p) == os.readlink(os.path.join(mnt, p)), p
        # A window of a file, as pread gives it.
        big = max(files, key=lambda p: m.stat(p)["size"])
        with open(os.path.join(mnt, big), "rb") as f:
            f.seek(3)
            assert m.read(big, 3, 10) == f.read(10)


def test_info_is_the_xattrs(mounted):
    src = FIXTURES / "tflite/dynamic_int8.tflite"
    mnt = mounted(src)
    with tfmount.open(src) as m:
        tsv = m.read("tensors.tsv").decode().splitlines()
        cols = tsv[0].split("\t")
        for line in tsv[1:]:
            row = dict(zip(cols, line.split("\t")))
            info = m.info(row["key"])
            path = os.path.join(mnt, row["path"])
            for name in os.listxattr(path):
                assert info[name.removeprefix("user.tfmount.")] == os.getxattr(path, name).decode(), (row["key"], name)
            assert set(info) == {n.removeprefix("user.tfmount.") for n in os.listxattr(path)}


def test_fsspec_filesystem_is_the_mount(mounted):
    src = FIXTURES / "tf2_keras/ckpt-1"
    mnt = mounted(src)
    fs = fsspec.filesystem("tfmount", source=str(src))
    assert sorted(fs.ls("", detail=False)) == sorted(os.listdir(mnt))
    assert sorted(p.rsplit("/", 1)[-1] for p in fs.ls("variables", detail=False)) == sorted(os.listdir(os.path.join(mnt, "variables")))
    for path in fs.find("variables"):
        full = os.path.join(mnt, path)
        assert fs.info(path)["size"] == os.stat(full).st_size, path
        with open(full, "rb") as f:
            want = f.read()
        assert fs.cat(path) == want, path
        with fs.open(path, "rb") as f:
            f.seek(1)
            assert f.read(5) == want[1:6]
    # URL chaining: tfmount://PATH::SOURCE.
    npy = next(p for p in fs.find("variables") if p.endswith(".npy"))
    with fsspec.open(f"tfmount://{npy}::{src}", "rb") as f:
        with open(os.path.join(mnt, npy), "rb") as g:
            assert f.read() == g.read()


def test_mount_context_manager(tmp_path):
    require_fuse()
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    with tfmount.mount(FIXTURES / "demo_savedmodel", mnt) as at:
        assert os.path.ismount(at)
        assert (mnt / "variables/w/.ATTRIBUTES/VARIABLE_VALUE.shape").read_text() == "3 2\n"
    assert not os.path.ismount(mnt)


def test_the_command_does_not_import_numpy():
    # The command imports the package: numpy's import (longer than the command's own work)
    # waits until an array is made.
    out = subprocess.run([sys.executable, "-c", "import sys, tfmount; print('numpy' in sys.modules)"],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_the_command_is_the_cli():
    out = subprocess.run(["tfmount", "--version"], capture_output=True, text=True, check=True).stdout
    assert out.strip() == f"tfmount {tfmount.__version__}"
    ls = subprocess.run([sys.executable, "-m", "tfmount", "ls", str(FIXTURES / "demo_savedmodel"), "variables"],
                        capture_output=True, text=True, check=True).stdout.split()
    with tfmount.open(FIXTURES / "demo_savedmodel") as m:
        assert ls == m.listdir("variables")
    bad = subprocess.run(["tfmount", "ls", str(FIXTURES / "no-such-source")], capture_output=True, text=True)
    assert bad.returncode != 0 and "no-such-source" in bad.stderr
