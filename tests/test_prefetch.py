"""A streaming replay's requests built by a helper process (app/prefetch.py): the same
requests, skipped rows and errors as building them in the loop."""

from __future__ import annotations

import itertools
import multiprocessing
import os
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest

from prefillkit.app.prefetch import RequestPrefetcher, can_fork, request_args
from prefillkit.app.replay import WorkloadSpec, open_workload
from prefillkit.helpers import ENV, HelperError
from prefillkit.request import Request
from prefillkit.workloads.trace_reader import ReplayOptions

BAD = Path(__file__).resolve().parent / "data" / "bad"
MANIFEST: dict[str, dict[str, Any]] = tomllib.loads((BAD / "MANIFEST.toml").read_text())
SLICE = "mooncake-slice"

pytestmark = [
    pytest.mark.skipif(
        not sys.platform.startswith("linux"), reason="the workload helper is Linux-only"
    ),
    pytest.mark.interpreted,  # the subject is the application layer
]


@pytest.fixture(autouse=True)
def _forkable(request: pytest.FixtureRequest) -> None:
    """A fork needs a one-thread process; an earlier test (torch's) may have left threads
    running in this one: then :func:`test_in_a_fresh_process` runs these tests."""
    if request.node.name != "test_in_a_fresh_process" and not can_fork():
        pytest.skip("another thread runs in this process: see test_in_a_fresh_process")


def test_in_a_fresh_process() -> None:
    if can_fork():
        pytest.skip("this process can fork: the tests run here")
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n0",
         __file__, "-k", "not test_in_a_fresh_process"],  # one process: it must fork
        capture_output=True, text=True, cwd=Path(__file__).parents[1],
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    progress = "".join(ln.split(" ")[0] for ln in out.stdout.splitlines() if "%]" in ln)
    assert len(progress) > 50 and set(progress) == {"."}, out.stdout[-2000:]  # none skipped


def _state(req: Request) -> tuple[Any, ...]:
    """What a request is when built, scheduler fields included."""
    return (
        *request_args(req),
        req.prompt_len,
        req.state.max_match_units,
        req.state.status,
        req.state.output_len,
    )


def _drain(spec: WorkloadSpec, page_size: int, helpers: str, mp: pytest.MonkeyPatch) -> Any:
    """(request states, skipped rows, info) of ``spec`` streamed, or the error raised."""
    mp.setenv(ENV, helpers)
    try:
        stream = open_workload(spec, page_size=page_size, seed=3)
        assert stream.prefetched == (helpers == "process")
        reqs = [_state(r) for r in stream.requests]
        return reqs, list(stream.skipped_rows), stream.finish_info()
    except ValueError as exc:  # WorkloadError, InputError
        return type(exc), str(exc), getattr(exc, "line", None), getattr(exc, "path", None)


SPECS: dict[str, WorkloadSpec] = {
    "agentic": WorkloadSpec(generator="agentic", generator_args={"num_sessions": 40},
                            replay=ReplayOptions(spread_buckets=True)),
    "seed": WorkloadSpec(generator="seed", generator_args={}),
    "mooncake-slice": WorkloadSpec(trace=SLICE, replay=ReplayOptions(time_scale=0.5)),
    "window": WorkloadSpec(trace=SLICE, replay=ReplayOptions(start_s=20, duration_s=30)),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(SPECS))
@pytest.mark.parametrize("page_size", [1, 64])
def test_prefetched_requests_are_those_built_in_the_loop(
    name: str, page_size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    inline = _drain(SPECS[name], page_size, "inline", monkeypatch)
    fetched = _drain(SPECS[name], page_size, "process", monkeypatch)
    assert len(inline[0]) > 30
    assert fetched == inline


@pytest.mark.parametrize("skip", [False, True], ids=["strict", "skip-bad-rows"])
@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_bad_traces_fail_or_skip_the_same_way(
    name: str, skip: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = WorkloadSpec(trace=str(BAD / name), fmt=MANIFEST[name]["format"],
                        replay=ReplayOptions(skip_bad_rows=skip))  # fmt: skip
    inline = _drain(spec, 16, "inline", monkeypatch)
    assert _drain(spec, 16, "process", monkeypatch) == inline


def test_a_long_skipped_list_arrives_with_its_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    rows = []
    for i in range(2000):  # every third row bad: skipped rows spread over many batches
        good = {"timestamp": i * 10, "input_length": 300, "output_length": 4, "hash_ids": [i]}
        rows.append(json.dumps(good) if i % 3 else '{"timestamp": 1, "input_length": -5}')
    trace = tmp_path / "t.jsonl"
    trace.write_text("\n".join(rows) + "\n")
    spec = WorkloadSpec(trace=str(trace), fmt="mooncake", replay=ReplayOptions(skip_bad_rows=True))
    inline = _drain(spec, 64, "inline", monkeypatch)
    assert len(inline[1]) == 667
    assert _drain(spec, 64, "process", monkeypatch) == inline


def test_stopping_early_stops_the_child(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "process")
    big = WorkloadSpec(generator="agentic", generator_args={"num_sessions": 5000})
    stream = open_workload(big, page_size=64, seed=0)  # NOTE: the child blocks, ahead
    first = list(itertools.islice(stream.requests, 5))
    assert len(first) == 5
    assert stream.prefetched
    children = [p for p in multiprocessing.active_children() if p.name == "prefillkit-workload"]
    assert children
    stream.requests.close()  # type: ignore[attr-defined]
    for child in children:
        assert not child.is_alive()


def test_a_dead_child_is_a_helper_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from prefillkit.workloads.agentic import iter_multi_turn_agentic
    from prefillkit.workloads.trace_reader import iter_replay_records

    records = iter_replay_records(iter_multi_turn_agentic(num_sessions=3000, seed=0),
                                  ReplayOptions())  # fmt: skip
    fetcher = RequestPrefetcher(records, 64, [])
    it = iter(fetcher)
    next(it)
    fetcher._proc.kill()  # NOTE: the child; what it already sent is still read
    with pytest.raises(HelperError, match="the workload process exited with code -9"):
        for _ in it:
            pass


def test_no_fork_while_another_thread_runs() -> None:
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        assert not can_fork()
    finally:
        stop.set()
        t.join()
    deadline = time.monotonic() + 5  # NOTE: the OS thread ends just after join() returns
    while not can_fork() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert can_fork(), (threading.enumerate(), os.listdir("/proc/self/task"))
