"""Batch-invariant primitives: every output element has one fixed sequence of roundings.

BLAS matmuls and ATen reductions pick their blocking, vector width and thread split from the
tensor's shape, and ATen's vectorised transcendental kernels (exp, rsqrt, ...) compute the tail of
a tensor with the scalar libm function, so an element's value can depend on how many other rows
share the call or where it sits in the tensor. To make a request's logits independent of batching,
chunking, cache state and CP rank, these primitives use only elementwise IEEE-754 operations that
are correctly rounded whatever the kernel (add, sub, mul, div, sqrt, max, comparisons) and reduce
in a fixed order: along the reduction index, one element at a time, in a Python loop. An element's
value is then a function of its own inputs only, bit for bit.

Everything runs in float64 (the model's dtype); the cost is speed, which the small CI model can
afford.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

EXP_TERMS = 18  # Taylor terms of exp on [-80/128, 0]: truncation error < 1e-19
EXP_SQUARINGS = 7  # exp(x) = exp(x / 2**7) ** (2**7)
EXP_FLOOR = -80.0  # below: exp < 2e-35, negligible against the row maximum's exp(0) = 1
_INV = (0.0, *(1.0 / k for k in range(1, EXP_TERMS + 1)))  # _INV[k] = 1 / k


def linear(x: Tensor, w: Tensor) -> Tensor:
    """``x @ w`` for x [N, din], w [din, dout], accumulated over din in index order."""
    acc = x[:, 0:1] * w[0]
    for k in range(1, w.shape[0]):
        acc = acc + x[:, k : k + 1] * w[k]
    return acc


def dot_last(a: Tensor, b: Tensor) -> Tensor:
    """Sum over the last dim of ``a * b`` (broadcast), accumulated in index order."""
    acc = a[..., 0] * b[..., 0]
    for k in range(1, a.shape[-1]):
        acc = acc + a[..., k] * b[..., k]
    return acc


def sum_last(x: Tensor) -> Tensor:
    """Sum over the last dim, accumulated in index order."""
    parts = x.unbind(-1)
    acc = parts[0]
    for p in parts[1:]:
        acc = acc + p
    return acc


def rms_norm(x: Tensor, gain: Tensor, eps: float = 1e-6) -> Tensor:
    """RMSNorm over the last dim with a correctly rounded sqrt and division (no rsqrt)."""
    mean_sq = sum_last(x * x) * (1.0 / x.shape[-1])
    return x / torch.sqrt(mean_sq + eps).unsqueeze(-1) * gain


def exp_nonpos(x: Tensor) -> Tensor:
    """exp(x) for x <= 0 from mul/add only: Taylor on x / 128 (Horner), then 7 squarings.

    Relative error about 1e-14 against libm; bitwise the same for the same input anywhere.
    """
    r = torch.clamp(x, min=EXP_FLOOR) * (0.5**EXP_SQUARINGS)
    p = torch.ones_like(r)
    for k in range(EXP_TERMS, 0, -1):
        p = 1.0 + (r * _INV[k]) * p
    for _ in range(EXP_SQUARINGS):
        p = p * p
    return p


def masked_softmax_weighted_sum(scores: Tensor, mask: Tensor, values: Tensor) -> Tensor:
    """Softmax over keys (last dim of scores [..., S]) restricted to mask, times values [S, ..., D].

    ``values`` is indexed by key first; the result has shape ``scores.shape[:-1] + (D,)``. The
    normaliser and the weighted sum accumulate over key positions 0..S-1 in order; a masked key
    adds an exact zero, so keys beyond a query's causal limit never change its result.
    """
    neg_inf = torch.tensor(-math.inf, dtype=scores.dtype, device=scores.device)
    masked = torch.where(mask, scores, neg_inf)
    row_max = masked.amax(dim=-1, keepdim=True)  # max is exact in any order
    weights = exp_nonpos(masked - row_max) * mask
    denom = sum_last(weights)
    cols = weights.unbind(-1)
    acc = torch.zeros(
        scores.shape[:-1] + values.shape[-1:], dtype=scores.dtype, device=scores.device
    )
    for s, w in enumerate(cols):
        acc = acc + w.unsqueeze(-1) * values[s]
    return acc / denom.unsqueeze(-1)


def topk_mask(scores: Tensor, valid: Tensor, k: int) -> Tensor:
    """Mask of the k best valid keys per row (ties: lower position first), all if fewer."""
    neg_inf = torch.tensor(-math.inf, dtype=scores.dtype, device=scores.device)
    masked = torch.where(valid, scores, neg_inf)
    if masked.shape[-1] <= k:
        return valid.clone()
    order = torch.sort(masked, dim=-1, descending=True, stable=True).indices[..., :k]
    sel = torch.zeros_like(valid)
    sel.scatter_(-1, order, True)
    return sel & valid
