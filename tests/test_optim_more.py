"""Adadelta, Adagrad, Adamax, NAdam and RAdam against torch.optim: trajectories over ten steps (float64 on the cpu,
float32 on a Vulkan device) with the options PyTorch has, parameter groups, state_dict round trips, the capturable
variants eagerly and replayed from a captured graph, and the hyper-parameter checks."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import vkblas as vb
from conftest import float_dtype, require_torch, requires_vulkan
from vkblas import optim

STEPS = 10
P0 = np.random.default_rng(0).standard_normal((3, 4))
P1 = np.random.default_rng(1).standard_normal((5,))
NOISE = np.random.default_rng(2).standard_normal((STEPS, 17))

CASES: list[tuple[str, dict[str, Any]]] = [
    ("Adadelta", {}),
    ("Adadelta", {"lr": 0.5, "rho": 0.8, "eps": 1e-5, "weight_decay": 0.1, "maximize": True}),
    ("Adagrad", {"lr": 0.1}),
    ("Adagrad", {"lr": 0.1, "lr_decay": 0.05, "weight_decay": 0.1, "initial_accumulator_value": 0.2, "eps": 1e-8}),
    ("Adamax", {"lr": 0.01}),
    ("Adamax", {"lr": 0.02, "betas": (0.8, 0.9), "weight_decay": 0.1, "maximize": True}),
    ("NAdam", {"lr": 0.01}),
    ("NAdam", {"lr": 0.01, "weight_decay": 0.1, "momentum_decay": 0.01, "betas": (0.8, 0.95)}),
    ("NAdam", {"lr": 0.01, "weight_decay": 0.1, "decoupled_weight_decay": True}),
    ("RAdam", {"lr": 0.01}),
    ("RAdam", {"lr": 0.01, "betas": (0.9, 0.9), "weight_decay": 0.1}),  # rho_t passes 5 at step 6
    ("RAdam", {"lr": 0.01, "betas": (0.8, 0.9), "weight_decay": 0.1, "decoupled_weight_decay": True}),
]
IDS = [f"{name}-{kw}" for name, kw in CASES]


def _grad(p: np.ndarray, k: int, offset: int) -> np.ndarray:
    """The gradient at step k: depends on the parameters, so state and updates interact."""
    return 2 * p * (1 + 0.1 * k) + NOISE[k, offset : offset + p.size].reshape(p.shape)


def _torch_run(name: str, kw: dict[str, Any], groups: bool = False) -> list[list[np.ndarray]]:
    torch = require_torch()
    ps = [torch.tensor(P0, requires_grad=True), torch.tensor(P1, requires_grad=True)]
    params = [{"params": [ps[0]]}, {"params": [ps[1]], "lr": kw.get("lr", 1e-2) * 0.5}] if groups else ps
    opt = getattr(torch.optim, name)(params, **kw)
    out = []
    for k in range(STEPS):
        for i, p in enumerate(ps):
            p.grad = torch.tensor(_grad(p.detach().numpy(), k, 12 * i))
        opt.step()
        out.append([p.detach().numpy().copy() for p in ps])
    return out


def _vkblas_params(device: str) -> list[vb.Tensor]:
    return [vb.tensor(a, dtype=float_dtype(device), device=device, requires_grad=True) for a in (P0, P1)]


def _steps(opt: Any, ps: list[vb.Tensor], first: int, last: int) -> list[list[np.ndarray]]:
    out = []
    for k in range(first, last):
        for i, p in enumerate(ps):
            p.grad = vb.tensor(_grad(p.detach().numpy().astype(np.float64), k, 12 * i), dtype=p.dtype, device=p.device)
        opt.step()
        out.append([p.detach().numpy().copy() for p in ps])
    return out


def _tol(device: str, name: str = "") -> dict[str, float]:
    if float_dtype(device) is not vb.float64:
        return {"rtol": 2e-4, "atol": 2e-5}
    # torch keeps NAdam's running product of mu in a float32 tensor: its float64 trajectory carries that rounding
    return {"rtol": 1e-7, "atol": 1e-9} if name == "NAdam" else {"rtol": 1e-10, "atol": 1e-12}


def _assert_same(got: list[list[np.ndarray]], want: list[list[np.ndarray]], device: str, name: str = "") -> None:
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        for a, b in zip(g, w, strict=True):
            np.testing.assert_allclose(a, b, err_msg=f"step {k + 1}", **_tol(device, name))


@pytest.mark.parametrize(("name", "kw"), CASES, ids=IDS)
def test_trajectory_matches_torch(device: str, name: str, kw: dict[str, Any]) -> None:
    ps = _vkblas_params(device)
    _assert_same(_steps(getattr(optim, name)(ps, **kw), ps, 0, STEPS), _torch_run(name, kw), device, name)


@pytest.mark.parametrize(("name", "kw"), CASES, ids=IDS)
def test_capturable_eager_matches_torch(device: str, name: str, kw: dict[str, Any]) -> None:
    """The capturable path (step count and coefficients as device scalars) gives the same trajectory."""
    ps = _vkblas_params(device)
    got = _steps(getattr(optim, name)(ps, capturable=True, **kw), ps, 0, STEPS)
    _assert_same(got, _torch_run(name, kw), "vulkan")  # the device scalars are float32 on every device


@pytest.mark.parametrize("name", ["Adadelta", "Adagrad", "Adamax", "NAdam", "RAdam"])
def test_parameter_groups_and_state_dict_round_trip(name: str) -> None:
    kw: dict[str, Any] = {"lr": 0.02, "weight_decay": 0.05}
    want = _torch_run(name, kw, groups=True)
    ps = _vkblas_params("cpu")
    groups = [{"params": [ps[0]]}, {"params": [ps[1]], "lr": 0.01}]
    opt = getattr(optim, name)(groups, **kw)
    got = _steps(opt, ps, 0, 4)
    saved = opt.state_dict()
    fresh = getattr(optim, name)([{"params": [ps[0]]}, {"params": [ps[1]], "lr": 0.01}], **kw)
    fresh.load_state_dict(saved)
    got += _steps(fresh, ps, 4, STEPS)
    _assert_same(got, want, "cpu", name)


@requires_vulkan
@pytest.mark.parametrize(("name", "kw"), CASES[1::2], ids=IDS[1::2])
def test_captured_step_replays_match_torch(name: str, kw: dict[str, Any]) -> None:
    """One eager warm-up step, the second step captured (capture runs it), the rest replayed: eager PyTorch's
    trajectory."""
    ps = _vkblas_params("vulkan")
    opt = getattr(optim, name)(ps, capturable=True, **kw)
    got = _steps(opt, ps, 0, 1)
    grads = [vb.zeros(*p.shape, device="vulkan") for p in ps]

    def load_grads(k: int) -> None:
        for i, (p, g) in enumerate(zip(ps, grads, strict=True)):
            g.copy_(vb.tensor(_grad(p.detach().numpy().astype(np.float64), k, 12 * i), device="vulkan"))
            p.grad = g

    load_grads(1)
    graph = vb.graphs.Graph()
    with vb.graphs.capture(graph, device="vulkan"):
        opt.step()
    got.append([p.detach().numpy().copy() for p in ps])
    for k in range(2, STEPS):
        load_grads(k)
        graph.replay()
        got.append([p.detach().numpy().copy() for p in ps])
    _assert_same(got, _torch_run(name, kw), "vulkan")


@pytest.mark.parametrize(
    ("name", "kw", "match"),
    [
        ("Adadelta", {"lr": -1.0}, "learning rate"),
        ("Adadelta", {"rho": 1.5}, "rho"),
        ("Adadelta", {"eps": -1.0}, "epsilon"),
        ("Adagrad", {"lr_decay": -0.1}, "lr_decay"),
        ("Adagrad", {"initial_accumulator_value": -1.0}, "initial_accumulator_value"),
        ("Adagrad", {"weight_decay": -1.0}, "weight_decay"),
        ("Adamax", {"betas": (1.0, 0.9)}, "beta parameter at index 0"),
        ("NAdam", {"betas": (0.9, -0.1)}, "beta parameter at index 1"),
        ("NAdam", {"momentum_decay": -1.0}, "momentum_decay"),
        ("RAdam", {"eps": -1e-8}, "epsilon"),
    ],
)
def test_bad_hyper_parameters_name_the_value(name: str, kw: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        getattr(optim, name)(_vkblas_params("cpu"), **kw)
