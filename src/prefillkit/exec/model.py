"""A small decoder-only transformer with random weights from a seed, split for paged execution.

Two attention shapes:

- ``mla_dsa``: MLA-style latent KV and DSA-style sparse attention, as in DeepSeek-V3.2 / GLM-5 in
  miniature. A token's cache entry per layer is one compressed latent ``c`` (``kv_lora_rank``),
  one rope key part shared by all heads (``qk_rope_dim``, stored already rotated) and the
  indexer's key (``index_dim``). Not absorbed: each layer up-projects the latent of every key to
  per-head ``k_nope`` and ``v`` (the MHA form prefill kernels use); the absorbed form would fold
  those projections into the query and the output instead. A lightweight indexer (``index_heads``
  ReLU heads, per-query head weights) scores every causal key and each query attends only its
  ``index_topk`` best keys (ties to the lower position).
- ``gqa``: plain grouped-query attention; the cache entry is the rotated K and V of the KV heads.

The layer is cut where a paged executor needs it: ``kv_entries`` (the rows a token writes into its
page), ``attend`` (a request's query rows against its gathered cache rows) and ``mlp``. All of it
uses the batch-invariant primitives of ``ops`` in float64. Greedy first token: argmax, first
index on ties.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from prefillkit.exec import ops

DTYPE = torch.float64
Kind = Literal["mla_dsa", "gqa"]


@dataclass(frozen=True)
class ModelConfig:
    kind: Kind = "mla_dsa"
    vocab: int = 96
    d_model: int = 32
    n_layers: int = 2
    n_heads: int = 4
    d_ff: int = 48
    # GQA
    n_kv_heads: int = 2
    head_dim: int = 8
    # MLA
    kv_lora_rank: int = 12
    qk_nope_dim: int = 6
    qk_rope_dim: int = 4
    v_head_dim: int = 6
    # DSA indexer
    index_heads: int = 2
    index_dim: int = 6
    index_topk: int = 12
    rope_theta: float = 10000.0
    max_positions: int = 4096
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in ("mla_dsa", "gqa"):
            raise ValueError(f"unknown model kind {self.kind!r}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError("n_heads must be a multiple of n_kv_heads")
        if self.qk_rope_dim % 2 or self.head_dim % 2:
            raise ValueError("rope dims must be even")

    @property
    def kv_width(self) -> int:
        """Values per token per layer in the KV cache."""
        if self.kind == "mla_dsa":
            return self.kv_lora_rank + self.qk_rope_dim + self.index_dim
        return 2 * self.n_kv_heads * self.head_dim


def _rope_tables(n_pos: int, dim: int, theta: float) -> tuple[Tensor, Tensor]:
    inv = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=DTYPE) / dim))
    angles = torch.arange(n_pos, dtype=DTYPE).unsqueeze(1) * inv.unsqueeze(0)
    return torch.cos(angles), torch.sin(angles)


def _rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate pairs (x[2i], x[2i+1]) of the last dim; cos/sin broadcast over the middle dims."""
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x1 * cos - x2 * sin
    out[..., 1::2] = x1 * sin + x2 * cos
    return out


class Model:
    """Weights (float64, from ``cfg.seed``) and the layer pieces a paged executor calls."""

    def __init__(self, cfg: ModelConfig, device: str | torch.device = "cpu") -> None:
        self.cfg = cfg
        self.device = torch.device(device)
        gen = torch.Generator().manual_seed(cfg.seed)

        def mat(din: int, dout: int) -> Tensor:
            w = torch.randn(din, dout, generator=gen, dtype=DTYPE) / din**0.5
            return w.to(self.device)

        c = cfg
        self.embedding = torch.randn(c.vocab, c.d_model, generator=gen, dtype=DTYPE).to(self.device)
        self.layers: list[dict[str, Tensor]] = []
        for _ in range(c.n_layers):
            w: dict[str, Tensor] = {
                "attn_norm": torch.ones(c.d_model, dtype=DTYPE, device=self.device),
                "mlp_norm": torch.ones(c.d_model, dtype=DTYPE, device=self.device),
            }
            if c.kind == "mla_dsa":
                w["wq"] = mat(c.d_model, c.n_heads * (c.qk_nope_dim + c.qk_rope_dim))
                w["wkv"] = mat(c.d_model, c.kv_lora_rank + c.qk_rope_dim)
                w["kv_norm"] = torch.ones(c.kv_lora_rank, dtype=DTYPE, device=self.device)
                w["wuk"] = mat(c.kv_lora_rank, c.n_heads * c.qk_nope_dim)
                w["wuv"] = mat(c.kv_lora_rank, c.n_heads * c.v_head_dim)
                w["wo"] = mat(c.n_heads * c.v_head_dim, c.d_model)
                w["wiq"] = mat(c.d_model, c.index_heads * c.index_dim)
                w["wik"] = mat(c.d_model, c.index_dim)
                w["wiw"] = mat(c.d_model, c.index_heads)
            else:
                w["wq"] = mat(c.d_model, c.n_heads * c.head_dim)
                w["wk"] = mat(c.d_model, c.n_kv_heads * c.head_dim)
                w["wv"] = mat(c.d_model, c.n_kv_heads * c.head_dim)
                w["wo"] = mat(c.n_heads * c.head_dim, c.d_model)
            w["w1"] = mat(c.d_model, c.d_ff)
            w["w2"] = mat(c.d_ff, c.d_model)
            self.layers.append(w)
        self.final_norm = torch.ones(c.d_model, dtype=DTYPE, device=self.device)
        self.lm_head = mat(c.d_model, c.vocab)
        rope_dim = c.qk_rope_dim if c.kind == "mla_dsa" else c.head_dim
        cos, sin = _rope_tables(c.max_positions, rope_dim, c.rope_theta)
        self.cos, self.sin = cos.to(self.device), sin.to(self.device)

    # -- token-local pieces -------------------------------------------------------------------

    def embed(self, token_ids: Tensor) -> Tensor:
        if int(token_ids.max()) >= self.cfg.vocab or int(token_ids.min()) < 0:
            raise ValueError("token id outside the vocabulary")
        return self.embedding[token_ids]

    def attn_input(self, layer: int, x: Tensor) -> Tensor:
        return ops.rms_norm(x, self.layers[layer]["attn_norm"])

    def kv_entries(self, layer: int, h: Tensor, positions: Tensor) -> Tensor:
        """Cache rows [N, kv_width] of tokens with normed inputs h at absolute positions."""
        c, w = self.cfg, self.layers[layer]
        cos, sin = self.cos[positions], self.sin[positions]
        if c.kind == "mla_dsa":
            kv = ops.linear(h, w["wkv"])
            latent = ops.rms_norm(kv[:, : c.kv_lora_rank], w["kv_norm"])
            k_rope = _rotate(kv[:, c.kv_lora_rank :], cos, sin)
            k_index = ops.linear(h, w["wik"])
            return torch.cat([latent, k_rope, k_index], dim=1)
        k = ops.linear(h, w["wk"]).view(-1, c.n_kv_heads, c.head_dim)
        k = _rotate(k, cos.unsqueeze(1), sin.unsqueeze(1)).reshape(h.shape[0], -1)
        v = ops.linear(h, w["wv"])
        return torch.cat([k, v], dim=1)

    def mlp(self, layer: int, x: Tensor) -> Tensor:
        w = self.layers[layer]
        h = ops.rms_norm(x, w["mlp_norm"])
        return ops.linear(torch.relu(ops.linear(h, w["w1"])), w["w2"])

    def logits(self, x: Tensor) -> Tensor:
        return ops.linear(ops.rms_norm(x, self.final_norm), self.lm_head)

    # -- attention ----------------------------------------------------------------------------

    def attend(self, layer: int, h: Tensor, q_pos: Tensor, kv: Tensor) -> Tensor:
        """Attention output [Nq, d_model] (after the output projection) of one request's query
        rows (normed inputs h at absolute positions q_pos) over its cache rows kv [S, kv_width],
        key s at position s."""
        c, w = self.cfg, self.layers[layer]
        n_keys = kv.shape[0]
        causal = torch.arange(n_keys, device=kv.device).unsqueeze(0) <= q_pos.unsqueeze(1)
        cos, sin = self.cos[q_pos].unsqueeze(1), self.sin[q_pos].unsqueeze(1)
        if c.kind == "mla_dsa":
            r, dn, dr = c.kv_lora_rank, c.qk_nope_dim, c.qk_rope_dim
            q = ops.linear(h, w["wq"]).view(-1, c.n_heads, dn + dr)
            q_nope, q_rope = q[..., :dn], _rotate(q[..., dn:], cos, sin)
            latent, k_rope, k_index = kv[:, :r], kv[:, r : r + dr], kv[:, r + dr :]
            k_nope = ops.linear(latent, w["wuk"]).view(n_keys, c.n_heads, dn)
            v = ops.linear(latent, w["wuv"]).view(n_keys, c.n_heads, c.v_head_dim)
            # scores[q, head, s], accumulated over nope dims then rope dims
            scores = ops.dot_last(q_nope.unsqueeze(2), k_nope.permute(1, 0, 2).unsqueeze(0))
            for i in range(dr):
                scores = scores + q_rope[..., i : i + 1] * k_rope[:, i]
            scores = scores * (1.0 / (dn + dr) ** 0.5)
            mask = causal & self._index_select(layer, h, k_index, causal)
            out = ops.masked_softmax_weighted_sum(scores, mask.unsqueeze(1), v)
            return ops.linear(out.reshape(h.shape[0], -1), w["wo"])
        hd, group = c.head_dim, c.n_heads // c.n_kv_heads
        q = _rotate(ops.linear(h, w["wq"]).view(-1, c.n_heads, hd), cos, sin)
        half = c.n_kv_heads * hd
        k = kv[:, :half].reshape(n_keys, c.n_kv_heads, hd).repeat_interleave(group, dim=1)
        v = kv[:, half:].reshape(n_keys, c.n_kv_heads, hd).repeat_interleave(group, dim=1)
        scores = ops.dot_last(q.unsqueeze(2), k.permute(1, 0, 2).unsqueeze(0)) * (1.0 / hd**0.5)
        out = ops.masked_softmax_weighted_sum(scores, causal.unsqueeze(1), v)
        return ops.linear(out.reshape(h.shape[0], -1), w["wo"])

    def index_scores(self, layer: int, h: Tensor, k_index: Tensor) -> Tensor:
        """DSA indexer: score[q, s] = sum_heads w[q, head] * relu(q_idx[q, head] . k_idx[s])."""
        c, w = self.cfg, self.layers[layer]
        qi = ops.linear(h, w["wiq"]).view(-1, c.index_heads, c.index_dim)
        wi = ops.linear(h, w["wiw"])
        per_head = torch.relu(ops.dot_last(qi.unsqueeze(2), k_index.unsqueeze(0).unsqueeze(0)))
        acc = wi[:, 0:1] * per_head[:, 0]
        for j in range(1, c.index_heads):
            acc = acc + wi[:, j : j + 1] * per_head[:, j]
        return acc

    def _index_select(self, layer: int, h: Tensor, k_index: Tensor, causal: Tensor) -> Tensor:
        scores = self.index_scores(layer, h, k_index)
        return ops.topk_mask(scores, causal, self.cfg.index_topk)


def first_token(logits: Tensor) -> int:
    """Greedy first token (the first index among equal maxima)."""
    return int(torch.argmax(logits))
