"""dask.array baseline for the column mean of an f32 .npy: the memmap wrapped in a dask
array of 64 MiB row chunks, mean over axis 0 in f64, computed with dask's default
(threaded) scheduler."""
import sys

import dask.array as da
import numpy as np

x = np.load(sys.argv[1], mmap_mode="r")
rows = max(1, (64 << 20) // (x.shape[1] * x.itemsize))
d = da.from_array(x, chunks=(rows, x.shape[1]))
m = d.mean(axis=0, dtype=np.float64).compute()
print(m[:3])
