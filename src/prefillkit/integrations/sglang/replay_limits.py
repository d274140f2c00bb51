"""What ``replay --scheduler sglang`` (and ``sglang+prefillkit``) can mirror, decided
without importing SGLang: :func:`refusal` (the one line a setting it cannot mirror gets)
and the sizes the backend builds SGLang's pools with.

The backend (``backend.py``) drives SGLang's admission on a *prefill-only* deployment
(``--mode pd-prefill``: each request's KV is sent out after its prefill, then released)
over one KV pool (no context-parallel owner lanes, no host tier), timed by the cost
model. Everything else is refused here, before SGLang is imported:

- ``--mode colocated``: SGLang's decode loop (decode steps, retraction, the decode
  reservation's ratio updates) is not driven;
- ``--cp-size`` > 1: the CPU harness builds no prefill context parallelism (SGLang's
  ``--enable-prefill-cp``), so neither SGLang's CP admission nor the plugin's CP
  batching can run;
- ``--enable-hierarchical-cache``: the harness has no host tier (HiCache);
- ``--enable-ignore-eos-admission``: a prefillkit extension (SGLang takes that path only
  with the radix cache disabled);
- ``--clip-max-new-tokens`` other than SGLang's ``SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION``
  (read by SGLang once, at import; checked by the backend).

Pure: imports nothing from SGLang.
"""

from __future__ import annotations

import os

from prefillkit.cost.deployment import SimSettings
from prefillkit.sched.config import ZOO_POLICIES

__all__ = [
    "DEMO_HINT",
    "SGLANG_CLIP_ENV",
    "max_req_input_len",
    "refusal",
    "resolved_max_running_requests",
    "sglang_clip",
]

#: The demo preset (the base without launch flags) runs CP 8 with HiCache: say how out.
DEMO_HINT = (
    "give an SGLang launch line instead of the demo preset, e.g. --disaggregation-mode "
    "prefill --tp 8"
)
SGLANG_CLIP_ENV = "SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION"


def sglang_clip() -> int:
    """SGLang's ``CLIP_MAX_NEW_TOKENS`` as its ``schedule_policy`` module reads it."""
    return int(os.environ.get(SGLANG_CLIP_ENV, "4096"))


def refusal(settings: SimSettings, scheduler: str) -> str | None:
    """The one line a setting ``--scheduler`` ``scheduler`` cannot mirror gets (naming
    its flag), or None."""
    cfg = settings.scheduler
    if settings.mode != "pd-prefill":
        return (
            f"--mode {settings.mode}: --scheduler {scheduler} replays prefill-only "
            "deployments (--mode pd-prefill, or --disaggregation-mode prefill); SGLang's "
            "decode loop is not driven"
        )
    if cfg.cp_size > 1:
        return (
            f"--cp-size {cfg.cp_size}: --scheduler {scheduler} runs SGLang without prefill "
            f"context parallelism (one KV pool, no owner lanes); {DEMO_HINT}"
        )
    if cfg.enable_hierarchical_cache:
        return (
            f"--enable-hierarchical-cache: --scheduler {scheduler} has no host KV tier "
            f"(HiCache); {DEMO_HINT}"
        )
    zoo = policy_zoo_setting(settings)
    if zoo is not None:
        return (
            f"{zoo}: a prefillkit policy (docs/policies.md) that --scheduler {scheduler} "
            "cannot run (SGLang's admission orders by its own policies: fcfs, lpm, "
            "dfs-weight, lof, random)"
        )
    if cfg.enable_ignore_eos_admission:
        return (
            f"--enable-ignore-eos-admission: a prefillkit extension that --scheduler "
            f"{scheduler} cannot mirror (SGLang takes that path only with the radix cache "
            "disabled)"
        )
    clip = sglang_clip()
    if cfg.clip_max_new_tokens != clip:
        return (
            f"--clip-max-new-tokens {cfg.clip_max_new_tokens}: SGLang clips at {clip} "
            f"({SGLANG_CLIP_ENV}); give the same value to --scheduler {scheduler}"
        )
    return None


def policy_zoo_setting(settings: SimSettings) -> str | None:
    """The flag of a policy-zoo setting in ``settings`` (docs/policies.md), or None."""
    cfg = settings.scheduler
    if cfg.schedule_policy in ZOO_POLICIES:
        return f"--schedule-policy {cfg.schedule_policy}"
    if cfg.lpm_aging_tokens_per_pass:
        return "--lpm-aging-tokens-per-pass"
    if cfg.enable_affinity and cfg.affinity_hold:
        return "--affinity-hold"
    if cfg.enable_affinity and cfg.affinity_classify != "floor":
        return f"--affinity-classify {cfg.affinity_classify}"
    return None


def resolved_max_running_requests(configured: int | None, pool_tokens: int) -> int:
    """The slot limit: the configured one, else prefillkit's default (the scheduler's
    ``SchedulerState``): ``min(4096, pool tokens / 2)``, at least 1."""
    return configured or max(1, min(4096, pool_tokens // 2))


def max_req_input_len(pool_tokens: int) -> int:
    """SGLang's ``max_req_input_len`` (``TpModelWorker.get_worker_info``): ``min(context
    length - 1, pool tokens - 1) - 5``; no context length is modelled here, so the pool's.
    A prompt at least this long is refused on arrival (``validate_input_length``)."""
    return pool_tokens - 1 - 5
