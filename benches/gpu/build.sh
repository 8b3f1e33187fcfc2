#!/usr/bin/env bash
# Run HERE (the machine with cargo), before a GPU session: builds the release binary and
# the integration-test binary and puts them, stripped, in target/gpu/ (carried to the GPU
# machine by the device tool: `carry: ["target/gpu"]`, well under its 64 MiB). The GPU
# machine has the driver, NVRTC (its Python's nvidia-cuda-nvrtc) and no Rust toolchain.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release --quiet
exe=$(cargo test --release --no-run --test it --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "it":
        print(m["executable"])')
mkdir -p target/gpu
cp target/release/tilestream target/gpu/tilestream
cp "$exe" target/gpu/it
strip target/gpu/tilestream target/gpu/it
du -sh target/gpu/*
