"""The ``foreach`` primitive (a program of elementwise formulas over many tensors; the optimizers' multi-tensor
update): values against float64 numpy on cpu and vulkan, chunks, temporaries, device scalars, layouts the fused
kernel cannot bind (non-contiguous, larger than a binding), zero-size entries, errors, and the dispatch counts."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import vkblas as vb
from conftest import requires_vulkan
from vkblas.ops._core import foreach
from vkblas.optim.fused import ADAM_APPLY, AXPBY, EMA_SQ
from vkblas.tensor import from_host

SIZES = [(3, 4), (1,), (7,), (1023,), (0,), (2, 0), (5, 5, 3)] * 4  # 28 entries: several chunks on every device
# slots: 0 p, 1 g, 2 v; 3 a temporary. Scalars: -1 beta, -2 a device scalar, -3 a Python number
PROGRAM = ((3, AXPBY, (1, 0, -3, -3)), (2, EMA_SQ, (2, 3, -1)), (0, ADAM_APPLY, (0, 3, 2, -2, -3, -1, -3)))


def reference(p: np.ndarray, g: np.ndarray, v: np.ndarray, beta: float, dev: float, c: float) -> tuple:
    t = c * g + c * p
    v = beta * v + (1 - beta) * t * t
    return p * c - dev * t / (np.sqrt(v) * c + beta), v


def _entries(seed: int) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal(s), rng.standard_normal(s), rng.random(s)] for s in SIZES]


@pytest.mark.parametrize("device", ["cpu", pytest.param("vulkan", marks=requires_vulkan)])
def test_foreach_matches_numpy(device: str) -> None:
    host = _entries(0)
    ts = [[vb.tensor(a, dtype=vb.float32, device=device) for a in e] for e in host]
    ts[0][1] = vb.tensor(host[0][1].T.copy(), dtype=vb.float32, device=device).T  # a non-contiguous gradient
    dev = vb.tensor(0.25, device=device)
    foreach(PROGRAM, ts, [0.9, dev, 0.5])
    for e, t in zip(host, ts, strict=True):
        p, v = reference(*e, 0.9, 0.25, 0.5)
        np.testing.assert_allclose(t[0].numpy(), p, rtol=2e-5, atol=1e-6)
        np.testing.assert_allclose(t[2].numpy(), v, rtol=2e-5, atol=1e-6)
        np.testing.assert_array_equal(t[1].numpy(), e[1].astype(np.float32))  # read only: never written


@requires_vulkan
def test_foreach_is_one_dispatch_per_chunk_and_binds_a_shared_buffer_once() -> None:
    rt = vb.ones((1,), device="vulkan")._backend.rt
    arena = vb.zeros((60,), device="vulkan")
    ps = [vb.ones((10,), device="vulkan") for _ in range(6)]
    states = [arena[10 * i : 10 * (i + 1)] for i in range(6)]  # six views of one buffer: one binding
    before = rt.dispatches
    foreach(((1, "add", (1, 0)), (0, "mul", (0, -1))), [[p, s] for p, s in zip(ps, states, strict=True)], [3.0])
    assert rt.dispatches - before == 1
    np.testing.assert_allclose(arena.numpy(), 1.0)
    np.testing.assert_allclose(ps[5].numpy(), 3.0)


@requires_vulkan
def test_foreach_larger_than_a_binding_takes_the_split_path() -> None:
    from vkblas.backend.vulkan import VulkanBackend

    small = VulkanBackend(limits={"max-storage-buffer-binding-size": 1 << 18, "max-buffer-size": 1 << 20})
    rng = np.random.default_rng(1)
    host = [[rng.standard_normal(n), rng.standard_normal(n), rng.random(n)] for n in (100_000, 5)]
    ts = [[from_host(a.astype(np.float32), vb.float32, small) for a in e] for e in host]
    foreach(PROGRAM, ts, [0.9, from_host(np.float32(0.25), vb.float32, small), 0.5])
    for e, t in zip(host, ts, strict=True):
        p, v = reference(*e, 0.9, 0.25, 0.5)
        np.testing.assert_allclose(t[0].numpy(), p, rtol=2e-5, atol=1e-6)
        np.testing.assert_allclose(t[2].numpy(), v, rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("device", ["cpu", pytest.param("vulkan", marks=requires_vulkan)])
def test_foreach_errors_name_shapes_and_devices(device: str) -> None:
    a, b = vb.ones((3,), device=device), vb.ones((4,), device=device)
    with pytest.raises(RuntimeError, match=r"share shape and dtype.*\(3,\).*\(4,\)"):
        foreach(((0, "add", (0, 1)),), [[a, b]])
    with pytest.raises(RuntimeError, match="0-d"):
        foreach(((0, "add", (0, -1)),), [[a]], [b])
    if device == "vulkan":
        with pytest.raises(RuntimeError, match="same device"):
            foreach(((0, "add", (0, 1)),), [[a, vb.ones((3,), device="cpu")]])


OPTIMIZERS: list[tuple[str, dict[str, Any]]] = [
    ("Adam", {}),
    ("AdamW", {"weight_decay": 0.1}),
    ("SGD", {"momentum": 0.9, "nesterov": True}),
]


@requires_vulkan
@pytest.mark.parametrize(("name", "kw"), OPTIMIZERS)
@pytest.mark.parametrize("capturable", [False, True])
def test_optimizer_step_dispatches(name: str, kw: dict[str, Any], capturable: bool) -> None:
    """Every parameter in one dispatch (two when capturable: the step count advances on the device)."""
    ps = [vb.ones(s, device="vulkan", requires_grad=True) for s in [(4, 3), (3,), (5, 4), (5,), (2, 5), (2,)]]
    opt = getattr(vb.optim, name)(ps, lr=0.1, capturable=capturable, **kw)
    for p in ps:
        p.grad = vb.ones(p.shape, device="vulkan")
    opt.step()  # first step: state (and SGD's momentum buffers) created
    rt = ps[0]._backend.rt
    before = rt.dispatches
    opt.step()
    assert rt.dispatches - before == (2 if capturable else 1)
