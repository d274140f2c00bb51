"""The deployment panel of a run: what was simulated, and where each setting came from.

Read from a ``summary.json`` document: ``config`` (the resolved settings by field name),
``deployment`` (the resolved sizes: pool pages, host pages, GPUs), and, when the command
recorded them, ``sources`` (field -> ``line`` / ``preset demo`` / ``default`` / a
config file: the same sources as the replay header) and ``base`` (the base the
settings were laid over). A run written without sources shows ``-`` for them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["PANEL_FIELDS", "deployment_panel"]

#: The settings the panel shows, in order: (row label, config fields whose sources count).
PANEL_FIELDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("model", ("model",)),
    ("GPU", ("gpu", "device_memory_gb")),
    ("TP", ("tp_size",)),
    ("CP", ("cp_size", "enable_cp_shared_kv")),
    ("DP", ("enable_dp_attention", "dp_size", "load_balance_method")),
    ("EP", ("ep_size",)),
    ("KV pool (device)", ("max_total_tokens", "mem_fraction_static")),
    ("page size", ("page_size",)),
    ("HiCache (host tier)", ("enable_hierarchical_cache", "hicache_ratio", "hicache_size")),
    ("mode", ("mode",)),
    ("chunked prefill", ("chunked_prefill_size",)),
    ("schedule policy", ("schedule_policy",)),
    ("cost model", ("cost_model", "small_gemm")),
)


def _on(value: Any) -> bool:
    return value is True or value == "true"


def _count(value: Any) -> str:
    return f"{int(value):,}" if isinstance(value, (int, float)) else "-"


def _values(cfg: Mapping[str, Any], dep: Mapping[str, Any]) -> dict[str, str]:
    tp = cfg.get("tp_size", "-")
    cp = cfg.get("cp_size", "-")
    gpus = dep.get("num_gpus", tp)
    gpu = f"{_count(gpus)} x {cfg.get('gpu', '-')}"
    if cfg.get("device_memory_gb"):
        gpu += f" ({cfg['device_memory_gb']:g} GB each)"
    cp_text = str(cp)
    if _on(cfg.get("enable_cp_shared_kv")) and cp not in (1, "1"):
        cp_text += " (shared-KV)"
    pool = f"{_count(dep.get('total_pages'))} pages"
    if isinstance(dep.get("kv_pool_tokens"), (int, float)):
        pool += f" = {_count(dep['kv_pool_tokens'])} tokens"
    if cfg.get("max_total_tokens") is None and cfg.get("mem_fraction_static") is not None:
        pool += f" (mem fraction {cfg['mem_fraction_static']:g})"
    if _on(cfg.get("enable_hierarchical_cache")):
        host = dep.get("host_pages")
        hicache = f"on: {_count(host)} host pages"
        if cfg.get("hicache_write_policy"):
            hicache += f", {cfg['hicache_write_policy']}"
    else:
        hicache = "off"
    model = str(cfg.get("model", "-"))
    if cfg.get("model_path"):
        model += f" ({cfg['model_path']})"
    chunk = cfg.get("chunked_prefill_size")
    return {
        "model": model,
        "GPU": gpu,
        "TP": str(tp),
        "CP": cp_text,
        "DP": _dp_text(cfg),
        "EP": str(cfg.get("ep_size", "-")),
        "KV pool (device)": pool,
        "page size": f"{cfg.get('page_size', '-')} tokens",
        "HiCache (host tier)": hicache,
        "mode": str(cfg.get("mode", "-")),
        "chunked prefill": "off" if chunk in (None, -1) else f"{_count(chunk)} tokens",
        "schedule policy": str(cfg.get("schedule_policy", "-")),
        "cost model": _cost_model_text(cfg, dep),
    }


def _cost_model_text(cfg: Mapping[str, Any], dep: Mapping[str, Any]) -> str:
    """The model that timed the forwards, and which of its terms were measured."""
    record = dep.get("cost_model")
    if not isinstance(record, Mapping):
        return f"roofline model on the {cfg.get('gpu', '-')} GPU preset"
    name = str(record.get("name", "-"))
    text = f"{name} on the {cfg.get('gpu', '-')} GPU preset"
    if record.get("small_gemm"):
        text += f", small GEMMs: {record['small_gemm']}"
    terms = record.get("terms") or {}
    if isinstance(terms, Mapping) and name != "roofline":
        shown = {k: str(v) for k, v in terms.items() if k not in ("total", "decode")}
        measured = sorted(k for k, v in shown.items() if not v.startswith("roofline"))
        rest = sorted(k for k, v in shown.items() if v.startswith("roofline"))
        text += f"; measured/derived: {', '.join(measured) or 'none'}"
        text += f"; roofline: {', '.join(rest) or 'none'}"
    return text


def _dp_text(cfg: Mapping[str, Any]) -> str:
    """DP attention's ranks (docs/dp_attention.md), or one scheduler."""
    dp = cfg.get("dp_size", 1)
    if not _on(cfg.get("enable_dp_attention")) or dp in (1, "1", None):
        return "1 (one scheduler)"
    method = cfg.get("load_balance_method", "auto")
    return f"{dp} DP attention ranks, one scheduler each (load balance: {method})"


def _source(label: str, fields: tuple[str, ...], sources: Mapping[str, Any]) -> str:
    if not sources:
        return "-"
    seen = [str(sources[f]) for f in fields if f in sources]
    # The most specific: a value the line or a file gave beats a preset, a preset a default.
    for rank in ("line", "file", "preset", "SGLang default", "default"):
        for s in seen:
            if s.startswith(rank):
                return s
    return seen[0] if seen else "default"


def deployment_panel(summary: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """``(setting, value, source)`` rows of one run's ``summary.json`` document."""
    cfg = summary.get("config") or {}
    dep = summary.get("deployment") or {}
    sources = summary.get("sources") or {}
    values = _values(cfg, dep)
    rows = [(label, values[label], _source(label, f, sources)) for label, f in PANEL_FIELDS]
    base = summary.get("base")
    if base:
        rows.insert(0, ("settings base", str(base), "-"))
    return rows
