"""CP across processes: R gloo ranks, rank r owning lane r, give the logits of R = 1 bit for bit.

One scenario (cold, device prefix hit, chunked continuation in a mixed batch, host backup,
eviction with page reuse, host load-back) is planned for each R on a per-lane allocator and run on
1 rank in-process and on 2 and 4 spawned ranks; every request's first-token logits must equal its
cold, alone, R = 1 logits bitwise. Each rank computes the query rows of its own pages and the
cache rows of all pages arrive by all-gather, so the arithmetic per logit is the same as on one
rank. Negative control: writing pages to the wrong lane changes the logits.
"""

from __future__ import annotations

import pytest

# NOTE: the subject here is interpreted code; .ci/run's compiled-build run skips it.
pytestmark = pytest.mark.interpreted

torch = pytest.importorskip("torch")

from exec_support import (  # noqa: E402
    PAGE,
    Pages,
    assert_bitwise,
    cold,
    differs,
    extend,
    fresh,
    prompt,
    wrong_lane_fault,
)
from prefillkit.exec.cp import run_cp  # noqa: E402
from prefillkit.exec.executor import StepOutput  # noqa: E402
from prefillkit.exec.model import ModelConfig  # noqa: E402
from prefillkit.exec.plan import HostCopy, StepPlan  # noqa: E402

CFG = ModelConfig(kind="mla_dsa")
FIRST = prompt(1, 26)
PROMPTS = {
    "t1": FIRST,
    "x": FIRST[:24] + prompt(11, 17),  # hits t1's first 6 pages
    "b": prompt(3, 29),
    "c": prompt(4, 50),  # chunked: 16 + 16 + 18
    "o": prompt(2, 40),
    "y": FIRST[:24] + prompt(6, 15),  # t1's pages loaded back from the host
}


def scenario(cp: int) -> list[StepPlan]:
    pages = Pages(cp, 32)
    p, t1 = extend(pages, "t1", FIRST, 0, len(FIRST))
    c0, tc = extend(pages, "c", PROMPTS["c"], 0, 16)
    steps = [StepPlan((p, c0))]
    slots = [j // cp for j in range(6)]  # host slots per lane
    x, _ = extend(pages, "x", PROMPTS["x"], 24, len(PROMPTS["x"]), t1)
    c1, tc = extend(pages, "c", PROMPTS["c"], 16, 32, tc)
    b, tb = extend(pages, "b", PROMPTS["b"], 0, len(PROMPTS["b"]))
    back = tuple(HostCopy(j % cp, slots[j], t1[j]) for j in range(6))
    steps.append(StepPlan((x, c1, b), backups=back))
    pages.release(t1)
    pages.release(tb)
    c2, tc = extend(pages, "c", PROMPTS["c"], 32, 50, tc)
    o, to = extend(pages, "o", PROMPTS["o"], 0, len(PROMPTS["o"]))
    assert set(to) & set(t1)  # evicted pages reused
    steps.append(StepPlan((c2, o)))
    pages.release(to)
    dest = [pages.alloc(j % cp) for j in range(6)]
    y, _ = extend(pages, "y", PROMPTS["y"], 24, len(PROMPTS["y"]), dest)
    loads = tuple(HostCopy(j % cp, slots[j], dest[j]) for j in range(6))
    steps.append(StepPlan((y,), loads=loads))
    return steps


def logits(outs: list[StepOutput]) -> dict[object, torch.Tensor]:
    got: dict[object, torch.Tensor] = {}
    for o in outs:
        assert not set(got) & set(o.logits)
        got.update(o.logits)
    return got


@pytest.fixture(scope="module")
def reference() -> dict[object, torch.Tensor]:
    ref = {rid: cold(t, CFG) for rid, t in PROMPTS.items()}
    ex = fresh(CFG, n_pages=32, host=8)
    one = logits([ex.step(s) for s in scenario(1)])
    assert set(one) == set(ref)
    for rid in ref:
        assert_bitwise(one[rid], ref[rid])
    return ref


@pytest.mark.parametrize("cp", [2, 4])
def test_cp_ranks_equal_one_rank(reference: dict[object, torch.Tensor], cp: int) -> None:
    steps = scenario(cp)
    # the split is real: every rank owns query rows of some request
    assert all(any(r.new_pages[lane] for s in steps for r in s.reqs) for lane in range(cp))
    got = logits(run_cp(CFG, PAGE, 32, steps, cp, n_host_slots=8))
    assert set(got) == set(reference)
    for rid, ref in reference.items():
        assert_bitwise(got[rid], ref)


def test_cp_wrong_lane_changes_logits(reference: dict[object, torch.Tensor]) -> None:
    got = logits(run_cp(CFG, PAGE, 32, scenario(2), 2, n_host_slots=8, setup=wrong_lane_fault))
    assert any(differs(got[rid], ref) for rid, ref in reference.items())
