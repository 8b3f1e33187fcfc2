"""Makes the committed stencil goldens in tests/golden with scipy.ndimage (run once; the
outputs are committed so tests/it/stencil.rs checks tilestream, and its Rust oracle, against
scipy itself).

    python3 tests/golden/make_stencil_golden.py     # needs numpy and scipy
"""
from pathlib import Path

import numpy as np
import scipy.ndimage as ndi

d = Path(__file__).parent
rng = np.random.default_rng(20261122)
img = rng.standard_normal((2, 37, 45)).astype(np.float32)
np.save(d / "stencil_x.npy", img)


def per_band(f):
    return np.stack([f(b.astype(np.float64)) for b in img])


# Computed in f64 from the f32 input: the reference for tilestream's f32 arithmetic.
np.save(d / "stencil_gaussian_s1.5_reflect.npy", per_band(lambda b: ndi.gaussian_filter(b, 1.5, mode="reflect")))
np.save(d / "stencil_gaussian_s3_wrap.npy", per_band(lambda b: ndi.gaussian_filter(b, 3.0, mode="wrap")))
np.save(
    d / "stencil_sobel_constant2.npy",
    per_band(lambda b: np.hypot(ndi.sobel(b, 0, mode="constant", cval=2.0), ndi.sobel(b, 1, mode="constant", cval=2.0))),
)
np.save(d / "stencil_sobel_nearest.npy", per_band(lambda b: np.hypot(ndi.sobel(b, 0, mode="nearest"), ndi.sobel(b, 1, mode="nearest"))))
np.save(d / "stencil_median3_reflect.npy", np.stack([ndi.median_filter(b, 3, mode="reflect") for b in img]))
np.save(d / "stencil_median4_constant.npy", np.stack([ndi.median_filter(b, 4, mode="constant", cval=0.5) for b in img]))
