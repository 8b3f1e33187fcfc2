"""Inputs in object stores: a job on an object served over HTTP with a latency per request,
against the same job on the local file, in one sitting (issue 49's measurement).

A 4-band SIZE x SIZE u16 COG (Deflate, 512-pixel tiles), a ROWS x 512 f32 `.npy` and a
ZARR_ROWS x 512 f32 sharded Zarr store (zstd, shards of 16384 x 512 holding chunks of
1024 x 128) are served by tests/object_server.py with --latency-ms (default 20) on
127.0.0.1. Jobs: the masked NDVI of the COG, written as an f32 GeoTIFF, and the column
means of the `.npy` and the store; each run on the local input and on the URL,
alternating, median of --runs. Reported: wall
time, peak RSS (/usr/bin/time -v), requests and bytes the server sent, the bytes against
the object's size, and the time against the local run's plus the latency of the requests
divided by the requests in flight (the issue's bound: within 2x of that; in flight: what
`tilestream plan` says for a chunked input, the reading threads for a .npy).

    python3 benches/compare/objects.py [--size 4000] [--rows 400000] [--zarr-rows 200000]
        [--runs 3] [--readme]
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TS = ROOT / "target" / "release" / "tilestream"


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def timed(cmd):
    """(seconds, peak RSS in MiB) of a command."""
    t = time.perf_counter()
    r = subprocess.run(["/usr/bin/time", "-v"] + cmd, capture_output=True, text=True)
    dt = time.perf_counter() - t
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(map(str, cmd))}\n{r.stderr}")
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr).group(1))
    return dt, rss / 1024


def same_output(a, b):
    return a.read_bytes() == b.read_bytes()


def stored_bytes(p):
    """Bytes of a file, or of every file under a directory (a Zarr store)."""
    if p.is_dir():
        return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
    return p.stat().st_size


def touched_tile_bytes(tif, r0, c0, h, w, bands):
    """Stored bytes of the tiles of the COG `tif`'s full-resolution image (its first IFD)
    that the window of `h` x `w` pixels at (`r0`, `c0`) touches, for the bands `bands`
    (every band's, in the same tiles, when the file is pixel-interleaved)."""
    import struct
    b = tif.read_bytes()[: 1 << 20]
    e = "<" if b[:2] == b"II" else ">"
    big = struct.unpack(e + "H", b[2:4])[0] == 43
    data = tif.open("rb")
    off = struct.unpack(e + ("Q" if big else "I"), b[8:16] if big else b[4:8])[0]
    data.seek(off)
    n = struct.unpack(e + ("Q" if big else "H"), data.read(8 if big else 2))[0]
    size = {3: 2, 4: 4, 16: 8}
    tags = {}
    for _ in range(n):
        ent = data.read(20 if big else 12)
        tag, typ = struct.unpack(e + "HH", ent[:4])
        cnt = struct.unpack(e + ("Q" if big else "I"), ent[4:12] if big else ent[4:8])[0]
        raw = ent[12:20] if big else ent[8:12]
        nbytes = cnt * size.get(typ, 1)
        if nbytes > len(raw):
            at = struct.unpack(e + ("Q" if big else "I"), raw)[0]
            pos = data.tell()
            data.seek(at)
            raw = data.read(nbytes)
            data.seek(pos)
        fmt = {3: "H", 4: "I", 16: "Q"}.get(typ, "B")
        tags[tag] = struct.unpack(e + fmt * cnt, raw[:nbytes])
    width, height = tags[256][0], tags[257][0]
    tw, th = tags[322][0], tags[323][0]
    planar = tags.get(284, (1,))[0]
    counts = tags[325]
    across, down = -(-width // tw), -(-height // th)
    planes = bands if planar == 2 else [0]
    total = 0
    for band in planes:
        for ty in range(r0 // th, (r0 + h - 1) // th + 1):
            for tx in range(c0 // tw, (c0 + w - 1) // tw + 1):
                total += counts[band * across * down + ty * across + tx]
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=4000)
    ap.add_argument("--rows", type=int, default=400000)
    ap.add_argument("--zarr-rows", type=int, default=200000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--latency-ms", type=float, default=20.0)
    ap.add_argument("--memory", default="64MiB")
    ap.add_argument("--window", type=int, default=0,
                    help="also the NDVI of a WINDOW x WINDOW window of the COG (0: not run)")
    ap.add_argument("--only", default="", help="run only the jobs whose name holds this")
    ap.add_argument("--readme", action="store_true", help="write the table into docs/object-stores.md")
    a = ap.parse_args()
    if not TS.exists():
        sh(["cargo", "build", "--release", "--quiet"], cwd=ROOT)
    work = Path(tempfile.mkdtemp(prefix="ts-objects-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    try:
        # the inputs the selected jobs read (the job names say which)
        names = ["masked NDVI, 4-band COG", "column mean, f32 .npy",
                 "column mean, sharded f32 Zarr"]
        if a.window:
            names.append(f"masked NDVI of a {a.window}x{a.window} window, 4-band COG")

        def wanted(word):
            return any(a.only in n for n in names if word in n)
        scene = work / "scene.tif"
        if wanted("COG"):
            scene_npy = work / "scene.npy"
            sh([TS, "gen", scene_npy, "--shape", f"4x{a.size}x{a.size}", "--dtype", "u16",
                "--dist", "uniform", "--low", "0", "--high", "10000", "--memory", "256MiB"])
            sh([TS, "convert", scene_npy, scene, "--cog", "--memory", "512MiB"])
            scene_npy.unlink()
        x = work / "x.npy"
        if wanted(".npy"):
            sh([TS, "gen", x, "--shape", f"{a.rows}x512", "--memory", "256MiB"])
        z = work / "z.zarr"
        if wanted("Zarr"):
            zx = work / "zx.npy"
            sh([TS, "gen", zx, "--shape", f"{a.zarr_rows}x512", "--memory", "256MiB"])
            sh([TS, "convert", zx, z, "--zarr-chunks", "1024x128", "--zarr-shard", "16384x512",
                "--memory", "256MiB"])
            zx.unlink()
        srv = subprocess.Popen([sys.executable, ROOT / "tests" / "object_server.py", "--root", work,
                                "--latency-ms", str(a.latency_ms)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        port = int(srv.stdout.readline())
        base = f"http://127.0.0.1:{port}"

        def stats(path):
            with urllib.request.urlopen(f"{base}/{path}") as r:
                return json.loads(r.read() or b"{}")

        jobs = {
            "masked NDVI, 4-band COG": (scene, lambda src, out: [
                TS, "map", "(s[3] - s[2]) / (s[3] + s[2])", out, "--in", f"s={src}",
                "--dtype", "f32", "--memory", a.memory]),
            "column mean, f32 .npy": (x, lambda src, out: [
                TS, "reduce", src, out, "--op", "mean", "--axis", "0", "--memory", a.memory]),
            "column mean, sharded f32 Zarr": (z, lambda src, out: [
                TS, "reduce", src, out, "--op", "mean", "--axis", "0", "--memory", a.memory]),
        }
        touched = {}
        if a.window:
            # a window whose edges fall inside tiles, as a user's area of interest does
            r0 = (a.size - a.window) // 2 + 7
            c0 = (a.size - a.window) // 2 - 93
            name = names[-1]
            jobs[name] = (scene, lambda src, out: [
                TS, "map", "(s[3] - s[2]) / (s[3] + s[2])", out, "--in", f"s={src}",
                "--dtype", "f32", "--memory", a.memory,
                "--window", f"{r0}:{r0 + a.window},{c0}:{c0 + a.window}"])
            touched[name] = touched_tile_bytes(scene, r0, c0, a.window, a.window, [2, 3])
        jobs = {k: v for k, v in jobs.items() if a.only in k}
        rows = []
        threads = os.cpu_count() or 1
        for name, (path, cmd) in jobs.items():
            ext = ".tif" if path.suffix == ".tif" else ".npy"
            local_out, obj_out = work / f"l{ext}", work / f"o{ext}"
            t_local, t_obj, rss_local, rss_obj, sent, reqs = [], [], [], [], [], []
            for _ in range(a.runs):
                dt, rss = timed(cmd(path, local_out))
                t_local.append(dt)
                rss_local.append(rss)
                stats("_reset")
                dt, rss = timed(cmd(f"{base}/slow/{path.name}", obj_out))
                st = stats("_stats")
                t_obj.append(dt)
                rss_obj.append(rss)
                sent.append(st["bytes"])
                reqs.append(st["requests"])
            # requests in flight: the batch the plan gives a chunked input, else the
            # reading threads
            plan = subprocess.run([TS, "plan"] + [str(c) for c in cmd(f"{base}/ok/{path.name}", obj_out)[1:]],
                                  capture_output=True, text=True).stdout
            m = re.search(r"up to (\d+) requests in flight", plan)
            conc = int(m.group(1)) if m else threads
            same = same_output(local_out, obj_out)
            # the bytes the job needs: the tiles its window touches, or the whole object
            size = touched.get(name) or stored_bytes(path)
            tl, to = statistics.median(t_local), statistics.median(t_obj)
            r = statistics.median(reqs)
            bound = tl + r * a.latency_ms / 1000 / conc
            rows.append((name, size, tl, to, r, conc, statistics.median(sent) / size, bound,
                         to / bound, max(rss_local), max(rss_obj), same))
        srv.stdin.close()
        srv.wait(timeout=10)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    lines = [
        f"4-band {a.size}x{a.size} u16 COG, {a.rows}x512 f32 .npy and {a.zarr_rows}x512 f32 "
        f"sharded Zarr (zstd, 1024x128 chunks in 16384x512 shards) served over HTTP on "
        f"127.0.0.1 with {a.latency_ms:g} ms per request, --memory {a.memory}, {threads} cores, "
        f"median of {a.runs} alternating runs, warm page cache. Bytes needed: the object, or "
        f"for a window the stored tiles of the bands the job reads (2 and 3) that it touches.",
        "",
        "| job | bytes needed | local s | object s | requests | in flight | bytes sent / needed | "
        "bound s (local + requests x latency / in flight) | object / bound | peak RSS local | "
        "peak RSS object | same bytes |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for (name, size, tl, to, r, conc, ratio, bound, rel, rl, ro, same) in rows:
        lines.append(f"| {name} | {size / 2**20:.0f} MiB | {tl:.2f} | {to:.2f} | {r:.0f} | "
                     f"{conc} | {ratio:.3f} | {bound:.2f} | {rel:.2f} | {rl:.0f} MiB | "
                     f"{ro:.0f} MiB | {'yes' if same else 'NO'} |")
    table = "\n".join(lines)
    print(table)
    if a.readme:
        doc = ROOT / "docs" / "object-stores.md"
        text = doc.read_text()
        text = re.sub(r"<!-- bench:objects -->.*?<!-- /bench:objects -->",
                      f"<!-- bench:objects -->\n{table}\n<!-- /bench:objects -->", text, flags=re.S)
        doc.write_text(text)


if __name__ == "__main__":
    main()
