#!/bin/bash
# Builds ggml_mul_mat_probe.cpp against a llama.cpp build (its ggml libraries and headers) and writes
# the cross-super-block set: ggml_mul_mat's outputs and manifest.json into OUT
# (tests/data/llamacpp/ggml-mul-mat/ holds the committed one, made with llama.cpp 0c1e570).
# Usage: tools/llamacpp/ggml_mul_mat_probe.sh LLAMA_BUILD_DIR LLAMA_SRC_DIR OUT [ROWS]
set -eu
B=$1; SRC=$2; OUT=$3; ROWS=${4:-16}
here=$(cd "$(dirname "$0")" && pwd); work=$(mktemp -d)
# -I src: the project's one splitmix64 (synth/splitmix64.hpp), the stream the test remakes.
g++ -O2 -std=c++17 "$here/ggml_mul_mat_probe.cpp" -I"$here/../../src" -I"$SRC/ggml/include" -L"$B/bin" -lggml -lggml-base -lggml-cpu \
  -Wl,-rpath,"$B/bin" -o "$work/ggml_mul_mat_probe"
mkdir -p "$OUT"
"$work/ggml_mul_mat_probe" "$OUT" "$ROWS"
rm -rf "$work"
echo "ggml_mul_mat set: $(ls "$OUT"/*.npy | wc -l) outputs and manifest.json in $OUT"
