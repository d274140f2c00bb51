"""The plugin through SGLang's own loader: ``sglang.srt.plugins.load_plugins()`` finds the
installed entry point ``prefillkit``, and ``Scheduler`` instantiates prefillkit's adder;
not enabled it changes nothing; a bad setting refuses to start; a missing seam leaves
SGLang's stock adder in place. Each case runs in a fresh interpreter (SGLang loads plugins
once per process and its hooks patch classes process-wide)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import prefillkit
from prefillkit.integrations.sglang import (
    TESTED_SGLANG_VERSIONS,
    MissingExtraError,
    require_sglang,
)

try:
    SGLANG = require_sglang()
except MissingExtraError as err:
    pytest.skip(str(err), allow_module_level=True)

from importlib.metadata import entry_points

HERE = Path(__file__).parent

PRELUDE = """
import logging, sys, warnings
warnings.filterwarnings("ignore")
logging.basicConfig(
    level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", stream=sys.stdout
)
from prefillkit.integrations.sglang import require_sglang
require_sglang()
sys.path.insert(0, {here!r})
from sglang.srt.managers.scheduler import Scheduler
from sglang.srt.managers.schedule_policy import PrefillAdder
"""


def _run(body: str, **env: str) -> subprocess.CompletedProcess[str]:
    script = PRELUDE.format(here=str(HERE)) + textwrap.dedent(body)
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("PREFILLKIT_SGLANG")}
    full_env.update(env)
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=full_env, timeout=300
    )


def test_the_entry_point_is_installed() -> None:
    eps = [ep for ep in entry_points(group="sglang.srt.plugins") if ep.name == "prefillkit"]
    assert [ep.value for ep in eps] == ["prefillkit.integrations.sglang.plugin:register"]


RUN_A_PASS = """
from sglang.srt.plugins import load_plugins
load_plugins()
from sglang_states import build_state, outcome, spec_of
s = build_state(spec_of(4))
cls = s.get_prefill_adder_class()
print("ADDER", cls.__module__, cls.__name__, issubclass(cls, PrefillAdder))
built = []
orig = cls.__init__
def spy(self, *a, **k):
    built.append(type(self).__name__)
    orig(self, *a, **k)
cls.__init__ = spy
out = outcome(s)
print("BUILT", built, "ADMITTED", len(out["admitted"]))
"""


def test_enabled_plugin_is_loaded_by_sglang_and_its_adder_runs_the_pass() -> None:
    r = _run(RUN_A_PASS, PREFILLKIT_SGLANG="1", PREFILLKIT_SGLANG_ENABLE_AFFINITY="1")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "ADDER prefillkit.integrations.sglang.adder PrefillkitAdder True" in r.stdout
    assert "BUILT ['PrefillkitAdder']" in r.stdout
    active = [line for line in r.stdout.splitlines() if " active in SGLang " in line]
    assert active == [
        f"INFO prefillkit.integrations.sglang: prefillkit {prefillkit.__version__} active in "
        f"SGLang {SGLANG}: affinity(floor=64, W=16, K=3, T=5s)"
    ], r.stdout


def test_installed_but_not_enabled_changes_nothing() -> None:
    r = _run(RUN_A_PASS)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "ADDER sglang.srt.managers.schedule_policy PrefillAdder True" in r.stdout
    assert "active in SGLang" not in r.stdout
    assert "ERROR" not in r.stdout


def test_a_bad_setting_refuses_to_start_with_one_line() -> None:
    r = _run(RUN_A_PASS, PREFILLKIT_SGLANG="1", PREFILLKIT_SGLANG_AFFINITY_SKIP_WINDOW="many")
    assert r.returncode == 2
    errors = [line for line in r.stdout.splitlines() if line.startswith("ERROR prefillkit")]
    assert errors == [
        "ERROR prefillkit.integrations.sglang: prefillkit: "
        "PREFILLKIT_SGLANG_AFFINITY_SKIP_WINDOW='many': expected an integer; refusing to start"
    ]
    assert "Traceback" not in r.stdout + r.stderr


def test_a_missing_seam_leaves_sglangs_adder_in_place() -> None:
    # Another version: add_one_req's first parameter renamed (SGLang still runs).
    another_version = """
    from sglang.srt.managers import schedule_policy
    stock_add_one_req = schedule_policy.PrefillAdder.add_one_req
    def add_one_req(self, request, **kw):
        return stock_add_one_req(self, request, **kw)
    schedule_policy.PrefillAdder.add_one_req = add_one_req
    """
    body = textwrap.dedent(another_version) + RUN_A_PASS
    r = _run(body, PREFILLKIT_SGLANG="1")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "ADDER sglang.srt.managers.schedule_policy PrefillAdder True" in r.stdout
    errors = [line for line in r.stdout.splitlines() if line.startswith("ERROR prefillkit")]
    assert errors == [
        f"ERROR prefillkit.integrations.sglang: prefillkit: SGLang {SGLANG} lacks "
        "PrefillAdder.add_one_req(req, has_chunked_req, truncation_align_size); "
        "SGLang's own admission "
        f"stays in place (tested: SGLang {', '.join(TESTED_SGLANG_VERSIONS)})"
    ]


def test_plugin_through_load_plugins_matches_stock_with_features_off() -> None:
    """The entry-point path (hook registry) on 60 states: identical to stock."""
    body = """
    from sglang_states import build_state, outcome, spec_of
    stock = [outcome(build_state(spec_of(seed))) for seed in range(60)]
    from sglang.srt.plugins import load_plugins
    load_plugins()
    s = build_state(spec_of(0))
    assert s.get_prefill_adder_class().__name__ == "PrefillkitAdder"
    plugged = [outcome(build_state(spec_of(seed))) for seed in range(60)]
    print("SAME", sum(a == b for a, b in zip(stock, plugged)), "OF", len(stock))
    """
    r = _run(body, PREFILLKIT_SGLANG="1")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "SAME 60 OF 60" in r.stdout
