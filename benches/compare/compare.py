#!/usr/bin/env python3
"""Side-by-side benchmark: tilestream vs the physical limit (a C pread loop) vs numpy.

One command (from the repository root):

    python3 benches/compare/compare.py                  # column mean, 3075200x512 f32 (6.3 GB)
    python3 benches/compare/compare.py --task map_f16   # map '(x*2+1)' --dtype f16 vs numpy blocks
    python3 benches/compare/compare.py --task matmul    # 512x64 projection vs in-memory product
    python3 benches/compare/compare.py --task gaussian  # 20000x20000 stencil vs scipy.ndimage

It builds tilestream (release) and the C baseline, creates a virtual environment with
numpy in benches/compare/.venv, generates the input once in benches/compare/work/
(reused when present), warms the page cache, then runs every engine in alternation
--runs times. For each it records the median wall time and the peak resident set of the
child process (os.wait4, the same figure as /usr/bin/time -v "Maximum resident set
size"), and prints a markdown table with ratios to tilestream. Results also go to
benches/compare/results/<task>.json.
"""
import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
VENV = HERE / ".venv"
WORK = HERE / "work"
BIN = ROOT / "target" / "release" / "tilestream"


def sh(cmd, **kw):
    print("+", " ".join(str(c) for c in cmd), file=sys.stderr)
    subprocess.run(cmd, check=True, stdout=sys.stderr, **kw)


def setup(rows, cols):
    sh(["cargo", "build", "--release", "--quiet"], cwd=ROOT)
    sh(["cargo", "bench", "--quiet", "--no-run", "--bench", "matmul_inmem"], cwd=ROOT)
    if not (VENV / "bin" / "python").exists():
        sh([sys.executable, "-m", "venv", str(VENV)])
    py = VENV / "bin" / "python"
    if subprocess.run([py, "-c", "import numpy, scipy, dask.array"], capture_output=True).returncode != 0:
        sh([py, "-m", "pip", "install", "--quiet", "numpy", "scipy", "dask[array]"])
    WORK.mkdir(exist_ok=True)
    cc = shutil.which("cc") or shutil.which("gcc")
    colsum = WORK / "colsum"
    if not colsum.exists() or colsum.stat().st_mtime < (HERE / "colsum.c").stat().st_mtime:
        sh([cc, "-O3", "-march=native", "-o", str(colsum), str(HERE / "colsum.c")])
    x = WORK / f"x_{rows}x{cols}.npy"
    if not x.exists():
        sh([BIN, "gen", x, "--shape", f"{rows}x{cols}", "--dtype", "f32", "--seed", "1", "--memory", "256MiB"])
    return py, colsum, x


def measure(cmd):
    """Runs cmd; returns (seconds, peak RSS bytes of that child). The seconds are the wall
    time, or the figure after "product " when the command prints one (the in-memory
    matmul bench, whose wall time would include loading X into RAM), or after "timed "
    (scipy on an image already loaded)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = p.stdout.read().decode()
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    err = p.stderr.read().decode()
    p.stdout.close()
    p.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{cmd} failed: {err}")
    for marker in ("product ", "timed "):
        if marker in out:
            wall = float(out.split(marker, 1)[1].split(" s", 1)[0])
    return wall, ru.ru_maxrss * 1024


def warm(path):
    """Puts the file in the page cache the way a first sequential read leaves it.

    Evicts it first: how pages are cached (large folios after a sequential read, small
    ones after hours of memory pressure) changes the cost of every memory-mapped read,
    numpy's included, by up to 2x on this kind of machine, so every round starts from the
    same state. Small reads into one reused buffer: a child's ru_maxrss starts from this
    process's high-water mark at fork, so the driver must stay small to measure children
    fairly.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        buf = bytearray(1 << 20)
        with os.fdopen(os.dup(fd), "rb", buffering=0) as f:
            while f.readinto(buf):
                pass
    finally:
        os.close(fd)


def machine():
    cpu = "unknown cpu"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{cpu}, {os.cpu_count()} cores, {mem:.0f} GiB RAM, {platform.system()} {platform.release()}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, help="default 3075200 (20000 for gaussian)")
    ap.add_argument("--cols", type=int, help="default 512 (20000 for gaussian)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--memory", default="256MiB", help="tilestream budget")
    ap.add_argument("--numpy-whole", action="store_true", help="also run numpy on the whole memmap")
    ap.add_argument("--out-dir", help="where write tasks put their outputs (default benches/compare/work; "
                    "e.g. /dev/shm to take the disk's write speed out of the comparison)")
    ap.add_argument("--task", choices=["colmean", "map_f16", "matmul", "gaussian"], default="colmean")
    a = ap.parse_args()
    square = a.task == "gaussian"
    a.rows = a.rows or (20000 if square else 3075200)
    a.cols = a.cols or (20000 if square else 512)

    py, colsum, x = setup(a.rows, a.cols)
    outdir = Path(a.out_dir) if a.out_dir else WORK
    out = outdir / "out.npy"
    out_numpy = outdir / "out_numpy.npy"
    if a.task == "colmean":
        title = "Column mean"
        engines = {
            "tilestream": [BIN, "reduce", x, out, "--op", "mean", "--axis", "0", "--memory", a.memory],
            "C pread 8 MiB, 1 thread (limit)": [colsum, x, str(a.rows), str(a.cols)],
            "numpy memmap, 64 MiB row blocks": [py, HERE / "numpy_colmean.py", x, "blocks"],
            "dask.array, 64 MiB chunks": [py, HERE / "dask_colmean.py", x],
        }
        if a.numpy_whole:
            engines["numpy memmap, whole array"] = [py, HERE / "numpy_colmean.py", x, "whole"]
    elif a.task == "map_f16":
        title = "map '(x*2+1)' --dtype f16 written to disk"
        engines = {
            "tilestream (flushed to disk)": [BIN, "map", "(x*2+1)", out, "--in", f"x={x}", "--dtype", "f16", "--memory", a.memory],
            "numpy memmap, 64 MiB row blocks -> memmap, flush()": [py, HERE / "numpy_map.py", x, out_numpy],
            "tilestream --no-sync (left in page cache)": [BIN, "map", "(x*2+1)", out, "--in", f"x={x}", "--dtype", "f16", "--memory", a.memory, "--no-sync"],
            "numpy as above, no flush()": [py, HERE / "numpy_map.py", x, out_numpy, "noflush"],
        }
    elif a.task == "gaussian":
        title = "Gaussian filter sigma=2 (reflect), result written to disk by tilestream, kept in memory by scipy"
        engines = {
            "tilestream stencil (streamed, written)": [BIN, "stencil", x, out, "--filter", "gaussian:sigma=2", "--memory", a.memory],
            "scipy.ndimage.gaussian_filter, image in memory (filter only)": [py, HERE / "scipy_gaussian.py", x],
        }
    else:
        title = f"Projection {a.rows}x{a.cols} @ {a.cols}x64"
        w = WORK / f"w_{a.cols}x64.npy"
        if not w.exists():
            sh([BIN, "gen", w, "--shape", f"{a.cols}x64", "--dtype", "f32", "--seed", "2"])
        engines = {
            "tilestream matmul (streamed)": [BIN, "matmul", x, w, out, "--memory", a.memory],
            "same kernel, X in memory (product only)": ["cargo", "bench", "--quiet", "--bench", "matmul_inmem", "--", x, w],
        }
    samples = {k: [] for k in engines}
    for r in range(a.runs):
        # every round starts from the same page-cache state (see warm)
        warm(x)
        for name, cmd in engines.items():
            # no engine pays for the writeback of the one before it
            for f in (out, out_numpy):
                f.unlink(missing_ok=True)
            os.sync()
            samples[name].append(measure([str(c) for c in cmd]))
        print(f"run {r + 1}/{a.runs} done", file=sys.stderr)

    size = x.stat().st_size
    base = statistics.median(w for w, _ in next(iter(samples.values())))
    rows = []
    for name, s in samples.items():
        wall = statistics.median(w for w, _ in s)
        rss = max(m for _, m in s)
        rows.append({"engine": name, "median_s": wall, "gb_per_s": size / wall / 1e9,
                     "peak_rss_mib": rss / 2**20, "time_vs_tilestream": wall / base})
    desc = machine()
    print(f"\n{title} of {a.rows}x{a.cols} f32 ({size / 1e9:.2f} GB), page cache warm (evicted, then "
          f"read once sequentially, before each round), median of {a.runs} alternating rounds; "
          f"tilestream --memory {a.memory}; outputs in {outdir}.\nMachine: {desc}\n")
    print("| engine | median wall | GB/s | peak RSS | time / tilestream |")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['engine']} | {r['median_s']:.3f} s | {r['gb_per_s']:.2f} | {r['peak_rss_mib']:.0f} MiB | {r['time_vs_tilestream']:.2f}x |")
    (HERE / "results").mkdir(exist_ok=True)
    tag = f"_{Path(a.out_dir).name}" if a.out_dir else ""
    (HERE / "results" / f"{a.task}{tag}.json").write_text(json.dumps(
        {"machine": desc, "rows": a.rows, "cols": a.cols, "memory": a.memory, "runs": a.runs, "results": rows}, indent=2))


if __name__ == "__main__":
    main()
