#!/usr/bin/env bash
# The Python package's tests: builds and installs tilestream's Python package (python/,
# a Rust extension built by maturin) into a virtual environment under target/ (or the
# one TILESTREAM_VENV names), with numpy, pytest and distributed (tilestream.dask's tests
# start LocalClusters on 127.0.0.1), then runs python/tests.
# Run from anywhere: `bash python/test.sh` (the README's test command runs it after
# `cargo test`). The first build takes about 10 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${TILESTREAM_VENV:-target/py-venv}"
if [ ! -x "$venv/bin/python" ]; then
    mkdir -p "$(dirname "$venv")"
    python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check numpy pytest distributed
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check ./python
"$venv/bin/python" -m pytest -q -rs python/tests "$@"
