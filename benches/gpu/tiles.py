#!/usr/bin/env python3
"""The GPU's tile size: the bench tasks of the GPU kit on CUDA at several `--max-tile`
caps, beside the CPU, whole process and the engine's own wall time, medians of
alternating runs, warm (inputs in /dev/shm).

    python3 benches/gpu/tiles.py [--caps 8MiB,16MiB,32MiB,64MiB] [--tasks colmean,...]
        [--memory 512MiB] [--reps 3] [--small] [--device cuda]

Prints one line per task and setting: whole-process median, the run report's wall_s
median, its read busy time, peak RSS; every CUDA output compared with the CPU's.
"""

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from kit import ROOT, bench_tasks, nvrtc_env, run, run_rss, same_npy  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(ROOT / "target/gpu/tilestream"))
    ap.add_argument("--caps", default="8MiB,16MiB,32MiB,64MiB")
    ap.add_argument("--tasks", default="colmean,colstd,affine16,projection")
    ap.add_argument("--memory", default="512MiB")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--work", default=f"/dev/shm/tilestream-tiles-{os.getpid()}")
    a = ap.parse_args()
    env = nvrtc_env()
    w = Path(a.work)
    w.mkdir(parents=True, exist_ok=True)
    spec = bench_tasks(w, a.small)
    tasks = a.tasks.split(",")
    need = {p for t in tasks for p in spec["tasks"][t][1]}
    try:
        for m in spec["inputs"]:
            if Path(m[1]) in need:
                run([a.bin] + m + ["--memory", "1GiB", "--progress", "never", "--no-sync", "--device", "cpu"], env, 300)
        settings = [("cpu", None)] + [(a.device, c) for c in a.caps.split(",")]
        print(f"{'task':<11} {'device':<6} {'max-tile':>8} {'whole_s':>8} {'engine_s':>8} {'read_s':>7} {'rss_MiB':>8}  check")
        for task in tasks:
            argv = spec["tasks"][task][0]
            ref = w / f"{task}-ref.npy"
            res = {s: ([], [], [], []) for s in settings}
            checks = {}
            for r in range(a.reps):
                for dev, cap in settings:  # alternating
                    out = ref if cap is None else w / f"{task}-out.npy"
                    args = [a.bin] + [s.replace("{out}", str(out)) for s in argv] + [
                        "--device", dev, "--memory", a.memory, "--json", "--progress", "never", "--no-sync"]
                    if cap:
                        args += ["--max-tile", cap]
                    rc, wall, rss, stdout, err = run_rss(args, env, 300, w / "log")
                    if rc:
                        checks[(dev, cap)] = "failed: " + (err.strip().splitlines() or ["?"])[-1][:150]
                        continue
                    rep = json.loads(stdout)
                    for lst, v in zip(res[(dev, cap)], (wall, rep["wall_s"], rep["read_busy_s"], rss)):
                        lst.append(v)
                    if cap is not None and r == 0:
                        why = same_npy(ref, out, rel=1e-5 if task == "projection" else 0.0)
                        checks[(dev, cap)] = "equal to the CPU's" if why is None else "differs: " + why
            for dev, cap in settings:
                whole, eng, rd, rss = res[(dev, cap)]
                if not whole:
                    print(f"{task:<11} {dev:<6} {cap or '-':>8} {checks.get((dev, cap), 'no run')}")
                    continue
                med = statistics.median
                print(f"{task:<11} {dev:<6} {cap or '-':>8} {med(whole):8.3f} {med(eng):8.3f} {med(rd):7.3f} "
                      f"{max(rss):8.0f}  {checks.get((dev, cap), 'reference')}")
            (w / f"{task}-out.npy").unlink(missing_ok=True)
    finally:
        for p in w.glob("*"):
            p.unlink()
        w.rmdir()


if __name__ == "__main__":
    main()
