#!/usr/bin/env bash
# On the GPU machine (it has PyTorch): the Python package built with CUDA into a temporary
# directory, the pytest suite with torch (CUDA tensors, the custom op, torch.compile, the example),
# and the Python call's overhead beside `lmhead bench` (T=1, argmax only, cuda backend).
#   bench/gpu_python.sh [PYTHON] [CLI]    (default: python3; CLI: build/gpu/lmhead when present)
#   SITE=DIR: the package installed there already (pip install --target DIR), not built again
#   MODEL=FILE: the checkpoint the overhead is measured on (default: one made in $OUT)
# Logs go to $OUT (or /tmp/lmhead-gpu).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-python3}
CLI=${2:-build/gpu/lmhead}
OUT=${OUT:-/tmp/lmhead-gpu}
mkdir -p "$OUT"
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
# The GPU machine's image has these; nothing can be fetched there.
"$PY" -c "import nanobind, scikit_build_core, pytest, numpy" ||
  { echo "gpu_python.sh: $PY lacks nanobind, scikit-build-core, pytest or numpy" >&2; exit 2; }
if [ -n "${SITE:-}" ] && [ -d "$SITE/lmhead" ]; then
  site=$SITE  # built already (bench/gpu.sh builds it in the background)
else
  site="$OUT/py-site"
  rm -rf "$site"
  CMAKE_ARGS="${CMAKE_ARGS:--DLMHEAD_CUDA=ON}" "$PY" -m pip install --no-deps --no-build-isolation --target "$site" . 2>&1 | tail -5
fi
PYTHONPATH="$site" "$PY" -c "import lmhead, sys; print('lmhead', lmhead.__version__, 'cuda', lmhead.has_cuda); sys.exit(not lmhead.has_cuda)"
cli_arg=()
[ -x "$CLI" ] && cli_arg=(--cli "$CLI") && export LMHEAD_CLI="$PWD/$CLI"
(cd "$OUT" && PYTHONPATH="$site" LMHEAD_TEST_DATA="$OLDPWD/tests/data" "$PY" -m pytest -v -rs -p no:cacheprovider \
  "$OLDPWD/tests/python/api") 2>&1 | tee "$OUT/python-tests.log"
# gpu.sh passes the checkpoint its other steps read; alone, one is made in $OUT.
model="${MODEL:-$OUT/muse.gguf}"
[ -f "$model" ] || { [ -x "$CLI" ] && "$CLI" make "$model" >/dev/null; }
[ -f "$model" ] || model=tests/data/llamacpp/muse-glimmer-q5_K-s101.gguf
PYTHONPATH="$site" "$PY" bench/python_overhead.py "$model" --backend cuda --tokens 1 "${cli_arg[@]}" 2>&1 |
  tee "$OUT/python-overhead.log"
