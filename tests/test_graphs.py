"""vkblas.graphs: capture a training step once, replay it; replays must match eager steps."""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import vkblas as vk
from conftest import requires_vulkan
from vkblas import graphs, nn
from vkblas.backend.base import GraphCaptureError
from vkblas.bench.copy import device_copy

pytestmark = [requires_vulkan, pytest.mark.vulkan]
DEV = "vulkan"
BATCH, STEPS = 8, 5


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Dropout(0.25), nn.Linear(16, 4))


def convnet() -> nn.Module:
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 3 * 3, 4))


def convnet2() -> nn.Module:
    """A second convolution with 4 input channels (its weight laid out channels-last per call) and 16 outputs (its
    input gradient through Vulkan's masked implicit GEMM), both inside the captured step."""
    return nn.Sequential(
        nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Conv2d(4, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(16 * 3 * 3, 4),
    )  # fmt: skip


def batches(shape: tuple[int, ...], n: int = STEPS, seed: int = 1) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [
        (rng.standard_normal((BATCH, *shape)).astype(np.float32), rng.integers(0, 4, BATCH).astype(np.int32))
        for _ in range(n)
    ]


OPTIMIZERS: dict[str, Callable[..., Any]] = {
    "adam": lambda ps, c: vk.optim.Adam(ps, lr=1e-2, capturable=c),
    "adamw": lambda ps, c: vk.optim.AdamW(ps, lr=1e-2, weight_decay=0.1, capturable=c),
    "sgd": lambda ps, c: vk.optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True, capturable=c),
}


def setup(build: Callable[[], nn.Module], opt: str, capturable: bool) -> tuple[nn.Module, Any]:
    vk.manual_seed(0)
    model = build().to(DEV)
    return model, OPTIMIZERS[opt](model.parameters(), capturable)


def step(model: nn.Module, optimizer: Any, x: vk.Tensor, y: vk.Tensor) -> vk.Tensor:
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


def run_eager(
    build: Callable[[], nn.Module],
    opt: str,
    data: list,
    capturable: bool,
    schedule: Callable[[Any, int], None] | None = None,
) -> tuple[list[float], list[np.ndarray]]:
    model, optimizer = setup(build, opt, capturable)
    losses = []
    for i, (x, y) in enumerate(data):
        if schedule:
            schedule(optimizer, i)
        losses.append(step(model, optimizer, vk.tensor(x, device=DEV), vk.tensor(y, device=DEV)).item())
    return losses, [p.detach().numpy() for p in model.parameters()]


def run_graph(
    build: Callable[[], nn.Module], opt: str, data: list, schedule: Callable[[Any, int], None] | None = None
) -> tuple[list[float], list[np.ndarray], Any]:
    model, optimizer = setup(build, opt, True)
    sx, sy = vk.tensor(data[0][0], device=DEV), vk.tensor(data[0][1], device=DEV)
    if schedule:
        schedule(optimizer, 0)
    losses = [step(model, optimizer, sx, sy).item()]  # warm-up: creates the optimizer state
    g = graphs.Graph()
    for i, (x, y) in enumerate(data[1:], 1):
        sx.copy_(vk.tensor(x, device=DEV))
        sy.copy_(vk.tensor(y, device=DEV))
        if schedule:
            schedule(optimizer, i)
        if i == 1:
            with graphs.capture(g, device=DEV):
                loss = step(model, optimizer, sx, sy)
        else:
            g.replay()
        losses.append(loss.item())
    return losses, [p.detach().numpy() for p in model.parameters()], g


def assert_same(a: tuple, b: tuple, rtol: float = 1e-4, atol: float = 1e-5) -> None:
    np.testing.assert_allclose(a[0], b[0], rtol=rtol, atol=atol)
    for pa, pb in zip(a[1], b[1], strict=True):
        np.testing.assert_allclose(pa, pb, rtol=rtol, atol=atol)


@pytest.mark.parametrize("opt", list(OPTIMIZERS))
def test_replays_match_eager_steps(opt: str) -> None:
    data = batches((12,))
    graphed = run_graph(mlp, opt, data)
    assert graphed[2].num_dispatches > 12  # the whole step: forward, loss, backward and the update
    assert_same(run_eager(mlp, opt, data, capturable=True), graphed)
    assert_same(run_eager(mlp, opt, data, capturable=False), graphed)  # device bias corrections: fp32 close


@pytest.mark.parametrize("model", [convnet, convnet2], ids=["one-conv", "two-convs"])
def test_conv_pool_model_replays_match_eager(model: Callable[[], nn.Module]) -> None:
    data = batches((1, 8, 8), n=4)
    assert_same(run_eager(model, "adam", data, capturable=False), run_graph(model, "adam", data))


def test_lr_scheduler_between_replays_matches_eager() -> None:
    data = batches((12,))

    def schedule(optimizer: Any, i: int) -> None:  # what a scheduler does: write group["lr"] between steps
        for g in optimizer.param_groups:
            g["lr"] = 1e-2 * 0.5**i

    assert_same(run_eager(mlp, "adamw", data, False, schedule), run_graph(mlp, "adamw", data, schedule))


def test_step_lr_scheduler_object() -> None:
    data = batches((12,))

    def with_scheduler() -> Callable[[Any, int], None]:
        state: dict[str, Any] = {}

        def schedule(optimizer: Any, i: int) -> None:
            if i == 0:
                state["s"] = vk.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
            else:
                state["s"].step()

        return schedule

    assert_same(run_eager(mlp, "sgd", data, False, with_scheduler()), run_graph(mlp, "sgd", data, with_scheduler()))


def test_forbidden_inside_capture() -> None:
    x = vk.ones((4,), device=DEV)
    for what, body in [
        ("numpy", lambda: (x * 2).numpy()),
        ("item", lambda: x.sum().item()),
        ("upload", lambda: vk.tensor(np.ones(3, np.float32), device=DEV)),
        ("device_copy", lambda: device_copy(x._backend, x._view.storage, (x + 1)._view.storage, 16)),
        ("synchronize", lambda: x._backend.synchronize()),
    ]:
        g = graphs.Graph()
        with pytest.raises(GraphCaptureError) as err, graphs.capture(g, device=DEV):
            body()
        assert "graph capture" in str(err.value), what
        assert g.num_dispatches == 0 and not graphs.is_current_stream_capturing()
    with pytest.raises(GraphCaptureError, match="static input"), graphs.capture(graphs.Graph(), device=DEV):
        vk.tensor([1.0], device=DEV)
    with pytest.raises(RuntimeError, match="needs a Vulkan device"), graphs.capture(graphs.Graph(), device="cpu"):
        pass
    g = graphs.Graph()
    with graphs.capture(g, device=DEV):  # cpu ops inside are fine; a finished graph replays
        y = x * 2
        vk.ones((2,), device="cpu") + 1
    g.replay()
    np.testing.assert_allclose(y.numpy(), 2.0)
    with pytest.raises(RuntimeError, match="reset"), graphs.capture(g, device=DEV):
        pass


def test_optimizer_errors_inside_capture() -> None:
    data = batches((12,), n=1)
    sx, sy = vk.tensor(data[0][0], device=DEV), vk.tensor(data[0][1], device=DEV)
    model, optimizer = setup(mlp, "adam", capturable=False)
    step(model, optimizer, sx, sy)
    with pytest.raises(RuntimeError, match="capturable=True"), graphs.capture(graphs.Graph(), device=DEV):
        step(model, optimizer, sx, sy)
    model, optimizer = setup(mlp, "adam", capturable=True)
    with pytest.raises(RuntimeError, match="warm-up"), graphs.capture(graphs.Graph(), device=DEV):
        step(model, optimizer, sx, sy)


def test_pinned_buffers_are_not_reused_and_come_back_on_delete() -> None:
    data = batches((12,), n=2)
    _, _, g = run_graph(mlp, "adam", data)
    pool = g._backend.pool
    pinned = set(g._rec.buffers)
    gc.collect()
    parked = pool.pinned_bytes
    assert parked > 0  # the step's temporaries: freed, but held for the graph
    fresh = [vk.empty((n,), device=DEV) for n in (4, 16, 64, 12 * 16, 8 * 16) for _ in range(8)]
    assert not {t._view.storage.buffer for t in fresh} & pinned
    cached = pool.cached_bytes
    del g
    gc.collect()
    assert pool.pinned_bytes == 0 and pool.cached_bytes >= cached + parked


def test_out_of_range_target_in_a_replay_raises_at_next_sync() -> None:
    data = batches((12,), n=1)
    model, optimizer = setup(mlp, "sgd", capturable=True)
    sx, sy = vk.tensor(data[0][0], device=DEV), vk.tensor(data[0][1], device=DEV)
    step(model, optimizer, sx, sy)
    g = graphs.Graph()
    with graphs.capture(g, device=DEV):
        loss = step(model, optimizer, sx, sy)
    loss.item()
    sy.copy_(vk.tensor(np.full(BATCH, 7, np.int32), device=DEV))
    g.replay()
    sy.copy_(vk.tensor(data[0][1], device=DEV))  # a good replay after the bad one still reports it
    g.replay()
    with pytest.raises(IndexError, match="out of range"):
        vk.synchronize(DEV)
    g.replay()
    assert np.isfinite(loss.item())  # flags were reset by the report


def test_a_value_check_is_one_dispatch_eager_and_captured() -> None:
    """A device check ORs its failures straight into its flag slot: one dispatch, in a replay as in eager mode
    (it was a mark pass plus a reduction, and a third dispatch in a graph); failures still reach the sync point."""
    base = vk.tensor(np.array([[0, 3], [1, 2]], np.int32), device=DEV)
    backend, rt = base._backend, base._backend.rt
    idx = base.T  # a non-contiguous view

    def check() -> None:
        backend.check_values(idx._view, 0, 3, "index {bad} is bad")

    check()
    backend.synchronize()
    before = rt.dispatches
    check()
    assert rt.dispatches - before == 1
    g = graphs.Graph()
    with graphs.capture(g, device=DEV):
        check()
    assert g.num_dispatches == 1
    g.replay()
    vk.synchronize(DEV)  # every value passes
    base.copy_(vk.tensor(np.array([[0, 3], [5, 2]], np.int32), device=DEV))
    g.replay()
    with pytest.raises(IndexError, match="index 5 is bad"):
        vk.synchronize(DEV)
    check()
    with pytest.raises(IndexError, match="index 5 is bad"):
        vk.synchronize(DEV)


def test_training_loop_graph_mode_matches_eager() -> None:
    from vkblas.training.loop import GraphedStep, train_epoch

    data = batches((12,), n=4) + [(np.ones((3, 12), np.float32), np.zeros(3, np.int32))]  # a partial last batch
    results = []
    for graph in (False, True):
        model, optimizer = setup(mlp, "adam", capturable=graph)
        graphed = GraphedStep(model, optimizer, nn.CrossEntropyLoss()) if graph else None
        loader = [(vk.tensor(x, device=DEV), vk.tensor(y, device=DEV)) for x, y in data]
        for _ in range(2):  # the graph is kept across epochs
            r = train_epoch(model, loader, optimizer, nn.CrossEntropyLoss(), show=False, graphed=graphed)
        results.append(([r.loss, r.accuracy, r.samples], [p.detach().numpy() for p in model.parameters()]))
    assert_same(results[0], results[1])


def test_profile_times_every_dispatch_and_runs_the_work() -> None:
    """Graph.profile: one record per recorded dispatch, labelled by what compiled it, and the step really runs
    (the loss afterwards is the one a replay gives)."""
    vk.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 4)).to(DEV)
    opt = vk.optim.Adam(model.parameters(), lr=1e-2, capturable=True)
    (xh, yh), *_ = batches((12,), 1)
    x, y = vk.tensor(xh, device=DEV), vk.tensor(yh, device=DEV)

    def step() -> Any:
        opt.zero_grad(set_to_none=False)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    step()
    g = graphs.Graph()
    with pytest.raises(RuntimeError, match="needs a finished capture"):
        g.profile()
    with graphs.capture(g, device=DEV):
        loss = step()
    after_capture = loss.item()
    rows = g.profile()
    assert len(rows) == g.num_dispatches
    assert all(r.seconds >= 0 and len(r.grid) == 3 and min(r.grid) >= 1 for r in rows)
    labels = {r.kernel for r in rows}
    assert any(k.startswith("gemm.") for k in labels) and any(k.startswith("foreach.") for k in labels), labels
    assert "?" not in labels
    profiled = loss.item()
    assert profiled < after_capture  # one more Adam step ran on the same batch
    g.replay()
    assert loss.item() < profiled


def test_linear_on_batched_input_is_one_gemm_per_product() -> None:
    """(B, T, C) @ W.T runs as one (B*T, C) GEMM, so the weight's gradient is one GEMM with K = B*T, not B GEMMs
    whose (B, out, in) results a reduction then sums (that made a GPT step's reductions 35x PyTorch's on the H200)."""
    layer = nn.Linear(16, 8, bias=False).to(DEV)
    xh = np.random.default_rng(0).standard_normal((4, 6, 16)).astype(np.float32)
    x = vk.tensor(xh, device=DEV, requires_grad=True)
    grad = vk.ones((4, 6, 8), device=DEV)
    layer(x).backward(grad)  # warm-up: plans and autotuning outside the capture
    g = graphs.Graph()
    with graphs.capture(g, device=DEV):
        layer(x).backward(grad)
    labels = [r.kernel for r in g.profile()]
    assert not any(k.startswith("reduce.") for k in labels), labels
    assert sum(k.startswith("gemm.") for k in labels) >= 3, labels  # forward, input gradient, weight gradient
    want = np.einsum("bto,bti->oi", np.ones((4, 6, 8)), xh.astype(np.float64))
    # the capture accumulated into new .grad tensors (the graph's outputs): each replay gives warm-up + one step
    np.testing.assert_allclose(layer.weight.grad.numpy(), 2 * want, rtol=1e-5, atol=1e-4)
    dx = np.broadcast_to(layer.weight.detach().numpy().sum(0), (4, 6, 16))
    np.testing.assert_allclose(x.grad.numpy(), 2 * dx, rtol=1e-5)
