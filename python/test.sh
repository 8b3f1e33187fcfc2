#!/usr/bin/env bash
# The Python package's tests alone: `bash python/test.sh` is `bash scripts/test python`,
# which sets up the test venv (target/test-venv) when it is missing, builds tilestream's
# Python package (python/, a Rust extension built by maturin) into it, and runs
# python/tests. Arguments are not passed on: use the venv's pytest for a selection.
exec bash "$(dirname "$0")/../scripts/test" python
