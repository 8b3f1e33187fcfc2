#!/usr/bin/env python3
"""One epoch of batches from an on-disk array larger than its budget, in file order and
shuffled: tilestream.batches against a PyTorch DataLoader (workers, pin_memory) over
np.load(mmap_mode="r") and against plain numpy slicing of that memmap, with the page
cache's read rate as the limit. Rows per second and the peak resident memory of all the
processes of each (sampled from /proc every 20 ms; file pages a process maps count).

    python benches/compare/batches.py                       # 3075200 x 512 f32 (6.3 GB)
    python benches/compare/batches.py --rows 300000 --runs 1   # a quick look

Needs numpy and tilestream, and PyTorch for the DataLoader (left out without it). The
file is made once in --dir and kept (delete it when done); the page cache is warmed by
reading it first, so every figure is warm.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time


def tree_rss(pid):
    """Resident bytes of `pid` and every process below it."""
    kids, total = {}, 0
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                parts = f.read().rsplit(")", 1)[1].split()
            kids.setdefault(int(parts[1]), []).append(int(d))
        except OSError:
            continue
    todo = [pid]
    while todo:
        p = todo.pop()
        todo.extend(kids.get(p, []))
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


def measure(argv):
    """Runs argv; returns (its JSON result, peak RSS of its process tree)."""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    peak = [0]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], tree_rss(p.pid))
            time.sleep(0.02)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    out, _ = p.communicate()
    done.set()
    t.join()
    if p.returncode != 0:
        raise SystemExit(f"{argv[3:]} failed (exit {p.returncode})")
    return json.loads(out.strip().splitlines()[-1]), peak[0]


# --- one method, in a process of its own --------------------------------------------------

def one(a):
    import numpy as np

    path = os.path.join(a.dir, "x.npy")
    seen = 0
    t0 = time.perf_counter()
    if a.method == "baseline":
        import tilestream  # noqa: F401

        x = np.load(path, mmap_mode="r")  # as every method opens it
        del x
        time.sleep(0.5)  # long enough for the sampler

        if a.torch:
            import torch  # noqa: F401
    elif a.method == "page-cache":
        # every core reading the file with pread: the rate batches are measured against
        fd = os.open(path, os.O_RDONLY)
        size = os.fstat(fd).st_size
        n = os.cpu_count() or 1
        chunk = 8 << 20

        def read(k):
            buf = bytearray(chunk)
            off = k * chunk
            while off < size:
                os.preadv(fd, [buf], off)
                off += n * chunk

        ts_ = [threading.Thread(target=read, args=(k,)) for k in range(n)]
        for t in ts_:
            t.start()
        for t in ts_:
            t.join()
        seen = size // (a.cols * 4)
    elif a.method.startswith("tilestream"):
        import tilestream as ts

        for b in ts.batches(path, a.batch, shuffle=a.method.endswith("shuffled"), seed=1,
                            memory=a.memory):
            seen += len(b)
    elif a.method.startswith("numpy"):
        x = np.load(path, mmap_mode="r")
        n = x.shape[0]
        if a.method.endswith("shuffled"):
            perm = np.random.default_rng(1).permutation(n)
            for i in range(0, n, a.batch):
                b = x[np.sort(perm[i:i + a.batch])]
                seen += len(b)
        else:
            for i in range(0, n, a.batch):
                b = np.array(x[i:i + a.batch])
                seen += len(b)
    elif a.method.startswith("dataloader"):
        import torch
        from torch.utils.data import (BatchSampler, DataLoader, Dataset, RandomSampler,
                                      SequentialSampler)

        class Rows(Dataset):
            """Rows of the memmap by lists of indices (a batch sampler's), sorted so each
            batch reads the file in order."""

            def __init__(self, path):
                self.path, self.x = path, None

            def __len__(self):
                return np.load(self.path, mmap_mode="r").shape[0]

            def __getitem__(self, idx):
                if self.x is None:  # opened in each worker
                    self.x = np.load(self.path, mmap_mode="r")
                return torch.from_numpy(self.x[np.sort(np.asarray(idx))])

        ds = Rows(path)
        shuffled = a.method.endswith("shuffled")
        sampler = RandomSampler(ds, generator=torch.Generator().manual_seed(1)) if shuffled \
            else SequentialSampler(ds)
        dl = DataLoader(ds, sampler=BatchSampler(sampler, a.batch, False), batch_size=None,
                        num_workers=a.workers, pin_memory=True)
        for b in dl:
            seen += len(b)
    else:
        raise SystemExit(f"unknown method {a.method}")
    wall = time.perf_counter() - t0
    print(json.dumps({"rows": seen, "wall": wall}))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=3075200)
    ap.add_argument("--cols", type=int, default=512)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--memory", default="512MiB")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3, help="rounds (medians of the walls)")
    ap.add_argument("--dir", default="/tmp/tilestream-batches-bench")
    ap.add_argument("--methods", default="", help="these methods only (comma-separated)")
    ap.add_argument("--method")
    ap.add_argument("--torch", action="store_true")
    a = ap.parse_args()
    if a.method:
        return one(a)
    os.makedirs(a.dir, exist_ok=True)
    path = os.path.join(a.dir, "x.npy")
    import numpy as np

    if not os.path.exists(path) or np.load(path, mmap_mode="r").shape != (a.rows, a.cols):
        import tilestream as ts

        print(f"making {path} ({a.rows} x {a.cols} f32)", flush=True)
        ts.gen(path, (a.rows, a.cols), "f32", memory="1GiB")
    try:
        import torch  # noqa: F401

        have_torch = True
    except ImportError:
        have_torch = False
    methods = ["page-cache", "tilestream", "tilestream-shuffled", "numpy", "numpy-shuffled"]
    if have_torch:
        methods += ["dataloader", "dataloader-shuffled"]
    if a.methods:
        methods = [m for m in methods if m in a.methods.split(",")]
    base = [sys.executable, os.path.abspath(__file__), "--dir", a.dir, "--cols", str(a.cols),
            "--batch", str(a.batch), "--memory", a.memory, "--workers", str(a.workers)]
    # what the interpreter holds before the first batch: numpy and tilestream imported
    # (and PyTorch, for the DataLoader)
    # (sampled: a child's own ru_maxrss starts from its parent's at the fork)
    baseline = measure(base + ["--method", "baseline"])[1]
    torch_baseline = measure(base + ["--method", "baseline", "--torch"])[1] if have_torch else 0
    measure(base + ["--method", "page-cache"])  # warms the page cache
    walls = {m: [] for m in methods}
    peaks = {m: 0 for m in methods}
    rows = {}
    for r in range(a.runs):
        for m in methods:  # alternating, round after round
            res, peak = measure(base + ["--method", m])
            walls[m].append(res["wall"])
            peaks[m] = max(peaks[m], peak)
            rows[m] = res["rows"]
            print(f"round {r + 1} {m}: {res['wall']:.2f} s, peak RSS {peak / 2**20:.0f} MiB",
                  flush=True)
    gb = a.rows * a.cols * 4 / 1e9
    print(f"\n{a.rows} x {a.cols} f32 ({gb:.2f} GB), batches of {a.batch}, memory={a.memory}, "
          f"{os.cpu_count()} cores, warm page cache, medians of {a.runs} alternating rounds; "
          f"peak RSS of all processes; the interpreter's baseline {baseline / 2**20:.0f} MiB "
          f"({torch_baseline / 2**20:.0f} MiB with PyTorch imported, the DataLoader's)")
    print("| | wall | rows/s | GB/s | peak RSS | over baseline |")
    print("|---|---|---|---|---|---|")
    for m in methods:
        w = statistics.median(walls[m])
        b = torch_baseline if m.startswith("dataloader") else baseline
        print(f"| {m} | {w:.2f} s | {rows[m] / w / 1e6:.2f} M | {gb / w:.2f} | "
              f"{peaks[m] / 2**20:.0f} MiB | {(peaks[m] - b) / 2**20:.0f} MiB |")


if __name__ == "__main__":
    main()
