"""The examples in docstrings run and print what they say (STYLE.md: examples that actually run)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import vkblas


def _modules_with_examples() -> list[str]:
    names = ["vkblas"]
    for info in pkgutil.walk_packages(vkblas.__path__, "vkblas."):
        if info.name.startswith("vkblas.backend.vulkan") or info.name.endswith("__main__"):
            continue  # the Vulkan runtime has no doctests; importing __main__ would run the CLI
        names.append(info.name)
    return [n for n in names if _has_runnable_examples(n)]


def _has_runnable_examples(name: str) -> bool:
    """Whether the module has docstring examples not marked ``+SKIP`` (those need a GPU or a training step)."""
    finder = doctest.DocTestFinder(exclude_empty=True)
    return any(
        not ex.options.get(doctest.SKIP, False) for t in finder.find(importlib.import_module(name)) for ex in t.examples
    )


@pytest.mark.parametrize("name", _modules_with_examples())
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.failed == 0, f"{result.failed} docstring example(s) of {name} failed (run: python -m doctest -v)"
    assert result.attempted > 0
