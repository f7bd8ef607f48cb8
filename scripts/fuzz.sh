#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/*_fuzz.cpp, CMake preset `fuzz`, clang) and runs them.
#
#   scripts/fuzz.sh --ci                 every target for 60 s (LMHEAD_FUZZ_SECONDS), non-zero exit on
#                                        any crash, leak, timeout or oversized allocation
#   scripts/fuzz.sh [--seconds N] [--jobs N] [TARGET...]
#                                        a longer campaign; new inputs are kept in build/fuzz/corpus/
#   scripts/fuzz.sh --build-only
#   scripts/fuzz.sh --coverage [TARGET...]
#                                        line coverage of src/ reached by the corpora (seeds plus what
#                                        earlier campaigns kept in build/fuzz/corpus/), via llvm-cov
#
# Each target starts from fuzz/corpus/<target>/ (golden files, `lmhead make` heads, hand-made
# shapes: fuzz/make_corpus.py) and the hand-made hostile files of fuzz/seeds/. Crashing inputs are
# written to build/fuzz/artifacts/ (named by their hash); reproduce one with
# `build/fuzz/<target> FILE`. Logs, the CI corpus and coverage profiles live in a directory of this
# run's own, removed at exit: a failing target's log tail is printed before that.
set -euo pipefail
cd "$(dirname "$0")/.."

ci=0
build_only=0
coverage=0
seconds="${LMHEAD_FUZZ_SECONDS:-60}"
jobs="$(nproc)"
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --ci) ci=1 ;;
    --build-only) build_only=1 ;;
    --coverage) coverage=1 ;;
    --seconds) seconds="$2"; shift ;;
    --jobs) jobs="$2"; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1") ;;
  esac
  shift
done
if [ ${#targets[@]} -eq 0 ]; then
  for f in fuzz/*_fuzz.cpp; do targets+=("$(basename "$f" .cpp)"); done
fi

build="${LMHEAD_FUZZ_BUILD_DIR:-build/fuzz}"

# Two runs at once (CI jobs of one checkout, a campaign beside CI) must not write each other's files.
scratch="$(mktemp -d "${TMPDIR:-/tmp}/lmhead-fuzz-XXXXXX")"
trap 'rm -rf "$scratch"' EXIT

# libFuzzer ships with clang's compiler-rt (Debian: libclang-rt-14-dev); install it when missing.
probe="$scratch/probe"
mkdir "$probe"
printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' > "$probe/p.cpp"
if ! clang++ -fsanitize=fuzzer,address,undefined "$probe/p.cpp" -o "$probe/p" 2>/dev/null; then
  echo "fuzz.sh: clang++ cannot link a libFuzzer target; installing clang and its runtime" >&2
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq clang libclang-rt-14-dev >/dev/null || $sudo_cmd apt-get install -y -qq clang >/dev/null
  clang++ -fsanitize=fuzzer,address,undefined "$probe/p.cpp" -o "$probe/p"
fi

if [ "$coverage" -eq 1 ]; then
  cov_build="${build}-coverage"
  cmake --preset fuzz -B "$cov_build" \
    -DCMAKE_CXX_FLAGS="-fprofile-instr-generate -fcoverage-mapping -fsanitize=fuzzer-no-link ${LMHEAD_FUZZ_CXXFLAGS:-}" >/dev/null
  cmake --build "$cov_build" -j "$jobs" --target "${targets[@]}"
  profiles="$scratch/profiles"
  mkdir "$profiles"
  objects=()
  for target in "${targets[@]}"; do
    dirs=()
    for d in "fuzz/corpus/$target" "$(case $target in npy_fuzz) echo fuzz/seeds/npy ;; *) echo fuzz/seeds/gguf ;; esac)" \
             "$build/corpus/$target"; do
      [ -d "$d" ] && dirs+=("$d")
    done
    LLVM_PROFILE_FILE="$profiles/$target-%p.profraw" ASAN_OPTIONS=detect_leaks=0 \
      "$cov_build/$target" -runs=0 "${dirs[@]}" >/dev/null 2>&1 || true
    objects+=(-object "$cov_build/$target")
  done
  llvm-profdata merge -sparse "$profiles"/*.profraw -o "$profiles/fuzz.profdata"
  llvm-cov report "${objects[@]:1}" -instr-profile="$profiles/fuzz.profdata" src/gguf src/io src/model src/engine
  exit 0
fi

# The library itself is instrumented too (coverage feedback and sanitizers inside the parsers, not
# only in the harness), and any UBSan finding aborts instead of printing and going on.
cmake --preset fuzz -B "$build" \
  -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined ${LMHEAD_FUZZ_CXXFLAGS:-}" >/dev/null
cmake --build "$build" -j "$jobs" --target "${targets[@]}"
[ "$build_only" -eq 1 ] && exit 0

export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:allocator_may_return_null=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"
logs="$scratch/logs"
mkdir -p "$build/artifacts" "$logs"

seed_dir() {
  case "$1" in
    npy_fuzz) echo fuzz/seeds/npy ;;
    *) echo fuzz/seeds/gguf ;;
  esac
}
dict_for() {
  case "$1" in
    npy_fuzz) echo fuzz/npy.dict ;;
    *) echo fuzz/gguf.dict ;;
  esac
}

run_target() {
  local target="$1" corpus
  if [ "$ci" -eq 1 ]; then
    corpus="$scratch/ci-corpus/$target"  # fresh each run: CI results do not depend on earlier runs
  else
    corpus="$build/corpus/$target"
  fi
  mkdir -p "$corpus"
  local seeds=()
  for d in "fuzz/corpus/$target" "$(seed_dir "$target")"; do [ -d "$d" ] && seeds+=("$d"); done
  # -malloc_limit_mb: the inputs are at most ~100 KB, so any single allocation above 256 MB can only
  # come from a count or size taken from the file without a check.
  "$build/$target" "$corpus" "${seeds[@]}" \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=256 \
    -dict="$(dict_for "$target")" -artifact_prefix="$build/artifacts/$target-" -print_final_stats=1 \
    > "$logs/$target.log" 2>&1
}

summary() {
  local target="$1" log="$logs/$1.log"
  local execs cov ft
  execs="$(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}' || true)"
  # The last status line: DONE after a clean run, the last progress line before a crash.
  cov="$(grep -E '^#[0-9]+' "$log" | grep -E 'cov: [0-9]+ ft: [0-9]+' | tail -n 1 | sed -E 's/.*cov: ([0-9]+) ft: ([0-9]+).*/\1, \2/' || true)"
  printf '  %-20s executions %-10s coverage (edges, features) %s\n' "$target" "${execs:-?}" "${cov:-?}"
}

echo "fuzz.sh: ${#targets[@]} targets, ${seconds} s each, up to $jobs at a time"
start=$(date +%s)
declare -A pid_of
failed=()
running=0
for target in "${targets[@]}"; do
  if [ "$running" -ge "$jobs" ]; then wait -n || true; running=$((running - 1)); fi
  run_target "$target" &
  pid_of[$target]=$!
  running=$((running + 1))
done
for target in "${targets[@]}"; do
  if wait "${pid_of[$target]}"; then
    summary "$target"
  else
    summary "$target"
    failed+=("$target")
    echo "---- $target FAILED: tail of its log" >&2
    tail -n 40 "$logs/$target.log" >&2
  fi
done
echo "fuzz.sh: done in $(( $(date +%s) - start )) s"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz.sh: FAILED: ${failed[*]} (inputs in $build/artifacts/)" >&2
  exit 1
fi
