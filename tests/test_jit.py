"""vkblas.compile: warm-up, capture and replay per input signature; the results equal eager steps."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import vkblas as vk
from conftest import requires_vulkan
from vkblas import nn

DEV = "vulkan"


def _model_and_step(capturable: bool = True, device: str = DEV) -> tuple[Any, Any]:
    vk.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 4)).to(device)
    opt = vk.optim.Adam(model.parameters(), lr=1e-2, capturable=capturable)

    def step(x: vk.Tensor, y: vk.Tensor) -> vk.Tensor:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return model, step


def _data(n: int, batch: int = 8, seed: int = 1) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((batch, 12)).astype(np.float32), rng.integers(0, 4, batch)) for _ in range(n)]


def _run(step: Any, data: list, device: str = DEV) -> list[float]:
    out = []
    for x, y in data:
        loss = step(vk.tensor(x, device=device), vk.tensor(y, dtype=vk.int32, device=device))
        out.append(loss.item())
    return out


@requires_vulkan
def test_compiled_steps_equal_eager_steps() -> None:
    data = _data(6)
    model_e, step_e = _model_and_step()
    model_c, step_c = _model_and_step()
    compiled = vk.compile(step_c)
    np.testing.assert_allclose(_run(compiled, data), _run(step_e, data), rtol=1e-5, atol=1e-6)
    for a, b in zip(model_c.parameters(), model_e.parameters(), strict=True):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-5, atol=1e-6)
    assert compiled.num_graphs == 1


@requires_vulkan
def test_shape_change_recaptures_and_the_cache_is_bounded() -> None:
    _, step = _model_and_step()
    compiled = vk.compile(step, warmup=1, max_graphs=2)
    for batch in (8, 8, 8, 5, 5, 5):
        _run(compiled, _data(1, batch))
    assert compiled.num_graphs == 2
    _run(compiled, _data(2, 3))  # a third signature: the least recently used graph is dropped
    assert compiled.num_graphs == 2 and len(compiled._entries) == 2
    compiled.reset()
    assert compiled.num_graphs == 0


def test_on_cpu_it_runs_eagerly() -> None:
    data = _data(4)
    _, step_e = _model_and_step(device="cpu")
    _, step_c = _model_and_step(device="cpu")
    compiled = vk.compile(warmup=1)(step_c)
    assert _run(compiled, data, "cpu") == _run(step_e, data, "cpu")
    assert compiled.num_graphs == 0


@requires_vulkan
def test_errors_name_the_function_and_the_fix() -> None:
    _, step = _model_and_step(capturable=False)
    compiled = vk.compile(step, warmup=1)
    _run(compiled, _data(1))
    with pytest.raises(RuntimeError, match=r"vkblas.compile\(.*step\).*capturable=True"):
        _run(compiled, _data(1))

    _, step = _model_and_step()

    def syncs(x: vk.Tensor, y: vk.Tensor) -> float:
        return step(x, y).item()

    compiled = vk.compile(syncs, warmup=1)
    x, y = vk.ones((8, 12), device=DEV), vk.zeros((8,), dtype=vk.int32, device=DEV)
    compiled(x, y)
    with pytest.raises(RuntimeError, match=r"vkblas.compile\(.*syncs\).*host reads"):
        compiled(x, y)
    assert not vk.graphs.is_current_stream_capturing()
    with pytest.raises(TypeError, match="not hashable"):
        compiled(x, y, {1})  # an unhashable non-tensor argument
    with pytest.raises(ValueError, match="warmup"):
        vk.compile(step, warmup=0)
