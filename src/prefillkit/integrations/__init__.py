"""prefillkit inside real serving engines (optional; each subpackage needs its engine).

- ``sglang``: a plugin that puts prefillkit's admission into SGLang's own scheduler, and
  a scheduler backend that replays traces through SGLang's real admission objects;
- ``vllm``: a scheduler class for vLLM's ``--scheduler-cls`` that orders vLLM's waiting
  queue with prefillkit's policies.

Nothing here is imported by the core, the simulator or the application layer unless a
user asks for an engine (``replay --scheduler sglang``); each module that imports the
engine says so, and a missing engine is one line naming the extra.
"""

from __future__ import annotations


def engine_installed(name: str) -> bool:
    """Whether the engine package ``name`` is importable, without importing it. NOTE: a
    folder named like it on the path is found as a namespace package (no origin): that is
    not the engine."""
    import importlib.util

    spec = importlib.util.find_spec(name)
    return spec is not None and spec.origin is not None
