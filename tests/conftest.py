"""Shared fixtures: every test that takes ``device`` runs once on ``cpu`` and once on ``vulkan``.

The vulkan case is skipped (with the reason) only when ``vkblas.devices()`` lists no Vulkan adapter. Other test files
can use the fixture, or the helpers ``vulkan_available()``, ``DEVICES``, ``requires_vulkan``, ``float_dtype()`` and
``require_torch()``::

    from conftest import requires_vulkan
"""

from __future__ import annotations

import os

# lavapipe wants a runtime dir, and LP_NUM_THREADS=0 keeps it from spawning threads on a 2-core CI runner
os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
os.environ.setdefault("LP_NUM_THREADS", "0")
# a 3x3 convolution's forward and input gradient by Winograd wherever it applies, not where a timing picks it: the
# tests see the same path on every run (test_vulkan_winograd.py covers the timed choice)
os.environ.setdefault("VKBLAS_WINOGRAD", "always")

from types import ModuleType  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import vkblas as vb  # noqa: E402

DEVICES = ["cpu", "vulkan"]


def vulkan_available() -> bool:
    """True when this machine has a Vulkan adapter (lavapipe counts)."""
    return any(d.startswith("vulkan") for d in vb.devices())


NO_VULKAN_REASON = "no Vulkan adapter: vkblas.devices() lists only " + ", ".join(vb.devices())
requires_vulkan = pytest.mark.skipif(not vulkan_available(), reason=NO_VULKAN_REASON)


def require_torch() -> ModuleType:
    """PyTorch for a comparison test. Skipped where PyTorch is not installed, except when the run promises it
    (``VKBLAS_WITH_TORCH=1``, as CI does): there a missing PyTorch fails the test instead of hiding every
    comparison behind a skip."""
    if os.environ.get("VKBLAS_WITH_TORCH") == "1":
        try:
            import torch
        except ImportError as e:
            pytest.fail(f"VKBLAS_WITH_TORCH=1 but PyTorch cannot be imported ({e}): the comparisons would not run")
        return torch
    return pytest.importorskip("torch")


def float_dtype(device: str) -> vb.DType:
    """The float dtype tests compute in: float64 on cpu (the oracle), float32 on GPUs (no float64 there)."""
    return vb.float64 if str(device).startswith("cpu") else vb.float32


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest) -> str:
    if request.param == "vulkan" and not vulkan_available():
        pytest.skip(NO_VULKAN_REASON)
    return request.param


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test that runs on a Vulkan device, so CI can run them again with VKBLAS_SHADER_CHECKS=1."""
    for item in items:
        params = getattr(item, "callspec", None)
        on_vulkan = params is not None and any("vulkan" in str(v) for v in params.params.values())
        if on_vulkan or "vulkan" in item.nodeid.lower() or "gemm" in item.nodeid.lower():
            item.add_marker(pytest.mark.vulkan)
