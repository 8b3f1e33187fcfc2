#!/usr/bin/env python3
"""Two tilestream binaries side by side: the same tasks, alternating A and B in each
round, B first every other round (so a noisy machine hurts both alike), warm page
cache, the median wall time of each and its peak RSS (os.wait4, the figure
/usr/bin/time -v prints). For checking that a change costs no speed:

    python3 benches/compare/ab.py OLD_BIN NEW_BIN --rows 1000000 --side 8000

Inputs are generated once in --work (default benches/compare/work/ab) with binary A.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path


def run(cmd):
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    err = p.stderr.read().decode()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{err}")
    return wall, ru.ru_maxrss * 1024


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--side", type=int, default=8000)
    ap.add_argument("--memory", default="256MiB")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tasks", help="comma-separated subset of the tasks (default: all)")
    ap.add_argument("--work", default=str(Path(__file__).resolve().parent / "work" / "ab"))
    a = ap.parse_args()
    w = Path(a.work)
    w.mkdir(parents=True, exist_ok=True)
    x, img, wt = w / "x.npy", w / "img.npy", w / "w.npy"
    q = ["--progress", "never", "--no-sync"]
    if not x.exists():
        run([a.a, "gen", str(x), "--shape", f"{a.rows}x512", "--dtype", "f32", "--seed", "1"] + q)
    if not img.exists():
        run([a.a, "gen", str(img), "--shape", f"{a.side}x{a.side}", "--dtype", "f32", "--seed", "2"] + q)
    if not wt.exists():
        run([a.a, "gen", str(wt), "--shape", "512x64", "--dtype", "f32", "--seed", "3"] + q)
    out = w / "out.npy"
    mem = ["--memory", a.memory]
    tasks = {
        "colmean": ["reduce", str(x), str(out), "--op", "mean", "--axis", "0"],
        "colstd": ["reduce", str(x), str(out), "--op", "std", "--axis", "0"],
        "map_f16": ["map", "x*2+1", str(out), "--in", f"x={x}", "--dtype", "f16"],
        "standardize": ["standardize", str(x), str(out), "--dtype", "f32"],
        "matmul": ["matmul", str(x), str(wt), str(out)],
        "gaussian": ["stencil", str(img), str(out), "--filter", "gaussian:sigma=2"],
    }
    if a.tasks:
        tasks = {k: v for k, v in tasks.items() if k in a.tasks.split(",")}
    for f in (x, img, wt):  # warm the page cache
        with open(f, "rb") as fh:
            while fh.read(1 << 24):
                pass
    print(f"{'task':<12} {'A median s':>10} {'B median s':>10} {'B/A':>6} {'A RSS MiB':>10} {'B RSS MiB':>10}")
    for name, args in tasks.items():
        res = {"A": [], "B": []}
        rss = {"A": 0, "B": 0}
        for k in range(a.runs):
            # every other round B first: neither binary always runs first
            order = (("A", a.a), ("B", a.b)) if k % 2 == 0 else (("B", a.b), ("A", a.a))
            for tag, b in order:
                t, r = run([b] + args + mem + q)
                res[tag].append(t)
                rss[tag] = max(rss[tag], r)
                out.unlink(missing_ok=True)
        ma, mb = statistics.median(res["A"]), statistics.median(res["B"])
        print(f"{name:<12} {ma:10.3f} {mb:10.3f} {mb / ma:6.3f} {rss['A'] / 2**20:10.0f} {rss['B'] / 2**20:10.0f}", flush=True)


if __name__ == "__main__":
    main()
