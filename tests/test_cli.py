"""The ``prefillkit`` command line, run as a user would: in a subprocess."""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest

from prefillkit.app.settings import Config, field_flag
from prefillkit.records.metrics import BATCH_COLUMNS, REQUEST_COLUMNS

#: The subject is interpreted code; .ci/run's run on the compiled build deselects it.
pytestmark = pytest.mark.interpreted

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "traces"
MOONCAKE = TRACES / "mooncake_fast25" / "conversation_trace.jsonl"
BAD = Path(__file__).resolve().parent / "data" / "bad"
MANIFEST: dict[str, dict[str, Any]] = tomllib.loads((BAD / "MANIFEST.toml").read_text())
ALL_FLAGS = [field_flag(f.name) for f in dataclasses.fields(Config)]
SUMMARY_KEYS = {"name", "partial", "config", "deployment", "workload", "metrics"}

needs_mooncake = pytest.mark.skipif(
    not MOONCAKE.exists(),
    reason="full traces not present: run from a checkout beside ../shared/traces, see README",
)


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PREFILLKIT_DEBUG", None)
    # NOTE: the tree under test, not whatever prefillkit is installed.
    src = str(Path(__file__).resolve().parents[1] / "src")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    env.update(extra)
    return env


def run_cli(
    *args: str | os.PathLike[str], timeout: float = 60, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "prefillkit.cli", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_env(**env),
    )


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Exit 2 with exactly one ``prefillkit: error:`` line on stderr, no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip("\n").splitlines()
    assert len(lines) == 1, proc.stderr
    line = lines[0]
    assert line.startswith("prefillkit: error: "), line
    for needle in needles:
        assert needle in line, (needle, line)
    return line


def read_csv(path: Path) -> tuple[list[str], list[list[str]]]:
    with path.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    return rows[0], rows[1:]


# --------------------------------------------------------------------------- replay


def test_default_replay_prints_table() -> None:
    proc = run_cli("replay")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for text in ("TTFT p50", "TTFT p99", "cache hit rate", "completed", "generator:agentic"):
        assert text in out
    # The default deployment: GLM-5 on 8xH200, CP 8 shared-KV, HiCache.
    assert "glm-5 on 8xh200, CP 8 shared-KV, HiCache" in out
    assert "Traceback" not in proc.stderr


def test_json_summary_parses() -> None:
    proc = run_cli("replay", "--json", "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    doc = json.loads(proc.stdout)
    assert SUMMARY_KEYS <= set(doc)
    assert doc["partial"] is False
    cfg = doc["config"]
    assert (cfg["tp_size"], cfg["cp_size"], cfg["page_size"]) == (8, 8, 64)
    assert cfg["enable_cp_shared_kv"] is True and cfg["enable_hierarchical_cache"] is True
    assert cfg["model"] == "glm-5" and cfg["gpu"] == "h200"
    metrics = doc["metrics"]
    assert metrics["requests"] == doc["workload"]["requests"] > 0
    assert metrics["completed"] == metrics["requests"]
    assert "wall_time_s" not in metrics
    assert doc["timing"]["wall_time_s"] > 0


def test_user_values_override_deployment_defaults() -> None:
    proc = run_cli(
        "replay",
        "--json",
        "--quiet",
        "--preset",
        "demo",
        "--cp-size",
        "1",
        "--no-enable-hierarchical-cache",
    )
    assert proc.returncode == 0, proc.stderr
    cfg = json.loads(proc.stdout)["config"]
    assert (cfg["tp_size"], cfg["cp_size"], cfg["page_size"]) == (8, 1, 1)
    assert cfg["enable_cp_shared_kv"] is False and cfg["enable_hierarchical_cache"] is False


def test_gsp_generator() -> None:
    proc = run_cli(
        "replay", "--json", "--quiet", "--gsp-num-groups", "4", "--gsp-prompts-per-group", "8"
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["workload"]["generator"] == "gsp"
    assert doc["metrics"]["requests"] == 32


@pytest.fixture(scope="module")
def mooncake_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The bundled Mooncake slice replayed twice (different hash seeds, same run name)."""
    dirs = []
    for i, hash_seed in enumerate(("0", "12345")):
        out = tmp_path_factory.mktemp(f"run{i}")
        trace = "mooncake-slice"  # the first 600 requests of the full trace, in the package
        proc = run_cli(
            "replay",
            "--trace",
            trace,
            "--max-requests",
            "300",
            "--out",
            out,
            "--name",
            "slice",
            "--quiet",
            PYTHONHASHSEED=hash_seed,
        )
        assert proc.returncode == 0, proc.stderr
        assert "TTFT p50" in proc.stdout
        dirs.append(out)
    return dirs[0], dirs[1]


def test_mooncake_slice_writes_run_dir(mooncake_runs: tuple[Path, Path]) -> None:
    out = mooncake_runs[0]
    assert sorted(p.name for p in out.iterdir()) == ["batches.csv", "requests.csv", "summary.json"]
    doc = json.loads((out / "summary.json").read_text())
    # + the manifest of the CSVs, and replay's settings base and per-setting sources
    assert set(doc) == SUMMARY_KEYS | {"files", "base", "sources"}
    assert doc["sources"]["model"] == "preset demo" and doc["base"].startswith("the demo preset")
    assert doc["name"] == "slice" and doc["partial"] is False
    assert doc["workload"]["requests"] == 300
    assert doc["workload"]["format"] == "mooncake"
    assert doc["config"]["chunked_prefill_size"] == 8192
    assert doc["deployment"]["key_tokens"] == 512
    metrics = doc["metrics"]
    assert metrics["requests"] == 300 and metrics["completed"] == 300
    assert "wall_time_s" not in metrics

    header, rows = read_csv(out / "requests.csv")
    assert tuple(header) == REQUEST_COLUMNS
    assert len(rows) == 300
    assert all(len(r) == len(header) for r in rows)
    assert {r[header.index("status")] for r in rows} == {"finished"}
    assert sum(int(r[header.index("device_hit_tokens")]) for r in rows) > 0

    header, rows = read_csv(out / "batches.csv")
    fixed = len(BATCH_COLUMNS)
    assert tuple(header[:fixed]) == BATCH_COLUMNS
    # Then one t_<term>_s column per term of the cost model's breakdown.
    assert header[fixed:] and all(re.fullmatch(r"t_\w+_s", c) for c in header[fixed:])
    assert len(rows) == metrics["num_batches"] > 0
    assert {r[header.index("has_chunked")] for r in rows} <= {"true", "false"}


def test_same_seed_gives_byte_identical_files(mooncake_runs: tuple[Path, Path]) -> None:
    a, b = mooncake_runs
    for name in ("requests.csv", "batches.csv", "summary.json"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_pasted_sglang_flags_are_accepted() -> None:
    proc = run_cli(
        "replay",
        "--json",
        "--quiet",
        "--model-path",
        "zai-org/GLM-5",
        "--tp",
        "8",
        "--chunked-prefill-size",
        "16384",
        "--page-size",
        "64",
        "--trust-remote-code",
        "--host",
        "0.0.0.0",
        "--port",
        "30000",
        "--mem-fraction-static",
        "0.85",
        "--disaggregation-mode",
        "prefill",
        "--schedule-conservativeness=1.3",
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines == ["ignored (no effect on admission): --trust-remote-code, --host, --port"]
    cfg = json.loads(proc.stdout)["config"]
    assert cfg["chunked_prefill_size"] == 16384
    assert cfg["page_size"] == 64
    assert cfg["mem_fraction_static"] == 0.85
    assert cfg["schedule_conservativeness"] == 1.3
    assert cfg["mode"] == "pd-prefill"


def test_unknown_flag_is_one_line_with_suggestion() -> None:
    proc = run_cli("replay", "--chunked-prefil-size", "8192")
    assert_one_line_error(
        proc, "unknown flag '--chunked-prefil-size'", "did you mean '--chunked-prefill-size'"
    )
    proc = run_cli("replay", "--max-request", "3")
    assert_one_line_error(proc, "did you mean '--max-requests'")


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--chunked-prefill-size", "100"], "--chunked-prefill-size"),
        (["--page-size", "abc"], "--page-size"),
        (["--schedule-policy", "lpx"], "--schedule-policy"),
    ],
)
def test_bad_config_value_names_the_flag(args: list[str], flag: str) -> None:
    assert_one_line_error(run_cli("replay", *args), flag)


def test_bad_toml_config(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[prefillkit]\nmem-fraction-static = 1.5\n")
    assert_one_line_error(run_cli("replay", "--config", bad), "--mem-fraction-static")


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_malformed_trace_is_one_line_naming_file_and_line(name: str) -> None:
    entry = MANIFEST[name]
    path = BAD / name
    proc = run_cli("replay", "--trace", path, "--format", entry["format"])
    where = f"{path}:{entry['line']}:" if "line" in entry else f"{path}:"
    assert_one_line_error(proc, where, entry["match"])


def test_missing_trace_and_unwritable_out(tmp_path: Path) -> None:
    assert_one_line_error(run_cli("replay", "--trace", tmp_path / "nope.jsonl"), "nope.jsonl")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert_one_line_error(run_cli("replay", "--out", blocker / "sub"), "--out")


def test_click_usage_errors_are_one_line() -> None:
    assert_one_line_error(run_cli("trace-stats"), "Missing argument")
    assert_one_line_error(run_cli("replay", "--max-requests", "0"), "--max-requests")
    assert_one_line_error(run_cli("knobs", "--markdwn"), "--markdown")
    assert_one_line_error(run_cli("no-such-command"), "no-such-command")


# --------------------------------------------------------------------------- trace-stats


@needs_mooncake
def test_trace_stats_mooncake_table() -> None:
    proc = run_cli("trace-stats", MOONCAKE)
    assert proc.returncode == 0, proc.stderr
    assert "12,031" in proc.stdout
    assert "36.64 %" in proc.stdout  # partial last block counts (trace README)
    assert "36.60 %" in proc.stdout  # partial last block never shared


@needs_mooncake
def test_trace_stats_mooncake_json_with_lru() -> None:
    proc = run_cli(
        "trace-stats",
        MOONCAKE,
        "--json",
        "--lru-cache-tokens",
        str(10**12),
        "--lru-cache-tokens",
        "2000000",
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["num_requests"] == 12031
    assert round(doc["block_hit_rate"] * 100, 2) == 36.64
    assert round(doc["block_hit_rate_no_partial"] * 100, 2) == 36.60
    huge, small = doc["lru"]
    assert huge["key_tokens"] == 512 and huge["page_size"] == 64
    # An LRU cache larger than the trace is the ideal cache without partial sharing.
    assert huge["hit_rate"] == pytest.approx(doc["token_hit_rate_no_partial"], abs=1e-12)
    assert 0 < small["hit_rate"] < huge["hit_rate"]


# --------------------------------------------------------------------------- help, knobs


def test_replay_help_lists_every_config_flag() -> None:
    proc = run_cli("replay", "--help")
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    for flag in ALL_FLAGS:
        assert f"{flag} " in text, flag
    for option in ("--trace", "--format", "--gsp-num-groups", "--agentic-sessions", "--out"):
        assert option in text
    assert "[default: 8192]" in text  # --chunked-prefill-size
    assert "--preset [demo|seed]" in text and "demo deployment" in text
    assert "--model-path" in text and "--model-config" in text


def test_trace_stats_help_and_knobs() -> None:
    proc = run_cli("trace-stats", "--help")
    assert proc.returncode == 0
    for option in ("--lru-cache-tokens", "--page-size", "--block-size", "--format", "--json"):
        assert option in proc.stdout
    proc = run_cli("knobs", "--markdown")
    assert proc.returncode == 0
    assert proc.stdout.startswith(
        "| flag | launch line | --preset demo | --preset seed | meaning |"
    )
    for flag in ALL_FLAGS:
        assert f"| `{flag}` |" in proc.stdout


def test_console_script_and_python_m() -> None:
    scripts = Path(sys.executable).parent
    exe = scripts / "prefillkit"
    if not exe.exists():
        found = shutil.which("prefillkit")
        if found is None:
            pytest.skip("prefillkit console script not installed")
        exe = Path(found)
    proc = subprocess.run(
        [str(exe), "knobs"], capture_output=True, text=True, timeout=60, env=_env()
    )
    assert proc.returncode == 0, proc.stderr
    assert "--chunked-prefill-size" in proc.stdout
    proc = subprocess.run(
        [sys.executable, "-m", "prefillkit", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(),
    )
    assert proc.returncode == 0 and "prefillkit" in proc.stdout


# --------------------------------------------------------------------------- SIGINT


def _rows_written(out: Path) -> bool:
    """Whether a running replay's first request rows reached their temporary file."""
    for part in out.glob(".requests.csv.*.part"):
        try:
            if part.stat().st_size:
                return True
        except FileNotFoundError:  # committed meanwhile
            pass
    return False


@needs_mooncake
@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_sigint_writes_partial_results(tmp_path: Path) -> None:
    out = tmp_path / "partial"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "prefillkit.cli",
            "replay",
            "--trace",
            str(MOONCAKE),
            "--debug-check-invariants",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    assert proc.stderr is not None
    lines: queue.Queue[str] = queue.Queue()
    stderr_lines: list[str] = []

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.put(line)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        # Wait until the replay has started (the trace is loaded), then interrupt it.
        deadline = time.monotonic() + 30
        while True:
            line = lines.get(timeout=max(deadline - time.monotonic(), 0.1))
            stderr_lines.append(line)
            if line.startswith("replaying "):
                break
        # NOTE: after N finished requests, not after a sleep: the first rows of
        # requests.csv reach its temporary file (256 K characters: ~2,000 requests).
        while not _rows_written(out):
            assert proc.poll() is None, "the replay ended before its first rows"
            assert time.monotonic() < deadline + 300, "no rows written in 330 s"
            time.sleep(0.01)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)  # stdout is small (a table): no pipe deadlock
        assert proc.stdout is not None
        stdout = proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(timeout=10)
    while not lines.empty():
        stderr_lines.append(lines.get())
    stderr = "".join(stderr_lines)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert "interrupted" in stderr
    doc = json.loads((out / "summary.json").read_text())
    assert doc["partial"] is True
    assert 0 < doc["metrics"]["completed"] < 12031
    header, rows = read_csv(out / "requests.csv")
    assert tuple(header) == REQUEST_COLUMNS
    assert doc["metrics"]["completed"] <= len(rows) < 12031
    assert "(partial)" in stdout


@pytest.mark.parametrize(
    "flags,needles",
    [
        (["--tp", "4", "--tp-size", "8"], ("--tp-size: given twice", "--tp")),
        (["--page-size", "16", "--page-size", "64"], ("--page-size: given twice",)),
        (["--enable-affinity", "--no-enable-affinity"], ("--no-enable-affinity: given twice",)),
    ],
)
def test_duplicate_or_aliased_flags_are_refused(flags: list[str], needles: tuple[str, ...]) -> None:
    proc = run_cli("replay", "--agentic-sessions", "2", "-q", *flags)
    assert_one_line_error(proc, *needles)


def test_out_summary_that_is_a_folder_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "run" / "summary.json").mkdir(parents=True)
    proc = run_cli("replay", "--agentic-sessions", "2", "-q", "--out", tmp_path / "run")
    assert_one_line_error(proc, "summary.json", "is a folder")
    assert not (tmp_path / "run" / "requests.csv").exists()
