"""numpy baseline for `map '(x*2+1)' --dtype f16`: the memmap read in 64 MiB row blocks,
computed and written into a memmapped .npy output (what a careful numpy user writes),
flushed to disk at the end (y.flush(), msync) unless a third argument `noflush` is given."""
import sys

import numpy as np

src, dst = sys.argv[1], sys.argv[2]
x = np.load(src, mmap_mode="r")
y = np.lib.format.open_memmap(dst, mode="w+", dtype=np.float16, shape=x.shape)
rows = max(1, (64 << 20) // (x.shape[1] * x.itemsize))
for i in range(0, x.shape[0], rows):
    y[i:i + rows] = (x[i:i + rows] * 2 + 1).astype(np.float16)
if sys.argv[3:] != ["noflush"]:
    y.flush()
del y
