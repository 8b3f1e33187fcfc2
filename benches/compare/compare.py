#!/usr/bin/env python3
"""The benchmark suite: tilestream side by side with the physical limit, numpy and dask,
a budget sweep, a scaling curve, and plots. One command, from the repository root:

    python3 benches/compare/compare.py

does everything (about an hour on a 2-core machine): builds tilestream (release) and the C
limit (benches/compare/limit.c), creates a virtual environment with numpy, scipy, dask
and matplotlib in benches/compare/.venv, generates the inputs once in
benches/compare/work/ (3075200x512 f32, 6.3 GB, and a 20000x20000 f32 image, 1.6 GB;
reused when present), then

  table    for each task (colmean, colstd, map_f16, standardize, matmul, gaussian) runs
           tilestream, the C limit, numpy on the whole memmap, numpy in 64 MiB row blocks
           and dask.array with 64 MiB chunks, in alternation (every other round in
           reverse order), --runs times each; records
           the median wall time and the peak resident set of each process (os.wait4:
           the figure /usr/bin/time -v prints as "Maximum resident set size");
  sweep    tilestream alone at budgets 16 MiB .. 8 GiB on colmean and gaussian;
  scaling  colmean on inputs from 0.5 GB up to what the disk allows (4x RAM at most),
           cold (file evicted from the page cache before each run) and warm (evicted,
           then read once, for inputs that fit in half the RAM), every engine;
  plots    docs/bench/*.png from the results.

Results go to benches/compare/results/*.json and the markdown table to
benches/compare/results/table.md; --readme pastes it into docs/benchmarks.md between the
<!-- bench:table -->, <!-- bench:sweep --> and <!-- bench:scaling --> markers. --only
verify,table,sweep,scaling,plots picks parts (the others are taken from results/);
--plot-only redraws the plots. --also LABEL=PATH adds another tilestream build as the
engine "tilestream LABEL", run in the same alternating rounds (a before/after comparison:
`--only table --engines tilestream --also before=/path/to/old/tilestream`).
"""
import argparse
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
VENV = HERE / ".venv"
WORK = HERE / "work"
RESULTS = HERE / "results"
DOCS = ROOT / "docs" / "bench"
BIN = ROOT / "target" / "release" / "tilestream"
LIMIT = WORK / "limit"
PY = VENV / "bin" / "python"
MIB = 2**20
# --also: other tilestream builds, by engine name
OTHER_BINS = {}

TASKS = {
    "colmean": "column mean (f64 sums)",
    "colstd": "column std (f64)",
    "map_f16": "`x*2+1` cast to f16, written",
    "standardize": "standardize: (x - mean) / std per column, f32 written",
    "matmul": "projection X @ W, W 512x64, f32 written",
    "gaussian": "gaussian filter sigma=2 (reflect) on a square f32 image, written",
}
ENGINES = ["tilestream", "C limit", "numpy whole", "numpy blocks", "dask"]
LIMIT_TASK = {"colmean": "mean", "colstd": "std", "map_f16": "map16", "standardize": "standardize",
              "matmul": "project", "gaussian": "gaussian"}


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def sh(cmd, **kw):
    log("+", " ".join(str(c) for c in cmd))
    subprocess.run([str(c) for c in cmd], check=True, stdout=sys.stderr, **kw)


def setup():
    sh(["cargo", "build", "--release", "--quiet"], cwd=ROOT)
    if not PY.exists():
        sh([sys.executable, "-m", "venv", VENV])
    if subprocess.run([PY, "-c", "import numpy, scipy, dask.array, matplotlib"], capture_output=True).returncode:
        sh([PY, "-m", "pip", "install", "--quiet", "numpy", "scipy", "dask[array]", "matplotlib"])
    WORK.mkdir(exist_ok=True)
    src = HERE / "limit.c"
    if not LIMIT.exists() or LIMIT.stat().st_mtime < src.stat().st_mtime:
        cc = shutil.which("cc") or shutil.which("gcc")
        sh([cc, "-O3", "-march=native", "-fopenmp", "-o", LIMIT, src, "-lm"])


def gen(path, shape, seed):
    if not path.exists():
        sh([BIN, "gen", path, "--shape", shape, "--dtype", "f32", "--seed", str(seed), "--memory", "256MiB"])
    return path


def commands(task, x, out, w, memory):
    """The command line of every engine for a task."""
    ts = [BIN, "--memory", memory]
    tile = {
        "colmean": ts + ["reduce", x, out, "--op", "mean", "--axis", "0"],
        "colstd": ts + ["reduce", x, out, "--op", "std", "--axis", "0"],
        "map_f16": ts + ["map", "(x*2+1)", out, "--in", f"x={x}", "--dtype", "f16"],
        "standardize": ts + ["standardize", x, out],
        "matmul": ts + ["matmul", x, w, out],
        "gaussian": ts + ["stencil", x, out, "--filter", "gaussian:sigma=2"],
    }[task]
    lim = [LIMIT, LIMIT_TASK[task], x] + ([out] if task not in ("colmean", "colstd") else []) + ([w] if task == "matmul" else [])
    base = [PY, HERE / "baselines.py", task]
    tail = [x, out] + ([w] if task == "matmul" else [])
    others = {name: [path] + tile[1:] for name, path in OTHER_BINS.items()}
    return {
        "tilestream": tile,
        **others,
        "C limit": lim,
        "numpy whole": base + ["whole"] + tail,
        "numpy blocks": base + ["blocks"] + tail,
        "dask": base + ["dask"] + tail,
    }


def measure(cmd, timeout):
    """Runs cmd; returns {"s": wall seconds, "rss": peak RSS bytes} or {"error": why}."""
    with tempfile.TemporaryFile() as errf:
        t0 = time.perf_counter()
        p = subprocess.Popen([str(c) for c in cmd], stdout=subprocess.DEVNULL, stderr=errf,
                             start_new_session=True)
        # a timer kills a run that takes too long; the driver itself sleeps in wait4
        timer = threading.Timer(timeout, os.killpg, (p.pid, signal.SIGKILL))
        timer.start()
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        expired = not timer.is_alive()
        timer.cancel()
        p.returncode = code = os.waitstatus_to_exitcode(status)  # reaped above
        errf.seek(0)
        err = errf.read().decode(errors="replace").strip()
    if expired:
        return {"error": f"over {timeout:.0f} s"}
    if code != 0:
        why = "killed (out of memory?)" if code == -9 else f"exit {code}: {err.splitlines()[-1] if err else ''}"
        return {"error": why, "rss": ru.ru_maxrss * 1024}
    return {"s": wall, "rss": ru.ru_maxrss * 1024}


def evict(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def read_through(path):
    """Reads the file once into one small reused buffer (the driver must stay small: a
    child's ru_maxrss starts from this process's high-water mark at fork)."""
    buf = bytearray(1 << 20)
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buf):
            pass


def warm(path):
    """Puts the file in the page cache the way a first sequential read leaves it. Evicts it
    first: how pages are cached (large folios after a sequential read, small ones after
    long memory pressure) changes the cost of every memory-mapped read by up to 2x, so
    every round starts from the same state."""
    evict(path)
    read_through(path)


def clear(*paths):
    for f in paths:
        f.unlink(missing_ok=True)
    os.sync()


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


def summarize(samples):
    ok = [s for s in samples if "s" in s]
    if not ok:
        return {"error": samples[0].get("error", "failed"), "runs": len(samples)}
    r = {"median_s": statistics.median(s["s"] for s in ok), "peak_rss_mib": max(s["rss"] for s in ok) / MIB,
         "runs": len(ok)}
    if len(ok) < len(samples):
        r["failed_runs"] = len(samples) - len(ok)
    return r


def run_table(a, x, img, w, out):
    results = {}
    for task in a.tasks:
        src = img if task == "gaussian" else x
        cmds = commands(task, src, out, w, a.memory)
        cmds = {e: c for e, c in cmds.items() if e in a.engines}
        samples = {e: [] for e in cmds}
        for r in range(a.runs):
            warm(src)  # every round starts from the same page-cache state
            # every other round in reverse order: no engine always runs first after warm()
            order = list(cmds.items())
            for e, cmd in (order if r % 2 == 0 else order[::-1]):
                clear(out)  # no engine pays for the writeback of the one before it
                read_through(src)  # tops up what the previous engine's writes evicted
                s = measure(cmd, a.timeout)
                log(f"{task} round {r + 1}/{a.runs} {e}: {s}")
                samples[e].append(s)
        clear(out)
        size = src.stat().st_size
        results[task] = {"input_bytes": size, "shape": shape_of(src),
                         "engines": {e: summarize(s) for e, s in samples.items()}}
    return results


def shape_of(path):
    with open(path, "rb") as f:
        head = f.read(512).decode("latin1")
    m = re.search(r"'shape': \(([^)]*)\)", head)
    return "x".join(p.strip() for p in m.group(1).split(",") if p.strip())


def run_verify(a):
    """Runs every engine of every task on small inputs and checks that they agree with
    tilestream (reductions: with numpy in float64), so the table compares equal work."""
    vx = gen(WORK / "verify_20011x512.npy", "20011x512", 5)
    vimg = gen(WORK / "verify_img_999x1001.npy", "999x1001", 6)
    w = gen(WORK / "w_512x64.npy", "512x64", 2)
    bad = []
    for task in a.tasks:
        src = vimg if task == "gaussian" else vx
        outs = {}
        for e in a.engines:
            o = WORK / f"verify_{task}_{e.replace(' ', '_')}.npy"
            o.unlink(missing_ok=True)
            cmd = [str(c) for c in commands(task, src, o, w, "16MiB")[e]]
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode:
                bad.append(f"{task}/{e}: exit {p.returncode}: {p.stderr.strip()[-300:]}")
                continue
            outs[e] = str(o) if o.exists() else p.stdout
        check = subprocess.run([str(PY), "-c", VERIFY_CODE, task, str(src), json.dumps(outs)],
                               capture_output=True, text=True)
        log(check.stdout.strip())
        if check.returncode:
            bad.append(f"{task}: {check.stdout.strip()} {check.stderr.strip()[-300:]}")
        for o in WORK.glob(f"verify_{task}_*.npy"):
            o.unlink()
    if bad:
        sys.exit("engines disagree:\n" + "\n".join(bad))
    log("verify: every engine agrees with tilestream on every task")


VERIFY_CODE = r'''
import json, re, sys
import numpy as np
task, src, outs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
x = np.load(src).astype(np.float64)
ref = np.load(outs["tilestream"])
if task == "colmean":
    want = x.mean(0)
elif task == "colstd":
    want = x.std(0)
else:
    want = ref.astype(np.float64)
tol = {"map_f16": 1e-3}.get(task, 1e-4)
fails = []
for e, o in outs.items():
    if o.endswith(".npy"):
        got = np.load(o).astype(np.float64)
    else:  # a reduction's printed first values: "[a b c]" or "a b c"
        got = np.array([float(v) for v in re.findall(r"[-+0-9.eE]+", o)])
    w = want.ravel()[:got.size].reshape(got.shape) if got.shape != want.shape else want
    err = np.max(np.abs(got - w) / (np.abs(w) + 1))
    if not err <= tol:
        fails.append(f"{e}: max rel err {err:.2g}")
    print(f"{task} {e}: max rel err {err:.2g}")
if task in ("colmean", "colstd") and not np.allclose(ref, want, rtol=1e-12, atol=1e-12):
    fails.append("tilestream differs from numpy f64")
if fails:
    print("; ".join(fails)); sys.exit(1)
'''


def run_sweep(a, x, img, w, out):
    budgets = ["16MiB", "32MiB", "64MiB", "128MiB", "256MiB", "512MiB", "1GiB", "2GiB", "4GiB", "8GiB"]
    res = {}
    for task, src in (("colmean", x), ("gaussian", img)):
        samples = {b: [] for b in budgets}
        for r in range(a.runs):
            warm(src)
            for b in budgets:
                clear(out)
                read_through(src)
                s = measure(commands(task, src, out, w, b)["tilestream"], a.timeout)
                log(f"sweep {task} {b} round {r + 1}: {s}")
                samples[b].append(s)
        clear(out)
        res[task] = {"input_bytes": src.stat().st_size, "budgets": {b: summarize(s) for b, s in samples.items()}}
    return res


def budget_bytes(b):
    n, unit = re.fullmatch(r"(\d+)(MiB|GiB)", b).groups()
    return int(n) * (MIB if unit == "MiB" else 2**30)


def run_scaling(a, out):
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    free = shutil.disk_usage(WORK).free
    cap = min(4 * ram, free - 8e9 if a.scaling_max_gb is None else a.scaling_max_gb * 1e9)
    sizes = [s for s in a.scaling_sizes if s * 1e9 <= cap]
    log(f"scaling sizes (GB): {sizes}; RAM {ram / 1e9:.1f} GB, disk free {free / 1e9:.1f} GB")
    res = {"ram_bytes": ram, "points": []}
    for gb in sizes:
        rows = int(gb * 1e9 / (512 * 4))
        path = WORK / f"scale_{rows}x512.npy"
        gen(path, f"{rows}x512", 3)
        cmds = {e: c for e, c in commands("colmean", path, out, None, a.memory).items() if e in a.engines}
        for state in ("cold", "warm"):
            if state == "warm" and gb * 1e9 > ram / 2:
                continue
            for e, cmd in cmds.items():
                if state == "cold":
                    evict(path)
                else:
                    warm(path)
                s = measure(cmd, a.timeout)
                log(f"scaling {gb} GB {state} {e}: {s}")
                res["points"].append({"gb": path.stat().st_size / 1e9, "state": state, "engine": e, **s})
        path.unlink()
    return res


def fmt_s(r):
    return f"{r['median_s']:.2f} s" if "median_s" in r else f"failed: {r['error']}"


def table_md(t, meta):
    lines = [f"Machine: {meta['machine']}. Page cache warm (each round evicts the input, reads it once, "
             f"and tops it up before each engine); median of {meta['runs']} alternating rounds; "
             f"tilestream --memory {meta['memory']}; outputs flushed to disk by every engine; peak RSS "
             "of the whole process (`os.wait4`, as `/usr/bin/time -v`).", "",
             "| task | engine | median wall | GB/s of input | peak RSS | time / tilestream | RSS / tilestream |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for task, tr in t.items():
        eng = tr["engines"]
        base = eng.get("tilestream", {})
        for e, r in eng.items():
            if "median_s" in r and "median_s" in base:
                ratio = f"{r['median_s'] / base['median_s']:.2f}x"
                rss = f"{r['peak_rss_mib'] / base['peak_rss_mib']:.1f}x"
                gbs = f"{tr['input_bytes'] / r['median_s'] / 1e9:.2f}"
                peak = f"{r['peak_rss_mib']:.0f} MiB"
            else:
                ratio = rss = gbs = "–"
                peak = f"{r['peak_rss_mib']:.0f} MiB" if "peak_rss_mib" in r else "–"
            name = f"{TASKS[task]} ({tr['shape']}, {tr['input_bytes'] / 1e9:.1f} GB)" if e == next(iter(eng)) else ""
            lines.append(f"| {name} | {e} | {fmt_s(r)} | {gbs} | {peak} | {ratio} | {rss} |")
    return "\n".join(lines)


def checks_md(t, sweep, memory):
    """The suite's targets, computed from the results (not asserted: reported)."""
    out = []
    cm = t.get("colmean", {}).get("engines", {})
    ts = cm.get("tilestream", {})
    if "median_s" in ts:
        for e, target, cmp in (("C limit", 1.3, "tilestream / limit"), ("numpy blocks", 2, "numpy blocks / tilestream"),
                               ("dask", 5, "dask / tilestream")):
            r = cm.get(e, {})
            if "median_s" not in r:
                continue
            v = ts["median_s"] / r["median_s"] if e == "C limit" else r["median_s"] / ts["median_s"]
            ok = v <= target if e == "C limit" else v >= target
            out.append(f"- colmean, {cmp}: {v:.2f}x (target {'at most' if e == 'C limit' else 'at least'} {target}x): "
                       f"{'met' if ok else 'NOT met'}")
        lim = cm.get("C limit", {})
        if "peak_rss_mib" in lim:
            cap = lim["peak_rss_mib"] + budget_bytes(memory) / MIB
            out.append(f"- colmean peak RSS {ts['peak_rss_mib']:.0f} MiB against the limit's {lim['peak_rss_mib']:.0f} MiB "
                       f"+ budget = {cap:.0f} MiB: {'met' if ts['peak_rss_mib'] <= cap else 'NOT met'}")
    cap = budget_bytes(memory) / MIB + 48
    peaks = [(tr["engines"]["tilestream"]["peak_rss_mib"], task) for task, tr in t.items()
             if "peak_rss_mib" in tr["engines"].get("tilestream", {})]
    if peaks:
        v, k = max(peaks)
        out.append(f"- tilestream's largest peak RSS over all tasks: {v:.0f} MiB ({k}) against budget + 48 MiB = "
                   f"{cap:.0f} MiB: {'met' if v <= cap else 'NOT met'}")
    for task, sr in (sweep or {}).items():
        over = [(b, r["peak_rss_mib"]) for b, r in sr["budgets"].items()
                if "peak_rss_mib" in r and r["peak_rss_mib"] > budget_bytes(b) / MIB + 48]
        out.append(f"- sweep {task}: peak RSS within budget + 48 MiB at every budget: "
                   f"{'met' if not over else 'NOT met at ' + ', '.join(b for b, _ in over)}")
    return "\n".join(out)


def plots():
    """Draws docs/bench/*.png from the results (run under the venv's python)."""
    sweep = json.loads((RESULTS / "sweep.json").read_text())["tasks"] if (RESULTS / "sweep.json").exists() else None
    scaling = json.loads((RESULTS / "scaling.json").read_text()) if (RESULTS / "scaling.json").exists() else None
    code = PLOT_CODE.replace("@DOCS@", repr(str(DOCS)))
    DOCS.mkdir(parents=True, exist_ok=True)
    subprocess.run([str(PY), "-c", code], input=json.dumps({"sweep": sweep, "scaling": scaling}).encode(), check=True)


PLOT_CODE = r'''
import json, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
d = json.load(sys.stdin)
DOCS = @DOCS@
MIB = 2**20
def bb(b):
    n = int(b[:-3]); return n * (1 if b.endswith("MiB") else 1024)
sw = d["sweep"]
if sw:
    fig, axes = plt.subplots(1, len(sw), figsize=(5 * len(sw), 4.2), squeeze=False)
    for i, (ax, (task, r)) in enumerate(zip(axes[0], sw.items())):
        bs = [b for b, v in r["budgets"].items() if "median_s" in v]
        ax.plot([bb(b) for b in bs], [r["input_bytes"] / r["budgets"][b]["median_s"] / 1e9 for b in bs], "o-", color=f"C{i}")
        ax.set_xscale("log", base=2); ax.set_xlabel("--memory (MiB)"); ax.set_ylabel("throughput (GB/s of input)")
        ax.set_ylim(bottom=0); ax.grid(alpha=.3); ax.set_title(f"{task}: throughput vs budget (warm)")
    fig.tight_layout(); fig.savefig(f"{DOCS}/sweep_throughput.png", dpi=110)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    allb = sorted({bb(b) for r in sw.values() for b in r["budgets"]})
    ax.plot(allb, allb, "k--", label="budget")
    ax.plot(allb, [b + 48 for b in allb], ":", color="grey", label="budget + 48 MiB")
    for task, r in sw.items():
        bs = [b for b, v in r["budgets"].items() if "peak_rss_mib" in v]
        ax.plot([bb(b) for b in bs], [r["budgets"][b]["peak_rss_mib"] for b in bs], "o-", label=f"{task} peak RSS")
    ax.set_xscale("log", base=2); ax.set_yscale("log", base=2)
    ax.set_xlabel("--memory (MiB)"); ax.set_ylabel("peak resident set (MiB)"); ax.grid(alpha=.3); ax.legend()
    ax.set_title("tilestream: peak memory vs budget")
    fig.tight_layout(); fig.savefig(f"{DOCS}/sweep_memory.png", dpi=110)
sc = d["scaling"]
if sc:
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    engines = list(dict.fromkeys(p["engine"] for p in sc["points"]))
    for i, e in enumerate(engines):
        for state, style in (("cold", "-"), ("warm", "--")):
            pts = [p for p in sc["points"] if p["engine"] == e and p["state"] == state and "s" in p]
            if pts:
                ax.plot([p["gb"] for p in pts], [p["s"] / p["gb"] for p in pts], style, marker="o", color=f"C{i}",
                        label=f"{e} ({state})")
    ax.axvline(sc["ram_bytes"] / 1e9, color="grey", lw=1); ax.text(sc["ram_bytes"] / 1e9, ax.get_ylim()[1] * .9, " RAM", color="grey")
    ax.set_xscale("log", base=2); ax.set_yscale("log"); ax.set_xlabel("input size (GB)"); ax.set_ylabel("seconds per GB")
    ax.grid(alpha=.3, which="both"); ax.legend(fontsize=7, ncol=2)
    ax.set_title("column mean: time per GB vs input size (cold: evicted before each run)")
    fig.tight_layout(); fig.savefig(f"{DOCS}/scaling.png", dpi=110)
'''


def sweep_md(sweep):
    """One table per swept task: budget, median time, throughput, peak RSS."""
    lines = []
    for task, r in sweep.items():
        lines += [f"| {task} --memory | median wall | GB/s of input | peak RSS | budget + 48 MiB |",
                  "|---|---:|---:|---:|---:|"]
        for b, v in r["budgets"].items():
            if "median_s" in v:
                lines.append(f"| {b} | {v['median_s']:.2f} s | {r['input_bytes'] / v['median_s'] / 1e9:.2f} | "
                             f"{v['peak_rss_mib']:.0f} MiB | {budget_bytes(b) / MIB + 48:.0f} MiB |")
            else:
                lines.append(f"| {b} | failed: {v['error']} | – | – | – |")
        lines.append("")
    return "\n".join(lines).strip()


def scaling_md(sc):
    """Seconds per GB for each engine at each size, cold and warm."""
    engines = list(dict.fromkeys(p["engine"] for p in sc["points"]))
    sizes = sorted({round(p["gb"], 2) for p in sc["points"]})
    lines = ["| input | state | " + " | ".join(engines) + " |", "|---:|---|" + "---:|" * len(engines)]
    for gb in sizes:
        for state in ("cold", "warm"):
            pts = {p["engine"]: p for p in sc["points"] if round(p["gb"], 2) == gb and p["state"] == state}
            if not pts:
                continue
            cells = []
            for e in engines:
                p = pts.get(e)
                cells.append("–" if p is None else (f"{p['s'] / p['gb']:.2f} s/GB, {p['rss'] / MIB:.0f} MiB"
                                                    if "s" in p else f"failed: {p['error']}"))
            lines.append(f"| {gb:g} GB | {state} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def update_readme(md, name="table"):
    readme = ROOT / "docs" / "benchmarks.md"
    text = readme.read_text()
    start, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    if start not in text:
        log(f"docs/benchmarks.md has no {start} marker; left in benches/compare/results/{name}.md")
        return
    pre, rest = text.split(start, 1)
    post = rest.split(end, 1)[1]
    readme.write_text(f"{pre}{start}\n{md}\n{end}{post}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="verify,table,sweep,scaling,plots", help="parts to run (default: all)")
    ap.add_argument("--tasks", default=",".join(TASKS), help="tasks of the table (default: all)")
    ap.add_argument("--engines", default=",".join(ENGINES), help="engines (default: all)")
    ap.add_argument("--runs", type=int, default=3, help="alternating rounds per task (default 3)")
    ap.add_argument("--memory", default="256MiB", help="tilestream budget for the table and scaling")
    ap.add_argument("--rows", type=int, default=3075200, help="rows of the 512-column input")
    ap.add_argument("--side", type=int, default=20000, help="side of the gaussian's square image")
    ap.add_argument("--timeout", type=float, default=1200, help="seconds before a run counts as failed")
    ap.add_argument("--scaling-max-gb", type=float, help="largest scaling input (default: 4x RAM or the free disk - 8 GB)")
    ap.add_argument("--scaling-sizes", default="0.5,1,2,4,8,16,32,64,96",
                    help="scaling input sizes in GB, cut at --scaling-max-gb")
    ap.add_argument("--out-dir", help="where outputs go (default benches/compare/work)")
    ap.add_argument("--readme", action="store_true", help="paste the table into docs/benchmarks.md")
    ap.add_argument("--plot-only", action="store_true", help="only redraw docs/bench/*.png from results/")
    ap.add_argument("--also", action="append", default=[], metavar="LABEL=PATH",
                    help="another tilestream binary, run as the engine 'tilestream LABEL' in the same "
                    "alternating rounds (to compare two builds side by side); repeatable")
    a = ap.parse_args()
    for spec in a.also:
        label, _, path = spec.partition("=")
        if not label or not Path(path).is_file():
            sys.exit(f"--also {spec}: give LABEL=PATH of a tilestream binary")
        OTHER_BINS[f"tilestream {label}"] = Path(path).resolve()
    a.tasks = [t for t in a.tasks.split(",") if t]
    a.engines = [e for e in a.engines.split(",") if e] + list(OTHER_BINS)
    a.scaling_sizes = [float(s) for s in a.scaling_sizes.split(",") if s]
    parts = set(a.only.split(","))
    for t in a.tasks:
        if t not in TASKS:
            sys.exit(f"unknown task {t}; choose from {', '.join(TASKS)}")
    setup()
    if a.plot_only:
        plots()
        return
    RESULTS.mkdir(exist_ok=True)
    out = Path(a.out_dir or WORK) / "out.npy"
    x = gen(WORK / f"x_{a.rows}x512.npy", f"{a.rows}x512", 1)
    img = gen(WORK / f"img_{a.side}x{a.side}.npy", f"{a.side}x{a.side}", 4)
    w = gen(WORK / "w_512x64.npy", "512x64", 2)
    meta = {"machine": machine(), "runs": a.runs, "memory": a.memory}
    if "verify" in parts:
        run_verify(a)
    table = sweep = None
    if "table" in parts:
        table = run_table(a, x, img, w, out)
        (RESULTS / "table.json").write_text(json.dumps({**meta, "tasks": table}, indent=2))
    elif (RESULTS / "table.json").exists():
        table = json.loads((RESULTS / "table.json").read_text())["tasks"]
    if "sweep" in parts:
        sweep = run_sweep(a, x, img, w, out)
        (RESULTS / "sweep.json").write_text(json.dumps({**meta, "tasks": sweep}, indent=2))
    elif (RESULTS / "sweep.json").exists():
        sweep = json.loads((RESULTS / "sweep.json").read_text())["tasks"]
    scaling = None
    if "scaling" in parts:
        scaling = run_scaling(a, out)
        (RESULTS / "scaling.json").write_text(json.dumps({**meta, **scaling}, indent=2))
    elif (RESULTS / "scaling.json").exists():
        scaling = json.loads((RESULTS / "scaling.json").read_text())
    if "plots" in parts:
        plots()
    docs = {}
    if table:
        docs["table"] = table_md(table, meta) + "\n\n" + checks_md(table, sweep, a.memory)
    if sweep:
        docs["sweep"] = sweep_md(sweep)
    if scaling:
        docs["scaling"] = scaling_md(scaling)
    for name, md in docs.items():
        (RESULTS / f"{name}.md").write_text(md + "\n")
        print(md + "\n")
        if a.readme:
            update_readme(md, name)


if __name__ == "__main__":
    main()
