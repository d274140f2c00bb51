"""The row type of the published prefill figures (:mod:`prefillkit.cost.published`).

Every row names its source precisely enough to find the number (document, section,
table or figure), the shape the source measured it on, and in ``assumptions`` every
element of the shape the source does not state together with what was assumed for it.
Where a source contradicts itself, or an earlier transcription of it was wrong, ``notes``
says so.

Field conventions (checked by ``tests/test_published.py``):

* ``num_gpus`` is the GPUs of ONE prefill instance (one engine the request runs on), not
  the cluster: ``num_gpus == tp_size * dp_attention * cp_size * pp_size``, where
  ``tp_size`` is the attention tensor-parallel degree inside one DP-attention rank,
  ``dp_attention`` the number of DP-attention ranks, ``cp_size`` the context-parallel
  degree and ``pp_size`` the pipeline stages.
* ``ep_size`` is the expert-parallel degree of the MoE layers, which reuse the GPUs of a
  pipeline stage: ``ep_size`` divides ``num_gpus // pp_size`` and each expert is
  tensor-sharded over the rest (:attr:`PublishedFigure.moe_tp_size`); ``ep_size == 1``
  means the MoE is tensor-parallel over the whole stage.
* ``batch_tokens_per_gpu`` is the number of prompt tokens in one forward of the GPU's
  attention rank (under CP the GPU's query-token share); ``None`` where not stated.
* ``metric``: ``tok/s/node`` (input tokens/s per 8-GPU node), ``tok/s/gpu``,
  ``s/prompt`` (time to first token of one prompt, alone in the engine) or ``ms/layer``
  (one decoder layer's forward; ``components`` then holds its measured split, in ms).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["METRICS", "PublishedFigure"]

#: The metrics a row may be expressed in.
METRICS: tuple[str, ...] = ("tok/s/node", "tok/s/gpu", "s/prompt", "ms/layer")


@dataclass(frozen=True, slots=True)
class PublishedFigure:
    """One published prefill figure and the shape it was measured on."""

    name: str  # short row label
    source: str  # author/org, title, URL path, date, and where in it the figure is
    model: str  # prefillkit model preset, or the HF id when no preset exists (see notes)
    gpu: str  # prefillkit GPU preset, or the GPU's name when no preset exists (see notes)
    num_gpus: int  # GPUs of ONE prefill instance
    tp_size: int  # attention TP per DP-attention rank
    dp_attention: int  # DP-attention ranks
    ep_size: int  # MoE expert-parallel degree (1 = MoE tensor-parallel)
    cp_size: int  # context-parallel degree
    prompt_len: int
    batch_tokens_per_gpu: int | None  # prompt tokens per forward of one attention rank
    chunk_size: int | None  # chunked-prefill size where it matters (long prompts)
    precision: str  # GEMM / MoE / attention / KV precisions
    balancing: str  # "EPLB", "perfect (simulated)", "default", "n/a" (+ detail)
    two_batch_overlap: bool
    metric: str  # one of METRICS
    published: float
    assumptions: str  # every shape element the source does not state, and what was assumed
    notes: str = ""
    components: tuple[tuple[str, float], ...] = ()  # measured split of a ms/layer figure
    pp_size: int = 1  # pipeline-parallel stages
    engine: str = ""  # serving engine and version as the source gives it

    @property
    def moe_tp_size(self) -> int:
        """Tensor-parallel degree of each expert: the stage's GPUs not used for EP."""
        return self.num_gpus // self.pp_size // self.ep_size
