"""A checkpoint on S3 (moto_server on 127.0.0.1, started here): the same arrays as the local
files, decoded (nothing to map), verify, and the fsspec filesystem over it."""

import os
import shutil
import socket
import subprocess
import time
import urllib.request

import fsspec
import numpy
import pytest

import tfmount
from conftest import FIXTURES


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def put(port, path, data=b""):
    # (urllib would send form-encoded content, which moto tries to parse)
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method="PUT",
                                 headers={"Content-Type": "application/octet-stream"})
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.status == 200, (path, r.status)


@pytest.fixture
def s3(tmp_path, monkeypatch):
    moto = shutil.which("moto_server")
    if moto is None:
        if os.environ.get("TFMOUNT_REQUIRE_ALL") == "1":
            pytest.fail("moto_server is needed (scripts/test.sh installs it into the test venv)")
        pytest.skip("no moto_server on PATH")
    port = free_port()
    log = open(tmp_path / "moto.log", "wb")
    proc = subprocess.Popen([moto, "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None, (tmp_path / "moto.log").read_text()
                assert time.monotonic() < deadline, "moto_server did not start in 60 s"
                time.sleep(0.1)
        put(port, "/tfm")
        for f in sorted((FIXTURES / "tf2_keras").iterdir()):
            put(port, f"/tfm/{f.name}", f.read_bytes())
        for k, v in {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
            "AWS_EC2_METADATA_DISABLED": "true",
            "HOME": str(tmp_path),
        }.items():
            monkeypatch.setenv(k, v)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def test_a_checkpoint_on_s3_is_the_local_one(s3):
    with tfmount.open("s3://tfm/ckpt-1", remote_timeout="30s") as remote, tfmount.open(FIXTURES / "tf2_keras/ckpt-1") as local:
        assert remote.keys() == local.keys()
        for k in local:
            if local.dtype(k) == "string":
                assert list(remote[k].reshape(-1)) == list(local[k].reshape(-1)), k
                continue
            r = remote[k]
            assert r.dtype == local[k].dtype and r.shape == local[k].shape, k
            assert r.tobytes() == local[k].tobytes(), k
            assert r.flags.writeable, f"{k}: a remote tensor is decoded, not mapped"
        assert remote.verify() == []
    # A directory on S3: its latest checkpoint.
    with tfmount.open("s3://tfm/") as d:
        assert d.keys() == remote.keys()


def test_fsspec_over_s3(s3):
    fs = fsspec.filesystem("tfmount", source="s3://tfm/ckpt-1")
    with tfmount.open(FIXTURES / "tf2_keras/ckpt-1") as local:
        for path in fs.find("variables"):
            assert fs.cat(path) == local.read(path), path


def test_a_missing_bucket_is_one_error(s3):
    with pytest.raises(tfmount.Error, match="no-such-bucket"):
        tfmount.open("s3://no-such-bucket/ckpt-1", remote_timeout="10s")
