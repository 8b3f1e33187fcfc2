"""numpy baselines for the column mean of an f32 .npy: the memmap read in 64 MiB row
blocks (what a careful numpy user writes), or whole (which pulls the file into RSS)."""
import sys

import numpy as np

path, mode = sys.argv[1], sys.argv[2]
x = np.load(path, mmap_mode="r")
if mode == "blocks":
    rows = max(1, (64 << 20) // (x.shape[1] * x.itemsize))
    acc = np.zeros(x.shape[1])
    for i in range(0, x.shape[0], rows):
        acc += x[i:i + rows].sum(axis=0, dtype=np.float64)
    m = acc / x.shape[0]
else:
    m = x.mean(axis=0, dtype=np.float64)
print(m[:3])
