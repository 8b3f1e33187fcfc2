#!/usr/bin/env python3
"""The 2nd and 98th percentile of each band of a 4-band u16 scene (contrast stretching),
side by side in one run:

- ``ts.reduce(x, "percentile", axis=(1, 2), q=[2, 98], memory="256MiB")`` (one pass of
  16-bit digit counts over the file);
- numpy over a memory map: ``np.percentile(x, [2, 98], axis=(1, 2))`` on
  ``np.load(X, mmap_mode="r")`` (numpy partitions a copy of the whole array);
- numpy band by band: ``np.percentile(x[b], [2, 98])`` for each band (a copy of one band
  at a time), what a careful user writes.

Each in its own process, rounds alternating, warm page cache, the median wall time of
--runs rounds; peak RSS is each process's maximum resident set (``ru_maxrss``, what
``/usr/bin/time -v`` reports). Every result must equal tilestream's exactly (same values,
same dtype). Run with the Python of a venv holding the package and numpy:

    python benches/compare/percentiles.py --shape 4x20000x20000   # 3.2 GB

The scene (N(2000, 500) rounded to u16) is generated once in --work (``ts.gen``) and
deleted with --clean.
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
{imports}
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
{call}
t = time.perf_counter() - t0
print(json.dumps({{"s": t, "base": base * 1024,
                  "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                  "p": np.asarray(p).tolist(), "dtype": str(np.asarray(p).dtype)}}))
"""

CALLS = {
    "tilestream": ("import tilestream as ts",
                   'p = ts.reduce(sys.argv[1], "percentile", axis=(1, 2), q=[2, 98], '
                   'memory=sys.argv[2])'),
    "numpy memmap": ("", """
x = np.load(sys.argv[1], mmap_mode="r")
p = np.percentile(x, [2, 98], axis=(1, 2))"""),
    "numpy by band": ("", """
x = np.load(sys.argv[1], mmap_mode="r")
p = np.stack([np.percentile(x[b], [2, 98]) for b in range(x.shape[0])], axis=1)"""),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="4x20000x20000")
    ap.add_argument("--memory", default="256MiB")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--work", default="target/bench-percentiles")
    ap.add_argument("--clean", action="store_true")
    a = ap.parse_args()
    import tilestream as ts

    shape = tuple(int(d) for d in a.shape.split("x"))
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    x = work / f"scene_{a.shape}.npy"
    if not x.exists():
        ts.gen(x, shape, "u16", dist="normal", mean=2000.0, std=500.0, seed=1)
    nbytes = x.stat().st_size
    subprocess.run(["cat", str(x)], stdout=subprocess.DEVNULL, check=True)  # warm
    print(f"2nd/98th percentile per band of {a.shape} u16 ({nbytes / 1e9:.2f} GB), "
          f"memory={a.memory}, warm, medians of {a.runs} alternating rounds")
    got = {k: [] for k in CALLS}
    for _ in range(a.runs):
        for name, (imports, call) in CALLS.items():
            r = subprocess.run([sys.executable, "-c", TIMED.format(imports=imports, call=call),
                                str(x), a.memory], capture_output=True, text=True)
            if r.returncode != 0:
                print(f"{name}: failed: {r.stderr.strip().splitlines()[-1:]}")
                continue
            got[name].append(json.loads(r.stdout))
    ref = got["tilestream"][0]
    for name, runs in got.items():
        if not runs:
            continue
        same = runs[0]["p"] == ref["p"] and runs[0]["dtype"] == ref["dtype"]
        s = statistics.median(r["s"] for r in runs)
        peak = max(r["peak"] for r in runs)
        rise = max(r["peak"] - r["base"] for r in runs)
        print(f"{name:14} {s:7.2f} s  {nbytes / s / 1e9:5.2f} GB/s  peak RSS "
              f"{peak / 2**20:7.0f} MiB ({rise / 2**20:6.0f} MiB over the interpreter)"
              f"{'' if same else '  RESULT DIFFERS'}")
    print("tilestream's:", ref["p"], ref["dtype"])
    if a.clean:
        x.unlink()


if __name__ == "__main__":
    main()
