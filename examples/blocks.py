#!/usr/bin/env python3
"""Your own code over a scene larger than its memory budget: a scipy filter with
``ts.map_overlap``, a small numpy "model" with ``ts.map_blocks`` and a histogram with
``ts.reduce_blocks``, each checked against the same code run on the whole array.

    python examples/blocks.py            # a 4 x 2048 x 2048 u16 scene (32 MiB), 16 MiB budget
    python examples/blocks.py 8192       # 4 x 8192 x 8192 (512 MiB), the same budget

The pattern for a GPU model is the same: inside the function,
``torch.from_numpy(b).to("cuda")``, the model, ``.cpu().numpy()``; declare what the model
allocates on the GPU's side yourself (``working=``), since tracemalloc does not see it.
"""
import sys
import tempfile
from pathlib import Path

import numpy as np
import scipy.ndimage as ndi

import tilestream as ts

side = int(sys.argv[1]) if len(sys.argv) > 1 else 2048
memory = "16MiB"
with tempfile.TemporaryDirectory() as d:
    d = Path(d)
    # a synthetic 4-band scene, written as a tiled, compressed GeoTIFF
    ts.gen(d / "scene.npy", (4, side, side), "u16", dist="uniform", low=0, high=4000)
    ts.convert(d / "scene.npy", d / "scene.tif", tiff_compress="deflate")
    scene = ts.open(d / "scene.tif")
    print(f"scene {scene.shape} {scene.dtype}, {scene.nbytes / 2**20:.0f} MiB, budget {memory}")

    # 1. a filter with a halo: each band smoothed, equal to scipy on the whole scene
    smooth = ts.map_overlap(lambda b: ndi.gaussian_filter(b.astype(np.float32), (0, 2, 2)),
                            scene, out=d / "smooth.tif", halo=(0, 8, 8), memory=memory)
    print("map_overlap:", smooth.report)

    # 2. a "model" from 4 bands to 3 class scores per pixel (a 1x1 convolution and softmax)
    w = np.random.default_rng(0).normal(size=(3, 4)).astype(np.float32) / 1000

    def model(b):
        z = np.einsum("kb,bhw->khw", w, b.astype(np.float32))
        z = np.exp(z - z.max(axis=0))
        return z / z.sum(axis=0)

    scores = ts.map_blocks(model, scene, out=d / "scores.zarr", memory=memory)
    print("map_blocks: ", scores.report)
    print(ts.plan(ts.map_blocks, model, scene, out=d / "plan.zarr", memory=memory))

    # 3. a histogram of band 0, the same at any budget
    hist = ts.reduce_blocks(lambda b: np.histogram(b[0], 40, (0, 4000))[0],
                            lambda parts: np.sum(parts, axis=0), scene, memory=memory)

    if side <= 2048:  # small enough to check against the whole array in memory
        whole = np.load(d / "scene.npy")
        assert np.array_equal(np.asarray(smooth),
                              ndi.gaussian_filter(whole.astype(np.float32), (0, 2, 2)))
        assert np.array_equal(np.asarray(scores), model(whole))
        assert np.array_equal(hist, np.histogram(whole[0], 40, (0, 4000))[0])
        print("tilestream: every result equals the same code on the whole scene")
