#!/usr/bin/env python3
"""The GPU kit: what a short session on a GPU machine runs, in commands that each fit in
a few minutes and each leave one tarball and one summary.

    python3 benches/gpu/kit.py smoke   # versions, every operation CPU vs CUDA, sanitizer, limits
    python3 benches/gpu/kit.py suite   # the GPU tests (target/gpu/it) with CUDA required
    python3 benches/gpu/kit.py bench   # the GPU benchmark beside CuPy and PyTorch

Build first, here: `bash benches/gpu/build.sh` (target/gpu: the stripped binary and
tests). On the GPU machine run from the repository root with `carry: ["target/gpu"]`;
results go to $OUT (else benches/gpu/out): `summary-MODE.txt` (figures, versions,
pass/fail counts) and `MODE.tar.gz` (every log and report). `--device cpu` runs smoke
and bench with the CPU in the GPU's place and `--small` shrinks bench's inputs: CI runs
both so the kit cannot rot (tests/it/gpu_kit.rs). docs/gpu.md says which call to make.

Every figure is taken without /usr/bin/time: peak RSS from wait4's rusage, peak device
memory from nvidia-smi sampled every 50 ms (less the memory used before the run).
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class Out:
    """The mode's folder of logs, its summary lines, and the tarball at the end."""

    def __init__(self, base, mode):
        self.base = Path(base)
        self.mode = mode
        self.dir = self.base / mode
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        self.lines = []
        self.failures = 0

    def say(self, line=""):
        print(line, flush=True)
        self.lines.append(line)

    def fail(self, line):
        self.failures += 1
        self.say("FAIL " + line)

    def finish(self):
        self.say(f"{self.mode}: {'PASS' if self.failures == 0 else f'{self.failures} FAILED'}")
        (self.base / f"summary-{self.mode}.txt").write_text("\n".join(self.lines) + "\n")
        with tarfile.open(self.base / f"{self.mode}.tar.gz", "w:gz") as t:
            t.add(self.dir, arcname=self.mode)
        shutil.rmtree(self.dir, ignore_errors=True)
        return 0 if self.failures == 0 else 1


def nvrtc_env():
    """NVRTC from the machine's Python wheel and the toolkit, for the binary and tests."""
    dirs = []
    try:
        import nvidia  # the nvidia-cuda-nvrtc wheel (PyTorch's dependency)

        for p in nvidia.__path__:
            for sub in ("cu13/lib", "cuda_nvrtc/lib"):
                if (Path(p) / sub).is_dir():
                    dirs.append(str(Path(p) / sub))
    except ImportError:
        pass
    for d in (os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"):
        if d and (Path(d) / "lib64").is_dir():
            dirs.append(str(Path(d) / "lib64"))
    env = dict(os.environ)
    env["TILESTREAM_NVRTC_DIRS"] = ":".join(dirs)
    env["LD_LIBRARY_PATH"] = ":".join(dirs + [env.get("LD_LIBRARY_PATH", "")]).strip(":")
    return env


class GpuMemory:
    """Peak device memory used while it runs, from nvidia-smi every 50 ms, less what was
    used when it started (None without nvidia-smi)."""

    def __init__(self):
        self.proc = None
        self.base = None
        self.peak = None

    def __enter__(self):
        if shutil.which("nvidia-smi"):
            q = ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"]
            try:
                self.base = int(subprocess.run(q, capture_output=True, text=True).stdout.split()[0])
                self.proc = subprocess.Popen(q + ["-lms", "50"], stdout=subprocess.PIPE, text=True)
                self.peak = self.base
                self.t = threading.Thread(target=self._read, daemon=True)
                self.t.start()
            except (OSError, ValueError, IndexError):
                self.proc = None
        return self

    def _read(self):
        for line in self.proc.stdout:
            try:
                self.peak = max(self.peak, int(line.strip()))
            except ValueError:
                pass

    def __exit__(self, *_):
        if self.proc:
            time.sleep(0.12)
            self.proc.terminate()
            self.proc.wait()

    def used_mib(self):
        return None if self.proc is None else self.peak - self.base


def run(argv, env, timeout, log=None):
    """Runs argv (killed after `timeout` s); returns rc, wall seconds, stdout, stderr."""
    t0 = time.perf_counter()
    with open(os.devnull, "rb") as null:
        p = subprocess.Popen(argv, env=env, stdin=null, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    timer = threading.Timer(timeout, p.kill)
    timer.start()
    try:
        out, err = p.communicate()
    finally:
        timer.cancel()
    wall = time.perf_counter() - t0
    if log is not None:
        Path(log).write_bytes(b"$ " + " ".join(map(str, argv)).encode() + b"\n" + out + b"\n--- stderr\n" + err)
    return p.returncode, wall, out.decode(errors="replace"), err.decode(errors="replace")


# A child's peak RSS (wait4's ru_maxrss) starts from its parent's at the fork (Linux
# carries the parent's high-water mark through fork and exec), and this process holds
# numpy and compared arrays: each measured command is started by a fresh minimal Python
# (a few MiB) that forks it, waits for it and writes its ru_maxrss to a file.
SPAWN = """
import os, sys
out, argv = sys.argv[1], sys.argv[2:]
pid = os.fork()
if pid == 0:
    try:
        os.execvp(argv[0], argv)
    finally:
        os._exit(127)
_, status, ru = os.wait4(pid, 0)
open(out, "w").write(str(ru.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status) & 255)
"""


def run_rss(argv, env, timeout, log):
    """Runs argv; returns rc, wall seconds, peak RSS (MiB, the child's own), stdout, stderr."""
    rss_file = Path(str(log) + ".rss")
    rc, wall, out, err = run([sys.executable, "-S", "-c", SPAWN, str(rss_file)] + list(map(str, argv)), env, timeout, log)
    try:
        rss = int(rss_file.read_text()) / 1024
    except (OSError, ValueError):
        rss = float("nan")
    return rc, wall, rss, out, err


def versions(o, bin_, env):
    cmds = {
        "nvidia-smi": ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,memory.used,clocks.max.sm", "--format=csv"],
        "devices": [bin_, "devices", "--json"],
        "nvcc": ["nvcc", "--version"],
        "compute-sanitizer": [sanitizer() or "compute-sanitizer", "--version"],
        "os": ["sh", "-c", ". /etc/os-release; echo $PRETTY_NAME; uname -r; ldd --version | head -1; nproc; free -g | head -2"],
        "python": [sys.executable, "-c", "import numpy; print('numpy', numpy.__version__)\n"
                   "for m in ('torch', 'cupy'):\n"
                   "    try:\n        print(m, __import__(m).__version__)\n"
                   "    except Exception as e:\n        print(m, 'missing', e)"],
    }
    for name, argv in cmds.items():
        try:
            rc, _, out, err = run(argv, env, 60, o.dir / f"version-{name}.txt")
            text = (out + err).strip().splitlines()
            o.say(f"{name}: " + " | ".join(l.strip() for l in text[:6] if l.strip()))
        except OSError as e:
            o.say(f"{name}: not found ({e.strerror})")


def driver_mib(bin_, env, device):
    """The CUDA driver's own host memory (MiB, rounded up) that a run on `device` takes
    from --memory, as `tilestream devices --json` measures it (0 on the CPU)."""
    if device == "cpu":
        return 0
    rc, _, out, _ = run([bin_, "devices", "--json"], env, 60)
    try:
        return -(-int(json.loads(out)["driver_host_bytes"]) // (1 << 20)) if rc == 0 else 0
    except (ValueError, KeyError):
        return 0


def on_device(budget, a, bin_, env):
    """`budget` (a size in MiB) for tilestream's own buffers, plus the driver's share on a
    GPU: the same tiles as the CPU run at `budget`."""
    if not hasattr(a, "_driver_mib"):
        a._driver_mib = driver_mib(bin_, env, a.device)
    return f"{int(parse_size(budget) / 2**20) + a._driver_mib}MiB"


def sanitizer():
    for c in ("compute-sanitizer", "/usr/local/cuda/bin/compute-sanitizer"):
        if shutil.which(c):
            return shutil.which(c)
    return None


def npy_data(path):
    """The data bytes of a .npy file (header skipped)."""
    with open(path, "rb") as f:
        head = f.read(12)
        n = 10 + int.from_bytes(head[8:10], "little") if head[6] == 1 else 12 + int.from_bytes(head[8:12], "little")
        f.seek(n)
        return f.read()


def same_npy(a, b, rel=0.0):
    """Equal values (NaN equal to NaN), checked in 64 MiB pieces; or why not. With `rel`,
    values may differ by up to `rel` times the reference's largest magnitude (matmul: the
    CPU's blocked sgemm and the GPU's in-order sums round differently, docs/gpu.md)."""
    import numpy as np

    try:
        import ml_dtypes  # noqa: F401  (bfloat16 files)

        x, y = np.load(a, mmap_mode="r"), np.load(b, mmap_mode="r")
    except (ImportError, ValueError):  # a dtype numpy cannot name: the bytes must be equal
        return None if npy_data(a) == npy_data(b) else "the bytes differ"
    if x.shape != y.shape or x.dtype != y.dtype:
        return f"{x.shape} {x.dtype} vs {y.shape} {y.dtype}"
    xf, yf = x.reshape(-1), y.reshape(-1)
    step = max(1, (64 << 20) // max(1, x.dtype.itemsize))
    bad, worst, top = 0, 0.0, 0.0
    for i in range(0, xf.size, step):
        if rel and x.dtype.kind == "f":
            top = max(top, float(np.nanmax(np.abs(np.asarray(xf[i : i + step], dtype=np.float64)), initial=0.0)))
    for i in range(0, xf.size, step):
        p, q = np.asarray(xf[i : i + step]), np.asarray(yf[i : i + step])
        if p.tobytes() == q.tobytes():
            continue
        if p.dtype.kind == "f":
            ne = ~((p == q) | (np.isnan(p) & np.isnan(q)))
            if rel:
                close = np.abs(p.astype(np.float64) - q.astype(np.float64)) <= rel * top
                ne &= ~close
            if ne.any():
                bad += int(ne.sum())
                d = np.abs(p[ne].astype(np.float64) - q[ne].astype(np.float64))
                worst = max(worst, float(np.nanmax(d)) if d.size else 0.0)
        else:
            bad += int((p != q).sum())
    return None if bad == 0 else f"{bad} elements differ (largest difference {worst:g})"


# --- smoke ------------------------------------------------------------------------------

def smoke_cases(w):
    f = lambda n: str(w / n)
    cases = [
        ("gen-demo-f32", ["gen", "{out}", "--shape", "3001x257", "--dtype", "f32", "--seed", "3"]),
        ("gen-uniform-u8", ["gen", "{out}", "--shape", "100003", "--dtype", "u8", "--dist", "uniform", "--low", "0", "--high", "250", "--seed", "4"]),
        ("gen-normal-f16", ["gen", "{out}", "--shape", "7x611x3", "--dtype", "f16", "--dist", "normal", "--mean", "2", "--std", "9", "--seed", "5"]),
        ("affine-f16", ["affine", f("x.npy"), "{out}", "--scale", "2", "--offset", "1", "--dtype", "f16"]),
        ("cast-bf16", ["cast", f("x.npy"), "{out}", "--dtype", "bf16"]),
        ("cast-u8", ["cast", f("x.npy"), "{out}", "--dtype", "u8"]),
        ("map", ["map", "sqrt(abs(x)) * 2 - x / 3", "{out}", "--in", "x=" + f("x.npy")]),
        ("ndvi-masked", ["map", "(s[3] - s[2]) / (s[3] + s[2])", "{out}", "--in", "s=" + f("scene.npy"), "--in-nodata", "s=0", "--dtype", "f32"]),
        ("standardize", ["standardize", f("x.npy"), "{out}"]),
        ("matmul", ["matmul", f("x.npy"), f("w.npy"), "{out}"]),
        ("transpose", ["transpose", f("x.npy"), "{out}"]),
    ]
    for op in ("sum", "mean", "min", "max", "var", "std"):
        for axis in ("0", "1", None):
            cases.append((f"reduce-{op}-{axis or 'all'}", ["reduce", f("x.npy"), "{out}", "--op", op] + (["--axis", axis] if axis else [])))
    # the nan forms and count: over NaN and -inf (log of a normal sample), and over an
    # integer scene with a nodata value that occurs (the masked CUDA families)
    for op in ("nansum", "nanmean", "nanmin", "nanmax", "nanvar", "nanstd", "count"):
        for axis in ("0", None):
            cases.append((f"reduce-{op}-{axis or 'all'}", ["reduce", f("xnan.npy"), "{out}", "--op", op] + (["--axis", axis] if axis else [])))
        cases.append((f"reduce-{op}-nodata", ["reduce", f("scene.npy"), "{out}", "--op", op, "--axis", "1", "--in-nodata", "0"]))
    for flt in ("gaussian:sigma=2", "box:size=5", "sobel", "median:size=3", "median:size=7", "convolve:" + f("k.npy")):
        name = flt.split("/")[0].replace(":", "-").replace("=", "").replace(",", "-")
        cases.append(("stencil-" + (name if not flt.startswith("convolve") else "convolve"), ["stencil", f("img.npy"), "{out}", "--filter", flt]))
    return cases


def smoke(a, o, bin_, env):
    versions(o, bin_, env)
    w = Path(a.work)
    w.mkdir(parents=True, exist_ok=True)
    mk = [
        ["gen", str(w / "x.npy"), "--shape", "3001x257", "--dtype", "f32", "--seed", "1", "--dist", "normal", "--std", "40"],
        ["gen", str(w / "w.npy"), "--shape", "257x64", "--dtype", "f32", "--seed", "2", "--dist", "normal"],
        ["gen", str(w / "img.npy"), "--shape", "1031x1537", "--dtype", "f32", "--seed", "3"],
        ["gen", str(w / "scene.npy"), "--shape", "4x517x613", "--dtype", "u16", "--dist", "uniform", "--low", "0", "--high", "700", "--seed", "4"],
        ["gen", str(w / "k.npy"), "--shape", "5x5", "--dtype", "f32", "--seed", "5", "--dist", "normal"],
        ["map", "log(x)", str(w / "xnan.npy"), "--in", "x=" + str(w / "x.npy")],
    ]
    for m in mk:
        rc, *_ , err = run([bin_] + m + ["--device", "cpu", "--progress", "never", "--no-sync"], env, 60)
        if rc:
            o.fail(f"making the inputs: {err.strip()}")
            return
    dev = a.device
    # a GPU run's budget holds the driver's own host memory besides (measured by another
    # process, so with room to spare); small tiles come from --max-tile
    small, large = on_device("32MiB", a, bin_, env), on_device("512MiB", a, bin_, env)
    tiny = ["--max-tile", "64KiB"]
    o.say(f"every operation on cpu and {dev}, at {large} and at {small} with 64 KiB tiles: "
          f"outputs compared with the CPU's at 512MiB")
    o.say(f"{'case':<28} {'cpu_s':>7} {dev + '_s':>8}  result")
    cases = smoke_cases(w)
    for name, argv in cases if not a.sanitizer_only else []:
        ref = w / f"{name}-cpu.npy"
        times = {}
        verdict = "equal"
        for device, budget, extra in (("cpu", "512MiB", []), (dev, large, []), (dev, small, tiny)):
            out = w / f"{name}-{device}-{budget}.npy" if (device, budget) != ("cpu", "512MiB") else ref
            args = [bin_] + [s.replace("{out}", str(out)) for s in argv] + [
                "--device", device, "--memory", budget, "--json", "--progress", "never", "--no-sync"] + extra
            rc, wall, stdout, err = run(args, env, 120, o.dir / f"smoke-{name}-{device}-{budget}.log")
            if rc:
                verdict = f"{device} at {budget} failed: {err.strip().splitlines()[-1] if err.strip() else rc}"
                break
            rep = json.loads(stdout)
            if device != "cpu" and not rep["device"].startswith(device.split(":")[0]):
                verdict = f"ran on {rep['device']}, not {device}"
                break
            times.setdefault(device, wall)
            if out != ref:
                why = same_npy(ref, out, rel=1e-5 if name == "matmul" and device != "cpu" else 0.0)
                if why:
                    verdict = f"{device} at {budget}: {why}"
                    break
        line = f"{name:<28} {times.get('cpu', 0):7.2f} {times.get(dev, 0):8.2f}  {verdict}"
        (o.say if verdict == "equal" else o.fail)(line)
    o.say(f"cases: {len(cases)}")
    # the sanitizer on a small run of every kernel family
    san = sanitizer()
    if dev == "cpu":
        o.say("compute-sanitizer: not run (--device cpu)")
    elif not san:
        o.fail("compute-sanitizer: not found")
    else:
        families = ["gen-demo-f32", "affine-f16", "cast-bf16", "map", "ndvi-masked", "standardize", "matmul",
                    "transpose", "reduce-var-0", "reduce-sum-all", "reduce-max-1",
                    "reduce-nanvar-0", "reduce-nanmean-all", "reduce-nanmax-nodata", "reduce-count-nodata", "stencil-gaussian-sigma2",
                    "stencil-median-size7", "stencil-sobel", "stencil-convolve"]
        by = dict(cases)
        jobs = [(tool, fam) for tool in a.sanitizers.split(",") for fam in families]

        # 1 GiB: under the sanitizer the CUDA driver holds more host memory of its own
        # (432 MiB under racecheck, 2026-11-30), which a GPU run counts in --memory; the
        # tiles stay small through --max-tile
        def one(job):
            tool, fam = job
            out = w / f"san-{tool}-{fam}.npy"
            args = [san, "--tool", tool, "--error-exitcode", "99", "--print-limit", "10", bin_] + [
                s.replace("{out}", str(out)) for s in by[fam]] + ["--device", dev, "--memory", "1GiB", "--progress", "never", "--no-sync"] + tiny
            rc, wall, out_, err = run(args, env, 150, o.dir / f"sanitizer-{tool}-{fam}.log")
            summ = [l for l in (out_ + err).splitlines() if "ERROR SUMMARY" in l or "RACECHECK SUMMARY" in l]
            return tool, fam, rc, wall, (summ[-1].strip() if summ else (err.strip().splitlines() or ["?"])[-1])

        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max(1, min(6, (os.cpu_count() or 1) // 2))) as ex:
            for tool, fam, rc, wall, s in ex.map(one, jobs):
                line = f"sanitizer {tool:<9} {fam:<26} {wall:6.1f}s rc={rc} {s}"
                (o.say if rc == 0 else o.fail)(line)
    if not a.sanitizer_only:
        limits(a, o, bin_, env, w)


def page_cache_rate(path, threads, seconds=2.0):
    """GB/s of positioned reads of a warm file by `threads` threads, 16 MiB each."""
    size = os.path.getsize(path)
    piece = 16 << 20
    fd = os.open(path, os.O_RDONLY)
    total = [0] * threads

    def reader(k):
        buf = bytearray(piece)
        off = k * piece
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            if off + piece > size:
                off = (off + piece) % max(piece, size - piece)
            total[k] += os.preadv(fd, [buf], off)
            off += threads * piece

    ts = [threading.Thread(target=reader, args=(k,)) for k in range(threads)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    os.close(fd)
    return sum(total) / (time.perf_counter() - t0) / 1e9


def copy_rates():
    """Pinned host-to-device and device-to-host, and device-to-device copy rates (GB/s),
    1 GiB, median of 5, through PyTorch (CUDA events)."""
    import torch

    n = 1 << 30
    h = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    h.fill_(7)
    d = torch.empty(n, dtype=torch.uint8, device="cuda")
    d2 = torch.empty(n, dtype=torch.uint8, device="cuda")

    def timed(f, nbytes):
        ts = []
        for _ in range(6):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            f()
            e.record()
            e.synchronize()
            ts.append(s.elapsed_time(e) / 1e3)
        return nbytes / statistics.median(ts[1:]) / 1e9

    return {
        "h2d_pinned": timed(lambda: d.copy_(h, non_blocking=True), n),
        "d2h_pinned": timed(lambda: h.copy_(d, non_blocking=True), n),
        "d2d (read+write)": timed(lambda: d2.copy_(d), 2 * n),
    }


def write_rates(w, total=4 << 30):
    """GB/s of writing a new file of `total` bytes in `w`: one thread's positioned writes,
    16 threads' positioned writes (one file: the kernel serializes buffered writes on the
    file's lock), and 16 threads copying into a shared mapping of it."""
    import mmap

    import numpy as np

    piece = 64 << 20
    src = np.random.default_rng(1).integers(0, 255, piece, dtype=np.uint8)
    path = w / "write-limit.bin"
    out = {}
    threads = os.cpu_count() or 1

    def fresh():
        path.unlink(missing_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        os.ftruncate(fd, total)
        return fd

    for name, nthreads in (("pwrite, 1 thread", 1), (f"pwrite, {threads} threads", threads)):
        fd = fresh()
        offs = list(range(0, total, piece))
        t0 = time.perf_counter()

        def worker(k):
            for off in offs[k::nthreads]:
                os.pwrite(fd, memoryview(src), off)

        ts = [threading.Thread(target=worker, args=(k,)) for k in range(nthreads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        out[name] = total / (time.perf_counter() - t0) / 1e9
        os.close(fd)
    fd = fresh()
    m = mmap.mmap(fd, total, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    dst = np.frombuffer(m, dtype=np.uint8)
    t0 = time.perf_counter()

    def copier(k):
        for off in range(k * piece, total, threads * piece):
            np.copyto(dst[off : off + piece], src)

    ts = [threading.Thread(target=copier, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    out[f"shared mapping, {threads} threads"] = total / (time.perf_counter() - t0) / 1e9
    del dst
    m.close()
    os.close(fd)
    path.unlink()
    return out


def limits(a, o, bin_, env, w):
    f = w / "limit.npy"
    size = "16384x16384" if not a.small else "2048x2048"
    rc, *_ = run([bin_, "gen", str(f), "--shape", size, "--dtype", "f32", "--device", "cpu", "--progress", "never", "--no-sync"], env, 120)
    if rc:
        o.fail("could not make the page-cache file")
        return
    with open(f, "rb") as fh:
        while fh.read(64 << 20):
            pass
    cores = os.cpu_count() or 1
    o.say(f"limit page-cache read, 1 thread: {page_cache_rate(f, 1):.2f} GB/s")
    o.say(f"limit page-cache read, {cores} threads: {page_cache_rate(f, cores):.2f} GB/s ({os.path.getsize(f) >> 20} MiB file, warm)")
    try:
        for k, v in copy_rates().items():
            o.say(f"limit copy {k}: {v:.2f} GB/s")
    except Exception as e:  # no torch or no GPU here
        o.say(f"limit copies: not measured ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})")
    f.unlink()


# --- suite ------------------------------------------------------------------------------

def suite(a, o, bin_, env):
    it = ROOT / "target/gpu/it"
    if not it.exists():
        o.fail("target/gpu/it missing: run benches/gpu/build.sh here and carry target/gpu")
        return
    # TILESTREAM_BIN: tests that run the command line find the carried binary, not the
    # build folder's path compiled into them
    env = dict(env, TILESTREAM_REQUIRE_GPU="1", TILESTREAM_REQUIRE_NVRTC="1", RUST_BACKTRACE="1",
               TILESTREAM_BIN=str(bin_))
    filters = ["gpu::", "cuda_kernels::", "map_oracle::", "standardize::", "matmul::", "reduce_oracle::", "blocks::page_locked"]
    threads = str(a.threads or min(8, os.cpu_count() or 1))
    rc, wall, out, err = run([str(it)] + filters + ["--test-threads", threads, "--nocapture"], env, a.timeout,
                                  o.dir / "suite.log")
    text = out + err
    backends = [l for l in text.splitlines() if l.startswith("backends:")]
    o.say(backends[0] if backends else "backends: (no line: the suite did not reach a device test)")
    res = [l for l in text.splitlines() if l.startswith("test result:")]
    o.say(res[-1] if res else f"no result line (exit {rc}, {wall:.0f}s: killed at the time limit?)")
    for l in text.splitlines():
        if l.startswith("test ") and l.endswith("FAILED"):
            o.fail(l)
    fails = [l for l in text.splitlines() if "panicked at" in l]
    for l in fails[:10]:
        o.say("  " + l.strip()[:300])
    o.say(f"suite: exit {rc} in {wall:.0f}s with {threads} test threads")
    if rc != 0 or not backends or "cuda" not in backends[0]:
        o.fail("the GPU suite did not pass with CUDA running")
    python_on_gpu(a, o, env)


def python_on_gpu(a, o, env):
    """The Python package's GPU path: examples/gpu_model.py (a PyTorch model over blocks
    in page-locked memory, checked against the model on the whole scene), with the wheel
    benches/gpu/build.sh built, installed into the work folder."""
    wheels = sorted((ROOT / "target/gpu").glob("tilestream-*.whl"))
    if not wheels:
        o.say("python: no wheel in target/gpu (benches/gpu/build.sh builds one): not run")
        return
    site = Path(a.work) / "site"
    rc, _, out, err = run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                           "--target", str(site), str(wheels[-1])], env, 300, o.dir / "pip.log")
    if rc != 0:
        o.fail(f"python: the wheel did not install: {(err or out).strip().splitlines()[-1:]}")
        return
    penv = dict(env, PYTHONPATH=str(site))
    rc, wall, out, err = run([sys.executable, str(ROOT / "examples/gpu_model.py"), "4096"], penv,
                             a.timeout, o.dir / "gpu_model.log")
    last = (out.strip().splitlines() or ["(no output)"])[-1]
    o.say(f"python: examples/gpu_model.py 4096: exit {rc} in {wall:.0f}s: {last}")
    if rc != 0 or "equal the model's" not in out:
        o.fail("python: the GPU model example did not pass"
               + (f": {err.strip().splitlines()[-1]}" if err.strip() else ""))
    # ts.batches to the GPU (issue 46): the copy overlapped with the reading, and the
    # device's batches the host's, on the 6.3 GB matrix
    rc, wall, out, err = run([sys.executable, str(ROOT / "benches/gpu/batches.py"), "3075200",
                              "--device", "cuda", "--work", str(a.work)], penv, a.timeout,
                             o.dir / "batches.log")
    for line in out.strip().splitlines():
        o.say("python: " + line)
    if rc != 0 or "batches.py: ok" not in out:
        o.fail(f"python: benches/gpu/batches.py did not pass (exit {rc} in {wall:.0f}s)"
               + (f": {err.strip().splitlines()[-1]}" if err.strip() else ""))


# --- bench ------------------------------------------------------------------------------

def bench_tasks(w, small):
    rows, side, scene = (3075200, 20000, 20000) if not small else (30752, 2000, 2000)
    return {
        "inputs": [
            ["gen", str(w / "x.npy"), "--shape", f"{rows}x512", "--dtype", "f32", "--seed", "1"],
            ["gen", str(w / "w.npy"), "--shape", "512x64", "--dtype", "f32", "--seed", "2", "--dist", "normal"],
            ["gen", str(w / "img.npy"), "--shape", f"{side}x{side}", "--dtype", "f32", "--seed", "4"],
            ["gen", str(w / "scene.npy"), "--shape", f"4x{scene}x{scene}", "--dtype", "u16", "--dist", "uniform", "--low", "0", "--high", "4000", "--seed", "5"],
        ],
        "tasks": {
            "colmean": (["reduce", str(w / "x.npy"), "{out}", "--op", "mean", "--axis", "0"], [w / "x.npy"]),
            "colstd": (["reduce", str(w / "x.npy"), "{out}", "--op", "std", "--axis", "0"], [w / "x.npy"]),
            "affine16": (["affine", str(w / "x.npy"), "{out}", "--scale", "2", "--offset", "1", "--dtype", "f16"], [w / "x.npy"]),
            "projection": (["matmul", str(w / "x.npy"), str(w / "w.npy"), "{out}"], [w / "x.npy", w / "w.npy"]),
            "gaussian": (["stencil", str(w / "img.npy"), "{out}", "--filter", "gaussian:sigma=2"], [w / "img.npy"]),
            "ndvi": (["map", "(s[3] - s[2]) / (s[3] + s[2])", "{out}", "--in", "s=" + str(w / "scene.npy"), "--in-nodata", "s=0", "--dtype", "f32"], [w / "scene.npy"]),
        },
    }


def bench(a, o, bin_, env):
    w = Path(a.work)
    w.mkdir(parents=True, exist_ok=True)
    spec = bench_tasks(w, a.small)
    for m in spec["inputs"]:
        rc, wall, *_ , err = run([bin_] + m + ["--memory", "1GiB", "--progress", "never", "--no-sync", "--device", "cpu"], env, 300)
        if rc:
            o.fail(f"making {m[1]}: {err.strip()}")
            return
    for p in w.glob("*.npy"):  # warm
        with open(p, "rb") as fh:
            while fh.read(64 << 20):
                pass
    size = os.path.getsize(w / "x.npy")
    cores = os.cpu_count() or 1
    pc = page_cache_rate(w / "x.npy", cores)
    o.say(f"limit page-cache read of x.npy ({size / 1e9:.1f} GB), {cores} threads: {pc:.2f} GB/s")
    try:
        cr = copy_rates()
        for k, v in cr.items():
            o.say(f"limit copy {k}: {v:.2f} GB/s")
    except Exception as e:
        cr = {}
        o.say(f"limit copies: not measured ({type(e).__name__})")
    for k, v in write_rates(w, (4 << 30) if not a.small else (64 << 20)).items():
        o.say(f"limit write of a new file in {w.parent}, {k}: {v:.2f} GB/s")
    dev = a.device
    engines = [("tilestream", "cpu")] + ([("tilestream", dev)] if a.only != "baselines" else [])
    have = {}
    for fw in ("torch", "cupy"):
        rc, *_ = run([sys.executable, "-c", f"import {fw}; assert {'torch.cuda.is_available()' if fw == 'torch' else 'cupy.cuda.runtime.getDeviceCount()'}"], env, 120)
        have[fw] = rc == 0
    if dev != "cpu" and a.only != "tilestream":
        engines += [(f"{fw} chunked", fw) for fw in ("torch", "cupy") if have[fw]]
        engines += [("cupy whole", "cupy")] if have["cupy"] else []
    o.say(f"{'task':<11} {'engine':<16} {'median_s':>9} {'GB/s':>7} {'rss_MiB':>8} {'dev_MiB':>8}  runs  check")
    reps = 3
    results = {}
    tasks = {k: v for k, v in spec["tasks"].items() if not a.tasks or k in a.tasks.split(",")}
    for task, (argv, ins) in tasks.items():
        in_bytes = sum(os.path.getsize(p) for p in ins)
        ref = w / f"{task}-ref.npy"
        for name, device in engines:
            walls, rss, devmem, check = [], [], [], ""
            n_runs = 1 if (a.only == "baselines" and name == "tilestream") else reps
            for r in range(n_runs):
                out = ref if (name, device, r) == ("tilestream", "cpu", 0) else w / f"{task}-out.npy"
                if name == "tilestream":
                    args = [bin_] + [s.replace("{out}", str(out)) for s in argv] + [
                        "--device", device, "--memory", a.memory, "--json", "--progress", "never", "--no-sync"]
                else:
                    fw, mode = name.split()
                    args = [sys.executable, str(ROOT / "benches/gpu/baselines.py"), fw, mode, task, str(out)] + [str(p) for p in ins]
                with GpuMemory() as g:
                    rc, wall, peak, stdout, err = run_rss(args, env, 600, o.dir / f"bench-{task}-{name.replace(' ', '_')}-{device}-{r}")
                if rc:
                    check = f"failed: {(err.strip().splitlines() or [str(rc)])[-1][:200]}"
                    break
                rep = json.loads(stdout.strip().splitlines()[-1])
                if name == "tilestream":
                    walls.append(wall)
                    if not rep["device"].startswith(device.split(":")[0]):
                        check = f"ran on {rep['device']}"
                else:
                    walls.append(rep["wall_s"])
                rss.append(peak)
                devmem.append(g.used_mib())
                if out != ref and r == 0:
                    why = same_npy(ref, out, rel=1e-5 if task == "projection" or name != "tilestream" else 0.0)
                    check = check or ("equal to the CPU's" if why is None else ("differs: " + why))
            if not walls:
                o.fail(f"{task:<11} {name:<16} {check}")
                continue
            med = statistics.median(walls)
            out_bytes = os.path.getsize(w / f"{task}-ref.npy")
            gbs = (in_bytes + out_bytes) / med / 1e9
            dm = max((d for d in devmem if d is not None), default=None)
            results[(task, name, device)] = med
            line = f"{task:<11} {name + ('' if name != 'tilestream' else ' ' + device):<16} {med:9.3f} {gbs:7.2f} {max(rss):8.0f} {dm if dm is not None else '-':>8}  {len(walls)}     {check or 'reference'}"
            bad = check.startswith("failed") or check.startswith("ran on") or (name == "tilestream" and check.startswith("differs"))
            (o.fail if bad else o.say)(line)
        (w / f"{task}-out.npy").unlink(missing_ok=True)
    # the budgets: peak RSS within --memory + 48 MiB and the same output at each
    if a.budgets:
        o.say(f"budgets on {dev}: peak RSS <= budget + 48 MiB, output equal to the CPU's")
        for task, (argv, ins) in tasks.items():
            for budget in a.budgets.split(","):
                out = w / f"{task}-b.npy"
                args = [bin_] + [s.replace("{out}", str(out)) for s in argv] + [
                    "--device", dev, "--memory", budget, "--json", "--progress", "never", "--no-sync"]
                with GpuMemory() as g:
                    rc, wall, peak, stdout, err = run_rss(args, env, 600, o.dir / f"budget-{task}-{budget}")
                if rc:
                    why = (err.strip().splitlines() or [str(rc)])[-1][:200]
                    if "too small for a run on cuda" in why and parse_size(budget) <= (driver_mib(bin_, env, dev) + 64) * 2**20:
                        o.say(f"{task:<11} {budget:>7} refused, as it must be: {why}")
                    else:
                        o.fail(f"{task} at {budget}: {why}")
                    continue
                rep = json.loads(stdout)
                lim = parse_size(budget) / 2**20 + 48
                why = same_npy(w / f"{task}-ref.npy", out, rel=1e-5 if task == "projection" else 0.0)
                line = f"{task:<11} {budget:>7} {wall:8.3f}s rss {peak:7.0f} MiB (limit {lim:.0f}) dev {g.used_mib()} MiB  {rep['device']}  {'equal' if why is None else why}"
                (o.say if why is None and peak <= lim else o.fail)(line)
                out.unlink(missing_ok=True)
    for p in w.glob("*"):
        p.unlink()


def parse_size(s):
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    for u, m in units.items():
        if s.endswith(u):
            return float(s[: -len(u)]) * m
    return float(s)


def unpack(folder):
    """build.sh carries the binaries gzipped (they are 35-40 MiB each, the carry 64 MiB
    in all): unpacked here once, executable."""
    import gzip

    for gz in sorted(folder.glob("*.gz")) if folder.is_dir() else []:
        dst = gz.with_suffix("")
        if not dst.exists():
            with gzip.open(gz, "rb") as src, open(dst, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
            dst.chmod(0o755)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=["smoke", "suite", "bench"])
    ap.add_argument("--device", default="cuda", help="the device under test (cpu in CI)")
    ap.add_argument("--small", action="store_true", help="bench's inputs a hundredth of the size")
    ap.add_argument("--bin", help="the tilestream binary (default target/gpu/tilestream, else target/release)")
    ap.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "benches/gpu/out"))
    ap.add_argument("--work", help="scratch folder (default /dev/shm/tilestream-kit, else a temp dir)")
    ap.add_argument("--memory", default="512MiB", help="bench's --memory")
    ap.add_argument("--budgets", default="", help="bench: also run each task at these budgets (64MiB,8GiB)")
    ap.add_argument("--threads", type=int, help="suite: test threads")
    ap.add_argument("--tasks", default="", help="bench: these tasks only (colmean,colstd,affine16,projection,gaussian,ndvi)")
    ap.add_argument("--only", choices=["all", "tilestream", "baselines"], default="all",
                    help="bench: tilestream alone (CPU and device), or the CuPy/PyTorch baselines "
                    "(with one CPU run as the reference): two calls that each fit in a few minutes")
    ap.add_argument("--sanitizers", default="memcheck,racecheck", help="smoke: compute-sanitizer tools")
    ap.add_argument("--sanitizer-only", action="store_true", help="smoke: the sanitizer alone (no comparisons, no limits)")
    ap.add_argument("--timeout", type=int, default=480, help="suite: seconds before the tests are killed")
    a = ap.parse_args()
    unpack(ROOT / "target/gpu")
    bin_ = a.bin or next((str(p) for p in (ROOT / "target/gpu/tilestream", ROOT / "target/release/tilestream") if p.exists()), None)
    if bin_ is None:
        sys.exit("no tilestream binary: run benches/gpu/build.sh (or cargo build --release) first")
    if not a.work:
        base = Path("/dev/shm") if Path("/dev/shm").is_dir() and os.access("/dev/shm", os.W_OK) else Path(os.environ.get("TMPDIR", "/tmp"))
        a.work = str(base / f"tilestream-kit-{os.getpid()}")
    o = Out(a.out, a.mode)
    o.say(f"kit {a.mode} --device {a.device}{' --small' if a.small else ''}: {time.strftime('%Y-%m-%d %H:%M:%S')} on {os.uname().nodename}")
    env = nvrtc_env()
    try:
        {"smoke": smoke, "suite": suite, "bench": bench}[a.mode](a, o, bin_, env)
    except BaseException as e:  # a bug of the kit, or its time limit (SIGINT), still leaves its summary
        import traceback

        (o.dir / "traceback.txt").write_text(traceback.format_exc())
        o.fail(f"the kit stopped: {type(e).__name__}: {e}")
    finally:
        shutil.rmtree(a.work, ignore_errors=True)
    sys.exit(o.finish())


if __name__ == "__main__":
    main()
