"""Measured replays: ``replay --executor torch`` and ``compare`` with a sim and an executor variant.

A tiny agentic workload (6 sessions, prompts of a few hundred tokens) on a 4,096-token pool:
the executor runs every step the scheduler produced and times it; the outputs are the
simulator's files. The refusals (missing extra, colocated mode, CP shared-KV, a pool too large)
are one line, exit 2.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from prefillkit.app.measured import MISSING_TORCH, MeasuredReplayError, RunFlags, split_run_flags
from test_cli import assert_one_line_error, run_cli

#: The subject is interpreted code; .ci/run's run on the compiled build deselects it.
pytestmark = pytest.mark.interpreted

TINY = [
    "--disaggregation-mode", "prefill",
    "--max-total-tokens", "4096",
    "--page-size", "16",
    "--chunked-prefill-size", "128",
    "--agentic-sessions", "6",
    "--agentic-turns", "2,3",
    "--agentic-system-prompt-len", "96",
    "--agentic-first-user-len", "16,48",
    "--agentic-turn-append-len", "16,48",
    "--agentic-output-len", "8,16",
    "--agentic-think-time", "0.05,0.2",
    "--agentic-session-rate", "20",
    "--block-size", "16",
]  # fmt: skip


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def test_replay_with_the_executor_writes_measured_outputs(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "run"
    proc = run_cli("replay", *TINY, "--executor", "torch", "--out", out, "--json", timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "executor: torch" in proc.stderr
    doc = json.loads((out / "summary.json").read_text())
    assert doc["executor"] == "torch"
    batches = _rows(out / "batches.csv")
    reqs = _rows(out / "requests.csv")
    assert batches and reqs and all(r["status"] == "finished" for r in reqs)
    durations = [float(b["duration_s"]) for b in batches]
    assert all(d > 0 and math.isfinite(d) for d in durations)
    # no cost-model terms: the wall-clock and CPU seconds of each forward
    assert [c for c in batches[0] if c.startswith("t_")] == ["t_wall_s", "t_cpu_s"]
    assert all(b["duration_s"] == b["t_wall_s"] for b in batches)
    forwards = _rows(out / "forwards.csv")
    assert {f["batch_id"] for f in forwards} == {b["batch_id"] for b in batches}
    assert doc["metrics"]["ttft_p50_s"] > 0

    # the measured forwards fit a preset, which then times a simulated replay
    preset = tmp_path / "preset.toml"
    fit = run_cli(
        "calibrate", out / "forwards.csv", "--model", "llama-3.1-8b", "--page-size", "16",
        "-o", preset,
    )  # fmt: skip
    assert fit.returncode == 0, fit.stderr
    sim = tmp_path / "sim"
    proc = run_cli("replay", *TINY, "--cost-preset", preset, "--out", sim, "-q")
    assert proc.returncode == 0, proc.stderr
    sim_doc = json.loads((sim / "summary.json").read_text())
    assert sim_doc["cost_preset"] == str(preset) and "executor" not in sim_doc
    assert not (sim / "forwards.csv").exists()
    assert_one_line_error(
        run_cli("replay", *TINY, "--cost-preset", tmp_path / "none.toml"), "none.toml"
    )
    assert_one_line_error(
        run_cli("replay", *TINY, "--cost-preset", preset, "--executor", "torch"), "not with"
    )


def test_compare_sim_against_executor(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "cmp"
    proc = run_cli(
        "compare",
        *TINY,
        "--variant",
        "sim:",
        "--variant",
        "torch:--executor torch",
        "--out",
        out,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "in 1 worker process" in proc.stderr  # a timed variant runs alone
    sim = json.loads((out / "sim" / "summary.json").read_text())
    torch_doc = json.loads((out / "torch" / "summary.json").read_text())
    assert "executor" not in sim and torch_doc["executor"] == "torch"
    # same workload, same admission inputs: the same requests ran
    assert {r["rid"] for r in _rows(out / "sim" / "requests.csv")} == {
        r["rid"] for r in _rows(out / "torch" / "requests.csv")
    }
    assert "TTFT p50" in proc.stdout


def test_missing_extra_is_one_line(tmp_path: Path) -> None:
    block = tmp_path / "block"
    block.mkdir()
    (block / "torch.py").write_text("raise ImportError('blocked for the test')\n")
    src = Path(__file__).resolve().parents[1] / "src"
    proc = run_cli("replay", *TINY, "--executor", "torch", PYTHONPATH=f"{src}:{block}")
    line = assert_one_line_error(proc)
    assert line == f"prefillkit: error: {MISSING_TORCH}"


@pytest.mark.parametrize(
    "args, needle",
    [
        (TINY[2:], "--disaggregation-mode prefill"),  # SGLang's default: colocated
        ([*TINY, "--tp-size", "2", "--cp-size", "2", "--enable-cp-shared-kv"], "one owner lane"),
        ([*TINY[:2], *TINY[4:], "--max-total-tokens", "4000000"], "--max-total-tokens"),
    ],
    ids=["colocated", "cp-shared-kv", "pool"],
)
def test_refusals_are_one_line(args: list[str], needle: str) -> None:
    pytest.importorskip("torch")
    assert_one_line_error(run_cli("replay", *args, "--executor", "torch"), needle)


def test_split_run_flags() -> None:
    assert split_run_flags(["--a", "1"]) == (RunFlags(), ["--a", "1"])
    assert split_run_flags(["--executor", "torch", "--a"]) == (RunFlags("torch"), ["--a"])
    assert split_run_flags(["--executor=torch-cpu"]) == (RunFlags("torch-cpu"), [])
    assert split_run_flags(["--cost-preset", "p.toml"]) == (RunFlags("sim", "p.toml"), [])
    with pytest.raises(MeasuredReplayError, match="unknown executor"):
        split_run_flags(["--executor", "jax"])
    with pytest.raises(MeasuredReplayError, match="not with --executor"):
        split_run_flags(["--executor", "torch", "--cost-preset", "p.toml"])
    with pytest.raises(MeasuredReplayError, match="twice"):
        split_run_flags(["--executor", "torch", "--executor=torch"])
