"""Making ``import torch`` (and ``torchvision``) resolve to the shim for the run of one program.

:func:`install` imports every module of the shim packages (``vkblas.compat.torch``, ``vkblas.compat.torchvision``)
and enters them in ``sys.modules`` under PyTorch's names (``torch.nn.functional`` ...); a real PyTorch already
imported is set aside and put back by :func:`uninstall`. A meta-path finder answers any other ``torch.*`` /
``torchvision.*`` import with a ``ModuleNotFoundError`` that names it. It also makes ``"cuda"`` a device alias
(:mod:`.cuda_map`) and adds the run-only Tensor and Module methods (:mod:`.patches`).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import pkgutil
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import ModuleType

from ..device import register_alias
from . import notice, patches
from .cuda_map import cuda_device
from .missing import not_implemented

ROOTS = ("torch", "torchvision")
SCRIPT_ENV = "VKBLAS_RUN_SCRIPT"  # the program's path, for its spawned children (see spawn_main)
_PACKAGE = __name__.rpartition(".")[0]  # vkblas.compat


def shim_modules() -> dict[str, ModuleType]:
    """PyTorch's module names -> the shim modules standing for them."""
    out: dict[str, ModuleType] = {}
    for root in ROOTS:
        package = importlib.import_module(f"{_PACKAGE}.{root}")
        out[root] = package
        for info in pkgutil.walk_packages(package.__path__, prefix=f"{package.__name__}."):
            out[root + info.name[len(package.__name__) :]] = importlib.import_module(info.name)
    return out


class _Refuse(importlib.abc.MetaPathFinder):
    """Any ``torch.*`` / ``torchvision.*`` module the shim does not have."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.partition(".")[0] in ROOTS:
            raise ModuleNotFoundError(not_implemented(f"module {fullname}"), name=fullname)
        return None


_finder = _Refuse()
_set_aside: dict[str, ModuleType] = {}
_depth = 0


def _ours(name: str) -> bool:
    return name.partition(".")[0] in ROOTS


def install(quiet: bool = False) -> None:
    """Make ``import torch`` mean vkblas (nested calls are counted; each needs its :func:`uninstall`)."""
    global _depth
    _depth += 1
    if _depth > 1:
        return
    modules = shim_modules()
    _set_aside.update({name: sys.modules.pop(name) for name in [n for n in sys.modules if _ours(n)]})
    sys.modules.update(modules)
    sys.meta_path.insert(0, _finder)
    register_alias("cuda", cuda_device)
    patches.apply()
    notice.reset(quiet)


def uninstall() -> None:
    global _depth
    _depth -= 1
    if _depth > 0:
        return
    patches.remove()
    register_alias("cuda", None)
    sys.meta_path.remove(_finder)
    for name in [n for n in sys.modules if _ours(n)]:
        del sys.modules[name]
    sys.modules.update(_set_aside)
    _set_aside.clear()
    notice.reset()


@contextmanager
def installed(quiet: bool = False) -> Iterator[None]:
    install(quiet)
    try:
        yield
    finally:
        uninstall()
