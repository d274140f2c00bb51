"""The whole-engine fuzz's per-batch checks can fail: each catches a deliberate mutation.

Each case edits the source text of a scratch copy of one of the scheduler's modules
(``prefillkit.sched.adder``, ``prefill_pass``, ``launch``, ...; the installed modules are
untouched), loads it and every scheduler module that imports it as fresh modules, points
the engine's factory at the copies' ``Scheduler`` and runs the fuzz's scenarios
until one fails. The failure must come from the check named by the case (its assertion
message starts with the tag): failures of other checks are skipped over, so a case
passes only when *that* check sees the mutation. Invariant checks are off (a mutation
often breaks the cache accounting first, which would hide the check under test).

Marked slow (a minute or two): ``pytest --run-slow tests/slow/test_fuzz_mutations.py``.
When a mutated line no longer exists in the source, the case fails saying so: update it.
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings

import prefillkit.sched
import prefillkit.sim.engine as engine_mod

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import test_fuzz_engine as fz

pytestmark = pytest.mark.slow

#: Examples tried per mutation before giving up (the cases are caught in far fewer).
MAX_TRIES = 2500


@dataclass(frozen=True, slots=True)
class Mutation:
    name: str
    module: str  # a module of prefillkit.sched, one of CHAIN
    old: str  # source text replaced (every occurrence; must occur)
    new: str
    tag: str  # the assertion-message prefix of the check that must catch it
    check: str  # "caps", "chunks", "latency" or "ttft"


MUTATIONS = [
    Mutation(
        "CP bs=1 gate off",
        "adder",
        "if limits.cp_mode is CpMode.BS1:",
        "if False:",
        "cap:cp_bs1",
        "caps",
    ),
    Mutation(
        "cp_max_requests off by one",
        "adder",
        "len(can_run) >= limits.cp_max_requests",
        "len(can_run) > limits.cp_max_requests",
        "cap:cp_max_requests",
        "caps",
    ),
    Mutation(
        "CP extend limit ignores the candidate",
        "adder",
        "self.batch_extend_tokens + ext > self.cp_extend_limit",
        "self.batch_extend_tokens > self.cp_extend_limit",
        "cap:cp_max_total_extend_tokens",
        "caps",
    ),
    Mutation(
        "CP cached limit ignores the candidate",
        "adder",
        "self.batch_cached_tokens + prefix_len > limits.cp_max_cached_tokens",
        "self.batch_cached_tokens > limits.cp_max_cached_tokens",
        "cap:cp_max_cached_tokens",
        "caps",
    ),
    Mutation(
        "buffer limit estimates the batch without the candidate",
        "adder",
        "shapes = [*self.batch_shapes, BufferReqShape(prefix_len, extend, loaded)]",
        "shapes = self.batch_shapes",
        "cap:cp_max_buffer_size",
        "caps",
    ),
    Mutation(
        "chunked requests not solo in CP batches",
        "adder",
        "if self.has_chunked_req_in_batch and not self.chunk_allows_followers():",
        "if False:",
        "cap:chunked_solo",
        "caps",
    ),
    Mutation(
        "chunk cut one page past the chunk budget",
        "adder",
        "extend = ext = (chunk - self.batch_extend_tokens) // p * p\n",
        "extend = ext = (chunk - self.batch_extend_tokens) // p * p + p\n",
        "cap:chunk_budget",
        "caps",
    ),
    Mutation(
        "max_prefill_tokens (chunking off) with slack",
        "adder",
        ">= rem_input",
        "> rem_input + 4 * p",
        "cap:max_prefill_tokens",
        "caps",
    ),
    Mutation(
        "max_prefill_tokens back as a per-candidate test with chunking on",
        "adder",
        "chunk is None and can_run",
        "can_run",
        "cap:max_prefill_tokens_close",
        "caps",
    ),
    Mutation(
        "input budget never closes the batch",
        "adder",
        "if used >= self.input_budget:",
        "if used >= self.input_budget + 10**9:",
        "cap:max_prefill_tokens",
        "caps",
    ),
    Mutation(
        "one request slot too many",
        "prefill_pass",
        "slots = st.max_running_requests - len(st.running)",
        "slots = st.max_running_requests - len(st.running) + 1",
        "cap:max_running_requests",
        "caps",
    ),
    Mutation(
        "chunk boundary shifted back one token",
        "launch",
        "req.computed_tokens = req.prefix_len + req.extend_input_len\n",
        "req.computed_tokens = req.prefix_len + req.extend_input_len - (\n"
        "        1 if req.prefix_len + req.extend_input_len < req.input_len else 0)\n",
        "chunk:continuity",
        "chunks",
    ),
    Mutation(
        "chunk cut one token short of the page",
        "adder",
        "            extend = ext = (chunk - self.batch_extend_tokens) // p * p\n",
        "            ext = (chunk - self.batch_extend_tokens) // p * p\n"
        "            extend = ext - 1 if ext > 1 else ext\n",
        "chunk:unaligned cut",
        "chunks",
    ),
    Mutation(
        "reported host hit is the host match, not what was loaded",
        "launch",
        "req.host_hit_tokens = req.loaded_tokens",
        "req.host_hit_tokens = req.host_hit_len",
        "hit:reported",
        "chunks",
    ),
    Mutation(
        "reported device hit one unit too long",
        "launch",
        "req.device_hit_tokens = req.device_prefix_len",
        "req.device_hit_tokens = req.device_prefix_len + req.key_tokens",
        "hit:reported",
        "chunks",
    ),
    Mutation(
        "the request's host match claims a key unit more than the cache holds",
        "adder",
        "req.host_hit_len = host_hit\n",
        "req.host_hit_len = host_hit + kt\n",
        "hit:match",
        "chunks",
    ),
    Mutation(
        "wait bound (aging) disabled",
        "prefill_pass",
        "max_wait_s=max_wait,",
        "max_wait_s=None,",
        "wait:",
        "latency",
    ),
    Mutation(
        "first token time overwritten by a re-prefill",
        "launch",
        "if req.first_token_time is None:\n                # The first token's time",
        "if True:\n                # The first token's time",
        "ttft:",
        "ttft",
    ),
]


def _load(name: str, source: str, path: str) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__file__ = path
    sys.modules[name] = mod  # dataclasses look their module up while the class is built
    exec(compile(source, path, "exec"), mod.__dict__)
    return mod


#: The scheduler's modules, each after every one of them it imports.
CHAIN = (
    "adder",
    "batch",
    "step",
    "state",
    "waiting",
    "decode",
    "preempt",
    "launch",
    "prefill_pass",
    "scheduler",
)


def _mutated_scheduler(m: Mutation) -> type:
    """The ``Scheduler`` of scratch copies of the scheduler's modules from ``m.module`` on
    (in import order), ``m`` applied to its module's copy."""
    copies: dict[str, types.ModuleType] = {}
    with pytest.MonkeyPatch.context() as mp:
        for name in CHAIN[CHAIN.index(m.module) :]:
            real = importlib.import_module(f"prefillkit.sched.{name}")
            assert real.__file__ is not None
            text = Path(real.__file__).read_text(encoding="utf-8")
            if name == m.module:
                assert m.old in text, f"{m.name}: {m.old!r} is no longer in sched/{name}.py"
                text = text.replace(m.old, m.new)
            copies[name] = _load(f"prefillkit_mutant_{name}", text, f"<mutant {name}>")
            # The copies loaded after it import it (by name or as a module) while loading.
            mp.setitem(sys.modules, f"prefillkit.sched.{name}", copies[name])
            mp.setattr(prefillkit.sched, name, copies[name])
    cls: type = copies["scheduler"].Scheduler
    return cls


def _checker(name: str) -> Callable[[fz.Scenario], None]:
    def caps(sc: fz.Scenario) -> None:
        engine, _, log = fz.replay(sc, check_every=10**9)
        fz.check_caps(sc, engine, log)

    def chunks(sc: fz.Scenario) -> None:
        engine, result, log = fz.replay(sc, check_every=10**9)
        fz.check_chunks(sc, engine, result, log)

    def latency(sc: fz.Scenario) -> None:
        engine, result, log = fz.replay(sc, check_every=10**9)
        fz.check_latency(engine, result, log)

    def ttft(sc: fz.Scenario) -> None:
        engine, result, log = fz.replay(sc, check_every=10**9)
        fz.check_ttft(engine, result, log)

    return {"caps": caps, "chunks": chunks, "latency": latency, "ttft": ttft}[name]


@pytest.mark.parametrize("m", MUTATIONS, ids=[m.name for m in MUTATIONS])
def test_fuzz_catches_mutation(m: Mutation, monkeypatch: pytest.MonkeyPatch) -> None:
    # NOTE: the factory's parameters are the Scheduler's.
    monkeypatch.setattr(engine_mod, "build_scheduler", _mutated_scheduler(m))
    check = _checker(m.check)
    seen: list[str] = []
    tried = [0]

    @settings(
        max_examples=MAX_TRIES,
        deadline=None,
        database=None,
        derandomize=True,
        phases=[Phase.generate],
        report_multiple_bugs=False,
        suppress_health_check=list(HealthCheck),
    )
    @given(sc=fz.scenarios())
    def run(sc: fz.Scenario) -> None:
        tried[0] += 1
        try:
            check(sc)
        except AssertionError as exc:
            if str(exc).startswith(m.tag):
                raise
            seen.append(str(exc).splitlines()[0][:120])
        except Exception as exc:  # the mutant crashed elsewhere: not this check
            seen.append(f"{type(exc).__name__}: {exc}"[:120])

    try:
        run()
    except AssertionError as exc:
        assert str(exc).startswith(m.tag), (m.name, str(exc)[:300], seen[:5])
        return
    raise AssertionError(f"{m.name}: not caught in {tried[0]} examples; other: {seen[:5]}")
