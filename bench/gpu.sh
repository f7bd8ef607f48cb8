#!/usr/bin/env bash
# One run on the GPU machine: build (or use a carried build), GPU tests (with the all-floats tanh
# sweep), the concurrency stress and ROUNDS (2; 10 with MODE=stress) rounds of every GPU test eight at a time,
# compute-sanitizer memcheck + racecheck + synccheck, then the Muse-shape benchmark sweep with a
# read ceiling measured in the same run. Prints a summary table last.
#   bench/gpu.sh [BUILD_DIR]     (default: build/cuda-carry if it holds binaries, else build/gpu)
#   MODE=stress bench/gpu.sh     the correctness-under-load steps alone
#   MODE=route bench/gpu.sh      the llama.cpp route's tests, then it beside the default route (Muse shape)
#   MODE=python bench/gpu.sh     the Python package built with CUDA, its tests with torch, its overhead
#                                (bench/gpu_python.sh; the full run does it too unless PYTHON_TESTS=0)
#   MODE=sample-profile bench/gpu.sh  the sampling kernels' SASS, Nsight Compute and Systems views, then
#                                the sampling benchmark
# Logs go to $OUT (or /tmp/lmhead-gpu).
set -u -o pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-/tmp/lmhead-gpu}
# Scratch files (models, ids, profiles) of this run only, so two runs never share one.
SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/lmhead-bench-XXXXXX")
trap 'rm -rf "$SCRATCH"' EXIT
mkdir -p "$OUT"
BUILD=${1:-}
# A carried build may come compressed (make it with:
#   tar -C build -cJf build/cuda-carry.tar.xz cuda-carry   after stripping the three binaries).
if [ -f build/cuda-carry.tar.xz ] && [ ! -x build/cuda-carry/lmhead_tests ]; then tar -C build -xJf build/cuda-carry.tar.xz; fi
if [ -z "$BUILD" ]; then
  if [ -x build/cuda-carry/lmhead_tests ] && [ -x build/cuda-carry/cuda_bench ]; then BUILD=build/cuda-carry; else BUILD=build/gpu; fi
fi
export LMHEAD_TEST_DATA_DIR=$ROOT/tests/data
# Every GPU test (and the golden and sharding tests beside them), for the concurrency rounds.
GPU_TESTS='Cuda*:MultiGpu*:*TiledRoute*:*Golden*:Sharding*:*LlamaCpp*cuda*:LlamaCppRouteShapes.*:*LlamaCppVecDotTail*:SampleEngine.Cuda*:CudaSample.*:DeviceInput.*'

# Each step's heading carries the seconds since the start: the full run must fit one device call
# (600 s), and this is where its time goes.
step() { echo; echo "==== [${SECONDS} s] $* ===="; }
ROUNDS=${ROUNDS:-$([ "${MODE:-full}" = stress ] && echo 10 || echo 2)}

step "device"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem --format=csv 2>&1 | tee "$OUT/device.txt"

if [ ! -x "$BUILD/lmhead_tests" ] || [ ! -x "$BUILD/cuda_bench" ]; then
  step "build in $BUILD"
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release 2>&1 | tail -3
  cmake --build "$BUILD" --target lmhead_tests lmhead cuda_bench -j"$(nproc)" 2>&1 | tail -3 || exit 1
fi

if [ "${MODE:-full}" = "profile" ]; then
  # Nsight Compute on the head kernels (clocks left as they are), then the benchmark.
  for m in mma1 mma16 gen1; do
    k=q5k_; [ $m = gen1 ] && k=generic_head_kernel
    timeout 120 ncu --clock-control none -k regex:$k --launch-skip 5 --launch-count 1 --set full \
      -o "$SCRATCH/ncu_$m" -f "$BUILD/cuda_bench" --profile $m > $SCRATCH/ncu_$m.log 2>&1
    tail -3 $SCRATCH/ncu_$m.log
    ncu -i "$SCRATCH/ncu_$m.ncu-rep" --page details >> "$OUT/ncu_details.txt" 2>&1
  done
  ncu -i $SCRATCH/ncu_mma1.ncu-rep --page source --csv --print-source sass > "$OUT/ncu_src_mma1.csv" 2>&1
  ncu -i $SCRATCH/ncu_gen1.ncu-rep --page source --csv --print-source sass > "$OUT/ncu_src_gen1.csv" 2>&1
  grep -E "SM Frequency|DRAM Throughput|Duration|Issue Slots Busy|No Eligible|Registers Per|Achieved Occupancy|Memory Throughput" "$OUT/ncu_details.txt"
  timeout 200 "$BUILD/cuda_bench" --quick 2>&1 | tee "$OUT/bench.log"
  exit 0
fi

export LMHEAD_CLI=$ROOT/$BUILD/lmhead  # the tests' compiled-in path may be another checkout's

# Concurrency is a correctness property (docs/cuda.md, "Completion"): many backends and threads in
# one process, several processes at once, every call against the scalar bytes; then every GPU test
# as its own process, eight at a time (what ctest -j8 does), ROUNDS times, failures per round.
stress_and_rounds() {
  step "stress: backends x threads in one process, and three processes at once"
  LMHEAD_STRESS_CALLS=${STRESS_CALLS:-6000} timeout 300 "$BUILD/lmhead_tests" --gtest_filter='CudaStress.*' 2>&1 |
    tee "$OUT/stress.log" | grep -E "stress|process|OK|FAILED|PASSED"
  STRESS_RC=${PIPESTATUS[0]}
  step "every GPU test as its own process, 8 at a time, $ROUNDS rounds"
  local tests
  tests=$("$BUILD/lmhead_tests" --gtest_list_tests --gtest_filter="$GPU_TESTS" | awk '/^[^ ]/ { suite = $1 } /^  / { print suite $1 }')
  ROUNDS_FAILED=0
  for r in $(seq 1 "$ROUNDS"); do
    local t0=$SECONDS
    local failed
    failed=$(printf '%s\n' $tests | xargs -P8 -I{} sh -c 'o=$("$0" --gtest_filter="$1" 2>&1) || { echo "FAILED $1"; echo "$o" | grep -E "Failure|error|differ|Which is" | head -5; }' \
      "$BUILD/lmhead_tests" {})
    local n
    n=$(printf '%s' "$failed" | grep -c '^FAILED' || true)
    ROUNDS_FAILED=$((ROUNDS_FAILED + n))
    echo "round $r: $(printf '%s\n' $tests | wc -l) tests, $n failed ($((SECONDS - t0)) s)" | tee -a "$OUT/rounds.log"
    [ -n "$failed" ] && printf '%s\n' "$failed" | tee -a "$OUT/rounds.log"
  done
  for tool in ${STRESS_SANITIZERS-racecheck synccheck}; do
    step "compute-sanitizer $tool on the stress test (a short run)"
    LMHEAD_STRESS_CALLS=16 LMHEAD_STRESS_THREADS=2 LMHEAD_STRESS_TOKENS=2 timeout ${SANITIZER_TIMEOUT:-150} compute-sanitizer --tool $tool --error-exitcode 9 \
      "$BUILD/lmhead_tests" --gtest_filter='CudaStress.ManyBackendsManyThreadsGiveTheScalarBytes' 2>&1 | tail -6 | tee "$OUT/stress-$tool.log"
  done
}

sampling_bench() {
  # Sampling and verification on the GPU against the argmax-only call of the same run (issue 16:
  # T=1 temperature + top-p 0.9 within 3 %, T=8 verification within 5 %); the synthetic head's
  # nearly flat logits are top-p's hardest case (about 90 % of the ids in the prefix).
  [ -f $SCRATCH/muse-q5k.gguf ] || return 0
  step "sampling on the GPU against the argmax-only call (lmhead bench --backend cuda)"
  for args in "--temperature 1" "--temperature 1 --top-p 0.9" "--temperature 1 --min-p 0.05 --top-p 0.95" \
              "--verify" "--verify --temperature 1"; do
    echo "-- $args"
    timeout 120 "$BUILD/lmhead" bench $SCRATCH/muse-q5k.gguf --backend cuda --tokens 1,8 --repeat 300 --seed 7 $args 2>&1 | grep -v "^lmhead: uploading"
  done 2>&1 | tee "$OUT/sampling.log"
  # The vocabulary split over shards (here two on one GPU): the rounds' exchanges against the
  # sharded argmax-only call.
  for args in "--temperature 1" "--temperature 1 --top-p 0.9"; do
    echo "-- --shards 2 $args"
    timeout 120 "$BUILD/lmhead" bench $SCRATCH/muse-q5k.gguf --backend cuda --shards 2 --tokens 1,8 --repeat 100 --seed 7 \
      $args 2>&1 | grep -v "^lmhead: uploading"
  done 2>&1 | tee "$OUT/sampling-shards.log"
}

# The Muse-shape checkpoint of a head type: the Q5_K one is the file every step reads.
muse_file() { if [ "$1" = q5_K ]; then echo "$SCRATCH/muse-q5k.gguf"; else echo "$SCRATCH/muse-$1.gguf"; fi; }

route_bench() {
  [ -x "$BUILD/lmhead" ] || return 0
  # Route llamacpp beside the default route, Muse shape, every head type whose llama.cpp path has
  # its own order somewhere (issue 21: within 1.5x of the default route at every T on the H200).
  step "route llamacpp vs the default route (Muse shape, lmhead bench --backend cuda)"
  for type in ${ROUTE_TYPES:-q5_K q6_K q4_K f16 bf16 f32}; do
    f=$(muse_file $type)
    [ -f "$f" ] || timeout 200 "$BUILD/lmhead" make "$f" --type $type --quiet || continue
    for route in vec_dot llamacpp; do
      # Float heads take milliseconds per call: 30 calls give a steady median and keep the run in one device call.
      case $type in f16|bf16|f32) repeat=30 ;; *) repeat=200 ;; esac
      timeout 120 "$BUILD/lmhead" bench "$f" --backend cuda --route $route --tokens 1,2,4,8,16 --repeat $repeat --json \
        > "$SCRATCH/route-$type-$route.json" 2> "$SCRATCH/route-$type-$route.err" || cat "$SCRATCH/route-$type-$route.err"
    done
    [ $type = q5_K ] || rm -f "$f"
  done
  python3 - "$SCRATCH" <<'PY' 2>&1 | tee "$OUT/route.log"
import json, sys, os
out = sys.argv[1]
print("| head | T | llama.cpp path | default ms | llamacpp ms | llamacpp / default | llamacpp GB/s | ratio to ceiling | ceiling GB/s |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for t in ["q5_K", "q6_K", "q4_K", "f16", "bf16", "f32"]:
    try:
        d = json.load(open(os.path.join(out, f"route-{t}-vec_dot.json")))["results"]
        l = json.load(open(os.path.join(out, f"route-{t}-llamacpp.json")))["results"]
    except Exception as e:
        print(f"| {t} | missing: {e} |"); continue
    for a, b in zip(d, l):
        print(f"| {t} | {a['tokens']} | {b['llamacpp_path']} | {a['median_ms']:.4f} | {b['median_ms']:.4f} | "
              f"{b['median_ms'] / a['median_ms']:.2f} | {b['gbps']:.0f} | {b['ratio']:.3f} | {b['ceiling_gbps']:.0f} |")
PY
}

# The Python package with CUDA on this machine's Python (it has torch): CUDA tensors read in place,
# the custom op, the call's overhead. Skipped with a note where python3 lacks torch.
# The package's build (nvcc, a few minutes) runs in the background from the start of the run, on
# the CPU cores the GPU steps leave idle; python_tests waits for it.
PY_SITE=$SCRATCH/py-site
start_python_build() {
  PY_BUILD_PID=
  case "${MODE:-full}" in
    full) [ "${PYTHON_TESTS:-1}" = "1" ] || return 0 ;;
    python) ;;
    *) return 0 ;;
  esac
  python3 -c "import torch" 2>/dev/null || return 0
  ( CMAKE_ARGS="${CMAKE_ARGS:--DLMHEAD_CUDA=ON}" timeout 500 python3 -m pip install --no-deps --no-build-isolation \
      --target "$PY_SITE" . > "$OUT/python-build.log" 2>&1 ) &
  PY_BUILD_PID=$!
}
python_tests() {
  step "Python package with CUDA (bench/gpu_python.sh)"
  if ! python3 -c "import torch" 2>/dev/null; then echo "python3 has no torch: Python GPU tests not run"; PY_RC=skipped; return; fi
  [ -n "${PY_BUILD_PID:-}" ] && wait "$PY_BUILD_PID"
  tail -3 "$OUT/python-build.log"
  OUT="$OUT" SITE="$PY_SITE" MODEL=$SCRATCH/muse-q5k.gguf timeout 300 bash bench/gpu_python.sh python3 "$BUILD/lmhead"
  PY_RC=$?
}
start_python_build

# The Muse-shape checkpoints the CLI, sampling and route steps read, written in the background on
# the CPU cores the GPU tests leave idle (about 13 GB; f32 alone is 5.4 GB); the benchmark steps
# wait for it first, so nothing else runs on the host while they time.
MAKE_PID=
start_making_models() {
  [ -x "$BUILD/lmhead" ] || return 0
  local types=q5_K
  [ "${ROUTE_BENCH:-1}" = "1" ] && types="q5_K ${ROUTE_TYPES:-q6_K q4_K f16 bf16 f32}"
  ( for type in $types; do
      f=$(muse_file $type)
      [ -f "$f" ] || timeout 300 "$BUILD/lmhead" make "$f" --type $type --quiet
    done ) > "$OUT/make-models.log" 2>&1 &
  MAKE_PID=$!
}

if [ "${MODE:-full}" = "sample-profile" ]; then
  # The sampling kernels (issue 16): their SASS, Nsight Compute's per-instruction view of the
  # weights kernel at T = 8 and of every sampling kernel at T = 1 with top-p, a Nsight Systems
  # trace of the calls (the gaps between kernels), then the sampling benchmark.
  "$BUILD/lmhead" make $SCRATCH/muse-q5k.gguf --quiet || exit 1
  cuobjdump -sass "$BUILD/lmhead" 2>/dev/null | awk '/Function : .*sample_/ { f = 1 } /Function : / && !/sample_/ { f = 0 } f' > "$OUT/sass_sample.txt"
  wc -l "$OUT/sass_sample.txt"
  prof() {  # NAME TOKENS KERNEL_REGEX SKIP COUNT OPTIONS...
    local name=$1 t=$2 k=$3 skip=$4 count=$5; shift 5
    timeout 150 ncu --clock-control none -k regex:"$k" --launch-skip "$skip" --launch-count "$count" --set full \
      --import-source no -o "$SCRATCH/$name" -f "$BUILD/lmhead" bench $SCRATCH/muse-q5k.gguf --backend cuda \
      --tokens "$t" --repeat 20 --seed 7 "$@" > "$OUT/ncu_$name.log" 2>&1
    ncu -i "$SCRATCH/$name.ncu-rep" --page details > "$OUT/ncu_${name}_details.txt" 2>&1
    ncu -i "$SCRATCH/$name.ncu-rep" --page source --csv --print-source sass > "$OUT/ncu_${name}_src.csv" 2>&1
    grep -E "^  [a-zA-Z_:<>()0-9 ,]*kernel|Duration|Elapsed Cycles|SM Active|Executed Ipc A|Issue Slots|Registers Per|Achieved Occ|Executed Instructions  " "$OUT/ncu_${name}_details.txt"
  }
  # --repeat 20 launches each sampling kernel about 25 times: skip the first 5 (warm-up).
  prof w8 8 sample_weights 5 1 --temperature 1
  prof p1 1 "sample_" 10 2 --temperature 1 --top-p 0.9
  if command -v nsys > /dev/null; then
    for args in "--tokens 1 --temperature 1 --top-p 0.9" "--tokens 8 --temperature 1"; do
      timeout 120 nsys profile -o "$SCRATCH/trace" -f true "$BUILD/lmhead" bench $SCRATCH/muse-q5k.gguf --backend cuda \
        --repeat 50 --seed 7 $args > /dev/null 2>&1
      echo "-- nsys $args"
      nsys stats --report cuda_gpu_trace --format csv "$SCRATCH/trace.nsys-rep" 2>/dev/null | tail -40
    done > "$OUT/nsys_trace.csv"
  fi
  sampling_bench
  exit 0
fi

if [ "${MODE:-full}" = "python" ]; then
  python_tests
  grep -E "passed|failed|skipped" "$OUT/python-tests.log" | tail -3
  echo "python rc=$PY_RC"
  exit 0
fi

if [ "${MODE:-full}" = "route" ]; then
  step "route llamacpp tests"
  timeout 300 "$BUILD/lmhead_tests" --gtest_filter="${ROUTE_TESTS:-*LlamaCpp*:CudaPlan*}" > "$OUT/tests.log" 2>&1
  grep -E "^\[  (PASSED|FAILED) |Failure$|tests ran" "$OUT/tests.log" | head -40
  route_bench
  exit 0
fi

if [ "${MODE:-full}" = "stress" ]; then
  stress_and_rounds
  step "summary"
  grep -h "^\[ stress \]\|^process" "$OUT/stress.log"
  cat "$OUT/rounds.log"
  grep -h "SUMMARY" "$OUT"/stress-*.log
  echo "stress rc=$STRESS_RC, failed tests over all rounds: $ROUNDS_FAILED"
  exit 0
fi

start_making_models
step "GPU tests (fresh random inputs; seed printed on failure)"
LMHEAD_CUDA_TANH_SWEEP=1 timeout 300 "$BUILD/lmhead_tests" --gtest_filter="$GPU_TESTS" 2>&1 | tee "$OUT/tests.log"
TESTS_RC=$?

stress_and_rounds

step "compute-sanitizer memcheck"
timeout 150 compute-sanitizer --tool memcheck --leak-check no --error-exitcode 9 \
  "$BUILD/lmhead_tests" --gtest_filter='CudaBackend.GoldenFilesByteForByte:CudaBackend.SaturatedCapTies:CudaBackend.TokensInNKernelsOnSmallHeads:HeadTypes/TiledRoute.*/q5_K:HeadTypes/TiledRoute.*/q6_K' 2>&1 |
  tail -25 | tee "$OUT/memcheck.log"
MEMCHECK_RC=$?
step "compute-sanitizer racecheck"
# The default route's kernels (golden files), route tiled's tokens-in-N kernels on Q5_K and Q6_K
# heads, whose shared-memory staging differs, and each kernel staged by bulk copies once.
timeout 180 compute-sanitizer --tool racecheck --error-exitcode 9 \
  "$BUILD/lmhead_tests" --gtest_filter='CudaBackend.GoldenFilesByteForByte:CudaBackend.StagedKernelsOnceEach:HeadTypes/TiledRoute.*/q5_K:HeadTypes/TiledRoute.*/q6_K' 2>&1 | tail -15 | tee "$OUT/racecheck.log"
RACECHECK_RC=$?

if [ -n "$MAKE_PID" ]; then
  step "waiting for the background checkpoints"
  wait "$MAKE_PID"
  cat "$OUT/make-models.log"
fi
step "benchmark (Muse shape, synthesized in memory)"
# Clocks, power and throttle reasons sampled every 50 ms while the benchmark runs (the data
# dependence of some timings: is it the clock?).
nvidia-smi -i 0 --query-gpu=timestamp,clocks.sm,power.draw,clocks_throttle_reasons.active --format=csv,noheader -lms 50 \
  > "$OUT/smi.csv" 2>/dev/null &
SMI_PID=$!
timeout 300 "$BUILD/cuda_bench" ${BENCH_ARGS:-} 2>&1 | while IFS= read -r line; do printf '%s %s\n' "$(date +%T.%3N)" "$line"; done | tee "$OUT/bench.log"
BENCH_RC=${PIPESTATUS[0]}
kill $SMI_PID 2>/dev/null

if [ -x "$BUILD/lmhead" ]; then
  step "CLI through the public Engine API: lmhead make + lmhead bench --backend cuda"
  ( { [ -f $SCRATCH/muse-q5k.gguf ] || timeout 150 "$BUILD/lmhead" make $SCRATCH/muse-q5k.gguf --quiet; } &&
    timeout 120 "$BUILD/lmhead" bench $SCRATCH/muse-q5k.gguf --backend cuda --repeat 200 &&
    echo "-- route tiled (llama.cpp's tiled K-quant order at every T) --" &&
    timeout 120 "$BUILD/lmhead" bench $SCRATCH/muse-q5k.gguf --backend cuda --route tiled --repeat 200 ) 2>&1 |
    tee "$OUT/cli.log"
  sampling_bench
fi

if [ "${ROUTE_BENCH:-1}" = "1" ]; then route_bench; fi
PY_RC=not-run
if [ "${PYTHON_TESTS:-1}" = "1" ]; then python_tests; fi

if [ "${PROFILE_AFTER:-0}" = "1" ]; then
  # The default head kernel at T = 1, 8 and 16 (stream kernels), a few sections each.
  for m in mma1 mma8 mma16; do
    step "ncu on the head kernel, $m"
    timeout 120 ncu --clock-control none -k regex:"q5k_|stream_head" --launch-skip 5 --launch-count 1 --section SpeedOfLight \
      --section WarpStateStats --section SchedulerStats --section InstructionStats --section LaunchStats \
      --section Occupancy "$BUILD/cuda_bench" --profile $m > "$OUT/ncu_$m.txt" 2>&1
    grep -E "^  [a-z_0-9]+kernel|Duration|DRAM Throughput|Executed Ipc Active|Issued Warp|Eligible Warps|Cycles Per Issued|Executed Instructions  |Registers Per|Achieved Active" "$OUT/ncu_$m.txt"
  done
fi

step "summary"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[ info \]" "$OUT/tests.log" | head -30
echo "tests rc=$TESTS_RC memcheck rc=$MEMCHECK_RC racecheck rc=$RACECHECK_RC bench rc=$BENCH_RC stress rc=$STRESS_RC python rc=$PY_RC"
grep -h "^\[ stress \]\|^process" "$OUT/stress.log"
cat "$OUT/rounds.log"
grep -h "SUMMARY" "$OUT"/stress-*.log
grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/memcheck.log" "$OUT/racecheck.log"
grep -E "^[0-9:.]* (ceiling|best configuration)" "$OUT/bench.log"
awk -F', ' '{ gsub(/ MHz/, "", $2); gsub(/ W/, "", $3); if (min == "" || $2 + 0 < min) min = $2 + 0; if ($3 + 0 > maxp) maxp = $3 + 0; r[$4]++ }
  END { printf "during the benchmark: SM clock min %s MHz, power max %s W, throttle reasons:", min, maxp; for (k in r) printf " %s (%d samples)", k, r[k]; print "" }' "$OUT/smi.csv"
sed 's/^[0-9:.]* //' "$OUT/bench.log" | sed -n '/^| head |/,$p'
[ -f "$OUT/route.log" ] && cat "$OUT/route.log"
[ -f "$OUT/python-tests.log" ] && grep -E "passed|failed" "$OUT/python-tests.log" | tail -1
[ -f "$OUT/python-overhead.log" ] && cat "$OUT/python-overhead.log"
# The run's status: failed when any step failed (not the status of the last line printed above).
for rc in "$TESTS_RC" "$MEMCHECK_RC" "$RACECHECK_RC" "$BENCH_RC" "$STRESS_RC" "${ROUNDS_FAILED:-0}"; do
  [ "$rc" = 0 ] || exit 1
done
case "$PY_RC" in 0 | not-run | skipped) ;; *) exit 1 ;; esac
exit 0
