#!/usr/bin/env python3
"""GeoTIFF benchmark: NDVI and a gaussian filter on a 4-band 20000x20000 u16 scene
(3.2 GB of pixels, Deflate-compressed 256x256 tiles, pixel-interleaved, georeferenced),
tilestream at --memory 256MiB against GDAL's gdal_calc.py doing the same NDVI.

    python3 benches/compare/imagery.py [--size 20000] [--runs 3] [--readme]
                                       [--also before=path/to/old/tilestream]

Needs gdal-bin and python3-gdal (Debian) for gdal_translate / gdalinfo / gdal_calc.py,
and numpy in benches/compare/.venv (compare.py makes it) to write the scene. Every run
is timed warm (the scene is read once before), engines alternate, the median is kept;
peak RSS comes from os.wait4. Checks printed at the end: tilestream's peak RSS within
budget + 48 MiB, outputs carrying the input's geotransform and CRS (gdalinfo -json),
and tilestream's NDVI identical to gdal_calc's (both computed in f64, stored as f32).
Large files are deleted at the end unless --keep.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORK = ROOT / "benches" / "compare" / "work" / "imagery"
RESULTS = ROOT / "benches" / "compare" / "results"
BUDGET_MIB = 256


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def timed(cmd):
    """Runs cmd, returns (seconds, peak RSS MiB)."""
    # stderr goes to a file: a pipe read only after the exit blocks a chatty child
    with tempfile.TemporaryFile() as log:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
        _, status, ru = os.wait4(p.pid, 0)
        dt = time.perf_counter() - t0
        log.seek(0)
        err = log.read().decode(errors="replace")
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        sys.exit(f"{' '.join(map(str, cmd))} failed:\n{err}")
    return dt, ru.ru_maxrss / 1024


def make_scene(n, venv_python):
    tif = WORK / f"scene_{n}.tif"
    if tif.exists():
        return tif
    raw = WORK / f"scene_{n}.raw"
    code = f"""
import numpy as np
n = {n}
rng = np.random.default_rng(7)
x = np.arange(n, dtype=np.float32)
with open({str(raw)!r}, 'wb') as f:
    for b in range(4):
        for r0 in range(0, n, 500):
            y = np.arange(r0, min(n, r0 + 500), dtype=np.float32)[:, None]
            field = 3000 + 1500 * np.sin(x / 700 + b) * np.cos(y / 900 - b) + 400 * b
            noise = rng.normal(0, 60, field.shape).astype(np.float32)
            f.write(np.clip(field + noise, 1, 65535).astype('<u2').tobytes())
"""
    sh([venv_python, "-c", code])
    (WORK / f"scene_{n}.hdr").write_text(
        f"ENVI\nsamples = {n}\nlines = {n}\nbands = 4\nheader offset = 0\n"
        "file type = ENVI Standard\ndata type = 12\ninterleave = bsq\nbyte order = 0\n"
    )
    sh(["gdal_translate", "-q", "-of", "GTiff", "-co", "TILED=YES", "-co", "COMPRESS=DEFLATE",
        "-co", "INTERLEAVE=PIXEL", "-co", "NUM_THREADS=ALL_CPUS", "-co", "BIGTIFF=IF_SAFER",
        "-a_srs", "EPSG:32633", "-a_ullr", "500000", "4200000", str(500000 + 10 * n),
        str(4200000 - 10 * n), str(raw), str(tif)])
    raw.unlink()
    (WORK / f"scene_{n}.hdr").unlink()
    return tif


def georef(p):
    j = json.loads(subprocess.run(["gdalinfo", "-json", str(p)], check=True,
                                  capture_output=True, text=True).stdout)
    return j.get("geoTransform"), j.get("coordinateSystem", {}).get("wkt")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=int, default=20000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="keep the scene and outputs")
    ap.add_argument("--also", action="append", default=[], metavar="LABEL=BINARY",
                    help="also time another tilestream build's NDVI and gaussian in the same "
                         "rounds (rows named LABEL in the table)")
    ap.add_argument("--readme", action="store_true",
                    help="paste the table into docs/benchmarks.md between <!-- bench:geotiff --> markers")
    a = ap.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    venv_python = ROOT / "benches" / "compare" / ".venv" / "bin" / "python"
    if not venv_python.exists():
        sys.exit("run benches/compare/compare.py once first (it makes the numpy venv)")
    for t in ("gdal_translate", "gdalinfo", "gdal_calc.py"):
        if not shutil.which(t):
            sys.exit(f"{t} not found: apt-get install gdal-bin python3-gdal")
    sh(["cargo", "build", "--release", "--quiet"], cwd=ROOT)
    ts = str(ROOT / "target" / "release" / "tilestream")
    scene = make_scene(a.size, str(venv_python))
    mem = f"{BUDGET_MIB}MiB"
    out = {k: WORK / f"{k}.tif" for k in ("ndvi_ts", "ndvi_gdal", "gauss_ts")}
    f64 = "numpy.float64"
    engines = {
        "tilestream NDVI": [ts, "map", "(s[3] - s[2]) / (s[3] + s[2])", str(out["ndvi_ts"]),
                            "--in", f"s={scene}", "--dtype", "f32", "-m", mem,
                            "--progress", "never"],
        "gdal_calc.py NDVI": ["gdal_calc.py", "-A", str(scene), "--A_band=4", "-B", str(scene),
                              "--B_band=3", "--calc",
                              f"(A.astype({f64}) - B) / (A.astype({f64}) + B)",
                              "--type=Float32", "--outfile", str(out["ndvi_gdal"]),
                              "--co", "TILED=YES", "--co", "COMPRESS=DEFLATE",
                              "--overwrite", "--quiet"],
        "tilestream gaussian σ=2 (4 bands)": [
            ts, "stencil", str(scene), str(out["gauss_ts"]), "--filter", "gaussian:sigma=2",
            "--dtype", "f32", "-m", mem, "--progress", "never"],
    }
    for extra in a.also:
        label, binary = extra.split("=", 1)
        for name in ("NDVI", "gaussian"):
            base = engines[f"tilestream {name}" if name == "NDVI" else
                           "tilestream gaussian σ=2 (4 bands)"]
            out[f"{label}_{name}"] = WORK / f"{label}_{name}.tif"
            engines[f"{label} {name}"] = [binary] + base[1:3] + [str(out[f"{label}_{name}"])] + \
                base[4:]
    # warm the page cache with the scene
    with open(scene, "rb") as f:
        while f.read(1 << 24):
            pass
    times = {k: [] for k in engines}
    rss = {k: [] for k in engines}
    for r in range(a.runs):
        for name, cmd in engines.items():
            dt, m = timed(cmd)
            times[name].append(dt)
            rss[name].append(m)
            print(f"round {r + 1}: {name}: {dt:.2f} s, peak RSS {m:.0f} MiB", flush=True)
    px = a.size * a.size
    scene_bytes = 4 * px * 2
    rows = []
    for name in engines:
        med = statistics.median(times[name])
        # bytes of pixels read (NDVI: 2 bands; gaussian: 4) over time
        read = (2 if "NDVI" in name else 4) * px * 2
        rows.append({"engine": name, "median_s": med, "runs_s": times[name],
                     "peak_rss_mib": max(rss[name]), "mpix_per_s": px / med / 1e6,
                     "gb_read_per_s": read / med / 1e9})
    # checks
    want = georef(scene)
    checks = {
        "rss_within_budget_plus_48MiB": all(r["peak_rss_mib"] <= BUDGET_MIB + 48
                                            for r in rows if r["engine"].startswith("tilestream")),
        "ndvi_georef_same": georef(out["ndvi_ts"]) == want,
        "gauss_georef_same": georef(out["gauss_ts"]) == want,
    }
    a_raw, b_raw = WORK / "ndvi_ts.raw", WORK / "ndvi_gdal.raw"
    for src, dst in ((out["ndvi_ts"], a_raw), (out["ndvi_gdal"], b_raw)):
        sh(["gdal_translate", "-q", "-of", "ENVI", str(src), str(dst)])
    checks["ndvi_identical_to_gdal_calc"] = (
        subprocess.run(["cmp", "-s", str(a_raw), str(b_raw)]).returncode == 0)
    for p in WORK.glob("ndvi_*.raw*"):
        p.unlink()
    for p in WORK.glob("ndvi_*.hdr"):
        p.unlink()
    res = {"size": a.size, "scene_bytes": scene_bytes, "scene_file_bytes": scene.stat().st_size,
           "budget_mib": BUDGET_MIB, "cpus": os.cpu_count(), "rows": rows, "checks": checks,
           "warm": True}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "geotiff.json").write_text(json.dumps(res, indent=1) + "\n")
    gd = next(r for r in rows if r["engine"].startswith("gdal_calc"))["median_s"]
    lines = [
        f"4-band {a.size}x{a.size} u16 GeoTIFF ({scene_bytes / 1e9:.1f} GB of pixels, "
        f"{scene.stat().st_size / 1e9:.1f} GB on disk: Deflate, 256x256 tiles, pixel-interleaved), "
        f"warm page cache, {os.cpu_count()} cores, median of {a.runs}; outputs are Deflate-tiled "
        "f32 GeoTIFFs.",
        "",
        "| job | median s | Mpixel/s | peak RSS | vs gdal_calc.py |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        ratio = f"{gd / r['median_s']:.2f}x faster" if "NDVI" in r["engine"] and \
            not r["engine"].startswith("gdal") else ("1.00x" if r["engine"].startswith("gdal") else "—")
        mem_note = f" (--memory {BUDGET_MIB}MiB)" if r["engine"].startswith("tilestream") else ""
        lines.append(f"| {r['engine']} | {r['median_s']:.1f} | {r['mpix_per_s']:.1f} | "
                     f"{r['peak_rss_mib']:.0f} MiB{mem_note} | {ratio} |")
    lines.append("")
    lines.append("Checks: " + ", ".join(f"{k}: {'yes' if v else 'NO'}" for k, v in checks.items()))
    table = "\n".join(lines)
    (RESULTS / "geotiff.md").write_text(table + "\n")
    print(table)
    if a.readme:
        readme = ROOT / "docs" / "benchmarks.md"
        s = readme.read_text()
        start, end = "<!-- bench:geotiff -->", "<!-- /bench:geotiff -->"
        if start in s and end in s:
            i, j = s.index(start) + len(start), s.index(end)
            readme.write_text(s[:i] + "\n" + table + "\n" + s[j:])
        else:
            print("docs/benchmarks.md has no bench:geotiff markers; table not pasted")
    if not a.keep:
        for p in out.values():
            p.unlink(missing_ok=True)
        scene.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
