#!/usr/bin/env bash
# The optional vLLM test group (tests/engine_vllm, docs/vllm.md): vLLM 0.34.0's real v1 scheduler
# on CPU, in a virtual environment of its own (vLLM's wheel pins CUDA torch 2.14; its scheduler
# needs none of it): CPU torch 2.13.0, the vllm wheel without its dependency tree, the pinned
# packages the scheduler imports (each --no-deps), prefillkit (pure Python) and the test runner.
# Usage: bash .ci/vllm_tests.sh [pytest args]   (VLLM_VENV: where to build the venv)
set -euo pipefail
cd "$(dirname "$0")/.."
V=${VLLM_VENV:-/tmp/prefillkit-vllm-venv}
python3 -m venv "$V" 2>/dev/null || { python3 -m pip install -q virtualenv && python3 -m virtualenv -q "$V"; }
PY="$V/bin/python"
"$PY" -m pip install -q --upgrade pip
"$PY" -m pip install -q torch==2.13.0
"$PY" -m pip install -q --no-deps vllm==0.34.0
"$PY" -m pip install -q --no-deps -r .ci/vllm-cpu-requirements.txt
"$PY" -m pip install -q xxhash "pytest>=8" "pytest-xdist>=3.6" "hypothesis>=6.100"
PREFILLKIT_PURE_PYTHON=1 "$PY" -m pip install -q --no-deps .
"$PY" -c "from prefillkit.integrations.vllm import require_vllm; print('vllm', require_vllm())"
"$PY" -m pytest -p no:cacheprovider -W ignore tests/engine_vllm "$@"
