"""The torch extra is optional: without it, exec says so in one line; the core never loads it."""

from __future__ import annotations

import subprocess
import sys

import pytest

# NOTE: the subject here is interpreted code; .ci/run's compiled-build run skips it.
pytestmark = pytest.mark.interpreted

BLOCK_TORCH = "import sys; sys.modules['torch'] = None\n"


def test_missing_extra_is_one_line_naming_it() -> None:
    code = BLOCK_TORCH + "import runpy; runpy.run_module('prefillkit.exec', run_name='__main__')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stdout == ""
    assert out.stderr.strip().splitlines() == [
        "prefillkit.exec needs PyTorch: pip install 'prefillkit[torch]'"
    ]


def test_require_torch_raises_the_one_line() -> None:
    code = BLOCK_TORCH + (
        "from prefillkit.exec import MissingExtraError, require_torch\n"
        "try:\n    require_torch()\nexcept MissingExtraError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'prefillkit[torch]'" in out.stdout


def test_plan_module_is_torch_free() -> None:
    code = "import sys\nimport prefillkit.exec.plan\nprint('torch' in sys.modules)\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
