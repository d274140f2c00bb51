"""The llm-d shared-prefix fleet workload: ``workloads/llmd.py``, ``--generator llmd``,
the ``--llmd-*`` options and the ``[workload]`` table."""

from __future__ import annotations

import itertools
import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from cli_support import cli, cli_batch
from prefillkit.app.replay import GENERATORS, WorkloadSpec, generate_records
from prefillkit.app.sweep import SweepError
from prefillkit.app.sweep.grid import load_grid
from prefillkit.app.sweep.points import workload_spec
from prefillkit.workloads.llmd import QPS_STEPS, STEP_S, iter_llmd_prefix, llmd_prefix
from prefillkit.workloads.options import GENERATOR_PARAMS, LLMD_PARAMS, params_of
from prefillkit.workloads.param_values import check_value, parse_text
from prefillkit.workloads.record import TraceRecord
from prefillkit.workloads.trace_reader import load_records

#: The subject is interpreted code; .ci/run's run on the compiled build deselects it.
pytestmark = pytest.mark.interpreted

#: A small workload: 4 customers x 3 users, two steps, no warm-up.
SMALL: dict[str, Any] = {
    "customers": 4,
    "users_per_customer": 3,
    "qps_steps": (2.0, 4.0),
    "step_s": 5.0,
    "warmup_qps": 0.0,
}
SMALL_FLAGS = [
    "--generator", "llmd", "--llmd-customers", "4", "--llmd-users-per-customer", "3",
    "--llmd-qps-steps", "2,4", "--llmd-step-s", "5", "--llmd-warmup-qps", "0",
]  # fmt: skip


def stage_of(r: TraceRecord) -> str:
    return r.rid.split("-")[1]


def customer_user(r: TraceRecord) -> tuple[int, int]:
    """``(customer, user)`` from the rid ``llmd-<stage>-<k>-c<g>-u<u>``."""
    _, _, _, c, u = r.rid.split("-")
    return int(c[1:]), int(u[1:])


def ids(r: TraceRecord) -> tuple[int, ...]:
    assert r.hash_ids is not None
    return r.hash_ids


def by_stage(records: list[TraceRecord]) -> dict[str, list[TraceRecord]]:
    out: dict[str, list[TraceRecord]] = {}
    for r in records:
        out.setdefault(stage_of(r), []).append(r)
    return out


@pytest.fixture(scope="module")
def published() -> list[TraceRecord]:
    return llmd_prefix()


# --------------------------------------------------------------------------- the shape


def test_defaults_are_the_published_shape(published: list[TraceRecord]) -> None:
    """150 customers x 5 users, 6,000 + 1,200 tokens, 1,000 output with ignore_eos; a
    15 QPS x 50 s warm-up and the report's 16 steps from 3 to 60 QPS."""
    assert len({customer_user(r) for r in published}) == 750
    assert {customer_user(r)[0] for r in published} == set(range(150))
    assert {(r.input_len, r.output_len, r.ignore_eos, r.block_size) for r in published} == {
        (7200, 1000, True, 64)
    }
    assert all(len(ids(r)) == math.ceil(7200 / 64) for r in published)
    stages = by_stage(published)
    assert list(stages) == ["w", *(f"s{j}" for j in range(16))]
    assert len(stages["w"]) == 750
    want = [int(q * t) for q, t in zip(QPS_STEPS, STEP_S, strict=True)]
    assert [len(stages[f"s{j}"]) for j in range(16)] == want
    assert (QPS_STEPS[0], QPS_STEPS[-1]) == (3, 60)
    assert len(published) == 750 + sum(want) == 17084
    times = [r.arrival_s for r in published]
    assert times == sorted(times)


def test_customers_share_exactly_their_context() -> None:
    """A customer's prompts share its complete context blocks and nothing else; two
    customers share no block; a repeated (customer, user) prompt is the same prompt."""
    recs = llmd_prefix(**SMALL, context_tokens=1000, query_tokens=300, block_size=64)
    n_ctx = 1000 // 64
    first: dict[tuple[int, int], tuple[int, ...]] = {}
    for r in recs:
        assert first.setdefault(customer_user(r), ids(r)) == ids(r)
    for (g1, u1), a in first.items():
        for (g2, u2), b in first.items():
            if g1 != g2:
                assert not set(a) & set(b)
            elif u1 != u2:
                assert a[:n_ctx] == b[:n_ctx]
                assert not set(a[n_ctx:]) & set(b)  # the straddling block is the user's


def test_fresh_queries_share_only_the_context() -> None:
    recs = llmd_prefix(**SMALL, fresh_queries=True, context_tokens=640, query_tokens=100)
    tails: list[int] = []
    for r in recs:
        g, _ = customer_user(r)
        assert ids(r)[:10] == tuple(range(g * 10, g * 10 + 10))
        tails += ids(r)[10:]
    assert len(tails) == len(set(tails)) == 2 * len(recs)


def test_block_size_16_shares_the_whole_context() -> None:
    recs = llmd_prefix(**SMALL, block_size=16)
    same = [r for r in recs if customer_user(r)[0] == 0]
    assert len({ids(r)[:375] for r in same}) == 1  # 6,000 = 375 x 16
    assert len({ids(r)[375] for r in same}) == len({customer_user(r) for r in same})


# --------------------------------------------------------------------------- the load


def test_each_step_has_its_rate() -> None:
    """A step of ``q`` QPS for ``t`` s sends ``int(q t)`` requests whose rate is ``q``
    within Poisson tolerance; the next step starts ``step_gap_s`` after its last arrival
    (within the first one-second window)."""
    qps, secs = (5.0, 20.0, 50.0), (60.0, 40.0, 30.0)
    recs = llmd_prefix(qps_steps=qps, step_s=secs, warmup_qps=0, step_gap_s=3.0, seed=11)
    stages = list(by_stage(recs).values())
    for st, q, t in zip(stages, qps, secs, strict=True):
        n = int(q * t)
        assert len(st) == n
        span = st[-1].arrival_s - st[0].arrival_s
        assert abs((n - 1) / span - q) / q < 4 / math.sqrt(n), (q, span)
    for prev, nxt in itertools.pairwise(stages):
        gap = nxt[0].arrival_s - prev[-1].arrival_s
        assert 3.0 < gap < 4.0


def test_cycle_is_the_harness_order(published: list[TraceRecord]) -> None:
    """Every stage sends the same shuffled prompt list from its start: request ``k``
    sends prompt ``k mod 750``."""
    stages = by_stage(published)
    order = [customer_user(r) for r in stages["w"]]
    assert len(set(order)) == 750
    for name, st in stages.items():
        assert [customer_user(r) for r in st] == [order[k % 750] for k in range(len(st))], name


def test_uniform_pick_spreads_over_customers() -> None:
    recs = llmd_prefix(pick="uniform", qps_steps=50, step_s=60, warmup_qps=0, customers=10)
    counts = Counter(customer_user(r)[0] for r in recs)
    assert set(counts) == set(range(10))
    assert max(counts.values()) - min(counts.values()) < 0.25 * len(recs) / 10


def test_deterministic_and_streaming_equals_list() -> None:
    a = llmd_prefix(**SMALL, seed=5)
    assert a == llmd_prefix(**SMALL, seed=5)
    assert a != llmd_prefix(**SMALL, seed=6)
    stream = iter_llmd_prefix(**SMALL, seed=5)
    assert next(stream) == a[0]
    assert [a[0], *stream] == a
    for pick in ("cycle", "uniform"):
        kw = {**SMALL, "pick": pick, "fresh_queries": True}
        assert list(iter_llmd_prefix(**kw)) == llmd_prefix(**kw)


BAD_ARGS: list[tuple[dict[str, Any], str]] = [
    ({"customers": 0}, "customers must be >= 1"),
    ({"query_tokens": 0}, "query_tokens must be >= 1"),
    ({"context_tokens": -1}, "context_tokens must be >= 0"),
    ({"block_size": 2.5}, "block_size must be an integer"),
    ({"qps_steps": ()}, "qps_steps must have at least one value"),
    ({"qps_steps": (3, 0)}, "qps_steps must be > 0"),
    ({"step_s": (1, 2, 3)}, "step_s has 3 values for 16 qps_steps"),
    ({"step_s": math.inf}, "step_s must be finite"),
    ({"warmup_s": -1}, "warmup_s must be finite and >= 0"),
    ({"step_gap_s": math.nan}, "step_gap_s must be finite"),
    ({"pick": "random"}, "pick must be one of cycle, uniform"),
    ({"qps_steps": 0.01, "step_s": 1, "warmup_qps": 0}, "gives no requests"),
]


@pytest.mark.parametrize(("kwargs", "needle"), BAD_ARGS)
def test_bad_arguments_name_the_parameter(kwargs: dict[str, Any], needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        iter_llmd_prefix(**kwargs)  # checked at the call, before the first record


# --------------------------------------------------------------------------- the app


def test_registered_and_other_generators_unchanged() -> None:
    assert "llmd" in GENERATORS
    recs, info = generate_records(
        WorkloadSpec(generator="llmd", generator_args=SMALL, block_size=32), 3
    )
    assert recs == llmd_prefix(**SMALL, block_size=32, seed=3)
    assert info["generator"] == "llmd" and info["seed"] == 3


def test_generate_then_replay(tmp_path: Path) -> None:
    out = tmp_path / "llmd.jsonl"
    proc = cli("generate", *SMALL_FLAGS, "--seed", "2", "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert "wrote 30 requests" in proc.stderr and "generator llmd" in proc.stderr
    assert load_records(out, "jsonl")[0] == llmd_prefix(**SMALL, seed=2)
    for args in (["--trace", str(out)], [*SMALL_FLAGS, "--seed", "2"]):
        proc = cli("replay", *args, "--json", "-q")
        assert proc.returncode == 0, proc.stderr
        doc = json.loads(proc.stdout)
        assert doc["metrics"]["requests"] == doc["metrics"]["completed"] == 30


def test_workload_table(tmp_path: Path) -> None:
    cfg = tmp_path / "run.toml"
    cfg.write_text(
        '[prefillkit]\nseed = 4\n[workload]\ngenerator = "llmd"\ncustomers = 4\n'
        "users-per-customer = 3\nqps_steps = [2, 4]\nstep_s = 5\nwarmup_qps = 0\n"
        'pick = "uniform"\n',
        encoding="utf-8",
    )
    out = tmp_path / "t.jsonl"
    proc = cli("generate", "--config", cfg, "--llmd-qps-steps", "3", "-o", out)
    assert proc.returncode == 0, proc.stderr
    want = llmd_prefix(**{**SMALL, "qps_steps": (3.0,)}, pick="uniform", seed=4)
    assert load_records(out, "jsonl")[0] == want


EMPTY_LADDER = ["--llmd-qps-steps", "0.01", "--llmd-step-s", "1", "--llmd-warmup-qps", "0"]


def _bad_table(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / f"{name}.toml"
    path.write_text('[prefillkit]\n[workload]\ngenerator = "llmd"\n' + body, encoding="utf-8")
    return str(path)


def test_bad_values_are_one_line_naming_the_flag(tmp_path: Path) -> None:
    out = str(tmp_path / "x.jsonl")
    cases: list[tuple[list[str], str]] = [
        (["--llmd-qps-steps", "3,x"], "--llmd-qps-steps"),
        (["--llmd-qps-steps", "3,-1"], "--llmd-qps-steps"),
        (["--llmd-qps-steps", "3,,4"], "--llmd-qps-steps"),
        (["--llmd-step-s", "1,2,3"], "--llmd-step-s has 3 values"),
        (["--llmd-customers", "0"], "--llmd-customers"),
        (["--llmd-query-tokens", "x"], "--llmd-query-tokens"),
        (["--llmd-pick", "foo"], "--llmd-pick"),
        (["--llmd-warmup-qps", "-1"], "--llmd-warmup-qps"),
        (["--llmd-step-gap-s", "inf"], "--llmd-step-gap-s"),
        (["--llmd-customers", "2", "--llmd-customers", "3"], "--llmd-customers"),
        (EMPTY_LADDER, "--llmd-qps-steps x --llmd-step-s gives no requests"),
        (["--generator", "llmd", "--agentic-sessions", "3"], "--agentic-sessions does not apply"),
        (["--generator", "seed", "--llmd-customers", "3"], "--llmd-customers does not apply"),
        (["--config", _bad_table(tmp_path, "a", "qps_steps = [2, 'a']\n")], "] qps_steps"),
        (["--config", _bad_table(tmp_path, "b", "step_s = [0]\n")], "] step_s: must be"),
        (["--config", _bad_table(tmp_path, "c", "customer = 3\n")], "did you mean 'customers'"),
        (["--config", _bad_table(tmp_path, "d", "customers = 0\n")], "] customers: must be"),
    ]
    argvs = [["generate", *args, "-o", out] for args, _ in cases]
    argvs.append(["replay", "--trace", "mooncake-slice", "--llmd-customers", "3"])
    needles = [needle for _, needle in cases] + ["--llmd-customers does not apply with --trace"]
    for argv, needle, res in zip(argvs, needles, cli_batch(argvs, timeout=120), strict=True):
        assert res["code"] == 2, (argv, res)
        lines = res["stderr"].strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("prefillkit: error: "), (argv, res)
        assert needle in lines[0], (argv, lines[0])


def test_float_list_kind_and_a_grid_workload(tmp_path: Path) -> None:
    assert GENERATOR_PARAMS["llmd"] is LLMD_PARAMS
    qps = params_of("llmd")["qps_steps"]
    assert parse_text(qps, "3, 10,15") == check_value(qps, [3, 10, 15.0]) == (3.0, 10.0, 15.0)
    assert check_value(qps, 4) == (4.0,)
    for bad, needle in (([1, True], "a list of numbers"), ([], "a list"), ([2, 0], "> 0")):
        with pytest.raises(ValueError, match=needle):
            check_value(qps, bad)
    grid = tmp_path / "g.toml"
    body = "".join(f"{k} = {v!r}\n" for k, v in SMALL.items() if k not in ("qps_steps", "step_s"))
    grid.write_text(
        f'[[workload]]\ngenerator = "llmd"\n{body}qps_steps = [2, 4]\nstep_s = 5\n', "utf-8"
    )
    (w,) = load_grid(grid).workloads
    recs, _ = generate_records(workload_spec(w), 0)
    assert recs == llmd_prefix(**SMALL, seed=0)
    grid.write_text('[[workload]]\ngenerator = "llmd"\nstep_s = [5, 0]\n', "utf-8")
    with pytest.raises(SweepError, match=r"\] step_s: must be finite and > 0, got 0$"):
        load_grid(grid)
