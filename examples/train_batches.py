#!/usr/bin/env python3
"""Training a small model on a feature matrix larger than its memory budget, batch by
batch with ``ts.batches`` (shuffled by windows of contiguous blocks), beside the loop a
user writes today over ``np.load(mmap_mode="r")``, which reads the file at random and
keeps what it touched in the page cache of its process.

    python examples/train_batches.py                 # 200000 x 512 f32 (0.4 GB), 128 MiB budget
    python examples/train_batches.py 3075200         # 3075200 x 512 f32 (6.3 GB), the same budget

The model is a linear regression trained by SGD in numpy (PyTorch, when installed, trains
the same model with ``tilestream.torch.loader``): its weights approach the ones the
targets were made with, whichever loop feeds it.
"""
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import tilestream as ts

rows = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
cols, batch, memory = 512, 4096, "128MiB"
with tempfile.TemporaryDirectory() as d:
    d = Path(d)
    # features, and targets y = x @ w_true + noise, written without holding either whole
    ts.gen(d / "x.npy", (rows, cols), "f32", dist="normal", seed=1)
    w_true = np.random.default_rng(0).normal(size=(cols, 1)).astype(np.float32)
    np.save(d / "w.npy", w_true)
    ts.matmul(d / "x.npy", d / "w.npy", d / "y.npy", memory=memory)
    print(f"features {rows} x {cols} f32 ({rows * cols * 4 / 2**30:.2f} GiB), budget {memory}")

    def train(batches):
        w = np.zeros((cols, 1), np.float32)
        t0 = time.perf_counter()
        for x, y in batches:
            grad = x.T @ (x @ w - y) / len(x)
            w -= 0.5 * grad
        return w, time.perf_counter() - t0

    # tilestream: a ring of 4 batches of 8 MiB, three windows of 16 blocks of 1 MiB
    plan = ts.plan(ts.batches, [d / "x.npy", d / "y.npy"], batch, shuffle=True,
                   window=16, memory=memory)
    print(plan)
    w, secs = train(ts.batches([d / "x.npy", d / "y.npy"], batch, shuffle=True, seed=0,
                               window=16, memory=memory))
    err = float(np.abs(w - w_true).max())
    print(f"tilestream.batches: one epoch in {secs:.2f} s, largest weight error {err:.4f}")
    assert err < 0.05, err

    # what is written today: a memmap indexed by a random permutation, batch by batch
    x, y = np.load(d / "x.npy", mmap_mode="r"), np.load(d / "y.npy", mmap_mode="r")
    perm = np.random.default_rng(0).permutation(rows)
    w2, secs2 = train((x[i], y[i]) for i in
                      (np.sort(perm[k:k + batch]) for k in range(0, rows, batch)))
    print(f"np.load(mmap_mode='r'): one epoch in {secs2:.2f} s, largest weight error "
          f"{float(np.abs(w2 - w_true).max()):.4f}")
    del x, y

    try:
        import torch
        import tilestream.torch as tst
    except ImportError:
        print("PyTorch is not installed: its loop is left out")
    else:
        model = torch.nn.Linear(cols, 1, bias=False)
        torch.nn.init.zeros_(model.weight)
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        loader = tst.loader([d / "x.npy", d / "y.npy"], batch_size=batch, shuffle=True,
                            window=16, memory=memory, num_workers=0)
        for xb, yb in loader:
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(xb), yb, reduction="sum") / (2 * len(xb))
            loss.backward()
            opt.step()
        err3 = float((model.weight.detach().T - torch.from_numpy(w_true)).abs().max())
        print(f"tilestream.torch.loader: largest weight error {err3:.4f}")
        assert err3 < 0.05, err3
    print("train_batches.py: done")
