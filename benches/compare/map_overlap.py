#!/usr/bin/env python3
"""A user's filter over an image larger than its budget, side by side in one run:

- `ts.map_overlap(g, x, out=..., halo=8, memory="256MiB")` with
  `g = lambda b: scipy.ndimage.gaussian_filter(b, 2.0)` (radius 8);
- the function alone: `g` on every padded block of the same grid, each block copied into
  memory first (not timed), the sum of the calls' times (what the run would take if
  reading and writing were free);
- `dask.array.map_overlap(g, depth=8, boundary="reflect")` over the same blocks (a
  memory-mapped input, stored into a `.npy` opened as a memory map), dask's default
  threaded scheduler;
- `scipy.ndimage.gaussian_filter` on the whole array loaded in memory (`--whole`).

Each in its own process, rounds alternating between them, warm page cache, the median
wall time of --runs rounds. Peak RSS is each process's maximum resident set, and its rise
over the interpreter's own after imports. Run with the Python of a venv holding the
package, numpy, scipy and dask:

    python benches/compare/map_overlap.py --rows 16384 --cols 32768 --whole

The input (2 GiB at 16384 x 32768 f32) is generated once in --work; --clean deletes it
and the outputs.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

PRELUDE = """
import json, resource, sys, time
import numpy as np
import scipy.ndimage as ndi
{imports}
g = lambda b: ndi.gaussian_filter(b, 2.0)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
{call}
t = time.perf_counter() - t0
print(json.dumps({{"s": t, "base": base * 1024, "extra": extra,
                  "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}}))
"""

TS = PRELUDE.format(imports="import tilestream as ts", call="""
r = ts.map_overlap(g, sys.argv[1], out=sys.argv[2], halo=8, memory=sys.argv[3])
extra = {"tiles": r.report.tiles, "tile_shape": r.report.tile_shape}""")

ALONE = PRELUDE.format(imports="", call="""
x = np.load(sys.argv[1], mmap_mode="r")
th, tw = json.loads(sys.argv[4])
h, w = x.shape
spent = 0.0
for r0 in range(0, h, th):
    for c0 in range(0, w, tw):
        a, b = max(0, r0 - 8), min(h, r0 + th + 8)
        c, d = max(0, c0 - 8), min(w, c0 + tw + 8)
        blk = np.ascontiguousarray(x[a:b, c:d])
        s = time.perf_counter()
        g(blk)
        spent += time.perf_counter() - s
        del blk
extra = {"fn_s": spent}""")

DASK = PRELUDE.format(imports="import dask.array as da", call="""
x = np.load(sys.argv[1], mmap_mode="r")
th, tw = json.loads(sys.argv[4])
y = da.from_array(x, chunks=(th, tw)).map_overlap(g, depth=8, boundary="reflect",
                                                   dtype=x.dtype)
out = np.lib.format.open_memmap(sys.argv[2], mode="w+", dtype=x.dtype, shape=x.shape)
da.store(y, out, lock=False)
out.flush()
del out
extra = {}""")

WHOLE = PRELUDE.format(imports="", call="""
np.save(sys.argv[2], g(np.load(sys.argv[1])))
extra = {}""")


def run(code, *args):
    p = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True,
                       text=True)
    if p.returncode != 0:
        sys.exit(f"failed: {p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=16384)
    ap.add_argument("--cols", type=int, default=32768)
    ap.add_argument("--memory", default="256MiB")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--whole", action="store_true", help="also scipy on the whole array")
    ap.add_argument("--work", default="benches/compare/work")
    ap.add_argument("--clean", action="store_true")
    a = ap.parse_args()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    x = work / f"img_{a.rows}x{a.cols}.npy"
    outs = [work / n for n in ("ts.npy", "dask.npy", "whole.npy")]
    if not x.exists():
        import tilestream as ts

        ts.gen(x, (a.rows, a.cols), "f32", dist="normal", memory="256MiB")
    # warm the page cache in a child: a child starts with its parent's peak RSS, so the
    # parent never maps the file before the runs
    subprocess.run([sys.executable, "-c", "import numpy as np, sys; "
                    "np.load(sys.argv[1], mmap_mode='r').sum()", str(x)], check=True)
    rows = {}
    for _ in range(a.runs):
        t = run(TS, x, outs[0], a.memory)
        tile = json.dumps(t["extra"]["tile_shape"])
        rows.setdefault("tilestream map_overlap", []).append(t)
        rows.setdefault("the function alone", []).append(run(ALONE, x, "-", a.memory, tile))
        rows.setdefault("dask.array map_overlap", []).append(run(DASK, x, outs[1], a.memory, tile))
        if a.whole:
            rows.setdefault("scipy, whole array", []).append(run(WHOLE, x, outs[2]))
    import numpy as np

    ref = np.load(outs[0], mmap_mode="r")
    same = {"dask": bool(np.array_equal(ref, np.load(outs[1], mmap_mode="r")))}
    if a.whole:
        same["whole"] = bool(np.array_equal(ref, np.load(outs[2], mmap_mode="r")))
    gb = x.stat().st_size / 1e9
    print(f"{a.rows}x{a.cols} f32 ({gb:.2f} GB), gaussian sigma 2 (halo 8), budget {a.memory}, "
          f"blocks {rows['tilestream map_overlap'][0]['extra']['tile_shape']}, "
          f"{a.runs} round(s), warm")
    print(f"{'':28} {'wall s':>8} {'peak RSS':>10} {'over base':>10}")
    for name, rs in rows.items():
        wall = statistics.median(r["s"] for r in rs)
        peak = max(r["peak"] for r in rs)
        over = max(r["peak"] - r["base"] for r in rs)
        extra = ""
        if name == "the function alone":
            extra = f"  (sum of the calls: {statistics.median(r['extra']['fn_s'] for r in rs):.2f} s)"
        print(f"{name:28} {wall:8.2f} {peak / 2**20:8.0f} MiB {over / 2**20:8.0f} MiB{extra}")
    print("identical outputs:", same)
    if a.clean:
        for p in outs + [x]:
            if p.exists():
                p.unlink()


if __name__ == "__main__":
    main()
