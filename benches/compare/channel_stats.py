#!/usr/bin/env python3
"""Per-channel mean and std of an NCHW f32 batch (``axis=(0, 2, 3)``, what every
normalisation step needs), side by side in one run:

- ``ts.reduce(x, op, axis=(0, 2, 3), memory="256MiB")`` (one pass over the file each);
- numpy over a memory map: ``x.mean(axis=(0, 2, 3), dtype=np.float64)`` and
  ``x.std(axis=(0, 2, 3), dtype=np.float64)`` on ``np.load(X, mmap_mode="r")``;
- ``dask.array.from_array(memmap, chunks=...)`` with the same reductions (in float64), chunks of N
  rows of about the budget's size.

Each in its own process, rounds alternating, warm page cache, the median wall time of
--runs rounds; peak RSS is each process's maximum resident set (``ru_maxrss``, what
``/usr/bin/time -v`` reports) and its rise over the interpreter after imports. Every
method's result is checked against tilestream's (rtol 1e-9 for the mean, 1e-6 for the
std: numpy and dask sum in other orders). Run with the Python of a venv holding the
package, numpy and dask:

    python benches/compare/channel_stats.py --shape 256x32x239x239   # 1.87 GB

The file is generated once in --work (``ts.gen``) and deleted with --clean.
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
                  "m": np.asarray(m).tolist()}}))
"""

CALLS = {
    "tilestream": ("import tilestream as ts",
                   'm = ts.reduce(sys.argv[1], sys.argv[2], axis=(0, 2, 3), memory=sys.argv[3])'),
    "numpy memmap": ("", """
x = np.load(sys.argv[1], mmap_mode="r")
m = getattr(x, sys.argv[2])(axis=(0, 2, 3), dtype=np.float64)"""),
    "dask": ("import dask, dask.array as da", """
x = np.load(sys.argv[1], mmap_mode="r")
n = max(1, int(sys.argv[4]) // (x[0].size * x.dtype.itemsize))
m = getattr(da.from_array(x, chunks=(n,) + x.shape[1:]), sys.argv[2])(axis=(0, 2, 3), dtype=np.float64).compute()"""),
}


def budget_bytes(s):
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    for u, k in units.items():
        if s.endswith(u):
            return int(float(s[: -len(u)]) * k)
    return int(s)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="256x32x239x239")
    ap.add_argument("--memory", default="256MiB")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--work", default="target/bench-channel-stats")
    ap.add_argument("--clean", action="store_true")
    ap.add_argument("--only", default=",".join(CALLS),
                    help="the methods to run, comma-separated (tilestream first)")
    a = ap.parse_args()
    import tilestream as ts

    shape = tuple(int(d) for d in a.shape.split("x"))
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    x = work / f"nchw_{a.shape}.npy"
    if not x.exists():
        ts.gen(x, shape, "f32", dist="normal", mean=3.0, std=2.0, seed=1)
    nbytes = x.stat().st_size
    subprocess.run(["cat", str(x)], stdout=subprocess.DEVNULL, check=True)  # warm
    print(f"{a.shape} f32 ({nbytes / 1e9:.2f} GB), memory={a.memory}, warm, "
          f"medians of {a.runs} alternating rounds")
    rows = {}
    for op in ("mean", "std"):
        methods = a.only.split(",")
        got = {k: [] for k in methods}
        for _ in range(a.runs):
            for name in methods:
                imports, call = CALLS[name]
                r = subprocess.run([sys.executable, "-c", TIMED.format(imports=imports, call=call),
                                    str(x), op, a.memory, str(budget_bytes(a.memory))],
                                   capture_output=True, text=True)
                if r.returncode != 0:
                    print(f"{name} {op}: failed: {r.stderr.strip().splitlines()[-1:]}")
                    continue
                got[name].append(json.loads(r.stdout))
        ref = got[methods[0]][0]["m"]
        for name, runs in got.items():
            if not runs:
                continue
            import numpy as np
            tol = 1e-9 if op == "mean" else 1e-6
            same = np.allclose(runs[0]["m"], ref, rtol=tol, atol=0)
            s = statistics.median(r["s"] for r in runs)
            peak = max(r["peak"] for r in runs)
            rise = max(r["peak"] - r["base"] for r in runs)
            rows[(op, name)] = (s, peak, rise, same)
            print(f"{op:4} {name:13} {s:7.2f} s  {nbytes / s / 1e9:5.2f} GB/s  peak RSS "
                  f"{peak / 2**20:7.0f} MiB ({rise / 2**20:6.0f} MiB over the interpreter)"
                  f"{'' if same else '  RESULT DIFFERS'}")
    if a.clean:
        x.unlink()


if __name__ == "__main__":
    main()
