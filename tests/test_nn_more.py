"""The new nn layers and functional ops against PyTorch (float64 on the cpu device, float32 on Vulkan): activation
modules, Conv1d, ConvTranspose2d, Upsample / interpolate, pad modes, pooling with ceil_mode / return_indices, the
dropout family's statistics, normalize and embedding options; and a few expressions mixing the new tensor ops,
written once and run in both frameworks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import vkblas as vb
from conftest import float_dtype, require_torch


def _tol(device: str, rtol64: float = 1e-8) -> dict[str, float]:
    return {"atol": 1e-10, "rtol": rtol64} if float_dtype(device) is vb.float64 else {"atol": 2e-4, "rtol": 2e-4}


def _both(
    device: str, fn: Callable[[Any, list[Any]], Any], *arrays: np.ndarray, grad: bool = True, rtol64: float = 1e-8
) -> None:
    """``fn(module_namespace, tensors)`` in torch (float64) and vkblas: values, then gradients of float inputs."""
    torch = require_torch()
    tol = _tol(device, rtol64)
    dt = float_dtype(device)
    tx = [torch.tensor(a, requires_grad=grad and a.dtype.kind == "f") for a in arrays]
    vx = [
        vb.tensor(
            a, dtype=dt if a.dtype.kind == "f" else None, device=device, requires_grad=grad and a.dtype.kind == "f"
        )
        for a in arrays
    ]
    t_out, v_out = fn(torch, tx), fn(vb, vx)
    t_outs = t_out if isinstance(t_out, tuple) else (t_out,)
    v_outs = v_out if isinstance(v_out, tuple) else (v_out,)
    for t, v in zip(t_outs, v_outs, strict=True):
        np.testing.assert_allclose(v.detach().numpy(), t.detach().numpy(), **tol)
    if not grad:
        return
    w = np.random.default_rng(9).standard_normal(tuple(t_outs[0].shape))
    t_outs[0].backward(torch.tensor(w))
    v_outs[0].backward(vb.tensor(w, dtype=v_outs[0].dtype, device=device))
    for t, v in zip(tx, vx, strict=True):
        if t.requires_grad:
            np.testing.assert_allclose(v.grad.numpy(), t.grad.numpy(), err_msg="gradient", **tol)


RNG = np.random.default_rng(0)
X4 = RNG.standard_normal((2, 3, 5, 6))

ACTIVATIONS = [
    ("ELU", {"alpha": 0.7}),
    ("SELU", {}),
    ("CELU", {"alpha": 1.3}),
    ("Mish", {}),
    ("Hardswish", {}),
    ("Hardsigmoid", {}),
    ("Hardtanh", {"min_val": -0.5, "max_val": 0.8}),
    ("ReLU6", {}),
    ("LogSigmoid", {}),
    ("Softsign", {}),
    ("Softplus", {"beta": 1.5, "threshold": 2.0}),
]


@pytest.mark.parametrize(("name", "kw"), ACTIVATIONS, ids=[a for a, _ in ACTIVATIONS])
def test_activation_modules_match_torch(device: str, name: str, kw: dict[str, Any]) -> None:
    x = RNG.standard_normal((4, 5)) * 4
    # PyTorch's float64 kernels for some of these hold constants in float32 (CELU's 1 / alpha, Hardsigmoid's 1/6)
    _both(device, lambda m, t: getattr(m.nn, name)(**kw)(t[0]), x, rtol64=1e-6)
    assert repr(getattr(vb.nn, name)(**kw)).startswith(name)


def _copy_params(torch_module: Any, vk_module: Any, device: str) -> None:
    for (name, tp), (vname, vp) in zip(torch_module.named_parameters(), vk_module.named_parameters(), strict=True):
        assert name == vname and tuple(tp.shape) == tuple(vp.shape), (name, vname, tp.shape, vp.shape)
        with vb.no_grad():
            vp.copy_(vb.tensor(tp.detach().numpy(), dtype=vp.dtype, device=device))


@pytest.mark.parametrize(
    ("cls", "args", "kw", "shape"),
    [
        ("Conv1d", (4, 6, 3), {"stride": 2, "padding": 1, "groups": 2}, (2, 4, 9)),
        ("Conv1d", (3, 2, 2), {"padding": "same", "dilation": 2, "bias": False}, (3, 7)),
        ("ConvTranspose2d", (4, 3, 3), {"stride": 2, "padding": 1, "output_padding": 1}, (2, 4, 3, 4)),
        ("ConvTranspose2d", (4, 6, (2, 3)), {"groups": 2, "dilation": 2}, (4, 3, 3)),
    ],
)
def test_conv_modules_match_torch(device: str, cls: str, args: tuple, kw: dict[str, Any], shape: tuple) -> None:
    torch = require_torch()
    tm = getattr(torch.nn, cls)(*args, **kw).double()
    vm = getattr(vb.nn, cls)(*args, **kw, device=device, dtype=float_dtype(device))
    _copy_params(tm, vm, device)
    _both(device, lambda m, t: (tm if m is torch else vm)(t[0]), RNG.standard_normal(shape))


def test_conv_transpose_output_size_and_default_init() -> None:
    m = vb.nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1, device="cpu")
    assert m(vb.zeros(1, 2, 4, 4, device="cpu"), output_size=(8, 8)).shape == (1, 3, 8, 8)
    bound = 1 / np.sqrt(3 * 9)  # fan-in of the (in, out/groups, kh, kw) weight is out/groups * kh * kw
    assert np.abs(m.weight.detach().numpy()).max() <= bound + 1e-7


@pytest.mark.parametrize(
    "kw",
    [
        {"size": (7, 9), "mode": "nearest"},
        {"scale_factor": 2, "mode": "nearest"},
        {"scale_factor": 0.6, "mode": "nearest-exact"},
        {"size": (8, 3), "mode": "bilinear", "align_corners": False},
        {"size": (8, 3), "mode": "bilinear", "align_corners": True},
        {"scale_factor": (1.7, 0.5), "mode": "bilinear"},
        {"scale_factor": 1.7, "mode": "bilinear", "recompute_scale_factor": True},
    ],
    ids=str,
)
def test_interpolate_matches_torch(device: str, kw: dict[str, Any]) -> None:
    _both(device, lambda m, t: m.nn.functional.interpolate(t[0], **kw), X4)
    _both(device, lambda m, t: m.nn.Upsample(**kw)(t[0]), X4)


@pytest.mark.parametrize(
    ("pad", "mode"),
    [
        ((1, 2, 0, 3), "constant"),
        ((-1, 2, 1, -2), "constant"),
        ((2, 1, 3, 0), "reflect"),
        ((4, 1, 0, 7), "replicate"),
        ((3, 2, 1, 4), "circular"),
    ],
)
def test_pad_matches_torch(device: str, pad: tuple, mode: str) -> None:
    _both(device, lambda m, t: m.nn.functional.pad(t[0], pad, mode=mode), X4)


@pytest.mark.parametrize(
    "kw",
    [
        {"kernel_size": 2, "ceil_mode": True},
        {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True},
        {"kernel_size": 2, "stride": 3, "padding": 1, "ceil_mode": True, "dilation": 2},
        {"kernel_size": (2, 3), "stride": (1, 2)},
    ],
    ids=str,
)
def test_max_pool_indices_and_ceil_mode_match_torch(device: str, kw: dict[str, Any]) -> None:
    torch = require_torch()
    x = RNG.permutation(2 * 3 * 7 * 8).reshape(2, 3, 7, 8) / 10.0  # distinct: one maximum per window
    _both(device, lambda m, t: m.nn.functional.max_pool2d(t[0], **kw), x)
    vals, idx = vb.nn.MaxPool2d(**kw, return_indices=True)(vb.tensor(x, device=device))
    t_vals, t_idx = torch.nn.MaxPool2d(**kw, return_indices=True)(torch.tensor(x))
    np.testing.assert_array_equal(idx.numpy(), t_idx.numpy())
    assert idx.dtype is vb.int32 and vals.shape == tuple(t_vals.shape)


@pytest.mark.parametrize("count_include_pad", [True, False])
@pytest.mark.parametrize(
    "kw", [{"kernel_size": 2, "ceil_mode": True}, {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}]
)
def test_avg_pool_ceil_mode_matches_torch(device: str, kw: dict[str, Any], count_include_pad: bool) -> None:
    _both(device, lambda m, t: m.nn.AvgPool2d(**kw, count_include_pad=count_include_pad)(t[0]), X4[:, :, :5, :5])


@pytest.mark.parametrize(
    ("fn", "shape", "spatial"),
    [("dropout", (64, 64), 0), ("dropout1d", (32, 64, 8), 1), ("dropout2d", (32, 64, 3, 3), 2)],
)
def test_dropout_family_statistics(device: str, fn: str, shape: tuple, spatial: int) -> None:
    p = 0.3
    x = vb.ones(*shape, device=device)
    y = getattr(vb.nn.functional, fn)(x, p).numpy()
    assert np.all(np.isclose(y, 0.0) | np.isclose(y, 1 / (1 - p)))
    kept = (y != 0).mean()
    n_draws = int(np.prod(shape[: len(shape) - spatial]))
    assert abs(kept - (1 - p)) < 4 * np.sqrt(p * (1 - p) / n_draws)
    if spatial:  # a whole channel is kept or dropped
        per_channel = y.reshape(*shape[: len(shape) - spatial], -1)
        assert np.all(per_channel.min(-1) == per_channel.max(-1))
    assert getattr(vb.nn.functional, fn)(x, p, training=False) is x


def test_alpha_dropout_keeps_mean_and_variance(device: str) -> None:
    x = vb.randn(200, 200, device=device)
    y = vb.nn.functional.alpha_dropout(x, 0.2, training=True).numpy()
    assert abs(y.mean()) < 0.03 and abs(y.std() - 1.0) < 0.03
    assert vb.nn.AlphaDropout(0.2).eval()(x) is x
    with pytest.warns(UserWarning, match="3D input"):  # PyTorch's: a 3-D input to dropout2d is taken as (N, C, L)
        assert vb.nn.Dropout2d(0.5)(vb.ones(2, 3, 4, device=device)).shape == (2, 3, 4)


def test_normalize_zero_vector_gradient_matches_torch(device: str) -> None:
    x = np.array([[0.0, 0.0, 0.0], [1.0, -2.0, 0.5]])
    _both(device, lambda m, t: m.nn.functional.normalize(t[0], dim=1), x)


@pytest.mark.parametrize(
    "kw", [{"padding_idx": 1}, {"scale_grad_by_freq": True}, {"max_norm": 1.0}, {"max_norm": 0.5, "norm_type": 1.0}]
)
def test_embedding_options_match_torch(device: str, kw: dict[str, Any]) -> None:
    torch = require_torch()
    idx = np.array([[0, 2, 2], [4, 1, 2]])
    w = RNG.standard_normal((5, 3)) * 2
    tw = torch.tensor(w, requires_grad=True)
    vw = vb.tensor(w, dtype=float_dtype(device), device=device, requires_grad=True)
    t_out = torch.nn.functional.embedding(torch.tensor(idx), tw, **kw)
    v_out = vb.nn.functional.embedding(vb.tensor(idx, device=device), vw, **kw)
    np.testing.assert_allclose(v_out.detach().numpy(), t_out.detach().numpy(), **_tol(device))
    np.testing.assert_allclose(vw.detach().numpy(), tw.detach().numpy(), **_tol(device))  # max_norm renormalises
    g = RNG.standard_normal(tuple(t_out.shape))
    t_out.backward(torch.tensor(g))
    v_out.backward(vb.tensor(g, dtype=v_out.dtype, device=device))
    np.testing.assert_allclose(vw.grad.numpy(), tw.grad.numpy(), **_tol(device))


def test_embedding_from_pretrained() -> None:
    w = vb.randn(4, 2, device="cpu")
    e = vb.nn.Embedding.from_pretrained(w)
    assert not e.weight.requires_grad and e(vb.tensor([3, 0])).shape == (2, 2)
    with pytest.raises(NotImplementedError, match="sparse"):
        vb.nn.Embedding(3, 2, sparse=True)


X = RNG.uniform(0.5, 1.5, (3, 5))
X[0, 2] = 0.0
IDX = np.array([[0, 1, 1, 0, 1], [1, 1, 0, 1, 0]])

EXPRESSIONS: dict[str, tuple[Callable[[Any, list[Any]], Any], list[np.ndarray]]] = {
    "cumprod with zeros": (lambda m, t: m.cumprod(t[0], 1) * 2 + m.cumsum(t[0], 0), [X]),
    "prod": (lambda m, t: m.prod(t[0], 1) + t[0].prod(), [X]),
    "sort + topk": (
        lambda m, t: m.sort(t[0], 1, descending=True).values[:, :3] + m.topk(t[0], 3).values,
        [X + 0.01 * np.arange(5)],
    ),
    "scatter_reduce amax": (
        lambda m, t: t[0][:2].scatter_reduce(0, _index(m, IDX, t[0]), t[1], "amax", include_self=False),
        [X, RNG.standard_normal((2, 5))],
    ),
    "scatter_reduce mean": (
        lambda m, t: t[0][:2].scatter_reduce(0, _index(m, IDX, t[0]), t[1], "mean"),
        [X, RNG.standard_normal((2, 5))],
    ),
    "einsum attention": (
        lambda m, t: m.einsum("bqd,bkd,bkv->bqv", t[0], t[1], t[2]),
        [RNG.standard_normal(s) for s in ((2, 3, 4), (2, 5, 4), (2, 5, 2))],
    ),
    "tril/triu/diagonal/flip/roll": (
        lambda m, t: t[0].tril(1) + t[0].triu(-1).flip(1) + t[0].roll(2, 1) + t[0].diagonal(1).sum(),
        [X],
    ),
    "unfold/repeat_interleave": (lambda m, t: t[0].unfold(1, 3, 2).sum(-1).repeat_interleave(2, 0), [X]),
    "index_add/index_copy": (
        lambda m, t: (
            t[0].index_add(1, _index(m, [4, 0, 4], t[0]), t[1]) * t[0].index_copy(1, _index(m, [2, 0, 1], t[0]), t[1])
        ),
        [X, RNG.standard_normal((3, 3))],
    ),
    "masked_scatter": (lambda m, t: t[0].masked_scatter(_index(m, X > 1.0, t[0]), t[1]), [X, RNG.standard_normal(15)]),
    "math": (
        lambda m, t: m.atanh(t[0] * 0.5) + m.asinh(t[0]) + m.tan(t[0]) + t[0].round(decimals=1),
        [X],
    ),
}


def _index(m: Any, a: Any, like: Any) -> Any:
    """An index (or mask) tensor for ``like``'s framework and device."""
    return m.tensor(np.asarray(a), device=like.device)


@pytest.mark.parametrize("name", EXPRESSIONS)
def test_expressions_match_torch(device: str, name: str) -> None:
    fn, arrays = EXPRESSIONS[name]
    _both(device, fn, *arrays)
