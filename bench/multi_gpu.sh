#!/usr/bin/env bash
# One run on a machine with two (or more) GPUs: the multi-GPU tests (several shards on one GPU,
# one shard per GPU, two processes over NCCL), then `lmhead bench --gpus N` on the Muse shape, which
# times the N-GPU and the one-GPU engine in the same run. Logs go to $OUT (or /tmp/lmhead-multi-gpu).
#   bench/multi_gpu.sh [BUILD_DIR]     (default build/nccl; a build carried from another machine works)
set -u -o pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${1:-build/nccl}
OUT=${OUT:-/tmp/lmhead-multi-gpu}
# Scratch files (models, ids, profiles) of this run only, so two runs never share one.
SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/lmhead-bench-XXXXXX")
trap 'rm -rf "$SCRATCH"' EXIT
GPUS=${GPUS:-2}
mkdir -p "$OUT"
step() { echo; echo "==== $* ===="; }

# NVLink multicast can take a shared host's GPUs out of service: keep it off.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# NCCL from the Python environment's wheel when the toolkit has none.
if NCCL_PY=$(python3 -c "import nvidia.nccl as n; print(n.__path__[0])" 2>/dev/null); then
  export LD_LIBRARY_PATH=$NCCL_PY/lib:${LD_LIBRARY_PATH:-}
fi
export LMHEAD_TEST_DATA_DIR=$ROOT/tests/data
# The tests find the CLI at the absolute path of the build machine: give it that path here.
CLI_PATH=${CLI_PATH:-$(grep -a -o -m1 -E "/[[:alnum:]_./-]*/$(basename "$BUILD")/lmhead" "$BUILD/lmhead_tests" | head -1)}
if [ -n "$CLI_PATH" ] && [ ! -e "$CLI_PATH" ]; then
  src_root=${CLI_PATH%/build/*}
  mkdir -p "$(dirname "$src_root")" && ln -sfn "$ROOT" "$src_root" && echo "linked $src_root -> $ROOT"
fi

step "device"
nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.max.sm --format=csv
nvidia-smi topo -m 2>&1 | head -6
ldd "$BUILD/lmhead" | grep -iE "nccl|not found"

step "multi-GPU tests"
timeout 240 "$BUILD/lmhead_tests" --gtest_filter='MultiGpu*:Sharding*:Cuda*' 2>&1 |
  tee "$OUT/tests.log" | grep -vE '^\[ +(RUN|OK) +\]'
TESTS_RC=$?

step "the two-GPU split taken apart: one GPU, each shard alone, both (cuda_bench --multi, host phases per call)"
if [ -x "$BUILD/cuda_bench" ]; then
  timeout 300 "$BUILD/cuda_bench" --multi ${REPEAT:-300} 2>&1 | grep -v uploading | tee "$OUT/multi.log"
else
  echo "no $BUILD/cuda_bench (built with LMHEAD_BENCH=ON): skipped"
fi

step "bench: lmhead bench --backend cuda --gpus $GPUS (Muse shape), one-GPU engine timed in the same run"
M=$SCRATCH/muse-q5k.gguf
[ -f $M ] || timeout 200 "$BUILD/lmhead" make $M --quiet
timeout 200 "$BUILD/lmhead" bench $M --backend cuda --gpus "$GPUS" --tokens 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16 \
  --repeat ${REPEAT:-300} 2>&1 | tee "$OUT/bench.log"
BENCH_RC=$?

step "two processes over NCCL on the Muse shape (T=4, top-k 5, logprobs), against one process"
python3 -c "import numpy as np; np.save('$SCRATCH/h4.npy', np.random.default_rng(7).standard_normal((4, 6656)).astype(np.float32))"
R="$BUILD/lmhead run $M --hidden $SCRATCH/h4.npy --backend cuda --top-k 5 --logprobs --profile"
rm -f $SCRATCH/nccl.id
( $R --nccl-ranks 2 --nccl-rank 1 --nccl-id $SCRATCH/nccl.id > "$OUT/rank1.log" 2>&1 ) &
$R --nccl-ranks 2 --nccl-rank 0 --nccl-id $SCRATCH/nccl.id 2>&1 | tee "$OUT/rank0.log"
wait
$R > "$OUT/one.log" 2>&1
grep -E "^token|^ +[0-9]+\." "$OUT/one.log" > "$SCRATCH/a"; grep -E "^token|^ +[0-9]+\." "$OUT/rank1.log" > "$SCRATCH/b"
cmp -s "$SCRATCH/a" "$SCRATCH/b" && echo "rank 1 and one process: same tokens, logits and logprobs" || echo "RANK OUTPUT DIFFERS"

step "two processes over NCCL: lmhead bench --nccl-ranks 2 (both ranks in lockstep, same --repeat)"
rm -f $SCRATCH/nccl-bench.id
B="$BUILD/lmhead bench $M --backend cuda --tokens 1,4,16 --repeat 300 --nccl-ranks 2 --nccl-id $SCRATCH/nccl-bench.id"
( timeout 120 $B --nccl-rank 1 > "$OUT/rank1_bench.log" 2>&1 ) &
timeout 120 $B --nccl-rank 0 2>&1 | grep -v uploading | tee "$OUT/rank0_bench.log"
wait

step "summary"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |SKIPPED|FAILED" "$OUT/tests.log" | head -20
echo "tests rc=$TESTS_RC bench rc=$BENCH_RC"
[ -f "$OUT/multi.log" ] && grep -E "^check|defaults" -A9 "$OUT/multi.log" | grep -E "^check|^\| (1|16) \||defaults"
grep -E "^gpus " "$OUT/bench.log"
