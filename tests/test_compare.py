"""``prefillkit compare`` and ``prefillkit report``, run as a user would: in a subprocess."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from prefillkit.app.settings import Config, field_flag

# NOTE: the subject here is interpreted code; .ci/run's compiled-build run skips it.
pytestmark = pytest.mark.interpreted

ROOT = Path(__file__).resolve().parents[1]
MOONCAKE = ROOT.parent / "shared" / "traces" / "mooncake_fast25" / "conversation_trace.jsonl"
# The bundled slice (its first 600 requests are the full trace's): runs from any clone.
TRACE = "mooncake-slice"
RUN_FILES = ["batches.csv", "requests.csv", "summary.json"]
VARIANTS = {
    "fcfs": "--schedule-policy fcfs",
    "lpm": "--schedule-policy lpm",
    "affinity-bs4": (
        "--enable-cp-shared-kv-prefill-bs-gt1 --cp-shared-kv-prefill-max-requests 4 "
        "--enable-affinity"
    ),
}
VARIANT_ARGS = [arg for name, flags in VARIANTS.items() for arg in ("--variant", f"{name}:{flags}")]
# A small generated workload for the error and option tests (fast to load and run).
SMALL = ["--generator", "gsp", "--gsp-num-groups", "4", "--gsp-prompts-per-group", "4"]

needs_mooncake = pytest.mark.skipif(
    not MOONCAKE.exists(),
    reason="full traces not present: run from a checkout beside ../shared/traces, see README",
)


def run_cli(
    *args: str | os.PathLike[str], timeout: float = 60, **env: str
) -> subprocess.CompletedProcess[str]:
    full_env = dict(os.environ)
    full_env.pop("PREFILLKIT_DEBUG", None)
    full_env.update(env)
    return subprocess.run(
        [sys.executable, "-m", "prefillkit.cli", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
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


def assert_self_contained(page: str) -> None:
    """One static page: images inline as data URIs, nothing fetched from anywhere."""
    assert page.startswith("<!DOCTYPE html>")
    assert "http://" not in page and "https://" not in page
    assert "<link" not in page and not re.search(r"<script[^>]*\bsrc=", page)
    images = re.findall(r'<img\b[^>]*\bsrc="([^"]*)"', page)
    assert images, "no plots embedded"
    assert all(src.startswith("data:image/png;base64,") for src in images)


def compare_cmd(out: Path, *extra: str) -> list[str]:
    return [
        "compare",
        "--trace",
        TRACE,
        "--max-requests",
        "400",
        *VARIANT_ARGS,
        "--out",
        str(out),
        *extra,
    ]


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The three-variant comparison on a Mooncake slice, with --report: (OUT, stdout)."""
    out = tmp_path_factory.mktemp("cmp") / "out"
    proc = run_cli(*compare_cmd(out, "--report"), COLUMNS="120")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    return out, proc.stdout


# --------------------------------------------------------------------------- compare


def test_compare_prints_table_with_every_variant(compared: tuple[Path, str]) -> None:
    _, stdout = compared
    assert "Comparison vs baseline fcfs" in stdout
    assert "fcfs (baseline)" in stdout
    for name in VARIANTS:
        assert name in stdout
    for label in ("TTFT p99", "cache hit rate", "paired requests", "TTFT ratio geomean"):
        assert label in stdout
    assert "×" in stdout  # ratios against the baseline


def test_compare_writes_run_dirs_and_paired_stats(compared: tuple[Path, str]) -> None:
    out, _ = compared
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [*VARIANTS, "compare.json", "report.html"]
    )
    for name in VARIANTS:
        assert sorted(p.name for p in (out / name).iterdir()) == RUN_FILES
        summary = json.loads((out / name / "summary.json").read_text())
        assert summary["name"] == name and summary["partial"] is False
        assert summary["metrics"]["requests"] == 400
    lpm_cfg = json.loads((out / "lpm" / "summary.json").read_text())["config"]
    aff_cfg = json.loads((out / "affinity-bs4" / "summary.json").read_text())["config"]
    assert lpm_cfg["schedule_policy"] == "lpm"
    assert aff_cfg["enable_affinity"] is True
    assert aff_cfg["cp_shared_kv_prefill_max_requests"] == 4

    doc = json.loads((out / "compare.json").read_text())
    assert doc["baseline"] == "fcfs"
    assert [v["name"] for v in doc["variants"]] == list(VARIANTS)
    assert doc["workload"]["requests"] == 400
    base, *others = doc["variants"]
    assert base["is_baseline"] and base["paired"] is None
    assert base["spec"]["flags"] == ["--schedule-policy", "fcfs"]
    for v in others:
        assert v["dir"] == v["name"]
        p = v["paired"]
        assert p["n_paired"] == 400
        ratio = p["ratio"]
        assert ratio["n"] == 400
        assert ratio["p10"] <= ratio["p50"] <= ratio["p90"]
        assert 0.0 <= ratio["frac_improved"] <= 1.0 and 0.0 <= ratio["frac_worse"] <= 1.0
        assert ratio["geomean"] > 0
        assert p["p99_diff_lo_s"] <= p["p99_diff_s"] <= p["p99_diff_hi_s"]
        assert p["p99_diff_s"] == pytest.approx(p["other_p99_s"] - p["base_p99_s"])
        m, d, r = v["metrics"], v["delta"], v["ratio"]
        key = "ttft_p99_s"
        assert d[key] == pytest.approx(m[key] - base["metrics"][key])
        assert r[key] == pytest.approx(m[key] / base["metrics"][key])


def test_compare_report_is_self_contained(compared: tuple[Path, str]) -> None:
    out, _ = compared
    page = (out / "report.html").read_text(encoding="utf-8")
    assert_self_contained(page)
    assert "Comparison" in page and "Paired per-request statistics" in page
    assert "Configuration" in page
    for name in VARIANTS:
        assert name in page


def test_same_compare_twice_gives_identical_compare_json(
    compared: tuple[Path, str], tmp_path: Path
) -> None:
    out, _ = compared
    again = tmp_path / "again"
    proc = run_cli(*compare_cmd(again, "--jobs", "1", "--quiet"), PYTHONHASHSEED="4321")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert (again / "compare.json").read_bytes() == (out / "compare.json").read_bytes()
    for name in VARIANTS:
        for file in RUN_FILES:
            assert (again / name / file).read_bytes() == (out / name / file).read_bytes()


def test_report_command_on_compare_dir(compared: tuple[Path, str], tmp_path: Path) -> None:
    out, _ = compared
    target = tmp_path / "pages" / "cmp.html"
    proc = run_cli("report", out, "-o", target)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(target)
    page = target.read_text(encoding="utf-8")
    assert_self_contained(page)
    assert "Paired per-request statistics" in page
    for name in VARIANTS:
        assert name in page


def test_replay_report_flag_and_report_command(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = run_cli(
        "replay", "--trace", TRACE, "--max-requests", "200", "--out", out, "--report", "-q"
    )
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted([*RUN_FILES, "report.html"])
    assert_self_contained((out / "report.html").read_text(encoding="utf-8"))

    (out / "report.html").unlink()
    proc = run_cli("report", out)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(out / "report.html")
    page = (out / "report.html").read_text(encoding="utf-8")
    assert_self_contained(page)
    assert "Summary" in page and "Comparison" not in page


def test_json_output_without_out_uses_no_folder(tmp_path: Path) -> None:
    proc = run_cli(
        "compare", *SMALL, "--variant", "base:", "--variant", "lpm:--schedule-policy lpm", "--json"
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["format"] == "prefillkit-compare"
    assert [v["name"] for v in doc["variants"]] == ["base", "lpm"]
    assert doc["variants"][1]["paired"]["n_paired"] == doc["workload"]["requests"] == 16


def test_single_variant_is_the_baseline() -> None:
    proc = run_cli("compare", *SMALL, "--variant", "only:--schedule-policy lpm", "-q")
    assert proc.returncode == 0, proc.stderr
    assert "only (baseline)" in proc.stdout


def test_variants_file_and_toml_variant(tmp_path: Path) -> None:
    (tmp_path / "lpm.toml").write_text('[prefillkit]\nschedule_policy = "lpm"\n')
    (tmp_path / "variants.toml").write_text(
        "[[variant]]\n"
        'name = "fcfs"\n'
        'flags = "--schedule-policy fcfs"\n'
        "\n[[variant]]\n"
        'name = "chunk8k"\n'
        "chunked_prefill_size = 8192\n"
        "\n[[variant]]\n"
        'name = "aff"\n'
        'config = "lpm.toml"\n'
        "settings = { enable_affinity = true }\n"
    )
    out = tmp_path / "out"
    proc = run_cli(
        "compare",
        *SMALL,
        "--chunked-prefill-size",
        "4096",
        "--variants-file",
        tmp_path / "variants.toml",
        "--variant",
        f"file:@{tmp_path / 'lpm.toml'}",
        "--out",
        out,
        "-q",
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((out / "compare.json").read_text())
    assert [v["name"] for v in doc["variants"]] == ["fcfs", "chunk8k", "aff", "file"]
    configs = {
        name: json.loads((out / name / "summary.json").read_text())["config"]
        for name in ("fcfs", "chunk8k", "aff", "file")
    }
    # Shared flag everywhere, unless the variant overrides it.
    assert configs["fcfs"]["chunked_prefill_size"] == 4096
    assert configs["chunk8k"]["chunked_prefill_size"] == 8192
    assert configs["aff"]["schedule_policy"] == "lpm" and configs["aff"]["enable_affinity"]
    assert configs["file"]["schedule_policy"] == "lpm"
    assert configs["file"]["chunked_prefill_size"] == 4096


# --------------------------------------------------------------------------- errors


def test_bad_variant_flag_is_one_line_naming_the_variant(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = run_cli(
        "compare",
        *SMALL,
        "--variant",
        "fcfs:--schedule-policy fcfs",
        "--variant",
        "affinity:--enable-afinity",
        "--out",
        out,
    )
    line = assert_one_line_error(proc)
    assert line == (
        "prefillkit: error: variant 'affinity': unknown flag '--enable-afinity' "
        "(did you mean '--enable-affinity'?)"
    )
    assert not (out / "fcfs").exists()  # reported before any run started


@pytest.mark.parametrize(
    ("variants", "needles"),
    [
        (["a:", "a:--schedule-policy lpm"], ["duplicate variant name 'a'"]),
        (["fast:", "FAST:"], ["duplicate variant name 'FAST'"]),
        (["../up:"], ["bad variant name '../up'"]),
        (["compare.json:"], ["bad variant name 'compare.json'"]),
        (["noflags"], ["--variant 'noflags'", 'NAME:"FLAGS"']),
        (["a:--schedule-policy lpx"], ["variant 'a'", "--schedule-policy", "lpm"]),
        (["a:--gpu b300"], ["variant 'a'", "--gpu"]),
        (["a:@missing.toml"], ["variant 'a'", "missing.toml"]),
        (['a:"--unbalanced'], ["variant 'a'", "quotation"]),
        ([], ["no variants"]),
    ],
)
def test_bad_variants_are_one_line(variants: list[str], needles: list[str]) -> None:
    args = [arg for v in variants for arg in ("--variant", v)]
    assert_one_line_error(run_cli("compare", *SMALL, *args), *needles)


def test_bad_variants_file_is_one_line(tmp_path: Path) -> None:
    file = tmp_path / "v.toml"
    file.write_text('[[variant]]\nname = "x"\nenable_afinity = true\n')
    assert_one_line_error(
        run_cli("compare", "--variants-file", file),
        "variant 'x'",
        "unknown setting 'enable_afinity'",
        "enable_affinity",
    )


def test_shared_flag_errors_and_report_needs_out(tmp_path: Path) -> None:
    assert_one_line_error(
        run_cli("compare", "--variant", "a:", "--schedule-polcy", "lpm"),
        "unknown flag '--schedule-polcy'",
        "--schedule-policy",
    )
    assert_one_line_error(run_cli("compare", "--variant", "a:", "--report"), "--report", "--out")
    assert_one_line_error(run_cli("replay", "--report"), "--report", "--out")
    assert_one_line_error(run_cli("report", tmp_path), "compare.json", "summary.json")
    assert_one_line_error(run_cli("report", tmp_path / "missing"), "not found")


def test_help_is_complete() -> None:
    proc = run_cli("compare", "--help")
    assert proc.returncode == 0, proc.stderr
    for opt in (
        "--variant NAME:",
        "--variants-file",
        "--jobs",
        "--out",
        "--report",
        "--json",
        "--trace",
        "--max-requests",
        "--config",
        "compare.json",
    ):
        assert opt in proc.stdout, opt
    for f in dataclasses.fields(Config):
        assert field_flag(f.name) in proc.stdout, f.name
    proc = run_cli("report", "--help")
    assert proc.returncode == 0 and "-o, --output PATH" in proc.stdout
    proc = run_cli("replay", "--help")
    assert "--report" in proc.stdout
    proc = run_cli("--help")
    assert "compare" in proc.stdout and "report" in proc.stdout


@needs_mooncake
@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_sigint_stops_the_workers(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "prefillkit.cli",
            "compare",
            "--trace",
            str(MOONCAKE),
            *VARIANT_ARGS,
            "--jobs",
            "2",
            "--out",
            str(tmp_path / "out"),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()  # printed once every variant is checked and loaded
        assert line.startswith("comparing 3 variants"), line
        time.sleep(1.0)
        workers = subprocess.run(
            ["ps", "--ppid", str(proc.pid), "-o", "pid="], capture_output=True, text=True
        ).stdout.split()
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr, stderr
    assert "interrupted" in stderr, stderr
    assert not (tmp_path / "out" / "compare.json").exists()
    deadline = time.monotonic() + 5
    while any(Path(f"/proc/{pid}").exists() for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(Path(f"/proc/{pid}").exists() for pid in workers), workers
