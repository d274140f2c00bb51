"""Grid files: expansion, stable point ids, and one-line refusals (exit 2)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from prefillkit.app.sweep import SweepError
from prefillkit.app.sweep.grid import load_grid
from prefillkit.cli import run
from sweep_support import TINY_GRID, write

# NOTE: the subject here is interpreted code; .ci/run's compiled-build run skips it.
pytestmark = pytest.mark.interpreted


def test_expands_workloads_seeds_axes(tmp_path: Path) -> None:
    grid = load_grid(write(tmp_path / "g.toml", TINY_GRID))
    points = grid.points()
    assert len(points) == 8
    assert len({p.id for p in points}) == 8
    assert grid.varied == ["chunked_prefill_size", "schedule_policy", "seed"]
    assert points[0].settings == {"chunked_prefill_size": 4096, "schedule_policy": "fcfs"}


def test_ids_are_stable_and_shared_by_changed_grids(tmp_path: Path) -> None:
    a = load_grid(write(tmp_path / "a.toml", TINY_GRID)).points()
    changed = TINY_GRID.replace("[4096, 8192]", "[8192, 16384]").replace(
        "turns_per_session = [2, 4]", "turns_per_session = [2, 4]\n"
    )
    b = load_grid(write(tmp_path / "b.toml", changed)).points()
    shared = {p.id for p in a} & {p.id for p in b}
    assert len(shared) == 4  # the chunked_prefill_size = 8192 points
    assert all(p.settings["chunked_prefill_size"] == 8192 for p in a if p.id in shared)


def test_samples_lhs_are_stratified_and_deterministic(tmp_path: Path) -> None:
    text = """
[sample]
method = "lhs"
n = 8
seed = 3
[sample.axes]
max_prefill_tokens = { low = 4096, high = 65536, log = true }
schedule_policy = ["fcfs", "lpm"]
[[workload]]
generator = "agentic"
num_sessions = 2
"""
    g1 = load_grid(write(tmp_path / "s.toml", text))
    g2 = load_grid(write(tmp_path / "s2.toml", text))
    assert [p.id for p in g1.points()] == [p.id for p in g2.points()]
    values = sorted(int(p.settings["max_prefill_tokens"]) for p in g1.points())  # type: ignore[call-overload]
    assert len(values) == 8 and 4096 <= values[0] and values[-1] <= 65536
    # one sample per stratum of the log range
    import math

    strata = sorted(
        int(8 * (math.log(v) - math.log(4096)) / (math.log(65536) - math.log(4096))) for v in values
    )
    assert strata == list(range(8))


_ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}

BAD_GRIDS = [
    ("[grid]\nchunk_size = [1, 2]\n", "[grid]: unknown knob 'chunk_size'"),
    ("[grid]\nchunked_prefill_size = []\n", "[grid] chunked_prefill_size: empty axis"),
    ("[grid]\nchunked_prefill_size = ['big']\n", "[grid] chunked_prefill_size: bad value 'big'"),
    ("[grid]\nschedule_policy = ['fcfs', 'nope']\n", "[grid] schedule_policy: bad value 'nope'"),
    ("[grid]\nrate = [0.0]\n", "[grid] rate: bad value 0.0"),
    ("[grid]\nseed = [1, 2]\n", "'seed' is not a knob here"),
    ("[grid]\nchunked_prefill_size = 4096\n", "expected a list of values"),
    ("[base]\nmax_prefil_tokens = 4\n", "[base]: unknown knob 'max_prefil_tokens'"),
    ("[gird]\n", "unknown table 'gird'"),
    ("[[workload]]\nname = 'x'\ntrace = 'missing.jsonl'\n", "workload 'x' trace: no such file"),
    ("[[workload]]\ngenerator = 'agentic'\nnum_sesions = 3\n", "unknown key 'num_sesions'"),
    ("[sample]\nn = 0\n[sample.axes]\nmax_prefill_tokens = {low = 1, high = 2}\n", "[sample] n"),
    ("[grid]\nchunked_prefill_size = [4096, 4096]\n", "value 4096 given twice"),
    ("not toml = = 1\n", "invalid TOML"),
]


@pytest.mark.parametrize(("text", "expected"), BAD_GRIDS)
def test_malformed_grid_refused_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expected: str
) -> None:
    path = write(tmp_path / "bad.toml", text)
    with pytest.raises(SweepError, match=None) as info:
        load_grid(path)
    assert expected in str(info.value)
    rc = run(["sweep", str(path), "--out", str(tmp_path / "out"), "--backend", "process"])
    err = capsys.readouterr().err
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("prefillkit: error: ") and str(path) in lines[0]
    assert expected in lines[0]
    assert not (tmp_path / "out").exists()  # refused before anything ran


def test_bad_combination_names_the_point(tmp_path: Path) -> None:
    text = "[grid]\ntp_size = [8, 3]\n"
    with pytest.raises(SweepError) as info:
        load_grid(write(tmp_path / "g.toml", text))
    assert "tp_size" in str(info.value) and "\n" not in str(info.value)


def test_nothing_but_the_sweep_store_and_backend_imports_ray_or_pyarrow() -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import prefillkit.cache, prefillkit.sched.scheduler, prefillkit.request\n"
        "import prefillkit.sim.engine, prefillkit.cli\n"
        "import prefillkit.app.sweep.grid, prefillkit.app.sweep.points\n"
        "print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in ('ray', 'pyarrow'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=_ENV
    )
    assert out.stdout.strip() == ""


def test_missing_extra_is_one_line_naming_it(tmp_path: Path) -> None:
    import subprocess
    import sys

    grid = write(tmp_path / "g.toml", TINY_GRID)
    for blocked, args in (
        ("pyarrow", ["--backend", "process"]),
        ("ray", ["--backend", "ray"]),
    ):
        argv = ["sweep", str(grid), "--out", str(tmp_path / blocked), *args]
        code = (
            f"import sys; sys.modules[{blocked!r}] = None\n"
            "from prefillkit.cli import run\n"
            f"sys.exit(run({argv!r}))\n"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_ENV)
        assert out.returncode == 2, out.stderr
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and "pip install 'prefillkit[sweep]'" in lines[0], out.stderr


def test_trace_ids_do_not_depend_on_the_working_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sweep_support import even_trace

    (tmp_path / "sub").mkdir()
    even_trace(tmp_path / "sub" / "t.jsonl", 3)
    path = write(tmp_path / "sub" / "g.toml", '[[workload]]\nname = "t"\ntrace = "t.jsonl"\n')
    by_abs = [p.id for p in load_grid(path).points()]
    monkeypatch.chdir(tmp_path)
    assert [p.id for p in load_grid("sub/g.toml").points()] == by_abs
    monkeypatch.chdir(tmp_path / "sub")
    assert [p.id for p in load_grid("g.toml").points()] == by_abs


def test_bundled_trace_by_name_runs_as_replay_does(tmp_path: Path) -> None:
    """``trace = "mooncake-slice"`` names the bundled trace (as ``replay --trace``), kept
    by name so the point id does not depend on where the package is installed."""
    from prefillkit.app.sweep.points import run_point

    path = write(
        tmp_path / "g.toml",
        '[[workload]]\nname = "s"\ntrace = "mooncake-slice"\nmax_requests = 20\n',
    )
    (point,) = load_grid(path).points()
    assert point.workload["trace"] == "mooncake-slice"
    status, row, _ = run_point(point.to_dict())
    assert status == "ok", row
    assert row["completed"] == 20
