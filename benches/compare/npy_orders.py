#!/usr/bin/env python3
"""A column mean of the same array stored three ways, side by side in one run:
``tilestream reduce X m.npy --op mean --axis 0 --memory 256MiB`` on

- the C-order, little-endian ``.npy`` (memory-mapped windows);
- the same values in Fortran order (``np.save(path, a.T)`` of its transpose: read chunk by
  chunk, each run of rows put in C order);
- the same values big-endian (``'>f4'``: read chunk by chunk, bytes swapped).

Each run is the command line as a whole process, rounds alternating, warm page cache (each
file first read back from disk, so that both are cached alike: see ``recache``), the
median wall time of --runs rounds and the largest peak RSS (each child's own ``ru_maxrss``
from ``wait4``, what ``/usr/bin/time -v`` reports). The three results must be the same bytes.

    python benches/compare/npy_orders.py --shape 3075200x512 --bin target/release/tilestream

The Fortran-order file is made by ``tilestream transpose`` (whose C-order output holds
exactly the bytes of the Fortran-order original) with its header rewritten; the
big-endian one by numpy in blocks of rows. The files live in --work; --clean deletes them.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path



BIG_ENDIAN = """
import sys
import numpy as np
src = np.load(sys.argv[1], mmap_mode="r")
out = np.lib.format.open_memmap(sys.argv[2], mode="w+", dtype=">f4", shape=src.shape)
step = max(1, (64 << 20) // (src.shape[1] * 4))
for r in range(0, src.shape[0], step):
    out[r:r + step] = src[r:r + step]
out.flush()
"""


def run(cmd):
    """Wall time and peak RSS (this child's own, from wait4) of one command."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(p.pid, 0)
    s = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}")
    return s, usage.ru_maxrss * 1024


def fortran_header_over(path, shape, dtype):
    """Rewrites the header of ``path`` (a C-order file of the reversed shape) to say
    Fortran order of ``shape``, padded to the same length."""
    with open(path, "r+b") as f:
        f.seek(8)
        hlen = int.from_bytes(f.read(2), "little")
        d = "{'descr': '%s', 'fortran_order': True, 'shape': (%s), }" % (
            dtype, ", ".join(str(s) for s in shape))
        head = d.ljust(hlen - 1) + "\n"
        assert len(head) == hlen, "the new header does not fit the old one's length"
        f.seek(10)
        f.write(head.encode())


def recache(path):
    """Puts ``path`` in the page cache as a file read from disk: flushed, dropped from the
    cache, read again whole.

    How a file's pages entered the cache decides how cheaply a mapping of it faults them
    in. Read from disk, they are large folios, each mapped by one fault; written by many
    small writes, as ``tilestream transpose`` writes the rows of its 2-D tiles, they are
    small ones, mapped 16 base pages a fault. Freshly written, the Fortran-order file
    took 97,000 faults for a column mean where the C-order one (written by ``gen`` in
    whole tiles) took 6,000, and 1.14 s against 0.35 s; the same C-order file copied with
    ``dd bs=16k`` took 97,000 faults too. Read back from disk, both take the same path.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="3075200x512")
    ap.add_argument("--memory", default="256MiB")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--bin", default="target/release/tilestream")
    ap.add_argument("--work", default="target/bench-npy-orders")
    ap.add_argument("--orders", default="c,f,be",
                    help="the files to time: c (C order), f (Fortran order), be (big-endian); "
                         "two of them keep a 6.3 GB pair in a smaller page cache")
    ap.add_argument("--clean", action="store_true")
    a = ap.parse_args()
    rows, cols = (int(d) for d in a.shape.split("x"))
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    c = work / f"c_{a.shape}.npy"
    f = work / f"f_{a.shape}.npy"
    b = work / f"be_{a.shape}.npy"
    if not c.exists():
        subprocess.run([a.bin, "--memory", "1GiB", "gen", str(c), "--shape", a.shape,
                        "--dtype", "f32"], check=True, stdout=subprocess.DEVNULL)
    if not f.exists():
        t = work / "t.npy"
        subprocess.run([a.bin, "--memory", "1GiB", "transpose", str(c), str(t)], check=True,
                       stdout=subprocess.DEVNULL)
        fortran_header_over(t, (rows, cols), "<f4")
        os.replace(t, f)
    orders = set(a.orders.split(","))
    if not b.exists() and "be" in orders:
        # in a process of its own: this one stays small, and a child's peak RSS starts
        # from its parent's at fork
        subprocess.run([sys.executable, "-c", BIG_ENDIAN, str(c), str(b)], check=True)
    nbytes = c.stat().st_size
    files = {name: p for name, key, p in (("C order", "c", c), ("Fortran order", "f", f),
                                          ("big-endian", "be", b)) if key in orders | {"c"}}
    for p in files.values():
        recache(p)
    print(f"column mean of {a.shape} f32 ({nbytes / 1e9:.2f} GB), --memory {a.memory}, warm, "
          f"medians of {a.runs} alternating rounds")
    times = {k: [] for k in files}
    peaks = {k: [] for k in files}
    for _ in range(a.runs):
        for name, p in files.items():
            out = work / f"m_{name.replace(' ', '_')}.npy"
            s, peak = run([a.bin, "--memory", a.memory, "reduce", str(p), str(out),
                           "--op", "mean", "--axis", "0"])
            times[name].append(s)
            peaks[name].append(peak)
    ref = (work / "m_C_order.npy").read_bytes()
    base = statistics.median(times["C order"])
    for name in files:
        same = (work / f"m_{name.replace(' ', '_')}.npy").read_bytes() == ref
        s = statistics.median(times[name])
        peak = f"{max(peaks[name]) / 2**20:6.0f} MiB"
        print(f"{name:14} {s:6.2f} s  {nbytes / s / 1e9:5.2f} GB/s  {s / base:4.2f}x  "
              f"peak RSS {peak}{'' if same else '  RESULT DIFFERS'}")
    if a.clean:
        for p in (c, f, b):
            if p.exists():
                p.unlink()


if __name__ == "__main__":
    main()
