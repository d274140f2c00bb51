"""The seed-like workload: ``--generator seed``, the ``--agentic-*`` options, the
``[workload]`` TOML table and ``prefillkit generate``."""

from __future__ import annotations

import itertools
import json
import subprocess
import time
from pathlib import Path

import pytest

from cli_support import cli
from prefillkit.app.replay import WorkloadSpec, generate_records
from prefillkit.workloads.agentic import multi_turn_agentic
from prefillkit.workloads.generators import SEED_AGENTIC, merge_agentic_args, seed_agentic
from prefillkit.workloads.options import AGENTIC_PARAMS, GSP_PARAMS
from prefillkit.workloads.record import TraceRecord
from prefillkit.workloads.stats import trace_stats
from prefillkit.workloads.trace_reader import load_records

#: The subject is interpreted code; .ci/run's run on the compiled build deselects it.
pytestmark = pytest.mark.interpreted

ROOT = Path(__file__).resolve().parents[1]
CHUNK = 16384  # chunked_prefill_size of the seed deployment


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip("\n").splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("prefillkit: error: "), lines[0]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def sessions(records: list[TraceRecord]) -> dict[str, list[TraceRecord]]:
    """Records by session id (``agent-s<N>-t<K>``), turns in order."""
    out: dict[str, list[TraceRecord]] = {}
    for r in records:
        out.setdefault(r.rid.split("-")[1], []).append(r)
    for turns in out.values():
        assert [int(t.rid.rsplit("-t", 1)[1]) for t in turns] == list(range(len(turns)))
    return out


@pytest.fixture(scope="module")
def preset() -> list[TraceRecord]:
    return seed_agentic()


# --------------------------------------------------------------------------- the preset


def test_preset_ideal_hit_rate(preset: list[TraceRecord]) -> None:
    st = trace_stats(preset)
    for rate in (st.block_hit_rate, st.token_hit_rate, st.token_hit_rate_no_partial):
        assert 0.88 <= rate <= 0.93, rate
    assert round(st.block_hit_rate * 100, 2) == 91.66  # the figure the docs quote (seed 0)


def test_preset_is_fast_and_sorted(preset: list[TraceRecord]) -> None:
    t0 = time.perf_counter()
    again = seed_agentic()
    assert time.perf_counter() - t0 < 2.0
    assert again == preset
    times = [r.arrival_s for r in preset]
    assert times == sorted(times)
    assert len(sessions(preset)) == SEED_AGENTIC["num_sessions"] == 300


def test_preset_turns_and_contexts(preset: list[TraceRecord]) -> None:
    by_session = sessions(preset)
    turn_counts = [len(t) for t in by_session.values()]
    assert min(turn_counts) >= 10 and max(turn_counts) <= 30
    assert max(turn_counts) >= 25  # the range is used, not just its bottom
    firsts = [t[0].input_len for t in by_session.values()]
    assert min(firsts) > CHUNK  # every cold first turn is chunked at 16384
    lasts = [t[-1].input_len for t in by_session.values()]
    assert min(lasts) >= 32 * 1024 and max(lasts) <= 128 * 1024
    assert max(lasts) > 120 * 1024
    for turns in by_session.values():
        for prev, cur in itertools.pairwise(turns):
            full = prev.input_len // 64
            assert prev.hash_ids is not None and cur.hash_ids is not None
            assert cur.hash_ids[:full] == prev.hash_ids[:full]  # context is a prefix
            assert cur.arrival_s > prev.arrival_s


def test_preset_first_turns_are_cold(preset: list[TraceRecord]) -> None:
    """Per-session system prompts: no block of a session's first turn appears in any
    other session, so first turns miss entirely."""
    by_session = sessions(preset)
    owner: dict[int, str] = {}
    for sid, turns in by_session.items():
        for turn in turns:
            assert turn.hash_ids is not None
            for h in turn.hash_ids:
                assert owner.setdefault(h, sid) == sid, (h, sid, owner[h])
    # And the trace-stats view agrees: no first turn has a hit.
    firsts = [turns[0] for turns in by_session.values()]
    assert trace_stats(firsts).block_hit_rate == 0.0


def test_sessions_per_system_prompt_groups() -> None:
    recs = multi_turn_agentic(
        num_sessions=7,
        sessions_per_system_prompt=3,
        system_prompt_len=(1024, 4096),
        turns_per_session=(1, 1),
        seed=3,
    )
    first = {r.rid.split("-")[1]: r for r in recs}
    blocks = {sid: r.hash_ids for sid, r in first.items()}

    def shares(a: str, b: str) -> bool:
        x, y = blocks[a], blocks[b]
        assert x is not None and y is not None
        return x[0] == y[0]

    assert shares("s0", "s1") and shares("s1", "s2") and not shares("s2", "s3")
    assert shares("s3", "s5") and not shares("s5", "s6")

    # System prompt lengths are drawn per prompt: the three groups differ.
    def common(a: str, b: str) -> int:
        x, y = blocks[a], blocks[b]
        assert x is not None and y is not None
        return next(i for i, (u, v) in enumerate(zip(x, y, strict=False)) if u != v)

    sys_blocks = {common("s0", "s1"), common("s3", "s4")}
    assert len(sys_blocks) == 2 and all(16 <= n <= 64 for n in sys_blocks)


def test_fixed_system_prompt_len_draws_nothing() -> None:
    assert multi_turn_agentic(num_sessions=5, system_prompt_len=(512, 512), seed=2) == (
        multi_turn_agentic(num_sessions=5, system_prompt_len=512, seed=2)
    )


def test_max_prompt_len_ends_sessions() -> None:
    free = multi_turn_agentic(num_sessions=20, turns_per_session=(12, 12), seed=4)
    capped = multi_turn_agentic(
        num_sessions=20, turns_per_session=(12, 12), seed=4, max_prompt_len=12_000
    )
    assert max(r.input_len for r in free) > 12_000
    assert max(r.input_len for r in capped) <= 12_000
    assert len(capped) < len(free)
    # Turn 1 is kept even when it alone is longer than the limit.
    one = multi_turn_agentic(num_sessions=2, max_prompt_len=100, seed=1)
    assert len(one) == 2 and all(r.rid.endswith("-t0") for r in one)


def test_generator_argument_errors() -> None:
    with pytest.raises(ValueError, match="give one of them, not both"):
        multi_turn_agentic(num_system_prompts=2, sessions_per_system_prompt=1)
    with pytest.raises(ValueError, match=r"^sessions_per_system_prompt must be >= 1"):
        multi_turn_agentic(sessions_per_system_prompt=0)
    with pytest.raises(ValueError, match=r"^system_prompt_len must be"):
        multi_turn_agentic(system_prompt_len=(9, 3))
    with pytest.raises(ValueError, match=r"^max_prompt_len must be > 0"):
        multi_turn_agentic(max_prompt_len=0)


def test_merge_replaces_the_system_prompt_choice() -> None:
    merged = merge_agentic_args(SEED_AGENTIC, {"num_system_prompts": 4})
    assert merged["num_system_prompts"] == 4 and "sessions_per_system_prompt" not in merged
    both = merge_agentic_args(SEED_AGENTIC, {"num_sessions": 3})
    assert both["sessions_per_system_prompt"] == 1 and both["num_sessions"] == 3
    assert seed_agentic(num_sessions=4, num_system_prompts=1, turns_per_session=(1, 1))


def test_every_generator_parameter_has_an_option() -> None:
    import inspect

    from prefillkit.workloads.generators import generated_shared_prefix

    for fn, params in ((multi_turn_agentic, AGENTIC_PARAMS), (generated_shared_prefix, GSP_PARAMS)):
        names = set(inspect.signature(fn).parameters) - {"seed", "vocab_size"}
        assert names == {p.name for p in params}, fn.__name__


# --------------------------------------------------------------------------- command line


def generate(tmp_path: Path, *args: str, name: str = "w.jsonl") -> tuple[Path, str]:
    out = tmp_path / name
    proc = cli("generate", *args, "-o", out)
    assert proc.returncode == 0, proc.stderr
    return out, proc.stderr


def test_flags_override_the_preset(tmp_path: Path) -> None:
    out, note = generate(
        tmp_path,
        "--generator",
        "seed",
        "--agentic-sessions",
        "6",
        "--agentic-turns",
        "3,4",
        "--agentic-session-rate",
        "2.5",
    )
    assert "generator seed" in note and "ideal hit rate" in note
    recs, _ = load_records(out, "jsonl")
    assert recs == seed_agentic(num_sessions=6, turns_per_session=(3, 4), session_arrival_rate=2.5)
    by_session = sessions(recs)
    assert len(by_session) == 6 and all(3 <= len(t) <= 4 for t in by_session.values())
    assert min(t[0].input_len for t in by_session.values()) > CHUNK  # preset values kept


def test_single_number_is_a_fixed_range(tmp_path: Path) -> None:
    out, _ = generate(tmp_path, "--agentic-sessions", "3", "--agentic-turns", "5")
    recs, _ = load_records(out, "jsonl")
    assert recs == multi_turn_agentic(num_sessions=3, turns_per_session=(5, 5))


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["--agentic-turns", "30,10"], ["'--agentic-turns'", "LO must be <= HI"]),
        (["--agentic-turns", "ten"], ["'--agentic-turns'", "expected an integer"]),
        (["--agentic-turns", "1,2,3"], ["'--agentic-turns'", "LO,HI"]),
        (["--agentic-turns", "0,3"], ["'--agentic-turns'", ">= 1"]),
        (["--agentic-output-len", "-1,5"], ["'--agentic-output-len'", ">= 0"]),
        (["--agentic-think-time", "1,nan"], ["'--agentic-think-time'", "finite"]),
        (["--agentic-session-rate", "0"], ["'--agentic-session-rate'", "> 0"]),
        (["--agentic-system-prompt-len", "9,3"], ["'--agentic-system-prompt-len'"]),
        (["--agentic-sessions", "5", "--agentic-sessions", "6"], ["'--agentic-sessions'", "once"]),
        (["--generator", "seed", "--generator", "gsp"], ["'--generator'", "once"]),
        (["--generator", "nope"], ["'--generator'"]),
        (["--agentic-turnz", "3"], ["--agentic-turnz"]),
        (
            ["--agentic-system-prompts", "2", "--agentic-sessions-per-system-prompt", "1"],
            ["--agentic-system-prompts and --agentic-sessions-per-system-prompt", "not both"],
        ),
        (["--generator", "seed", "--gsp-num-groups", "2"], ["--gsp-num-groups", "seed"]),
        (["--generator", "gsp", "--block-size", "16"], ["--block-size", "gsp"]),
    ],
)
def test_bad_generator_flags(tmp_path: Path, args: list[str], needles: list[str]) -> None:
    out = tmp_path / "never.jsonl"
    assert_one_line_error(cli("generate", *args, "-o", out), *needles)
    assert not out.exists()


def test_bad_flags_on_replay_too() -> None:
    assert_one_line_error(cli("replay", "--agentic-turns", "5,2"), "'--agentic-turns'")
    assert_one_line_error(
        cli("replay", "--trace", "x.jsonl", "--agentic-turns", "5,6"),
        "--agentic-turns does not apply with --trace",
    )


def test_generate_needs_an_output() -> None:
    assert_one_line_error(cli("generate"), "--output")


# --------------------------------------------------------------------------- TOML table


def write_toml(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_workload_table(tmp_path: Path) -> None:
    cfg = write_toml(
        tmp_path / "run.toml",
        "[prefillkit]\nseed = 3\nchunked_prefill_size = 16384\n\n"
        '[workload]\ngenerator = "seed"\nnum-sessions = 8\nturns_per_session = [2, 3]\n'
        "session_arrival_rate = 0.5\n",
    )
    out, note = generate(tmp_path, "--config", cfg)
    assert "seed 3" in note
    want = seed_agentic(num_sessions=8, turns_per_session=(2, 3), session_arrival_rate=0.5, seed=3)
    assert load_records(out, "jsonl")[0] == want
    # Flags override the file, key by key; --seed overrides the file's seed.
    out2, _ = generate(tmp_path, "--config", cfg, "--agentic-sessions", "4", "--seed", "1",
                       name="w2.jsonl")  # fmt: skip
    want2 = seed_agentic(num_sessions=4, turns_per_session=(2, 3), session_arrival_rate=0.5, seed=1)
    assert load_records(out2, "jsonl")[0] == want2
    # replay reads the same table (and its [prefillkit] settings).
    proc = cli("replay", "--config", cfg, "--json", "-q")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["workload"]["generator"] == "seed" and doc["workload"]["num_sessions"] == 8
    assert doc["workload"]["requests"] == len(want)
    assert doc["config"]["chunked_prefill_size"] == 16384


def test_workload_table_system_prompt_choice(tmp_path: Path) -> None:
    cfg = write_toml(
        tmp_path / "c.toml",
        '[prefillkit]\n[workload]\ngenerator = "seed"\nnum_sessions = 4\nturns_per_session = 1\n',
    )
    out, _ = generate(tmp_path, "--config", cfg, "--agentic-system-prompts", "1")
    recs, _ = load_records(out, "jsonl")
    assert recs == seed_agentic(num_sessions=4, turns_per_session=(1, 1), num_system_prompts=1)
    heads = {r.hash_ids[0] for r in recs if r.hash_ids}
    assert len(heads) == 1  # the flag replaced the preset's one-prompt-per-session


_T = "[prefillkit]\n[workload]\n"
BAD_TABLES: list[tuple[str, list[str]]] = [
    (_T + "num_sesions = 3\n", ["unknown key 'num_sesions'", "did you mean 'num_sessions'"]),
    (_T + 'generator = "seeds"\n', ["[workload] generator", "seeds"]),
    (_T + "turns_per_session = [9, 3]\n", ["[workload] turns_per_session", "LO must be <= HI"]),
    (_T + 'turns_per_session = [1, "a"]\n', ["[workload] turns_per_session", "LO,HI"]),
    (_T + "num_sessions = true\n", ["[workload] num_sessions", "expected an integer, got true"]),
    (_T + "think_time_s = [1, inf]\n", ["[workload] think_time_s", "finite"]),
    (_T + "seed = 4\n", ["[workload] seed", "config setting"]),
    (_T + "num_sessions = 2\nnum-sessions = 3\n", ["twice"]),
    (_T + "num_system_prompts = 2\nsessions_per_system_prompt = 2\n", ["not both"]),
    (_T + 'generator = "gsp"\nturns = 3\n', ["unknown key 'turns' for generator gsp"]),
    ('[workload]\ngenerator = "seed"\n', ["[prefillkit] table"]),
    ("workload = 3\n[prefillkit]\n", ["'workload'"]),
]


@pytest.mark.parametrize(("text", "needles"), BAD_TABLES)
def test_bad_workload_tables(tmp_path: Path, text: str, needles: list[str]) -> None:
    cfg = write_toml(tmp_path / "bad.toml", text)
    for command in ("generate", "replay"):
        args = ["-o", str(tmp_path / "x.jsonl")] if command == "generate" else []
        line = assert_one_line_error(cli(command, "--config", cfg, *args), *needles)
        assert str(cfg) in line


def test_generator_flag_replaces_the_tables_generator(tmp_path: Path) -> None:
    cfg = write_toml(tmp_path / "g.toml", '[prefillkit]\n[workload]\ngenerator = "seed"\n')
    out, note = generate(tmp_path, "--config", cfg, "--generator", "gsp", "--gsp-num-groups", "2",
                         "--gsp-prompts-per-group", "2")  # fmt: skip
    assert "generator gsp" in note
    assert len(load_records(out, "jsonl")[0]) == 4
    # A trace replaces a generated workload: the table is not used.
    proc = cli("replay", "--config", cfg, "--trace", out, "--json", "-q")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["workload"]["kind"] == "trace"


# --------------------------------------------------------------------------- generate


def test_generate_round_trip(tmp_path: Path) -> None:
    """The written file reads back to the generator's records, and replaying the file
    gives the same run as replaying the generator."""
    gen = ["--generator", "seed", "--agentic-sessions", "12", "--agentic-session-rate", "0.5"]
    out, _ = generate(tmp_path, *gen, "--seed", "7")
    records, _ = generate_records(
        WorkloadSpec(
            generator="seed",
            generator_args={"num_sessions": 12, "session_arrival_rate": 0.5},
        ),
        7,
    )
    assert load_records(out, "jsonl")[0] == records

    runs = []
    for args in (gen, ["--trace", str(out)]):
        proc = cli("replay", *args, "--seed", "7", "--chunked-prefill-size", "16384",
                       "--json", "-q")  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        runs.append(json.loads(proc.stdout))
    assert runs[0]["metrics"] == runs[1]["metrics"]
    assert runs[0]["metrics"]["requests"] == len(records)
    assert runs[0]["metrics"]["mean_chunks_per_request"] > 1.0  # cold first turns chunk

    proc = cli("trace-stats", out, "--json")
    assert proc.returncode == 0, proc.stderr
    stats = json.loads(proc.stdout)
    assert stats["num_requests"] == len(records)
    assert stats["block_hit_rate"] == pytest.approx(trace_stats(records).block_hit_rate)


def test_generate_gsp_round_trip(tmp_path: Path) -> None:
    out, _ = generate(tmp_path, "--gsp-num-groups", "2", "--gsp-prompts-per-group", "3")
    recs, _ = load_records(out, "jsonl")
    assert recs == generated_shared_prefix_records()


def generated_shared_prefix_records() -> list[TraceRecord]:
    from prefillkit.workloads.generators import generated_shared_prefix

    return generated_shared_prefix(num_groups=2, prompts_per_group=3, seed=0)


def test_generate_is_deterministic(tmp_path: Path) -> None:
    args = ["--generator", "seed", "--agentic-sessions", "5"]
    a, _ = generate(tmp_path, *args, name="a.jsonl")
    b, _ = generate(tmp_path, *args, name="b.jsonl")
    c, _ = generate(tmp_path, *args, "--seed", "1", name="c.jsonl")
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()


def test_generate_writes_atomically(tmp_path: Path) -> None:
    target = tmp_path / "w.jsonl"
    target.write_text("old\n")
    generate(tmp_path, "--agentic-sessions", "2")
    assert target.read_text().startswith('{"rid":')
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.jsonl"]  # no temp file left
    missing = tmp_path / "no" / "such" / "dir.jsonl"
    assert_one_line_error(
        cli("generate", "--agentic-sessions", "2", "-o", missing), "--output", str(missing)
    )
