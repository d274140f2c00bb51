"""Make SGLang's scheduler modules importable on a machine without a GPU.

Only ``triton`` (a GPU compiler, absent from CPU installs) and ``torchvision`` (imported by
multimodal helpers only; its PyPI wheel is a CUDA build) are stubbed, and only when they
are missing. The triton stub is SGLang's own (``sglang/_platform_stubs.py``, which SGLang
installs itself on Apple MPS where triton is absent), loaded by file path so that
``import sglang`` does not run before the stub is in place; the few submodules the
scheduler path imports beyond those it stubs are added here. The recipe this follows is
``../shared/sglang-cpu/`` (the project's tested CPU set-up for SGLang 0.5.23).

Nothing on the admission path calls a stubbed function: the stubs exist so that modules
defining GPU kernels can be imported.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
import types
from typing import Any


def _sglang_dir() -> str | None:
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        return None
    return str(next(iter(spec.submodule_search_locations)))


def _load_platform_stubs(sglang_dir: str) -> Any:
    path = os.path.join(sglang_dir, "_platform_stubs.py")
    spec = importlib.util.spec_from_file_location("_prefillkit_sgl_platform_stubs", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path}: not found (an SGLang version without its triton stub)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses need the module registered
    spec.loader.exec_module(module)
    return module


def _stub_classes(parent: Any, names: tuple[str, ...], base: type | None) -> None:
    for name in names:
        bases = (base,) if base is not None else ()
        setattr(parent, name, type(name.lstrip("_"), bases, {}))


def install_triton_stub() -> bool:
    """Install the triton stub unless triton is importable; True when installed."""
    if "triton" in sys.modules or importlib.util.find_spec("triton") is not None:
        return False
    sglang_dir = _sglang_dir()
    if sglang_dir is None:
        return False
    ps = _load_platform_stubs(sglang_dir)
    sys.meta_path.insert(0, ps._TritonFinder())
    mock = ps._make_mock
    triton = mock("triton")
    triton.__version__ = "3.0.0"
    triton.cdiv = ps._cdiv
    triton.next_power_of_2 = ps._next_power_of_2
    triton.Config = ps._Config
    tl = mock("triton.language")

    class _Constexpr:
        def __init__(self, value: Any = None) -> None:
            self.value = value

    tl.constexpr = _Constexpr
    triton.language = tl
    language_extra = mock("triton.language.extra")
    language_extra.libdevice = mock("triton.language.extra.libdevice")
    setattr(tl, "extra", language_extra)  # noqa: B010 (not a request's field)
    runtime = mock("triton.runtime")
    triton.runtime = runtime
    runtime.jit = mock("triton.runtime.jit")
    _stub_classes(runtime.jit, ("JITFunction",), None)
    _stub_classes(runtime.jit, ("KernelInterface",), ps._StubBase)
    runtime.cache = mock("triton.runtime.cache")
    runtime.cache.triton_key = ps._triton_key
    runtime.autotuner = mock("triton.runtime.autotuner")
    _stub_classes(runtime.autotuner, ("OutOfResources", "PTXASError"), Exception)
    runtime.driver = mock("triton.runtime.driver")
    compiler = mock("triton.compiler")
    _stub_classes(compiler, ("CompiledKernel",), ps._StubBase)
    compiler.compiler = mock("triton.compiler.compiler")
    _stub_classes(compiler.compiler, ("ASTSource",), ps._StubBase)
    compiler.compiler.triton_key = ps._triton_key
    triton.compiler = compiler
    triton.testing = mock("triton.testing")
    triton.tools = mock("triton.tools")
    triton.tools.tensor_descriptor = mock("triton.tools.tensor_descriptor")
    triton.backends = mock("triton.backends")
    triton.backends.compiler = mock("triton.backends.compiler")
    _stub_classes(triton.backends.compiler, ("GPUTarget",), ps._StubBase)
    return True


def _magic_getattr(module_name: str) -> Any:
    from unittest.mock import MagicMock

    def getattr_(attr: str) -> Any:
        return MagicMock(name=f"{module_name}.{attr}")

    return getattr_


def install_torchvision_stub() -> bool:
    """Stub torchvision unless it is importable; True when installed."""
    if "torchvision" in sys.modules or importlib.util.find_spec("torchvision") is not None:
        return False
    # transformers caches "torchvision not available" before the stub exists, so it
    # never routes image processing through the stub.
    from transformers.utils import import_utils

    import_utils.is_torchvision_available()
    import_utils.is_torchvision_v2_available()
    names = (
        "torchvision",
        "torchvision.transforms",
        "torchvision.transforms.functional",
        "torchvision.io",
    )
    for name in names:
        module = types.ModuleType(name)
        module.__getattr__ = _magic_getattr(name)  # type: ignore[method-assign]
        module.__spec__ = importlib.machinery.ModuleSpec(name, None)
        sys.modules[name] = module
    sys.modules["torchvision"].transforms = sys.modules["torchvision.transforms"]  # type: ignore[attr-defined]
    transforms = sys.modules["torchvision.transforms"]
    transforms.functional = sys.modules["torchvision.transforms.functional"]  # type: ignore[attr-defined]
    return True


def install_all() -> dict[str, bool]:
    """Install what is missing; returns which stubs were installed."""
    return {"triton": install_triton_stub(), "torchvision": install_torchvision_stub()}
