#!/usr/bin/env python3
"""One epoch of patches of a scene and its mask for a training loop, side by side in one
run: ``ts.batches([scene, mask], 32, patches=(256, 32))`` in grid order and shuffled,
against the loop written today (numpy slicing of ``np.load(mmap_mode="r")`` patch by
patch, in grid order and in a random order), each in its own process, rounds
alternating, warm page cache, medians of --runs. Peak RSS is each process's maximum
resident set (``ru_maxrss``, what ``/usr/bin/time -v`` reports) and its rise over the
interpreter after imports. Every method's epoch is checked to deliver the same patches
(a checksum of every patch, whatever the order).

    python benches/compare/patches.py --side 8192     # 4 x 8192 x 8192 u16 + mask (576 MiB)
"""
import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

TIMED = """
import json, resource, sys, time
import numpy as np
import tilestream as ts
scene, mask, memory = sys.argv[1], sys.argv[2], sys.argv[3]
size, overlap, batch = 256, 32, 32
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
n, check = 0, 0
{call}
t = time.perf_counter() - t0
print(json.dumps({{"s": t, "n": n, "check": check, "base": base * 1024,
                  "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}}))
"""

TS = """
for img, m in ts.batches([scene, mask], batch, patches=(size, overlap), shuffle={shuffle},
                         memory=memory):
    n += len(img)
    check += int(img[:, :, ::64, ::64].astype(np.int64).sum()) + int(m[:, ::64, ::64].sum())
"""

NP = """
x, y = np.load(scene, mmap_mode="r"), np.load(mask, mmap_mode="r")
stride = size - overlap
def starts(k):
    s = list(range(0, max(k - overlap, 1), stride))
    return sorted(set(min(v, k - size) for v in s))
grid = [(r, c) for r in starts(x.shape[1]) for c in starts(x.shape[2])]
if {shuffle}:
    grid = [grid[i] for i in np.random.default_rng(0).permutation(len(grid))]
for k in range(0, len(grid), batch):
    img = np.stack([x[:, r:r + size, c:c + size] for r, c in grid[k:k + batch]])
    m = np.stack([y[r:r + size, c:c + size] for r, c in grid[k:k + batch]])
    n += len(img)
    check += int(img[:, :, ::64, ::64].astype(np.int64).sum()) + int(m[:, ::64, ::64].sum())
"""

METHODS = {
    "ts.batches, grid order": TS.format(shuffle=False),
    "ts.batches, shuffled": TS.format(shuffle=True),
    "numpy slicing, grid order": NP.format(shuffle=False),
    "numpy slicing, shuffled": NP.format(shuffle=True),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--side", type=int, default=8192)
    ap.add_argument("--memory", default="256MiB")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--work", default="target/bench-patches")
    ap.add_argument("--clean", action="store_true")
    a = ap.parse_args()
    import tilestream as ts

    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    scene, mask = work / f"scene{a.side}.npy", work / f"mask{a.side}.npy"
    if not scene.exists():
        ts.gen(scene, (4, a.side, a.side), "u16", dist="uniform", low=0, high=4000, seed=5)
        ts.gen(mask, (a.side, a.side), "u8", dist="uniform", low=0, high=5, seed=6)
    nbytes = scene.stat().st_size + mask.stat().st_size
    for f in (scene, mask):
        subprocess.run(["cat", str(f)], stdout=subprocess.DEVNULL, check=True)
    print(f"4 x {a.side} x {a.side} u16 + {a.side} x {a.side} u8 ({nbytes / 2**20:.0f} MiB), "
          f"patches of 256 (overlap 32), batches of 32, memory={a.memory}, warm, medians of "
          f"{a.runs} alternating rounds")
    got = {k: [] for k in METHODS}
    for _ in range(a.runs):
        for name, call in METHODS.items():
            r = subprocess.run([sys.executable, "-c", TIMED.format(call=call), str(scene),
                                str(mask), a.memory], capture_output=True, text=True)
            if r.returncode != 0:
                print(f"{name}: failed: {r.stderr.strip().splitlines()[-1:]}")
                continue
            got[name].append(json.loads(r.stdout))
    ref = got["ts.batches, grid order"][0]
    for name, runs in got.items():
        if not runs:
            continue
        s = statistics.median(r["s"] for r in runs)
        peak = max(r["peak"] for r in runs)
        rise = max(r["peak"] - r["base"] for r in runs)
        same = (runs[0]["n"], runs[0]["check"]) == (ref["n"], ref["check"])
        print(f"{name:26} {s:6.2f} s  {runs[0]['n'] / s:8.0f} patches/s  peak RSS "
              f"{peak / 2**20:6.0f} MiB ({rise / 2**20:5.0f} MiB over the interpreter)"
              f"{'' if same else '  DIFFERENT PATCHES'}")
    if a.clean:
        scene.unlink()
        mask.unlink()


if __name__ == "__main__":
    main()
