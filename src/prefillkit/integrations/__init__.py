"""prefillkit inside real serving engines (optional; each subpackage needs its engine).

- ``sglang``: a plugin that puts prefillkit's admission into SGLang's own scheduler, and
  a scheduler backend that replays traces through SGLang's real admission objects.

Nothing here is imported by the core, the simulator or the application layer unless a
user asks for an engine (``replay --scheduler sglang``); each module that imports the
engine says so, and a missing engine is one line naming the extra.
"""
