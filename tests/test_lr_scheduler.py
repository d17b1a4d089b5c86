"""MultiStepLR, ExponentialLR, CosineAnnealingWarmRestarts, SequentialLR and ReduceLROnPlateau: every learning
rate of a run checked against PyTorch's schedulers driven the same way (two parameter groups), and bad input."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import vkblas as vk
from vkblas import optim
from vkblas.optim import lr_scheduler as sched

torch = pytest.importorskip("torch")

Make = Callable[[Any, Any], Any]  # (lr_scheduler module, optimizer) -> scheduler


def _groups(lib: Any) -> Any:
    """An SGD optimizer with two parameter groups (lr 0.1 and 0.02) from ``lib`` (vkblas or torch)."""
    a = lib.ones(1, requires_grad=True) if lib is torch else vk.ones(1, device="cpu", requires_grad=True)
    b = lib.ones(1, requires_grad=True) if lib is torch else vk.ones(1, device="cpu", requires_grad=True)
    return lib.optim.SGD([{"params": [a]}, {"params": [b], "lr": 0.02}], lr=0.1, momentum=0.9)


def _run(lib: Any, make: Make, steps: list[Any]) -> list[list[float]]:
    opt = _groups(lib)
    s = make(lib.optim.lr_scheduler, opt)
    lrs = [[g["lr"] for g in opt.param_groups]]
    for arg in steps:
        opt.step()
        s.step() if arg is None else s.step(arg)
        lrs.append([g["lr"] for g in opt.param_groups])
        assert s.get_last_lr() == lrs[-1]
    return lrs


CASES: dict[str, tuple[Make, list[Any]]] = {
    "MultiStepLR": (lambda m, o: m.MultiStepLR(o, milestones=[5, 2, 5], gamma=0.5), [None] * 9),
    "ExponentialLR": (lambda m, o: m.ExponentialLR(o, gamma=0.8), [None] * 7),
    "CosineAnnealingWarmRestarts": (
        lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0=3, T_mult=2, eta_min=0.01),
        [None] * 25,
    ),
    "CosineAnnealingWarmRestarts-fractional": (
        lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0=2, eta_min=0.001),
        [e + i / 4 for e in range(4) for i in range(4)],
    ),
    "SequentialLR-warmup-then-decay": (
        lambda m, o: m.SequentialLR(
            o, [m.LinearLR(o, start_factor=0.1, total_iters=3), m.ExponentialLR(o, gamma=0.9)], milestones=[3]
        ),
        [None] * 8,
    ),
    "SequentialLR-three": (
        lambda m, o: m.SequentialLR(
            o,
            [m.LinearLR(o, start_factor=0.5, total_iters=2), m.CosineAnnealingLR(o, T_max=4), m.StepLR(o, 2, 0.5)],
            milestones=[2, 6],
        ),
        [None] * 11,
    ),
    "ReduceLROnPlateau": (
        lambda m, o: m.ReduceLROnPlateau(o, factor=0.5, patience=1, cooldown=1, min_lr=[0.02, 0.004]),
        [1.0, 0.9, 0.95, 0.95, 0.94, 0.96, 0.8, 0.85, 0.85, 0.85, 0.85, 0.85, 0.85, 0.85],
    ),
    "ReduceLROnPlateau-max-abs": (
        lambda m, o: m.ReduceLROnPlateau(o, mode="max", threshold=0.05, threshold_mode="abs", patience=0),
        [0.5, 0.52, 0.6, 0.61, 0.7, 0.7, 0.9],
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_learning_rates_match_pytorch(name: str) -> None:
    make, steps = CASES[name]
    np.testing.assert_allclose(_run(vk, make, steps), _run(torch, make, steps), rtol=1e-12, atol=1e-15)


def test_plateau_reads_a_tensor_metric_and_round_trips_its_state() -> None:
    opt = _groups(vk)
    s = sched.ReduceLROnPlateau(opt, patience=0)
    s.step(vk.tensor(1.0, device="cpu"))
    s.step(vk.tensor(2.0, device="cpu"))
    assert opt.param_groups[0]["lr"] == pytest.approx(0.01)
    again = sched.ReduceLROnPlateau(_groups(vk), patience=0)
    again.load_state_dict(s.state_dict())
    assert again.best == 1.0 and again.last_epoch == 2 and isinstance(s, sched.LRScheduler)


def test_sequential_state_dict_round_trip() -> None:
    def make(o: Any) -> Any:
        return sched.SequentialLR(o, [sched.LinearLR(o, 0.1, total_iters=2), sched.ExponentialLR(o, 0.5)], [2])

    opt = _groups(vk)
    s = make(opt)
    for _ in range(3):
        s.step()
    opt2 = _groups(vk)
    s2 = make(opt2)
    s2.load_state_dict(s.state_dict())
    s.step()
    s2.step()
    assert s2.get_last_lr() == s.get_last_lr() and s2.last_epoch == 4


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (lambda o: sched.CosineAnnealingWarmRestarts(o, T_0=0), ValueError, "Expected positive integer T_0, but got 0"),
        (lambda o: sched.CosineAnnealingWarmRestarts(o, 2, T_mult=0), ValueError, "integer T_mult >= 1, but got 0"),
        (lambda o: sched.ReduceLROnPlateau(o, factor=1.0), ValueError, "Factor should be < 1.0."),
        (lambda o: sched.ReduceLROnPlateau(o, mode="low"), ValueError, "mode low is unknown!"),
        (lambda o: sched.ReduceLROnPlateau(o, min_lr=[0.1]), ValueError, "expected 2 min_lrs, got 1"),
        (lambda o: sched.SequentialLR(o, [], []), ValueError, "at least one scheduler"),
        (
            lambda o: sched.SequentialLR(o, [sched.ExponentialLR(o, 0.9)], [3]),
            ValueError,
            "number of schedulers 1 and the number of milestones to be equal to 1",
        ),
        (
            lambda o: sched.SequentialLR(o, [sched.ReduceLROnPlateau(o)], []),
            ValueError,
            "does not support `ReduceLROnPlateau`",
        ),
        (
            lambda o: sched.SequentialLR(o, [sched.ExponentialLR(_groups(vk), 0.9)], []),
            ValueError,
            "belong to the same optimizer",
        ),
    ],
)
def test_bad_arguments(make: Callable[[Any], Any], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        make(_groups(vk))


def test_warm_restarts_negative_epoch() -> None:
    s = sched.CosineAnnealingWarmRestarts(_groups(vk), T_0=2)
    with pytest.raises(ValueError, match="Expected non-negative epoch, but got -1"):
        s.step(-1)
    assert math.isclose(s.get_last_lr()[0], 0.1)
    assert isinstance(optim.lr_scheduler.MultiStepLR(_groups(vk), [1]), sched.LRScheduler)
