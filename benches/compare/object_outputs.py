"""Outputs in object stores: `map x*2+1` of a ROWS x 512 f32 `.npy` written to a local
file and to a moto S3 server on 127.0.0.1, as a `.npy` (a multipart upload at the end)
and as a Zarr store (chunks uploaded as they are encoded), in one sitting, alternating,
median of --runs. Reported: wall time, peak RSS (/usr/bin/time -v) against `--memory`
+ 48 MiB, whether the object's bytes equal the local output's, and, as the bound of the
`.npy` run, the local run plus boto3 uploading the same file to the same server (its
default multipart settings, 10 threads).

    python3 benches/compare/object_outputs.py [--rows 200000] [--memory 64MiB] [--runs 3]

Needs moto and boto3 (the test venv has them: target/test-venv/bin/python) and a
release build (`cargo build --release`). Its files go to /dev/shm and are removed.
"""

import argparse
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import boto3
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
TS = ROOT / "target" / "release" / "tilestream"


def timed(cmd, env):
    """(seconds, peak RSS in MiB) of a command."""
    t = time.perf_counter()
    r = subprocess.run(["/usr/bin/time", "-v"] + cmd, capture_output=True, text=True, env=env)
    dt = time.perf_counter() - t
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(map(str, cmd))}\n{r.stderr}")
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr).group(1))
    return dt, rss / 1024


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=200000)
    ap.add_argument("--memory", default="64MiB")
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                               str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        endpoint = f"http://127.0.0.1:{port}"
        env = dict(os.environ, AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench-secret",
                   AWS_REGION="us-east-1", AWS_ENDPOINT_URL=endpoint, AWS_ALLOW_HTTP="true",
                   TILESTREAM_STATE_DIR=str(work / "state"))
        os.environ.update({k: env[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")})
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        for _ in range(300):
            try:
                s3.list_buckets()
                break
            except Exception:  # not up yet
                time.sleep(0.2)
        s3.create_bucket(Bucket="bench")
        x = work / "x.npy"
        m = np.lib.format.open_memmap(x, mode="w+", dtype="<f4", shape=(a.rows, 512))
        for i in range(0, a.rows, 65536):
            m[i:i + 65536] = np.arange(i, min(i + 65536, a.rows))[:, None] * 0.001
        m.flush()
        del m
        size = x.stat().st_size
        runs = {}
        for r in range(a.runs):
            for name in ("o.npy", "o.zarr"):
                local = work / f"local-{name}"
                for target, key in ((str(local), "local"), (f"s3://bench/r{r}-{name}", "s3")):
                    cmd = [str(TS), "map", "--in", f"x={x}", "x*2+1", target, "--memory", a.memory]
                    runs.setdefault((name, key), []).append(timed(cmd, env))
            t = time.perf_counter()
            s3.upload_file(str(work / "local-o.npy"), "bench", f"boto-{r}.npy")
            runs.setdefault(("boto3 upload", "s3"), []).append((time.perf_counter() - t, 0))
        # the bytes: the last run's objects against the local outputs
        same_npy = s3.get_object(Bucket="bench", Key=f"r{a.runs - 1}-o.npy")["Body"].read() == \
            (work / "local-o.npy").read_bytes()
        same_zarr = True
        for f in (work / "local-o.zarr").rglob("*"):
            if f.is_file():
                key = f"r{a.runs - 1}-o.zarr/{f.relative_to(work / 'local-o.zarr')}"
                same_zarr &= s3.get_object(Bucket="bench", Key=key)["Body"].read() == f.read_bytes()
        med = {k: (statistics.median(t for t, _ in v), max(m for _, m in v))
               for k, v in runs.items()}
        print(f"input {a.rows} x 512 f32 ({size / 2**20:.0f} MiB), --memory {a.memory}, "
              f"median of {a.runs}, warm page cache, moto on 127.0.0.1")
        print("| output | local s | s3 s | bound s | s3 / bound | peak RSS local / s3 MiB | same bytes |")
        print("|---|---:|---:|---:|---:|---:|---|")
        up = med[("boto3 upload", "s3")][0]
        for name, same in (("o.npy", same_npy), ("o.zarr", same_zarr)):
            (lt, lm), (st, sm) = med[(name, "local")], med[(name, "s3")]
            # a store's chunks are compressed, fewer bytes than the .npy: no bound of it here
            bound = f"{lt + up:.2f} | {st / (lt + up):.2f}x" if name == "o.npy" else "— | —"
            print(f"| {name} | {lt:.2f} | {st:.2f} | {bound} | {lm:.0f} / {sm:.0f} | {same} |")
        print(f"bound of the .npy: the local run + boto3 uploading its output ({up:.2f} s)")
    finally:
        server.kill()
        server.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
