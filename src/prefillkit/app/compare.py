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
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import re
import shlex
import signal
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefillkit.app.launch import build_config
from prefillkit.app.measured import (
    RunFlags,
    check_executor,
    load_cost_preset,
    run_keys,
    split_run_flags,
    write_forwards,
)
from prefillkit.app.replay import InputError, Workload, run_replay
from prefillkit.app.settings import (
    Config,
    ConfigError,
    ConfigFile,
    describe,
    field_flag,
    parse_flags,
    read_config_file,
    read_toml,
)
from prefillkit.helpers import ENV as HELPERS_ENV
from prefillkit.records.output import (
    StreamingRunWriter,
    atomic_write_text,
    json_ready,
    summary_document,
    write_run,
)
from prefillkit.request import Request
from prefillkit.sim.engine import Engine, SimConfigError
from prefillkit.text import suggest
from prefillkit.workloads.errors import WorkloadError
from prefillkit.workloads.record import TraceRecord, to_request

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

COMPARE_FILE = "compare.json"
REPORT_FILE = "report.html"
COMPARE_FORMAT = "prefillkit-compare"
COMPARE_VERSION = 1

_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_RESERVED_NAMES = frozenset({COMPARE_FILE, REPORT_FILE})
_FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Config))
# Keys of a variants-file entry that are not config settings.
_ENTRY_KEYS: tuple[str, ...] = ("name", "flags", "config", "settings")


class VariantError(InputError):
    """A bad variant definition (one line, names the variant or the option)."""


# --------------------------------------------------------------------------- variants


@dataclass(frozen=True, slots=True)
class Variant:
    """One named variant: a TOML file, settings and flags over the shared settings.

    ``settings`` (field name → TOML value) come from a variants-file table; ``origin``
    says where the variant was defined (``--variant`` or the variants file's path).
    """

    name: str
    flags: tuple[str, ...] = ()
    config_file: str | None = None
    settings: tuple[tuple[str, object], ...] = ()
    origin: str = "--variant"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready description (goes into ``compare.json``)."""
        return {
            "origin": self.origin,
            "config_file": self.config_file,
            "settings": dict(self.settings),
            "flags": list(self.flags),
        }


def describe_variant(variant: Variant) -> str:
    """One line: the variant's file, settings and flags (``(shared settings only)``)."""
    parts: list[str] = []
    if variant.config_file is not None:
        parts.append(f"@{variant.config_file}")
    parts += [f"{name}={setting_text(value)}" for name, value in variant.settings]
    if variant.flags:
        parts.append(shlex.join(variant.flags))
    return " ".join(parts) if parts else "(shared settings only)"


def check_variant_name(name: str, where: str = "--variant") -> str:
    """``name`` if it is a usable variant (and folder) name; else a ``VariantError``."""
    if not name:
        raise VariantError(f"{where}: empty variant name")
    if not _NAME_RE.fullmatch(name) or name.lower() in _RESERVED_NAMES:
        shown = name if len(name) <= 70 else name[:67] + "..."
        raise VariantError(
            f"{where}: bad variant name {shown!r}: use 1-64 letters, digits, '.', '_' or '-', "
            f"starting with a letter or digit (and not {' or '.join(sorted(_RESERVED_NAMES))}), "
            "since it names the variant's output folder"
        )
    return name


def parse_variant_option(text: str) -> Variant:
    """Parse one ``--variant`` value: ``NAME:FLAGS`` or ``NAME:@FILE.toml``."""
    name, sep, rest = text.partition(":")
    name = name.strip()
    if not sep:
        raise VariantError(
            f'--variant {text!r}: expected NAME:"FLAGS" or NAME:@FILE.toml '
            '(for example fcfs:"--schedule-policy fcfs")'
        )
    check_variant_name(name)
    rest = rest.strip()
    if rest.startswith("@"):
        path = rest[1:].strip()
        if not path:
            raise VariantError(f"variant {name!r}: '@' must be followed by a TOML file path")
        return Variant(name=name, config_file=path)
    try:
        flags = shlex.split(rest)
    except ValueError as exc:
        raise VariantError(f"variant {name!r}: cannot split the flags: {exc}") from None
    return Variant(name=name, flags=tuple(flags))


def _entry_flags(value: object, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        try:
            return tuple(shlex.split(value))
        except ValueError as exc:
            raise VariantError(f"{where}: cannot split 'flags': {exc}") from None
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise VariantError(f"{where}: 'flags' must be a string or a list of strings")


def _entry_settings(table: Mapping[str, object], where: str) -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = []
    for key, value in table.items():
        name = key.replace("-", "_")
        if name not in _FIELD_NAMES:
            hint = suggest(name, [*_FIELD_NAMES, *_ENTRY_KEYS])
            raise VariantError(f"{where}: unknown setting {key!r}{hint}")
        if not isinstance(value, (bool, int, float, str)):
            raise VariantError(
                f"{where}: setting {key!r}: expected a number, string or boolean, "
                f"got {type(value).__name__}"
            )
        out.append((name, value))
    return out


def _variant_from_entry(
    entry: object, path: Path, index: int, table_name: str | None = None
) -> Variant:
    where = f"{path}: variant {table_name or index + 1}"
    if not isinstance(entry, dict):
        raise VariantError(f"{where}: expected a table, got {type(entry).__name__}")
    raw_name = entry.get("name", table_name)
    if raw_name is None:
        raise VariantError(f"{where}: missing 'name'")
    if not isinstance(raw_name, str):
        raise VariantError(f"{where}: 'name' must be a string")
    if table_name is not None and raw_name != table_name:
        raise VariantError(f"{where}: 'name' {raw_name!r} differs from the table name")
    name = check_variant_name(raw_name.strip(), where=str(path))
    where = f"{path}: variant {name!r}"
    flags = _entry_flags(entry["flags"], where) if "flags" in entry else ()
    config_file: str | None = None
    if "config" in entry:
        value = entry["config"]
        if not isinstance(value, str) or not value.strip():
            raise VariantError(f"{where}: 'config' must be a TOML file path")
        config_file = str(path.parent / value.strip())
    settings: list[tuple[str, object]] = []
    if "settings" in entry:
        table = entry["settings"]
        if not isinstance(table, dict):
            raise VariantError(f"{where}: 'settings' must be a table")
        settings += _entry_settings(table, where)
    others = {k: v for k, v in entry.items() if k not in _ENTRY_KEYS}
    settings += _entry_settings(others, where)
    seen: set[str] = set()
    for key, _ in settings:
        if key in seen:
            raise VariantError(f"{where}: setting {key!r} given twice")
        seen.add(key)
    return Variant(
        name=name,
        flags=flags,
        config_file=config_file,
        settings=tuple(settings),
        origin=str(path),
    )


def load_variants_file(path: str | Path) -> list[Variant]:
    """The variants of a ``--variants-file`` (see the module docstring for the format)."""
    file = Path(path)
    try:
        data = read_toml(file)
    except ConfigError as exc:  # names the file: cannot read, not UTF-8, invalid TOML
        raise VariantError(f"--variants-file {exc}") from None
    keys = [k for k in data if k in ("variant", "variants")]
    unknown = [k for k in data if k not in ("variant", "variants")]
    if unknown:
        raise VariantError(
            f"--variants-file {path}: unknown top-level key {unknown[0]!r}; expected "
            '[[variant]] tables (name = ..., flags = "..." or settings)'
        )
    if len(keys) != 1:
        raise VariantError(
            f"--variants-file {path}: expected [[variant]] tables "
            '(name = ..., flags = "..." or settings)'
            if not keys
            else f"--variants-file {path}: give 'variant' or 'variants', not both"
        )
    body = data[keys[0]]
    if isinstance(body, list):
        return [_variant_from_entry(e, file, i) for i, e in enumerate(body)]
    if isinstance(body, dict):
        return [_variant_from_entry(e, file, i, str(k)) for i, (k, e) in enumerate(body.items())]
    raise VariantError(f"--variants-file {path}: '{keys[0]}' must be an array of tables")


def collect_variants(variants_file: str | Path | None, options: Sequence[str]) -> list[Variant]:
    """Variants of the file (first) and of the ``--variant`` options; names checked unique."""
    variants = load_variants_file(variants_file) if variants_file is not None else []
    variants += [parse_variant_option(text) for text in options]
    if not variants:
        raise VariantError(
            'no variants: give at least one --variant NAME:"FLAGS" (or --variants-file)'
        )
    seen: dict[str, str] = {}
    for v in variants:
        key = v.name.lower()
        if key in seen:
            same = "" if seen[key] == v.name else f" (as {seen[key]!r}; names ignore case)"
            raise VariantError(f"duplicate variant name {v.name!r}{same}")
        seen[key] = v.name
    return variants


# --------------------------------------------------------------------------- configs


def setting_text(value: object) -> str:
    """A setting's value as a flag value (``--flag=TEXT``)."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _settings_flags(settings: Sequence[tuple[str, object]]) -> list[str]:
    """``--flag=value`` arguments for field settings (the ``=`` form takes any value)."""
    return [f"{field_flag(name)}={setting_text(value)}" for name, value in settings]


def _toml_settings(path: str) -> list[tuple[str, object]]:
    """A variant's TOML file as settings (the ``--config`` reader: same checks)."""
    return list(read_config_file(path).values.items())


@dataclass(frozen=True, slots=True)
class PreparedVariant:
    """A variant with its resolved config (checked before any run starts)."""

    variant: Variant
    config: Config
    ignored: tuple[str, ...] = ()
    run: RunFlags = field(default_factory=RunFlags)  # what times its forwards (app.measured)

    @property
    def name(self) -> str:
        return self.variant.name


def check_shared_settings(
    config_path: str | None, flags: Sequence[str]
) -> tuple[ConfigFile | None, list[str]]:
    """Check the shared ``--config`` file and flags on their own: ``(the file as read,
    the ignored SGLang flags)``.

    Only their spelling and types: a combination only becomes a config per variant.
    Raises ``ConfigError`` (not prefixed with a variant name).
    """
    parsed = parse_flags(list(flags))
    file = read_config_file(config_path) if config_path is not None else None
    return file, parsed.ignored


def prepare_variants(
    variants: Sequence[Variant],
    shared_config: ConfigFile | None,
    shared_flags: Sequence[str],
    *,
    preset: str | None = None,
) -> list[PreparedVariant]:
    """Resolve every variant's config and check its deployment can be simulated.

    The base deployment (``preset``, else chosen from the shared flags and file: see
    :func:`~prefillkit.app.launch.build_config`) is the same for every variant.

    Errors are ``VariantError`` lines starting ``variant 'NAME': ``.
    """
    out: list[PreparedVariant] = []
    for v in variants:
        prefix = f"variant {v.name!r}: "
        try:
            # --executor is the variant's, not a config flag (sim vs executor side by side)
            run, flags = split_run_flags(v.flags)
            own = parse_flags(flags)  # the variant's own mistakes, before combining
            file_flags = _settings_flags(_toml_settings(v.config_file)) if v.config_file else []
            args = [*shared_flags, *file_flags, *_settings_flags(v.settings), *flags]
            cfg = build_config(  # layered: the last setting wins
                shared_config, args, preset=preset, base_args=shared_flags, allow_repeats=True
            ).config
            Engine(cfg.sim_settings(), [])  # deployment checks (GPU, buffer limit, pool)
            check_executor(run.executor, cfg.sim_settings())
            load_cost_preset(run.cost_preset)
        except ValueError as exc:  # ConfigError, SimConfigError, InputError, ...
            raise VariantError(prefix + " ".join(str(exc).split())) from None
        out.append(PreparedVariant(variant=v, config=cfg, ignored=tuple(own.ignored), run=run))
    return out


# --------------------------------------------------------------------------- runs


@dataclass(frozen=True, slots=True)
class VariantOutcome:
    """What a worker reports back: the run itself is in its folder."""

    name: str
    wall_time_s: float
    requests: int
    completed: int
    partial: bool


_WORKER_RECORDS: list[TraceRecord] = []


def _worker_init(records: list[TraceRecord], workers: int = 1) -> None:
    """Worker start: Ctrl-C is the parent's business (it stops the workers); keep records.

    With two or more workers the cores are theirs: none starts helper processes of its
    own (prefillkit.helpers), unless the user chose."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if workers > 1:
        os.environ.setdefault(HELPERS_ENV, "inline")
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    _WORKER_RECORDS[:] = records


def _run_one(
    name: str,
    cfg: Config,
    workload_info: dict[str, Any],
    out_dir: str,
    latency: Mapping[str, Any] | None = None,
    run: RunFlags | None = None,
) -> VariantOutcome:
    """Worker: replay the shared records with ``cfg`` and write the run to ``out_dir``.

    ``latency``: engine attributes of the summary's latency metrics (``percentiles``,
    ``slo_ttft_s``: ``--percentiles`` / ``--slo-ttft``), the same for every variant.
    ``run``: what times its forwards (the variant's ``--executor`` / ``--cost-preset``).
    """
    run = run or RunFlags()
    t0 = time.perf_counter()
    page_size = cfg.resolved_page_size
    # NOTE: a simulated variant streams (requests built as they arrive, rows written as
    # they finish, the files committed as one set: those write_run writes, byte for
    # byte); a measured executor needs the whole list.
    streaming = run.executor == "sim"
    records = _WORKER_RECORDS
    if streaming and any(a.arrival_s > b.arrival_s for a, b in itertools.pairwise(records)):
        records = sorted(records, key=lambda r: r.arrival_s)  # NOTE: as the list path sorts
    requests: list[Request] | Iterator[Request] = (
        (to_request(r, page_size) for r in records)
        if streaming
        else [to_request(r, page_size) for r in _WORKER_RECORDS]
    )
    writer: StreamingRunWriter | None = None

    def configure(engine: Any) -> None:
        nonlocal writer
        for key, value in (latency or {}).items():
            setattr(engine, key, value)
        if streaming and engine.collector is not None:
            writer = StreamingRunWriter(out_dir, engine.trace.keys)
            engine.collector.sink = writer

    try:
        result = run_replay(
            cfg.sim_settings(),
            requests,
            progress=False,
            handle_sigint=False,
            description=name,
            on_start=configure,
            executor=run.executor,
            cost=load_cost_preset(run.cost_preset),
        )
        doc = summary_document(result, name=name, config=describe(cfg), workload=workload_info)
        doc.update(run_keys(run))
        if writer is not None:
            writer.commit(doc)
        else:
            write_run(result, out_dir, doc)
        write_forwards(result, out_dir)
    finally:
        if writer is not None:
            writer.discard()
    completed = result.summary.get("completed", 0)
    return VariantOutcome(
        name=name,
        wall_time_s=time.perf_counter() - t0,
        requests=int(result.summary["requests"]),
        completed=int(completed) if isinstance(completed, (int, float)) else 0,
        partial=bool(result.partial),
    )


def default_jobs(num_variants: int) -> int:
    """``min(variants, CPUs)``, at least 1."""
    return max(1, min(num_variants, os.cpu_count() or 1))


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for proc in processes:
        if proc.is_alive():
            proc.terminate()
    for proc in processes:
        proc.join(timeout=5)
    # NOTE: wait=True joins the pool's manager thread (it exits once it sees the dead
    # workers). With wait=False, CPython 3.11's exit hook could still find the thread and
    # write to the wake-up pipe the thread had just closed, printing "OSError: Bad file
    # descriptor" with a traceback after the one-line interrupt message (seen 2 in 60).
    pool.shutdown(wait=True, cancel_futures=True)


class VariantsInterrupted(KeyboardInterrupt):
    """Ctrl-C during :func:`run_variants`; ``finished`` names the variants already done."""

    def __init__(self, finished: Sequence[str]) -> None:
        super().__init__()
        self.finished = list(finished)


def run_variants(
    variants: Sequence[PreparedVariant],
    workload: Workload,
    out_dir: str | Path,
    *,
    jobs: int,
    on_done: Callable[[VariantOutcome], None] | None = None,
    latency: Mapping[str, Any] | None = None,
) -> list[VariantOutcome]:
    """Run every variant in a pool of ``jobs`` worker processes; outcomes in variant order.

    Each run is written to ``out_dir/<name>/``. On Ctrl-C (``KeyboardInterrupt`` here) the
    workers are terminated and :class:`VariantsInterrupted` (a ``KeyboardInterrupt``) is
    raised. A failing variant
    stops the others and raises ``VariantError`` naming it.
    """
    root = Path(out_dir)
    for pv in variants:
        target = root / pv.name
        try:
            target.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            reason = " ".join((exc.strerror or str(exc)).split())
            raise InputError(f"--out {root}: cannot create folder {target}: {reason}") from None
    info = json_ready(workload.info)
    can_mask = hasattr(signal, "pthread_sigmask")
    outcomes: dict[str, VariantOutcome] = {}
    pool: ProcessPoolExecutor | None = None
    pending: dict[Future[VariantOutcome], str] = {}
    try:
        # Workers are forked/spawned while SIGINT is blocked, so none dies of a Ctrl-C
        # before its initializer makes it ignore SIGINT; the parent gets it afterwards.
        old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}) if can_mask else None
        try:
            workers = max(1, min(jobs, len(variants)))
            pool = ProcessPoolExecutor(
                max_workers=workers,
                initializer=_worker_init,
                initargs=(workload.records, workers),
            )
            for pv in variants:
                fut = pool.submit(
                    _run_one, pv.name, pv.config, info, str(root / pv.name), latency, pv.run
                )
                pending[fut] = pv.name
        finally:
            if old_mask is not None:
                signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                name = pending.pop(fut)
                try:
                    outcome = fut.result()
                except BrokenProcessPool:
                    raise VariantError(
                        f"variant {name!r}: its worker process died (out of memory?)"
                    ) from None
                except (ConfigError, SimConfigError, InputError, WorkloadError, OSError) as exc:
                    raise VariantError(f"variant {name!r}: {' '.join(str(exc).split())}") from None
                outcomes[name] = outcome
                if on_done is not None:
                    on_done(outcome)
    except BaseException as exc:
        if pool is not None:
            _stop_workers(pool)
            pool = None
        if isinstance(exc, KeyboardInterrupt):
            raise VariantsInterrupted([pv.name for pv in variants if pv.name in outcomes]) from None
        raise
    finally:
        if pool is not None:
            pool.shutdown(wait=True)
    return [outcomes[pv.name] for pv in variants]


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
        if not isinstance(folder, str) or not _NAME_RE.fullmatch(folder):
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
