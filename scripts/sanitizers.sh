#!/usr/bin/env bash
# The sanitizer jobs of CI:
#   1. the `asan` preset (AddressSanitizer + UndefinedBehaviorSanitizer) runs the whole C++ test
#      suite, the CLI tests included (they run the ASan-built `lmhead`);
#   2. the `tsan` preset (ThreadSanitizer) runs the tests that use threads: the shared-model
#      concurrency suite, determinism across thread counts, the CPU backend and its thread pool,
#      sharded heads, the golden tail through the threaded engine and CLI, and the C API (one engine
#      from many threads, the per-thread last error).
# Any sanitizer report fails the job: ASan aborts, UBSan halts on the first finding, TSan halts.
#
#   scripts/sanitizers.sh [asan|tsan]...      (default: both)
# LMHEAD_SANITIZER_BUILD_ROOT puts the build dirs elsewhere (default build/, as the presets say).
set -euo pipefail
cd "$(dirname "$0")/.."

jobs="$(nproc)"
root="${LMHEAD_SANITIZER_BUILD_ROOT:-build}"
which=("$@")
[ ${#which[@]} -eq 0 ] && which=(asan tsan)

# The Python interoperability tests exercise llama.cpp's package, not lmhead's memory safety.
exclude='^python\.'
# The portable tanh test sweeps all 2^32 floats; every 101st keeps it to seconds under ASan.
export LMHEAD_TANH_STRIDE="${LMHEAD_TANH_STRIDE:-101}"

configure_and_build() {
  local preset="$1" dir="$root/$1"
  shift
  cmake --preset "$preset" -B "$dir" "$@" >/dev/null
  cmake --build "$dir" -j "$jobs" --target lmhead_tests lmhead
}

for preset in "${which[@]}"; do
  start=$(date +%s)
  case "$preset" in
    asan)
      # GCC leaves float-cast-overflow out of -fsanitize=undefined (clang includes it); a NaN or
      # infinity converted to an integer is exactly what a hostile checkpoint can provoke.
      configure_and_build asan -DLMHEAD_SANITIZE=address,undefined,float-cast-overflow
      export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1}"
      export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"
      ctest --test-dir "$root/asan" -E "$exclude" -j "$jobs" --output-on-failure --timeout 900
      ;;
    tsan)
      configure_and_build tsan
      export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}"
      ctest --test-dir "$root/tsan" -R '^(Concurrency|Determinism|CpuBackend|CpuThreadPool|GoldenTail|Shard[A-Za-z]*|CApi)\.' -E "$exclude" \
        -j "$jobs" --output-on-failure --timeout 900
      ;;
    *) echo "sanitizers.sh: unknown job '$preset' (asan, tsan)" >&2; exit 2 ;;
  esac
  echo "sanitizers.sh: $preset passed in $(( $(date +%s) - start )) s"
done
