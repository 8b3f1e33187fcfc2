#!/usr/bin/env python3
"""`ts.map_blocks` of a function that releases the GIL, one call at a time against
`threads=2`, and the function alone over the same blocks (one core), in one process,
alternating, warm page cache; prints the medians of --runs rounds:

    python benches/compare/map_blocks_threads.py --rows 8192 --cols 8192

The function is a chain of 17 numpy ufuncs in place (`np.sin`, `np.cos`). The input
(256 MB at 8192 x 8192 f32) is made in --work and deleted at the end with the output.
"""
import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np

import tilestream as ts


def f(b):
    x = np.sin(b)
    for _ in range(8):
        np.sin(x, out=x)
        np.cos(x, out=x)
    return x


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=8192)
    ap.add_argument("--cols", type=int, default=8192)
    ap.add_argument("--memory", default="256MiB")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--work", default="benches/compare/work")
    a = ap.parse_args()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    src, out = work / "threads_in.npy", work / "threads_out.npy"
    np.save(src, np.random.default_rng(0).random((a.rows, a.cols), dtype=np.float32))
    try:
        th = ts.plan(ts.map_blocks, f, src, out=out, memory=a.memory).tile_shape[0]
        x = np.load(src, mmap_mode="r")
        times = {"one call at a time": [], "threads=2": [], "the function alone": []}
        for _ in range(a.runs):
            for name, t in (("one call at a time", None), ("threads=2", 2)):
                t0 = time.perf_counter()
                ts.map_blocks(f, src, out=out, memory=a.memory, threads=t)
                times[name].append(time.perf_counter() - t0)
            spent = 0.0
            for r in range(0, a.rows, th):
                blk = np.array(x[r:r + th])
                t0 = time.perf_counter()
                f(blk)
                spent += time.perf_counter() - t0
            times["the function alone"].append(spent)
        print(f"{a.rows}x{a.cols} f32, blocks of {th} rows, {a.memory}, medians of {a.runs}")
        for name, v in times.items():
            print(f"{name:22s} {statistics.median(v):7.3f} s")
    finally:
        for p in (src, out):
            if os.path.exists(p):
                os.unlink(p)


if __name__ == "__main__":
    main()
