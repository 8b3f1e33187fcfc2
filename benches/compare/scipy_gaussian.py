"""scipy baseline for `stencil --filter gaussian:sigma=2`: the whole image loaded into
memory (not timed), then scipy.ndimage.gaussian_filter timed alone. Prints "timed X s"."""
import sys
import time

import numpy as np
import scipy.ndimage as ndi

x = np.load(sys.argv[1])
t0 = time.perf_counter()
y = ndi.gaussian_filter(x, 2.0)
print(f"timed {time.perf_counter() - t0:.3f} s")
