"""prefillkit: cache-aware prefill admission scheduler and trace-replay simulator."""

from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

__version__ = "0.2.0"


def compiled() -> bool:
    """Whether this installation runs the mypyc-compiled core and event loop (setup.py)
    rather than the same modules as Python source (an editable install, or
    ``PREFILLKIT_PURE_PYTHON=1``): whether the scheduler's extension module is there.
    NOTE: an extension module beside a ``.py`` file is the one Python imports."""
    sched = Path(__file__).parent / "sched"
    return any((sched / f"scheduler{suffix}").exists() for suffix in EXTENSION_SUFFIXES)


def build() -> str:
    """``"compiled"`` or ``"pure Python"`` (see :func:`compiled`)."""
    return "compiled" if compiled() else "pure Python"
