"""An SGLang launch line means what it says (issue 19 items 1-3).

The model comes from --model-path (a preset's Hugging Face id, or a local config.json) or
--model-config; whatever a launch line does not say takes SGLang's default; with no
deployment flag the demo deployment runs and says so; flags that change admission but are
not modelled are refused; suggestions come only from flags that set something.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from prefillkit.app.launch import (
    DEFAULT_DEPLOYMENT,
    PRESETS,
    build_config,
    header_lines,
    knob_defaults,
)
from prefillkit.app.settings import MODEL_CONFIG_DIR, Config, ConfigError, parse_flags
from prefillkit.cli import run
from prefillkit.cost.validation import SEED_DEPLOYMENT, seed_settings
from prefillkit.models import MODELS, model_from_hf_config

#: The subject is interpreted code; .ci/run's run on the compiled build deselects it.
pytestmark = pytest.mark.interpreted

DEEPSEEK_LINE = [
    "--model-path",
    "deepseek-ai/DeepSeek-V3",
    "--tp",
    "8",
    "--chunked-prefill-size",
    "4096",
    "--mem-fraction-static",
    "0.85",
    "--schedule-policy",
    "lpm",
    "--enable-hierarchical-cache",
]


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = run(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("prefillkit: error: "), err
    return lines[0]


# --------------------------------------------------------------------------- the model


@pytest.mark.parametrize("name", sorted(MODELS))
def test_each_shipped_config_json_gives_its_preset(name: str) -> None:
    raw = json.loads((MODEL_CONFIG_DIR / f"{name}.json").read_text())
    built = model_from_hf_config(raw, name)
    preset = MODELS[name]
    for field in (
        "num_layers",
        "hidden_size",
        "num_heads",
        "attention",
        "head_dim_qk",
        "head_dim_v",
        "num_kv_heads",
        "kv_lora_rank",
        "qk_rope_head_dim",
        "weight_bytes_per_param",
        "kv_bytes_per_token_bf16",
        "kv_bytes_per_token_fp8",
        "index_n_heads",
        "index_head_dim",
        "index_topk",
        "num_experts",
        "experts_per_token",
        "moe_intermediate_size",
        "num_shared_experts",
        "first_dense_layers",
        "intermediate_size",
        "vocab_size",
        "q_lora_rank",
    ):
        assert getattr(built, field) == getattr(preset, field), field
    # Parameter counts are computed from the shapes (norms, biases, MTP left out).
    assert built.total_params == pytest.approx(preset.total_params, rel=0.01)
    assert built.active_params == pytest.approx(preset.active_params, rel=0.05)


def test_model_path_selects_the_preset_of_a_known_id() -> None:
    for model_id, preset in (
        ("deepseek-ai/DeepSeek-V3", "deepseek-v3"),
        ("zai-org/GLM-5-FP8", "glm-5"),
        ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"),
        ("Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b"),
        ("deepseek-ai/DeepSeek-V3.2-Exp", "deepseek-v3.2"),
    ):
        cfg = build_config(None, ["--model-path", model_id]).config
        assert cfg.model_spec is MODELS[preset]


def test_model_from_a_local_config_json_file_or_folder(tmp_path: Path) -> None:
    folder = tmp_path / "My-Llama"
    folder.mkdir()
    shutil.copy(MODEL_CONFIG_DIR / "llama-3.1-8b.json", folder / "config.json")
    by_dir = build_config(None, ["--model-path", str(folder), "--tp", "1"]).config
    assert by_dir.model_spec.name == "my-llama"
    assert (
        by_dir.model_spec.kv_bytes_per_token_bf16 == MODELS["llama-3.1-8b"].kv_bytes_per_token_bf16
    )
    by_file = build_config(None, ["--model-config", str(folder / "config.json")]).config
    assert by_file.model_spec.num_layers == 32
    # --model-config with an unknown id: the id names the model, the file shapes it.
    named = build_config(
        None, ["--model-path", "acme/llama-ft", "--model-config", str(folder)]
    ).config
    assert named.model_spec.name == "my-llama" and named.model_spec.num_kv_heads == 8
    # The whole run: a launch line with a local model replays.
    sim = by_dir.sim_settings()
    assert sim.model.name == "my-llama" and sim.tp_size == 1


def test_unknown_model_id_is_one_line_naming_both_flags(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "replay", "--model-path", "acme/Secret-70B", "--tp", "8")
    assert code == 2
    line = one_error_line(err)
    assert "--model-path acme/Secret-70B" in line and "--model-config" in line


def test_bad_config_json_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "config.json"
    bad.write_text('{"hidden_size": 4096}')
    with pytest.raises(ConfigError, match=r"--model-config .*missing 'num_hidden_layers'"):
        Config(model_config=str(bad))
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="not a JSON config"):
        Config(model_config=str(bad))


def test_model_and_model_path_together_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"^--model: give --model NAME or --model-path"):
        build_config(None, ["--model", "glm-5", "--model-path", "deepseek-ai/DeepSeek-V3"])


# --------------------------------------------------------------------------- defaults


def test_deepseek_line_runs_as_deepseek_with_its_tp_and_without_cp() -> None:
    resolved = build_config(None, DEEPSEEK_LINE)
    cfg = resolved.config
    assert resolved.preset is None  # SGLang's defaults under the line
    assert cfg.model_spec.name == "deepseek-v3"
    assert (cfg.tp_size, cfg.cp_size, cfg.ep_size) == (8, 1, 1)
    assert cfg.enable_hierarchical_cache and not cfg.enable_cp_shared_kv
    assert cfg.mode == "colocated" and cfg.page_size == 1
    assert cfg.schedule_policy == "lpm" and cfg.chunked_prefill_size == 4096
    assert resolved.sources["tp_size"] == "line" and resolved.sources["mode"] == "SGLang default"
    cfg.sim_settings().total_pages(cfg.model_spec.weight_bytes / 8, 141)  # it fits


def test_deepseek_line_with_dp_attention_runs_replicas_are_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """DP attention is modelled (docs/dp_attention.md); ``--dp 8`` alone is 8 replicas,
    a fleet here."""
    code, out, err = cli(
        capsys, "replay", *DEEPSEEK_LINE, "--enable-dp-attention", "--dp", "8",
        "--max-requests", "8", "--json", "-q",
    )  # fmt: skip
    assert code == 0, err
    config = json.loads(out)["config"]
    assert (config["enable_dp_attention"], config["dp_size"]) == (True, 8)
    code, _, err = cli(capsys, "replay", *DEEPSEEK_LINE, "--dp", "8")
    assert code == 2
    line = one_error_line(err)
    assert "--dp-size 8 without --enable-dp-attention" in line and "--instances 8" in line
    assert parse_flags(["--dp", "1"]).values == {"dp_size": 1}  # one replica: the default


def test_llama_line_runs_as_llama_with_sglang_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(
        capsys,
        "replay",
        "--json",
        "--max-requests",
        "40",
        "--model-path",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--tp",
        "1",
    )
    assert code == 0, err
    cfg = json.loads(out)["config"]
    assert cfg["model"] == "llama-3.1-8b" and cfg["tp_size"] == 1 and cfg["cp_size"] == 1
    assert cfg["enable_hierarchical_cache"] is False and cfg["mode"] == "colocated"
    assert "deployment: the launch line over SGLang 0.5.23's defaults" in err
    assert "model llama-3.1-8b (line: --model-path)" in err
    assert "HiCache off (default)" in err and "mode colocated (SGLang default)" in err


@pytest.mark.parametrize(
    ("extra", "mode"),
    [([], "colocated"), (["--disaggregation-mode", "null"], "colocated"),
     (["--disaggregation-mode", "prefill"], "pd-prefill")],
)  # fmt: skip
def test_model_llama_tp1_mode_follows_the_line(extra: list[str], mode: str) -> None:
    cfg = build_config(None, ["--model", "llama-3.1-8b", "--tp", "1", *extra]).config
    assert cfg.mode == mode and not cfg.enable_hierarchical_cache


def test_no_deployment_flag_keeps_the_demo_and_says_so() -> None:
    for args in ([], ["--schedule-policy", "lpm"], ["--debug-check-invariants"]):
        resolved = build_config(None, args)
        assert resolved.preset == "demo" and resolved.implied
        cfg = resolved.config
        assert (cfg.tp_size, cfg.cp_size, cfg.page_size) == (8, 8, 64)
        assert cfg.enable_cp_shared_kv and cfg.enable_hierarchical_cache
        assert cfg.mode == "pd-prefill"
        head = header_lines(resolved)
        assert head[0].startswith("deployment: the demo preset (no launch flags given")
        assert "TP 8 (preset demo)" in head[1] and "page 64 (default with CP)" in head[1]


def test_presets_bring_named_deployments() -> None:
    seed = build_config(None, [], preset="seed")
    assert seed.config.sim_settings() == seed_settings()
    assert (
        seed.config.sim_settings()
        == Config(**parse_flags(list(SEED_DEPLOYMENT)).values).sim_settings()
    )  # type: ignore[arg-type]
    assert header_lines(seed)[0] == "deployment: preset seed"
    # A preset under a launch line: the line wins, contradicting preset values go.
    demo = build_config(None, ["--tp", "4"], preset="demo").config
    assert (demo.tp_size, demo.cp_size, demo.enable_cp_shared_kv) == (4, 1, False)
    with pytest.raises(ConfigError, match=r"^--preset: unknown preset 'sed'"):
        build_config(None, [], preset="sed")


def test_header_names_the_source_of_each_setting(tmp_path: Path) -> None:
    toml = tmp_path / "c.toml"
    toml.write_text("[prefillkit]\ncp_size = 8\nenable_cp_shared_kv = true\n")
    resolved = build_config(toml, ["--tp", "8", "--enable-hierarchical-cache"])
    line = header_lines(resolved)[1]
    assert "TP 8 (line)" in line and "CP 8 (file)" in line and "HiCache on (line)" in line
    assert "gpu h200 (default)" in line and "mode colocated (SGLang default)" in line


def test_knobs_lists_the_defaults_replay_uses_per_base(capsys: pytest.CaptureFixture[str]) -> None:
    bases = knob_defaults()
    assert list(bases) == ["launch line", "--preset demo", "--preset seed"]
    assert bases["launch line"]["tp_size"] == 1 and bases["launch line"]["mode"] == "colocated"
    for key, value in DEFAULT_DEPLOYMENT.items():
        assert bases["--preset demo"][key] == value
    assert bases["--preset seed"]["gpu"] == "h20-141g"
    assert bases["--preset demo"]["page_size"] == 64  # resolved as replay resolves it
    code, out, _ = cli(capsys, "knobs", "--markdown")
    assert code == 0
    row = next(r for r in out.splitlines() if r.startswith("| `--tp-size` |"))
    assert row.startswith("| `--tp-size` | `1` | `8` | `8` |")
    assert set(PRESETS) == {"demo", "seed"}


# --------------------------------------------------------------------------- flags


@pytest.mark.parametrize(
    ("flags", "wrong"),
    [
        (["--disable-radix-cache"], "--enable-hierarchical-cache"),
        (["--enable-mixed-chunk"], "--cp-prefill-mix-chunked"),
        (["--hicache-storage-backend", "file"], "--hicache-load-back-threshold"),
    ],
)
def test_unmodelled_flags_are_refused_without_a_wrong_suggestion(
    capsys: pytest.CaptureFixture[str], flags: list[str], wrong: str
) -> None:
    code, _, err = cli(capsys, "replay", *flags)
    assert code == 2
    line = one_error_line(err)
    assert f"{flags[0]}: not supported" in line and wrong not in line


def test_misspelt_refused_flag_gets_no_suggestion_of_another_feature(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = cli(capsys, "replay", "--disable-radix-cach")
    assert code == 2
    line = one_error_line(err)
    assert "did you mean" not in line
    code, _, err = cli(capsys, "replay", "--max-request", "3")
    assert "did you mean '--max-requests'" in one_error_line(err)


def test_compare_variant_with_a_compare_option(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "compare", "--max-requests", "5", "--variant", "r3:--rate 3")
    assert code == 2
    line = one_error_line(err)
    assert "--port" not in line and "--rate is an option of compare itself" in line


# ------------------------------------------------------------------ SGLang's GPU defaults


@pytest.mark.parametrize(
    ("flags", "chunk", "source"),
    [
        (["--gpu", "h200"], 8192, "SGLang default"),  # 134,467 MiB: the 90-160 GiB band
        (["--gpu", "b200"], 16384, "SGLang default"),  # 171,661 MiB >= 160 GiB
        (["--gpu", "gb300"], 16384, "SGLang default"),
        (["--gpu", "h20"], 8192, "SGLang default"),  # 91,553 MiB
        (["--gpu", "h100", "--device-memory-gb", "40"], 4096, "SGLang default"),  # 38,147 MiB
        (["--gpu", "b200", "--chunked-prefill-size", "2048"], 2048, "line"),
    ],
)
def test_launch_line_gets_sglangs_gpu_dependent_chunk(
    flags: list[str], chunk: int, source: str
) -> None:
    resolved = build_config(None, ["--model-path", "meta-llama/Llama-3.1-8B-Instruct", *flags])
    assert resolved.config.chunked_prefill_size == chunk
    assert resolved.sources["chunked_prefill_size"] == source


def test_sglang_chunk_default_bands() -> None:
    from prefillkit.app.sglang_defaults import sglang_chunk_default

    mib = 2**20
    assert [sglang_chunk_default(x * 1024 * mib) for x in (16, 24, 48, 80, 141, 160, 192)] == [
        2048, 4096, 4096, 8192, 8192, 16384, 16384,
    ]  # fmt: skip


def test_pool_given_for_weights_that_do_not_fit_is_warned(tmp_path: Path) -> None:
    from tests.test_cli import run_cli

    proc = run_cli(
        "replay", "--trace", "mooncake-slice", "--max-requests", "5", "-q",
        "--model", "glm-5", "--tp-size", "1", "--max-total-tokens", "200000",
        "--out", str(tmp_path / "run"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert (
        "warning: --max-total-tokens sizes the pool, but glm-5's weights (744.0 GB per GPU "
        "on 1 GPU(s)) do not fit 125.3 GB (141 GB x --mem-fraction-static 0.889)"
    ) in proc.stderr
    fits = run_cli(
        "replay", "--trace", "mooncake-slice", "--max-requests", "5", "-q",
        "--model", "glm-5", "--tp-size", "8", "--max-total-tokens", "200000",
        "--out", str(tmp_path / "run8"),
    )  # fmt: skip
    assert fits.returncode == 0 and "warning" not in fits.stderr
