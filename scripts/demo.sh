#!/usr/bin/env bash
# README command 1: install what is missing, build, run the main job (lmhead demo).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release --target lmhead
./build/release/lmhead demo "$@"
