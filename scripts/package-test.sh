#!/usr/bin/env bash
# CI's packaging job: lmhead as others install and use it.
#   1. `cmake --install` of BUILD_DIR into a temporary prefix: libraries (SONAME, exported symbols),
#      headers, CMake package, lmhead.pc, the tool;
#   2. a C99 program built against it through pkg-config, and a CMake project through
#      find_package(lmhead) (C++ on the shared library, C on the static one): all three print the
#      same tokens;
#   3. `pip wheel` once (CPU-only, without build isolation: the build/pyenv venv has the build
#      requirements), installed into a temporary directory, and the pytest suite run against it.
#
#   scripts/package-test.sh [BUILD_DIR]     (default build/release; run after scripts/test.sh)
# LMHEAD_PACKAGE_WHEEL=0 skips step 3.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build/release}"
py="$PWD/build/pyenv/bin/python"
model="$PWD/tests/data/tail-q5k-v4096-h256.gguf"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
start=$(date +%s)
fail() { echo "package-test.sh: FAIL: $*" >&2; exit 1; }

# ---- 1. install ----------------------------------------------------------------------------------
prefix="$work/prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
libdir="$prefix/lib"
[ -d "$libdir/pkgconfig" ] || libdir="$(dirname "$(find "$prefix" -name lmhead.pc | head -1)")/.."
for f in include/lmhead/lmhead.h include/lmhead/lmhead.hpp bin/lmhead; do
  [ -e "$prefix/$f" ] || fail "cmake --install did not install $f"
done
for f in liblmhead.a liblmhead.so "cmake/lmhead/lmheadConfig.cmake" "pkgconfig/lmhead.pc"; do
  [ -e "$libdir/$f" ] || fail "cmake --install did not install lib/$f"
done
soname="$(objdump -p "$libdir/liblmhead.so" | awk '/SONAME/ {print $2}')"
[[ "$soname" =~ ^liblmhead\.so\.[0-9]+\.[0-9]+$ ]] || fail "SONAME is '$soname', expected liblmhead.so.MAJOR.MINOR"
# Only the API leaves the shared library: C symbols lmhead_*, C++ ones in the public classes.
leaked="$(nm -D --defined-only "$libdir/liblmhead.so" | awk '$2 ~ /[TDBVWR]/ {print $3}' | c++filt |
  grep -vE '^(lmhead_[a-z_]+|lmhead::(Model|Engine|MetadataOverride|Error|InputError)::|lmhead::(to_string|parse|byte_bill|tensor_type_info|tensor_type_name|parse_tensor_type)\(|(typeinfo|typeinfo name|vtable) for lmhead::(Input)?Error|LMHEAD_0)' || true)"
[ -z "$leaked" ] || fail "liblmhead.so exports symbols outside the API:
$leaked"
"$prefix/bin/lmhead" info "$model" >/dev/null || fail "the installed tool does not run"

# ---- 2. consumers --------------------------------------------------------------------------------
export PKG_CONFIG_PATH="$libdir/pkgconfig"
cc -std=c99 -Wall -Wextra -Wpedantic -Werror tests/consumer/c/main.c -o "$work/c_pkgconfig" \
  $(pkg-config --cflags --libs lmhead) -Wl,-rpath,"$(realpath "$(pkg-config --variable=libdir lmhead)")"
# ldd's output is read whole before it is searched: `ldd | grep -q` under pipefail fails whenever grep
# exits before ldd has written its last line (SIGPIPE), and the paths compare as real paths because
# the run path was given through realpath (a TMPDIR behind a symlink differs only in spelling).
linked="$(ldd "$work/c_pkgconfig" | awk '$1 ~ /^liblmhead\.so/ {print $3}')"
[ -n "$linked" ] && [ "$(realpath "$(dirname "$linked")")" = "$(realpath "$libdir")" ] ||
  fail "the pkg-config build is not linked to the installed liblmhead.so in $libdir: ldd says
$(ldd "$work/c_pkgconfig")"
c_out="$("$work/c_pkgconfig" "$model" 3)" || fail "the C program (pkg-config) failed"

cmake -S tests/consumer/cmake -B "$work/consumer" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_RPATH="$libdir" >/dev/null
cmake --build "$work/consumer" -j "$(nproc)" >/dev/null
cpp_out="$("$work/consumer/cpp_consumer" "$model" 3)" || fail "the C++ program (find_package) failed"
static_out="$("$work/consumer/c_consumer_static" "$model" 3)" || fail "the C program on the static library failed"
static_deps="$(ldd "$work/consumer/c_consumer_static")"
case "$static_deps" in *liblmhead*) fail "the static consumer links liblmhead.so: $static_deps" ;; esac
[ "$c_out" = "$cpp_out" ] && [ "$c_out" = "$static_out" ] ||
  fail "consumers disagree: C (pkg-config) '$c_out', C++ (find_package) '$cpp_out', C (static) '$static_out'"
echo "package-test.sh: install, pkg-config and find_package consumers agree: $(echo "$c_out" | tr '\n' ';')"

# ---- 3. the wheel --------------------------------------------------------------------------------
if [ "${LMHEAD_PACKAGE_WHEEL:-1}" != "0" ]; then
  args="-DLMHEAD_CUDA=OFF"
  command -v ccache >/dev/null && args="$args -DCMAKE_CXX_COMPILER_LAUNCHER=ccache"
  CMAKE_ARGS="$args" "$py" -m pip wheel . --no-deps --no-build-isolation -w "$work/wheel" -q
  whl="$(ls "$work"/wheel/lmhead-*.whl)"
  "$py" -m pip install --no-deps --target "$work/site" "$whl" -q
  # Run from a directory where the source tree's python/ is not importable: the wheel is tested.
  (cd "$work" && PYTHONPATH="$work/site" LMHEAD_TEST_DATA="$OLDPWD/tests/data" LMHEAD_CLI="$prefix/bin/lmhead" \
    "$py" -m pytest -q -p no:cacheprovider "$OLDPWD/tests/python/api") || fail "pytest against the installed wheel"
  (cd "$work" && PYTHONPATH="$work/site" "$py" -c "import lmhead, sys; sys.exit(not lmhead.__file__.startswith('$work/site'))") ||
    fail "the tests did not import the wheel's lmhead"
  echo "package-test.sh: wheel $(basename "$whl") installs and passes the Python tests"
fi
echo "package-test.sh: passed in $(( $(date +%s) - start )) s"
