"""``scaled_dot_product_attention`` against PyTorch's in float64 (values and gradients) on every device: causal,
bool and float masks, sizes that are no multiple of the kernels' tiles, head dims 16 to 128, grouped-query
attention; dropout (the same mask on every device, its statistics, its gradient against an explicit-mask
reference, fresh masks in every graph replay); the memory the fused kernels use; bad input. On Vulkan both kernel
designs (register-blocked and one row per invocation) at several tile shapes: partial tiles, T=1, head dims that are
no multiple of 4, strided inputs and masks, NaN / inf rows, dropout, float16; the tile choice under adapter
limits."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

import vkblas as vb
from conftest import float_dtype, require_torch, requires_vulkan
from references import pcg_uniform

F = vb.nn.functional


def _tols(device: str) -> dict[str, float]:
    return {"atol": 1e-10, "rtol": 1e-9} if float_dtype(device) is vb.float64 else {"atol": 2e-5, "rtol": 1e-4}


def _compare(
    device: str, shapes: tuple, mask: str | None = None, seed: int = 0, strided: bool = False, **kw: object
) -> None:
    """vkblas against torch (float64): the output and the gradients of q, k, v (and a float mask). ``strided``:
    q, k, v are (B, T, H, D) tensors seen through ``transpose(1, 2)`` (nanoGPT's layout) and the mask a transposed
    view: no input is contiguous."""
    torch = require_torch()
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal(s) for s in shapes)
    lq, lk = shapes[0][-2], shapes[1][-2]
    m = None
    if mask == "bool":
        m = rng.random((lq, lk)) < 0.7
        m[0] = False  # a fully masked row: 0 in both
    elif mask == "float":
        m = rng.standard_normal((1, lq, lk))
        m[0, 1, ::2] = -np.inf
    tq = [torch.tensor(a, requires_grad=True) for a in (q, k, v)]
    tm = None if m is None else torch.tensor(m, requires_grad=mask == "float")
    t_out = torch.nn.functional.scaled_dot_product_attention(*tq, attn_mask=tm, **kw)
    dt = float_dtype(device)
    if strided:
        vq = [vb.tensor(np.swapaxes(a, -3, -2).copy(), dtype=dt, device=device, requires_grad=True) for a in (q, k, v)]
        inputs = [x.transpose(-3, -2) for x in vq]
    else:
        vq = inputs = [vb.tensor(a, dtype=dt, device=device, requires_grad=True) for a in (q, k, v)]
    vm = v_mask = None
    if m is not None:
        mdt = None if mask == "bool" else dt
        if strided:
            vm = vb.tensor(np.swapaxes(m, -1, -2).copy(), dtype=mdt, device=device, requires_grad=mask == "float")
            v_mask = vm.transpose(-1, -2)
        else:
            vm = v_mask = vb.tensor(m, dtype=mdt, device=device, requires_grad=mask == "float")
    v_out = F.scaled_dot_product_attention(*inputs, attn_mask=v_mask, **kw)
    tol = _tols(device)
    np.testing.assert_allclose(v_out.detach().numpy(), t_out.detach().numpy(), **tol)
    w = rng.standard_normal(tuple(t_out.shape))
    t_out.backward(torch.tensor(w))
    v_out.backward(vb.tensor(w, dtype=dt, device=device))
    pairs = list(zip(vq, tq, strict=True)) + ([(vm, tm)] if mask == "float" else [])
    for i, (a, b) in enumerate(pairs):
        want = np.nan_to_num(b.grad.numpy())  # torch leaves NaN at the -inf mask entries' gradient; vkblas 0
        got = a.grad.numpy()
        if strided:  # the leaves are the (B, T, H, D) tensors (the mask's leaf its transpose)
            got = np.swapaxes(got, -1, -2) if i == 3 else np.swapaxes(got, -3, -2)
        np.testing.assert_allclose(got, want, err_msg=f"gradient {i}", **tol)


@pytest.mark.parametrize("head_dim", [16, 32, 64, 96, 128])
def test_head_dims_match_torch(device: str, head_dim: int) -> None:
    """nanoGPT's heads are 64 wide; 37 rows are no multiple of any tile."""
    shapes = ((1, 2, 37, head_dim), (1, 2, 37, head_dim), (1, 2, 37, head_dim))
    _compare(device, shapes, is_causal=True)


@pytest.mark.parametrize(
    ("shapes", "mask", "kw"),
    [
        (((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 6)), None, {}),
        (((2, 2, 70, 16), (2, 2, 70, 16), (2, 2, 70, 16)), None, {"is_causal": True}),
        (((1, 2, 9, 8), (1, 2, 4, 8), (1, 2, 4, 8)), None, {"is_causal": True}),  # L > S: top-left aligned
        (((2, 2, 6, 8), (2, 2, 9, 8), (2, 2, 9, 8)), "bool", {}),
        (((2, 2, 6, 8), (2, 2, 9, 8), (2, 2, 9, 8)), "float", {"scale": 0.7}),
        (((3, 5, 4), (3, 6, 4), (3, 6, 2)), None, {}),  # 3-D inputs
        (((2, 1, 2, 4, 8), (2, 1, 2, 5, 8), (2, 1, 2, 5, 8)), "bool", {}),  # 3 batch dims
        (((1, 4, 5, 8), (1, 2, 5, 8), (1, 2, 5, 8)), None, {"enable_gqa": True}),
    ],
    ids=["plain", "causal", "causal-L>S", "bool-mask", "float-mask", "3d", "5d", "gqa"],
)
def test_variants_match_torch(device: str, shapes: tuple, mask: str | None, kw: dict) -> None:
    _compare(device, shapes, mask, **kw)


def _explicit_dropout_reference(q, k, v, p: float, seed: int, causal: bool):
    """torch's math path with the dropout mask written out from the documented generator (backend/base.py)."""
    torch = require_torch()
    b, h, lq, _ = q.shape
    lk = k.shape[-2]
    u = pcg_uniform((b, h, lq, lk), seed)  # first draw of a fresh Generator(seed): counter 0
    keep = torch.tensor((u >= p).astype(np.float64) / (1 - p))
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(~torch.ones(lq, lk, dtype=torch.bool).tril(), float("-inf"))
    return (torch.softmax(s, -1) * keep) @ v


def test_dropout_values_and_gradients(device: str) -> None:
    torch = require_torch()
    rng = np.random.default_rng(4)
    arrays = [rng.standard_normal((2, 2, 9, 8)) for _ in range(3)]
    tq = [torch.tensor(a, requires_grad=True) for a in arrays]
    want = _explicit_dropout_reference(*tq, 0.3, seed=9, causal=True)
    dt = float_dtype(device)
    vq = [vb.tensor(a, dtype=dt, device=device, requires_grad=True) for a in arrays]
    got = F.scaled_dot_product_attention(*vq, dropout_p=0.3, is_causal=True, generator=vb.Generator(9))
    tol = _tols(device)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), **tol)
    w = rng.standard_normal(tuple(want.shape))
    want.backward(torch.tensor(w))
    got.backward(vb.tensor(w, dtype=dt, device=device))
    for a, b in zip(vq, tq, strict=True):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), **tol)


def test_dropout_statistics(device: str) -> None:
    """Uniform attention over 512 ones: each output is the kept fraction / (1 - p), mean 1."""
    p, n = 0.2, 512
    z = vb.zeros(1, 1, 64, 4, device=device)
    out = F.scaled_dot_product_attention(
        z, vb.zeros(1, 1, n, 4, device=device), vb.ones(1, 1, n, 1, device=device), dropout_p=p
    ).numpy()
    sd = math.sqrt(p * (1 - p) / n) / (1 - p)
    assert abs(out.mean() - 1.0) < 4 * sd / math.sqrt(out.size)
    assert 0.7 * sd < out.std() < 1.3 * sd
    assert F.scaled_dot_product_attention(z, z, z, dropout_p=1.0).abs().max().item() == 0.0


@requires_vulkan
def test_dropout_masks_are_the_same_on_every_device() -> None:
    rng = np.random.default_rng(2)
    arrays = [rng.standard_normal((1, 2, 11, 8)) for _ in range(3)]
    outs = [
        F.scaled_dot_product_attention(
            *(vb.tensor(a, dtype=float_dtype(d), device=d) for a in arrays), dropout_p=0.5, generator=vb.Generator(1)
        ).numpy()
        for d in ("cpu", "vulkan")
    ]
    np.testing.assert_allclose(outs[1], outs[0], atol=2e-5)


@requires_vulkan
def test_graph_replays_draw_fresh_dropout_masks_forward_and_backward() -> None:
    """A captured training step with dropout: every replay matches an eager step with the same draws (the
    backward reads the mask the replayed forward used)."""
    rng = np.random.default_rng(6)
    arrays = [rng.standard_normal((1, 2, 10, 8)) for _ in range(3)]

    def step(gen: vb.Generator, leaves: list[vb.Tensor]) -> vb.Tensor:
        for t in leaves:
            t.grad = None
        loss = (F.scaled_dot_product_attention(*leaves, dropout_p=0.4, is_causal=True, generator=gen) ** 2).sum()
        loss.backward()
        return loss

    def leaves() -> list[vb.Tensor]:
        return [vb.tensor(a, device="vulkan", requires_grad=True) for a in arrays]

    eager_gen, eager = vb.Generator(5), leaves()
    want = []
    for _ in range(3):
        loss = step(eager_gen, eager)
        want.append((loss.item(), [t.grad.numpy() for t in eager]))
    graph_gen, static = vb.Generator(5), leaves()
    g = vb.graphs.Graph()
    with vb.graphs.capture(g, device="vulkan"):
        loss = step(graph_gen, static)
    got = [(loss.item(), [t.grad.numpy() for t in static])]
    for _ in range(2):
        g.replay()
        got.append((loss.item(), [t.grad.numpy() for t in static]))
    for (lw, gw), (lg, gg) in zip(want, got, strict=True):
        assert lg == pytest.approx(lw, rel=1e-5)
        for a, b in zip(gg, gw, strict=True):
            np.testing.assert_allclose(a, b, atol=1e-5)
    assert want[0][0] != want[1][0]  # the masks did change between steps


def test_output_and_gradients_are_laid_out_as_pytorchs_fused_kernels_write_them(device: str) -> None:
    """The output is (B, L, H, Ev) in memory, so a model's ``transpose(1, 2).contiguous()`` is a view of it (the
    tensor its next matmul saves is the one the attention saves); without heads (3-D inputs) it is contiguous, as
    PyTorch's. The gradients of q, k, v take their inputs' layout: a GPT's heads of one (B, T, 3C) tensor get
    (B, T, H, hs) gradients, which go back through the transpose and the view without a copy."""
    b, t, h, hs = 2, 5, 3, 4
    x = vb.randn(b, t, 3 * h * hs, device=device, requires_grad=True)
    q, k, v = (p.view(b, t, h, hs).transpose(1, 2) for p in x.split(h * hs, 2))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert y.shape == (b, h, t, hs) and y.transpose(1, 2).is_contiguous()
    assert y.transpose(1, 2).contiguous()._view.storage is y._view.storage
    g = vb.randn(b, t, h * hs, device=device).view(b, t, h, hs).transpose(1, 2)
    for grad in y.grad_fn.rule(y.grad_fn, g):
        assert grad.shape == (b, h, t, hs) and grad.transpose(1, 2).is_contiguous()
    z = vb.randn(2, 3, 4, 5, 6, device=device)
    assert F.scaled_dot_product_attention(z, z, z).transpose(-3, -2).is_contiguous()  # batch dims merged
    w = vb.randn(3, 5, 6, device=device)
    assert F.scaled_dot_product_attention(w, w, w).is_contiguous()
    assert F.scaled_dot_product_attention(w[0], w[0], w[0]).is_contiguous()


@requires_vulkan
def test_an_output_that_overlaps_itself_is_refused() -> None:
    """Outputs may have any strides but no two of their indices may reach one element (both heads would write it)."""
    from vkblas.backend.base import View
    from vkblas.backend.vulkan import InvalidArgumentError

    be = vb.backend.get("vulkan")
    q = vb.randn(1, 2, 3, 4, device="vulkan")
    out = View(vb.zeros(12, device="vulkan")._view.storage, (1, 2, 3, 4), (12, 0, 4, 1), 0)
    lse, rng = vb.zeros(1, 2, 3, device="vulkan"), vb.zeros(2, dtype=vb.int32, device="vulkan")
    with pytest.raises(InvalidArgumentError, match="non-overlapping"):
        be.attention(out, lse._view, rng._view, q._view, q._view, q._view, None, False, 0.5, 0.0, 0, 0)


@requires_vulkan
def test_fused_kernels_never_hold_the_score_matrix() -> None:
    """T = 1024: the (T, T) float32 scores would be 4 MiB; forward and backward allocate a fraction of that."""
    be = vb.backend.get("vulkan")
    t = 1024
    q, k, v = (vb.randn(1, 1, t, 16, device="vulkan", requires_grad=True) for _ in range(3))
    vb.synchronize("vulkan")
    be.empty_cache()
    before = be.pool.allocated_bytes
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    out.sum().backward()
    vb.synchronize("vulkan")
    assert be.pool.allocated_bytes - before < t * t * 4 / 4


def test_errors(device: str) -> None:
    x = vb.zeros(1, 1, 3, 4, device=device)
    with pytest.raises(RuntimeError, match="is_causal"):
        F.scaled_dot_product_attention(x, x, x, attn_mask=vb.ones(3, 3, dtype=vb.bool, device=device), is_causal=True)
    with pytest.raises(RuntimeError, match="attn_mask dtype"):
        F.scaled_dot_product_attention(x, x, x, attn_mask=vb.zeros(3, 3, dtype=vb.int32, device=device))
    with pytest.raises(RuntimeError, match="one floating dtype"):
        F.scaled_dot_product_attention(x, x, vb.zeros(1, 1, 3, 4, dtype=vb.int32, device=device))
    with pytest.raises(RuntimeError, match="divisible"):
        kv = vb.zeros(1, 2, 3, 4, device=device)
        F.scaled_dot_product_attention(vb.zeros(1, 3, 3, 4, device=device), kv, kv, enable_gqa=True)


# ---------------------------------------------------------------- the Vulkan kernel designs and their tiles
@pytest.fixture(
    params=[
        ("blocked", ((16, 16),)),
        ("blocked", ((32, 16),)),
        ("blocked", ((16, 32),)),
        # 256 invocations where 64 x 64 fits (lavapipe: the forward of narrow heads), else smaller
        ("blocked", ((64, 64), (32, 32), (32, 16))),
        # 8 own rows / 8 streamed rows per invocation
        ("blocked", ((32, 16, 8, 4),)),
        ("blocked", ((16, 32, 4, 8),)),
        ("blocked", ((32, 32, 8, 8), (32, 16, 8, 8))),
        ("rows", None),
    ],
    ids=["blocked16x16", "blocked32x16", "blocked16x32", "blocked64x64", "block8x4", "block4x8", "block8x8", "rows"],
)
def design(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Vulkan with one kernel design (for the blocked one only the given tiles: a shape none fits fails rather
    than falling back)."""
    from vkblas.backend.vulkan.kernels import attention as att

    kind, tiles = request.param
    monkeypatch.setattr(att, "DESIGNS", (kind,))
    if tiles is not None:
        monkeypatch.setattr(att, "BLOCK_TILES", tiles)
    return "vulkan"


_DESIGN_CASES = [
    (((1, 2, 37, 16), (1, 2, 37, 16), (1, 2, 37, 16)), None, {"is_causal": True}, False),  # partial tiles
    (((2, 3, 70, 8), (2, 3, 70, 8), (2, 3, 70, 8)), None, {"is_causal": True}, False),  # several tiles, causal skip
    (((2, 1, 1, 4), (2, 1, 1, 4), (2, 1, 1, 4)), None, {"is_causal": True}, False),  # T = 1
    (((1, 2, 5, 1), (1, 2, 7, 1), (1, 2, 7, 3)), None, {}, False),  # head dims 1 and 3
    (((1, 2, 19, 5), (1, 2, 23, 5), (1, 2, 23, 6)), "bool", {}, True),  # dims 5 / 6, strided inputs and mask
    (((1, 2, 18, 7), (1, 2, 33, 7), (1, 2, 33, 2)), "float", {"scale": 0.4}, True),
    (((1, 2, 40, 4), (1, 2, 17, 4), (1, 2, 17, 4)), None, {"is_causal": True}, True),  # L > S, causal
    (((1, 1, 3, 16), (1, 1, 50, 16), (1, 1, 50, 16)), None, {}, False),  # more key tiles than rows
]


@requires_vulkan
@pytest.mark.parametrize(
    ("shapes", "mask", "kw", "strided"),
    _DESIGN_CASES,
    ids=[
        "partial",
        "causal-tiles",
        "T1",
        "dims1-3",
        "dims5-6-strided-bool",
        "dims7-2-strided-float",
        "causal-L>S",
        "few-rows",
    ],
)
def test_kernel_designs_match_torch(design: str, shapes: tuple, mask: str | None, kw: dict, strided: bool) -> None:
    _compare(design, shapes, mask, **kw, strided=strided)


@requires_vulkan
def test_kernel_designs_nanogpt_width(design: str) -> None:
    """Head dim 64 at T = 100 in nanoGPT's strided layout."""
    _compare(design, ((1, 2, 100, 64),) * 3, is_causal=True, strided=True)


@requires_vulkan
def test_kernel_designs_dropout(design: str) -> None:
    """Dropout forward and backward through the explicit-mask reference (the backward kernels regenerate the
    forward's mask element by element)."""
    torch = require_torch()
    rng = np.random.default_rng(8)
    arrays = [rng.standard_normal((2, 2, 21, 8)) for _ in range(3)]
    tq = [torch.tensor(a, requires_grad=True) for a in arrays]
    want = _explicit_dropout_reference(*tq, 0.25, seed=3, causal=True)
    vq = [vb.tensor(a, dtype=vb.float32, device=design, requires_grad=True) for a in arrays]
    got = F.scaled_dot_product_attention(*vq, dropout_p=0.25, is_causal=True, generator=vb.Generator(3))
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), atol=2e-5, rtol=1e-4)
    w = rng.standard_normal(tuple(want.shape))
    want.backward(torch.tensor(w))
    got.backward(vb.tensor(w, device=design))
    for a, b in zip(vq, tq, strict=True):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), atol=2e-5, rtol=1e-4)


@requires_vulkan
@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")  # numpy, computing the cpu's NaN rows
def test_kernel_designs_nan_inf_and_masked_rows(design: str) -> None:
    """The module docstring's semantics, as the cpu device computes them: a NaN query row and a row that meets a
    +inf key give NaN rows (output and lse-derived gradients), a fully masked row gives 0, the others are exact."""
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((1, 2, 20, 6)) for _ in range(3))
    q[0, 0, 3, 2] = np.nan
    k[0, 1, 11, 0] = np.inf  # row i sees key 11 only when i >= 11 (causal): a +inf score makes those rows NaN
    q[0, 1, :, 0] = np.abs(q[0, 1, :, 0])
    mask = np.tril(np.ones((20, 20), bool))
    mask[7] = False  # fully masked
    outs, grads = [], []
    for dev in ("cpu", design):
        dt = float_dtype(dev)
        leaves = [vb.tensor(a, dtype=dt, device=dev, requires_grad=True) for a in (q, k, v)]
        out = F.scaled_dot_product_attention(*leaves, attn_mask=vb.tensor(mask, device=dev))
        out.sum().backward()
        outs.append(out.detach().numpy())
        grads.append([x.grad.numpy() for x in leaves])
    assert np.isnan(outs[1][0, 0, 3]).all() and np.isnan(outs[1][0, 1, 11:]).all()
    assert (outs[1][0, :, 7] == 0).all()
    np.testing.assert_allclose(outs[1], outs[0], atol=2e-5, rtol=1e-4)  # NaN where the cpu has NaN
    for g1, g0 in zip(grads[1], grads[0], strict=True):
        np.testing.assert_allclose(g1, g0, atol=2e-5, rtol=1e-4)


def test_tile_choice_respects_adapter_limits() -> None:
    """The blocked design's largest tile that fits the workgroup memory and invocation limits; the per-row kernels
    where no blocked tile fits; an error naming the head dims where nothing does."""
    from vkblas.backend.vulkan.kernels import attention as att

    for kind in ("forward", "dq", "dkv"):
        cfg = att.Config(vb.float32, 64, 64, True, None, False)
        for limit in (16384, 32768, 49152, 65536):
            for threads in (64, 256, 1024):
                got = att.choose(kind, cfg, limit, threads)
                assert got.threads <= threads and att.shared_bytes(kind, got) <= limit
                # 16 KiB (WebGPU's minimum) holds no blocked backward tile of 64-wide heads: the per-row kernels
                assert got.blocked or (limit == 16384 and kind != "forward"), (kind, limit, threads, got)
                if got.blocked:  # and no tile before it in the preference order would have fitted
                    earlier = att.BLOCK_TILES[: att.BLOCK_TILES.index((got.br, got.bc))]
                    fits = [replace(got, br=br, bc=bc) for br, bc in earlier]
                    assert not [c for c in fits if c.threads <= threads and att.shared_bytes(kind, c) <= limit]
        wide = att.Config(vb.float32, 1024, 1024, False, "bool", False)
        limit = att.shared_bytes(kind, replace(wide, br=16, bc=8))  # the smallest per-row kernel
        assert att.shared_bytes(kind, replace(wide, br=16, bc=16, blocked=True)) > limit
        rows = att.choose(kind, wide, limit, 256)
        assert not rows.blocked and (rows.br, rows.bc) == (16, 8)
        with pytest.raises(TypeError, match="head dims 1024/1024"):
            att.choose(kind, wide, 16384, 256)


def test_tile_table_entries_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    from vkblas.backend.vulkan.kernels import attention as att

    monkeypatch.setattr(att, "BLOCK_TILES", ((32, 32, 6, 4),))
    with pytest.raises(ValueError, match="32x32/6x4"):
        att.choose("forward", att.Config(vb.float32, 8, 8, False, None, False), 32768, 256)


@requires_vulkan
def test_kernel_designs_float16(design: str) -> None:
    """float16 storage, float32 arithmetic: every kernel within float16 rounding of the float64 reference."""
    torch = require_torch()
    if not vb.backend.get(design).supports(vb.float16):
        pytest.skip("this adapter has no shader-f16")
    rng = np.random.default_rng(11)
    arrays = [rng.standard_normal((1, 2, 37, 6)).astype(np.float16) for _ in range(3)]
    tq = [torch.tensor(a.astype(np.float64), requires_grad=True) for a in arrays]
    want = torch.nn.functional.scaled_dot_product_attention(*tq, is_causal=True)
    vq = [vb.tensor(a, dtype=vb.float16, device=design, requires_grad=True) for a in arrays]
    got = F.scaled_dot_product_attention(*vq, is_causal=True)
    assert got.dtype is vb.float16
    w = rng.standard_normal(tuple(want.shape)).astype(np.float16)
    want.backward(torch.tensor(w.astype(np.float64)))
    got.backward(vb.tensor(w, dtype=vb.float16, device=design))
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), atol=3e-3, rtol=1e-2)
    for a, b in zip(vq, tq, strict=True):
        np.testing.assert_allclose(a.grad.numpy().astype(np.float64), b.grad.numpy(), atol=3e-3, rtol=1e-2)
