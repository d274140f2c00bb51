"""``prefillkit compare``: one workload, several named config variants, one table.

A *variant* is a name plus settings applied on top of the settings shared by every
variant (the ``--config`` file and the config flags given to ``compare`` itself):

- ``--variant NAME:"FLAGS"``: SGLang-spelled config flags (split like a shell would);
- ``--variant NAME:@FILE.toml``: a TOML config file (top level or ``[prefillkit]``);
- ``--variants-file FILE.toml``: several variants, either an array of tables::

      [[variant]]
      name = "fcfs"
      flags = "--schedule-policy fcfs"

      [[variant]]
      name = "affinity"
      enable_affinity = true          # settings by field name ...
      settings = { affinity_skip_window = 8 }   # ... or in a settings table

  or one table per variant (``[variant.fcfs]``, ``flags = ...`` / settings inside).
  A variant of the file may also name a TOML ``config = "path"`` (relative to the file).

Precedence, lowest first: Config defaults, the default deployment, the shared TOML file,
the shared flags, the variant's TOML file, its settings, its flags. Variants from
``--variants-file`` come first, then the ``--variant`` options in order; the first
variant is the baseline. Names must be unique (ignoring case) and usable as folder names.

Every variant is checked (flags, files, deployment) before any run starts. The workload
is loaded once, in the parent, with the baseline's config (its seed for a generator);
every worker process gets the same records and builds its own requests for its own page
size, so the runs are paired request by request. Each worker writes its run directory
(:func:`~prefillkit.records.output.write_run`) to ``OUT/<name>/``; the parent then loads them
back, compares them with :func:`~prefillkit.report.paired.compare_runs` and writes
``OUT/compare.json`` (deterministic: no wall-clock times, no absolute output paths).

The parts: :mod:`prefillkit.app.variants` (the variant definitions and names),
:mod:`prefillkit.app.variant_configs` (each variant's config, checked before any run),
:mod:`prefillkit.app.variant_runs` (the worker processes) and, here, ``compare.json``
and the HTML report of a ``--out`` folder. Every name those modules define that was once
defined here is still importable from here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from prefillkit.app.replay import InputError
from prefillkit.app.variant_configs import PreparedVariant as PreparedVariant
from prefillkit.app.variant_configs import check_shared_settings as check_shared_settings
from prefillkit.app.variant_configs import prepare_variants as prepare_variants
from prefillkit.app.variant_runs import VariantOutcome as VariantOutcome
from prefillkit.app.variant_runs import VariantsInterrupted as VariantsInterrupted
from prefillkit.app.variant_runs import default_jobs as default_jobs
from prefillkit.app.variant_runs import run_variants as run_variants
from prefillkit.app.variants import COMPARE_FILE as COMPARE_FILE
from prefillkit.app.variants import REPORT_FILE as REPORT_FILE
from prefillkit.app.variants import VARIANT_NAME_RE
from prefillkit.app.variants import Variant as Variant
from prefillkit.app.variants import VariantError as VariantError
from prefillkit.app.variants import check_variant_name as check_variant_name
from prefillkit.app.variants import collect_variants as collect_variants
from prefillkit.app.variants import describe_variant as describe_variant
from prefillkit.app.variants import load_variants_file as load_variants_file
from prefillkit.app.variants import parse_variant_option as parse_variant_option
from prefillkit.app.variants import setting_text as setting_text
from prefillkit.records.file_set import atomic_write_text
from prefillkit.records.output import json_ready

__all__ = [
    "COMPARE_FILE",
    "COMPARE_FORMAT",
    "REPORT_FILE",
    "PreparedVariant",
    "Variant",
    "VariantError",
    "VariantOutcome",
    "VariantsInterrupted",
    "check_shared_settings",
    "check_variant_name",
    "collect_variants",
    "compare_document",
    "default_jobs",
    "describe_variant",
    "load_variants_file",
    "parse_variant_option",
    "prepare_variants",
    "run_variants",
    "setting_text",
    "write_compare",
    "write_dir_report",
]

COMPARE_FORMAT = "prefillkit-compare"
COMPARE_VERSION = 1


# --------------------------------------------------------------------------- compare.json


def compare_document(
    variants: Sequence[PreparedVariant],
    out_dir: str | Path,
    workload_info: Mapping[str, Any],
    *,
    shared_config: str | None,
    shared_flags: Sequence[str],
) -> dict[str, Any]:
    """Load the variant runs from ``out_dir`` and build the ``compare.json`` document.

    The :func:`~prefillkit.report.paired.compare_runs` result (baseline, metrics, per
    variant values / delta / ratio / paired statistics), with each variant's folder
    (``dir``, relative) and definition (``spec``), the workload and the shared settings.
    """
    from prefillkit.report.paired import compare_runs
    from prefillkit.report.rundir import load_run

    root = Path(out_dir)
    runs = [load_run(root / pv.name) for pv in variants]
    for run, pv in zip(runs, variants, strict=True):
        run.name = pv.name
    cmp = compare_runs(runs)
    for entry, pv in zip(cmp["variants"], variants, strict=True):
        entry["dir"] = pv.name
        entry["spec"] = pv.variant.to_dict()
    doc: dict[str, Any] = {
        "format": COMPARE_FORMAT,
        "version": COMPARE_VERSION,
        **cmp,
        "workload": dict(workload_info),
        "shared": {"config_file": shared_config, "flags": list(shared_flags)},
    }
    ready: dict[str, Any] = json_ready(doc)
    return ready


def write_compare(doc: Mapping[str, Any], out_dir: str | Path) -> Path:
    """Write ``compare.json`` atomically into ``out_dir``; returns its path."""
    path = Path(out_dir) / COMPARE_FILE
    atomic_write_text(path, json.dumps(doc, indent=2, allow_nan=False) + "\n")
    return path


# --------------------------------------------------------------------------- report


def _read_compare(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {path}: {' '.join(str(exc).split())}") from None
    except json.JSONDecodeError as exc:
        raise InputError(
            f"corrupt {path.name} (invalid JSON at line {exc.lineno}, column {exc.colno}): {path}"
        ) from None
    except RecursionError:
        raise InputError(f"corrupt {path.name} (JSON nested too deeply): {path}") from None
    variants = data.get("variants") if isinstance(data, dict) else None
    if not isinstance(variants, list) or not variants:
        raise InputError(f"corrupt {path.name} (no 'variants' list): {path}")
    for v in variants:
        if not isinstance(v, dict) or not isinstance(v.get("name"), str):
            raise InputError(f"corrupt {path.name} (a variant without a 'name'): {path}")
        folder = v.get("dir", v["name"])
        if not isinstance(folder, str) or not VARIANT_NAME_RE.fullmatch(folder):
            raise InputError(f"corrupt {path.name} (bad variant folder {folder!r}): {path}")
        for key in ("metrics", "delta", "ratio"):
            if not isinstance(v.get(key), dict):
                raise InputError(f"corrupt {path.name} (variant without '{key}'): {path}")
    if not isinstance(data.get("metrics"), list):
        raise InputError(f"corrupt {path.name} (no 'metrics' list): {path}")
    return data


def write_dir_report(run_dir: str | Path, out_path: str | Path | None = None) -> Path:
    """Write the HTML report of a compare ``--out`` folder or of one replay ``--out`` folder.

    ``run_dir`` holding ``compare.json`` is a comparison (its variant folders are read);
    one holding ``summary.json`` is a single run. The page goes to ``out_path`` (default
    ``run_dir/report.html``), written atomically; returns its path. Problems raise a
    one-line ``ValueError`` (``InputError`` or the run loader's).
    """
    from prefillkit.report.html import write_report
    from prefillkit.report.rundir import load_run

    root = Path(run_dir)
    if not root.is_dir():
        what = "not found" if not root.exists() else "not a folder"
        raise InputError(f"{root}: {what} (expected a replay or compare --out folder)")
    target = Path(out_path) if out_path is not None else root / REPORT_FILE
    compare_file = root / COMPARE_FILE
    comparison: dict[str, Any] | None = None
    if compare_file.is_file():
        comparison = _read_compare(compare_file)
        runs = []
        for v in comparison["variants"]:
            run = load_run(root / v.get("dir", v["name"]))
            run.name = v["name"]
            runs.append(run)
        title = f"prefillkit compare: {', '.join(r.name for r in runs)}"
    elif (root / "summary.json").is_file():
        runs = [load_run(root)]
        title = f"prefillkit replay: {runs[0].name}"
    else:
        raise InputError(
            f"{root}: neither a compare --out folder ({COMPARE_FILE}) nor a replay --out "
            "folder (summary.json)"
        )
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(
            f"{target}: cannot create folder: {' '.join((exc.strerror or str(exc)).split())}"
        ) from None
    write_report(runs, target, title=title, comparison=comparison)  # NOTE: prefillkit.outfile
    return target
