#!/usr/bin/env python3
"""The column mean of a ROWS x 512 f32 .npy from Python, side by side in one run:

- the command line, `tilestream reduce X m.npy --op mean --axis 0 --memory 256MiB`;
- `ts.reduce(x, "mean", axis=0, memory="256MiB")` from the Python package;
- `np.load(X, mmap_mode="r").mean(0)` (numpy over a memory map);
- `dask.array.from_array(np.load(X, mmap_mode="r"), chunks=...).mean(0).compute()`
  (when dask is installed), with chunks of the same size as tilestream's budget.

Each in its own process, rounds alternating between them (a noisy machine hurts all
alike), warm page cache, the median wall time of --runs rounds. Peak RSS is each
process's maximum resident set (os.wait4, as /usr/bin/time -v) and, for the Python
ones, its rise over the interpreter's own baseline after imports (the RSS the call
added). Run with the Python of a venv holding the package, numpy (and dask):

    python benches/compare/python_reduce.py --rows 3075200 --bin target/release/tilestream

The file (6.3 GB at 3075200 rows) is generated once in --work and deleted with --clean.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

# One timed call in a fresh interpreter: its time, the interpreter's peak RSS before the
# call (after imports) and after it, and a checksum of the result.
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
                  "sum": float(m.sum())}}))
"""

PY_TS = TIMED.format(imports="import tilestream as ts",
                     call='m = ts.reduce(sys.argv[1], "mean", axis=0, memory=sys.argv[2])')

PY_NP = TIMED.format(imports="", call='m = np.load(sys.argv[1], mmap_mode="r").mean(axis=0)')

PY_DASK = TIMED.format(imports="import dask, dask.array as da", call="""
x = np.load(sys.argv[1], mmap_mode="r")
rows = max(1, int(sys.argv[3]) // (x.shape[1] * x.dtype.itemsize))
m = da.from_array(x, chunks=(rows, x.shape[1])).mean(axis=0).compute()""")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=3_075_200)
    ap.add_argument("--memory", default="256MiB")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--bin", default="target/release/tilestream")
    ap.add_argument("--work", default=str(Path(__file__).resolve().parent / "work" / "python"))
    ap.add_argument("--clean", action="store_true", help="delete the generated file at the end")
    a = ap.parse_args()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    x = work / f"x{a.rows}.npy"
    if not x.exists():
        subprocess.run([a.bin, "gen", str(x), "--shape", f"{a.rows}x512", "--seed", "1",
                        "--progress", "never"], check=True, stdout=subprocess.DEVNULL)
    # warm the page cache
    with open(x, "rb") as f:
        while f.read(64 << 20):
            pass
    budget = subprocess.run([sys.executable, "-c", "import tilestream._tilestream as t, sys;"
                             f"print(t.parse_size({a.memory!r}))"],
                            check=True, capture_output=True, text=True).stdout.strip()
    try:
        import dask  # noqa: F401
        have_dask = True
    except ImportError:
        have_dask = False
    cases = {
        "tilestream CLI": lambda: [a.bin, "reduce", str(x), str(work / "m.npy"), "--op", "mean",
                                   "--axis", "0", "--memory", a.memory, "--progress", "never",
                                   "--json"],
        "ts.reduce (Python)": lambda: [sys.executable, "-c", PY_TS, str(x), a.memory],
        "numpy memmap .mean(0)": lambda: [sys.executable, "-c", PY_NP, str(x)],
    }
    if have_dask:
        cases["dask from_array(...).mean(0)"] = lambda: [sys.executable, "-c", PY_DASK, str(x),
                                                        a.memory, budget]
    res = {k: [] for k in cases}
    for _ in range(a.runs):
        for name, cmd in cases.items():
            c = cmd()
            t0 = time.perf_counter()
            p = subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            out = p.stdout.read()
            err = p.stderr.read()
            _, status, ru = os.wait4(p.pid, 0)
            wall = time.perf_counter() - t0
            if os.waitstatus_to_exitcode(status) != 0:
                sys.exit(f"failed: {name}\n{err}")
            rss = ru.ru_maxrss * 1024
            if name == "tilestream CLI":
                inner = json.loads(out.strip().splitlines()[-1])["wall_s"]
                rise = None
            else:
                j = json.loads(out.strip().splitlines()[-1])
                inner, rise = j["s"], j["peak"] - j["base"]
            res[name].append((inner, wall, rss, rise))
    gb = x.stat().st_size / 1e9
    print(f"column mean of {a.rows}x512 f32 ({gb:.2f} GB), warm page cache, budget {a.memory}, "
          f"median of {a.runs}")
    print("| | time of the call | process wall | peak RSS | RSS rise over the interpreter |")
    print("|---|---|---|---|---|")
    base = statistics.median(r[0] for r in res["tilestream CLI"])
    for name, rs in res.items():
        t = statistics.median(r[0] for r in rs)
        w = statistics.median(r[1] for r in rs)
        m = max(r[2] for r in rs) / 2**20
        rise = "" if rs[0][3] is None else f"{max(r[3] for r in rs) / 2**20:.0f} MiB"
        print(f"| {name} | {t:.2f} s ({t / base:.2f}x the CLI) | {w:.2f} s | {m:.0f} MiB | {rise} |")
    if a.clean:
        x.unlink()


if __name__ == "__main__":
    main()
