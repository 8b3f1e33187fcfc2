#!/usr/bin/env python3
"""A column mean of a chunked, deflate-compressed HDF5 dataset, side by side in one run:

- ``tilestream reduce big.h5:/x m.npy --op mean --axis 0 --memory 64MiB``;
- h5py reading the dataset in blocks of 64 MiB of rows, summing each block in f64
  (what a user writes by hand: ``f["x"][r:r + step].sum(axis=0, dtype="f8")``);
- xarray with dask: ``xr.open_dataset(path, engine="h5netcdf", chunks={rows: step})``,
  then ``.mean(dim=rows).compute()`` (dask's threaded scheduler, all cores).

Each run is a whole process, rounds alternating, warm page cache; the median wall time
of --runs rounds and the largest peak RSS (each child's own ``ru_maxrss`` from ``wait4``,
what ``/usr/bin/time -v`` reports). The three means must agree (to f32 rounding for
the others, which sum in another order).

    python benches/compare/hdf5.py --rows 1000000 --bin target/release/tilestream
    python benches/compare/hdf5.py --filter bitshuffle-lz4   # or lz4, szip, bzip2, zstd

The file (--rows x 512 f32 values, N(col/100, 1) rounded to 1/64 so that the compressors
have something to do, chunks of 2048 x 512 = 4 MiB; --filter gzip, the default, is level
1 with shuffle; the others are hdf5plugin's or h5py's own with their defaults, szip
`nn` in blocks of 16) is written by h5py into --work; --clean deletes it afterwards.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

FILTERS = {
    "gzip": "dict(compression='gzip', compression_opts=1, shuffle=True)",
    "lz4": "dict(hdf5plugin.LZ4())",
    "bitshuffle-lz4": "dict(hdf5plugin.Bitshuffle(cname='lz4'))",
    "zstd": "dict(hdf5plugin.Zstd())",
    "szip": "dict(compression='szip', compression_opts=('nn', 16))",
    "bzip2": "dict(hdf5plugin.BZip2())",
}

WRITE = """
import sys
import h5py
import hdf5plugin
import numpy as np
rows, cols = int(sys.argv[2]), 512
rng = np.random.default_rng(0)
with h5py.File(sys.argv[1], "w") as f:
    d = f.create_dataset("x", shape=(rows, cols), dtype="f4", chunks=(2048, cols),
                         **FILTER)
    step = 32768
    for r in range(0, rows, step):
        n = min(step, rows - r)
        block = rng.standard_normal((n, cols), dtype="f4") + np.arange(cols, dtype="f4") / 100
        d[r:r + n] = np.round(block * 64) / 64
"""

H5PY = """
import sys
import h5py
import hdf5plugin
import numpy as np
with h5py.File(sys.argv[1], "r") as f:
    d = f["x"]
    step = max(1, (64 << 20) // (d.shape[1] * 4))
    total = np.zeros(d.shape[1], dtype="f8")
    for r in range(0, d.shape[0], step):
        total += d[r:r + step].sum(axis=0, dtype="f8")
    np.save(sys.argv[2], total / d.shape[0])
"""

XARRAY = """
import sys
import hdf5plugin
import numpy as np
import xarray as xr
ds = xr.open_dataset(sys.argv[1], engine="h5netcdf", phony_dims="sort",
                     chunks={"phony_dim_0": (64 << 20) // (512 * 4)})
v = ds["x"]
np.save(sys.argv[2], v.mean(dim=v.dims[0], dtype="f8").compute().values)
"""


def run(cmd):
    """Wall time and peak RSS (this child's own, from wait4) of one command."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    s = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}: {p.stderr.read().decode()}")
    return s, usage.ru_maxrss * 1024


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--memory", default="64MiB")
    ap.add_argument("--bin", default="target/release/tilestream")
    ap.add_argument("--work", default="target/bench-hdf5")
    ap.add_argument("--clean", action="store_true")
    ap.add_argument("--filter", choices=sorted(FILTERS), default="gzip")
    a = ap.parse_args()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    suffix = "" if a.filter == "gzip" else f"_{a.filter}"
    h5 = work / f"big_{a.rows}{suffix}.h5"
    if not h5.exists():
        t = time.perf_counter()
        write = WRITE.replace("FILTER", FILTERS[a.filter])
        subprocess.run([sys.executable, "-c", write, str(h5), str(a.rows)], check=True)
        print(f"wrote {h5} ({h5.stat().st_size / 1e9:.2f} GB stored, "
              f"{a.rows * 512 * 4 / 1e9:.2f} GB of f32) in {time.perf_counter() - t:.0f} s")
    outs = {k: work / f"mean_{k}.npy" for k in ("tilestream", "h5py", "xarray")}
    cmds = {
        "tilestream": [a.bin, "reduce", f"{h5}:/x", str(outs["tilestream"]), "--op", "mean",
                       "--axis", "0", "--memory", a.memory, "--progress", "never"],
        "h5py": [sys.executable, "-c", H5PY, str(h5), str(outs["h5py"])],
        "xarray": [sys.executable, "-c", XARRAY, str(h5), str(outs["xarray"])],
    }
    if subprocess.run([sys.executable, "-c", "import xarray, h5netcdf, dask"],
                      stderr=subprocess.DEVNULL).returncode != 0:
        print("xarray, h5netcdf or dask is not installed: left out")
        del cmds["xarray"]
    for c in cmds.values():  # warm the page cache and every import
        run(c)
    times = {k: [] for k in cmds}
    peaks = {k: 0 for k in cmds}
    for _ in range(a.runs):
        for k, c in cmds.items():
            s, rss = run(c)
            times[k].append(s)
            peaks[k] = max(peaks[k], rss)
    ref = np.load(outs["tilestream"])
    for k in [k for k in cmds if k != "tilestream"]:
        np.testing.assert_allclose(np.load(outs[k]), ref, rtol=1e-6, atol=1e-9, err_msg=k)
    base = statistics.median(times["tilestream"])
    print(f"column mean of {a.rows}x512 f32 ({a.rows * 2048 / 2**30:.2f} GiB, {a.filter}), "
          f"{h5.stat().st_size / 2**30:.2f} GiB stored, medians of {a.runs}, warm:")
    for k in cmds:
        m = statistics.median(times[k])
        print(f"  {k:10s} {m:7.2f} s  {m / base:5.2f}x  peak RSS {peaks[k] / 2**20:7.1f} MiB")
    if a.clean:
        h5.unlink()
        for o in outs.values():
            o.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
