"""prefillkit.cost.fit: least-squares calibration of the cost model (issue 18 item 6)."""

from __future__ import annotations

import math
import random
import tomllib
from pathlib import Path

import numpy as np
import pytest

from prefillkit.cli import run
from prefillkit.cost.fit import Deployment, fit, load_preset, nnls, write_preset
from prefillkit.cost.fit_inputs import CSV_COLUMNS, FitInputError, MeasuredBatch, load_batches
from prefillkit.cost.gpus import get_gpu
from prefillkit.cost.roofline import Efficiencies, RooflineCostModel
from prefillkit.models import get_model
from prefillkit.sched.buffer import ReqShape

#: The subject is interpreted code; .ci/run's run on the compiled build deselects it.
pytestmark = pytest.mark.interpreted

DATA = Path(__file__).parent / "data"
TRUE_EFF = Efficiencies(
    gemm_fp8=0.6,
    gemm_bf16=0.6,
    attn=0.45,
    indexer=0.35,
    mem=0.75,
    nvlink=0.8,
    net=0.9,
    moe_imbalance=1.0,
    comm_sms=20,
)
PER_FORWARD = 0.004
PER_REQUEST = 0.0002
DEP = Deployment(model="llama-3.1-8b", gpu="h200", num_gpus=1)


def _synthetic(n: int = 60, seed: int = 1) -> list[MeasuredBatch]:
    true = RooflineCostModel(
        get_model(DEP.model),
        get_gpu(DEP.gpu),
        1,
        eff=TRUE_EFF,
        per_forward_s=PER_FORWARD,
        per_request_s=PER_REQUEST,
    )
    rng = random.Random(seed)
    out = []
    for i in range(n):
        shapes = tuple(
            ReqShape(rng.choice([0, rng.randint(0, 60000)]), rng.randint(50, 6000))
            for _ in range(rng.randint(1, 6))
        )
        out.append(MeasuredBatch(shapes, true.forward_time(shapes), f"synthetic:{i}"))
    return out


def test_recovers_known_coefficients() -> None:
    result = fit(_synthetic(), DEP)
    c = result.coefficients
    expected = {
        "linear": 1 / TRUE_EFF.gemm_bf16,
        "attention": 1 / TRUE_EFF.attn,
        "elementwise": 1 / TRUE_EFF.mem,
        "per_forward_s": PER_FORWARD,
        "per_request_s": PER_REQUEST,
    }
    for name, want in expected.items():
        assert c[name] == pytest.approx(want, rel=0.01), name
    assert not result.fitted["indexer"] and not result.fitted["moe_experts"]
    assert result.train_max_error < 1e-6
    assert result.cv_mape < 0.01


def test_preset_round_trip(tmp_path: Path) -> None:
    batches = _synthetic(20)
    result = fit(batches, DEP)
    path = tmp_path / "preset.toml"
    write_preset(result, path)
    doc = tomllib.loads(path.read_text())
    assert doc["deployment"]["model"] == "llama-3.1-8b"
    model = load_preset(path)
    for b in batches:
        assert model.forward_time(b.shapes) == pytest.approx(b.seconds, rel=1e-6)


def test_nnls_matches_known_solution() -> None:
    rng = np.random.default_rng(0)
    a = rng.random((30, 4))
    x_true = np.array([1.5, 0.0, 2.0, 0.3])
    assert np.allclose(nnls(a, a @ x_true), x_true, atol=1e-9)
    # An unconstrained solution with a negative entry is clipped to the boundary.
    b = a @ np.array([1.0, -1.0, 0.5, 0.0])
    x = nnls(a, b)
    assert (x >= 0).all()
    ls = np.linalg.lstsq(a, b, rcond=None)[0]
    assert (ls < 0).any()


def test_parses_sample_sglang_log() -> None:
    batches = load_batches(DATA / "sglang_prefill_sample.log")
    assert [len(b.shapes) for b in batches] == [1, 3, 2]
    assert batches[0].shapes == (ReqShape(0, 4096),)
    assert batches[1].shapes == (ReqShape(2001, 1000), ReqShape(2000, 1000), ReqShape(2000, 1000))
    assert batches[2].shapes == (ReqShape(512, 256), ReqShape(512, 256))
    assert [round(b.seconds, 6) for b in batches] == [0.25, 0.23, 0.06]
    assert batches[1].source.endswith("sglang_prefill_sample.log:3")


def _write_csv(path: Path, rows: list[str]) -> Path:
    path.write_text(",".join(CSV_COLUMNS) + "\n" + "\n".join(rows) + "\n")
    return path


def test_batch_csv(tmp_path: Path) -> None:
    path = _write_csv(tmp_path / "b.csv", ["a,0,100,0,0.01", "b,64,10,64,0.02", "a,10,5,0,0.01"])
    batches = load_batches(path)
    assert [b.shapes for b in batches] == [
        (ReqShape(0, 100), ReqShape(10, 5)),
        (ReqShape(64, 10, 64),),
    ]
    assert [b.seconds for b in batches] == [0.01, 0.02]


@pytest.mark.parametrize(
    ("row", "needle"),
    [
        ("a,0,x,0,0.01", "extend_len must be an integer"),
        ("a,0,10,5,0.01", "loaded_tokens 5 exceeds prefix_len 0"),
        ("a,0,10,0,-1", "seconds must be"),
        ("a,0,10,0", "expected 5 fields"),
    ],
)
def test_malformed_csv_row_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], row: str, needle: str
) -> None:
    path = _write_csv(tmp_path / "bad.csv", ["ok,0,100,0,0.01", row])
    assert run(["calibrate", str(path), "-o", str(tmp_path / "p.toml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert f"{path}:3:" in err[0] and needle in err[0]


def test_unknown_log_format_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "server.log"
    path.write_text("INFO 10:00:01 Prefill batch. #new-seq: 1\n")
    assert run(["calibrate", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{path}:1:" in err[0] and "unknown format" in err[0]
    # A timestamped log whose Prefill line has another shape names that line.
    path.write_text(
        "[2025-06-01 10:00:00.000 TP0] started\n[2025-06-01 10:00:01.000 TP0] Prefill batch. odd\n"
    )
    with pytest.raises(FitInputError, match=rf"{path}:2: unknown Prefill batch format"):
        load_batches(path)


def test_calibrate_cli_fits_and_writes_preset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [
        f"{i},{s.prefix_len},{s.extend_len},{s.loaded_tokens},{b.seconds!r}"
        for i, b in enumerate(_synthetic(30))
        for s in b.shapes
    ]
    path = _write_csv(tmp_path / "m.csv", rows)
    out = tmp_path / "preset.toml"
    assert run(["calibrate", str(path), "--model", "llama-3.1-8b", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "5-fold CV" in text
    doc = tomllib.loads(out.read_text())
    assert math.isclose(doc["coefficients"]["attention"], 1 / TRUE_EFF.attn, rel_tol=0.01)
    assert doc["fit"]["cv_mape"] < 0.01


def test_calibrate_without_files_keeps_tables(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["calibrate"]) == 0
    assert "seed deployment:" in capsys.readouterr().out
