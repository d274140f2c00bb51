"""Closed-loop agent sessions (issue 32 item 1): the gate's rules, the engine's answer
times, the JSONL session fields and their consistency checks."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from prefillkit.app.replay import (
    WorkloadSpec,
    load_requests,
    open_workload,
    with_stated_decode_rate,
)
from prefillkit.app.settings import Config
from prefillkit.request import SESSION, Request, SessionTurn, session_of
from prefillkit.sim.closed_loop import SessionGate
from prefillkit.sim.engine import Engine
from prefillkit.workloads.agentic import multi_turn_agentic
from prefillkit.workloads.errors import WorkloadError
from prefillkit.workloads.jsonl import iter_jsonl, write_jsonl
from prefillkit.workloads.record import TraceRecord


def _req(rid: str, t: float, sid: str | None = None, turn: int = 0, think: float = 0.0,
         last: bool | None = False) -> Request:  # fmt: skip
    req = Request(rid, t, 100, 10, [], 1)
    if sid is not None:
        req.extra[SESSION] = SessionTurn(sid, turn, think, last)
    return req


# --------------------------------------------------------------------------- the gate


def test_closed_loop_parks_later_turns_and_sends_them_after_the_answer() -> None:
    a0, a1 = _req("a0", 0.0, "a", 0), _req("a1", 1.0, "a", 1, think=2.0, last=True)
    b0 = _req("b0", 5.0, "b", 0, last=True)
    gate = SessionGate(iter([a0, a1, b0]), closed_loop=True)
    assert next(gate) is a0
    gate.arrived(a0)
    assert next(gate) is b0  # a1 read and parked: it waits for a0's answer
    assert gate.answered(a0, 7.5) is a1
    assert a1.arrival_time == 9.5  # answer 7.5 + think 2.0, not its scheduled 1.0
    gate.arrived(a1)
    assert (gate.sessions, gate.later_turns, gate.early_turns) == (1, 1, 0)
    assert gate.answered(a1, 12.0) is None  # the last turn: the session ends
    assert gate._live.keys() == {"b"}  # a is over; b begun (read)
    assert next(gate, None) is None


def test_a_successor_not_yet_read_is_read_ahead_and_first_turns_wait_in_order() -> None:
    a0 = _req("a0", 0.0, "a", 0)
    b0, c0 = _req("b0", 1.0, "b", 0), _req("c0", 2.0, "c", 0)
    b1 = _req("b1", 3.0, "b", 1, last=True)
    a1 = _req("a1", 50.0, "a", 1, think=1.0, last=True)
    gate = SessionGate(iter([a0, b0, c0, b1, a1]), closed_loop=True)
    assert next(gate) is a0
    succ = gate.answered(a0, 0.5)  # before anything else was read
    assert succ is a1 and a1.arrival_time == 1.5
    assert [next(gate), next(gate)] == [b0, c0]  # read on the way, in order
    assert gate.answered(b0, 4.0) is b1  # parked on the way
    assert next(gate, None) is None


def test_a_turn_that_answers_twice_sends_its_successor_once() -> None:
    a0, a1 = _req("a0", 0.0, "a", 0), _req("a1", 1.0, "a", 1, last=True)
    gate = SessionGate(iter([a0, a1]), closed_loop=True)
    next(gate)
    assert gate.answered(a0, 1.0) is a1
    assert gate.answered(a0, 2.0) is None  # requeued and prefilled again: no new turn


def test_a_session_cut_by_the_window_ends_at_its_last_turn_read() -> None:
    a0 = _req("a0", 0.0, "a", 0)  # its turn 1 lies past the window: never read
    gate = SessionGate(iter([a0]), closed_loop=True)
    next(gate)
    assert gate.answered(a0, 1.0) is None
    assert not gate._live


# (predecessor answered at, this turn's arrival) -> early?
EARLY_TABLE = [
    (None, 5.0, True),  # predecessor still running
    (6.0, 5.0, True),  # answers after this turn arrived (pd: first token + decode)
    (5.0, 5.0, False),
    (2.0, 5.0, False),
]


@pytest.mark.parametrize(("answered_at", "arrival", "early"), EARLY_TABLE)
def test_open_loop_early_turns(answered_at: float | None, arrival: float, early: bool) -> None:
    a0, a1 = _req("a0", 0.0, "a", 0), _req("a1", arrival, "a", 1, last=True)
    gate = SessionGate(iter([a0, a1]), closed_loop=False)
    assert next(gate) is a0
    gate.arrived(a0)
    if answered_at is not None:
        assert gate.answered(a0, answered_at) is None  # open-loop: nothing is sent
    assert next(gate) is a1  # open-loop: at its scheduled time
    gate.arrived(a1)
    assert gate.early_turns == int(early)


def test_requests_without_sessions_pass_through() -> None:
    reqs = [_req(f"r{i}", float(i)) for i in range(5)]
    gate = SessionGate(iter(reqs), closed_loop=True)
    assert list(gate) == reqs
    assert gate.answered(reqs[0], 1.0) is None and gate.sessions == 0


# --------------------------------------------------------------------------- engine

AGENTIC: dict[str, Any] = {"num_sessions": 12, "session_arrival_rate": 0.5}


#: A nominal schedule faster than the deployment answers: open-loop turns come early.
HURRIED: dict[str, Any] = {**AGENTIC, "decode_tokens_per_s": 1e4, "think_time_s": (0.0, 0.1)}


def _run(
    open_loop: bool = False, gen: dict[str, Any] = AGENTIC, **cfg: Any
) -> tuple[Engine, dict[str, Any], list[Request]]:
    config = Config(tp_size=8, open_loop=open_loop, **cfg)
    spec = WorkloadSpec(generator="agentic", generator_args=dict(gen))
    wl = load_requests(spec, page_size=config.resolved_page_size, seed=0)
    engine = Engine(config.sim_settings(), wl.requests)
    res = engine.run()
    return engine, res.summary, res.requests


def _turns(reqs: list[Request]) -> Iterator[tuple[Request, Request, SessionTurn]]:
    """(turn k, turn k + 1, turn k + 1's session) of every session."""
    by = {(st.session_id, st.turn): r for r in reqs if (st := session_of(r)) is not None}
    for (sid, turn), req in by.items():
        if (sid, turn + 1) in by:
            nxt = by[sid, turn + 1]
            st = session_of(nxt)
            assert st is not None
            yield req, nxt, st


@pytest.mark.parametrize("gen", [AGENTIC, HURRIED], ids=["agentic", "hurried"])
def test_generated_sessions_replay_closed_loop_by_default(gen: dict[str, Any]) -> None:
    engine, summary, reqs = _run(gen=gen)
    assert summary["session_loop"] == "closed"
    assert summary["early_turns"] == 0
    assert summary["sessions"] == 12 and summary["later_turns"] == len(reqs) - 12
    step = engine.cost.decode_step_time
    for prev, nxt, st in _turns(reqs):
        assert prev.metrics.first_token_time is not None
        ctx = prev.state.input_len + prev.max_new_tokens // 2
        answer = prev.metrics.first_token_time + (prev.max_new_tokens - 1) * step(1, ctx)
        assert nxt.arrival_time == pytest.approx(answer + st.think_s, abs=1e-9)
    assert summary["requests"] == len(reqs) and summary["completed"] == len(reqs)


def test_open_loop_keeps_the_schedule_and_counts_early_turns() -> None:
    _, summary, reqs = _run(open_loop=True, gen=HURRIED)
    spec = WorkloadSpec(generator="agentic", generator_args=dict(HURRIED))
    scheduled = {r.rid: r.arrival_time for r in load_requests(spec, page_size=1).requests}
    assert {r.rid: r.arrival_time for r in reqs} == scheduled
    assert summary["session_loop"] == "open" and summary["early_turns"] > 0
    early = sum(
        1
        for prev, nxt, _ in _turns(reqs)
        if prev.metrics.first_token_time is None
        or prev.metrics.first_token_time > nxt.arrival_time  # answered at or after the first token
    )
    assert summary["early_turns"] >= early > 0


def test_a_stated_decode_rate_times_the_answer() -> None:
    _, summary, reqs = _run(session_decode_tokens_per_s=40.0)
    for prev, nxt, st in _turns(reqs):
        assert prev.metrics.first_token_time is not None
        answer = prev.metrics.first_token_time + (prev.max_new_tokens - 1) / 40.0
        assert nxt.arrival_time == pytest.approx(answer + st.think_s, abs=1e-9)
    assert "40 tokens/s" in summary["session_answer"]


def test_colocated_sessions_answer_at_the_simulated_finish() -> None:
    _, summary, reqs = _run(mode="colocated", model="llama-3.1-8b")
    assert summary["session_answer"] == "simulated decode finish"
    for prev, nxt, st in _turns(reqs):
        assert prev.metrics.finish_time is not None
        assert nxt.arrival_time == pytest.approx(prev.metrics.finish_time + st.think_s, abs=1e-9)


def test_closed_loop_streaming_equals_the_list_run_and_is_deterministic() -> None:
    config = Config(tp_size=8)
    spec = WorkloadSpec(generator="seed", generator_args={"num_sessions": 10})
    page = config.resolved_page_size
    listed = Engine(config.sim_settings(), load_requests(spec, page_size=page).requests).run()
    streams = [
        Engine(config.sim_settings(), open_workload(spec, page_size=page).requests).run()
        for _ in range(2)
    ]
    strip = {"wall_time_s"}
    want = {k: v for k, v in listed.summary.items() if k not in strip}
    for res in streams:
        assert {k: v for k, v in res.summary.items() if k not in strip} == want
    assert want["early_turns"] == 0 and want["later_turns"] > 0


def test_the_gate_holds_only_live_sessions() -> None:
    """200 sessions one after another: the gate's state stays that of the few live."""
    config = Config(tp_size=8)
    recs = multi_turn_agentic(num_sessions=200, session_arrival_rate=0.05, turns_per_session=(2, 4))
    reqs = (r for r in (_to(rec, config.resolved_page_size) for rec in recs))
    engine = Engine(config.sim_settings(), reqs)
    peak = [0]
    gate = engine.sessions

    def watch(done: int, total: int) -> None:
        held = len(gate._live) + len(gate._ahead) + sum(map(len, gate._parked.values()))
        peak[0] = max(peak[0], held)

    engine.on_progress = watch
    res = engine.run()
    assert res.summary["sessions"] == 200 and res.summary["early_turns"] == 0
    assert 0 < peak[0] <= 20
    assert not gate._live and not gate._parked


def _to(rec: TraceRecord, page: int) -> Request:
    from prefillkit.workloads.record import to_request

    return to_request(rec, page)


def test_the_generator_states_the_answer_rate() -> None:
    cfg = Config(tp_size=8)
    stated = WorkloadSpec(generator="seed", generator_args={"decode_tokens_per_s": 30.0})
    assert with_stated_decode_rate(cfg, stated).session_decode_tokens_per_s == 30.0
    assert with_stated_decode_rate(cfg, WorkloadSpec()).session_decode_tokens_per_s is None
    own = Config(tp_size=8, session_decode_tokens_per_s=20.0)
    assert with_stated_decode_rate(own, stated).session_decode_tokens_per_s == 20.0


# --------------------------------------------------------------------------- JSONL


def test_session_fields_round_trip_through_jsonl_with_last_turns(tmp_path: Path) -> None:
    recs = multi_turn_agentic(num_sessions=5, seed=1)
    path = tmp_path / "s.jsonl"
    write_jsonl(recs, path)
    back = list(iter_jsonl(path))
    assert [r.session for r in back] == [r.session for r in recs]
    assert sum(1 for r in back if r.session is not None and r.session.last) == 5


def test_a_jsonl_trace_with_sessions_replays_closed_loop(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    write_jsonl(multi_turn_agentic(**AGENTIC, seed=0), path)
    config = Config(tp_size=8)
    spec = WorkloadSpec(trace=str(path))
    res = Engine(config.sim_settings(), open_workload(spec, page_size=64).requests).run()
    _, generated, _ = _run()
    assert res.summary["early_turns"] == 0
    assert res.summary["ttft_p99_s"] == generated["ttft_p99_s"]


def _rows(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _row(t: float, **session: Any) -> dict[str, Any]:
    return {"arrival_s": t, "output_len": 4, "input_len": 100, **session}


BAD_SESSIONS = [
    # (rows' session fields, bad line, message part)
    ([{"session_id": "a", "turn": 1}], 1, "starts at turn 1: turn 0 is missing"),
    ([{"session_id": "a", "turn": 0}, {"session_id": "a", "turn": 2}], 2, "turn 1 is missing"),
    (
        [{"session_id": "a", "turn": 0}, {"session_id": "a", "turn": 1},
         {"session_id": "a", "turn": 1}],
        3,
        "turn 1 of session 'a' comes after its turn 1",
    ),
    ([{"turn": 0}], 1, "needs a 'session_id'"),
    ([{"session_id": "a"}], 1, "missing field 'turn'"),
    ([{"session_id": "a", "turn": 0, "think_s": -1}], 1, "'think_s'"),
    ([{"session_id": 7, "turn": 0}], 1, "'session_id'"),
]  # fmt: skip


@pytest.mark.parametrize(("sessions", "line", "message"), BAD_SESSIONS)
def test_inconsistent_sessions_name_the_file_and_line(
    tmp_path: Path, sessions: list[dict[str, Any]], line: int, message: str
) -> None:
    path = _rows(tmp_path / "bad.jsonl", [_row(float(i), **s) for i, s in enumerate(sessions)])
    with pytest.raises(WorkloadError) as info:
        list(iter_jsonl(path))
    text = str(info.value)
    assert f"{path}:{line}" in text and message in text


def test_an_inconsistent_session_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from prefillkit.cli import run

    rows = [_row(0.0, session_id="a", turn=0), _row(1.0, session_id="a", turn=2)]
    path = _rows(tmp_path / "bad.jsonl", rows)
    assert run(["replay", "-q", "--trace", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{path}:2" in err and "turn 1 is missing" in err


def test_a_trace_without_sessions_is_read_once_and_unchanged(tmp_path: Path) -> None:
    path = _rows(tmp_path / "plain.jsonl", [_row(float(i)) for i in range(3)])
    assert [r.session for r in iter_jsonl(path)] == [None, None, None]
    config = Config(tp_size=8)
    runs = [
        Engine(
            Config(tp_size=8, open_loop=o).sim_settings(),
            open_workload(
                WorkloadSpec(trace=str(path)), page_size=config.resolved_page_size
            ).requests,
        )
        .run()
        .summary
        for o in (False, True)
    ]
    assert "early_turns" not in runs[0]
    strip = {"wall_time_s"}
    assert {k: v for k, v in runs[0].items() if k not in strip} == {
        k: v for k, v in runs[1].items() if k not in strip
    }


@pytest.mark.parametrize("generator", ["seed", "agentic"])
def test_the_cli_replays_generated_sessions_closed_loop_unless_told(
    tmp_path: Path, generator: str
) -> None:
    """Answers at 5 tokens/s take longer than the generators' nominal 50 tokens/s
    schedule: open-loop every later turn comes early, closed-loop none does."""
    from prefillkit.cli import run

    early = {}
    for flags in ([], ["--open-loop"]):
        out = tmp_path / f"run{len(flags)}"
        args = ["replay", "-q", "--generator", generator, "--agentic-sessions", "8",
                "--session-decode-tokens-per-s", "5", "--out", str(out), *flags]  # fmt: skip
        assert run(args) == 0
        metrics = json.loads((out / "summary.json").read_text())["metrics"]
        assert metrics["later_turns"] > 0
        early[metrics["session_loop"]] = (metrics["early_turns"], metrics["later_turns"])
    assert early["closed"][0] == 0
    assert early["open"][0] == early["open"][1]
