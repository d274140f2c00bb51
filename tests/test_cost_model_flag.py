"""``--cost-model`` / ``--small-gemm`` on the command line: the measured backend end to end,
its provenance in summary.json, and the one-line error without the ``aic`` extra."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest
from tests.test_cli import assert_one_line_error, run_cli

#: The subject is interpreted code; .ci/run's run on the compiled build deselects it.
pytestmark = pytest.mark.interpreted

HAS_AIC = importlib.util.find_spec("aiconfigurator_core") is not None


@pytest.mark.skipif(not HAS_AIC, reason="the aic extra is not installed")
def test_replay_with_the_measured_backend_records_its_terms(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = run_cli(
        "replay", "--trace", "mooncake-slice", "--gpu", "b200", "--tp-size", "8",
        "--cp-size", "8", "--cost-model", "aic",
        "--max-requests", "40", "-q", "--out", str(out), timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((out / "summary.json").read_text())
    record = doc["deployment"]["cost_model"]
    assert record["name"] == "aic" and record["small_gemm"] == "tiles"
    assert record["terms"]["linear"].startswith("measured: sglang 0.5.14 b200_sxm gemm")
    assert record["terms"]["per_forward"].startswith("roofline")
    assert doc["metrics"]["completed"] == 40


def test_roofline_run_records_its_assumption(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = run_cli(
        "replay", "--trace", "mooncake-slice", "--small-gemm", "ideal",
        "--max-requests", "20", "-q", "--out", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    record = json.loads((out / "summary.json").read_text())["deployment"]["cost_model"]
    assert record["name"] == "roofline" and record["small_gemm"] == "ideal"
    assert set(record["terms"]) >= {"linear", "attention", "moe_experts"}


def test_bad_cost_model_or_small_gemm_is_one_line(tmp_path: Path) -> None:
    bad = run_cli("replay", "--trace", "mooncake-slice", "--cost-model", "measured", "-q")
    assert_one_line_error(bad, "--cost-model", "roofline, aic")
    bad = run_cli("replay", "--trace", "mooncake-slice", "--small-gemm", "cubic", "-q")
    assert_one_line_error(bad, "--small-gemm", "tiles, sqrt-h100, ideal")


def test_missing_extra_is_one_line_naming_it(tmp_path: Path) -> None:
    # A package of that name that fails to import stands for the extra not installed.
    fake = tmp_path / "aiconfigurator_core"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('not installed')\n")
    src = str(Path(__file__).resolve().parents[1] / "src")
    proc = run_cli(
        "replay", "--trace", "mooncake-slice", "--cost-model", "aic", "-q",
        "--out", str(tmp_path / "run"), PYTHONPATH=os.pathsep.join((src, str(tmp_path))),
    )  # fmt: skip
    assert_one_line_error(proc, "--cost-model aic needs the aic extra", "prefillkit[aic]")
    assert not (tmp_path / "run" / "summary.json").exists()
