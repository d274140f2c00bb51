"""Measured replays: ``--executor torch`` runs every prefill step on the real executor.

The engine loop is the simulator's (``sim/engine.py``); its :class:`~prefillkit.sim.engine.
StepRunner` seam hands each ``StepOutput`` to :class:`prefillkit.exec.drive.StepDriver`, which
executes it on the small seeded model (``exec/model.py``, CPU, one thread) and returns the
forward's measured seconds as the batch's duration: wall clock (``torch``) or the thread's CPU
time (``torch-cpu``: what the forward cost, without the time it waited for a core on a busy
machine). Everything else is the replay's: the scheduler, its pool sizes, the outputs
(``requests.csv``; ``batches.csv`` with ``duration_s`` measured and ``t_wall_s`` / ``t_cpu_s``
instead of cost-model terms; ``summary.json`` with ``"executor"``; plus ``forwards.csv``, the
forwards in ``prefillkit calibrate``'s batch CSV format). KV transfer times still come from the
cost model (they do not occupy the executor). Token ids come from the requests' key chains
(``SyntheticTokens``), so cache hits are real hits on real KV.

Limits (each a one-line error): pd-prefill only (decode steps are not executed), one owner
lane (CP shared-KV runs over gloo in the tests, not in a timed replay), a KV pool the float64
model can hold (give ``--max-total-tokens``), prompts within the model's positions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from prefillkit.app.generator_choice import InputError
from prefillkit.cost.deployment import SimSettings
from prefillkit.cost.roofline import CostModel
from prefillkit.records.file_set import atomic_write_text
from prefillkit.request import Request
from prefillkit.sim.engine import SimResult
from prefillkit.sim.sizing import Deployment, resolve_deployment

if TYPE_CHECKING:
    from prefillkit.exec.drive import StepDriver

__all__ = [
    "EXECUTORS",
    "FORWARDS_FILE",
    "FORWARDS_KEY",
    "MISSING_TORCH",
    "MeasuredReplayError",
    "RunFlags",
    "check_executor",
    "load_cost_preset",
    "make_runner",
    "run_keys",
    "split_run_flags",
    "write_forwards",
]

#: ``sim``: the cost model; ``torch``: the executor, each forward timed on the wall clock;
#: ``torch-cpu``: the executor, timed by the thread's CPU time (reproducible on a busy machine).
EXECUTORS: tuple[str, ...] = ("sim", "torch", "torch-cpu")
MISSING_TORCH = "--executor torch needs: pip install 'prefillkit[torch]'"  # also torch-cpu
#: ``SimResult.extra`` key of a measured run's forwards (calibrate's batch CSV text).
FORWARDS_KEY = "forwards_csv"
#: The file a measured run writes them to, beside batches.csv.
FORWARDS_FILE = "forwards.csv"
#: Device pool + host tier the executor may allocate (float64 rows of the small model).
MAX_KV_BYTES = 512 * 2**20


class MeasuredReplayError(InputError):
    """A replay the executor cannot run (one line, names the option)."""


@dataclass(frozen=True, slots=True)
class RunFlags:
    """A run's options that are not config settings: what times the forwards."""

    executor: str = "sim"
    cost_preset: str | None = None  # a ``prefillkit calibrate`` preset for the simulator


_RUN_FLAGS = {"--executor": "executor", "--cost-preset": "cost_preset"}


def split_run_flags(flags: Sequence[str]) -> tuple[RunFlags, list[str]]:
    """``(RunFlags, the other flags)`` of a compare variant's flags: ``--executor X`` and
    ``--cost-preset FILE`` (or ``--flag=value``), each at most once."""
    found: dict[str, str] = {}
    rest: list[str] = []
    it = iter(flags)
    for token in it:
        name, eq, value = token.partition("=")
        if name not in _RUN_FLAGS:
            rest.append(token)
            continue
        if not eq:
            value = next(it, "")
        if name in found:
            raise MeasuredReplayError(f"{name} given twice")
        if not value:
            raise MeasuredReplayError(f"{name} needs a value")
        found[name] = value
    executor = found.get("--executor", "sim")
    if executor not in EXECUTORS:
        raise MeasuredReplayError(
            f"--executor: unknown executor {executor!r}; expected one of {', '.join(EXECUTORS)}"
        )
    preset = found.get("--cost-preset")
    if preset is not None and executor != "sim":
        raise MeasuredReplayError("--cost-preset times a simulated run: not with --executor torch")
    return RunFlags(executor, preset), rest


def run_keys(run: RunFlags) -> dict[str, str]:
    """``summary.json``'s keys for a run's non-default timing (none for a default run)."""
    out: dict[str, str] = {}
    if run.executor != "sim":
        out["executor"] = run.executor
    if run.cost_preset is not None:
        out["cost_preset"] = run.cost_preset
    return out


def load_cost_preset(path: str | None) -> CostModel | None:
    """The simulator's cost model from a calibrate preset file (None: the default model)."""
    if path is None:
        return None
    from prefillkit.cost.fit import load_preset

    try:
        return load_preset(Path(path))
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise MeasuredReplayError(f"--cost-preset {path}: {reason}") from None


def check_executor(executor: str, settings: SimSettings, dep: Deployment | None = None) -> None:
    """Refuse (one line) a replay ``executor`` cannot run; ``dep`` checks the pool size too."""
    if executor == "sim":
        return
    if executor not in EXECUTORS:
        raise MeasuredReplayError(
            f"--executor: unknown executor {executor!r}; expected one of {', '.join(EXECUTORS)}"
        )
    from prefillkit.exec import MissingExtraError, require_torch

    try:
        require_torch()
    except MissingExtraError:
        raise MeasuredReplayError(MISSING_TORCH) from None
    if settings.mode != "pd-prefill":
        raise MeasuredReplayError(
            f"--executor {executor} replays a prefill server only (--disaggregation-mode prefill): "
            "decode steps are not executed"
        )
    sc = settings.scheduler
    if sc.enable_cp_shared_kv and sc.cp_size > 1:
        raise MeasuredReplayError(
            f"--executor {executor} runs one owner lane: CP shared-KV (--enable-cp-shared-kv with "
            "--cp-size > 1) is not timed yet"
        )
    if dep is None:
        dep = resolve_deployment(settings, [])
    page = settings.page_size
    row_bytes = _row_bytes()
    kv_bytes = (dep.total_pages + dep.host_pages) * page * row_bytes
    if kv_bytes > MAX_KV_BYTES:
        fit = MAX_KV_BYTES // row_bytes // 2
        raise MeasuredReplayError(
            f"--executor {executor}: a KV pool of {dep.total_pages * page:,} tokens "
            f"(+ {dep.host_pages * page:,} host) is {kv_bytes / 2**20:,.0f} MiB for the "
            f"executor's float64 model; give --max-total-tokens (at most about {fit:,})"
        )


def _row_bytes() -> int:
    from prefillkit.exec.model import ModelConfig

    cfg = ModelConfig()
    return cfg.n_layers * cfg.kv_width * 8


def make_runner(
    executor: str, settings: SimSettings, requests: Sequence[Request]
) -> tuple[StepDriver | None, Deployment | None]:
    """The step runner for ``executor`` (``None`` for ``sim``) and the deployment it was
    sized for (pass both to the engine). Sets torch to one thread (stable timings)."""
    if executor == "sim":
        return None, None
    dep = resolve_deployment(settings, list(requests))
    check_executor(executor, settings, dep)
    import torch

    from prefillkit.exec.drive import StepDriver, SyntheticTokens
    from prefillkit.exec.executor import Executor
    from prefillkit.exec.model import Model, ModelConfig

    page = settings.page_size
    longest = max((r.state.input_len for r in requests), default=1)
    cfg = ModelConfig(max_positions=max(4096, -(-longest // page) * page))
    torch.set_num_threads(1)
    model = Model(cfg)
    _warm_up(model, page)
    ex = Executor(model, page, dep.total_pages, dep.host_pages)
    clock = "cpu" if executor == "torch-cpu" else "wall"
    driver = StepDriver(ex, SyntheticTokens(cfg.vocab), page, 1, keep_logits=False, clock=clock)
    return driver, dep


def _warm_up(model: object, page: int) -> None:
    """A few forwards on a scratch executor (same model), so the first timed forward does
    not pay torch's first-call costs."""
    from prefillkit.exec.executor import Executor
    from prefillkit.exec.plan import ReqPlan, StepPlan

    ex = Executor(model, page, 8)  # type: ignore[arg-type]
    tokens = tuple(range(2 * page + 1))
    cold = ReqPlan("w", tokens, 0, ((),), ((0, 1, 2),))
    hit = ReqPlan("h", tokens[page:], page, ((0,),), ((3, 4),))
    for _ in range(3):
        ex.step(StepPlan((cold,)))
        ex.step(StepPlan((hit,)))


def write_forwards(result: SimResult, out_dir: str | Path) -> Path | None:
    """Write a measured run's forwards (``forwards.csv``, calibrate's batch CSV: one row per
    request of each forward) into ``out_dir``; None for a simulated run."""
    text = result.extra.get(FORWARDS_KEY)
    if not isinstance(text, str):
        return None
    path = Path(out_dir) / FORWARDS_FILE
    atomic_write_text(path, text)
    return path
