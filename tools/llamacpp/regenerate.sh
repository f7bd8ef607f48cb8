#!/bin/bash
# Regenerates the llama.cpp golden sets (tests/data/llamacpp/) from a llama-cpp-python source package
# on PyPI, outside CI: the sdist vendors one llama.cpp commit, built here natively (CPU backend, its
# defaults: tiled K-quant matmul, CPU_REPACK, llamafile sgemm all on) in a scratch folder outside the
# repository. Compare the new sets with the committed ones (`git diff --stat tests/data/llamacpp`) and
# run `ctest -R LlamaCpp`: a set whose bytes changed means llama.cpp changed an order; document it in
# docs/numerics.md ("The llama.cpp route") beside the check that proves the new order.
#
# Usage: tools/llamacpp/regenerate.sh [VERSION [SCRATCH [OUT]]]
#   VERSION  llama-cpp-python version (default 0.3.36, which vendors llama.cpp 0c1e570)
#   SCRATCH  build folder outside the repo (default /tmp/lmhead-llamacpp-VERSION)
#   OUT      where the sets go (default tests/data/llamacpp)
# Needs: pip, cmake, a C++ compiler, and a Python with llama.cpp's gguf package (scripts/install-deps.sh
# --python makes build/pyenv). The sets must be made on the machine type the tests claim (numerics.md:
# x86 with AVX-512 VNNI), since llama.cpp's path and vector width depend on the build's CPU features.
set -euo pipefail
VERSION=${1:-0.3.36}
SCRATCH=${2:-/tmp/lmhead-llamacpp-$VERSION}
repo=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${3:-$repo/tests/data/llamacpp}
PY=${PYTHON:-$repo/build/pyenv/bin/python}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$SCRATCH"
cd "$SCRATCH"
if [ ! -d llama_cpp_python-$VERSION ]; then
  # The sdist only (no wheel, no dependencies): its vendor/llama.cpp is the source.
  pip download --no-deps --no-binary :all: --no-build-isolation "llama-cpp-python==$VERSION" -d . ||
    pip download --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d .
  tar xzf llama_cpp_python-$VERSION.tar.gz
fi
SRC=$SCRATCH/llama_cpp_python-$VERSION/vendor/llama.cpp
cmake -S "$SRC" -B build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=ON -DLLAMA_CURL=OFF > cmake.log
cmake --build build -j"$(nproc)" --target test-llama-archs llama-quantize llama > build.log
"$here/llamacpp_golden.sh" "$SCRATCH/build" "$SRC" "$PY" "$OUT" 101 \
  "muse-glimmer:q4_K muse-glimmer:q5_K muse-glimmer:q6_K muse-glimmer:q8_0 muse-glimmer:f16 muse-glimmer:bf16 muse-glimmer:f32" \
  "1 4 8 16"
# ggml_mul_mat itself on heads of 2 and 4 super-blocks per row (the orders across them).
"$here/ggml_mul_mat_probe.sh" "$SCRATCH/build" "$SRC" "$OUT/ggml-mul-mat"
# The sdist does not record llama.cpp's commit: look it up in llama-cpp-python's vendor submodule
# for that release and name it beside the version.
echo "made from llama-cpp-python $VERSION into $OUT; name its llama.cpp commit and update the version in"
echo "$OUT/README.md, docs/numerics.md and src/quant/llamacpp_route.hpp if it changed"
