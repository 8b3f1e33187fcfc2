#!/usr/bin/env python3
"""COG benchmark and check: the 4-band 20000x20000 u16 scene of imagery.py written as a
Cloud-Optimized GeoTIFF by tilestream, validated by GDAL and rio-cogeo, its overviews
compared with `gdaladdo -r average` on the same image, and timed against GDAL's COG
driver (`gdal_translate -of COG -co RESAMPLING=AVERAGE`).

    python3 benches/compare/cog.py [--size 20000] [--rio PATH/TO/rio] [--keep]

Needs the release binary (cargo build --release), GDAL's tools, numpy in
benches/compare/.venv (as imagery.py) and rio-cogeo (`--rio`, default: the CI venv's,
target/test-venv/bin/rio). Warm: the scene is read once before the timed runs. Prints a
Markdown table (also written to benches/compare/results/cog.md).
"""

import argparse
import subprocess
import sys
from pathlib import Path

import imagery

ROOT = imagery.ROOT
WORK = imagery.WORK


def level_raw(tif, k, out):
    imagery.sh(["gdal_translate", "-q", "-of", "ENVI", "-co", "INTERLEAVE=BSQ",
                "-oo", f"OVERVIEW_LEVEL={k}", str(tif), str(out)])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=20000)
    ap.add_argument("--rio", default=str(ROOT / "target" / "test-venv" / "bin" / "rio"))
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    py = ROOT / "benches" / "compare" / ".venv" / "bin" / "python"
    ts = ROOT / "target" / "release" / "tilestream"
    scene = imagery.make_scene(a.size, str(py))
    with open(scene, "rb") as f:
        while f.read(1 << 24):
            pass
    cog = WORK / "scene_cog.tif"
    gdal_cog = WORK / "scene_gdal_cog.tif"
    ref = WORK / "scene_ref.tif"
    mem = f"{imagery.BUDGET_MIB}MiB"
    rows = []
    t, rss = imagery.timed([str(ts), "convert", str(scene), str(cog), "--cog", "-m", mem,
                            "--progress", "never"])
    rows.append(("tilestream convert --cog", t, rss))
    t, rss = imagery.timed(["gdal_translate", "-q", "-of", "COG", "-co", "COMPRESS=DEFLATE",
                            "-co", "RESAMPLING=AVERAGE", "-co", "NUM_THREADS=ALL_CPUS",
                            "-co", "BIGTIFF=IF_SAFER", str(scene), str(gdal_cog)])
    rows.append(("gdal_translate -of COG (all CPUs)", t, rss))

    info = subprocess.run(["gdalinfo", str(cog)], capture_output=True, text=True,
                          check=True).stdout
    layout_cog = "LAYOUT=COG" in info
    levels = [ln.split(":", 1)[1].strip() for ln in info.splitlines()
              if ln.strip().startswith("Overviews:")][0].split(", ")
    rio = subprocess.run([a.rio, "cogeo", "validate", "--strict", str(cog)],
                         capture_output=True, text=True)
    rio_ok = rio.returncode == 0 and "is a valid cloud optimized GeoTIFF" in rio.stdout

    # the reference: the same pixels as a plain GeoTIFF, overviews by gdaladdo
    imagery.sh([str(ts), "convert", str(scene), str(ref), "-m", mem, "--progress", "never"])
    factors = [str(2 ** (k + 1)) for k in range(len(levels))]
    # one thread: GDAL 3.6's gdaladdo with GDAL_NUM_THREADS hung on this file
    t, rss = imagery.timed(["gdaladdo", "-q", "-r", "average", str(ref)] + factors)
    rows.append(("gdaladdo -r average, 1 thread (the reference's overviews)", t, rss))
    compare = []
    for k, size in enumerate(levels):
        ours = level_raw(cog, k, WORK / "ov_ours.raw")
        theirs = level_raw(ref, k, WORK / "ov_ref.raw")
        out = subprocess.run([str(py), "-c", f"""
import numpy as np
a = np.memmap({str(ours)!r}, dtype='<u2', mode='r')
b = np.memmap({str(theirs)!r}, dtype='<u2', mode='r')
assert a.size == b.size
mx = 0; nd = 0
for i in range(0, a.size, 1 << 26):
    d = np.abs(a[i:i + (1 << 26)].astype(np.int32) - b[i:i + (1 << 26)].astype(np.int32))
    mx = max(mx, int(d.max())); nd += int((d != 0).sum())
print(mx, nd, a.size)
"""], capture_output=True, text=True, check=True).stdout.split()
        compare.append((k + 1, size, int(out[0]), int(out[1]), int(out[2])))
    sizes = {p.name: p.stat().st_size for p in (scene, cog, gdal_cog)}

    md = [f"COG of the {a.size}x{a.size} 4-band u16 scene (`python3 benches/compare/cog.py`), "
          f"warm page cache, budget {mem} for tilestream:", "",
          "| run | seconds | peak RSS MiB |", "|---|---:|---:|"]
    md += [f"| {n} | {t:.1f} | {r:.0f} |" for n, t, r in rows]
    md += ["", f"- `gdalinfo` reports LAYOUT=COG: {'yes' if layout_cog else 'NO'}; "
           f"overviews {', '.join(levels)}",
           f"- `rio cogeo validate --strict`: {'valid' if rio_ok else 'NOT VALID: ' + rio.stdout + rio.stderr}",
           f"- sizes: scene {sizes[scene.name] / 2**30:.2f} GiB, tilestream COG "
           f"{sizes[cog.name] / 2**30:.2f} GiB, GDAL COG {sizes[gdal_cog.name] / 2**30:.2f} GiB",
           "", "| level | size | max difference from gdaladdo | values differing | values |",
           "|---:|---|---:|---:|---:|"]
    md += [f"| {k} | {s} | {mx} | {nd} | {n} |" for k, s, mx, nd, n in compare]
    text = "\n".join(md) + "\n"
    print(text)
    (imagery.RESULTS / "cog.md").write_text(text)
    if not a.keep:
        for p in (cog, gdal_cog, ref, WORK / "ov_ours.raw", WORK / "ov_ref.raw",
                  WORK / "ov_ours.hdr", WORK / "ov_ref.hdr"):
            p.unlink(missing_ok=True)
        for p in WORK.glob("*.aux.xml"):
            p.unlink()
    ok = layout_cog and rio_ok and all(mx <= 1 for _, _, mx, _, _ in compare)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
