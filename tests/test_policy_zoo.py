"""The policy zoo in the scheduler and from the command line (docs/policies.md)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from prefillkit.request import SESSION, SessionTurn
from prefillkit.sched.buffer import ReqShape
from prefillkit.sched.scheduler import Scheduler
from test_cli import assert_one_line_error, run_cli
from test_scheduler import make_sched, mk, rids, seq, warm_cache

H = seq(3, 256)  # a prefix that will sit on the host tier only


def host_only_sched(**kw: object) -> Scheduler:
    s = make_sched(512, host_pages=1024, enable_hierarchical_cache=True, **kw)
    warm_cache(s.state.cache, H)  # written through to host
    s.state.cache.evict_tokens(10**6)  # host only now
    return s


def test_loadback_aware_defers_a_loadback_only_request_for_the_idle_delay() -> None:
    s = host_only_sched(schedule_policy="loadback-aware")
    lb = mk("lb", [*H, *seq(4, 8)], 9.0)  # 256 of 264 tokens on host; 1 s old
    s.add_request(lb)
    st = s.state
    assert st.policy is not None
    st.policy.decode_busy_at = 10.0  # decode stopped at 10 s
    step = s.schedule(10.01)
    assert not step.reqs and step.wake_at == pytest.approx(10.03)
    step = s.schedule(10.03)  # the wake-up pass: idle for 30 ms
    assert rids(step.reqs) == ["lb"]
    assert s.counters()["policy_skips"] == 1


def test_loadback_aware_admits_others_past_a_deferred_loadback() -> None:
    s = host_only_sched(schedule_policy="loadback-aware")
    s.add_request(mk("lb", [*H, *seq(4, 8)], 0.0))
    s.add_request(mk("plain", seq(5, 40), 0.0))
    s.state.policy.decode_busy_at = 1.0  # type: ignore[union-attr]
    step = s.schedule(1.0)
    assert rids(step.reqs) == ["plain"]
    assert rids(s.state.waiting) == ["lb"]


def slow_estimate(shapes: Sequence[ReqShape]) -> float:
    """1 s a forward plus 10 ms a computed token."""
    return 1.0 + 0.01 * sum(s.extend_len for s in shapes) if shapes else 0.0


def test_cost_aware_lets_light_requests_ride_and_a_heavy_one_wait() -> None:
    s = make_sched(1024, schedule_policy="cost-aware", max_prefill_tokens=500)
    s.state.policy.set_estimate(slow_estimate)  # type: ignore[union-attr]
    for i in range(3):
        s.add_request(mk(f"light{i}", seq(10 + i, 8), 0.1 * i))
    s.add_request(mk("heavy", seq(20, 400), 0.05))
    step = s.schedule(1.0)
    # earliest deadline first; the heavy one (m = 4 s, solo 5 s, 400 of the 500-token
    # budget: room 0.2) behind three light ones: 12 s > 1 + 3 x 0.2 x 4 s: it waits
    assert rids(step.reqs) == ["light0", "light1", "light2"]
    assert rids(s.state.waiting) == ["heavy"]


def test_cost_aware_defers_a_heavy_request_until_its_deadline() -> None:
    s = make_sched(1024, schedule_policy="cost-aware", cost_aware_max_wait_s=2.0,
                   max_prefill_tokens=500)  # fmt: skip
    s.state.policy.set_estimate(slow_estimate)  # type: ignore[union-attr]
    s.add_request(mk("light", seq(10, 8), 0.0))
    s.add_request(mk("heavy", seq(20, 400), 0.5))
    # deadlines: light 0 + 2 x 1.08 s = 2.16 s, heavy 0.5 + min(2 x 5 s, 2 s) = 2.5 s;
    # behind light, heavy waits: 4 s > 1 s + 1 x 0.2 x 4 s
    step = s.schedule(1.0)
    assert rids(step.reqs) == ["light"] and rids(s.state.waiting) == ["heavy"]
    assert s.counters()["policy_skips"] == 1


def test_cost_aware_admits_a_request_past_its_deadline() -> None:
    s = make_sched(1024, schedule_policy="cost-aware", cost_aware_max_wait_s=2.0,
                   max_prefill_tokens=500)  # fmt: skip
    s.state.policy.set_estimate(slow_estimate)  # type: ignore[union-attr]
    s.add_request(mk("light", seq(10, 8), 0.0))
    s.add_request(mk("heavy", seq(20, 400), 0.5))
    step = s.schedule(3.0)  # both past their deadlines
    assert rids(step.reqs) == ["light", "heavy"]


def test_session_affinity_promotes_a_recent_sessions_warm_continuation() -> None:
    s = make_sched(4096, schedule_policy="session-affinity", max_running_requests=1)
    shared = seq(30, 320)
    first = mk("a0", [*shared, *seq(31, 8)], 0.0)
    first.extra[SESSION] = SessionTurn("a", 0, 0.0, False)
    s.add_request(first)
    step = s.schedule(1.0)  # a0 runs alone (one slot) and stamps session a at 1 s
    rt = s.state.policy
    assert rt is not None and rt.last_scheduled == {"a": 1.0}
    s.forward_done(step, 2.0)
    s.finish(first, 2.0)  # its prompt is cached now
    s.add_request(mk("x", seq(40, 64), 2.1))  # the FCFS head, another (no) session
    nxt = mk("a1", [*shared, *seq(32, 8)], 2.2)
    nxt.extra[SESSION] = SessionTurn("a", 1, 0.1, False)
    s.add_request(nxt)
    step = s.schedule(3.0)  # a1 is promoted over the head: 320 tokens cached, a recent
    assert rids(step.reqs) == ["a1"]


@pytest.mark.parametrize(
    ("flags", "msg"),
    [
        (["--lpm-aging-tokens-per-pass", "64"], "--lpm-aging-tokens-per-pass"),
        (["--affinity-hold"], "--affinity-hold"),
        (["--enable-affinity", "--affinity-classify", "size"], "--affinity-classify"),
        (["--schedule-policy", "cost-aware", "--cost-aware-max-wait-s", "-1"], "--cost-aware"),
        (["--schedule-policy", "waiting-qos", "--waiting-qos-window", "0"], "--waiting-qos"),
        (["--schedule-policy", "sjf"], "--schedule-policy"),
    ],
)
def test_bad_zoo_flags_are_one_line(flags: list[str], msg: str) -> None:
    r = run_cli("replay", "--max-requests", "5", *flags)
    assert_one_line_error(r, msg)


ZOO = [
    [
        "--schedule-policy",
        "lpm",
        "--lpm-aging-tokens-per-pass",
        "4096",
        "--schedule-max-wait-s",
        "-1",
    ],
    ["--schedule-policy", "residual-sjf"],
    ["--schedule-policy", "waiting-qos"],
    ["--schedule-policy", "session-affinity"],
    ["--schedule-policy", "loadback-aware"],
    ["--schedule-policy", "cost-aware"],
    ["--enable-affinity", "--affinity-hold"],
    ["--enable-affinity", "--affinity-classify", "cost"],
]


@pytest.mark.parametrize("flags", ZOO, ids=lambda f: "-".join(x.strip("-") for x in f[:4]))
def test_every_zoo_policy_runs_end_to_end_and_deterministically(
    flags: list[str], tmp_path: Path
) -> None:
    common = ["replay", "--generator", "seed", "--agentic-sessions", "12", "--quiet"]
    outs = []
    for k in range(2):
        out = tmp_path / f"run{k}"
        r = run_cli(*common, *flags, "--out", str(out), timeout=120)
        assert r.returncode == 0, r.stderr
        outs.append(out)
    doc = json.loads((outs[0] / "summary.json").read_text())
    assert doc["metrics"]["stuck"] == 0
    assert "policy_skips" in doc["metrics"]
    for name in ("requests.csv", "batches.csv"):
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes()


@pytest.mark.parametrize(
    ("kw", "flag"),
    [
        ({"schedule_policy": "cost-aware"}, "--schedule-policy cost-aware"),
        ({"schedule_policy": "lpm", "lpm_aging_tokens_per_pass": 8}, "--lpm-aging-tokens-per-pass"),
        ({"enable_affinity": True, "affinity_hold": True}, "--affinity-hold"),
        ({"enable_affinity": True, "affinity_classify": "cost"}, "--affinity-classify cost"),
    ],
)
def test_sglang_scheduler_refuses_the_zoo_in_one_line(kw: dict[str, object], flag: str) -> None:
    from prefillkit.app.settings import Config
    from prefillkit.integrations.sglang.replay_limits import refusal

    settings = Config(mode="pd-prefill", **kw).sim_settings()  # type: ignore[arg-type]
    line = refusal(settings, "sglang")
    assert line is not None and line.startswith(flag) and "docs/policies.md" in line
    plain = Config(mode="pd-prefill", schedule_policy="lpm").sim_settings()
    assert refusal(plain, "sglang") is None
