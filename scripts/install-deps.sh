#!/usr/bin/env bash
# Installs what lmhead needs on Debian 12 and is missing (apt-get), and a Python virtual environment
# with numpy and llama.cpp's `gguf` package for the interoperability tests, nanobind and
# scikit-build-core for the Python package, and pytest (--python).
set -euo pipefail
packages=(cmake ninja-build g++ pkg-config libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev nlohmann-json3-dev python3 python3-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
if [ "${1:-}" = "--python" ]; then
  venv=build/pyenv
  if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv" 2>/dev/null || {
      SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
      $SUDO apt-get install -y -qq python3-venv && python3 -m venv "$venv"; }
  fi
  "$venv/bin/python" -c "import numpy, gguf" 2>/dev/null || "$venv/bin/python" -m pip install -q numpy gguf
  # The Python package's build (nanobind, scikit-build-core) and its tests (pytest).
  "$venv/bin/python" -c "import nanobind, scikit_build_core, pytest" 2>/dev/null ||
    "$venv/bin/python" -m pip install -q "nanobind>=2.0" "scikit-build-core>=0.10" pytest
fi
