"""A fleet of instances behind a router (issue 36 item 2): the loop, its bookkeeping,
its files and its command line."""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from cli_support import cli, error_line
from prefillkit.app.fleet_file import fleet_settings
from prefillkit.app.replay import WorkloadSpec, load_requests, open_workload
from prefillkit.app.settings import Config
from prefillkit.records.output import StreamingRunWriter, summary_document
from prefillkit.sim.engine import Engine
from prefillkit.sim.fleet import Fleet
from prefillkit.sim.fleet_settings import FleetSettings
from prefillkit.sim.fleet_stats import FleetLoad, imbalance
from prefillkit.sim.routers.config import RouterConfig
from prefillkit.workloads.trace_reader import ReplayOptions

CFG: dict[str, Any] = {
    "tp_size": 8, "cp_size": 8, "enable_cp_shared_kv": True, "page_size": 64,
    "max_total_tokens": 400_000,
}  # fmt: skip


def _spec(**args: Any) -> WorkloadSpec:
    args = {"num_sessions": 24, "session_arrival_rate": 2.0, **args}
    return WorkloadSpec(
        generator="agentic", generator_args=args, replay=ReplayOptions(spread_buckets=True)
    )


def _fleet(cfg: Config, n: int, router: str, **params: Any) -> FleetSettings:
    return FleetSettings.copies(cfg.sim_settings(), n, RouterConfig(name=router, **params))


def _run(cfg: Config, fleet: FleetSettings, spec: WorkloadSpec, tmp: Path | None = None) -> Any:
    stream = open_workload(spec, page_size=cfg.resolved_page_size, seed=cfg.seed)
    f = Fleet(fleet, stream.requests)
    writer = None
    if tmp is not None:
        writer = StreamingRunWriter(tmp, f.trace.keys)
        f.collector.sink = writer
    res = f.run()
    if writer is not None:
        writer.commit(summary_document(res, name="x", config={}, workload={}))
    return res


def test_a_fleet_of_one_is_the_engine(tmp_path: Path) -> None:
    """One instance behind any router runs exactly as the engine alone: the same rows,
    the same summary (but the fleet's own keys)."""
    cfg = Config(**CFG)
    spec = _spec()
    stream = open_workload(spec, page_size=cfg.resolved_page_size, seed=cfg.seed)
    engine = Engine(cfg.sim_settings(), stream.requests)
    writer = StreamingRunWriter(tmp_path / "a", engine.trace.keys)
    assert engine.collector is not None
    engine.collector.sink = writer
    res = engine.run()
    writer.commit(summary_document(res, name="x", config={}, workload={}))
    fres = _run(cfg, _fleet(cfg, 1, "cache-aware"), spec, tmp_path / "b")
    for f in ("requests.csv", "batches.csv"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f
    fleet_keys = {"instances", "router", "fleet_busy_s", "routing_imbalance"}
    fleet_keys |= {"router_view_wrong_share", "wall_time_s"}
    assert {k: v for k, v in fres.summary.items() if k not in fleet_keys} == {
        k: v for k, v in res.summary.items() if k != "wall_time_s"
    }


def test_round_robin_spreads_requests_evenly_and_counts_every_request() -> None:
    cfg = Config(**CFG)
    res = _run(cfg, _fleet(cfg, 4, "round-robin"), _spec())
    rows = res.extra["fleet"]["instances"]
    counts = [r["requests"] for r in rows]
    assert max(counts) - min(counts) <= 1
    assert sum(counts) == res.summary["requests"]
    assert sum(r["prefilled"] for r in rows) == res.summary["completed"]


def test_a_fleet_run_is_deterministic() -> None:
    cfg = Config(**CFG)
    a = _run(cfg, _fleet(cfg, 3, "power-of-two"), _spec())
    b = _run(cfg, _fleet(cfg, 3, "power-of-two"), _spec())
    strip = {"wall_time_s"}
    assert {k: v for k, v in a.summary.items() if k not in strip} == {
        k: v for k, v in b.summary.items() if k not in strip
    }
    assert a.extra["fleet"]["instances"] == b.extra["fleet"]["instances"]


def test_prefix_routing_keeps_sessions_warm_where_round_robin_scatters_them() -> None:
    """Agent sessions grow their context turn by turn: a router that follows the prefix
    sends each later turn where its context is cached; round robin rarely does."""
    cfg = Config(**CFG)
    spec = _spec(num_sessions=40)
    hit = {
        name: _run(cfg, _fleet(cfg, 4, name), spec).summary["cache_hit_rate"]
        for name in ("round-robin", "cache-aware", "kv-cost")
    }
    assert hit["cache-aware"] > hit["round-robin"] + 0.08, hit
    assert hit["kv-cost"] > hit["round-robin"] + 0.08, hit


def test_the_approximate_view_is_checked_against_the_kv_events() -> None:
    cfg = Config(**CFG)
    res = _run(cfg, _fleet(cfg, 4, "cache-aware", prefix_source="approximate"), _spec())
    view = res.extra["fleet"]["view"]
    assert view["checked"] == res.summary["requests"]
    assert 0.0 <= view["wrong_share"] <= 1.0
    exact = _run(cfg, _fleet(cfg, 4, "cache-aware", prefix_source="exact"), _spec())
    assert exact.extra["fleet"]["view"]["checked"] == 0  # nothing to check: it is the truth


def test_fleet_load_follows_a_request_through_its_life() -> None:
    """Hand-computed: a 130-token prompt in 64-token blocks holds 3 blocks."""

    class R:
        prompt_len = 130

    load = FleetLoad([10, 10], 64)
    req: Any = R()
    load.routed(req, 1)
    assert (load.running, load.waiting, load.queued_tokens, load.active_blocks) == (
        [0, 1], [0, 1], [0, 130], [0, 3],
    )  # fmt: skip
    assert load.prefilled(req) == 1 and load.prefilled(req) == -1  # counted once
    assert (load.waiting, load.queued_tokens) == ([0, 0], [0, 0])
    assert load.retired(req) == 1
    assert (load.running, load.active_blocks) == ([0, 0], [0, 0])


def test_imbalance_at_a_hand_computed_point() -> None:
    # values 1, 1, 4: mean 2, max/mean 2, population sd sqrt(2), cv sqrt(2)/2
    out = imbalance([1.0, 1.0, 4.0])
    assert out["max_over_mean"] == 2.0
    assert out["cv"] == pytest.approx(2**0.5 / 2)


def test_fleet_settings_from_flags_and_from_a_file(tmp_path: Path) -> None:
    assert fleet_settings(Config(**CFG)) is None  # one instance: no fleet
    flags = fleet_settings(Config(**CFG, instances=3, router="least-load"))
    assert flags is not None and len(flags) == 3 and flags.router.name == "least-load"
    path = tmp_path / "fleet.toml"
    path.write_text(
        '[router]\nname = "kv-cost"\noverlap_score_weight = 2.0\n'
        "[[instance]]\ncount = 2\n[[instance]]\nmax_total_tokens = 200000\n"
    )
    fleet = fleet_settings(Config(**CFG, fleet=str(path)))
    assert fleet is not None and len(fleet) == 3
    assert fleet.router.name == "kv-cost" and fleet.router.overlap_score_weight == 2.0
    assert fleet.instances[2].max_total_tokens == 200_000
    assert fleet.instances[0].max_total_tokens == 400_000


def _fleet_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "fleet.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('[router]\nname = "magic"\n', "router"),
        ("[router]\ncache_treshold = 0.3\n", "cache_treshold"),
        ("[[instance]]\ntp_sizes = 8\n", "instance[0]: tp_sizes"),
        ("[[instance]]\ncount = 0\n", "instance[0]: count"),
        ("[[instance]]\npage_size = 16\n[[instance]]\n", "page_size"),
        ("[[instance]]\nmax_total_tokens = 10\n", "instance[0]"),
        ("[workers]\n", "workers"),
    ],
)
def test_a_bad_fleet_file_is_one_line_naming_the_file_and_key(
    tmp_path: Path, text: str, needle: str
) -> None:
    path = _fleet_file(tmp_path, text)
    proc = cli("replay", "--fleet", path, "--agentic-sessions", "4")
    line = error_line(proc)
    assert str(path) in line and needle in line, line


def test_replay_runs_a_fleet_from_flags_and_writes_its_files(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = cli(
        "replay", "--instances", "3", "--router", "cache-aware", "--agentic-sessions", "12",
        "--out", out, "--quiet", "--report",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((out / "summary.json").read_text())
    assert doc["metrics"]["instances"] == 3 and doc["metrics"]["router"] == "cache-aware"
    assert len(doc["fleet"]["instances"]) == 3
    with open(out / "routing.csv") as f:
        routed = list(csv.DictReader(f))
    with open(out / "requests.csv") as f:
        rids = [r["rid"] for r in csv.DictReader(f)]
    assert Counter(r["rid"] for r in routed) == Counter(rids)
    with open(out / "instances.csv") as f:
        assert [int(r["instance"]) for r in csv.DictReader(f)] == [0, 1, 2]
    assert "fleet: 3 instances" in proc.stdout and "routing imbalance" in proc.stdout
    html = (out / "report.html").read_text()
    assert "<h2>Fleet</h2>" in html and "view wrong" in html


def test_unknown_router_flag_is_one_line() -> None:
    line = error_line(cli("replay", "--instances", "2", "--router", "magic"))
    assert "--router" in line


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--instances", "0"], "--instances: must be >= 1"),
        (["--instances", "2", "--router", "cache-aware", "--router-cache-threshold", "2"],
         "--router-cache-threshold: must be in [0, 1]"),
        (["--instances", "2", "--router-prefix-source", "exact"], "--router-prefix-source"),
        (["--instances", "2", "--executor", "torch-cpu"], "--executor torch-cpu: a fleet"),
    ],
)  # fmt: skip
def test_bad_fleet_flags_are_one_line(flags: list[str], needle: str) -> None:
    line = error_line(cli("replay", *flags, "--agentic-sessions", "3"))
    assert needle in line, line


def test_load_requests_for_a_fleet_list_run_matches_the_stream() -> None:
    cfg = Config(**CFG)
    spec = _spec()
    listed = load_requests(spec, page_size=cfg.resolved_page_size, seed=cfg.seed)
    a = Fleet(_fleet(cfg, 2, "least-load"), listed.requests).run()
    b = _run(cfg, _fleet(cfg, 2, "least-load"), spec)
    assert a.summary["requests"] == b.summary["requests"]
    assert a.summary["ttft_p99_s"] == b.summary["ttft_p99_s"]


def test_a_fleet_of_dp_attention_instances_sees_each_instance_as_one_cache() -> None:
    """Two instances of DP attention 4 (a fleet of DP deployments): the exact view is the
    union of each instance's ranks' caches, so a later turn follows its context there
    (within the instance, SGLang's DP controller still spreads it over the ranks)."""
    cfg = Config(
        **{**CFG, "cp_size": 1, "enable_cp_shared_kv": False}, enable_dp_attention=True, dp_size=4
    )
    res = _run(cfg, _fleet(cfg, 2, "kv-cost"), _spec())
    assert res.summary["completed"] == res.summary["requests"] > 0
    rr = _run(cfg, _fleet(cfg, 2, "round-robin"), _spec())
    assert res.summary["cache_hit_rate"] > rr.summary["cache_hit_rate"]


EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_the_llmd_fleet_example_runs(tmp_path: Path) -> None:
    """examples/fleets/llmd.toml with the deployment its comment gives, on a short llm-d
    workload: 8 instances, the customers' contexts routed to where they are cached."""
    proc = cli(
        "replay", "--fleet", EXAMPLES / "fleets/llmd.toml", "--generator", "llmd",
        "--model-config", EXAMPLES / "fleets/qwen3-32b.json", "--gpu", "h100", "--tp", "2",
        "--mode", "colocated", "--page-size", "64", "--max-total-tokens", "307328",
        "--router", "weighted", "--router-prefix-source", "exact",
        "--llmd-qps-steps", "3", "--llmd-step-s", "10", "--llmd-warmup-s", "20",
        "--out", tmp_path / "run", "-q",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert doc["metrics"]["instances"] == 8
    assert doc["metrics"]["cache_hit_rate"] > 0.3  # 150 contexts computed once each


def test_the_router_sweep_example_is_a_valid_grid() -> None:
    pytest.importorskip("pyarrow")
    from prefillkit.app.sweep.grid import load_grid

    grid = load_grid(EXAMPLES / "sweep_routers.toml")
    assert len(list(grid.points())) == 6


class _NoEvents:
    """prefillkit's scheduler, reporting no KV events (as ``--scheduler sglang``)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def set_kv_listener(self, listener: Any) -> None:
        if listener is not None:
            raise NotImplementedError("this scheduler reports no KV events")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _no_events_factory(settings: Any, dep: Any) -> Any:
    from prefillkit.sched.interface import build_scheduler

    return _NoEvents(build_scheduler(settings.scheduler, dep.total_pages, dep.key_tokens))


def test_a_scheduler_without_kv_events_refuses_an_exact_router_not_an_approximate_one() -> None:
    from prefillkit.sim.sizing import SimConfigError

    cfg = Config(**CFG)
    spec = _spec(num_sessions=6)
    stream = open_workload(spec, page_size=cfg.resolved_page_size, seed=cfg.seed)
    exact = _fleet(cfg, 2, "kv-cost")
    with pytest.raises(SimConfigError, match=r"^--router-prefix-source exact: this scheduler"):
        Fleet(exact, stream.requests, scheduler_factory=_no_events_factory)
    approx = _fleet(cfg, 2, "cache-aware", prefix_source="approximate")
    stream = open_workload(spec, page_size=cfg.resolved_page_size, seed=cfg.seed)
    res = Fleet(approx, stream.requests, scheduler_factory=_no_events_factory).run()
    assert res.summary["completed"] == res.summary["requests"] > 0
    assert res.extra["fleet"]["view"]["checked"] == 0  # no yardstick without events


@pytest.mark.parametrize(
    ("parts", "merged"),
    [
        ([{"admission_passes": 3}, {"admission_passes": 4}], {"admission_passes": 7}),
        ([{"affinity_max_skips_in_pass": 2}, {"affinity_max_skips_in_pass": 5}],
         {"affinity_max_skips_in_pass": 5}),  # a per-pass maximum: the largest
        ([{"a": 1}, {"b": 2}], {"a": 1, "b": 2}),
        ([], {}),
    ],
)  # fmt: skip
def test_merge_counters(parts: list[dict[str, int]], merged: dict[str, int]) -> None:
    from prefillkit.sim.counters import merge_counters

    assert merge_counters(parts) == merged
