"""Makes the committed golden files for tests/golden.rs with numpy (run once; the outputs
are committed so the tests check tilestream, and its Rust oracles, against numpy itself).

    python3 tests/golden/make_golden.py     # needs numpy
"""
from pathlib import Path

import numpy as np

d = Path(__file__).parent
rng = np.random.default_rng(20261121)
x = rng.standard_normal((97, 23))
w = rng.standard_normal((23, 5))
np.save(d / "matmul_x.npy", x)
np.save(d / "matmul_w.npy", w)
np.save(d / "matmul_y.npy", x @ w)
np.save(d / "matmul_x32.npy", x.astype(np.float32))
np.save(d / "matmul_y32.npy", (x.astype(np.float32).astype(np.float64) @ w).astype(np.float64))
