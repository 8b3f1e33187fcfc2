#!/usr/bin/env python3
"""How fast Ctrl-C stops a tilestream call from Python: a child Python runs a median
filter (8000x2000 f32, median:size=7, memory="2MiB", threads=1) and reports when a few
tiles are done; SIGINT is sent at once, and the time until the child has caught
KeyboardInterrupt and exited is printed for 5 runs (the tests check that the call is
interrupted and resumes, not how fast: timing belongs here).

Run with a Python that has the package and numpy: `python benches/compare/ctrl_c_latency.py`.
"""
import os, signal, subprocess, sys, tempfile, textwrap, time, statistics
import numpy as np
d = tempfile.mkdtemp()
x = os.path.join(d, "x.npy"); out = os.path.join(d, "m.npy")
np.save(x, np.random.default_rng(0).random((8000, 2000), dtype=np.float32))
script = textwrap.dedent(f"""
    import sys, tilestream as ts
    said = []
    def tell(p):
        if not said and p["tiles_done"] >= 2:
            said.append(1); print("start", flush=True)
    try:
        ts.stencil({x!r}, {out!r}, "median:size=7", memory="2MiB", threads=1, progress=tell)
    except KeyboardInterrupt:
        print("interrupted", flush=True); sys.exit(7)
    print("finished", flush=True)
""")
took = []
for r in range(5):
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "start"
    t0 = time.monotonic(); p.send_signal(signal.SIGINT)
    rest = p.communicate(timeout=60)[0]
    took.append(time.monotonic() - t0)
    assert p.returncode == 7 and "interrupted" in rest, (p.returncode, rest)
    for f in os.listdir(d):
        if f != "x.npy":
            os.remove(os.path.join(d, f))
print("SIGINT to exit (s):", " ".join(f"{t:.3f}" for t in took), "median", f"{statistics.median(took):.3f}", "max", f"{max(took):.3f}")
import shutil
shutil.rmtree(d)
