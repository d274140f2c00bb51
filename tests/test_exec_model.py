"""The model computes what it claims: a straightforward dense reference agrees (tolerance), the
seed fixes the weights (bitwise), the DSA selection is sparse and matters, and the fixed
accumulation order is what makes the executor's comparisons bitwise.

Tolerances, and why: the reference uses BLAS matmuls, ATen reductions and libm exp/rsqrt, whose
rounding order differs from ``prefillkit.exec.ops``; both are float64, so they agree to ~1e-12
relative, and the test allows 1e-9.
"""

from __future__ import annotations

import math

import pytest

# NOTE: the subject here is interpreted code; .ci/run's compiled-build run skips it.
pytestmark = pytest.mark.interpreted

torch = pytest.importorskip("torch")

from exec_support import cold, differs, prompt  # noqa: E402
from prefillkit.exec import ops  # noqa: E402
from prefillkit.exec.model import Model, ModelConfig, first_token  # noqa: E402

TOL = {"rtol": 1e-9, "atol": 1e-9}


def _norm(x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * g


def _rot(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    out[..., 0::2] = x[..., 0::2] * cos - x[..., 1::2] * sin
    out[..., 1::2] = x[..., 0::2] * sin + x[..., 1::2] * cos
    return out


def reference_logits(m: Model, tokens: tuple[int, ...], sparse: bool = True) -> torch.Tensor:
    """Dense whole-prompt forward written the obvious way (matmul, softmax, topk)."""
    c = m.cfg
    t = len(tokens)
    x = m.embedding[torch.tensor(tokens)]
    pos = torch.arange(t)
    causal = pos[None, :] <= pos[:, None]
    for w in m.layers:
        h = _norm(x, w["attn_norm"])
        if c.kind == "mla_dsa":
            dn, dr, r = c.qk_nope_dim, c.qk_rope_dim, c.kv_lora_rank
            cos, sin = m.cos[:t], m.sin[:t]
            kv = h @ w["wkv"]
            lat = _norm(kv[:, :r], w["kv_norm"])
            k_rope = _rot(kv[:, r:], cos, sin)
            q = (h @ w["wq"]).view(t, c.n_heads, dn + dr)
            q_rope = _rot(q[..., dn:], cos[:, None], sin[:, None])
            k_nope = (lat @ w["wuk"]).view(t, c.n_heads, dn)
            v = (lat @ w["wuv"]).view(t, c.n_heads, c.v_head_dim)
            s = torch.einsum("qhd,khd->hqk", q[..., :dn], k_nope)
            s = (s + torch.einsum("qhd,kd->hqk", q_rope, k_rope)) / math.sqrt(dn + dr)
            qi = (h @ w["wiq"]).view(t, c.index_heads, c.index_dim)
            idx = torch.einsum("qhd,kd->qhk", qi, h @ w["wik"]).relu()
            idx = torch.einsum("qhk,qh->qk", idx, h @ w["wiw"]).masked_fill(~causal, -math.inf)
            mask = causal.clone()
            if sparse and t > c.index_topk:
                top = torch.sort(idx, dim=-1, descending=True, stable=True).indices[
                    :, : c.index_topk
                ]
                sel = torch.zeros_like(causal).scatter(1, top, True)
                mask = causal & sel
        else:
            hd, g = c.head_dim, c.n_heads // c.n_kv_heads
            cos, sin = m.cos[:t, None], m.sin[:t, None]
            q = _rot((h @ w["wq"]).view(t, c.n_heads, hd), cos, sin)
            k = _rot((h @ w["wk"]).view(t, c.n_kv_heads, hd), cos, sin).repeat_interleave(g, 1)
            v = (h @ w["wv"]).view(t, c.n_kv_heads, hd).repeat_interleave(g, 1)
            s = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(hd)
            mask = causal
        p = torch.softmax(s.masked_fill(~mask, -math.inf), -1)
        x = x + torch.einsum("hqk,khd->qhd", p, v).reshape(t, -1) @ w["wo"]
        x = x + (_norm(x, w["mlp_norm"]) @ w["w1"]).relu() @ w["w2"]
    return (_norm(x[-1:], m.final_norm) @ m.lm_head)[0]


@pytest.mark.parametrize("kind", ["mla_dsa", "gqa"])
def test_matches_dense_reference(kind: str) -> None:
    cfg = ModelConfig(kind=kind)  # type: ignore[arg-type]
    tokens = prompt(7, 37)
    got = cold(tokens, cfg)
    torch.testing.assert_close(got, reference_logits(Model(cfg), tokens), **TOL)
    if kind == "mla_dsa":  # the top-k selection is in force (37 keys > 12) and changes the result
        assert not torch.allclose(got, reference_logits(Model(cfg), tokens, sparse=False), **TOL)


def test_seed_fixes_the_weights() -> None:
    tokens = prompt(8, 21)
    a, b = cold(tokens, ModelConfig(seed=3)), cold(tokens, ModelConfig(seed=3))
    assert not differs(a, b)
    assert differs(a, cold(tokens, ModelConfig(seed=4)))
    assert 0 <= first_token(a) < ModelConfig().vocab


def test_exp_nonpos_accuracy() -> None:
    x = -torch.rand(4096, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 80
    x[0] = 0.0
    torch.testing.assert_close(ops.exp_nonpos(x), torch.exp(x), rtol=1e-13, atol=0)


def _pairwise(x: torch.Tensor) -> torch.Tensor:
    n = x.shape[-1]
    if n == 1:
        return x[..., 0]
    return _pairwise(x[..., : n // 2]) + _pairwise(x[..., n // 2 :])


def test_length_dependent_order_breaks_chunked_exactness(monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control for the fixed order: a pairwise (tree) sum, whose grouping depends on how
    many keys a row has, makes the chunked logits differ from the whole prompt's."""
    from exec_support import PAGE, Pages, extend, fresh, run

    tokens = prompt(1, 41)

    def chunked() -> torch.Tensor:
        pages, ex = Pages(1, 64), fresh()
        table: list[int] = []
        for start in range(0, 41, 8):
            plan, table = extend(pages, "x", tokens, start, min(start + 8, 41), table)
            out = run(ex, plan)
        return out.logits["x"]

    assert PAGE == 4 and not differs(chunked(), cold(tokens))
    monkeypatch.setattr(ops, "sum_last", _pairwise)
    assert differs(chunked(), cold(tokens))


def test_blas_matmul_is_not_batch_invariant_here() -> None:
    """Why ops.linear does not call BLAS: on this machine a row of ``x @ w`` depends on how many
    rows share the call (skipped where this BLAS happens to be batch-invariant)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 32, generator=g, dtype=torch.float64)
    w = torch.randn(32, 48, generator=g, dtype=torch.float64)
    full = x @ w
    if not any(differs(x[:n] @ w, full[:n]) for n in (1, 2, 3, 5, 7, 17, 33)):
        pytest.skip("this BLAS gives the same rows at every batch size tried")
    for n in (1, 2, 3, 5, 7, 17, 33):
        assert not differs(ops.linear(x[:n], w), ops.linear(x, w)[:n])
