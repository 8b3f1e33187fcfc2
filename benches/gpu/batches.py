#!/usr/bin/env python3
"""One epoch of ``ts.batches`` to a GPU: is the host-to-device copy overlapped with the
reading, and are the batches on the device the batches on the host?

    python benches/gpu/batches.py [ROWS] [--device cuda|cpu] [--work DIR]

Makes a ROWS x 512 f32 matrix (3075200 rows, 6.3 GB, by default; ``ts.gen``, written
where ``--work`` says), then, warm, in one sitting, batches of 4096 rows at
``memory="512MiB"``, file order and shuffled:

- ``host``: one epoch of ``ts.batches`` to numpy arrays, the loop doing nothing;
- ``device``: the same with ``device=`` (each batch copied on a side stream from the
  page-locked ring, the loop's stream waiting for it), the loop summing each batch on
  the device, synchronised at the end;
- ``copy``: the page-locked host-to-device copy rate of one 8 MiB buffer (the bus's
  limit), and the epoch's bytes at that rate.

Overlap shows as ``device`` well under ``host + copy``, near the larger of the two.
Correctness, in a pass of its own (not timed): every batch on the device, copied back,
is byte for byte the host's batch, in both orders. With ``--device cpu`` the same runs
without a GPU (``device`` then means tensors on the CPU), so the script is exercised
where no GPU is. Prints one line per figure and ends with ``batches.py: ok``.
"""
import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import tilestream as ts

try:
    import torch
except ImportError:
    print("batches.py: skipped: PyTorch is needed (pip install torch)")
    sys.exit(0)

p = argparse.ArgumentParser()
p.add_argument("rows", type=int, nargs="?", default=3075200)
p.add_argument("--device", default="cuda")
p.add_argument("--work", default=None)
p.add_argument("--memory", default="512MiB")
a = p.parse_args()
if a.device.startswith("cuda") and not torch.cuda.is_available():
    print("batches.py: skipped: no CUDA GPU here (give --device cpu)")
    sys.exit(0)

cols, batch = 512, 4096
work = Path(a.work) if a.work else Path(tempfile.mkdtemp())
work.mkdir(parents=True, exist_ok=True)
x = work / "batches_x.npy"
if not x.exists() or x.stat().st_size < a.rows * cols * 4:
    ts.gen(x, (a.rows, cols), "f32", seed=1)
nbytes = a.rows * cols * 4
print(f"batches.py: {a.rows} x {cols} f32 ({nbytes / 2**30:.2f} GiB), batches of {batch}, "
      f"memory={a.memory}, device {a.device}")


def sync():
    if a.device.startswith("cuda"):
        torch.cuda.synchronize()


def stream(shuffle, device):
    kw = {}
    if device == "cpu":
        kw = dict(framework="torch")
    elif device:
        kw = dict(device=device, pinned=True)
    return ts.batches(x, batch, shuffle=shuffle, seed=3, memory=a.memory, **kw)


def epoch(shuffle, device):
    """Seconds of one epoch; on a device the loop sums each batch there."""
    t0 = time.perf_counter()
    total = None
    for b in stream(shuffle, device):
        if device:
            s = b.sum()
            total = s if total is None else total + s
    if total is not None:
        float(total)
    sync()
    return time.perf_counter() - t0


def differing(shuffle):
    """Batches of the device stream that are not the host stream's, and the count."""
    bad = n = 0
    for h, g in zip(stream(shuffle, None), stream(shuffle, a.device)):
        n += 1
        if not torch.equal(g.cpu(), torch.from_numpy(h)):
            bad += 1
    return bad, n


def copy_rate():
    if not a.device.startswith("cuda"):
        return None
    h = torch.empty(8 << 20, dtype=torch.uint8).pin_memory()
    d = torch.empty(8 << 20, dtype=torch.uint8, device=a.device)
    for _ in range(3):
        d.copy_(h, non_blocking=True)
    sync()
    t0 = time.perf_counter()
    for _ in range(64):
        d.copy_(h, non_blocking=True)
    sync()
    return 64 * (8 << 20) / (time.perf_counter() - t0)


ok = True
epoch(False, None)  # warm the page cache
rate = copy_rate()
for shuffle in (False, True):
    name = "shuffled" if shuffle else "file order"
    host, dev = [], []
    for _ in range(3):  # alternating
        host.append(epoch(shuffle, None))
        dev.append(epoch(shuffle, a.device))
    host, dev = sorted(host)[1], sorted(dev)[1]
    line = (f"{name} (medians of 3): host {host:.2f} s ({a.rows / host / 1e6:.2f} M rows/s), "
            f"device {dev:.2f} s ({a.rows / dev / 1e6:.2f} M rows/s)")
    if rate:
        copy = nbytes / rate
        line += (f", copy alone {copy:.2f} s at {rate / 1e9:.1f} GB/s; host + copy "
                 f"{host + copy:.2f} s, the larger {max(host, copy):.2f} s")
    print(line)
    bad, n = differing(shuffle)
    if bad or n == 0:
        print(f"{name}: {bad} of {n} batches on the device differ from the host's")
        ok = False
    else:
        print(f"{name}: all {n} batches on the device are the host's, byte for byte")
if not a.work:
    x.unlink()
print("batches.py: ok" if ok else "batches.py: FAILED")
sys.exit(0 if ok else 1)
