"""DP attention inside one instance (``--enable-dp-attention --dp-size N``): the DP
controller's methods, the lockstep forward's cost, the per-rank pools, the engine run
and the command line (docs/dp_attention.md)."""

from __future__ import annotations

import csv
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cli_support import cli_batch
from prefillkit.app.settings import Config
from prefillkit.cost.forward_models import roofline_for_config
from prefillkit.cost.gpus import get_gpu
from prefillkit.cost.protocol import BREAKDOWN_KEYS, dp_breakdown_keys
from prefillkit.cost.roofline import ParallelLayout, ReqShape, RooflineCostModel
from prefillkit.models import get_model
from prefillkit.request import Request
from prefillkit.sched.interface import StepOutput
from prefillkit.sim.dp_attention import (
    REFRESH_S,
    DpAttentionScheduler,
    DpController,
    assign_rank,
    bootstrap_room,
    split_by_rank,
)
from prefillkit.sim.engine import Engine
from prefillkit.sim.sizing import attention_params, resolve_deployment, weights_per_gpu

GLM5 = get_model("glm-5")
DSV3 = get_model("deepseek-v3")
H200 = get_gpu("h200")
#: A launch line of GLM-5 on 8 x H200 as a PD prefill server, page 64.
GLM5_LINE = [
    "--model-path", "zai-org/GLM-5-FP8", "--tp", "8", "--disaggregation-mode", "prefill",
    "--page-size", "64",
]  # fmt: skip


def cfg(**kw: object) -> Config:
    base: dict[str, object] = {"tp_size": 8, "max_total_tokens": 400_000}
    base.update(kw)
    return Config(**base)  # type: ignore[arg-type]


def tok_req(rid: str, n: int, t: float = 0.0, base: int = 0, out: int = 4) -> Request:
    tokens = list(range(base, base + n))
    return Request.from_tokens(rid, tokens, page_size=1, arrival_time=t, max_new_tokens=out)


# ------------------------------------------------------------------ the DP controller


@pytest.mark.parametrize(
    ("method", "requests", "tokens", "counter", "room", "rank"),
    [
        ("round_robin", [9, 0, 0, 0], [0, 0, 0, 0], 0, 7, 0),  # loads do not matter
        ("round_robin", [0, 0, 0, 0], [0, 0, 0, 0], 6, 7, 2),  # counter mod N
        ("follow_bootstrap_room", [0, 0, 0, 0], [0, 0, 0, 0], 5, 7, 3),  # room mod N
        ("follow_bootstrap_room", [0, 0, 0], [0, 0, 0], 0, 2**62 + 1, (2**62 + 1) % 3),
        ("total_requests", [3, 1, 1, 2], [0, 90, 10, 0], 0, 0, 1),  # fewest, first on a tie
        ("total_requests", [0, 0], [5, 0], 1, 1, 0),
        ("total_tokens", [3, 1, 1, 2], [50, 90, 10, 10], 0, 0, 2),  # tie: fewer requests
        ("total_tokens", [1, 1, 0], [10, 10, 10], 0, 0, 2),
        ("total_tokens", [1, 1, 1], [10, 10, 10], 0, 0, 0),  # full tie: the lower rank
    ],
)
def test_assign_rank_table(
    method: str, requests: list[int], tokens: list[int], counter: int, room: int, rank: int
) -> None:
    assert assign_rank(method, requests, tokens, counter, room) == rank


def test_assign_rank_refuses_unresolved_auto() -> None:
    with pytest.raises(ValueError, match="unknown load balance method 'auto'"):
        assign_rank("auto", [0], [0], 0, 0)


def test_auto_resolves_as_sglang_does() -> None:
    assert cfg(mode="pd-prefill").sim_settings().resolved_load_balance_method == (
        "follow_bootstrap_room"
    )
    assert cfg(mode="colocated").sim_settings().resolved_load_balance_method == "round_robin"
    sim = cfg(load_balance_method="total_tokens").sim_settings()
    assert sim.resolved_load_balance_method == "total_tokens"


def test_bootstrap_room_is_a_stable_hash_of_the_id() -> None:
    assert bootstrap_room("L5") == bootstrap_room("L5") != bootstrap_room("L6")
    assert 0 <= bootstrap_room("x") < 2**64


def test_the_load_budget_refreshes_every_20_ms_and_counts_its_own_picks() -> None:
    ctl = DpController("total_requests", 2)
    picks = [ctl.route(tok_req(f"r{i}", 10), 0.0, [0, 0], [0, 0]) for i in range(3)]
    assert picks == [0, 1, 0]  # one snapshot, then +1 per pick (SGLang's DPBudget)
    assert ctl.route(tok_req("r3", 10), REFRESH_S / 2, [0, 0], [0, 0]) == 1  # still stale
    assert ctl.requests == [2, 2]
    assert ctl.route(tok_req("r4", 10), REFRESH_S, [5, 0], [0, 0]) == 1  # refreshed
    tok = DpController("total_tokens", 2)
    sizes = (9, 3, 4)
    picks = [tok.route(tok_req(f"t{i}", n), 0.0, [0, 0], [0, 0]) for i, n in enumerate(sizes)]
    assert picks == [0, 1, 1]  # fewest tokens: 0 (a tie), then 1 (0 < 9), then 1 (3 < 9)
    assert tok.tokens == [9, 7]


def test_split_by_rank() -> None:
    assert split_by_rank("abcde", (2, 0, 3)) == [["a", "b"], [], ["c", "d", "e"]]
    with pytest.raises(ValueError):
        split_by_rank("abc", (1, 1))


# ------------------------------------------------------------------ the lockstep forward


def _layouts() -> list[tuple[Any, Any, ParallelLayout]]:
    return [
        (GLM5, H200, ParallelLayout(8, dp_size=4, ep_size=8)),
        (GLM5, H200, ParallelLayout(8, cp_size=2, dp_size=2, ep_size=1)),
        (DSV3, H200, ParallelLayout(8, dp_size=8, ep_size=8, two_batch_overlap=True)),
        (DSV3, get_gpu("h800"), ParallelLayout(32, dp_size=32, ep_size=32)),
    ]


def test_lockstep_of_equal_ranks_is_todays_breakdown() -> None:
    """Every rank running the same batch gives ``breakdown``'s terms exactly, and each
    ``dp_rank<i>`` is the attention side of that breakdown."""
    rng = random.Random(3)
    for model, gpu, layout in _layouts():
        cm = RooflineCostModel(
            model, gpu, layout.num_gpus, layout=layout, page_size=64, dp_lockstep=True
        )
        assert cm.breakdown_keys == dp_breakdown_keys(layout.dp_size)
        for _ in range(40):
            batch = [
                ReqShape(p, rng.randrange(1, 9000), rng.randrange(0, p + 1) // 2)
                for p in (rng.randrange(0, 70_000) for _ in range(rng.randrange(1, 4)))
            ]
            plain = cm.breakdown(batch)
            lock = cm.breakdown_dp([batch] * layout.dp_size)
            assert {k: lock[k] for k in BREAKDOWN_KEYS} == plain
            side = plain["linear"] + plain["attention"] + plain["indexer"] + plain["elementwise"]
            for i in range(layout.dp_size):
                assert lock[f"dp_rank{i}"] == pytest.approx(side)
            assert set(lock) == set(cm.breakdown_keys)


def test_one_dp_rank_is_unchanged() -> None:
    sim = cfg().sim_settings()
    cm = roofline_for_config(sim, 8)
    assert cm.layout.dp_size == 1 and cm.breakdown_keys == BREAKDOWN_KEYS
    batch = [ReqShape(4096, 2048), ReqShape(0, 1000)]
    lock = cm.breakdown_dp([batch])
    assert {k: lock[k] for k in BREAKDOWN_KEYS} == cm.breakdown(batch)
    with pytest.raises(ValueError, match="2 batches for 1 DP ranks"):
        cm.breakdown_dp([batch, batch])


def test_lockstep_cost_at_one_hand_computed_point() -> None:
    """DeepSeek-V3 on 8 x H200, DP attention 2 (attention TP 4), EP 8: rank 0 runs a
    4,096-token prompt, rank 1 a 1,024-token one, both without a prefix (the MHA form).
    The slowest rank is rank 0; the experts and the EP dispatch run both ranks' 5,120
    tokens; per-request time is one rank's one request."""
    layout = ParallelLayout(8, dp_size=2, ep_size=8)
    cm = RooflineCostModel(DSV3, H200, 8, layout=layout, dp_lockstep=True)
    a = cm.mha_attention_coefficient
    side = [
        cm.linear_time(n) + a * n * (n + 1) / 2 + cm.elementwise_per_row * n for n in (4096, 1024)
    ]
    experts = cm.moe_expert_time(5120)
    comm = cm.moe_comm_time(4096, 5120)
    total = side[0] + experts + comm + cm.tp_comm_time(4096) + cm.per_request_s + cm.per_forward_s
    bd = cm.breakdown_dp([[ReqShape(0, 4096)], [ReqShape(0, 1024)]])
    assert bd["dp_rank0"] == pytest.approx(side[0]) and bd["dp_rank1"] == pytest.approx(side[1])
    assert bd["moe_experts"] == pytest.approx(experts)
    assert bd["moe_comm_exposed"] == pytest.approx(comm)
    assert bd["total"] == pytest.approx(total)
    # An idle rank still waits for the busy one: the same forward as with rank 1's batch,
    # less its experts' share and nothing of its own.
    idle = cm.breakdown_dp([[ReqShape(0, 4096)], []])
    assert idle["dp_rank1"] == 0.0 and idle["dp_rank0"] == pytest.approx(side[0])
    assert idle["total"] == pytest.approx(
        side[0] + cm.moe_expert_time(4096) + cm.moe_comm_time(4096, 4096)
        + cm.tp_comm_time(4096) + cm.per_request_s + cm.per_forward_s
    )  # fmt: skip
    assert cm.breakdown_dp([[], []]) == dict.fromkeys(cm.breakdown_keys, 0.0)


# ------------------------------------------------------------------ settings and sizing


def test_per_rank_scheduler_config_follows_sglang() -> None:
    sim = cfg(
        enable_dp_attention=True,
        dp_size=4,
        chunked_prefill_size=8192,
        max_running_requests=10,
        schedule_conservativeness=1.0,
    ).sim_settings()
    rank = sim.dp_rank_scheduler()
    assert rank.chunked_prefill_size == 2048  # 8192 // 4
    assert rank.max_running_requests == 2  # 10 // 4
    assert rank.schedule_conservativeness == pytest.approx(0.3)
    assert sim.attn_dp_size == 4 and sim.attn_tp_size == 2
    plain = cfg(dp_size=1, enable_dp_attention=True).sim_settings()
    assert plain.attn_dp_size == 1 and plain.dp_rank_scheduler() is plain.scheduler


def test_attention_weights_by_hand() -> None:
    # DeepSeek-V3, per layer: q_b_proj 1536 x 128 x 192, kv_b_proj 512 x 128 x (128 + 128),
    # o_proj 128 x 128 x 7168 (the replicated fused_qkv_a_proj is on every GPU anyway).
    per_layer = 1536 * 128 * 192 + 512 * 128 * 256 + 128 * 128 * 7168
    assert attention_params(DSV3) == per_layer * 61
    dp = cfg(model="deepseek-v3", enable_dp_attention=True, dp_size=8).sim_settings()
    assert weights_per_gpu(dp) == pytest.approx(
        DSV3.weight_bytes / 8 + per_layer * 61 * 1.0 * (1 / 1 - 1 / 8)
    )
    assert weights_per_gpu(cfg(model="deepseek-v3").sim_settings()) == DSV3.weight_bytes / 8


def test_each_rank_gets_one_gpus_pool() -> None:
    """MLA: a rank's pool is the tokens one GPU's memory holds after its (larger) weights;
    GQA: KV heads split over attention TP = tp / dp."""
    plain = cfg(model="deepseek-v3", max_total_tokens=None).sim_settings()
    dp = cfg(model="deepseek-v3", max_total_tokens=None, enable_dp_attention=True, dp_size=8)
    sim = dp.sim_settings()
    dep = resolve_deployment(sim, [])
    assert dep.dp_size == 8
    assert dep.total_pages == sim.total_pages(weights_per_gpu(sim), H200.memory_bytes / 1e9)
    assert dep.total_pages < resolve_deployment(plain, []).total_pages  # weights replicated
    out = dep.as_dict(1)
    assert out["dp_size"] == 8 and out["kv_pool_tokens_all_ranks"] == 8 * dep.total_pages
    assert "dp_size" not in resolve_deployment(plain, []).as_dict(1)
    llama = cfg(model="llama-3.1-8b", enable_dp_attention=True, dp_size=4).sim_settings()
    full = llama.resolved_kv_bytes_per_token
    assert llama.kv_bytes_per_token_per_rank == full * 4 / 8  # 8 KV heads over attn TP 2
    capped = resolve_deployment(cfg(enable_dp_attention=True, dp_size=4).sim_settings(), [])
    assert capped.total_pages == 400_000  # --max-total-tokens caps each rank's pool


# ------------------------------------------------------------------ the engine


def _engine(reqs: list[Request], **kw: object) -> Engine:
    settings = cfg(model="deepseek-v3", enable_dp_attention=True, dp_size=2, **kw)
    return Engine(settings.sim_settings(), reqs)


def test_an_idle_rank_waits_for_the_slowest_rank() -> None:
    """Round robin puts the long prompt on rank 0 and the short one on rank 1: both get
    their first token when the one lockstep forward ends, priced by breakdown_dp."""
    reqs = [tok_req("long", 8000), tok_req("short", 100, base=10**6)]
    eng = _engine(reqs, load_balance_method="round_robin", chunked_prefill_size=-1)
    res = eng.run()
    assert isinstance(eng.sched, DpAttentionScheduler)
    (batch,) = res.batches
    cost = eng.cost
    assert isinstance(cost, RooflineCostModel)
    shapes = [[ReqShape(0, 8000)], [ReqShape(0, 100)]]
    assert batch.duration_s == pytest.approx(cost.breakdown_dp(shapes)["total"])
    long, short = res.requests
    assert long.metrics.first_token_time == short.metrics.first_token_time == batch.duration_s
    assert batch.duration_s > 3 * cost.breakdown_dp([[], [ReqShape(0, 100)]])["total"]
    assert res.summary["dp_rank0_requests"] == res.summary["dp_rank1_requests"] == 1
    assert res.summary["dp_idle_rank_forwards"] == 0


def _spy(eng: Engine) -> list[tuple[StepOutput, list[int | None]]]:
    """Every step the engine's DP scheduler returns, with each request's rank then."""
    sched = eng.sched
    assert isinstance(sched, DpAttentionScheduler)
    seen: list[tuple[StepOutput, list[int | None]]] = []
    schedule: Callable[[float], StepOutput] = sched.schedule

    def spy(now: float) -> StepOutput:
        step = schedule(now)
        seen.append((step, [sched.rank_of(s.rid) for s in step.reqs]))
        return step

    sched.schedule = spy  # type: ignore[method-assign]
    return seen


@pytest.mark.parametrize("mode", ["pd-prefill", "colocated"])
def test_each_rank_keeps_its_requests(mode: str) -> None:
    rng = random.Random(1)
    reqs = [
        tok_req(f"r{i}", rng.randrange(200, 6000), t=i * 0.05, base=rng.randrange(4) * 10**6)
        for i in range(60)
    ]
    eng = _engine(reqs, mode=mode, chunked_prefill_size=2048, debug_check_invariants=True)
    seen = _spy(eng)
    res = eng.run()
    assert res.summary["completed"] == 60
    ranks: dict[str, int] = {}
    for step, at in seen:
        if not step.reqs:
            continue
        groups = split_by_rank(list(zip(step.reqs, at, strict=True)), step.dp_rank_sizes)
        for rank, group in enumerate(groups):
            for s, r in group:
                assert r == rank and ranks.setdefault(s.rid, rank) == rank
    assert len(ranks) == 60 and set(ranks.values()) == {0, 1}
    assert res.summary["dp_rank0_requests"] + res.summary["dp_rank1_requests"] == 60
    if mode == "colocated":
        assert len(res.extra["decode_steps"]) > 0


def test_the_controller_reads_what_each_rank_holds() -> None:
    """``total_requests``: a rank's load is its requests waiting or running; a PD
    prefill's request in KV transfer no longer counts (SGLang's inflight queue)."""
    sim = cfg(enable_dp_attention=True, dp_size=2, load_balance_method="total_requests")
    eng = Engine(sim.sim_settings(), [])
    sched = eng.sched
    assert isinstance(sched, DpAttentionScheduler)
    first = [tok_req(f"a{i}", 500, base=i * 10**6) for i in range(3)]
    for req in first:
        assert sched.add_request(req) is None
    assert [sched.rank_of(r.rid) for r in first] == [0, 1, 0]
    step = sched.schedule(0.0)
    assert step.dp_rank_sizes == (2, 1)
    for req in sched.forward_done(step, 1.0):
        sched.begin_transfer(req)
    late = [tok_req(f"b{i}", 500, t=1.0, base=(5 + i) * 10**6) for i in range(2)]
    for req in late:
        sched.add_request(req)
    assert [sched.rank_of(r.rid) for r in late] == [0, 1]  # both ranks empty again
    counters = sched.counters()
    assert counters["dp_rank0_requests"] == 3 and counters["dp_rank1_requests"] == 2
    assert counters["dp_rank0_batches"] == counters["dp_rank1_batches"] == 1
    assert counters["admission_passes"] == 2  # summed over the ranks


def test_what_cannot_run_dp_attention_is_refused_with_one_line() -> None:
    from prefillkit.cost.linear import LinearCostModel
    from prefillkit.sim.sizing import SimConfigError

    sim = cfg(enable_dp_attention=True, dp_size=2).sim_settings()
    with pytest.raises(SimConfigError, match=r"^--enable-dp-attention: the LinearCostModel"):
        Engine(sim, [], cost=LinearCostModel())
    with pytest.raises(SimConfigError, match=r"^--enable-dp-attention: .*not with another"):
        Engine(sim, [], scheduler_factory=lambda c, d: Engine(cfg().sim_settings(), []).sched)


# ------------------------------------------------------------------ the command line


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_replay_with_dp_attention_end_to_end(tmp_path: Path) -> None:
    """``--enable-dp-attention --dp 4`` on the built-in workload: per-rank columns in
    batches.csv, every forward as long as its slowest rank, the same bytes twice."""
    line = [*GLM5_LINE, "--enable-dp-attention", "--dp", "4", "--quiet"]
    runs = cli_batch(
        [["replay", *line, "--out", str(tmp_path / name)] for name in ("a", "b")]
        + [["replay", *GLM5_LINE, "--quiet", "--out", str(tmp_path / "one")]],
        timeout=300,
    )
    assert [r["code"] for r in runs] == [0, 0, 0], runs
    rows = _rows(tmp_path / "a" / "batches.csv")
    ranks = [f"t_dp_rank{i}_s" for i in range(4)]
    assert set(ranks) <= set(rows[0]) and "t_dp_rank4_s" not in rows[0]
    assert not any(k.startswith("t_dp_") for k in _rows(tmp_path / "one" / "batches.csv")[0])
    idle = 0
    for row in rows:
        sides = [float(row[k]) for k in ranks]
        terms = [float(v) for k, v in row.items() if k.startswith("t_") and k not in ranks]
        assert float(row["duration_s"]) == pytest.approx(sum(terms))
        assert float(row["duration_s"]) >= max(sides)
        idle += sides.count(0.0)
    assert idle > 0  # some forwards ran with an idle rank, which waited for the others
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    metrics = summary["metrics"]
    assert sum(metrics[f"dp_rank{i}_requests"] for i in range(4)) == metrics["requests"]
    assert metrics["completed"] == metrics["requests"]
    assert summary["deployment"]["dp_size"] == 4
    for name in ("requests.csv", "batches.csv"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


@pytest.mark.parametrize(
    ("flags", "text"),
    [
        (["--dp", "4"], "--dp-size 4 without --enable-dp-attention is 4 full replicas"),
        (
            ["--enable-dp-attention", "--dp", "3"],
            "--dp-size 3 x --cp-size 1 must divide --tp-size 8",
        ),
        (["--enable-dp-attention", "--dp", "2", "--cost-model", "aic"], "--enable-dp-attention"),
        (
            ["--enable-dp-attention", "--dp", "4", "--chunked-prefill-size", "4160"],
            "--chunked-prefill-size 4160 // --dp-size 4 = 1040 tokens per DP attention rank",
        ),
        (["--load-balance-method", "random"], "--load-balance-method must be one of auto"),
        (["--attn-dp-size", "0"], "--attn-dp-size: must be positive"),
    ],
)
def test_bad_dp_flags_exit_2_with_one_line(flags: list[str], text: str) -> None:
    (res,) = cli_batch([["replay", *GLM5_LINE, *flags, "--max-requests", "3", "-q"]], timeout=120)
    assert res["code"] == 2, res
    lines = res["stderr"].strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("prefillkit: error: "), res["stderr"]
    assert text in lines[0], lines[0]


def test_dp_flags_are_a_deployment_line_and_drop_a_presets_cp() -> None:
    """``--enable-dp-attention --dp 4`` alone is a deployment line (SGLang's defaults:
    TP 1, which 4 ranks cannot split); under ``--preset demo`` the preset's CP 8, which
    TP 8 cannot hold beside 4 DP ranks, is dropped as any contradicted preset value is."""
    alone, demo = cli_batch(
        [
            ["replay", "--enable-dp-attention", "--dp", "4", "-q"],
            ["replay", "--preset", "demo", "--enable-dp-attention", "--dp", "4", "-q",
             "--agentic-sessions", "4", "--json"],
        ],
        timeout=120,
    )  # fmt: skip
    assert alone["code"] == 2
    assert "--dp-size 4 x --cp-size 1 must divide --tp-size 1" in alone["stderr"]
    assert demo["code"] == 0, demo["stderr"]
    assert '"dp_size": 4' in demo["stdout"]
