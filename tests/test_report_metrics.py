"""Issue 19 items 4-5: the cached-token split, latency statistics, goodput, trace events."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from prefillkit.app.settings import Config
from prefillkit.records.run_options import RunOptions
from prefillkit.records.slo import (
    latency_metrics,
    parse_duration_s,
    parse_percentiles,
    pct_key,
)
from prefillkit.request import Request
from prefillkit.sim.engine import Engine, SimResult, simulate


def tok_req(rid: str, tokens: list[int], t: float) -> Request:
    return Request.from_tokens(rid, tokens, page_size=1, arrival_time=t, max_new_tokens=4)


def chunked_run(**options: Any) -> SimResult:
    """Three requests, chunked at 400 tokens: r2 and r3 share r1's first 1,000 tokens."""
    cfg = Config(max_total_tokens=100_000, tp_size=8, chunked_prefill_size=400, page_size=1)
    shared = list(range(1000))
    reqs = [
        tok_req("r1", shared + list(range(10_000, 10_200)), 0.0),
        tok_req("r2", shared + list(range(20_000, 20_900)), 30.0),
        tok_req("r3", shared + list(range(30_000, 30_100)), 60.0),
    ]
    return Engine(cfg.sim_settings(), reqs, options=RunOptions(**options)).run()


# ---------------------------------------------------------------- cached split


def test_cached_split_adds_up_and_hits_match_requests() -> None:
    res = chunked_run()
    assert any(b.carried_prefix_tokens for b in res.batches)  # continuations happened
    for b in res.batches:
        assert b.cached_tokens == b.device_hit_tokens + b.host_hit_tokens + b.carried_prefix_tokens
    hits = sum(b.device_hit_tokens + b.host_hit_tokens for b in res.batches)
    assert hits == sum(
        r.metrics.device_hit_tokens + r.metrics.host_hit_tokens for r in res.requests
    )
    m = res.summary
    assert m["batch_device_hit_tokens"] + m["batch_host_hit_tokens"] == hits
    assert m["batch_cached_tokens"] == sum(b.cached_tokens for b in res.batches)
    assert m["batch_carried_prefix_tokens"] == sum(b.carried_prefix_tokens for b in res.batches)
    assert m["prompt_tokens"] == sum(r.prompt_len for r in res.requests)
    # The hit columns give the summary's hit rate.
    assert hits / m["prompt_tokens"] == pytest.approx(m["cache_hit_rate"])
    # r2's first chunk hits r1's 1,000 shared tokens; its later chunks carry a prefix.
    ids = res.trace.batch_ids()["r2"]
    first, *rest = (res.batches[i] for i in ids)
    assert first.device_hit_tokens == 1000 and first.carried_prefix_tokens == 0
    assert rest and all(b.carried_prefix_tokens > 0 and b.device_hit_tokens == 0 for b in rest)


def test_batches_csv_has_the_split(tmp_path) -> None:
    import csv

    from prefillkit.records.output import summary_document, write_run

    res = chunked_run()
    write_run(res, tmp_path, summary_document(res, name="x", config={}, workload={}))
    rows = list(csv.DictReader(open(tmp_path / "batches.csv")))
    for row in rows:
        parts = ("device_hit_tokens", "host_hit_tokens", "carried_prefix_tokens")
        assert int(row["cached_tokens"]) == sum(int(row[k]) for k in parts)


# ---------------------------------------------------------------- latency metrics


def test_percentiles_std_and_goodput() -> None:
    res = chunked_run(percentiles=(50.0, 99.9), slo_ttft_s=0.5)
    m = res.summary
    ttft = sorted(r.metrics.first_token_time - r.arrival_time for r in res.requests)  # type: ignore[operator]
    import numpy as np

    for q in (50, 90, 95, 99, 99.9):
        assert m[pct_key("ttft", q)] == pytest.approx(float(np.percentile(ttft, q)))
    assert "ttft_p99.9_s" in m and "queueing_p95_s" in m
    assert m["ttft_std_s"] == pytest.approx(float(np.std(ttft)))
    assert m["percentiles"] == [50.0, 99.9]
    met = sum(1 for t in ttft if t <= 0.5)
    assert m["slo_met_requests"] == met
    assert m["slo_attainment"] == pytest.approx(met / 3)
    assert m["goodput_req_s"] == pytest.approx(met / m["sim_duration_s"])


def test_goodput_counts_rejected_and_unfinished_as_misses() -> None:
    reqs = [
        Request(
            rid=f"r{i}",
            arrival_time=float(i),
            input_len=10,
            max_new_tokens=1,
            keys=[],
            key_tokens=1,
        )
        for i in range(4)
    ]
    reqs[0].metrics.first_scheduled_time, reqs[0].metrics.first_token_time = 0.0, 0.5
    reqs[1].metrics.first_scheduled_time, reqs[1].metrics.first_token_time = 1.0, 4.0
    m = latency_metrics(reqs, sim_end_s=10.0, slo_ttft_s=1.0)
    assert m["slo_met_requests"] == 1
    assert m["slo_attainment"] == 0.25
    assert m["goodput_req_s"] == pytest.approx(0.1)
    assert m["ttft_max_s"] == 3.0 and m["queueing_max_s"] == 0.0


def test_parse_percentiles_and_durations() -> None:
    assert parse_percentiles("99,50, 90") == (50.0, 90.0, 99.0)
    assert parse_percentiles("p99.9") == (99.9,)
    for bad in ("", "0", "101", "x"):
        with pytest.raises(ValueError):
            parse_percentiles(bad)
    assert parse_duration_s("2s") == 2.0
    assert parse_duration_s("2000ms") == 2.0
    assert parse_duration_s("1.5") == 1.5
    assert parse_duration_s("1m") == 60.0
    for bad in ("", "-1s", "0", "2 hours"):
        with pytest.raises(ValueError):
            parse_duration_s(bad)


def test_simulate_default_summary_has_p95_and_std() -> None:
    cfg = Config(max_total_tokens=100_000, tp_size=8, page_size=1)
    res = simulate(cfg.sim_settings(), [tok_req("a", list(range(100)), 0.0)])
    assert res.summary["ttft_p95_s"] is not None and res.summary["ttft_std_s"] == 0.0
    assert "slo_attainment" not in res.summary


# ---------------------------------------------------------------- trace events


def _check_trace_events(doc: dict) -> list[dict]:
    """The schema of the Chrome / Perfetto trace-event JSON; returns the X events."""
    import json

    assert set(doc) >= {"traceEvents"}
    json.dumps(doc, allow_nan=False)  # plain JSON
    xs = []
    for ev in doc["traceEvents"]:
        assert ev["ph"] in ("X", "M")
        assert isinstance(ev["pid"], int) and isinstance(ev["tid"], int)
        if ev["ph"] == "M":
            assert ev["name"] in (
                "process_name",
                "thread_name",
                "process_sort_index",
                "thread_sort_index",
            )
            continue
        assert set(ev) == {"name", "ph", "ts", "dur", "pid", "tid", "args"}
        assert isinstance(ev["name"], str) and isinstance(ev["args"], dict)
        assert ev["ts"] >= 0 and ev["dur"] >= 0
        xs.append(ev)
    # On one thread, slices are disjoint or nested (what the viewers can stack).
    by_thread: dict[tuple[int, int], list[dict]] = {}
    for ev in xs:
        by_thread.setdefault((ev["pid"], ev["tid"]), []).append(ev)
    eps = 1e-3
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack: list[float] = []
        for ev in evs:
            while stack and stack[-1] <= ev["ts"] + eps:
                stack.pop()
            end = ev["ts"] + ev["dur"]
            if stack:
                assert end <= stack[-1] + eps, ev
            stack.append(end)
    return xs


def test_trace_events_schema_and_tracks(tmp_path) -> None:
    import json

    from prefillkit.records.trace_events import EXECUTOR_PID, REQUESTS_PID, write_trace_events

    res = chunked_run()
    path = tmp_path / "t.json"
    write_trace_events(res, path)
    doc = json.loads(path.read_text())
    xs = _check_trace_events(doc)
    forwards = [e for e in xs if e["pid"] == EXECUTOR_PID]
    assert len(forwards) == len(res.batches)
    for ev, b in zip(sorted(forwards, key=lambda e: e["ts"]), res.batches, strict=True):
        assert ev["ts"] == pytest.approx(b.start_s * 1e6)
        assert ev["dur"] == pytest.approx(b.duration_s * 1e6)
        assert ev["args"]["carried_prefix_tokens"] == b.carried_prefix_tokens
    names = {
        e["args"]["name"]
        for e in doc["traceEvents"]
        if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == REQUESTS_PID
    }
    assert names == {"r1", "r2", "r3"}
    r2 = res.requests[1]
    r2_tid = next(
        e["tid"]
        for e in doc["traceEvents"]
        if e["ph"] == "M" and e["name"] == "thread_name" and e["args"]["name"] == "r2"
    )
    mine = [e for e in xs if e["pid"] == REQUESTS_PID and e["tid"] == r2_tid]
    prefill = next(e for e in mine if e["name"] == "prefill")
    assert prefill["ts"] == pytest.approx(r2.metrics.first_scheduled_time * 1e6)
    assert prefill["ts"] + prefill["dur"] == pytest.approx(r2.metrics.first_token_time * 1e6)
    chunks = [e for e in mine if e["name"].startswith("chunk ")]
    assert len(chunks) == r2.metrics.num_chunks > 1


def test_trace_events_colocated_decode_track() -> None:
    from prefillkit.records.trace_events import trace_events

    cfg = Config(max_total_tokens=100_000, tp_size=8, page_size=1, mode="colocated")
    reqs = [tok_req(f"r{i}", list(range(i * 1000, i * 1000 + 300)), i * 0.1) for i in range(3)]
    doc = trace_events(simulate(cfg.sim_settings(), reqs))
    xs = _check_trace_events(doc)
    assert any(e["name"] == "decode" for e in xs)


def test_decode_steps_are_kept_as_double_pairs() -> None:
    """A colocated run's decode steps: two arrays of doubles, read as (start, duration)."""
    from array import array

    from prefillkit.sim.decode_steps import DecodeSteps

    cfg = Config(max_total_tokens=100_000, tp_size=8, page_size=1, mode="colocated")
    reqs = [tok_req(f"r{i}", list(range(i * 1000, i * 1000 + 300)), i * 0.1) for i in range(3)]
    res = simulate(cfg.sim_settings(), reqs)
    steps = res.extra["decode_steps"]
    assert isinstance(steps, DecodeSteps) and len(steps) > 3
    pairs = list(steps)
    assert pairs[0] == steps[0] and pairs[-1] == steps[-1] and steps[1:3] == pairs[1:3]
    assert all(type(a) is float and type(b) is float and b > 0 for a, b in pairs)
    assert [a for a, _ in pairs] == sorted(a for a, _ in pairs)
    assert steps == pairs and steps != pairs[:-1]
    assert DecodeSteps(array("d", [1.0]), array("d", [2.0])) == [(1.0, 2.0)]
    with pytest.raises(ValueError, match="1 starts but 0 durations"):
        DecodeSteps(array("d", [1.0]), array("d"))


def _colocated_requests(rejected: bool = False) -> list[Request]:
    """Eight colocated requests with long outputs (a 2,000-token pool retracts one);
    ``rejected``: a ninth whose prompt and output can never fit, at 0.12 s."""
    reqs = [
        Request.from_tokens(f"r{i}", list(range(i * 1000, i * 1000 + 300 + 37 * i)),
                            page_size=1, arrival_time=i * 0.05, max_new_tokens=400)
        for i in range(8)
    ]  # fmt: skip
    if rejected:
        big = Request.from_tokens("big", list(range(90_000, 91_800)), page_size=1,
                                  arrival_time=0.12, max_new_tokens=400)  # fmt: skip
        reqs.insert(3, big)
    return reqs


def _streamed_and_listed(
    cfg: Config, make: Callable[[], list[Request]], tmp_path: Path, stop_after: int = 0
) -> tuple[dict, dict]:
    """The trace-event documents of one run kept as a list (``trace_events``) and of the
    same run streamed (``StreamingTraceWriter``, read back from its file); with
    ``stop_after``, both runs stop after that many loop steps (a partial run)."""
    import json

    from prefillkit.records.trace_events import StreamingTraceWriter, trace_events

    def engine(reqs: list[Request] | Iterator[Request]) -> Engine:
        e = Engine(cfg.sim_settings(), reqs)
        steps = [0]

        def stop(done: int, total: int) -> None:
            steps[0] += 1
            if steps[0] == stop_after:
                e.stop_requested = True

        e.on_progress = stop
        return e

    listed = engine(make()).run()
    streaming = engine(iter(make()))
    path = tmp_path / "streamed.json"
    writer = StreamingTraceWriter(path)
    assert streaming.collector is not None
    streaming.collector.timeline = writer
    res = streaming.run()
    assert res.partial == listed.partial == bool(stop_after)
    writer.commit(partial=res.partial, decode_steps=res.extra["decode_steps"])
    assert [p.name for p in tmp_path.iterdir()] == ["streamed.json"]  # no temporary left
    with open(path) as fh:
        streamed = json.load(fh)
    return json.loads(json.dumps(trace_events(listed))), streamed


def _assert_same_events(listed: dict, streamed: dict) -> list[dict]:
    import json
    from collections import Counter

    def bag(doc: dict) -> Counter[str]:
        return Counter(json.dumps(ev, sort_keys=True) for ev in doc["traceEvents"])

    assert list(streamed) == list(listed) == ["traceEvents", "displayTimeUnit", "otherData"]
    assert streamed["otherData"] == listed["otherData"]
    assert streamed["displayTimeUnit"] == "ms"
    assert bag(streamed) == bag(listed)
    return _check_trace_events(streamed)


def test_streamed_trace_events_are_the_list_runs(tmp_path: Path) -> None:
    from prefillkit.app.replay import WorkloadSpec, load_requests
    from prefillkit.workloads.trace_reader import ReplayOptions

    chunked = Config(max_total_tokens=100_000, tp_size=8, chunked_prefill_size=400, page_size=1)
    shared = list(range(1000))

    def pd_requests() -> list[Request]:  # chunked, and one rejected (never fits the pool)
        return [
            tok_req("r1", shared + list(range(10_000, 10_200)), 0.0),
            tok_req("huge", list(range(200_000, 310_000)), 10.0),
            tok_req("r2", shared + list(range(20_000, 20_900)), 10.0),
            tok_req("r3", shared + list(range(30_000, 30_100)), 10.0),
        ]

    tight = Config(max_total_tokens=2000, tp_size=1, page_size=1, mode="colocated",
                   model="llama-3.1-8b")  # fmt: skip
    runs: list[tuple[str, Config, Callable[[], list[Request]], int]] = [
        ("pd-chunked-rejected", chunked, pd_requests, 0),
        ("colocated-retraction", tight, _colocated_requests, 0),
        ("colocated-rejected", tight, lambda: _colocated_requests(rejected=True), 0),
        ("colocated-partial", tight, lambda: _colocated_requests(rejected=True), 40),
        ("pd-partial", chunked, pd_requests, 3),
    ]
    for name, cfg, make, stop_after in runs:
        folder = tmp_path / name
        folder.mkdir()
        listed, streamed = _streamed_and_listed(cfg, make, folder, stop_after)
        xs = _assert_same_events(listed, streamed)
        names = {e["name"].split(" ")[0] for e in xs}
        if name.startswith("pd-chunked"):
            assert {"chunk", "prefill", "queued"} <= names and "huge" not in str(xs)
        if name == "colocated-retraction":
            assert {"decode", "re-prefill"} <= names
        if name.endswith("partial"):
            assert streamed["otherData"]["partial"]
            waiting = [e for e in xs if e["name"] == "queued" and "ttft_s" not in e["args"]]
            assert waiting  # requests waiting (or not yet arrived) at the stop
    # A generated workload, with a session's turns sharing prefixes (the demo's LPM).
    lpm = Config(tp_size=1, mode="colocated", max_total_tokens=60_000, schedule_policy="lpm",
                 model="llama-3.1-8b")  # fmt: skip
    folder = tmp_path / "agentic"
    folder.mkdir()

    def agentic() -> list[Request]:
        spec = WorkloadSpec(generator="agentic", generator_args={"num_sessions": 12},
                            replay=ReplayOptions(time_scale=0.5))  # fmt: skip
        return load_requests(spec, page_size=lpm.resolved_page_size, seed=lpm.seed).requests

    _assert_same_events(*_streamed_and_listed(lpm, agentic, folder))


# ---------------------------------------------------------------- labels, panel, pages


def _run_dir(tmp_path, name: str = "run", **engine_attrs: object):
    from prefillkit.records.output import summary_document, write_run
    from prefillkit.report.rundir import load_run

    res = chunked_run(**engine_attrs)
    cfg = Config(max_total_tokens=100_000, tp_size=8, chunked_prefill_size=400, page_size=1)
    from prefillkit.app.settings import describe

    doc = summary_document(res, name=name, config=describe(cfg), workload={"source": "test"})
    doc["base"] = "preset demo"
    doc["sources"] = {"tp_size": "line", "chunked_prefill_size": "line", "model": "default"}
    write_run(res, tmp_path / name, doc)
    return load_run(tmp_path / name)


def test_every_metric_has_a_label(tmp_path) -> None:
    from prefillkit.report.labels import metric_label

    run = _run_dir(tmp_path, slo_ttft_s=1.0, percentiles=(50.0, 99.9))
    for key in run.metrics:
        label = metric_label(key)
        assert label != key or "_" not in key, key
    assert metric_label("ttft_p99.9_s") == "TTFT p99.9"
    assert metric_label("warm_ttft_p90_s") == "warm TTFT p90"
    assert metric_label("mean_chunks_per_request") == "chunks per request"
    assert metric_label("stuck") != "stuck" and metric_label("admission_passes") != (
        "admission_passes"
    )
    assert metric_label("some_new_key_s") == "some new key (s)"


def test_html_report_shows_deployment_and_labels(tmp_path) -> None:
    import re

    from prefillkit.report.html import write_report

    run = _run_dir(tmp_path)
    page = write_report([run], tmp_path / "r.html").read_text()
    assert '<table id="deployment">' in page
    panel = page.split('<table id="deployment">')[1].split("</table>")[0]
    for text in ("model", "GPU", "TP", "CP", "DP", "KV pool", "page size", "HiCache", "mode"):
        assert f"<td>{text}" in panel
    assert "preset demo" in panel and ">line<" in panel  # base and sources
    summary = page.split('<table id="summary">')[1].split("</table>")[0]
    cells = re.findall(r"<tr><td>([^<]*)</td>", summary)
    assert cells
    for label in cells:
        assert not re.fullmatch(r"[a-z0-9_.]+_[a-z0-9_.]+", label), label
    assert "cache-hit tokens, device" in summary and "carried prefix" in summary


def test_console_summary_has_panel_and_no_raw_keys(tmp_path, capsys) -> None:
    import json

    from prefillkit.report.console import print_summary_table

    run = _run_dir(tmp_path, slo_ttft_s=1.0)
    doc = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert run.summary["sources"]["tp_size"] == "line"
    print_summary_table(doc)
    out = capsys.readouterr().out
    for text in ("deployment", "KV pool", "HiCache", "TTFT p95", "TTFT std", "SLO attainment"):
        assert text in out
    for raw in ("mean_chunks_per_request", "admission_passes", "stuck", "_s "):
        assert raw not in out


# ---------------------------------------------------------------- the command line


def test_replay_cli_percentiles_slo_and_trace_events(tmp_path) -> None:
    import json

    from test_cli import assert_one_line_error, run_cli

    events = tmp_path / "timeline.json"
    proc = run_cli(
        "replay",
        "--quiet",
        "--json",
        "--agentic-sessions",
        "6",
        "--percentiles",
        "50,90,99.9",
        "--slo-ttft",
        "1500ms",
        "--trace-events",
        events,
    )
    assert proc.returncode == 0, proc.stderr
    m = json.loads(proc.stdout)["metrics"]
    assert m["percentiles"] == [50.0, 90.0, 99.9]
    assert "ttft_p99.9_s" in m and "ttft_p95_s" in m and "queueing_p99.9_s" in m
    assert m["slo_ttft_s"] == 1.5 and 0.0 <= m["slo_attainment"] <= 1.0
    xs = _check_trace_events(json.loads(events.read_text()))
    assert len([e for e in xs if e["pid"] == 1]) == m["num_batches"]
    table = run_cli("replay", "--agentic-sessions", "6", "--quiet", "--percentiles", "50,99.9")
    assert table.returncode == 0, table.stderr
    assert "│ TTFT p99.9" in table.stdout and "│ TTFT p90 " not in table.stdout
    assert_one_line_error(
        run_cli("replay", "--quiet", "--percentiles", "50,200"), "--percentiles", "200"
    )
    assert_one_line_error(run_cli("replay", "--quiet", "--slo-ttft", "soon"), "--slo-ttft")


def test_replay_cli_trace_events_errors_leave_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A --trace-events file that cannot be written is one line and exit 2, before the
    run (a missing folder, a folder) or when a write fails mid-run; nothing is left."""
    import errno

    from prefillkit.cli import run
    from prefillkit.records import trace_events
    from test_cli import assert_one_line_error, run_cli

    (tmp_path / "dir").mkdir()
    for target, reason in ((tmp_path / "missing" / "t.json", "No such file"),
                           (tmp_path / "dir", "is a folder")):  # fmt: skip
        proc = run_cli("replay", "-q", "--agentic-sessions", "2", "--trace-events", target)
        assert_one_line_error(proc, f"--trace-events {target}: {reason}")
    assert [p.name for p in tmp_path.iterdir()] == ["dir"] and not any((tmp_path / "dir").iterdir())

    def full(value: object) -> object:
        if isinstance(value, dict) and str(value.get("name")).startswith("prefill bs"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return value

    monkeypatch.setattr(trace_events, "json_ready", full)
    target, out = tmp_path / "t.json", tmp_path / "out"
    argv = ["replay", "-q", "--agentic-sessions", "2", "--trace-events", str(target)]
    assert run([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == f"prefillkit: error: --trace-events {target}: No space left on device\n"
    # nothing written: the --out folder the run created is removed again, being empty
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir"]


def test_compare_cli_slo_reaches_every_variant(tmp_path) -> None:
    import json

    from test_cli import run_cli

    proc = run_cli(
        "compare", "--trace", "mooncake-slice", "--max-requests", "120", "--slo-ttft", "3s",
        "--percentiles", "99.9", "--variant", "a:--schedule-policy fcfs",
        "--variant", "b:--schedule-policy lpm", "--out", tmp_path / "cmp", "-q", "--json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    for v in doc["variants"]:
        assert v["metrics"]["slo_attainment"] is not None
        summary = json.loads((tmp_path / "cmp" / v["name"] / "summary.json").read_text())
        assert summary["metrics"]["slo_ttft_s"] == 3.0
        assert "ttft_p99.9_s" in summary["metrics"]
    assert any(h["key"] == "goodput_req_s" for h in doc["headline"])
