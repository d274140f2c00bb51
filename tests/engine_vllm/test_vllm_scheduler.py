"""prefillkit's vLLM scheduler class against vLLM 0.34's real v1 scheduler, on CPU
(docs/vllm.md; run by .ci/vllm_tests.sh in a virtual environment of its own)."""

from __future__ import annotations

import pytest

from prefillkit.integrations.vllm import MissingExtraError

try:
    from prefillkit.integrations.vllm.scheduler import CacheAwareScheduler
except MissingExtraError as err:
    pytest.skip(str(err), allow_module_level=True)

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm_twins import (
    Spec,
    build,
    drive,
    make_request,
    random_stream,
    runner_output,
    summary,
)

from prefillkit.integrations.vllm.order import order_views

CLS = "prefillkit.integrations.vllm.scheduler.CacheAwareScheduler"


def test_the_class_loads_through_scheduler_cls() -> None:
    s = build(AsyncScheduler, scheduler_cls=CLS)
    assert type(s) is CacheAwareScheduler and isinstance(s, AsyncScheduler)
    assert s.prefillkit.policy == "fcfs" and not s._prefillkit_on


@pytest.mark.parametrize(
    "shape",
    [
        {},  # plenty of memory, a 512-token step budget: chunked prefill
        {"max_num_batched_tokens": 128},  # long prompts chunk over several steps
        {"num_blocks": 48, "max_num_seqs": 8},  # a small pool: preemption
    ],
    ids=["chunked", "small-budget", "preemption"],
)
@pytest.mark.parametrize("seed", range(6))
def test_policy_off_is_stock_vllm_step_for_step(
    shape: dict[str, int], seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PREFILLKIT_VLLM_POLICY", raising=False)
    stream = random_stream(seed)
    stock = list(drive(build(AsyncScheduler, **shape), stream))
    ours = list(drive(build(CacheAwareScheduler, **shape), stream))
    assert len(ours) == len(stock)
    for (k, a), (_, b) in zip(stock, ours, strict=True):
        assert summary(a) == summary(b), k
    if "num_blocks" in shape:
        assert any(out.preempted_req_ids for _, out in stock)  # the case is exercised


POLICIES = ["lpm", "residual-sjf", "waiting-qos", "session-affinity", "cost-aware"]


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("seed", range(4))
def test_each_policy_admits_in_its_pure_functions_order(
    policy: str, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PREFILLKIT_VLLM_POLICY", policy)
    monkeypatch.setenv("PREFILLKIT_VLLM_MAX_WAIT_S", "6")
    s = build(CacheAwareScheduler, max_num_seqs=4)
    clock = [0.0]
    s.prefillkit_clock = lambda: clock[0]
    stream = random_stream(seed)
    reordered = 0
    steps = drive(s, stream, clock=clock)
    for _k, out in steps:
        new = [r.req_id for r in out.scheduled_new_reqs]
        order = s.prefillkit_last_order
        if not new or not order:
            continue
        # vLLM admitted new requests in the policy's order: a prefix of it, in order
        # (the queue's plain requests all precede nothing else here: none is preempted
        # with the default pool).
        fresh = [rid for rid in order if rid in set(new)]
        assert fresh == [rid for rid in new if rid in set(order)]
        assert new[: len(fresh)] == order[: len(fresh)]
        reordered += 1
    assert reordered > 0


def test_views_and_the_pure_order_agree_on_a_hand_built_queue(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PREFILLKIT_VLLM_POLICY", "lpm")
    s = build(CacheAwareScheduler, max_num_seqs=1)
    s.prefillkit_clock = lambda: 0.0
    shared = tuple(range(10, 10 + 160))
    s.add_request(make_request(Spec("warmer", shared + (5,) * 8, 1, 0, 0.0)))
    while s.get_num_unfinished_requests():  # computes and caches the shared prefix
        out = s.schedule()
        s.update_from_output(out, runner_output(out))
    s.add_request(make_request(Spec("cold", tuple(range(500, 600)), 1, 1, 0.1)))
    s.add_request(make_request(Spec("hit", shared + (6,) * 8, 1, 1, 0.2)))
    views = [s._prefillkit_view(r, i, 0.0) for i, r in enumerate(s.waiting)]
    assert [v.device_tokens for v in views] == [0, 160]  # vLLM's own probe
    assert order_views(views, s.prefillkit, 0.0, {}, 16) == [1, 0]
    out = s.schedule()
    assert s.prefillkit_last_order == ["hit", "cold"]
    assert [r.req_id for r in out.scheduled_new_reqs] == ["hit"]  # one slot


def test_the_affinity_gate_withholds_cold_requests_behind_a_warm_lead(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PREFILLKIT_VLLM_AFFINITY", "1")
    s = build(CacheAwareScheduler)
    s.prefillkit_clock = lambda: 1.0
    shared = tuple(range(10, 10 + 160))
    s.add_request(make_request(Spec("warmer", shared + (5,) * 8, 1, 0, 0.0)))
    while s.get_num_unfinished_requests():
        out = s.schedule()
        s.update_from_output(out, runner_output(out))
    for spec in (
        Spec("warm1", shared + (6,) * 8, 1, 1, 0.1),
        Spec("cold", tuple(range(500, 600)), 1, 1, 0.2),
        Spec("warm2", shared + (7,) * 8, 1, 1, 0.3),
    ):
        s.add_request(make_request(spec))
    out = s.schedule()
    assert [r.req_id for r in out.scheduled_new_reqs] == ["warm1", "warm2"]
    assert s.prefillkit_last_withheld == ["cold"]
    assert [r.request_id for r in s.waiting] == ["cold"] and s._prefillkit_defers == {"cold": 1}
    s.update_from_output(out, runner_output(out))
    out = s.schedule()  # no warm request waits: the cold one leads its own step
    assert [r.req_id for r in out.scheduled_new_reqs] == ["cold"]


def test_the_affinity_gate_never_admits_a_withheld_request_and_starves_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PREFILLKIT_VLLM_AFFINITY", "1")
    withheld_steps = 0
    for seed in range(4):
        s = build(CacheAwareScheduler, max_num_seqs=4)
        clock = [0.0]
        s.prefillkit_clock = lambda clock=clock: clock[0]
        for _k, out in drive(s, random_stream(seed), clock=clock):  # finishes: none starves
            new = {r.req_id for r in out.scheduled_new_reqs}
            assert not new & set(s.prefillkit_last_withheld)
            withheld_steps += bool(s.prefillkit_last_withheld)
            s.prefillkit_last_withheld = []
    assert withheld_steps > 0  # the gate acted in these streams
