"""A streaming run's summary read from spilled columns a few rows at a time
(records/spill.py, records/stream_summary.py) is the list run's, float for float."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from prefillkit.app.replay import WorkloadSpec, load_requests, open_workload
from prefillkit.app.settings import Config
from prefillkit.records.collector import RunCollector
from prefillkit.records.run_options import RunOptions
from prefillkit.sim.engine import Engine, SimResult
from prefillkit.workloads.trace_reader import ReplayOptions
from test_streaming import CONFIGS

SPEC = WorkloadSpec(
    generator="agentic",
    generator_args={"num_sessions": 40, "session_arrival_rate": 2.0},
    replay=ReplayOptions(spread_buckets=True, time_scale=0.5),
)


OPTIONS = RunOptions(window_s=5.0, percentiles=(10.0, 50.0, 99.9), slo_ttft_s=1.5)


def _run(cfg: Config, streaming: bool, chunk_rows: int = 3, limit: int = 2) -> SimResult:
    page = cfg.resolved_page_size
    if streaming:
        engine = Engine(cfg.sim_settings(), open_workload(SPEC, page_size=page, seed=0).requests,
                        options=OPTIONS)  # fmt: skip
        c = engine.collector
        assert c is not None
        engine.collector = RunCollector(c.terms, c.warm_floor, c.sink,
                                        chunk_rows=chunk_rows, limit=limit)  # fmt: skip
    else:
        listed = load_requests(SPEC, page_size=page, seed=0).requests
        engine = Engine(cfg.sim_settings(), listed, options=OPTIONS)
    return engine.run()


def _doc(res: SimResult) -> str:
    summary = {k: v for k, v in res.summary.items() if k != "wall_time_s"}
    return json.dumps(summary, sort_keys=False)  # key order and every float's digits


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_the_summary_from_spilled_columns_is_the_list_runs(name: str) -> None:
    cfg = Config(**CONFIGS[name])  # type: ignore[arg-type]
    want = _doc(_run(cfg, streaming=False))
    assert json.loads(want)["num_windows"] > 3 and json.loads(want)["completed"] > 100
    assert _doc(_run(cfg, streaming=True)) == want
    assert _doc(_run(cfg, streaming=True, chunk_rows=1, limit=1)) == want
    assert _doc(_run(cfg, streaming=True, chunk_rows=1 << 16, limit=1 << 16)) == want


def test_spilled_columns_read_back_what_was_appended() -> None:
    from prefillkit.records.spill import SpillColumns

    cols = SpillColumns({"x": "d", "k": "b"}, chunk_rows=4)
    xs, ks = cols.tails
    for i in range(11):
        xs.append(i * 0.5)
        ks.append(i % 3)
        cols.row_added()
    assert len(cols) == 11 and len(xs) == 3  # two chunks on disk
    assert cols.column("x").tolist() == [i * 0.5 for i in range(11)]
    assert cols.read("k", 2, 9).tolist() == [i % 3 for i in range(2, 9)]
    assert [len(c) for c in cols.chunks("x", 1, 10)] == [4, 4, 1]
    cols.close()
    assert len(cols) == 0 and cols.column("x").tolist() == []


def test_a_stopped_run_reads_no_further_and_counts_what_arrived() -> None:
    from prefillkit.request import Request

    read = [0]

    def stream() -> Iterator[Request]:
        for i in range(10_000):
            read[0] += 1
            yield Request.from_tokens(f"r{i}", list(range(100 + i % 7)), page_size=1,
                                      arrival_time=i * 0.5)  # fmt: skip

    engine = Engine(Config(tp_size=8).sim_settings(), stream())

    def stop(done: int, total: int) -> None:
        if done >= 20:
            engine.stop_requested = True

    engine.on_progress = stop
    res = engine.run()
    assert res.partial
    # the requests not yet arrived are neither read (a generator is not drained) nor
    # counted as unfinished
    assert read[0] <= engine.arrived + 1 < 100
    assert res.summary["requests"] == engine.arrived
    assert res.summary["unfinished"] == engine.arrived - res.summary["completed"]


def test_a_full_temporary_directory_is_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import errno
    import tempfile

    from prefillkit.cli import run
    from prefillkit.records import spill
    from prefillkit.records.spill import SpillColumns, SpillError

    monkeypatch.setattr(spill.tempfile, "TemporaryFile", lambda **kw: open("/dev/full", "r+b"))
    cols = SpillColumns({"x": "d"}, chunk_rows=2)
    cols.tails[0].extend([1.0, 2.0])
    with pytest.raises(SpillError, match=f"cannot write the run's summary columns in "
                       f"{tempfile.gettempdir()} \\(set TMPDIR\\): No space left"):  # fmt: skip
        cols.spill()

    def full(self: SpillColumns) -> None:
        raise spill._failed(OSError(errno.ENOSPC, "No space left on device"), "write")

    monkeypatch.setattr(SpillColumns, "row_added", full)
    code = run(["replay", "--out", str(tmp_path / "o"), "-q", "--agentic-sessions", "3"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith("prefillkit: error: cannot write the run's summary columns in "), err
    assert err.endswith("(set TMPDIR): No space left on device\n"), err
    assert not (tmp_path / "o" / "summary.json").exists()
