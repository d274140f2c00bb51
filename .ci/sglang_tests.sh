#!/usr/bin/env bash
# The optional SGLang test group (tests/engine_sglang, docs/sglang.md): SGLang 0.5.23's real scheduler
# on CPU, in a virtual environment of its own (SGLang's wheel pins CUDA packages; its scheduler
# needs none of them): CPU torch 2.13.0, the sglang wheel and apache-tvm-ffi without their
# dependency trees, the small pinned packages the scheduler imports (each --no-deps),
# prefillkit (pure Python: the tests read the source tree) with what its tests need.
# Usage: bash .ci/sglang_tests.sh [pytest args]   (SGLANG_VENV: where to build the venv)
set -euo pipefail
cd "$(dirname "$0")/.."
V=${SGLANG_VENV:-/tmp/prefillkit-sglang-venv}
# (Debian's python3 without its venv module: virtualenv instead)
python3 -m venv "$V" 2>/dev/null || { python3 -m pip install -q virtualenv && python3 -m virtualenv -q "$V"; }
PY="$V/bin/python"
"$PY" -m pip install -q --upgrade pip
"$PY" -m pip install -q torch==2.13.0
DL=$(mktemp -d)
"$PY" -m pip download -q --no-deps sglang==0.5.23 apache-tvm-ffi==0.1.11 -d "$DL"
"$PY" -m pip install -q --no-deps "$DL"/sglang-0.5.23-*.whl "$DL"/apache_tvm_ffi-0.1.11-*.whl
"$PY" -m pip install -q --no-deps -r .ci/sglang-cpu-requirements.txt
# prefillkit's own dependencies not in that list, and the test runner
"$PY" -m pip install -q xxhash matplotlib "pytest>=8" "pytest-xdist>=3.6" "hypothesis>=6.100"
PREFILLKIT_PURE_PYTHON=1 "$PY" -m pip install -q --no-deps .
"$PY" -c "from prefillkit.integrations.sglang import require_sglang; print('sglang', require_sglang())"
"$PY" -m pytest -p no:cacheprovider tests/engine_sglang "$@"
