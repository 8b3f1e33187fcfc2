#!/usr/bin/env bash
# One device call for a short GPU session (15 minutes of device time, 10 a command): the
# kit's suite, smoke and bench in turn, each under its own time limit so that one that
# overruns still leaves its summary (the kit writes it when interrupted) and the next
# still runs. Six files come back: summary-{suite,smoke,bench}.txt and their tarballs.
#
#   here:  bash benches/gpu/build.sh
#   there: bash benches/gpu/session.sh        (carry: ["target/gpu"], timeout_s 570)
#
# Limits in seconds, each mode's: SUITE_S, SMOKE_S, BENCH_S (defaults 170, 170, 190).
# smoke runs compute-sanitizer's memcheck only (racecheck found nothing on these kernels
# on 2026-11-26, and the kernels' sources have not changed since); bench runs tilestream
# alone on both devices at 512 MiB, then at 256 MiB and 8 GiB (a GPU run's budget holds
# the CUDA driver's own host memory, about 150 MiB: smaller budgets are refused; the
# baselines have a call of their own: kit.py bench --only baselines).
set -u
cd "$(dirname "$0")/../.."
t0=$(date +%s)
lim() { timeout -s INT --kill-after=15 "$@"; }
echo "== suite"
lim "${SUITE_S:-170}" python3 benches/gpu/kit.py suite --timeout $(( ${SUITE_S:-170} - 20 ))
echo "== smoke ($(( $(date +%s) - t0 )) s in)"
lim "${SMOKE_S:-170}" python3 benches/gpu/kit.py smoke --sanitizers memcheck
echo "== bench ($(( $(date +%s) - t0 )) s in)"
lim "${BENCH_S:-190}" python3 benches/gpu/kit.py bench --only tilestream --budgets ${BUDGETS:-256MiB,8GiB}
echo "== done in $(( $(date +%s) - t0 )) s"
for m in suite smoke bench; do
    f="${OUT:-benches/gpu/out}/summary-$m.txt"
    [ -f "$f" ] && tail -n 1 "$f"
done
