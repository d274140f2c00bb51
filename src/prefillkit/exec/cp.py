"""Context parallelism across processes: R gloo workers on localhost run a sequence of plans.

``run_cp`` spawns R processes (``torch.multiprocessing``), joins them into one gloo group through
a file store in a temporary folder (no network port; gloo's sockets bound to the loopback
interface), gives rank r lane r's pool and host slots, executes the steps in order on every rank
and returns rank 0's outputs. Plans and the model config are plain frozen dataclasses, so they
travel to the workers by pickling; each worker builds the same weights from the seed.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from prefillkit.exec.comm import GlooComm
from prefillkit.exec.executor import Executor, StepOutput
from prefillkit.exec.model import Model, ModelConfig
from prefillkit.exec.plan import StepPlan


def _worker(
    rank: int,
    cp_size: int,
    folder: str,
    cfg: ModelConfig,
    page_size: int,
    n_pages: int,
    n_host_slots: int,
    steps: Sequence[StepPlan],
    setup: Callable[[], None] | None,
) -> None:
    torch.set_num_threads(1)
    if sys.platform.startswith("linux"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    store = dist.FileStore(str(Path(folder) / "store"), cp_size)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=cp_size)
    try:
        if setup is not None:
            setup()
        ex = Executor(Model(cfg), page_size, n_pages, n_host_slots, GlooComm())
        outs = [ex.step(s).logits for s in steps]
        if rank == 0:
            torch.save(outs, Path(folder) / "out.pt")
    finally:
        dist.destroy_process_group()


def run_cp(
    cfg: ModelConfig,
    page_size: int,
    n_pages: int,
    steps: Sequence[StepPlan],
    cp_size: int,
    n_host_slots: int = 0,
    setup: Callable[[], None] | None = None,
) -> list[StepOutput]:
    """Run ``steps`` on ``cp_size`` gloo worker processes; ``setup`` (a module-level function)
    runs first in every worker. Returns each step's output (identical on every rank)."""
    with tempfile.TemporaryDirectory(prefix="prefillkit-cp-") as folder:
        mp.spawn(
            _worker,
            args=(cp_size, folder, cfg, page_size, n_pages, n_host_slots, tuple(steps), setup),
            nprocs=cp_size,
            join=True,
        )
        outs = torch.load(Path(folder) / "out.pt")
    return [StepOutput(o) for o in outs]
