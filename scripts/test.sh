#!/usr/bin/env bash
# README command 2: install what is missing, build everything, run every test (ctest).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --python
cmake --preset release -DPython3_EXECUTABLE="$PWD/build/pyenv/bin/python" >/dev/null
cmake --build --preset release -j "$(nproc)"
# Twice as many jobs as cores (plus two, so a 1-core host still overlaps): tests then run side by
# side the way they do on a loaded CI host, and two tests that share a file collide here first.
ctest --preset release -j "$((2 * $(nproc) + 2))" "$@"
