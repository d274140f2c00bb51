"""Tests for prefillkit.workloads: loaders, replay options, generators, stats."""

from __future__ import annotations

import itertools
import json
import math
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from prefillkit.app.replay import Workload, WorkloadSpec, load_requests
from prefillkit.request import block_key_chain
from prefillkit.workloads.agentic import multi_turn_agentic
from prefillkit.workloads.azure import iter_azure, parse_azure_timestamp_ns
from prefillkit.workloads.bailian import iter_bailian
from prefillkit.workloads.errors import WorkloadError
from prefillkit.workloads.generators import generated_shared_prefix
from prefillkit.workloads.jsonl import iter_jsonl, write_jsonl
from prefillkit.workloads.mooncake import iter_mooncake
from prefillkit.workloads.record import TraceRecord, to_request
from prefillkit.workloads.stats import trace_stats
from prefillkit.workloads.trace_reader import (
    ReplayOptions,
    detect_format,
    load_records,
    replay_records,
)

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
MOONCAKE = TRACES / "mooncake_fast25" / "conversation_trace.jsonl"
AZURE_CONV = TRACES / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv"
BAD = Path(__file__).resolve().parent / "data" / "bad"
MANIFEST: dict[str, dict[str, Any]] = tomllib.loads((BAD / "MANIFEST.toml").read_text())

needs_mooncake = pytest.mark.skipif(
    not MOONCAKE.exists(),
    reason="full traces not present: run from a checkout beside ../shared/traces, see README",
)
needs_azure = pytest.mark.skipif(
    not AZURE_CONV.exists(),
    reason="full traces not present: run from a checkout beside ../shared/traces, see README",
)


@pytest.fixture(scope="module")
def mooncake_records() -> list[TraceRecord]:
    return list(iter_mooncake(MOONCAKE))


# --------------------------------------------------------------------------- bad corpus


def test_manifest_covers_corpus() -> None:
    on_disk = {p.name for p in BAD.iterdir() if p.name != "MANIFEST.toml"}
    assert on_disk == set(MANIFEST)
    assert len(MANIFEST) >= 12


def load(path: Path, fmt: str, opts: ReplayOptions, *, page_size: int) -> Workload:
    """The command line's one workload loader on a trace file."""
    return load_requests(WorkloadSpec(trace=str(path), fmt=fmt, replay=opts), page_size=page_size)


def _prefix(path: Path, line: int | None) -> str:
    return f"{path}: " if line is None else f"{path}:{line}: "


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_bad_file_raises_naming_file_and_line(name: str) -> None:
    spec = MANIFEST[name]
    path = BAD / name
    line = spec.get("line")
    with pytest.raises(WorkloadError) as info:
        load(path, spec["format"], ReplayOptions(), page_size=16)
    err = info.value
    text = str(err)
    assert "\n" not in text
    assert text.startswith(_prefix(path, line)), text
    assert spec["match"] in text, text
    assert err.line == line
    assert err.path == str(path)
    assert isinstance(err, ValueError)


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_bad_file_skip_bad_rows(name: str) -> None:
    spec = MANIFEST[name]
    path = BAD / name
    opts = ReplayOptions(skip_bad_rows=True)
    if spec["good"] == 0:
        with pytest.raises(WorkloadError) as info:
            load(path, spec["format"], opts, page_size=16)
        assert info.value.line == spec.get("line")
        return
    wl = load(path, spec["format"], opts, page_size=16)
    assert len(wl.requests) == spec["good"]
    assert len(wl.skipped_rows) == spec["skipped"]
    assert wl.skipped_rows[0][0] == spec["line"]
    assert spec["match"] in wl.skipped_rows[0][1]
    assert all("\n" not in reason for _, reason in wl.skipped_rows)
    times = [r.arrival_time for r in wl.requests]
    assert times == sorted(times) and times[0] == 0.0


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.jsonl"
    with pytest.raises(WorkloadError) as info:
        load(path, "mooncake", ReplayOptions(), page_size=16)
    assert info.value.line is None
    assert str(info.value) == f"{path}: file not found"


def test_unknown_format_and_bad_options() -> None:
    with pytest.raises(ValueError, match="unknown trace format"):
        load(BAD / "empty.jsonl", "parquet", ReplayOptions(), page_size=16)
    with pytest.raises(ValueError, match="not both"):
        ReplayOptions(rate=2.0, time_scale=0.5)
    with pytest.raises(ValueError):
        ReplayOptions(time_scale=0.0)
    with pytest.raises(ValueError):
        ReplayOptions(max_requests=0)


def test_streaming_stops_before_later_bad_rows() -> None:
    # Line 3 is truncated; the cap is reached before reading it.
    wl = load(
        BAD / "mooncake_truncated.jsonl", "mooncake", ReplayOptions(max_requests=2), page_size=16
    )
    assert len(wl.requests) == 2
    # Line 3 goes back in time (2.999 s); the window ends before line 2 (3.0 s).
    recs, _ = load_records(
        BAD / "mooncake_time_backwards.jsonl", "mooncake", ReplayOptions(duration_s=1.0)
    )
    assert len(recs) == 1


def test_empty_window_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "w.jsonl"
    write_jsonl([_rec("a", 0.0), _rec("b", 5.0)], path)
    with pytest.raises(WorkloadError, match=r"no requests in the selected window \[1, 3\) s"):
        load_records(path, "jsonl", ReplayOptions(start_s=1.0, duration_s=2.0))
    assert len(load_records(path, "jsonl", ReplayOptions(start_s=1.0))[0]) == 1


# --------------------------------------------------------------------------- real traces


@needs_mooncake
def test_mooncake_full_trace_and_stats(mooncake_records: list[TraceRecord]) -> None:
    assert len(mooncake_records) == 12_031
    st = trace_stats(mooncake_records)
    assert st.num_requests == 12_031
    assert st.span_s == pytest.approx(3536.999, abs=1e-9)
    assert st.mean_rate == pytest.approx(3.40, abs=0.005)
    assert st.block_hit_rate * 100 == pytest.approx(36.64, abs=0.01)
    assert st.block_hit_rate_no_partial * 100 == pytest.approx(36.60, abs=0.01)
    assert st.token_hit_rate * 100 == pytest.approx(37.36, abs=0.01)
    assert st.token_hit_rate_no_partial * 100 == pytest.approx(37.34, abs=0.01)
    assert st.total_blocks == 288_500
    assert st.distinct_blocks == 182_790
    assert st.input_len.p50 == 6909 and st.input_len.max == 126_195
    assert st.output_len.p99 == pytest.approx(1118.5)
    assert st.requests_with_hit == 12_030


@needs_mooncake
def test_mooncake_load_workload() -> None:
    wl = load(MOONCAKE, "mooncake", ReplayOptions(), page_size=16)
    assert len(wl.requests) == 12_031
    assert wl.skipped_rows == []
    assert wl.info["source"].startswith("mooncake:")
    first = wl.requests[0]
    assert first.key_tokens == 512 and first.state.input_len == 6758
    assert len(first.keys) == 6758 // 512  # complete units only
    assert first.max_new_tokens == 500
    assert detect_format(MOONCAKE) == "mooncake"


@needs_azure
def test_azure_conv() -> None:
    recs = list(iter_azure(AZURE_CONV))
    assert len(recs) == 19_366
    assert recs[0].arrival_s == 0.0
    # 18:15:50.9951690 - 18:15:46.6805900, all 7 fractional digits kept.
    assert recs[1].arrival_s == pytest.approx(4.314579, abs=1e-9)
    assert recs[-1].arrival_s == pytest.approx(3501.7, abs=0.05)
    assert all(r.hash_ids is None and r.tokens is None for r in recs[:100])
    wl = load(AZURE_CONV, "azure", ReplayOptions(max_requests=10), page_size=16)
    assert [r.keys for r in wl.requests] == [[]] * 10
    assert detect_format(AZURE_CONV) == "azure"


def test_azure_timestamp_precision() -> None:
    a = parse_azure_timestamp_ns("2023-11-16 18:15:46.6805900")
    b = parse_azure_timestamp_ns("2023-11-16 18:15:46.6805901")
    assert b - a == 100
    assert parse_azure_timestamp_ns("1970-01-01 00:00:01") == 1_000_000_000


# --------------------------------------------------------------------------- options


@needs_mooncake
def test_window(mooncake_records: list[TraceRecord]) -> None:
    opts = ReplayOptions(start_s=600.0, duration_s=300.0)
    recs, _ = load_records(MOONCAKE, "mooncake", opts)
    want = [r for r in mooncake_records if 600.0 <= r.arrival_s < 900.0]
    assert [r.rid for r in recs] == [r.rid for r in want]
    t0 = want[0].arrival_s
    assert recs[0].arrival_s == 0.0
    assert [r.arrival_s for r in recs] == pytest.approx([r.arrival_s - t0 for r in want])


@needs_mooncake
def test_max_requests_and_time_scale(mooncake_records: list[TraceRecord]) -> None:
    recs, _ = load_records(MOONCAKE, "mooncake", ReplayOptions(max_requests=100, time_scale=0.5))
    assert len(recs) == 100
    assert [r.arrival_s for r in recs] == pytest.approx(
        [r.arrival_s * 0.5 for r in mooncake_records[:100]]
    )


@needs_mooncake
def test_rate() -> None:
    recs, _ = load_records(MOONCAKE, "mooncake", ReplayOptions(rate=10.0, duration_s=600.0))
    assert len(recs) / recs[-1].arrival_s == pytest.approx(10.0)
    assert recs[0].arrival_s == 0.0


@needs_mooncake
def test_spread_buckets(mooncake_records: list[TraceRecord]) -> None:
    recs, _ = load_records(MOONCAKE, "mooncake", ReplayOptions(spread_buckets=True))
    n0 = sum(1 for r in mooncake_records if r.arrival_s == 0.0)
    first = [r.arrival_s for r in recs[:n0]]
    assert n0 > 1
    assert all(a < b for a, b in itertools.pairwise(first))
    assert first[0] == 0.0 and first[-1] < 3.0
    assert recs[n0].arrival_s == mooncake_records[n0].arrival_s  # next bucket starts on time
    times = [r.arrival_s for r in recs]
    assert times == sorted(times)
    # Every request stays inside its own bucket.
    for orig, new in zip(mooncake_records, recs, strict=True):
        assert orig.arrival_s <= new.arrival_s < orig.arrival_s + 3.01


def test_spread_buckets_small() -> None:
    recs = [_rec(f"r{i}", t) for i, t in enumerate([0.0, 0.0, 0.0, 0.0, 2.0, 6.0, 6.0])]
    out = replay_records(recs, ReplayOptions(spread_buckets=True))
    # Widths: 2 s for the first bucket, 4 s for the second, median gap (3 s) for the last.
    assert [r.arrival_s for r in out] == pytest.approx([0.0, 0.5, 1.0, 1.5, 2.0, 6.0, 7.5])


# --------------------------------------------------------------------------- formats


def _rec(rid: str, t: float, n: int = 10) -> TraceRecord:
    return TraceRecord(rid, t, n, 1, None, None, None)


def test_bailian_format(tmp_path: Path) -> None:
    path = tmp_path / "qwen_traceA_blksz_16.jsonl"
    rows = [
        {"chat_id": 159, "parent_chat_id": -1, "timestamp": 0.0, "input_length": 33,
         "output_length": 7, "type": "text", "turn": 1, "hash_ids": [1, 2, 3]},
        {"chat_id": 160, "parent_chat_id": 159, "arrival_time": 1.5, "input_length": 48,
         "output_length": 0, "type": "text", "turn": 2, "hash_ids": [1, 2, 4]},
    ]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    recs = list(iter_bailian(path))
    assert [r.rid for r in recs] == ["159", "160"]
    assert recs[0].block_size == 16 and recs[1].arrival_s == 1.5
    assert detect_format(path) == "bailian"
    wl = load(path, "bailian", ReplayOptions(), page_size=16)
    first, second = wl.requests[0].keys, wl.requests[1].keys
    assert len(first) == 2 and len(second) == 3 and second[:2] == first  # shared prefix
    with pytest.raises(WorkloadError, match="expected ceil"):
        list(iter_bailian(path, block_size=32))


def test_own_jsonl_roundtrip(tmp_path: Path) -> None:
    recs = [
        *generated_shared_prefix(num_groups=2, prompts_per_group=2, system_prompt_len=40,
                                 question_len=8, output_len=4, request_rate=5.0, seed=1),
        *multi_turn_agentic(num_sessions=2, system_prompt_len=128, seed=1),
    ]  # fmt: skip
    recs.sort(key=lambda r: r.arrival_s)
    recs.append(TraceRecord("plain", recs[-1].arrival_s + 1, 77, 3, None, None, None, 2))
    path = tmp_path / "w.jsonl"
    assert write_jsonl(recs, path) == len(recs)
    assert list(iter_jsonl(path)) == recs
    assert detect_format(path) == "jsonl"
    records, skipped = load_records(path, "jsonl", ReplayOptions())
    assert records == recs and skipped == []
    plain = to_request(records[-1], 8)
    assert plain.keys == [] and plain.priority == 2
    # The replay loader refuses one trace whose block sizes give two key units.
    with pytest.raises(WorkloadError, match="must give one key unit"):
        load(path, "jsonl", ReplayOptions(), page_size=8)


def test_to_request_variants() -> None:
    tok = TraceRecord("t", 1.0, 20, 5, None, None, tuple(range(20)), 3)
    req = to_request(tok, 8)
    assert (req.rid, req.arrival_time, req.max_new_tokens, req.priority) == ("t", 1.0, 5, 3)
    assert req.key_tokens == 8 and len(req.keys) == 2
    blk = TraceRecord("b", 0.0, 1100, 1, (0, 1, 2), 512, None)
    assert to_request(blk, 16).keys == block_key_chain([0, 1], 1024, 512, 512)
    plain = to_request(TraceRecord("p", 0.0, 100, 1, None, None, None), 16)
    assert plain.keys == [] and plain.key_tokens == 16 and plain.state.input_len == 100
    with pytest.raises(ValueError):
        TraceRecord("x", 0.0, 3, 1, (1,), 16, (1, 2, 3))


# --------------------------------------------------------------------------- generators


def test_gsp_defaults() -> None:
    recs = generated_shared_prefix()
    assert len(recs) == 1024
    assert all(r.input_len == 2176 and r.output_len == 256 for r in recs)
    assert all(r.arrival_s == 0.0 for r in recs)
    assert len({r.tokens[:2048] for r in recs if r.tokens}) == 64
    st = trace_stats(recs, token_block_size=512)
    assert st.block_hit_rate == pytest.approx(0.75)  # (15 x 4) / (16 x 5)
    # Shuffled: consecutive requests are not all of one group.
    groups = [r.rid.split("-")[1] for r in recs[:16]]
    assert len(set(groups)) > 1
    ordered = generated_shared_prefix(num_groups=4, prompts_per_group=4, ordered=True)
    assert [r.rid.split("-")[1] for r in ordered] == [f"g{g}" for g in range(4) for _ in range(4)]


def test_gsp_determinism() -> None:
    kw: dict[str, Any] = {"num_groups": 4, "prompts_per_group": 4, "request_rate": 10.0}
    assert generated_shared_prefix(seed=3, **kw) == generated_shared_prefix(seed=3, **kw)
    assert generated_shared_prefix(seed=3, **kw) != generated_shared_prefix(seed=4, **kw)


def test_gsp_options() -> None:
    recs = generated_shared_prefix(
        num_groups=8, prompts_per_group=8, system_prompt_len=100, question_len=20,
        output_len=10, range_ratio=0.5, request_rate=4.0, group_distribution="zipf",
        zipf_alpha=1.5, seed=2,
    )  # fmt: skip
    assert len(recs) == 64
    times = [r.arrival_s for r in recs]
    assert times[0] == 0.0 and all(a < b for a, b in itertools.pairwise(times))
    assert 64 / times[-1] == pytest.approx(4.0, rel=0.5)
    assert all(5 <= r.output_len <= 10 for r in recs)
    assert all(50 + 10 <= r.input_len <= 120 for r in recs)
    counts: dict[str, int] = {}
    for r in recs:
        g = r.rid.split("-")[1]
        counts[g] = counts.get(g, 0) + 1
    assert counts["g0"] > 64 / 8  # zipf favours the first group
    two = generated_shared_prefix(num_groups=1, prompts_per_group=2, system_prompt_len=32,
                                  question_len=8, output_len=4, num_turns=2)  # fmt: skip
    assert len(two) == 4
    t0, t1 = two[0], two[1]
    assert t1.rid.endswith("-t1") and t1.tokens is not None and t0.tokens is not None
    assert t1.tokens[: t0.input_len] == t0.tokens and t1.input_len == 32 + 8 + 4 + 8


def test_agentic_defaults_hit_rate() -> None:
    recs = multi_turn_agentic()
    st = trace_stats(recs)
    assert st.block_hit_rate >= 0.90
    times = [r.arrival_s for r in recs]
    assert times == sorted(times)
    sessions = {r.rid.split("-")[1] for r in recs}
    assert len(sessions) == 64
    for r in recs:
        assert r.block_size == 64 and r.hash_ids is not None
        assert len(r.hash_ids) == math.ceil(r.input_len / 64)


def test_agentic_turns_share_context() -> None:
    recs = multi_turn_agentic(num_sessions=3, seed=5, num_system_prompts=2)
    by_session: dict[str, list[TraceRecord]] = {}
    for r in recs:
        by_session.setdefault(r.rid.split("-")[1], []).append(r)
    for turns in by_session.values():
        assert 4 <= len(turns) <= 12
        for prev, cur in itertools.pairwise(turns):
            assert prev.hash_ids is not None and cur.hash_ids is not None
            full = prev.input_len // 64
            assert cur.hash_ids[:full] == prev.hash_ids[:full]
            assert cur.input_len >= prev.input_len + prev.output_len + 128
            assert cur.arrival_s > prev.arrival_s + 1.0
    firsts = [turns[0].hash_ids for turns in by_session.values()]
    assert firsts[0] is not None and firsts[2] is not None and firsts[1] is not None
    assert firsts[0][:128] == firsts[2][:128] != firsts[1][:128]  # round-robin prompts


def test_agentic_determinism() -> None:
    assert multi_turn_agentic(num_sessions=8, seed=1) == multi_turn_agentic(num_sessions=8, seed=1)
    assert multi_turn_agentic(num_sessions=8, seed=1) != multi_turn_agentic(num_sessions=8, seed=2)


# --------------------------------------------------------------------------- stats


def test_stats_prefix_rule_is_honest() -> None:
    # Not chain-consistent: id 2 after id 3 is a different prefix, so it must miss.
    a = TraceRecord("a", 0.0, 32, 1, (1, 2), 16, None)
    b = TraceRecord("b", 1.0, 32, 1, (3, 2), 16, None)
    c = TraceRecord("c", 2.0, 40, 1, (1, 2, 9), 16, None)
    d = TraceRecord("d", 3.0, 40, 1, (1, 2, 9), 16, None)  # repeated partial last block
    st = trace_stats([a, b, c, d])
    assert st.total_blocks == 10
    assert st.block_hit_rate == pytest.approx(5 / 10)  # c: 2, d: 3
    assert st.block_hit_rate_no_partial == pytest.approx(4 / 10)
    assert st.token_hit_rate == pytest.approx((32 + 40) / 144)
    assert st.token_hit_rate_no_partial == pytest.approx(64 / 144)
    assert st.distinct_blocks == 5
    assert st.requests_all_hit == 1 and st.requests_with_hit == 2
    plain = trace_stats([_rec("x", 0.0, 1000), _rec("y", 2.0, 1000)])
    assert plain.block_hit_rate == 0.0 and plain.total_blocks == 4 and plain.mean_rate == 1.0


# --------------------------------------------------------------------------- issue 33 item 9


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    from prefillkit.cli import run

    code = run(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_bailian_block_size_zero_in_the_name_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``..._blksz_0.jsonl`` states an impossible block size: one line naming the file
    (it was read with block size 16 without a word); --block-size still overrides it."""
    path = tmp_path / "qwen_traceA_blksz_0.jsonl"
    path.write_text(
        '{"chat_id": 1, "timestamp": 0.0, "input_length": 16, "output_length": 4, '
        '"hash_ids": [1]}\n'
    )
    with pytest.raises(WorkloadError, match="blksz_0") as info:
        list(iter_bailian(path))
    assert info.value.path == str(path) and info.value.line is None
    code, _, err = _cli(capsys, "trace-stats", str(path))
    assert code == 2
    assert err.splitlines() == [
        f"prefillkit: error: {path}: the file name states block size 'blksz_0': expected 1 "
        "to 999,999,999 tokens per block (rename the file or give --block-size N)"
    ]
    assert [r.block_size for r in iter_bailian(path, block_size=16)] == [16]
    code, _, err = _cli(capsys, "trace-stats", str(path), "--block-size", "16", "--json")
    assert code == 0, err


def test_generate_note_and_trace_stats_report_one_hit_rate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """gsp prompts are token ids: generate's note (75.00 %, 512-token blocks) and
    trace-stats (88.24 %, 64-token pages) cut them differently; now one function and one
    block size give one figure."""
    out = tmp_path / "gsp.jsonl"
    code, _, err = _cli(capsys, "generate", "--generator", "gsp", "-o", str(out))
    assert code == 0, err
    note = re.search(r"ideal hit rate ([0-9.]+ %) by blocks", err)
    assert note is not None, err
    code, doc, err = _cli(capsys, "trace-stats", str(out), "--json")
    assert code == 0, err
    assert note.group(1) == f"{json.loads(doc)['block_hit_rate'] * 100:.2f} %"
    assert note.group(1) == "88.24 %"


def test_trace_stats_lru_table_weighted_as_the_ideal_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The ideal table leads with the block-weighted rate; the LRU table gives the same
    weighting (and says so): a cache larger than the trace equals the ideal "never shared"
    rows, blocks and tokens."""
    rows = [
        {"arrival_s": 0.0, "output_len": 1, "hash_ids": [1, 2, 3], "block_size": 64,
         "input_len": 150},
        {"arrival_s": 1.0, "output_len": 1, "hash_ids": [1, 2, 4, 5], "block_size": 64,
         "input_len": 256},
        {"arrival_s": 2.0, "output_len": 1, "hash_ids": [1, 2, 4, 5, 6], "block_size": 64,
         "input_len": 257},
        {"arrival_s": 3.0, "output_len": 1, "input_len": 500},
        {"arrival_s": 4.0, "output_len": 1, "tokens": list(range(200))},
        {"arrival_s": 5.0, "output_len": 1, "tokens": list(range(130))},
    ]  # fmt: skip
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ("trace-stats", str(path), "--lru-cache-tokens", "1000000", "--lru-cache-tokens", "256")
    code, doc, err = _cli(capsys, *args, "--json")
    assert code == 0, err
    stats = json.loads(doc)
    huge, small = stats["lru"]
    assert huge["block_hit_rate"] == pytest.approx(stats["block_hit_rate_no_partial"])
    assert huge["hit_rate"] == pytest.approx(stats["token_hit_rate_no_partial"])
    assert huge["total_blocks"] == stats["total_blocks"]
    assert huge["block_hit_rate"] != huge["hit_rate"]  # the two weightings differ here
    assert 0 <= small["block_hit_rate"] <= huge["block_hit_rate"]
    code, text, err = _cli(capsys, *args)
    assert code == 0, err
    flat = " ".join(text.split())
    assert "LRU prefix cache hit rate, by blocks and by tokens" in flat
    assert f"{huge['block_hit_rate'] * 100:.2f} %" in flat.split("LRU prefix cache")[1]
