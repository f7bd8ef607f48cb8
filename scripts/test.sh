#!/usr/bin/env bash
# README command 2: install what is missing, build everything, run every test (ctest).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --python
cmake --preset release -DPython3_EXECUTABLE="$PWD/build/pyenv/bin/python" >/dev/null
cmake --build --preset release -j "$(nproc)"
ctest --preset release -j "$(nproc)" "$@"
