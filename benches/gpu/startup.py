#!/usr/bin/env python3
"""Where a CUDA process's fixed costs go: the time and the resident memory of each step of
starting CUDA through the driver API alone (no framework, no tilestream), then of
tilestream's own start on either device.

    python3 benches/gpu/startup.py [--bin target/gpu/tilestream]

Part 1, in this process (ctypes and libcuda only, so the resident set starts at a few
MiB): cuInit, cuDeviceGet, cuDevicePrimaryCtxRetain, cuCtxSetCurrent, a first 1 MiB
cuMemAlloc and a 64 MiB page-locked cuMemHostAlloc; seconds and VmRSS after each.
This is the floor any CUDA program pays, which a GPU run of tilestream adds to its
budget.

Part 2, whole processes (median of 5, peak RSS from wait4): `tilestream devices`, and
a column mean of a small file on the CPU and on CUDA with the kernel cache warm and off
(TILESTREAM_KERNEL_CACHE=off: NVRTC loaded and the kernels compiled in the process).
"""

import argparse
import ctypes
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
# NVRTC found as the kit finds it (the cache-off run needs it); the kit's spawner
from kit import ROOT, nvrtc_env, run_rss  # noqa: E402


def rss_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def driver_steps():
    cuda = ctypes.CDLL("libcuda.so.1")
    steps = []
    t = time.perf_counter()

    def step(name, rc):
        nonlocal t
        now = time.perf_counter()
        if rc != 0:
            raise SystemExit(f"startup.py: {name} returned CUDA error {rc}")
        steps.append((name, now - t, rss_mib()))
        t = time.perf_counter()

    steps.append(("libcuda loaded", 0.0, rss_mib()))
    t = time.perf_counter()
    step("cuInit", cuda.cuInit(0))
    dev = ctypes.c_int()
    step("cuDeviceGet", cuda.cuDeviceGet(ctypes.byref(dev), 0))
    ctx = ctypes.c_void_p()
    step("cuDevicePrimaryCtxRetain", cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
    step("cuCtxSetCurrent", cuda.cuCtxSetCurrent(ctx))
    ptr = ctypes.c_uint64()
    step("cuMemAlloc 1 MiB", cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(1 << 20)))
    host = ctypes.c_void_p()
    step("cuMemHostAlloc 64 MiB", cuda.cuMemHostAlloc(ctypes.byref(host), ctypes.c_size_t(64 << 20), 0))
    ctypes.memset(host, 1, 64 << 20)
    step("64 MiB written", 0)
    return steps


def whole(argv, env, reps=5):
    """Median wall seconds and largest peak RSS (MiB) of `reps` runs, through the kit's
    spawner (wait4's rusage of the child alone); or why the run failed."""
    walls, rss = [], []
    with tempfile.TemporaryDirectory() as d:
        for _ in range(reps):
            rc, wall, peak, _, err = run_rss(argv, env, 120, Path(d) / "log")
            if rc:
                return None, None, (err.strip().splitlines() or ["?"])[-1]
            walls.append(wall)
            rss.append(peak)
    return statistics.median(walls), max(rss), ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(ROOT / "target/gpu/tilestream"))
    a = ap.parse_args()
    print(f"startup.py: python {rss_mib():.0f} MiB resident before loading libcuda")
    try:
        steps = driver_steps()
    except OSError as e:
        print(f"startup.py: no CUDA driver here ({e}): part 1 not run")
        steps = []
    for name, s, r in steps:
        print(f"  {name:<26} {s * 1e3:8.1f} ms   VmRSS {r:6.0f} MiB")
    env = nvrtc_env()
    with tempfile.TemporaryDirectory() as d:
        x = Path(d) / "x.npy"
        subprocess.run([a.bin, "gen", str(x), "--shape", "1000x512", "--dtype", "f32", "--device", "cpu",
                        "--progress", "never", "--no-sync"], check=True, env=env, capture_output=True)
        out = str(Path(d) / "m.npy")
        runs = [("tilestream devices", [a.bin, "devices"], {}),
                ("colmean, cpu", [a.bin, "reduce", str(x), out, "--op", "mean", "--axis", "0",
                                  "--device", "cpu", "--progress", "never", "--no-sync"], {}),
                ("colmean, cuda (kernel cache warm)", [a.bin, "reduce", str(x), out, "--op", "mean", "--axis", "0",
                                                       "--device", "cuda", "--progress", "never", "--no-sync"], {}),
                ("colmean, cuda (cache off: NVRTC)", [a.bin, "reduce", str(x), out, "--op", "mean", "--axis", "0",
                                                      "--device", "cuda", "--progress", "never", "--no-sync"],
                 {"TILESTREAM_KERNEL_CACHE": "off"})]
        print("whole processes, 1000x512 f32 input (median of 5; peak RSS):")
        for name, argv, extra in runs:
            wall, rss, err = whole(argv, dict(env, **extra))
            if wall is None:
                print(f"  {name:<36} failed: {err}")
            else:
                print(f"  {name:<36} {wall * 1e3:8.1f} ms   peak RSS {rss:6.0f} MiB")


if __name__ == "__main__":
    main()
