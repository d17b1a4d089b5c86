"""The pieces of the local runner that need no worker processes: shared-memory transport (the seqlock board
against a concurrent writer, mailboxes), the sample stream, DiLoCo's round closing, the flat host optimizer and
the sharded step, the fast update check, the shares of graph-captured workers."""

from __future__ import annotations

import multiprocessing as mp
import time

import numpy as np
import pytest

from vkblas import optim
from vkblas.creation import tensor
from vkblas.data import DataLoader, TensorDataset
from vkblas.distributed import RejectedUpdateError
from vkblas.distributed.codec import encode
from vkblas.distributed.local import LocalConfig
from vkblas.distributed.local.asynchronous import AsyncHolder
from vkblas.distributed.local.checks import flat_update
from vkblas.distributed.local.diloco import DilocoHolder, RoundState
from vkblas.distributed.local.faults import Fault, FaultPlan
from vkblas.distributed.local.flatopt import FlatOptimizer, state_keys, weighted_sum
from vkblas.distributed.local.handle import WorkerHandle
from vkblas.distributed.local.protocol import Grad, Pseudo, Stats
from vkblas.distributed.local.sharded import shard_bounds, state_spec, step_shard
from vkblas.distributed.local.shares import plan_shares, quantise_one
from vkblas.distributed.local.stream import EpochOrder, SampleStream, Segment
from vkblas.distributed.local.sync import cut
from vkblas.distributed.local.transport import (
    BlockHandle,
    FlatLayout,
    SeqlockBoard,
    SharedArrays,
    block_prefix,
    pack,
    unpack,
)
from vkblas.distributed.sizing import StepTimeModel
from vkblas.training import TrainConfig
from vkblas.training.fit import make_optimizer

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True)
def no_leftovers():
    yield
    assert not mp.active_children()
    from pathlib import Path

    assert not [p.name for p in Path("/dev/shm").glob(f"{block_prefix()}*")] if Path("/dev/shm").is_dir() else True


# ---------------------------------------------------------------------------------------------- transport
def _publish_constants(handle: BlockHandle, count: int) -> None:
    """Writer process: publish vectors filled with their version, as fast as it can."""
    block = SharedArrays.attach(handle)
    board = SeqlockBoard(block)
    flat = np.empty(block["data"].shape[1], np.float32)
    for v in range(1, count + 1):
        flat.fill(v)
        board.publish(flat, v)


def test_seqlock_board_reads_are_never_torn_while_a_writer_publishes():
    board = SeqlockBoard.create(200_000)  # 0.8 MB: a copy takes long enough for the writer to overlap it
    try:
        board.publish(np.zeros(200_000, np.float32), 0)
        writer = mp.get_context("spawn").Process(target=_publish_constants, args=(board.block.handle, 3000))
        writer.start()
        out = np.empty(200_000, np.float32)
        seen, deadline = set(), time.monotonic() + 30
        while writer.is_alive() and time.monotonic() < deadline:
            version = board.read(out)
            assert out[0] == out[-1] == out.min() == out.max() == version  # one version, whole
            seen.add(version)
        writer.join(10)
        assert writer.exitcode == 0
        assert board.read(out) == 3000 and (out == 3000).all()
        assert len(seen) > 1  # the reads did overlap the writes
    finally:
        board.block.unlink()


def test_mailbox_round_trip_and_untrusted_layouts():
    box = SharedArrays.create((("bytes", (256,), "uint8"),))
    try:
        buf = box["bytes"]
        arrays = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "q": np.arange(5, dtype=np.int8)}
        layout = pack(arrays, buf)
        back = unpack(buf, layout)
        for k, v in arrays.items():
            np.testing.assert_array_equal(back[k], v)
            assert back[k].dtype == v.dtype
        with pytest.raises(ValueError, match="does not fit"):
            pack({"big": np.zeros(100, np.float32)}, buf)
        with pytest.raises(RejectedUpdateError, match="ends beyond") as e:
            unpack(buf, (("w", (100,), "float32", 0),))
        assert e.value.reason == "shape"
        with pytest.raises(RejectedUpdateError, match="declares dtype") as e:
            unpack(buf, (("w", (2,), "object", 0),))
        assert e.value.reason == "dtype"
        with pytest.raises(RejectedUpdateError, match="declares shape"):
            unpack(buf, (("w", (-1,), "float32", 0),))
    finally:
        box.unlink()


def test_flat_layout_views_and_mailbox_layout_agree():
    params = {"a": np.ones((2, 3), np.float32), "b": np.full(5, 2.0, np.float32)}
    layout = FlatLayout.of(params)
    flat = layout.flatten(params)
    assert layout.size == 11 and flat[:6].sum() == 6 and flat[6:].sum() == 10
    buf = np.zeros(64, np.uint8)
    assert pack(params, buf) == layout.mailbox  # a packed gradient is the flat vector
    np.testing.assert_array_equal(buf[:44].view(np.float32), flat)


# ---------------------------------------------------------------------------------------------- data order
def test_sample_stream_gives_vkblas_train_batches_and_reissues_returned_work():
    n, batch = 10, 4
    stream, order = SampleStream(n, epochs=2), EpochOrder(n, seed=3)
    reference = DataLoader(TensorDataset(np.arange(n)), batch, shuffle=True, seed=3, device="cpu", prefetch=0)
    for _ in range(2):
        for (want,) in reference:
            np.testing.assert_array_equal(order.indices(stream.take(batch)), want.numpy())
    assert stream.take(batch) is None and stream.exhausted
    stream.give_back([Segment(1, 2, 9)])
    assert not stream.exhausted
    assert [stream.take(4), stream.take(4)] == [Segment(1, 2, 6), Segment(1, 6, 9)]


def test_cut_makes_consecutive_shares_of_a_batch():
    assert cut(Segment(0, 0, 10), [7, 3]) == [Segment(0, 0, 7), Segment(0, 7, 10)]
    assert cut(Segment(2, 4, 5), [0, 1]) == [None, Segment(2, 4, 5)]


# ---------------------------------------------------------------------------------------------- diloco rounds
def _update() -> dict[str, np.ndarray]:
    return {"w": np.zeros(1, np.float32)}


def test_round_closes_when_complete_by_quorum_or_by_deadline():
    r = RoundState(number=0, opened_at=0.0, quorum=1.0, deadline_factor=1.5)
    r.plan("a", 100, 2.0)
    r.plan("b", 100, 2.0)
    r.report("a")
    r.add(_update(), 100, staleness=0)
    assert r.close_reason(1.0) is None  # b is due at t=2
    assert r.close_reason(2.9) is None and r.close_reason(3.0) == "deadline"  # 1.5 x the predicted 2 s
    r.report("b")
    assert r.close_reason(1.0) == "complete"

    q = RoundState(number=0, opened_at=0.0, quorum=0.5, deadline_factor=1.5)
    q.plan("a", 100, None)
    q.plan("b", 100, None)
    q.add(_update(), 60, staleness=1)  # late ones ride along but do not make the quorum
    assert q.close_reason(100.0) is None  # and no deadline while a speed is unknown
    q.report("a")
    q.add(_update(), 100, staleness=0)
    assert q.close_reason(0.1) == "quorum"


def test_round_without_the_dead_and_empty_rounds():
    r = RoundState(number=3, opened_at=0.0, quorum=1.0, deadline_factor=1.5)
    assert r.close_reason(0.0) is None  # nothing planned, nothing arrived
    r.plan("a", 10, 1.0)
    r.plan("b", 10, 1.0)
    r.report("a")  # its update was rejected: reported, but no contribution
    r.forget("b")  # died
    assert r.close_reason(0.0) == "complete" and not r.contributions  # the holder skips the step


# ---------------------------------------------------------------------------------------------- faults
def test_fault_plan_corrupts_the_due_update_only():
    plan = FaultPlan([Fault(0, "nan", at=1), Fault(0, "dtype", at=2), Fault(0, "shape", at=3)])
    u = {"w": np.ones((2, 2), np.float32)}
    outs = []
    for _ in range(4):
        outs.append(plan.corrupt(u))
        plan.before_send(lambda: 0)
    assert np.isfinite(outs[0]["w"]).all() and np.isnan(outs[1]["w"]).any()
    assert outs[2]["w"].dtype == np.float16 and outs[3]["w"].shape == (4,)
    assert np.isfinite(u["w"]).all()  # the caller's arrays are untouched
    with pytest.raises(ValueError, match="unknown fault kind"):
        Fault(0, "flood")


# ---------------------------------------------------------------------------------------------- host optimizer
def whole_steps(make, start: np.ndarray, grads: list[np.ndarray], lrs: list[float]) -> np.ndarray:
    """vkblas's optimizer (``make(params)``) stepping ``start`` on the cpu device through ``grads``."""
    whole = tensor(start, device="cpu", requires_grad=True)
    opt = make([whole])
    for g, lr in zip(grads, lrs, strict=True):
        for group in opt.param_groups:
            group["lr"] = lr
        whole.grad = tensor(g, device="cpu")
        opt.step()
    return whole.detach().numpy()


def random_run(size: int = 1001, steps: int = 6) -> tuple[np.ndarray, list[np.ndarray], list[float]]:
    rng = np.random.default_rng(0)
    start = rng.standard_normal(size).astype(np.float32)
    grads = [rng.standard_normal(size).astype(np.float32) for _ in range(steps)]
    grads[2][:5] = 0.0  # zero gradients (Adam's sqrt(v) + eps path) and tiny ones
    grads[3][:5] = 1e-30
    return start, grads, [1e-2 * (1 - k / (2 * steps)) for k in range(steps)]  # a changing lr, as the schedule


@pytest.mark.parametrize("optimizer", ["adam", "adamw", "sgd"])
def test_flat_optimizer_is_bit_identical_to_vkblas_on_the_cpu(optimizer):
    start, grads, lrs = random_run()
    want = whole_steps(lambda p: make_optimizer(optimizer, p, 1e-2), start, grads, lrs)
    opt = FlatOptimizer.training(optimizer, start.size)
    state = opt.fresh(start.copy())
    for g, lr in zip(grads, lrs, strict=True):
        kept = g.copy()
        opt.step(state, g, lr)
        np.testing.assert_array_equal(g, kept)  # the gradient is not modified
    np.testing.assert_array_equal(state.params, want)
    assert state.step == len(grads)


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_flat_outer_step_is_vkblas_nesterov_sgd(momentum):
    start, grads, lrs = random_run()
    want = whole_steps(lambda p: optim.SGD(p, lr=0.7, momentum=momentum, nesterov=momentum > 0), start, grads, lrs)
    opt = FlatOptimizer.outer(start.size, momentum)
    state = opt.fresh(start.copy())
    for g, lr in zip(grads, lrs, strict=True):
        opt.step(state, g, lr)
    np.testing.assert_array_equal(state.params, want)


def test_flat_optimizer_refuses_unknown_names():
    with pytest.raises(ValueError, match="unknown optimizer 'lamb'"):
        FlatOptimizer.training("lamb", 3)
    with pytest.raises(ValueError, match="unknown rule 'rmsprop'"):
        FlatOptimizer("rmsprop", 3)


def test_weighted_sum_is_the_weighted_mean_in_order():
    rng = np.random.default_rng(1)
    vecs = [rng.standard_normal(257).astype(np.float32) for _ in range(3)]
    out = np.empty(257, np.float32)
    weighted_sum([(v, w) for v, w in zip(vecs, (3.0, 1.0, 4.0), strict=True)], out)
    want = (3 * vecs[0].astype(np.float64) + vecs[1] + 4 * vecs[2]) / 8
    np.testing.assert_allclose(out, want, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(weighted_sum([(vecs[0], 5.0)], out), vecs[0])  # one: copied as it is
    with pytest.raises(ValueError, match="no contributions"):
        weighted_sum([], out)
    with pytest.raises(ValueError, match="positive"):
        weighted_sum([(vecs[0], 0.0)], out)


# ---------------------------------------------------------------------------------------------- sharded step
@pytest.mark.parametrize("optimizer", ["adam", "adamw", "sgd"])
def test_sharded_step_equals_the_whole_step_across_reshards(optimizer):
    """Three steps on 2 slices, then (a worker joined) three on 3 slices, each slice's state read from shared
    memory and written into the other buffer: the same bits as vkblas's optimizer stepping the whole vector."""
    start, grads, lrs = random_run()
    want = whole_steps(lambda p: make_optimizer(optimizer, p, 1e-2), start, grads, lrs)
    opt = FlatOptimizer.training(optimizer, start.size)
    block = SharedArrays.create(state_spec(start.size, opt.keys))
    try:
        block["params"][0] = start
        read, version = 0, 0
        for k, (g, lr) in enumerate(zip(grads, lrs, strict=True)):
            for shard in shard_bounds(start.size, 2 if k < 3 else 3):
                step_shard(opt, block, shard, g[shard[0] : shard[1]], version, read, 1 - read, lr)
            read, version = 1 - read, version + 1
        np.testing.assert_array_equal(block["params"][read], want)
    finally:
        block.unlink()


def test_state_keys_of_the_training_optimizers():
    assert state_keys("adam") == state_keys("adamw") == ("exp_avg", "exp_avg_sq")
    assert state_keys("sgd") == ("momentum_buffer",)
    with pytest.raises(ValueError, match="unknown optimizer"):
        state_keys("lamb")


# ---------------------------------------------------------------------------------------------- update check
@pytest.mark.parametrize("bad", ["none", "nan", "inf", "overflow"])
def test_flat_update_check_agrees_with_check_update(bad):
    """The fast path (one float32 dot) accepts exactly what check_update accepts; a sum of squares that overflows
    float32 from finite values falls back to check_update and is accepted."""
    flat = FlatLayout(("w", "b"), ((3, 4), (4,)))
    vec = np.arange(16, dtype=np.float32)
    if bad == "nan":
        vec[3] = np.nan
    elif bad == "inf":
        vec[7] = -np.inf
    elif bad == "overflow":
        vec[:] = 3e38
    buf = np.zeros(4 * 16 + 64, np.uint8)
    layout = pack(flat.views(vec), buf)
    assert layout == flat.mailbox
    if bad in ("nan", "inf"):
        with pytest.raises(RejectedUpdateError) as e:
            flat_update(buf, layout, flat, flat.mailbox)
        assert e.value.reason == "nonfinite"
        return
    got = flat_update(buf, layout, flat, flat.mailbox)
    np.testing.assert_array_equal(got, vec)
    assert np.shares_memory(got, buf)  # a view of the mailbox, no copy


def test_flat_update_check_rejects_a_foreign_layout_with_the_reason():
    flat = FlatLayout(("w",), ((3, 4),))
    buf = np.zeros(256, np.uint8)
    layout = pack({"w": np.zeros(12, np.float32)}, buf)  # flattened: the wrong shape
    with pytest.raises(RejectedUpdateError) as e:
        flat_update(buf, layout, flat, flat.mailbox)
    assert e.value.reason == "shape"


# ---------------------------------------------------------------------------------------------- late and bad
class FakeConn:
    """What the holders send a worker, kept (no process)."""

    def __init__(self) -> None:
        self.sent: list = []

    def send(self, msg) -> None:
        self.sent.append(msg)


def holder_run(tmp_path, algorithm: str, holder_class, workers: int = 2, **options):
    """A holder of ``algorithm`` over a tiny flat model (no data, no processes) and fake workers with mailboxes."""
    train = TrainConfig(epochs=1, limit=64, batch_size=16, out=str(tmp_path), progress=False)
    cfg = LocalConfig(train, ("cpu",) * workers, algorithm, **options)
    flat = FlatLayout(("w", "b"), ((3, 4), (4,)))
    holder = holder_class(cfg, flat, 64, np.zeros(flat.size, np.float32))
    handles = []
    for i in range(workers):
        box = SharedArrays.create((("bytes", (4 * flat.size + 4096,), "uint8"),))
        handles.append(WorkerHandle(f"w{i}", i, "cpu", None, FakeConn(), [box], 1))
    return holder, flat, handles


def release(holder, handles) -> None:
    for b in [*holder.blocks, *(box for h in handles for box in h.mailboxes)]:
        b.close()
        b.unlink()


def result_fields(segment: Segment, layout) -> dict:
    return dict(
        epoch=segment.epoch,
        samples=segment.size,
        steps=1,
        loss_sum=1.0,
        correct=0.0,
        compute_s=1e-3,
        layout=layout,
        stats=Stats(1.0, 0.0, 0, 0),
    )


def test_async_checks_a_gradient_before_its_age(tmp_path):
    """A bad gradient that is also too old is rejected, by reason, not dropped as stale: what the run reports about a
    worker's gradients does not depend on how late a loaded machine made them arrive. An honest one as old is
    stale."""
    holder, flat, (w0, w1) = holder_run(tmp_path, "async", AsyncHolder, max_staleness=0)
    try:
        for w in (w0, w1):
            holder.add(w)  # each gets a batch, computed from version 0

        def send(w: WorkerHandle, vec: np.ndarray, version: int) -> None:
            work = w.conn.sent[-1]
            layout = pack(flat.views(vec), w.mailboxes[0]["bytes"])
            holder.on_message(w, Grad(**result_fields(work.segment, layout), seq=work.seq, version=version))

        send(w0, np.full(flat.size, 0.5, np.float32), 0)  # accepted: version 1
        bad = np.full(flat.size, 0.5, np.float32)
        bad[2] = np.nan
        send(w1, bad, 0)  # one version old (above the bound 0) and not finite
        send(w1, np.full(flat.size, 0.5, np.float32), 0)  # as old (nothing applied since), honest: stale
        t = holder.metrics.totals()
        assert (t["accepted"], t["rejected"], t["stale"]) == (1, 1, 1) and dict(holder.rejections) == {"nonfinite": 1}
        assert holder.version == 1 and np.isfinite(holder.params()).all()
    finally:
        release(holder, [w0, w1])


def test_diloco_checks_a_pseudo_gradient_before_its_age(tmp_path):
    """The same for DiLoCo: w0's round-0 pseudo-gradient closes round 0 (quorum 1/2); w1's, of round 0 too, comes
    a round late (above the bound 0): a bad one is rejected, an honest one would be stale."""
    options = dict(max_staleness=0, round_quorum=0.5, inner_steps=1)  # a round: one step of 8 samples each
    holder, flat, (w0, w1) = holder_run(tmp_path, "diloco", DilocoHolder, **options)
    try:
        for w in (w0, w1):
            holder.add(w)
        holder.start()  # round 0: both planned

        def send(w: WorkerHandle, vec: np.ndarray) -> None:
            work = w.conn.sent[-1]
            tensors, meta = encode(flat.views(vec), "fp32")
            layout = pack(tensors, w.mailboxes[0]["bytes"])
            holder.on_message(w, Pseudo(**result_fields(work.segment, layout), round=0, meta=meta))

        send(w0, np.full(flat.size, 0.01, np.float32))
        assert holder.model.version == 1  # closed by quorum
        bad = np.full(flat.size, 0.01, np.float32)
        bad[5] = np.inf
        send(w1, bad)
        t = holder.metrics.totals()
        assert (t["accepted"], t["rejected"], t["stale"]) == (1, 1, 0) and dict(holder.rejections) == {"nonfinite": 1}
        assert holder.round.arrivals == [("w1", "rejected", 1)]
    finally:
        release(holder, [w0, w1])


# ---------------------------------------------------------------------------------------------- shares
def measured(fixed_s: float, per_sample_s: float) -> StepTimeModel:
    m = StepTimeModel()
    for n in (16, 64, 128):
        m.observe(n, fixed_s + per_sample_s * n)
    return m


def test_graph_worker_shares_are_multiples_of_the_quantum_and_sum_to_the_batch():
    gpu, cpu = measured(2e-3, 1e-6), measured(1e-4, 5e-5)
    shares = plan_shares(512, [gpu, cpu], [32, 1], [None, None])
    # exact: ~464.7 for the gpu; 448 or 480 (multiples of 32) would unbalance the step by >20 %: 464 = 29 x 16
    assert shares == [464, 48]
    again = plan_shares(512, [gpu, cpu], [32, 1], [shares[0], None])
    assert again == shares  # the previous graph size kept while balanced
    only_graphs = plan_shares(100, [gpu, measured(2e-3, 1e-6)], [32, 32], [None, None])
    assert sum(only_graphs) == 100  # no cpu worker: one graph worker takes the remainder
    assert plan_shares(128, [StepTimeModel(), cpu], [32, 1], [None, None]) == [64, 64]  # not measured: even


@pytest.mark.parametrize(
    ("exact", "quantum", "previous", "want"), [(70, 32, None, 64), (70, 32, 96, 96), (5, 32, None, 32), (70, 1, 64, 70)]
)
def test_quantise_one(exact, quantum, previous, want):
    assert quantise_one(exact, quantum, previous) == want
