"""Streaming replay (issue 17 item 1): an engine fed an iterator keeps compact columns
and writes its rows as it goes; its summary and its files are those of the list run."""

from __future__ import annotations

import gc
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from prefillkit.app.replay import WorkloadSpec, load_requests, open_workload
from prefillkit.app.settings import Config
from prefillkit.records.output import StreamingRunWriter, summary_document, write_run
from prefillkit.sim.engine import Engine
from prefillkit.workloads.agentic import iter_multi_turn_agentic, multi_turn_agentic
from prefillkit.workloads.generators import generated_shared_prefix, iter_generated_shared_prefix
from prefillkit.workloads.trace_reader import ReplayOptions, iter_replay_records, replay_records

CONFIGS: dict[str, dict[str, Any]] = {
    "pd-cp8": {"tp_size": 8, "cp_size": 8, "enable_cp_shared_kv": True, "page_size": 64,
               "enable_hierarchical_cache": True, "max_total_tokens": 300_000},
    "colocated-tight": {"tp_size": 1, "mode": "colocated", "max_total_tokens": 60_000,
                        "schedule_policy": "lpm", "model": "llama-3.1-8b"},
    "affinity": {"tp_size": 8, "cp_size": 8, "enable_cp_shared_kv": True,
                 "enable_cp_shared_kv_prefill_bs_gt1": True, "enable_affinity": True,
                 "max_total_tokens": 400_000},
}  # fmt: skip


def _spec(generator: str = "agentic", **args: Any) -> WorkloadSpec:
    return WorkloadSpec(
        generator=generator,
        generator_args=args,
        replay=ReplayOptions(spread_buckets=True, time_scale=0.5),
    )


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_streaming_run_writes_the_files_of_the_list_run(name: str, tmp_path: Path) -> None:
    cfg = Config(**CONFIGS[name])  # type: ignore[arg-type]
    spec = _spec(num_sessions=24, session_arrival_rate=1.0)
    page = cfg.resolved_page_size
    listed = load_requests(spec, page_size=page, seed=cfg.seed)
    res = Engine(cfg.sim_settings(), listed.requests).run()
    write_run(res, tmp_path / "a", summary_document(res, name="x", config={}, workload={}))

    stream = open_workload(spec, page_size=page, seed=cfg.seed)
    engine = Engine(cfg.sim_settings(), stream.requests)
    writer = StreamingRunWriter(tmp_path / "b", engine.trace.keys)
    assert engine.collector is not None
    engine.collector.sink = writer
    sres = engine.run()
    writer.commit(summary_document(sres, name="x", config={}, workload={}))
    assert sres.requests == [] and sres.batches == []
    strip = {"wall_time_s"}
    assert {k: v for k, v in sres.summary.items() if k not in strip} == {
        k: v for k, v in res.summary.items() if k not in strip
    }
    for f in ("requests.csv", "batches.csv", "summary.json"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f
    assert stream.finish_info()["requests"] == len(listed.requests)
    assert not [p for p in (tmp_path / "b").iterdir() if p.name.endswith((".tmp", ".part"))]


def test_lazy_generators_give_the_eager_records() -> None:
    kw: dict[str, Any] = {"num_sessions": 30, "session_arrival_rate": 0.5,
                          "system_prompt_len": (100, 3000), "num_system_prompts": 3}  # fmt: skip
    assert list(iter_multi_turn_agentic(**kw)) == multi_turn_agentic(**kw)
    g: dict[str, Any] = {"num_groups": 6, "prompts_per_group": 5, "num_turns": 2,
                         "range_ratio": 0.5, "request_rate": 3.0}  # fmt: skip
    assert list(iter_generated_shared_prefix(**g)) == generated_shared_prefix(**g)
    recs = multi_turn_agentic(**kw)
    for opts in (ReplayOptions(spread_buckets=True), ReplayOptions(time_scale=2.0, start_s=5),
                 ReplayOptions(rate=3.0), ReplayOptions(max_requests=7)):  # fmt: skip
        assert list(iter_replay_records(recs, opts)) == replay_records(recs, opts)


@pytest.mark.parametrize("open_loop", [True, False])
def test_a_stopped_streaming_run_counts_only_requests_that_arrived(open_loop: bool) -> None:
    """Open- or closed-loop, a stopped run counts the requests that had arrived, never
    those still to come (issue 33: a generator is not drained to count them)."""
    cfg = Config(tp_size=8, open_loop=open_loop)
    spec = _spec(num_sessions=8)
    stream = open_workload(spec, page_size=cfg.resolved_page_size, seed=0)
    listed = load_requests(spec, page_size=cfg.resolved_page_size, seed=0)
    engine = Engine(cfg.sim_settings(), stream.requests)
    calls = [0]

    def stop(done: int, total: int) -> None:
        calls[0] += 1
        if calls[0] == 20:
            engine.stop_requested = True

    engine.on_progress = stop
    res = engine.run()
    assert res.partial
    assert engine.arrived < len(listed.requests)
    assert res.summary["requests"] == engine.arrived


def test_a_bad_row_mid_trace_stops_the_streaming_replay_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from prefillkit.cli import run

    trace = tmp_path / "t.jsonl"
    good = [{"timestamp": i * 100, "input_length": 700, "output_length": 4,
             "hash_ids": [i, i + 1]} for i in range(5)]  # fmt: skip
    lines = [json.dumps(r) for r in good[:3]] + ['{"timestamp": 400, "input_length": -1}']
    trace.write_text("\n".join([*lines, *(json.dumps(r) for r in good[3:])]) + "\n")
    out = tmp_path / "out"
    code = run(["replay", "--trace", str(trace), "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"prefillkit: error: {trace}:4:") and err.count("\n") == 1, err
    assert not out.exists()  # the folder the run created is removed again, being empty


def test_a_streaming_engine_refuses_arrivals_out_of_order() -> None:
    from prefillkit.request import Request
    from prefillkit.sim.engine import SimConfigError

    reqs = [Request.from_tokens(f"r{i}", list(range(100 + i)), page_size=1, arrival_time=t)
            for i, t in enumerate((0.0, 2.0, 1.0))]  # fmt: skip
    with pytest.raises(SimConfigError, match="must arrive in order: 'r2'"):
        Engine(Config(tp_size=8).sim_settings(), iter(reqs)).run()


def test_batch_rows_follow_the_batch_columns() -> None:
    """The collector writes a batch row as BatchRecord's values, the rids, then the
    breakdown terms: batches.csv's header must list the same columns in that order."""
    from prefillkit.records.collector import _BATCH_FIELDS
    from prefillkit.records.metrics import BATCH_COLUMNS, batch_columns

    assert (*_BATCH_FIELDS, "rids") == BATCH_COLUMNS
    assert batch_columns(["a", "total", "b"]) == (*BATCH_COLUMNS, "t_a_s", "t_b_s")


#: Small pools: every configuration evicts; the HiCache one also removes host nodes.
CYCLE_CONFIGS: dict[str, dict[str, Any]] = {
    **{name: {**kw, "max_total_tokens": 120_000} for name, kw in CONFIGS.items()},
    "hicache-full": {**CONFIGS["pd-cp8"], "max_total_tokens": 40_000, "hicache_ratio": 1.2},
}


def _run_without_collector(cfg: Config, sessions: int) -> tuple[Engine, Counter[str]]:
    """Run (the engine pauses the cyclic collector); then what only it could free, by type."""
    spec = _spec(num_sessions=sessions, session_arrival_rate=2.0)
    stream = open_workload(spec, page_size=cfg.resolved_page_size, seed=cfg.seed)
    engine = Engine(cfg.sim_settings(), stream.requests)
    seen: list[bool] = []
    engine.on_progress = lambda done, total: seen.append(gc.isenabled())
    gc.collect()
    was_enabled = gc.isenabled()
    try:
        engine.run()
        assert seen and not any(seen)  # the collector is off in the loop
        assert gc.isenabled() == was_enabled  # and back as the run found it
        gc.disable()
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        garbage = Counter(type(o).__name__ for o in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was_enabled:
            gc.enable()
    return engine, garbage


@pytest.mark.parametrize("name", sorted(CYCLE_CONFIGS))
def test_a_run_leaves_no_reference_cycles(name: str) -> None:
    """What a run drops, reference counting frees: nothing it leaves behind needs the
    cyclic collector, which Engine.run turns off for a simulated run."""
    cfg = Config(**CYCLE_CONFIGS[name])  # type: ignore[arg-type]
    _run_without_collector(cfg, 2)  # first use: the imports' own garbage
    engine, garbage = _run_without_collector(cfg, 150)
    assert engine.sched.state.cache.device_evicted_pages > 0  # type: ignore[attr-defined]
    if name == "hicache-full":
        host = engine.sched.state.cache.host  # type: ignore[attr-defined]
        assert host is not None and host.evicted_pages > 0
    assert not garbage, garbage
