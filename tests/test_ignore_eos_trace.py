"""``ignore_eos`` as a per-record trace field: every loader reads it, it reaches the
``Request``, and a replay with ``--enable-ignore-eos-admission`` changes admission exactly
as the adder's full-output rule (``ignore_eos_fits``) predicts."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from prefillkit.app.replay import WorkloadSpec, load_requests
from prefillkit.sched.adder import ignore_eos_fits
from prefillkit.workloads.azure import iter_azure
from prefillkit.workloads.bailian import iter_bailian
from prefillkit.workloads.errors import WorkloadError
from prefillkit.workloads.jsonl import iter_jsonl, write_jsonl
from prefillkit.workloads.mooncake import iter_mooncake
from prefillkit.workloads.record import TraceRecord, to_request
from prefillkit.workloads.trace_reader import ReplayOptions

ROOT = Path(__file__).resolve().parents[1]


def _lines(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_every_loader_reads_ignore_eos(tmp_path: Path) -> None:
    flags: list[object] = [True, False, None]  # None: null; a fourth row omits the field

    def with_flag(row: dict[str, object], i: int) -> dict[str, object]:
        return row if i == 3 else {**row, "ignore_eos": flags[i]}

    own = _lines(
        tmp_path / "own.jsonl",
        [with_flag({"arrival_s": i, "output_len": 4, "input_len": 50}, i) for i in range(4)],
    )
    moon = _lines(
        tmp_path / "moon.jsonl",
        [
            with_flag(
                {"timestamp": i, "input_length": 600, "output_length": 4, "hash_ids": [0, 1]}, i
            )
            for i in range(4)
        ],
    )
    bail = _lines(
        tmp_path / "qwen_blksz_16.jsonl",
        [
            with_flag(
                {"timestamp": i, "input_length": 20, "output_length": 4, "hash_ids": [1, 2]}, i
            )
            for i in range(4)
        ],
    )
    azure = tmp_path / "azure.csv"
    azure.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens,ignore_eos\n"
        "2023-11-16 18:15:46.0,374,44,True\n"
        "2023-11-16 18:15:47.0,374,44,0\n"
        "2023-11-16 18:15:48.0,374,44,\n"
        "2023-11-16 18:15:49.0,374,44,false\n"
    )
    want = [True, False, False, False]
    for recs in (iter_jsonl(own), iter_mooncake(moon), iter_bailian(bail), iter_azure(azure)):
        assert [r.ignore_eos for r in recs] == want
    # The published Azure files have no such column: every request is a normal one.
    plain = tmp_path / "plain.csv"
    plain.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.0,374,44\n")
    assert [r.ignore_eos for r in iter_azure(plain)] == [False]


def test_ignore_eos_reaches_the_request_and_round_trips(tmp_path: Path) -> None:
    recs = [
        TraceRecord("t", 0.0, 20, 5, None, None, tuple(range(20)), ignore_eos=True),
        TraceRecord("b", 1.0, 1100, 1, (0, 1, 2), 512, None, ignore_eos=True),
        TraceRecord("p", 2.0, 100, 1, None, None, None, ignore_eos=True),
        TraceRecord("n", 3.0, 100, 1, None, None, None),
    ]
    assert [to_request(r, 16).ignore_eos for r in recs] == [True, True, True, False]
    path = tmp_path / "w.jsonl"
    write_jsonl(recs, path)
    assert list(iter_jsonl(path)) == recs
    assert '"ignore_eos"' not in path.read_text().splitlines()[-1]  # false is not written
    tokens_only = tmp_path / "t.jsonl"  # one key unit per trace: no block-hashed row
    write_jsonl([r for r in recs if r.block_size is None], tokens_only)
    wl = load_requests(
        WorkloadSpec(trace=str(tokens_only), fmt="jsonl", replay=ReplayOptions()), page_size=16
    )
    assert [r.ignore_eos for r in wl.requests] == [True, True, False]


@pytest.mark.parametrize("value", ["1", '"true"', "[]", "0.0"])
def test_malformed_ignore_eos_names_file_and_line(tmp_path: Path, value: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(
        '{"arrival_s": 0, "output_len": 1, "input_len": 5}\n'
        f'{{"arrival_s": 1, "output_len": 1, "input_len": 5, "ignore_eos": {value}}}\n'
    )
    with pytest.raises(WorkloadError) as info:
        list(iter_jsonl(path))
    assert str(info.value).startswith(f"{path}:2: field 'ignore_eos': expected true or false")


# --------------------------------------------------------------------------- end to end
# Pool 1,000 tokens, page 1, output reservation clipped at 100, new_token_ratio 0.7.
# a: 100-token prompt, 600 output; b: 100-token prompt, 850 output, ignore_eos.
# Both pass the normal memory test together (100 + 100 + 1 < 1000, then < 799).
POOL, CLIP, RATIO = 1000, 100, 0.7
A = {"rid": "a", "arrival_s": 0.0, "output_len": 600, "input_len": 100}
B = {"rid": "b", "arrival_s": 0.0, "output_len": 850, "input_len": 100}


def _replay(tmp_path: Path, rows: list[dict[str, object]], on: bool) -> list[list[str]]:
    """Replay ``rows`` through the CLI; the rids of each prefill batch, in order."""
    trace = _lines(tmp_path / f"t{len(os.listdir(tmp_path))}.jsonl", rows)
    out = tmp_path / f"out{len(os.listdir(tmp_path))}"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    env.pop("PREFILLKIT_DEBUG", None)
    proc = subprocess.run(
        [sys.executable, "-m", "prefillkit.cli", "replay", "--trace", str(trace), "--quiet",
         "--out", str(out), "--max-total-tokens", str(POOL), "--page-size", "1",
         "--clip-max-new-tokens", str(CLIP), "--init-new-token-ratio", str(RATIO),
         "--enable-cp-shared-kv", "false", "--cp-size", "1",
         "--enable-hierarchical-cache", "false", "--disaggregation-mode", "prefill",
         "--enable-ignore-eos-admission", "true" if on else "false"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    with (out / "batches.csv").open(newline="") as fh:
        rows_out = list(csv.DictReader(fh))
    return [r["rids"].split() for r in rows_out]


def test_ignore_eos_trace_field_changes_admission_as_the_rule_predicts(tmp_path: Path) -> None:
    # The rule for b after a in one pass: cur_rem = 1000 - (100 + 1) - (100 + 1) = 798;
    # a (0.7 x 600 = 420 left) and b (850 left, ratio 1.0) both decode at first:
    # 798 - 2 x 420 <= 2, so b waits. Once a has gone, b alone fits: 899 - 850 > 1.
    both = [(850.0, 100), (RATIO * 600, 100)]
    assert not ignore_eos_fits(POOL - 101 - 101, both)
    assert ignore_eos_fits(POOL - 101, [(850.0, 100)])
    flagged = [A, {**B, "ignore_eos": True}]
    assert _replay(tmp_path, flagged, on=False) == [["a", "b"]]  # knob off: normal test only
    assert _replay(tmp_path, flagged, on=True) == [["a"], ["b"]]  # the rule holds b back
    # Without the trace field the knob changes nothing.
    assert _replay(tmp_path, [A, B], on=True) == [["a", "b"]]
