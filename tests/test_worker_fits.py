"""The join-time check of vkblas distributed join (worker/fits.py): a device that cannot hold the run's model and
the state each unit keeps refuses before leasing anything, with one clear error; one that can gets its trainer."""

from __future__ import annotations

import gc
from typing import Any

import pytest

import vkblas as vb
from conftest import requires_vulkan
from vkblas.distributed.protocol import RunInfo
from vkblas.distributed.worker.compute import Trainer
from vkblas.distributed.worker.errors import DoesNotFitError, WorkerError
from vkblas.distributed.worker.fits import check_device_holds, per_parameter_copies


def run_info(algorithm: str, dataset: str = "mnist", model: str = "mlp") -> RunInfo:
    return RunInfo(
        run_id="r",
        dataset=dataset,
        model=model,
        algorithm=algorithm,
        codec="fp32",
        block=256,
        batch_size=32,
        limit=None,
        shard_samples=1000,
        data_shards=[],
    )


def test_state_copies_per_algorithm() -> None:
    assert [per_parameter_copies(a) for a in ("sync", "async", "diloco")] == [1, 1, 3]


@pytest.mark.parametrize(
    "algorithm, dataset, model",
    [("sync", "mnist", "mlp"), ("diloco", "mnist", "mlp"), ("diloco", "shakespeare-char", "gpt-tiny")],
)
def test_a_device_that_holds_the_model_gets_its_trainer(algorithm: str, dataset: str, model: str) -> None:
    run = run_info(algorithm, dataset, model)
    trainer = check_device_holds(lambda: Trainer(run, "cpu"), run, "cpu")
    assert isinstance(trainer, Trainer) and sum(p.numel() for p in trainer.model.parameters()) > 0


@requires_vulkan
@pytest.mark.parametrize(
    "algorithm, dataset, model",
    [("async", "mnist", "mlp"), ("diloco", "mnist", "mlp"), ("diloco", "shakespeare-char", "gpt-tiny")],
)
def test_a_device_too_small_refuses_to_join(
    algorithm: str, dataset: str, model: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pool's memory is made large enough for the weights and their gradients and no more: async's check
    passes, diloco's (AdamW's moments too) refuses, naming device, model and why (an image model or a GPT)."""
    run = run_info(algorithm, dataset, model)
    pool = vb.backend.get("vulkan").pool
    gc.collect()  # earlier tests' garbage freed now, not while the trainer is measured
    before = pool.live_bytes
    trainer = Trainer(run, "vulkan")
    gc.collect()  # the construction's temporaries in reference cycles are not the model's weights
    weights = pool.live_bytes - before  # in the pool's buckets
    del trainer
    gc.collect()
    monkeypatch.setattr(pool, "_free", {})  # no cached buffer may be reused: every probe is new memory
    monkeypatch.setattr(pool, "cached_bytes", 0)
    monkeypatch.setattr(pool, "memory", pool.allocated_bytes + 2 * weights + (1 << 16))
    if algorithm == "async":  # weights and gradients fit
        assert isinstance(check_device_holds(lambda: Trainer(run, "vulkan"), run, "vulkan"), Trainer)
        return
    with pytest.raises(DoesNotFitError) as info:
        check_device_holds(lambda: Trainer(run, "vulkan"), run, "vulkan")
    msg = str(info.value)
    assert f"vulkan cannot hold the run's model {model!r} (diloco)" in msg
    assert "weights, gradients and AdamW's two moments did not fit" in msg and "bytes" in msg
    assert isinstance(info.value, WorkerError) and isinstance(info.value, RuntimeError)  # the CLI's one line


def test_other_errors_pass_through() -> None:
    def broken() -> Any:
        raise ValueError("unknown model 'x'")

    with pytest.raises(ValueError, match="unknown model"):
        check_device_holds(broken, run_info("sync"), "cpu")


def test_diloco_units_fresh_are_recomputable_kept_carry_the_adamw_state() -> None:
    """``inner_state``: with ``fresh`` every unit starts a new AdamW, so another trainer computes the same second
    unit from the lease alone (what a copy that checks it does); with ``kept`` the first unit's moments carry into
    the second, which is then a different update (DiLoCo's own way, for runs that check nothing)."""
    from types import SimpleNamespace

    import numpy as np

    from vkblas.distributed.nets import initial_params
    from vkblas.distributed.shards import UnitSamples

    run = run_info("diloco")
    rng = np.random.default_rng(0)
    x = rng.random((64, 1, 28, 28), dtype=np.float32)
    y = rng.integers(0, 10, 64).astype(np.int64)
    units = [UnitSamples([(lambda i: (x[i], y[i]), np.arange(k, k + 32))]) for k in (0, 32)]
    params = initial_params("mlp", "mnist", 0)

    def lease(state: str):  # type: ignore[no-untyped-def]
        return SimpleNamespace(kind="inner-steps", seed=1, inner_state=state, lr=1e-2, batch_size=8, codec="fp32",
                               block=256)  # fmt: skip

    def second_unit(state: str, first: bool) -> dict[str, np.ndarray]:
        trainer = Trainer(run, "cpu")
        if first:
            trainer(lease(state), params, units[0])
        return trainer(lease(state), params, units[1]).tensors

    fresh_after, fresh_alone = second_unit("fresh", True), second_unit("fresh", False)
    assert all(np.array_equal(fresh_after[k], fresh_alone[k]) for k in fresh_alone)
    kept_after, kept_alone = second_unit("kept", True), second_unit("kept", False)
    assert all(np.array_equal(kept_alone[k], fresh_alone[k]) for k in fresh_alone)  # a first unit: a new AdamW
    assert not all(np.allclose(kept_after[k], kept_alone[k]) for k in kept_alone)
