"""tilestream from Python: the column mean of an array larger than the budget, next to
what numpy does with the same file. Run: python examples/quickstart.py [ROWS]
(default 200000 rows x 512 f32, 410 MB; 3075200 rows is the 6.3 GB of the README)."""

import os
import sys
import tempfile
import time

import numpy as np

import tilestream as ts

rows = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "features.npy")
    x = ts.gen(path, (rows, 512), "float32", seed=1, memory="256MiB")   # written tile by tile
    t0 = time.perf_counter()
    mean, report = ts.reduce(x, "mean", axis=0, memory="256MiB", report=True)
    t1 = time.perf_counter()
    # numpy reads the same file through a memory map (np.load would need it all in RAM)
    want = np.load(path, mmap_mode="r").mean(axis=0, dtype=np.float64)
    t2 = time.perf_counter()
    assert np.allclose(mean, want, rtol=1e-9), "tilestream and numpy disagree"
    print(f"{x.shape} {x.dtype}: tilestream {t1 - t0:.2f} s "
          f"({report.tiles} tiles, peak {report.peak_reserved_bytes / 2**20:.0f} MiB reserved "
          f"of {report.budget_bytes / 2**20:.0f} MiB), numpy memmap {t2 - t1:.2f} s")
