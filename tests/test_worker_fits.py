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
