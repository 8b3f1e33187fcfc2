#!/usr/bin/env bash
# Two tilestream binaries compared by the instructions they execute (valgrind's
# callgrind, user space, one compute thread) on the benchmark table's six tasks at a
# small size: a count that machine noise does not move, for checking that a change adds
# no work per element when wall times on a shared machine swing by more than the change.
#
#   bash benches/compare/instructions.sh OLD_BIN NEW_BIN [WORK_DIR]
#
# Needs valgrind (apt-get install valgrind). Inputs: 20000x512 f32 (39 MiB), a 1000x1000
# image, W 512x64, made once in WORK_DIR (default: a temporary directory, removed after).
set -euo pipefail
a=$(realpath "$1"); b=$(realpath "$2")
work=${3:-$(mktemp -d)}
[ -n "${3:-}" ] || trap 'rm -rf "$work"' EXIT
mkdir -p "$work" && cd "$work"
q=(--no-sync --progress never)
[ -f x.npy ] || "$a" gen x.npy --shape 20000x512 --dtype f32 --seed 1 "${q[@]}" >/dev/null 2>&1
[ -f w.npy ] || "$a" gen w.npy --shape 512x64 --dtype f32 --seed 2 "${q[@]}" >/dev/null 2>&1
[ -f img.npy ] || "$a" gen img.npy --shape 1000x1000 --dtype f32 --seed 4 "${q[@]}" >/dev/null 2>&1
count() {
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$@" 2>&1 |
        awk '/Collected/ {print $4}'
}
printf '%-12s %14s %14s %8s\n' task A B B/A
while IFS='|' read -r name args; do
    # shellcheck disable=SC2086
    ca=$(count "$a" --threads 1 --memory 64MiB $args "${q[@]}")
    # shellcheck disable=SC2086
    cb=$(count "$b" --threads 1 --memory 64MiB $args "${q[@]}")
    awk -v n="$name" -v a="$ca" -v b="$cb" 'BEGIN { printf "%-12s %14s %14s %8.4f\n", n, a, b, b / a }'
done <<'TASKS'
colmean|reduce x.npy out.npy --op mean --axis 0
colstd|reduce x.npy out.npy --op std --axis 0
map_f16|map (x*2+1) out.npy --in x=x.npy --dtype f16
standardize|standardize x.npy out.npy --dtype f32
matmul|matmul x.npy w.npy out.npy
gaussian|stencil img.npy out.npy --filter gaussian:sigma=2
TASKS
