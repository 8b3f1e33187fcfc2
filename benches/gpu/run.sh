#!/usr/bin/env bash
# Run ON THE GPU MACHINE (after benches/gpu/build.sh here), from the repository root:
#   bash benches/gpu/run.sh
# Records the device, driver and NVRTC; runs the kernel-compilation test, the host
# emulation and the GPU suite (tests/it/gpu.rs) with the GPU present; then times a
# first benchmark (affine x*2+1 to f16, a cast, the column mean, gen of 6.3 GB, the 512 -> 64 projection,
# the transpose, a gaussian and a 3x3 median of a 20000x20000 image; CPU against CUDA,
# warm page cache, median of 3, peak RSS). Everything goes to $OUT (or benches/gpu/out) and a short table
# is printed last.
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-benches/gpu/out}"
mkdir -p "$out"
bin=target/gpu/tilestream
it=target/gpu/it
[ -x "$bin" ] && [ -x "$it" ] || { echo "run benches/gpu/build.sh first and carry target/gpu"; exit 2; }

# NVRTC from the machine's Python (nvidia-cuda-nvrtc), for the kernels compiled at run time
nvrtc=$(python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13", "lib"))' 2>/dev/null)
export LD_LIBRARY_PATH="${nvrtc}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
{
    nvidia-smi --query-gpu=name,driver_version,memory.total,memory.free --format=csv
    ls "$nvrtc" | grep nvrtc
    python3 -m pip show nvidia-cuda-nvrtc 2>/dev/null | grep -i version
} > "$out/device.txt" 2>&1

TILESTREAM_REQUIRE_NVRTC=1 "$it" cuda gpu --nocapture --test-threads 1 > "$out/gpu-tests.log" 2>&1
echo "gpu tests: exit $?" | tee -a "$out/summary.txt"
tail -3 "$out/gpu-tests.log"

work=$(mktemp -d)
"$bin" gen "$work/x.npy" --shape 3075200x512 --dtype f32 --seed 1 --memory 1GiB --progress never > /dev/null
"$bin" gen "$work/w.npy" --shape 512x64 --dtype f32 --seed 2 --progress never > /dev/null
"$bin" gen "$work/img.npy" --shape 20000x20000 --dtype f32 --seed 4 --memory 1GiB --progress never > /dev/null
cat "$work/x.npy" "$work/img.npy" > /dev/null   # warm the page cache
printf "%-24s %-6s %10s %10s %12s\n" task device median_s GB/s peak_rss_MiB | tee -a "$out/summary.txt"
for task in affine cast colmean gen matmul transpose gaussian median3; do
    for dev in cpu cuda; do
        times=()
        for r in 1 2 3; do
            case $task in
                affine) args=(affine "$work/x.npy" "$work/y.npy" --scale 2 --offset 1 --dtype f16) ;;
                cast) args=(cast "$work/x.npy" "$work/y.npy" --dtype bf16) ;;
                colmean) args=(reduce "$work/x.npy" "$work/y.npy" --op mean --axis 0) ;;
                gen) args=(gen "$work/y.npy" --shape 3075200x512 --dtype f32 --seed 1) ;;
                matmul) args=(matmul "$work/x.npy" "$work/w.npy" "$work/y.npy") ;;
                transpose) args=(transpose "$work/x.npy" "$work/y.npy") ;;
                gaussian) args=(stencil "$work/img.npy" "$work/y.npy" --filter gaussian:sigma=2) ;;
                median3) args=(stencil "$work/img.npy" "$work/y.npy" --filter median:size=3) ;;
            esac
            /usr/bin/time -v "$bin" "${args[@]}" --device "$dev" --memory 512MiB --json --progress never --no-sync \
                > "$out/$task-$dev-$r.json" 2> "$out/$task-$dev-$r.time"
            times+=("$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["wall_s"])' "$out/$task-$dev-$r.json")")
            rm -f "$work/y.npy"
        done
        python3 - "$task" "$dev" "$out/$task-$dev-2.json" "$out/$task-$dev-2.time" "${times[@]}" <<'PY' | tee -a "$out/summary.txt"
import json, re, statistics, sys
task, dev, js, tm, *ts = sys.argv[1:]
r = json.load(open(js))
med = statistics.median(float(t) for t in ts)
rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", open(tm).read()).group(1)) / 1024
gbs = (r["bytes_read"] + r["bytes_written"]) / med / 1e9
print(f"{task:<24} {r['device']:<6} {med:10.3f} {gbs:10.2f} {rss:12.0f}")
PY
    done
done
rm -rf "$work"
