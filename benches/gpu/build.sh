#!/usr/bin/env bash
# Run HERE (the machine with cargo), before a GPU session. Builds what the GPU kit
# (benches/gpu/kit.py) needs on the GPU machine, which has the driver, NVRTC and Python
# but no Rust: the release binary and the integration tests (NVRTC tests compiled in:
# TILESTREAM_REQUIRE_NVRTC=1), stripped and gzipped (kit.py unpacks them there), into
# target/gpu/. Prints their sizes (the device tool carries at most 64 MiB) and the
# newest GLIBC symbol they need (the GPU image is Ubuntu 22.04 or 24.04: glibc 2.35 at
# the oldest). Carry with `carry: ["target/gpu"]`.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=target/test-venv
if [ ! -x "$venv/bin/python" ]; then bash scripts/test setup; fi
nvrtc=$("$venv/bin/python" -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13", "lib"))')
export LD_LIBRARY_PATH="$nvrtc${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" TILESTREAM_REQUIRE_NVRTC=1
cargo build --release --quiet
exe=$(cargo test --release --no-run --test it --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "it":
        print(m["executable"])')
rm -rf target/gpu && mkdir -p target/gpu
cp target/release/tilestream target/gpu/tilestream
cp "$exe" target/gpu/it
strip target/gpu/tilestream target/gpu/it
glibc=$(objdump -T target/gpu/tilestream target/gpu/it | grep -o 'GLIBC_[0-9.]*' | sort -t. -k1,1 -k2,2n -V | tail -1)
# gzipped for the carry (64 MiB in all; stripped, the two are over 70 MiB): kit.py
# unpacks them there
gzip -9 -f target/gpu/tilestream target/gpu/it
# the Python package, for the suite's GPU example (pinned blocks, a PyTorch model)
PATH="$PWD/$venv/bin:$PATH" "$venv/bin/python" -m pip wheel --quiet --disable-pip-version-check \
    --no-build-isolation --no-deps ./python -w target/gpu
total=$(du -cb target/gpu/* | tail -1 | cut -f1)
du -b target/gpu/*
echo "total $((total / 1024 / 1024)) MiB (at most 64 MiB travel)"
echo "newest GLIBC symbol: $glibc"
if [ "$total" -gt $((60 * 1024 * 1024)) ]; then echo "too large to carry"; exit 1; fi
case "$glibc" in GLIBC_2.3[6-9]|GLIBC_2.[4-9]*) echo "needs a glibc newer than 2.35"; exit 1 ;; esac
