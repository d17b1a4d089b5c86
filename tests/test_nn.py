"""vkblas.nn: Module bookkeeping, every layer and loss against a numpy reference and finite differences, bad input,
and XOR learned end to end, on cpu and (when present) Vulkan."""

from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np
import pytest

import vkblas as vk
from conftest import require_torch
from references import conv_ref, numeric_grad
from vkblas import nn
from vkblas.nn import functional as F

HAS_VULKAN = any(d.startswith("vulkan") for d in vk.devices())
DEVICES = ["cpu", pytest.param("vulkan", marks=pytest.mark.skipif(not HAS_VULKAN, reason="no Vulkan adapter"))]
_erf = np.vectorize(math.erf)


# ---------------------------------------------------------------- Module bookkeeping
class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
        self.heads = nn.ModuleList([nn.Linear(2, 1), nn.Linear(2, 1)])
        self.bn = nn.BatchNorm1d(2)
        self.scale = nn.Parameter(vk.ones(1, device="cpu"))
        self.register_buffer("step", vk.zeros((), device="cpu"), persistent=False)

    def forward(self, x):
        h = self.bn(self.body(x))
        return sum(head(h) for head in self.heads) * self.scale


def test_registration_and_state_dict_keys():
    m = Net()
    assert [n for n, _ in m.named_parameters()] == [
        "scale",
        "body.0.weight",
        "body.0.bias",
        "body.2.weight",
        "body.2.bias",
        "heads.0.weight",
        "heads.0.bias",
        "heads.1.weight",
        "heads.1.bias",
        "bn.weight",
        "bn.bias",
    ]
    assert list(m.state_dict()) == [
        "scale",
        "body.0.weight",
        "body.0.bias",
        "body.2.weight",
        "body.2.bias",
        "heads.0.weight",
        "heads.0.bias",
        "heads.1.weight",
        "heads.1.bias",
        "bn.weight",
        "bn.bias",
        "bn.running_mean",
        "bn.running_var",
        "bn.num_batches_tracked",
    ]  # the non-persistent buffer "step" is not saved
    assert [n for n, _ in m.named_buffers()][0] == "step"
    assert len(list(m.children())) == 3 and len(list(m.modules())) == 9
    assert all(not t.requires_grad for t in m.state_dict().values())
    shared = nn.Linear(2, 2)
    assert len(list(nn.Sequential(shared, shared).parameters())) == 2  # shared parameters are listed once


def test_plain_list_of_modules_refuses_loudly():
    class Bad(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = [nn.Linear(2, 2)]

    with pytest.raises(TypeError, match="ModuleList"):
        Bad()
    with pytest.raises(TypeError, match="Parameter or None"):
        nn.Linear(2, 2).weight = vk.zeros(2, 2, device="cpu")
    with pytest.raises(AttributeError, match="super\\(\\).__init__"):

        class NoInit(nn.Module):
            def __init__(self) -> None:
                self.w = 1

        NoInit()


def test_train_eval_zero_grad_requires_grad_and_repr():
    m = Net()
    assert m.eval() is m and not m.bn.training and not m.heads[1].training
    m.train()
    assert m.body[0].training
    m(vk.randn(4, 3, device="cpu")).sum().backward()
    assert all(p.grad is not None for p in m.parameters())
    m.zero_grad()
    assert all(p.grad is None for p in m.parameters())
    m.requires_grad_(False)
    assert not any(p.requires_grad for p in m.parameters())
    assert repr(nn.Sequential(OrderedDict(fc=nn.Linear(2, 3, bias=False)))) == (
        "Sequential(\n  (fc): Linear(in_features=2, out_features=3, bias=False)\n)"
    )
    assert "Parameter containing" in repr(m.scale)


@pytest.mark.parametrize("device", DEVICES)
def test_to_moves_in_place_and_keeps_identity(device):
    m = nn.Linear(3, 2, device="cpu")
    w = m.weight
    ref = m(vk.ones(1, 3, device="cpu")).detach().numpy()
    m.to(device)
    assert m.weight is w and w.device == vk.device(device) and w.requires_grad and w.is_leaf
    np.testing.assert_allclose(m(vk.ones(1, 3, device=device)).detach().numpy(), ref, rtol=1e-5)
    assert m.double().weight.dtype == vk.float64 if device == "cpu" else True


def test_load_state_dict_reports_missing_unexpected_and_mis_shaped():
    m = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 1))
    sd = m.state_dict()
    fresh = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 1))
    fresh.load_state_dict(sd)
    np.testing.assert_array_equal(fresh[0].weight.detach().numpy(), m[0].weight.detach().numpy())
    bad = dict(sd)
    del bad["1.bias"]
    bad["extra"] = vk.zeros(1, device="cpu")
    bad["0.weight"] = vk.zeros(4, 2, device="cpu")
    with pytest.raises(RuntimeError) as e:
        fresh.load_state_dict(bad)
    msg = str(e.value)
    assert '"1.bias"' in msg and '"extra"' in msg and "size mismatch for 0.weight" in msg and "(4, 2)" in msg
    del bad["0.weight"]
    assert fresh.load_state_dict(bad, strict=False) == (["0.weight", "1.bias"], ["extra"])


# ---------------------------------------------------------------- layers: forward vs numpy, backward vs finite diff
def _np(t):
    return None if t is None else t.detach().numpy().astype(np.float64)


def _bn_ref(x, w, b):
    axes = (0,) + tuple(range(2, x.ndim))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    mu, var = x.mean(axes, keepdims=True), x.var(axes, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-5) * w.reshape(shape) + b.reshape(shape)


def _ln_ref(x, w, b, k=1):
    axes = tuple(range(x.ndim - k, x.ndim))
    mu, var = x.mean(axes, keepdims=True), x.var(axes, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-5) * w + b


def _softmax(x, d):
    e = np.exp(x - x.max(d, keepdims=True))
    return e / e.sum(d, keepdims=True)


# name -> (make module (device, dtype), input shape, reference(x, params))
LAYERS = {
    "Linear": (lambda d, t: nn.Linear(4, 3, device=d, dtype=t), (2, 4), lambda x, p: x @ p["weight"].T + p["bias"]),
    "Conv2d": (
        lambda d, t: nn.Conv2d(2, 3, 2, stride=2, device=d, dtype=t),
        (1, 2, 4, 4),
        lambda x, p: conv_ref(x, p["weight"], p["bias"], stride=2),
    ),
    "MaxPool2d": (
        lambda d, t: nn.MaxPool2d(2),
        (1, 2, 4, 4),
        lambda x, p: x.reshape(1, 2, 2, 2, 2, 2).max(axis=(3, 5)),
    ),
    "AvgPool2d": (
        lambda d, t: nn.AvgPool2d(2),
        (1, 2, 4, 4),
        lambda x, p: x.reshape(1, 2, 2, 2, 2, 2).mean(axis=(3, 5)),
    ),
    "Flatten": (lambda d, t: nn.Flatten(), (2, 2, 3), lambda x, p: x.reshape(2, 6)),
    "Dropout(eval)": (lambda d, t: nn.Dropout(0.5).eval(), (2, 3), lambda x, p: x),
    "ReLU": (lambda d, t: nn.ReLU(), (2, 5), lambda x, p: np.maximum(x, 0)),
    "Sigmoid": (lambda d, t: nn.Sigmoid(), (2, 5), lambda x, p: 1 / (1 + np.exp(-x))),
    "Tanh": (lambda d, t: nn.Tanh(), (2, 5), lambda x, p: np.tanh(x)),
    "GELU": (lambda d, t: nn.GELU(), (2, 5), lambda x, p: 0.5 * x * (1 + _erf(x / math.sqrt(2)))),
    "GELU(tanh)": (
        lambda d, t: nn.GELU("tanh"),
        (2, 5),
        lambda x, p: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
    ),
    "SiLU": (lambda d, t: nn.SiLU(), (2, 5), lambda x, p: x / (1 + np.exp(-x))),
    "LeakyReLU": (lambda d, t: nn.LeakyReLU(0.2), (2, 5), lambda x, p: np.where(x > 0, x, 0.2 * x)),
    "Softmax": (lambda d, t: nn.Softmax(dim=-1), (2, 5), lambda x, p: _softmax(x, -1)),
    "LogSoftmax": (lambda d, t: nn.LogSoftmax(dim=1), (2, 5), lambda x, p: np.log(_softmax(x, 1))),
    "LayerNorm": (
        lambda d, t: nn.LayerNorm(5, device=d, dtype=t),
        (2, 5),
        lambda x, p: _ln_ref(x, p["weight"], p["bias"]),
    ),
    "LayerNorm2d": (
        lambda d, t: nn.LayerNorm((2, 3), device=d, dtype=t),
        (2, 2, 3),
        lambda x, p: _ln_ref(x, p["weight"], p["bias"], 2),
    ),
    "RMSNorm": (
        lambda d, t: nn.RMSNorm(5, eps=1e-6, device=d, dtype=t),
        (2, 5),
        lambda x, p: x / np.sqrt((x**2).mean(-1, keepdims=True) + 1e-6) * p["weight"],
    ),
    "BatchNorm1d": (
        lambda d, t: nn.BatchNorm1d(3, device=d, dtype=t),
        (4, 3),
        lambda x, p: _bn_ref(x, p["weight"], p["bias"]),
    ),
    "BatchNorm1d(NCL)": (
        lambda d, t: nn.BatchNorm1d(2, device=d, dtype=t),
        (3, 2, 2),
        lambda x, p: _bn_ref(x, p["weight"], p["bias"]),
    ),
    "BatchNorm2d": (
        lambda d, t: nn.BatchNorm2d(2, device=d, dtype=t),
        (2, 2, 2, 2),
        lambda x, p: _bn_ref(x, p["weight"], p["bias"]),
    ),
}


def _perturb_affine(m):
    """Non-trivial affine parameters, so the reference checks them too."""
    with vk.no_grad():
        for name, p in m.named_parameters():
            if name in ("weight", "bias") and p.ndim <= 2 and type(m).__name__ not in ("Linear", "Conv2d"):
                p.copy_(vk.tensor(np.random.default_rng(7).uniform(0.5, 1.5, p.shape), device=p.device))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(LAYERS))
def test_layer_forward_and_grads(device, name):
    make, shape, ref = LAYERS[name]
    x = np.random.default_rng(0).standard_normal(shape)
    vk.manual_seed(0)
    m = make(device, None)
    _perturb_affine(m)
    xt = vk.tensor(x, device=device, requires_grad=True)
    y = m(xt)
    params = {k: _np(v) for k, v in m.named_parameters()}
    np.testing.assert_allclose(y.detach().numpy(), ref(x, params), rtol=1e-4, atol=1e-5)
    # gradients on this device equal float64 cpu gradients, which are checked against finite differences below
    w = np.random.default_rng(1).standard_normal(y.shape)
    y.backward(vk.tensor(w, device=device))
    m64 = make("cpu", vk.float64)
    m64.load_state_dict(
        {
            k: vk.tensor(v, dtype=vk.float64 if v.dtype.is_floating else None, device="cpu")
            for k, v in ((k, v.cpu()) for k, v in m.state_dict().items())
        },
        strict=True,
    )
    x64 = vk.tensor(x, dtype=vk.float64, device="cpu", requires_grad=True)
    m64(x64).backward(vk.tensor(w, dtype=vk.float64, device="cpu"))
    np.testing.assert_allclose(xt.grad.numpy(), x64.grad.numpy(), rtol=1e-3, atol=1e-4)
    for (k, p), (_, p64) in zip(m.named_parameters(), m64.named_parameters(), strict=True):
        np.testing.assert_allclose(p.grad.numpy(), p64.grad.numpy(), rtol=1e-3, atol=1e-4, err_msg=k)
    # and the maths: the same gradients by finite differences of the float64 reference
    names = list(params)
    args = [x, *params.values()]
    got = [xt.grad.numpy(), *(p.grad.numpy() for _, p in m.named_parameters())]
    for i, g in enumerate(got):
        want = numeric_grad(lambda xx, *ps: ref(xx, dict(zip(names, ps, strict=True))), args, i, [w])
        np.testing.assert_allclose(g, want, rtol=1e-3, atol=1e-4, err_msg=f"{name}: gradient of input {i}")


@pytest.mark.parametrize("name", [n for n in LAYERS if n not in ("MaxPool2d",)])
def test_layer_gradcheck_float64(name):
    make, shape, _ = LAYERS[name]
    m = make("cpu", vk.float64)
    _perturb_affine(m)
    x = vk.tensor(np.random.default_rng(2).standard_normal(shape), dtype=vk.float64, device="cpu", requires_grad=True)
    params = list(m.parameters())

    def fn(xx, *ps):
        with vk.no_grad():
            for p, v in zip(params, ps, strict=True):
                p.copy_(v)
        return m(xx) if not ps else _with_params(m, params, ps, xx)

    assert vk.gradcheck(fn, [x, *[p.detach().clone().requires_grad_() for p in params]])


@pytest.mark.parametrize("case", ["2d", "3d", "3d-not-foldable", "no-bias", "only-bias-grad", "1d"])
def test_functional_linear_equals_its_composition(device, case):
    """``F.linear``'s single node (input folded into rows where a view allows) gives the values and gradients of
    ``x @ w.T + b``, the composition it replaces, on every input layout it takes."""
    rng = np.random.default_rng(3)
    shape = {"2d": (5, 4), "1d": (4,)}.get(case, (2, 3, 4))
    xs = rng.standard_normal((3, 2, 4) if case == "3d-not-foldable" else shape).astype(np.float32)
    ws, bs = rng.standard_normal((6, 4)).astype(np.float32), rng.standard_normal(6).astype(np.float32)
    results = []
    for fused in (True, False):
        x = vk.tensor(xs, device=device, requires_grad=case != "only-bias-grad")
        w = vk.tensor(ws, device=device, requires_grad=case != "only-bias-grad")
        b = None if case == "no-bias" else vk.tensor(bs, device=device, requires_grad=True)
        xi = x.transpose(0, 1) if case == "3d-not-foldable" else x  # (2, 3, 4) with strides no view folds
        y = F.linear(xi, w, b) if fused else (xi @ w.T if b is None else xi @ w.T + b)
        y.backward(vk.tensor(np.linspace(-1, 1, y.numel()).reshape(y.shape).astype(np.float32), device=device))
        results.append(
            [y.detach().numpy()] + [t.grad.numpy() for t in (x, w, b) if t is not None and t.grad is not None]
        )
    assert len(results[0]) == len(results[1])
    for got, want in zip(*results, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _with_params(m, params, values, x):
    """Run m with its parameters replaced by ``values`` (tensors in the graph), then put the originals back."""
    saved = [(mod, k, v) for mod in m.modules() for k, v in mod._parameters.items() if v is not None]
    lookup = {id(p): v for p, v in zip(params, values, strict=True)}
    for mod, k, v in saved:
        mod._parameters[k] = lookup[id(v)]
    try:
        return m(x)
    finally:
        for mod, k, v in saved:
            mod._parameters[k] = v


def test_batchnorm_running_stats_and_eval():
    bn = nn.BatchNorm2d(2, device="cpu")
    xs = [np.random.default_rng(i).standard_normal((3, 2, 2, 2)) * (i + 1) for i in range(3)]
    rm, rv = np.zeros(2), np.ones(2)
    for x in xs:
        bn(vk.tensor(x, device="cpu"))
        rm = 0.9 * rm + 0.1 * x.mean((0, 2, 3))
        rv = 0.9 * rv + 0.1 * x.var((0, 2, 3), ddof=1)
    np.testing.assert_allclose(bn.running_mean.numpy(), rm, rtol=1e-5)
    np.testing.assert_allclose(bn.running_var.numpy(), rv, rtol=1e-5)
    assert bn.num_batches_tracked.item() == 3
    bn.eval()
    y = bn(vk.tensor(xs[0], device="cpu")).detach().numpy()
    np.testing.assert_allclose(
        y, (xs[0] - rm.reshape(1, 2, 1, 1)) / np.sqrt(rv.reshape(1, 2, 1, 1) + 1e-5), rtol=1e-4, atol=1e-5
    )
    cum = nn.BatchNorm1d(2, momentum=None, device="cpu")
    for x in xs:
        cum(vk.tensor(x[:, :, 0, 0], device="cpu"))
    np.testing.assert_allclose(cum.running_mean.numpy(), np.mean([x[:, :, 0, 0].mean(0) for x in xs], 0), rtol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_dropout_and_embedding(device):
    vk.manual_seed(1)
    d = nn.Dropout(0.25)
    y = d(vk.ones(4000, device=device)).numpy()
    np.testing.assert_allclose(np.unique(y), [0.0, 1.0 / 0.75], rtol=1e-6)
    assert abs((y == 0).mean() - 0.25) < 0.04
    emb = nn.Embedding(5, 3, padding_idx=0, device=device)
    np.testing.assert_array_equal(emb.weight.detach().numpy()[0], 0)
    idx = vk.tensor([[0, 2], [2, 4]], device=device)
    out = emb(idx)
    np.testing.assert_allclose(out.detach().numpy(), emb.weight.detach().numpy()[[[0, 2], [2, 4]]])
    out.sum().backward()
    np.testing.assert_allclose(emb.weight.grad.numpy()[:, 0], [0, 0, 2, 0, 1])
    with pytest.raises(IndexError, match="out of bounds"):
        emb(vk.tensor([5], device=device))
        vk.synchronize(device)  # a Vulkan device reports bad indices at its next sync point


def test_default_init_ranges():
    vk.manual_seed(0)
    lin, conv = nn.Linear(50, 40, device="cpu"), nn.Conv2d(4, 8, 3, device="cpu")
    for m, fan_in in ((lin, 50), (conv, 36)):
        w, b = m.weight.detach().numpy(), m.bias.detach().numpy()
        bound = 1 / math.sqrt(fan_in)  # kaiming_uniform_(a=sqrt(5)) gives exactly this bound too
        assert np.abs(w).max() <= bound and np.abs(w).max() > 0.9 * bound and np.abs(b).max() <= bound
    w = vk.empty(200, 300, device="cpu")
    nn.init.kaiming_normal_(w, nonlinearity="relu")
    assert abs(w.numpy().std() - math.sqrt(2 / 300)) < 0.01
    nn.init.xavier_uniform_(w)
    assert np.abs(w.numpy()).max() <= math.sqrt(6 / 500)
    nn.init.xavier_normal_(w)
    assert abs(w.numpy().std() - math.sqrt(2 / 500)) < 0.01
    nn.init.ones_(w)
    assert w.numpy().min() == 1
    nn.init.zeros_(w)
    assert w.numpy().max() == 0


def test_wrong_input_shapes_name_the_layer():
    cases = [
        (nn.Linear(4, 3, device="cpu"), (2, 5), r"Linear\(in_features=4.*\(\*, 4\).*\(2, 5\)"),
        (nn.LayerNorm(4, device="cpu"), (2, 3), r"LayerNorm.*\(\*, 4\).*\(2, 3\)"),
        (nn.BatchNorm2d(3, device="cpu"), (2, 4, 2, 2), r"BatchNorm2d.*\(N, 3, H, W\).*\(2, 4, 2, 2\)"),
        (nn.BatchNorm1d(3, device="cpu"), (2, 3, 2, 2), r"BatchNorm1d.*\(N, 3\) or \(N, 3, L\).*\(2, 3, 2, 2\)"),
    ]
    for m, shape, pattern in cases:
        with pytest.raises(ValueError, match=pattern):
            m(vk.zeros(*shape, device="cpu"))


# ---------------------------------------------------------------- losses
def _log_softmax(x):
    m = x.max(1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(1, keepdims=True))


def _ce_ref(x, t, weight=None, ignore_index=-100, ls=0.0, reduction="mean"):
    lp = _log_softmax(x)
    c = x.shape[1]
    w = np.ones(c) if weight is None else weight
    keep = t != ignore_index
    ts = np.where(keep, t, 0)
    wn = w[ts] * keep
    loss = -(lp[np.arange(len(t)), ts]) * wn * (1 - ls) - (lp * w).sum(1) * keep * ls / c
    return {"none": loss, "sum": loss.sum(), "mean": loss.sum() / wn.sum()}[reduction]


rng = np.random.default_rng(3)
X, T = rng.standard_normal((5, 4)) * 3, np.array([0, 3, 1, 3, 2])
P = _softmax(rng.standard_normal((5, 4)), 1)
PROB, LBL = 1 / (1 + np.exp(-rng.standard_normal((5, 4)))), (rng.random((5, 4)) > 0.5).astype(np.float64)
W4 = np.array([0.5, 1.0, 2.0, 1.5])
T_IGN = np.array([0, -1, 1, 3, -1])

# name -> (fn(x, target, **kw) on vkblas tensors, x, target, kwargs (numpy values become tensors), reference)
LOSSES = {
    "mse": (F.mse_loss, X, PROB, {}, lambda: ((X - PROB) ** 2).mean()),
    "l1_sum": (F.l1_loss, X, PROB, {"reduction": "sum"}, lambda: np.abs(X - PROB).sum()),
    "ce": (F.cross_entropy, X, T, {}, lambda: _ce_ref(X, T)),
    "ce_weight_smooth": (
        F.cross_entropy,
        X,
        T,
        {"weight": W4, "label_smoothing": 0.2},
        lambda: _ce_ref(X, T, W4, ls=0.2),
    ),
    "ce_ignore_none": (
        F.cross_entropy,
        X,
        T_IGN,
        {"ignore_index": -1, "reduction": "none", "label_smoothing": 0.1},
        lambda: _ce_ref(X, T_IGN, ignore_index=-1, ls=0.1, reduction="none"),
    ),
    "ce_probs_smooth": (
        F.cross_entropy,
        X,
        P,
        {"label_smoothing": 0.1},
        lambda: -(_log_softmax(X) * (P * 0.9 + 0.1 / 4)).sum(1).mean(),
    ),
    "ce_spatial": (
        F.cross_entropy,
        X.reshape(1, 5, 2, 2).transpose(0, 1, 2, 3),
        T[:4].reshape(1, 2, 2),
        {},
        lambda: _ce_ref(X.reshape(1, 5, 4).transpose(0, 2, 1).reshape(4, 5), T[:4]),
    ),
    "nll_weight": (F.nll_loss, _log_softmax(X), T, {"weight": W4}, lambda: _ce_ref(X, T, W4)),
    "bce": (F.binary_cross_entropy, PROB, LBL, {}, lambda: -(LBL * np.log(PROB) + (1 - LBL) * np.log(1 - PROB)).mean()),
    "bce_logits_pos_weight": (
        F.binary_cross_entropy_with_logits,
        X * 10,
        LBL,
        {"pos_weight": W4},
        lambda: (
            W4 * LBL * np.logaddexp(0, -X * 10)  # -log(sigmoid(x)), stably
            + (1 - LBL) * np.logaddexp(0, X * 10)
        ).mean(),
    ),
}


def _loss_args(name, device, dtype=None):
    fn, x, t, kw, ref = LOSSES[name]
    ft = dtype if np.issubdtype(t.dtype, np.floating) else None
    conv = {k: vk.tensor(v, dtype=dtype, device=device) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
    return (
        fn,
        vk.tensor(x, dtype=dtype, device=device, requires_grad=True),
        vk.tensor(t, dtype=ft, device=device),
        conv,
        ref,
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(LOSSES))
def test_loss_value(device, name):
    fn, x, t, kw, ref = _loss_args(name, device)
    got = fn(x, t, **kw)
    np.testing.assert_allclose(got.detach().numpy(), ref(), rtol=1e-4, atol=1e-5)
    got.sum().backward()
    assert x.grad is not None and np.isfinite(x.grad.numpy()).all()


@pytest.mark.parametrize("name", [n for n in LOSSES if n != "bce_logits_pos_weight"] + ["bce_logits_pos_weight"])
def test_loss_gradcheck_float64(name):
    fn, x, t, kw, _ = _loss_args(name, "cpu", vk.float64)
    if name == "bce_logits_pos_weight":
        x = (x.detach() / 10).requires_grad_()
    assert vk.gradcheck(lambda a: fn(a, t, **kw), [x])


def test_loss_modules_and_stability():
    x = vk.tensor([[1000.0, 0.0], [-1000.0, 0.0]], device="cpu")
    t = vk.tensor([1, 1], device="cpu")
    np.testing.assert_allclose(nn.CrossEntropyLoss(reduction="none")(x, t).numpy(), [1000.0, 0.0], atol=1e-3)
    bce = nn.BCEWithLogitsLoss()(vk.tensor([200.0, -200.0], device="cpu"), vk.tensor([0.0, 1.0], device="cpu"))
    np.testing.assert_allclose(bce.item(), 200.0, rtol=1e-5)
    assert repr(nn.MSELoss(reduction="sum")) == "MSELoss(reduction='sum')"


@pytest.mark.parametrize("loss", ["cross_entropy", "nll_loss"])
def test_target_check_allows_ignore_index_and_names_a_bad_target(device, loss):
    """The target check allows ``ignore_index`` beside 0..C-1 (on Vulkan the device check skips it, without a
    masked copy of the target) and names a bad target, at the next sync point on Vulkan."""
    fn = getattr(F, loss)
    x = vk.zeros(4, 3, device=device)
    for ignore in (-100, 7):
        out = fn(x, vk.tensor([0, ignore, 2, ignore], device=device), ignore_index=ignore, reduction="sum")
        assert np.isfinite(out.item())
        with pytest.raises(IndexError, match="target class index 3 is out of range for 3 classes"):
            fn(x, vk.tensor([0, ignore, 3, 1], device=device), ignore_index=ignore).item()


def test_loss_errors():
    x = vk.zeros(3, 4, device="cpu")
    with pytest.raises(IndexError, match="target class index 4 is out of range for 4 classes"):
        F.cross_entropy(x, vk.tensor([0, 1, 4], device="cpu"))
    with pytest.raises(IndexError, match="-2"):
        nn.NLLLoss()(x, vk.tensor([0, -2, 1], device="cpu"))
    with pytest.raises(ValueError, match=r"expected target of shape \(3,\).*got \(4,\)"):
        F.cross_entropy(x, vk.tensor([0, 1, 2, 3], device="cpu"))
    with pytest.raises(ValueError, match=r"input shape \(3, 4\) and target shape \(3,\)"):
        nn.MSELoss()(x, vk.zeros(3, device="cpu"))
    with pytest.raises(ValueError, match="reduction"):
        nn.L1Loss(reduction="avg")


# ---------------------------------------------------------------- end to end
@pytest.mark.parametrize("device", DEVICES)
def test_xor_learned_by_mlp(device):
    vk.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 1)).to(device)
    x = vk.tensor([[0, 0], [0, 1], [1, 0], [1, 1]], dtype=vk.float32, device=device)
    y = vk.tensor([[0], [1], [1], [0]], dtype=vk.float32, device=device)
    opt = vk.optim.Adam(model.parameters(), lr=0.05)
    loss_fn = nn.BCEWithLogitsLoss()
    for _ in range(150):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
    with vk.no_grad():
        pred = model(x).numpy() > 0
    assert (pred == y.numpy().astype(bool)).all(), loss.item()


def test_against_torch_layers():
    torch = require_torch()
    tm = torch.nn.Sequential(
        torch.nn.Conv2d(2, 4, 3, padding=1),
        torch.nn.BatchNorm2d(4),
        torch.nn.GELU(),
        torch.nn.AvgPool2d(2),
        torch.nn.Flatten(),
        torch.nn.LayerNorm(16),
        torch.nn.Linear(16, 3),
    ).double()
    vm = nn.Sequential(
        nn.Conv2d(2, 4, 3, padding=1),
        nn.BatchNorm2d(4),
        nn.GELU(),
        nn.AvgPool2d(2),
        nn.Flatten(),
        nn.LayerNorm(16),
        nn.Linear(16, 3),
    ).double()
    vm.load_state_dict(
        {
            k: vk.tensor(v.numpy(), device="cpu", dtype=vk.float64 if v.is_floating_point() else None)
            for k, v in tm.state_dict().items()
        }
    )
    x = np.random.default_rng(0).standard_normal((3, 2, 4, 4))
    t = np.array([0, 2, 1])
    tx = torch.tensor(x, requires_grad=True)
    tl = torch.nn.functional.cross_entropy(tm(tx), torch.tensor(t), label_smoothing=0.1)
    tl.backward()
    vx = vk.tensor(x, dtype=vk.float64, device="cpu", requires_grad=True)
    vl = F.cross_entropy(vm(vx), vk.tensor(t, device="cpu"), label_smoothing=0.1)
    vl.backward()
    # the backends' erf (GELU) is a float32-grade approximation, hence 1e-6 rather than float64 round-off
    np.testing.assert_allclose(vl.item(), tl.item(), rtol=1e-6)
    np.testing.assert_allclose(vx.grad.numpy(), tx.grad.numpy(), atol=1e-6)
    for (k, p), tp in zip(vm.named_parameters(), tm.parameters(), strict=True):
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), atol=1e-6, err_msg=k)
    np.testing.assert_allclose(vm[1].running_var.numpy(), tm[1].running_var.numpy(), rtol=1e-10)
