"""``python -m prefillkit.exec``: a smoke run (cold vs prefix hit vs chunked, bitwise compared).

Without the torch extra it prints one line naming it and exits 2.
"""

from __future__ import annotations

import sys

from prefillkit.exec import MissingExtraError, require_torch


def main() -> int:
    try:
        require_torch()
    except MissingExtraError as err:
        print(err, file=sys.stderr)
        return 2
    import torch

    from prefillkit.exec.executor import Executor
    from prefillkit.exec.model import Model, ModelConfig
    from prefillkit.exec.plan import ReqPlan, StepPlan

    page = 4
    tokens = tuple((7 * i + 3) % 96 for i in range(41))
    model = Model(ModelConfig())
    pages = tuple(range(11))

    def plan(rid: str, start: int, end: int, new: tuple[int, ...]) -> StepPlan:
        prefix = (pages[: start // page],)
        chunk = end < len(tokens)
        return StepPlan((ReqPlan(rid, tokens[start:end], start, prefix, (new,), chunk),))

    cold = Executor(model, page, 32).step(plan("cold", 0, 41, pages)).logits["cold"]
    ex = Executor(model, page, 32)
    ex.step(plan("chunk", 0, 24, pages[:6]))
    chunked = ex.step(plan("chunk", 24, 41, pages[6:])).logits["chunk"]
    hit = ex.step(plan("hit", 24, 41, (20, 21, 22, 23, 24))).logits["hit"]
    same = all(torch.equal(cold.view(torch.int64), v.view(torch.int64)) for v in (chunked, hit))
    print(
        f"first token: cold {int(cold.argmax())}, chunked {int(chunked.argmax())}, "
        f"prefix hit {int(hit.argmax())}; logits bitwise equal: {same}"
    )
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
