"""Object stores from Python: ``tilestream.open("http://...")`` and the operations on it
read by ranged requests, equal to the same calls on the local file, with the server of
the Rust tests (``tests/object_server.py``) misbehaving on request; outputs written to a
moto S3 server equal to the local ones."""

import os
import subprocess
import sys

import numpy as np
import pytest

import tilestream as ts

SERVER = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "object_server.py")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("objects")
    a = np.random.default_rng(3).normal(size=(257, 129)).astype("<f4")
    np.save(root / "a.npy", a)
    np.save(root / "b.npy", a.astype(">f8").T)  # Fortran order, big-endian
    # Zarr v3 stores written by zarr-python: plain chunks, and shards of inner chunks
    # with the last rows' shards missing (read as the fill value)
    import zarr
    z = zarr.create_array(root / "c.zarr", shape=a.shape, chunks=(64, 32), dtype="<f4",
                          fill_value=np.float32(-1))
    z[...] = a
    z = zarr.create_array(root / "s.zarr", shape=a.shape, chunks=(16, 16), shards=(64, 64),
                          dtype="<f4", fill_value=np.float32(-1))
    z[:192] = a[:192]  # the shards of the last rows never written
    p = subprocess.Popen([sys.executable, SERVER, "--root", str(root), "--latency-ms", "5"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    port = int(p.stdout.readline())
    yield root, f"http://127.0.0.1:{port}"
    p.stdin.close()
    p.wait(timeout=10)


@pytest.mark.parametrize("mode", ["ok", "fail500", "short", "drop"])
@pytest.mark.parametrize("name", ["a.npy", "b.npy"])
def test_objects_read_as_the_local_file(served, mode, name):
    root, base = served
    want = np.load(root / name)
    t = ts.open(f"{base}/{mode}/{name}")
    assert t.shape == want.shape and t.dtype == want.dtype.newbyteorder("=")
    np.testing.assert_array_equal(np.asarray(t), want)
    for axis in (0, 1):
        got = ts.reduce(t, "mean", axis, memory="4MiB")
        np.testing.assert_array_equal(got, ts.reduce(str(root / name), "mean", axis, memory="4MiB"))


@pytest.mark.parametrize("mode", ["ok", "fail500", "short", "drop"])
@pytest.mark.parametrize("name", ["c.zarr", "s.zarr"])
def test_zarr_stores_read_as_zarr_python_reads_them(served, mode, name):
    import zarr
    root, base = served
    want = np.asarray(zarr.open_array(root / name, mode="r"))
    t = ts.open(f"{base}/{mode}/{name}")
    assert t.shape == want.shape and t.dtype == want.dtype
    np.testing.assert_array_equal(np.asarray(t), want)
    if name == "s.zarr":
        assert (want[192:] == -1).all()
    got = ts.reduce(t, "sum", 0, memory="2MiB")
    np.testing.assert_array_equal(got, ts.reduce(str(root / name), "sum", 0, memory="2MiB"))


def test_a_missing_object_is_one_line(served):
    _, base = served
    with pytest.raises(FileNotFoundError) as e:
        ts.open(f"{base}/ok/none.npy")
    msg = str(e.value)
    assert "no such object" in msg and "none.npy" in msg and "\n" not in msg


def test_a_url_carrying_credentials_is_refused_without_them(served):
    _, base = served
    for url in (f"{base}/ok/a.npy?X-Amz-Signature=topsecret",
                base.replace("http://", "http://user:topsecret@") + "/ok/a.npy"):
        with pytest.raises(ValueError) as e:
            ts.open(url)
        msg = str(e.value)
        assert "credentials" in msg and "topsecret" not in msg and "\n" not in msg


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """A moto S3 server (no signature checks) with a bucket ``out``, and the environment
    tilestream reaches it with (its state directory in the test's folder)."""
    pytest.importorskip("moto")
    boto3 = pytest.importorskip("boto3")
    import socket
    import time
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing-secret",
           "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint, "AWS_ALLOW_HTTP": "true",
           "TILESTREAM_STATE_DIR": str(tmp_path_factory.mktemp("state"))}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        deadline = time.time() + 60
        while True:
            try:
                client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
                client.create_bucket(Bucket="out")
                break
            except Exception:
                if time.time() > deadline:
                    raise
                time.sleep(0.2)
        yield client
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        p.kill()
        p.wait(timeout=10)


@pytest.mark.parametrize("name", ["o.npy", "o.tif", "o.zarr"])
def test_outputs_written_to_s3_equal_the_local_ones(s3, tmp_path, name):
    a = np.random.default_rng(5).normal(size=(300, 200)).astype("<f4")
    np.save(tmp_path / "a.npy", a)
    got = ts.map("x*2+1", f"s3://out/{name}", {"x": str(tmp_path / "a.npy")}, memory="8MiB")
    want = ts.map("x*2+1", str(tmp_path / name), {"x": str(tmp_path / "a.npy")}, memory="8MiB")
    # the returned tensor reads the object back
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    if name.endswith(".zarr"):
        keys = [o["Key"] for o in s3.list_objects_v2(Bucket="out", Prefix=name + "/")["Contents"]]
        assert f"{name}/zarr.json" in keys
        for k in keys:
            body = s3.get_object(Bucket="out", Key=k)["Body"].read()
            assert body == (tmp_path / k).read_bytes(), k
    else:
        body = s3.get_object(Bucket="out", Key=name)["Body"].read()
        assert body == (tmp_path / name).read_bytes()


def test_a_cluster_job_refuses_an_object_output(s3, tmp_path):
    pytest.importorskip("distributed")
    import tilestream.dask as tsd
    np.save(tmp_path / "a.npy", np.ones((64, 8), "<f4"))
    with pytest.raises(ValueError, match="shared file system"):
        tsd.map("x*2", "s3://out/c.npy", {"x": str(tmp_path / "a.npy")})
