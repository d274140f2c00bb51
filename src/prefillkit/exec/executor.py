"""Execute one prefill step plan on one rank, exactly as planned.

Rank ``r`` of ``R`` owns lane ``r``: its device pool and host slots. It computes the query rows of
the tokens on the pages it owns (page ``j`` on lane ``j % R``: the page-aligned CP split), writes
their cache rows into the plan's new pages of its lane, and per layer all-gathers the cache rows
of its lane's pages of every request in the batch (prefix pages read + new pages just written:
for MLA + DSA the compressed latent, the rotated rope key and the indexer key of each token; for
GQA the rotated K and V), so that each rank attends its query rows over the whole sequence. The
logits of a request's last token come from the rank owning its last page, all-gathered.

Nothing is decided here: which pages to read, write, back up or load is the plan's; the executor
only checks that the plan is well formed (``StepPlan.check``). Reads go through the pool, so a
wrong page id, a page handed out twice or a load into the wrong page changes the logits.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from prefillkit.exec.comm import Comm, LocalComm
from prefillkit.exec.model import DTYPE, Model
from prefillkit.exec.paged import HostPool, LanePool
from prefillkit.exec.plan import RequestId, StepPlan


@dataclass(frozen=True)
class StepOutput:
    """First-token logits (float64, CPU) of each request whose extend range ends its prompt."""

    logits: dict[RequestId, Tensor]

    def first_tokens(self) -> dict[RequestId, int]:
        return {rid: int(torch.argmax(v)) for rid, v in self.logits.items()}


@dataclass
class _Req:
    seq_len: int
    q_pos: list[int]  # positions of this rank's query rows
    q_rows: slice  # their rows in the step's row block
    lane_pos: list[list[int]]  # per lane: the positions of the lane's pages, in order
    lane_off: list[int]  # per lane: where this request's rows start in the lane's gather block


def owner_lane(position: int, page_size: int, cp_size: int) -> int:
    """The lane owning the page that holds a sequence position."""
    return (position // page_size) % cp_size


class Executor:
    """One rank's executor: its lane's device pool and host slots, and the model."""

    def __init__(
        self,
        model: Model,
        page_size: int,
        n_pages: int,
        n_host_slots: int = 0,
        comm: Comm | None = None,
    ) -> None:
        self.model = model
        self.comm: Comm = comm if comm is not None else LocalComm()
        self.page_size = page_size
        lane, c = self.comm.rank, model.cfg
        self.pool = LanePool(lane, n_pages, page_size, c.n_layers, c.kv_width, model.device)
        self.host = HostPool(lane, n_host_slots, page_size, c.n_layers, c.kv_width)

    def step(self, plan: StepPlan) -> StepOutput:
        P, R, rank = self.page_size, self.comm.size, self.comm.rank
        tables = plan.check(P, R)
        for c in plan.backups:
            if c.lane == rank:
                self.host.store(c.host_slot, self.pool, c.page)
        for c in plan.loads:
            if c.lane == rank:
                self.host.load(c.host_slot, self.pool, c.page)

        dev = self.model.device
        reqs: list[_Req] = []
        tokens: list[int] = []
        w_pages: list[int] = []
        r_pages: list[int] = []
        r_offs: list[int] = []
        lane_rows = [0] * R
        for rp, table in zip(plan.reqs, tables, strict=True):
            start = len(tokens)
            q_pos = [p for p in range(rp.prefix_len, rp.seq_len) if owner_lane(p, P, R) == rank]
            tokens.extend(rp.token_ids[p - rp.prefix_len] for p in q_pos)
            w_pages.extend(table[p // P] for p in q_pos)
            lane_pos: list[list[int]] = [[] for _ in range(R)]
            for s in range(rp.seq_len):
                lane_pos[owner_lane(s, P, R)].append(s)
            r_pages.extend(table[s // P] for s in lane_pos[rank])
            r_offs.extend(s % P for s in lane_pos[rank])
            reqs.append(_Req(rp.seq_len, q_pos, slice(start, len(tokens)), lane_pos, lane_rows[:]))
            for lane in range(R):
                lane_rows[lane] += len(lane_pos[lane])

        def idx(v: list[int]) -> Tensor:
            return torch.tensor(v, dtype=torch.long, device=dev)

        positions = idx([p for r in reqs for p in r.q_pos])
        w_pg, w_off, r_pg, r_off = idx(w_pages), positions % P, idx(r_pages), idx(r_offs)
        m, width = self.model, self.model.cfg.kv_width
        x = (
            m.embed(idx(tokens))
            if tokens
            else torch.zeros(0, m.cfg.d_model, dtype=DTYPE, device=dev)
        )
        pad_rows = max(lane_rows)
        for layer in range(m.cfg.n_layers):
            h = m.attn_input(layer, x)
            self.pool.write(layer, w_pg, w_off, m.kv_entries(layer, h, positions))
            mine = self.pool.read(layer, r_pg, r_off)
            send = torch.cat([mine, mine.new_zeros(pad_rows - mine.shape[0], width)])
            block = [b.to(dev) for b in self.comm.all_gather(send)]
            outs: list[Tensor] = []
            for r in reqs:
                if not r.q_pos:
                    continue
                kv = torch.empty(r.seq_len, width, dtype=DTYPE, device=dev)
                for lane in range(R):
                    n, off = len(r.lane_pos[lane]), r.lane_off[lane]
                    kv[idx(r.lane_pos[lane])] = block[lane][off : off + n]
                outs.append(m.attend(layer, h[r.q_rows], idx(r.q_pos), kv))
            if outs:
                x = x + torch.cat(outs)
            x = x + m.mlp(layer, x)

        finals = [(i, rp) for i, rp in enumerate(plan.reqs) if not rp.is_chunk]
        out = torch.zeros(len(finals), m.cfg.vocab, dtype=DTYPE, device=dev)
        owners = [owner_lane(rp.seq_len - 1, P, R) for _, rp in finals]
        mine_k = [k for k, owner in enumerate(owners) if owner == rank]
        if mine_k:
            rows = [reqs[finals[k][0]].q_rows.stop - 1 for k in mine_k]
            out[idx(mine_k)] = m.logits(x[idx(rows)])
        gathered = self.comm.all_gather(out)
        return StepOutput(
            {rp.rid: gathered[owners[k]][k].cpu().clone() for k, (_, rp) in enumerate(finals)}
        )
