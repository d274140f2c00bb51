"""Drive the executor from the scheduler's step result (``sched.interface.StepOutput``).

:func:`step_plan` turns one ``StepOutput`` into the executor's plan
(:class:`~prefillkit.exec.plan.StepPlan`) and decides nothing: every page id, host slot and
extend range is the scheduler's.

- **Page ids.** The scheduler hands out lane-local ids per owner lane; its engine-facing id of
  lane-local page ``k`` of lane ``i`` is ``k * R + i``. Lane ``i``'s executor pool (rank ``i``
  under CP) is indexed by the lane-local id ``k``, so an engine-facing id ``g`` is page
  ``g // R`` of lane ``g % R`` (checked: sequence page ``j`` must be on lane ``j % R``).
- **Host slots.** The scheduler's host tier has *one* slot id space (``cache/host.py``): a slot
  holds one page of one lane. Every rank keeps a host array over that whole id space and only
  ever touches the slots that hold its own lane's pages (the copy's lane is the device page's
  lane), so ``HostCopy(lane, slot, page)`` keeps its meaning with ``slot`` the scheduler's id.
  (A rank's array is as long as the whole host tier: R times what it needs, which is nothing
  for the small executor.)
- **Backups.** The step result names load-backs (``ScheduledReq.load_back``) but not backups:
  a page is written to host when the cache says so (write-through at ``forward_done``,
  write-back at eviction inside ``schedule``, write-through-selective on a hit), and the cache
  says so in its KV events. :class:`StepDriver` listens (``set_kv_listener``): it remembers the
  device pages of every device-resident key unit (``BlockStored`` on GPU, ``BlockLoadedBack``)
  and turns each ``BlockStored`` on CPU into device page -> host slot copies, queued for the
  next step's plan. The plan runs backups, then load-backs, then the forward; no forward runs
  between the event and the copy, so the device page still holds what the event named (a page
  freed by the same eviction may be handed out again in this step: it is written only by this
  step's forward, after the copy).
- **Dedup at forward_done.** A request whose pages duplicate pages another request cached first
  gets its page table rewritten to the cached pages (``page_table(req)``); its next chunk's
  prefix pages come from the next step's ``prefix_page_ids()``. The executor computes every
  page with batch-invariant arithmetic, so the cached pages hold bit for bit what the freed
  duplicates held: nothing to copy.
- **Tokens.** The scheduler sees key chains, not token ids. For token-id requests the caller
  passes the prompts; for block-hashed traces :class:`SyntheticTokens` makes token ids from the
  keys (unit ``i``'s tokens are a function of key ``i``, which names the whole prefix through
  unit ``i``: equal keys give equal tokens, so cache hits are real) and, past the keyed units,
  from the request id.

Greedy first token: :meth:`StepDriver.forward` returns the step's first-token logits; the first
tokens are their argmax (``first_tokens``).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import xxhash

from prefillkit.cache.events import BlockLoadedBack, BlockRemoved, BlockStored, KVEvent
from prefillkit.exec.plan import HostCopy, ReqPlan, StepPlan

if TYPE_CHECKING:
    from prefillkit.request import Request
    from prefillkit.sched.interface import ScheduledReq, SchedulerInterface, StepOutput

__all__ = ["PlanExecutor", "StepDriver", "SyntheticTokens", "lane_tables", "req_plan", "step_plan"]

TokensOf = Callable[["Request"], Sequence[int]]


class PlanExecutor(Protocol):
    """What the driver needs of an executor (``exec.executor.Executor``)."""

    def step(self, plan: StepPlan) -> Any: ...


def lane_tables(
    page_ids: Sequence[int], start_page: int, cp_size: int
) -> tuple[tuple[int, ...], ...]:
    """Engine-facing ids of sequence pages ``start_page, start_page + 1, ...`` as the executor's
    per-lane lane-local ids (``g -> g // R`` on lane ``g % R``); refuses a page on the wrong
    lane."""
    lanes: list[list[int]] = [[] for _ in range(cp_size)]
    for j, pid in enumerate(page_ids, start_page):
        lane = pid % cp_size
        if lane != j % cp_size:
            raise ValueError(f"sequence page {j} got page {pid} of lane {lane}, not {j % cp_size}")
        lanes[lane].append(pid // cp_size)
    return tuple(tuple(t) for t in lanes)


def req_plan(s: ScheduledReq, tokens: Sequence[int], page_size: int, cp_size: int) -> ReqPlan:
    """One scheduled request as the executor's request plan (the scheduler's pages, as given)."""
    if s.extend_start != s.prefix_len:
        raise ValueError(
            f"request {s.rid!r}: extend starts at {s.extend_start}, prefix {s.prefix_len}"
        )
    if s.new_start_page != s.prefix_len // page_size:
        raise ValueError(
            f"request {s.rid!r}: new pages start at page {s.new_start_page}, "
            f"prefix ends at token {s.prefix_len}"
        )
    if len(tokens) < s.extend_end:
        raise ValueError(
            f"request {s.rid!r}: {len(tokens)} token ids, extend ends at {s.extend_end}"
        )
    return ReqPlan(
        rid=s.rid,
        token_ids=tuple(tokens[s.extend_start : s.extend_end]),
        prefix_len=s.prefix_len,
        prefix_pages=lane_tables(s.prefix_page_ids(), 0, cp_size),
        new_pages=lane_tables(s.page_ids(), s.new_start_page, cp_size),
        is_chunk=s.is_chunk,
    )


def step_plan(
    step: StepOutput,
    reqs: Sequence[Request],
    tokens_of: TokensOf,
    page_size: int,
    cp_size: int,
    backups: Sequence[HostCopy] = (),
) -> StepPlan:
    """The executor's plan of one scheduler step: its requests in batch order (``reqs``: the
    engine's requests, in the step's order), the host backups the cache made since the last
    step (``backups``) and the step's load-backs."""
    plans = tuple(
        req_plan(s, tokens_of(r), page_size, cp_size) for s, r in zip(step.reqs, reqs, strict=True)
    )
    loads = tuple(
        HostCopy(dev % cp_size, slot, dev // cp_size)
        for s in step.reqs
        for slot, dev in s.load_back
    )
    return StepPlan(plans, loads=loads, backups=tuple(backups))


class SyntheticTokens:
    """Token ids for requests known by key chain only (block-hashed traces).

    Keyed unit ``i`` (``key_tokens`` tokens) draws its tokens from a generator seeded with key
    ``i``; the tokens past the keyed units (a partial unit, kept output after a requeue) from
    one seeded with the request id. Equal keys mean equal prefixes, so two requests sharing a
    cached prefix get the same tokens for it.
    """

    def __init__(self, vocab: int) -> None:
        self.vocab = vocab
        self._cache: dict[str, list[int]] = {}

    def __call__(self, req: Request) -> list[int]:
        toks = self._cache.get(req.rid)
        if toks is None:
            toks = []
            for key in req.keys:
                rng = random.Random(key)
                toks.extend(rng.randrange(self.vocab) for _ in range(req.key_tokens))
            self._cache[req.rid] = toks
        if len(toks) < req.state.input_len:
            rng = random.Random(xxhash.xxh3_64_intdigest(f"{req.rid}:{len(toks)}".encode()))
            toks.extend(rng.randrange(self.vocab) for _ in range(req.state.input_len - len(toks)))
        return toks


class StepDriver:
    """Runs each scheduler step on one in-process executor (R = 1, or R ranks of a ``Comm``).

    ``bind(sched)`` attaches the KV listener that turns the cache's host backups into copies;
    ``plan(step)`` builds the step's plan (taking the queued backups); ``forward(step)`` plans,
    executes and times the forward (``clock``: ``wall`` or ``cpu``, see :meth:`forward`),
    keeping the first-token logits in ``logits``. The executor must be built for the
    scheduler's pool: ``cp_size`` lanes of at least the lane capacity in pages, host slots for
    the whole host tier (a driver without one only plans: :meth:`plan`).
    """

    breakdown_keys: tuple[str, ...] = ("total", "wall", "cpu")

    def __init__(
        self,
        executor: PlanExecutor | None,
        tokens_of: TokensOf,
        page_size: int,
        cp_size: int,
        *,
        keep_logits: bool = True,
        clock: str = "wall",
    ) -> None:
        if clock not in ("wall", "cpu"):
            raise ValueError(f"clock must be wall or cpu, got {clock!r}")
        self.clock = clock
        self.executor = executor
        self.tokens_of = tokens_of
        self.page_size = page_size
        self.cp_size = cp_size
        self.keep_logits = keep_logits
        self.pending_backups: list[HostCopy] = []
        self._device_pages: dict[int, tuple[int, ...]] = {}  # key unit -> engine-facing pages
        self.logits: dict[str, Any] = {}  # rid -> first-token logits (last prefill)
        self.first_tokens: dict[str, int] = {}
        self.forward_seconds: list[float] = []
        # Per forward, per request: (prefix_len, extend_len, loaded_tokens); with
        # forward_seconds, the calibration input (``prefillkit calibrate``'s batch CSV).
        self.shapes: list[tuple[tuple[int, int, int], ...]] = []

    def forwards_csv(self) -> str:
        """The measured forwards in ``prefillkit calibrate``'s batch CSV format: one row per
        request of each forward (``batch_id`` = the forward's index, as in ``batches.csv``)."""
        lines = ["batch_id,prefix_len,extend_len,loaded_tokens,seconds"]
        for b, (shapes, sec) in enumerate(zip(self.shapes, self.forward_seconds, strict=True)):
            lines += [f"{b},{p},{e},{ld},{sec!r}" for p, e, ld in shapes]
        return "\n".join(lines) + "\n"

    # ------------------------------------------------------------------ KV events
    def bind(self, sched: SchedulerInterface) -> None:
        sched.set_kv_listener(self.on_kv_event)

    def on_kv_event(self, ev: KVEvent) -> None:
        if isinstance(ev, BlockStored):
            n = len(ev.keys)
            if ev.medium == "GPU":
                u = len(ev.pages) // n
                for i, key in enumerate(ev.keys):
                    self._device_pages[key] = ev.pages[i * u : (i + 1) * u]
            else:
                u = len(ev.slots) // n
                for i, key in enumerate(ev.keys):
                    pages = self._device_pages[key]
                    for slot, dev in zip(ev.slots[i * u : (i + 1) * u], pages, strict=True):
                        self.pending_backups.append(
                            HostCopy(dev % self.cp_size, slot, dev // self.cp_size)
                        )
        elif isinstance(ev, BlockLoadedBack):
            n = len(ev.keys)
            u = len(ev.copies) // n
            for i, key in enumerate(ev.keys):
                self._device_pages[key] = tuple(dev for _, dev in ev.copies[i * u : (i + 1) * u])
        elif isinstance(ev, BlockRemoved) and ev.medium == "CPU":
            for key in ev.keys:  # NOTE: a host-only unit left the tree
                self._device_pages.pop(key, None)

    # ------------------------------------------------------------------ steps
    def plan(self, step: StepOutput, reqs: Sequence[Request]) -> StepPlan:
        """The step's plan; takes the backups queued since the last plan."""
        backups, self.pending_backups = self.pending_backups, []
        return step_plan(step, reqs, self.tokens_of, self.page_size, self.cp_size, backups)

    def forward(self, step: StepOutput, reqs: Sequence[Request]) -> dict[str, float]:
        """Execute the step: ``{"wall": its wall-clock seconds, "cpu": this thread's CPU
        seconds in it, "total": the one of the two ``clock`` names}``.

        On a machine shared with other work the wall clock counts the time the forward waited
        for a core; the thread's CPU time does not (torch runs one thread: ``set_num_threads(1)``).
        """
        plan = self.plan(step, reqs)
        assert self.executor is not None
        c0, t0 = time.thread_time(), time.perf_counter()
        out = self.executor.step(plan)
        wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
        seconds = wall if self.clock == "wall" else cpu
        self.forward_seconds.append(seconds)
        self.shapes.append(tuple((s.prefix_len, s.extend_len, s.loaded_tokens) for s in step.reqs))
        for rid, v in out.logits.items():
            self.first_tokens[str(rid)] = int(v.argmax())
            if self.keep_logits:
                self.logits[str(rid)] = v
        return {"total": seconds, "wall": wall, "cpu": cpu}
