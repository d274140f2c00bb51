"""A pasted SGLang 0.5.23 launch line works as it is (issue 33 item 6).

Every flag SGLang 0.5.23 registers (``prefillkit/data/sglang_0_5_23_server_args.json``,
read from its own ``ServerArgs.add_cli_args``) is modelled, ignored or refused
(``app/launch_flag_table.py``); ignored flags' values are consumed as argparse would;
"did you mean" suggests a close flag of either kind and nothing far off; a
``python3 -m sglang.launch_server`` / ``sglang serve`` prefix is taken off.
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from prefillkit.app.launch import build_config
from prefillkit.app.launch_flag_table import IGNORED_GROUPS, LEGACY, MODELLED, REFUSED
from prefillkit.app.launch_flags import (
    DATA_FILE,
    Nargs,
    classification,
    classification_markdown,
    ignored_line,
    sglang_flags,
    take_values,
)
from prefillkit.app.pasted_launch import strip_launch_prefix
from prefillkit.app.settings import ConfigError, accepted_flags, parse_flags
from prefillkit.cli import run

#: The subject is interpreted code; .ci/run's run on the compiled build deselects it.
pytestmark = pytest.mark.interpreted

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "src" / "prefillkit" / "data" / DATA_FILE

#: The 30 flags of the issue, with values as a real launch line gives them.
ISSUE_FLAGS: list[list[str]] = [
    ["--reasoning-parser", "deepseek-r1"],
    ["--tool-call-parser", "deepseekv3"],
    ["--enable-metrics"],
    ["--enable-torch-compile"],
    ["--torch-compile-max-bs", "8"],
    ["--disable-overlap-schedule"],
    ["--stream-output"],
    ["--api-key", "sk-123"],
    ["--chat-template", "./template.jinja"],
    ["--random-seed", "42"],
    ["--enable-cache-report"],
    ["--enable-ep-moe"],
    ["--deepep-mode", "normal"],
    ["--ep-num-redundant-experts", "32"],
    ["--moe-dense-tp-size", "1"],
    ["--enable-dp-lm-head"],
    ["--decode-log-interval", "40"],
    ["--dtype", "bfloat16"],
    ["--load-format", "safetensors"],
    ["--disable-custom-all-reduce"],
    ["--enable-nccl-nvls"],
    ["--tokenizer-mode", "auto"],
    ["--revision", "main"],
    ["--sampling-backend", "flashinfer"],
    ["--grammar-backend", "xgrammar"],
    ["--num-continuous-decode-steps", "4"],
    ["--moe-runner-backend", "deep_gemm"],
    ["--disaggregation-bootstrap-port", "8998"],
    ["--file-storage-path", "/tmp/sglang_storage"],
    ["--cuda-graph-bs", "1", "2", "4", "8"],
]
DEEPSEEK = ["--model-path", "deepseek-ai/DeepSeek-V3", "--tp", "8"]


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = run(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("prefillkit: error: "), err
    return lines[0]


def _ignored_flags() -> list[str]:
    return [flag for flags in IGNORED_GROUPS.values() for flag in flags.split()]


# --------------------------------------------------------------------- the issue's line


def test_the_issues_thirty_flags_are_accepted_in_one_pasted_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert len(ISSUE_FLAGS) == 30
    line = [token for flag in ISSUE_FLAGS for token in flag]
    code, out, err = cli(
        capsys, "replay", "--max-requests", "2", "--json", "-q",
        "python3", "-m", "sglang.launch_server", *DEEPSEEK, *line,
    )  # fmt: skip
    assert code == 0, err
    ignored = [flag[0] for flag in ISSUE_FLAGS if flag[0] != "--enable-ep-moe"]
    assert err.splitlines() == [ignored_line(ignored)]
    assert err.startswith("ignored (no effect on admission): --reasoning-parser, --tool-call")
    config = json.loads(out)["config"]
    assert (config["tp_size"], config["ep_size"]) == (8, 8)  # --enable-ep-moe: EP over TP


def test_the_flags_the_issue_saw_misdirected_are_sglangs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--load-format`` was sent to ``--format`` (the trace format), ``--deepep-mode`` to
    ``--mode``, ``--dtype`` to ``--tp``; ``--attn-dp-size`` to ``--attn-cp-size``."""
    for flag, value, wrong in [
        ("--load-format", "safetensors", "--format"),
        ("--deepep-mode", "normal", "--mode"),
        ("--dtype", "bfloat16", "--tp"),
    ]:
        code, _, err = cli(capsys, "replay", "--max-requests", "1", "-q", *DEEPSEEK, flag, value)
        assert code == 0, err
        assert err.strip() == f"ignored (no effect on admission): {flag}"
        assert f"'{wrong}'" not in err
    code, out, err = cli(
        capsys, "replay", "--max-requests", "1", "--json", "-q", *DEEPSEEK, "--attn-dp-size", "2"
    )
    assert code == 0 and "--attn-cp-size" not in err, err
    config = json.loads(out)["config"]
    assert (config["enable_dp_attention"], config["dp_size"], config["cp_size"]) == (True, 2, 1)


# --------------------------------------------------------------------- the data


def test_the_classification_covers_exactly_sglang_0_5_23s_flags() -> None:
    data = json.loads(DATA.read_text())
    assert data["sglang_version"] == "0.5.23"
    assert re.fullmatch(r"[0-9a-f]{64}", data["server_args_sha256"])
    flags = set(data["flags"])
    assert len(flags) > 500 and flags == set(sglang_flags()) == set(classification())
    listed = [*MODELLED, *REFUSED, *_ignored_flags()]
    assert [f for f, n in Counter(listed).items() if n > 1] == []  # one class each
    assert set(listed) == flags  # complete, and no flag 0.5.23 does not register
    assert not set(LEGACY) & flags  # older spellings are only those 0.5.23 lacks
    for flag, spec in sglang_flags().items():
        assert all(flag in sglang_flags()[a].aliases for a in spec.aliases)  # symmetric
        assert spec.takes_value == (spec.nargs != 0)
    kinds = Counter(c.kind for c in classification().values())
    assert kinds == {"modelled": len(MODELLED), "refused": len(REFUSED), "ignored": 486}
    for reason in [*REFUSED.values(), *IGNORED_GROUPS]:
        assert reason and "\n" not in reason


def test_modelled_flags_are_exactly_those_the_parser_maps() -> None:
    accepted = set(accepted_flags())
    assert {f for f in sglang_flags() if f in accepted} == MODELLED
    assert {f for f, (kind, *_) in LEGACY.items() if kind == "modelled"} <= accepted
    assert not {f for f, (kind, *_) in LEGACY.items() if kind != "modelled"} & accepted


def test_the_data_file_is_the_extraction_scripts_output_format() -> None:
    spec = importlib.util.spec_from_file_location(
        "extract_sglang_args", ROOT / "benchmarks" / "extract_sglang_args.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = DATA.read_text()
    assert module._dumps(json.loads(text)) == text


def test_the_docs_list_the_table() -> None:
    text = (ROOT / "docs" / "launch_lines.md").read_text()
    begin = "<!-- BEGIN generated by prefillkit.app.launch_flags.classification_markdown() -->\n"
    generated = text.split(begin, 1)[1].split("<!-- END generated -->", 1)[0]
    assert generated == classification_markdown(), (
        "run: python -m prefillkit.app.launch_flags docs/launch_lines.md"
    )


# --------------------------------------------------------------------- values


def _values(nargs: Nargs) -> list[list[str]]:
    """Value lists a flag of ``nargs`` may take."""
    if nargs == 0:
        return [[]]
    if nargs is None:
        return [["x"], ["-1"]]
    if nargs == "?":
        return [[], ["x"]]
    if nargs == "+":
        return [["1"], ["1", "2", "3"]]
    if nargs == "*":
        return [[], ["a", "b"]]
    return [[str(k) for k in range(int(nargs))]]


def test_every_ignored_flag_consumes_its_values() -> None:
    for flag in _ignored_flags():
        nargs = sglang_flags()[flag].nargs
        for values in _values(nargs):
            parsed = parse_flags([flag, *values, "--tp", "8", flag, *values])
            assert parsed.values == {"tp_size": 8}, (flag, values)
            assert parsed.ignored == [flag, flag]
        if nargs == 0:  # a store_true flag eats nothing
            with pytest.raises(ConfigError, match="unexpected argument '8'"):
                parse_flags([flag, "8"])
            with pytest.raises(ConfigError, match=f"^{flag}: takes no value$"):
                parse_flags([f"{flag}=1"])
        else:
            assert parse_flags([f"{flag}=v", "--tp", "8"]).ignored == [flag]
        if nargs in (None, "+"):
            with pytest.raises(ConfigError, match=f"^{flag}: missing value$"):
                parse_flags([flag, "--tp", "8"])


def _other_value(flag: str) -> list[str]:
    spec = sglang_flags()[flag]
    if spec.nargs == 0:
        return []
    if spec.choices:
        return [next(str(c) for c in spec.choices if str(c) != str(spec.default))]
    return ["7"]


def test_every_refused_flag_is_refused_with_its_reason_unless_sglangs_default() -> None:
    for flag, reason in REFUSED.items():
        with pytest.raises(ConfigError) as info:
            parse_flags([*DEEPSEEK, flag, *_other_value(flag)])
        assert str(info.value) == f"{flag}: not supported: {reason}"
        spec = sglang_flags()[flag]
        if spec.nargs == 0:
            assert parse_flags([f"{flag}=false"]).ignored == []  # the default: nothing set
        elif isinstance(spec.default, (int, float, str)) and not isinstance(spec.default, bool):
            assert parse_flags([flag, str(spec.default)]).ignored == [flag], flag


def test_refused_flags_given_sglangs_default_are_accepted() -> None:
    parsed = parse_flags(
        ["--pp-size", "1", "--radix-eviction-policy", "lru", "--retraction-policy", "length",
         "--cpu-offload-gb", "0", "--enable-lora=false"]
    )  # fmt: skip
    assert parsed.values == {}
    assert parsed.ignored == [
        "--pp-size", "--radix-eviction-policy", "--retraction-policy", "--cpu-offload-gb",
    ]  # fmt: skip
    with pytest.raises(ConfigError, match=r"^--pp-size: not supported: pipeline parallelism"):
        parse_flags(["--pp-size", "2"])
    with pytest.raises(ConfigError, match=r"^--radix-eviction-policy: not supported: only LRU"):
        parse_flags(["--radix-eviction-policy", "lfu"])


@pytest.mark.parametrize(
    ("nargs", "argv", "inline", "expected"),
    [
        (None, ["a", "--b"], None, (["a"], 1)),
        (None, ["--b"], "v", (["v"], 0)),
        (0, ["a"], None, ([], 0)),
        ("?", ["--b"], None, ([], 0)),
        ("?", ["a", "b"], None, (["a"], 1)),
        ("+", ["1", "2", "--b", "3"], None, (["1", "2"], 2)),
        ("+", ["1", "2"], "0", (["0"], 0)),
        ("*", ["--b"], None, ([], 0)),
        ("*", ["1", "2"], None, (["1", "2"], 2)),
        (2, ["1", "2", "3"], None, (["1", "2"], 2)),
    ],
)
def test_values_are_taken_as_argparse_takes_them(
    nargs: Nargs, argv: list[str], inline: str | None, expected: tuple[list[str], int]
) -> None:
    assert take_values("--f", nargs, argv, 0, inline) == expected


# --------------------------------------------------------------------- suggestions


def test_suggestions_come_from_flags_of_the_same_kind(capsys: pytest.CaptureFixture[str]) -> None:
    for typo, meant in [
        ("--reasoning-parsr", "--reasoning-parser"),  # SGLang's, ignored
        ("--load-formt", "--load-format"),  # not prefillkit's --format
        ("--deepep-mod", "--deepep-mode"),
        ("--dtyp", "--dtype"),
        ("--chunked-prefil-size", "--chunked-prefill-size"),  # modelled
        ("--enable-afinity", "--enable-affinity"),  # prefillkit's own
        ("--max-request", "--max-requests"),  # replay's own option
    ]:
        code, _, err = cli(capsys, "replay", typo, "1")
        assert code == 2
        assert f"unknown flag '{typo}' (did you mean '{meant}'?)" in one_error_line(err)


def test_nothing_close_suggests_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    """Other engines' flags were sent to unrelated ones (``--max-num-seqs`` to
    ``--max-requests``, ``--max-model-len`` to ``--max-total-tokens``)."""
    for flag in ["--zzz-nothing", "--max-num-seqs", "--max-model-len"]:
        code, _, err = cli(capsys, "replay", flag, "8")
        assert code == 2
        line = one_error_line(err)
        assert f"unknown flag '{flag}'" in line and "did you mean" not in line


# --------------------------------------------------------------------- pasted lines


@pytest.mark.parametrize(
    "argv",
    [
        ["python3", "-m", "sglang.launch_server", *DEEPSEEK],
        ["python", "-m", "sglang.launch_server", *DEEPSEEK],
        ["/usr/bin/python3.11", "-m", "sglang.launch_server", *DEEPSEEK],
        ["sglang", "serve", *DEEPSEEK],
        ["sglang", "serve", "deepseek-ai/DeepSeek-V3", "--model-type", "llm", "--tp", "8"],
        ["python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 \\\n  --tp 8"],
        ["python3", "-m", "sglang.launch_server", "\\", *DEEPSEEK[:2], "\\", *DEEPSEEK[2:]],
    ],
)
def test_a_pasted_launch_command_is_its_flags(argv: list[str]) -> None:
    assert strip_launch_prefix(argv) == DEEPSEEK
    assert parse_flags(argv).values == {"model_path": "deepseek-ai/DeepSeek-V3", "tp_size": 8}


def test_replay_takes_a_pasted_python3_m_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(
        capsys, "replay", "--max-requests", "2", "--json", "-q",
        "python3", "-m", "sglang.launch_server", *DEEPSEEK, "--host", "0.0.0.0",
    )  # fmt: skip
    assert code == 0, err
    assert err.strip() == "ignored (no effect on admission): --host"
    assert json.loads(out)["config"]["model"] == "deepseek-v3"


@pytest.mark.parametrize(
    ("argv", "text"),
    [
        (["python3", "-m", "sglang.bench_serving", "--tp", "8"], "'python3 -m sglang.bench_"),
        (["sglang", "generate", "--tp", "8"], "'sglang generate'"),
        (["sglang", "serve", "--model-type", "diffusion"], "--model-type: 'diffusion'"),
    ],
)
def test_other_launchers_are_refused_with_one_line(argv: list[str], text: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_flags(argv)
    assert text in str(info.value) and "\n" not in str(info.value)


# --------------------------------------------------------------------- aliases


def test_sglangs_aliases_and_older_spellings_are_modelled() -> None:
    parsed = parse_flags(["--enable-hicache", "--attention-context-parallel-size", "8"])
    assert parsed.values == {"enable_hierarchical_cache": True, "cp_size": 8}
    assert parse_flags(["--enable-ep-moe", "--tp", "4"]).values == {"tp_size": 4, "ep_size": 4}
    with pytest.raises(ConfigError, match=r"^--enable-ep-moe: .*give --tp-size on the line"):
        parse_flags(["--enable-ep-moe"])
    with pytest.raises(ConfigError, match=r"--enable-ep-moe: given twice \(also given as --ep"):
        parse_flags(["--tp", "8", "--ep", "8", "--enable-ep-moe"])
    cfg = build_config(None, [*DEEPSEEK, "--enable-ep-moe", "--cuda-graph-bs", "1", "2"]).config
    assert (cfg.tp_size, cfg.ep_size) == (8, 8)


def test_dp_attentions_spellings_are_modelled() -> None:
    """``--enable-dp-attention --dp-size N`` (and ``--dp``, ``--data-parallel-size``) and
    SGLang 0.5.23's own ``--attn-dp-size N`` set DP attention over N ranks."""
    want = {"enable_dp_attention": True, "dp_size": 4}
    for line in (
        ["--enable-dp-attention", "--dp-size", "4"],
        ["--enable-dp-attention", "--dp", "4"],
        ["--enable-dp-attention", "--data-parallel-size", "4"],
        ["--attn-dp-size", "4"],
        ["--attention-data-parallel-size", "4"],
        ["--attn-dp-size", "4", "--enable-dp-attention"],
        ["--dp-size", "1", "--attn-dp-size", "4"],
    ):
        assert {k: parse_flags(line).values[k] for k in want} == want, line
    assert parse_flags(["--attn-dp-size", "1"]).values == {}  # SGLang's default: no DP
    assert parse_flags(["--load-balance-method", "total_tokens"]).values == {
        "load_balance_method": "total_tokens"
    }
    for line, text in (
        (["--dp", "2", "--attn-dp-size", "4"], "--attn-dp-size: 4 with --dp 2: data-parallel"),
        (["--attn-dp-size", "0"], "--attn-dp-size: must be positive, got 0"),
        (["--attn-dp-size", "2", "--attn-dp-size", "2"], "--attn-dp-size: given twice"),
        (["--dp", "2", "--dp-size", "2"], "--dp-size: given twice (also given as --dp)"),
    ):
        with pytest.raises(ConfigError) as info:
            parse_flags(line)
        assert str(info.value).startswith(text), (line, str(info.value))
