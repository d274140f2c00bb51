"""The vLLM scheduler class's settings and orders, without vLLM
(prefillkit/integrations/vllm/order.py; the class itself: tests/engine_vllm)."""

from __future__ import annotations

import pytest

from prefillkit.integrations.vllm.order import (
    POLICIES,
    SettingError,
    order_views,
    settings_from_env,
)
from prefillkit.sched.policy_view import CandidateView


def test_defaults_change_nothing() -> None:
    s = settings_from_env({})
    assert (s.policy, s.window, s.max_wait_s, s.lpm_aging_tokens_per_pass) == ("fcfs", 0, 5.0, 0)
    assert not s.active


def test_settings_are_read() -> None:
    s = settings_from_env(
        {
            "PREFILLKIT_VLLM_POLICY": "lpm",
            "PREFILLKIT_VLLM_WINDOW": "32",
            "PREFILLKIT_VLLM_MAX_WAIT_S": "-1",
            "PREFILLKIT_VLLM_LPM_AGING_TOKENS": "512",
        }
    )
    assert (s.policy, s.window, s.max_wait_s, s.lpm_aging_tokens_per_pass) == ("lpm", 32, None, 512)
    assert s.active


@pytest.mark.parametrize(
    ("env", "name"),
    [
        ({"PREFILLKIT_VLLM_POLICY": "sjf"}, "PREFILLKIT_VLLM_POLICY"),
        ({"PREFILLKIT_VLLM_WINDOW": "-2"}, "PREFILLKIT_VLLM_WINDOW"),
        ({"PREFILLKIT_VLLM_WINDOW": "many"}, "PREFILLKIT_VLLM_WINDOW"),
        ({"PREFILLKIT_VLLM_MAX_WAIT_S": "-3"}, "PREFILLKIT_VLLM_MAX_WAIT_S"),
        ({"PREFILLKIT_VLLM_MAX_WAIT_S": "inf"}, "PREFILLKIT_VLLM_MAX_WAIT_S"),
        ({"PREFILLKIT_VLLM_LPM_AGING_TOKENS": "-1"}, "PREFILLKIT_VLLM_LPM_AGING_TOKENS"),
    ],
)
def test_bad_settings_name_their_variable(env: dict[str, str], name: str) -> None:
    with pytest.raises(SettingError) as err:
        settings_from_env(env)
    assert str(err.value).startswith(name + ":") and "\n" not in str(err.value)


def v(
    i: int, cached: int, *, inp: int = 1000, age: float = 0.0, session: str | None = None
) -> CandidateView:
    return CandidateView(i, f"r{i}", float(i), age, inp, cached, 0, 16, 1, 0, session)


Q = [v(0, 0), v(1, 512), v(2, 0, age=9.0), v(3, 900, inp=960), v(4, 64, inp=100)]


@pytest.mark.parametrize(
    ("policy", "want"),
    [
        ("fcfs", [0, 1, 2, 3, 4]),
        # the 9 s old request first (wait bound 5 s), then the longest cached prefix
        ("lpm", [2, 3, 1, 4, 0]),
        # remaining blocks of 16: 63, 31, 63, 4, 3 (r2 is not 10 s old yet)
        ("residual-sjf", [4, 3, 1, 0, 2]),
        # the aged first; then the window of 8 by computed tokens + 2,048
        ("waiting-qos", [2, 4, 3, 1, 0]),
        # arrivals 1 s apart, forwards under 0.4 s: deadlines keep arrival order
        ("cost-aware", [0, 1, 2, 3, 4]),
    ],
)
def test_each_policy_on_a_hand_built_queue(policy: str, want: list[int]) -> None:
    s = settings_from_env({"PREFILLKIT_VLLM_POLICY": policy})
    assert order_views(Q, s, 10.0, {}, 16) == want


def test_cost_aware_lets_a_light_request_pass_a_heavy_one() -> None:
    s = settings_from_env({"PREFILLKIT_VLLM_POLICY": "cost-aware"})
    heavy = CandidateView(0, "heavy", 0.0, 1.0, 30_000, 0, 0)  # deadline 0 + 2 x 3.91 s
    light = CandidateView(1, "light", 0.1, 0.9, 200, 100, 0)  # 0.1 + 2 x 0.26 s
    assert order_views([heavy, light], s, 1.0, {}, 16) == [1, 0]


def test_session_affinity_uses_the_recent_sessions() -> None:
    s = settings_from_env({"PREFILLKIT_VLLM_POLICY": "session-affinity"})
    q = [v(0, 0), v(1, 300, session="a"), v(2, 800, session="b")]
    assert order_views(q, s, 100.0, {"a": 99.0}, 16) == [1, 0, 2]
    assert order_views(q, s, 100.0, {}, 16) == [0, 1, 2]


def test_every_policy_is_a_permutation() -> None:
    for policy in POLICIES:
        s = settings_from_env({"PREFILLKIT_VLLM_POLICY": policy})
        assert sorted(order_views(Q, s, 10.0, {"x": 1.0}, 16)) == [0, 1, 2, 3, 4]


def g(i: int, cached: int, *, age: float = 0.0) -> CandidateView:
    return CandidateView(i, f"r{i}", float(i), age, 1000, cached, 0)


@pytest.mark.parametrize(
    ("views", "defers", "want"),
    [
        ([g(0, 64), g(1, 0), g(2, 128), g(3, 10)], {}, [1, 3]),  # cold behind a warm lead
        ([g(0, 0), g(1, 64), g(2, 0)], {}, []),  # a cold lead: everyone joins
        ([g(0, 64), g(1, 0, age=5.0), g(2, 64)], {}, [1, 2]),  # T: stop, the rest waits
        ([g(0, 64), g(1, 0), g(2, 64)], {"r1": 3}, [1, 2]),  # K: deferred 3 times: stop
        ([], {}, []),
    ],
)
def test_affinity_gate_table(
    views: list[CandidateView], defers: dict[str, int], want: list[int]
) -> None:
    from prefillkit.integrations.vllm.order import affinity_gate
    from prefillkit.sched.affinity import AffinityBounds

    assert affinity_gate(views, defers, AffinityBounds()) == want


def test_the_affinity_gate_setting() -> None:
    s = settings_from_env({"PREFILLKIT_VLLM_AFFINITY": "1"})
    assert s.affinity and s.active and s.policy == "fcfs"
    with pytest.raises(SettingError, match=r"^PREFILLKIT_VLLM_AFFINITY:"):
        settings_from_env({"PREFILLKIT_VLLM_AFFINITY": "yes"})
