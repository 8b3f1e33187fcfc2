#!/usr/bin/env python3
"""Cluster benchmark (issue 21): tilestream in one process, tilestream.dask on a
LocalCluster, and dask.array (or plain numpy tasks) on the same cluster, doing the same
two jobs:

1. the column mean of a 3075200x512 f32 .npy (6.3 GB; warm page cache);
2. NDVI ``(b4 - b3) / (b4 + b3)`` as f32 of 200 4-band u16 GeoTIFF scenes (Deflate,
   256x256 tiles), one output .npy per scene.

    target/test-venv/bin/python benches/compare/cluster.py [--rows 3075200] [--scenes 200]
        [--size 1024] [--workers 2] [--memory-limit 1GiB]

Needs numpy, distributed, dask[array] and tifffile in the interpreter that runs it, and
tilestream's Python package (``bash python/test.sh`` or ``maturin develop --release`` in
python/). One run of each (the issue asks for one run); the cluster is started once and
every cluster job runs on it. Worker peak RSS: each worker's peak resident memory
(VmHWM, reset before each job) less its resident memory before the job, the largest
over the workers; the one-process figure is the peak of a fresh process that only
imports tilestream and runs the job. Large files are deleted at the end unless --keep.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
WORK = ROOT / "benches" / "compare" / "work" / "cluster"
MiB = 1 << 20


def status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def reset_peak():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return status("VmRSS:")


def peak():
    return status("VmHWM:")


def on_cluster(client, job):
    """Runs job() (which uses client), returns (seconds, result, worker peak growth)."""
    before = client.run(reset_peak)
    t0 = time.perf_counter()
    out = job()
    dt = time.perf_counter() - t0
    after = client.run(peak)
    grew = max(after[w] - before[w] for w in after)
    return dt, out, grew


def one_process(code):
    """Runs python code in a fresh process; returns (seconds, peak RSS) it prints."""
    prog = (
        "import time, json, tilestream as ts\n"
        "t0 = time.perf_counter()\n"
        f"{code}\n"
        "dt = time.perf_counter() - t0\n"
        "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0]\n"
        "print(json.dumps([dt, int(hwm.split()[1]) * 1024]))\n"
    )
    r = subprocess.run([sys.executable, "-c", prog], check=True, capture_output=True, text=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def ndvi_numpy(path, out):
    """The NDVI job as a dask user writes it without tilestream: tifffile reads the
    scene, numpy computes in f64, np.save writes f32."""
    import tifffile

    s = tifffile.imread(path).astype(np.float64)
    if s.shape[-1] == 4 and s.shape[0] != 4:
        s = np.moveaxis(s, -1, 0)
    b3, b4 = s[2], s[3]
    np.save(out, ((b4 - b3) / (b4 + b3)).astype(np.float32))
    return out


def npy_rows(path, a, b):
    return np.load(path, mmap_mode="r")[a:b]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=3075200)
    ap.add_argument("--cols", type=int, default=512)
    ap.add_argument("--scenes", type=int, default=200)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--memory-limit", default="1GiB")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()

    import dask
    import dask.array as da
    import distributed
    import tilestream as ts
    import tilestream.dask as tsd

    WORK.mkdir(parents=True, exist_ok=True)
    x = WORK / "features.npy"
    if not x.exists() or ts.open(x).shape != (args.rows, args.cols):
        ts.gen(x, (args.rows, args.cols), "f32", memory="512MiB")
    scenes = []
    src = WORK / "scene.npy"
    for k in range(args.scenes):
        tif = WORK / f"scene{k:03}.tif"
        if not tif.exists():
            rng = np.random.default_rng(k)
            np.save(src, rng.integers(1, 10000, size=(4, args.size, args.size), dtype=np.uint16))
            ts.convert(src, tif, memory="256MiB")
        scenes.append(tif)
    src.unlink(missing_ok=True)
    # warm the page cache
    for p in [x, *scenes]:
        with open(p, "rb") as f:
            while f.read(16 << 20):
                pass

    rows = []
    expr = "(s[3] - s[2]) / (s[3] + s[2])"

    # one process
    dt, rss = one_process(f"ts.reduce({str(x)!r}, 'mean', 0, memory='512MiB')")
    rows.append(("column mean", "tilestream, 1 process (512 MiB)", dt, rss))
    out1 = WORK / "ndvi-1"
    shutil.rmtree(out1, ignore_errors=True)
    out1.mkdir()
    code = (
        f"for k in range({args.scenes}):\n"
        f"    ts.map({expr!r}, '{out1}/scene%03d.npy' % k, "
        f"{{'s': '{WORK}/scene%03d.tif' % k}}, dtype='f32', memory='256MiB')"
    )
    dt, rss = one_process(code)
    rows.append(("NDVI of scenes", "tilestream, 1 process (256 MiB)", dt, rss))

    cluster = distributed.LocalCluster(
        n_workers=args.workers, threads_per_worker=1, processes=True,
        memory_limit=args.memory_limit, host="127.0.0.1", dashboard_address=":0",
        silence_logs=40,
    )
    client = distributed.Client(cluster)
    try:
        one = ts.reduce(x, "mean", 0, memory="512MiB")
        dt, got, grew = on_cluster(client, lambda: tsd.reduce(x, "mean", 0, client=client))
        assert got.tobytes() == one.tobytes(), "tilestream.dask differs from one process"
        rows.append(("column mean", f"tilestream.dask, {args.workers} workers (auto)", dt, grew))

        def dask_mean():
            n, chunk = args.rows, max(1, (64 * MiB) // (4 * args.cols))
            parts = [
                da.from_delayed(dask.delayed(npy_rows)(str(x), a, min(n, a + chunk)),
                                shape=(min(n, a + chunk) - a, args.cols), dtype=np.float32)
                for a in range(0, n, chunk)
            ]
            return da.concatenate(parts).mean(axis=0, dtype=np.float64).compute()

        dt, got, grew = on_cluster(client, dask_mean)
        diff = float(np.max(np.abs(got - one)))
        rows.append(("column mean", f"dask.array, {args.workers} workers (64 MiB chunks)", dt,
                     grew))

        out2 = WORK / "ndvi-n"
        shutil.rmtree(out2, ignore_errors=True)

        def ndvi_job(path, out, **kw):
            return ts.map(expr, out, {"s": path}, dtype="f32", **kw)

        dt, _, grew = on_cluster(
            client, lambda: tsd.map_files(ndvi_job, scenes, out2, suffix=".npy", client=client)
        )
        rows.append(("NDVI of scenes", f"tilestream.dask, {args.workers} workers (auto)", dt,
                     grew))
        for k in range(args.scenes):
            a, b = out1 / f"scene{k:03}.npy", out2 / f"scene{k:03}.npy"
            assert a.read_bytes() == b.read_bytes(), f"scene {k} differs"
        out3 = WORK / "ndvi-np"
        shutil.rmtree(out3, ignore_errors=True)
        out3.mkdir()
        dt, _, grew = on_cluster(client, lambda: client.gather(client.map(
            ndvi_numpy, [str(p) for p in scenes],
            [str(out3 / f"scene{k:03}.npy") for k in range(args.scenes)])))
        rows.append(("NDVI of scenes", f"tifffile + numpy tasks, {args.workers} workers", dt,
                     grew))
        ref = np.load(out1 / "scene000.npy")
        ndiff = float(np.nanmax(np.abs(np.load(out3 / "scene000.npy") - ref)))
    finally:
        client.close()
        cluster.close()

    print(f"\n{args.rows}x{args.cols} f32 ({args.rows * args.cols * 4 / 1e9:.1f} GB), "
          f"{args.scenes} scenes of 4x{args.size}x{args.size} u16; warm page cache; "
          f"cluster: {args.workers} workers x 1 thread, memory_limit {args.memory_limit}\n")
    print("| job | engine | time (s) | peak RSS (MiB) |")
    print("|---|---|---:|---:|")
    for job, eng, dt, rss in rows:
        print(f"| {job} | {eng} | {dt:.2f} | {rss / MiB:.0f} |")
    print("\n(peak RSS: one process = the process's peak; cluster = the largest growth of a "
          "worker's peak over its resident memory before the job)")
    print(f"tilestream.dask column mean == one process: bytes identical; dask.array differs "
          f"by at most {diff:.3g}")
    print(f"tilestream.dask NDVI == one process: all {args.scenes} outputs identical; "
          f"numpy tasks differ by at most {ndiff:.3g} (scene 0)")
    if not args.keep:
        shutil.rmtree(WORK)


if __name__ == "__main__":
    main()
