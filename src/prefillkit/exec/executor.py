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


@dataclass
class _Layout:
    """One step's rows on this rank, in request order."""

    reqs: list[_Req]
    tokens: list[int]  # token ids of this rank's query rows
    w_pages: list[int]  # per query row: the page its cache row is written to
    r_pages: list[int]  # per row of this lane's gather block: the page it is read from
    r_offs: list[int]  # ... and its offset in the page
    lane_rows: list[int]  # per lane: the rows of its gather block


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
        """Run one step plan on this rank: the first-token logits of the prompts it completes."""
        tables = plan.check(self.page_size, self.comm.size)
        self._copy_host_pages(plan)
        lay = self._layout(plan, tables)
        x = self._forward(lay)
        return self._final_logits(plan, lay.reqs, x)

    def _idx(self, v: list[int]) -> Tensor:
        """A list of ints as a long tensor on the model's device."""
        return torch.tensor(v, dtype=torch.long, device=self.model.device)

    def _copy_host_pages(self, plan: StepPlan) -> None:
        """This lane's host backups (device -> host), then its loads (host -> device)."""
        rank = self.comm.rank
        for c in plan.backups:
            if c.lane == rank:
                self.host.store(c.host_slot, self.pool, c.page)
        for c in plan.loads:
            if c.lane == rank:
                self.host.load(c.host_slot, self.pool, c.page)

    def _layout(self, plan: StepPlan, tables: tuple[tuple[int, ...], ...]) -> _Layout:
        """This rank's query rows, the pages it writes and reads, and each lane's gather rows."""
        P, R, rank = self.page_size, self.comm.size, self.comm.rank
        lay = _Layout([], [], [], [], [], [0] * R)
        for rp, table in zip(plan.reqs, tables, strict=True):
            start = len(lay.tokens)
            q_pos = [p for p in range(rp.prefix_len, rp.seq_len) if owner_lane(p, P, R) == rank]
            lay.tokens.extend(rp.token_ids[p - rp.prefix_len] for p in q_pos)
            lay.w_pages.extend(table[p // P] for p in q_pos)
            lane_pos: list[list[int]] = [[] for _ in range(R)]
            for s in range(rp.seq_len):
                lane_pos[owner_lane(s, P, R)].append(s)
            lay.r_pages.extend(table[s // P] for s in lane_pos[rank])
            lay.r_offs.extend(s % P for s in lane_pos[rank])
            q_rows = slice(start, len(lay.tokens))
            lay.reqs.append(_Req(rp.seq_len, q_pos, q_rows, lane_pos, lay.lane_rows[:]))
            for lane in range(R):
                lay.lane_rows[lane] += len(lane_pos[lane])
        return lay

    def _forward(self, lay: _Layout) -> Tensor:
        """The layers over this rank's query rows: the hidden state after the last layer."""
        idx = self._idx
        positions = idx([p for r in lay.reqs for p in r.q_pos])
        w_pg, w_off = idx(lay.w_pages), positions % self.page_size
        r_pg, r_off = idx(lay.r_pages), idx(lay.r_offs)
        m = self.model
        x = (
            m.embed(idx(lay.tokens))
            if lay.tokens
            else torch.zeros(0, m.cfg.d_model, dtype=DTYPE, device=m.device)
        )
        pad_rows = max(lay.lane_rows)
        for layer in range(m.cfg.n_layers):
            h = m.attn_input(layer, x)
            self.pool.write(layer, w_pg, w_off, m.kv_entries(layer, h, positions))
            block = self._gather_lanes(layer, r_pg, r_off, pad_rows)
            outs = self._attend(layer, h, lay.reqs, block)
            if outs:
                x = x + torch.cat(outs)
            x = x + m.mlp(layer, x)
        return x

    def _gather_lanes(self, layer: int, r_pg: Tensor, r_off: Tensor, pad_rows: int) -> list[Tensor]:
        """Every lane's cache rows of one layer: this lane's read, padded, all-gathered."""
        mine = self.pool.read(layer, r_pg, r_off)
        width = self.model.cfg.kv_width
        send = torch.cat([mine, mine.new_zeros(pad_rows - mine.shape[0], width)])
        return [b.to(self.model.device) for b in self.comm.all_gather(send)]

    def _attend(self, layer: int, h: Tensor, reqs: list[_Req], block: list[Tensor]) -> list[Tensor]:
        """Each request's query rows attended over its whole sequence (rebuilt from the lanes)."""
        m, dev = self.model, self.model.device
        outs: list[Tensor] = []
        for r in reqs:
            if not r.q_pos:
                continue
            kv = torch.empty(r.seq_len, m.cfg.kv_width, dtype=DTYPE, device=dev)
            for lane in range(self.comm.size):
                n, off = len(r.lane_pos[lane]), r.lane_off[lane]
                kv[self._idx(r.lane_pos[lane])] = block[lane][off : off + n]
            outs.append(m.attend(layer, h[r.q_rows], self._idx(r.q_pos), kv))
        return outs

    def _final_logits(self, plan: StepPlan, reqs: list[_Req], x: Tensor) -> StepOutput:
        """The last token's logits of each completed prompt, from the rank owning its last page."""
        P, R, rank = self.page_size, self.comm.size, self.comm.rank
        m, idx = self.model, self._idx
        finals = [(i, rp) for i, rp in enumerate(plan.reqs) if not rp.is_chunk]
        out = torch.zeros(len(finals), m.cfg.vocab, dtype=DTYPE, device=m.device)
        owners = [owner_lane(rp.seq_len - 1, P, R) for _, rp in finals]
        mine_k = [k for k, owner in enumerate(owners) if owner == rank]
        if mine_k:
            rows = [reqs[finals[k][0]].q_rows.stop - 1 for k in mine_k]
            out[idx(mine_k)] = m.logits(x[idx(rows)])
        gathered = self.comm.all_gather(out)
        return StepOutput(
            {rp.rid: gathered[owners[k]][k].cpu().clone() for k, (_, rp) in enumerate(finals)}
        )
