#!/usr/bin/env python3
"""A PyTorch model on the GPU over a scene larger than its memory budget, block by block,
with the blocks in page-locked memory (``pinned=True``) so that copying each one to the
GPU is a real asynchronous copy at the bus's rate, not a staged one.

    python examples/gpu_model.py          # a 4 x 4096 x 4096 f32 scene (256 MiB), 64 MiB budget
    python examples/gpu_model.py 16384    # 4 x 16384 x 16384 (4 GiB), the same budget

Needs PyTorch with a CUDA GPU; without one it says so on one line and exits 0.

The pattern, for any framework:

- the block arrives read-only in page-locked memory that tilestream reuses once the
  function returns: copy it to the GPU (``non_blocking=True``), run the model, and
  return a host array (``.cpu().numpy()`` waits for the copies, so the block is free);
- the model's GPU memory is PyTorch's own: tilestream allocates nothing on the device
  (page-locked host memory only), so PyTorch's caching allocator has the GPU to itself;
- ``working=`` declares the host memory the function allocates besides its blocks: here
  the result's host copy, as large as the output block (tracemalloc, which measures a
  function that does not declare, sees numpy's allocations but not PyTorch's).
"""
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np

import tilestream as ts

try:
    import torch
except ImportError:
    torch = None
if torch is None or not torch.cuda.is_available():
    print("gpu_model.py: skipped: PyTorch with a CUDA GPU is needed (none here)")
    sys.exit(0)

# the blocks are read-only and the model never writes to them: PyTorch's warning about
# tensors over read-only arrays does not apply
warnings.filterwarnings("ignore", message="The given NumPy array is not writable")

side = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
memory = "64MiB"
torch.manual_seed(0)
# a small fully-convolutional "model": 4 bands to 3 class scores, 3x3 context (halo 1)
model = torch.nn.Sequential(
    torch.nn.Conv2d(4, 16, 3, padding=0), torch.nn.ReLU(), torch.nn.Conv2d(16, 3, 1),
    torch.nn.Softmax(dim=1),
).cuda().eval()


@torch.inference_mode()
def scores(b):
    # b: (4, rows + 2, cols + 2) float32, read-only, page-locked: copy, run, return on host
    x = torch.from_numpy(b).to("cuda", non_blocking=True)
    y = model(x[None])[0]  # (3, rows, cols): the 3x3 convolution drops the halo itself
    y = torch.nn.functional.pad(y, (1, 1, 1, 1))  # back to the padded block's shape
    return y.cpu().numpy()


with tempfile.TemporaryDirectory() as d:
    d = Path(d)
    ts.gen(d / "scene.npy", (4, side, side), "f32", dist="normal")
    scene = ts.open(d / "scene.npy")
    print(f"scene {scene.shape} {scene.dtype}, {scene.nbytes / 2**20:.0f} MiB, budget {memory}")
    out = ts.map_overlap(scores, scene, out=d / "scores.npy", halo=(0, 1, 1),
                         boundary="constant", memory=memory, pinned=True, working=2.0)
    print(out.report)
    if side <= 4096:  # small enough to check against the model on the whole scene
        whole = torch.from_numpy(np.load(d / "scene.npy")).cuda()
        with torch.inference_mode():
            ref = model(torch.nn.functional.pad(whole, (1, 1, 1, 1))[None])[0].cpu().numpy()
        got = np.asarray(out)
        # cuDNN may pick another algorithm for another input size: equal to rounding
        assert np.allclose(got, ref, rtol=1e-4, atol=1e-6), float(np.abs(got - ref).max())
        print("tilestream: the blocks' scores equal the model's on the whole scene (to rounding)")
