"""First-token logits are bitwise identical across cache state, chunking, batching and reuse.

Every comparison here is bitwise (``assert_bitwise``): the executor computes each logit with the
same sequence of correctly rounded float64 operations whatever the path (``prefillkit.exec.ops``).
Each test carries a negative control: the same scenario with the thing it checks broken must
change the logits (or be refused), so the comparison can fail.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

# NOTE: the subject here is interpreted code; .ci/run's compiled-build run skips it.
pytestmark = pytest.mark.interpreted

torch = pytest.importorskip("torch")

from exec_support import (  # noqa: E402
    PAGE,
    Pages,
    assert_bitwise,
    backups,
    cold,
    differs,
    extend,
    fresh,
    prompt,
    run,
)
from prefillkit.exec.model import ModelConfig  # noqa: E402
from prefillkit.exec.plan import HostCopy  # noqa: E402

KINDS = [ModelConfig(kind="mla_dsa"), ModelConfig(kind="gqa")]
X = prompt(1, 41)  # 10 full pages + a 1-token tail
FIRST_TURN = X[:26]  # shares X's first 6 full pages (24 tokens)
OTHER = prompt(2, 40)


@pytest.mark.parametrize("cfg", KINDS, ids=lambda c: c.kind)
def test_cold_vs_device_prefix_hit_vs_host_loadback(cfg: ModelConfig) -> None:
    ref = cold(X, cfg)

    # device prefix hit: the first turn's full pages hold X's first 24 tokens
    pages, ex = Pages(1, 64), fresh(cfg)
    first, t_first = extend(pages, "t1", FIRST_TURN, 0, len(FIRST_TURN))
    run(ex, first)
    hit, _ = extend(pages, "x", X, 24, len(X), t_first)
    assert_bitwise(run(ex, hit).logits["x"], ref)
    # control: the prefix pages in the wrong order
    swapped = list(t_first)
    swapped[1], swapped[2] = swapped[2], swapped[1]
    bad, _ = extend(pages, "x2", X, 24, len(X), swapped)
    assert differs(run(ex, bad).logits["x2"], ref)

    # host load-back: back up the first turn's 6 full pages, evict them, let OTHER overwrite
    # them, then load them back into fresh pages for X
    pages, ex = Pages(1, 64), fresh(cfg)
    first, t_first = extend(pages, "t1", FIRST_TURN, 0, len(FIRST_TURN))
    run(ex, first)
    slots = list(range(6))
    pages.release(t_first)
    other, t_other = extend(pages, "o", OTHER, 0, len(OTHER))
    assert set(t_other) >= set(t_first)  # the evicted pages were reused
    run(ex, other, backups=backups(t_first, 6, slots, 1))
    pages.release(t_other)
    dest = [pages.alloc(0) for _ in range(6)]
    again, _ = extend(pages, "x", X, 24, len(X), dest)
    loads = tuple(HostCopy(0, slots[j], dest[j]) for j in range(6))
    assert_bitwise(run(ex, again, loads=loads).logits["x"], ref)
    # controls: two slots loaded into each other's pages; no load at all
    crossed = tuple(HostCopy(0, slots[j ^ 1], dest[j]) for j in range(6))
    assert differs(run(ex, again, loads=crossed).logits["x"], ref)
    ex.pool.data[:, dest[3]] = 0.5  # the page no load restores
    assert differs(run(ex, again).logits["x"], ref)


@pytest.mark.parametrize("cfg", KINDS, ids=lambda c: c.kind)
@pytest.mark.parametrize("chunk", [4, 8, 12, 20])
def test_chunked_equals_whole(cfg: ModelConfig, chunk: int) -> None:
    ref = cold(X, cfg)
    pages, ex = Pages(1, 64), fresh(cfg)
    table: list[int] = []
    bounds = [*range(0, len(X), chunk), len(X)]
    for start, end in itertools.pairwise(bounds):
        plan, table = extend(pages, "x", X, start, end, table)
        assert plan.is_chunk == (end < len(X))
        out = run(ex, plan)
    assert (len(X) - bounds[-2]) % PAGE == 1  # the last extend is a sub-page tail
    assert_bitwise(out.logits["x"], ref)
    # control: the last chunk continues from another request's prefix
    other, t_other = extend(pages, "o", OTHER, 0, len(OTHER))
    run(ex, other)
    wrong, _ = extend(pages, "x", X, bounds[-2], len(X), t_other)
    assert differs(run(ex, wrong).logits["x"], ref)


@pytest.mark.parametrize("cfg", KINDS, ids=lambda c: c.kind)
def test_batched_equals_alone(cfg: ModelConfig) -> None:
    a, b, c = X, prompt(3, 29), prompt(4, 50)
    alone = {k: cold(t, cfg) for k, t in {"a": a, "b": b, "c": c}.items()}
    d = a[:32] + prompt(5, 9)  # hits a's first 8 pages
    alone["d"] = cold(d, cfg)

    pages, ex = Pages(1, 64), fresh(cfg)
    # a mixed chunk batch: a whole prompt beside c's first chunk
    pa, t_a = extend(pages, "a", a, 0, len(a))
    pc, t_c = extend(pages, "c", c, 0, 16)
    out1 = run(ex, pc, pa)
    assert set(out1.logits) == {"a"}
    # c's continuation, a cold request and a prefix hit on a, variable lengths, one forward
    pc2, t_c2 = extend(pages, "c", c, 16, len(c), t_c)
    pb, _ = extend(pages, "b", b, 0, len(b))
    pd, _ = extend(pages, "d", d, 32, len(d), t_a)
    out2 = run(ex, pb, pc2, pd)
    got = {**out1.logits, **out2.logits}
    for k, v in alone.items():
        assert_bitwise(got[k], v)
    # controls: d's prefix pages taken from c; one page handed to two requests in one step
    bad, _ = extend(pages, "d", d, 32, len(d), t_c2)
    assert differs(run(ex, pb, bad).logits["d"], alone["d"])
    twice = replace(pb, rid="b2")
    with pytest.raises(ValueError, match="written twice"):
        run(ex, pb, twice)


@pytest.mark.parametrize("cfg", KINDS, ids=lambda c: c.kind)
def test_eviction_and_reprefill_reuse_pages(cfg: ModelConfig) -> None:
    ref_x, ref_o = cold(X, cfg), cold(OTHER, cfg)
    pages, ex = Pages(1, 24), fresh(cfg, n_pages=24)
    px, t_x = extend(pages, "x", X, 0, len(X))
    assert_bitwise(run(ex, px).logits["x"], ref_x)
    pages.release(t_x)  # evicted
    po, t_o = extend(pages, "o", OTHER, 0, len(OTHER))
    assert t_o == t_x[: len(t_o)]  # OTHER overwrites x's pages
    assert_bitwise(run(ex, po).logits["o"], ref_o)
    # control: a prefix hit on x's evicted pages reads OTHER's KV
    stale, _ = extend(pages, "x", X, 24, len(X), t_x)
    assert differs(run(ex, stale).logits["x"], ref_x)
    pages.release(t_o)
    # re-prefill x from scratch on the reused pages, then hit on them
    px2, t_x2 = extend(pages, "x", X, 0, len(X))
    assert set(t_x2) & set(t_o)
    assert_bitwise(run(ex, px2).logits["x"], ref_x)
    hit, _ = extend(pages, "x3", X, 24, len(X), t_x2)
    assert_bitwise(run(ex, hit).logits["x3"], ref_x)


def test_plan_refuses_malformed_steps() -> None:
    pages, ex = Pages(1, 64), fresh()
    plan, table = extend(pages, "x", X, 0, len(X))
    short = replace(plan, new_pages=(tuple(table[:-1]),))
    with pytest.raises(ValueError, match="lacks new page"):
        run(ex, short)
    unaligned = replace(plan, prefix_len=2)
    with pytest.raises(ValueError, match="not page-aligned"):
        run(ex, unaligned)
    with pytest.raises(ValueError, match="outside lane 0"):
        run(ex, replace(plan, new_pages=((999, *table[1:]),)))
