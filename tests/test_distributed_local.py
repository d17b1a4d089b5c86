"""The local runner end to end, with real worker processes on this machine: sync equals single-process training;
async staleness and rejections are counted; a worker killed with SIGKILL is replaced and the run completes;
DiLoCo handles a late and a dropped worker and its codecs; every algorithm reaches single-worker accuracy; a
Vulkan worker beside a cpu worker; the CLI. Runs are small (a few thousand samples) and every test is bounded in
time; worker processes and shared memory are checked to be gone after each test."""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest

import vkblas
from conftest import requires_vulkan
from vkblas.cli import main
from vkblas.data import DataLoader
from vkblas.distributed.local import Fault, LocalConfig, run_local
from vkblas.distributed.local.sync import SyncHolder
from vkblas.distributed.local.transport import block_prefix
from vkblas.random import manual_seed
from vkblas.training import TrainConfig, load_dataset, mlp
from vkblas.training.fit import cosine_lr, make_optimizer
from vkblas.training.loop import train_epoch

DATA = Path(os.environ.get("VKBLAS_DATA") or Path(__file__).resolve().parents[1] / ".." / "shared" / "data")
pytestmark = [
    pytest.mark.skipif(not (DATA / "mnist").is_dir(), reason=f"no MNIST files in {DATA}"),
    pytest.mark.timeout(150),
]
NO_DROPOUT = {"dropout": 0.0}  # dropout draws random numbers per worker: off where runs are compared


@pytest.fixture(autouse=True)
def no_leftovers():
    yield
    assert not mp.active_children(), "worker processes left behind"
    shm = Path("/dev/shm")
    if shm.is_dir():
        assert not list(shm.glob(f"{block_prefix()}*")), "shared memory left behind"


def config(tmp_path: Path, algorithm: str, workers=("cpu", "cpu"), *, epochs=1, limit=512, batch=128, **kw):
    train = TrainConfig(
        epochs=epochs, limit=limit, batch_size=batch, out=str(tmp_path / algorithm), data=str(DATA), progress=False
    )
    kw.setdefault("threads_per_worker", 1)  # two cores, shared
    kw.setdefault("startup_timeout_s", 60)
    kw.setdefault("worker_timeout_s", 60)
    return LocalConfig(train, tuple(workers), algorithm, **kw)


def weights(metrics_dir: str) -> dict[str, np.ndarray]:
    return {k: v.numpy() for k, v in vkblas.load(Path(metrics_dir) / "model.safetensors", device="cpu").items()}


def by_name(metrics: dict) -> dict[str, dict]:
    return {w["name"]: w for w in metrics["run"]["workers"]}


# ---------------------------------------------------------------------------------------------- sync
def single_process(cfg: LocalConfig) -> dict[str, np.ndarray]:
    """``vkblas train``'s loop on one process, on the whole batch."""
    train = cfg.train
    manual_seed(train.seed)
    model = mlp(**cfg.model_options).to("cpu")
    opt = make_optimizer(train.optimizer, model.parameters(), train.learning_rate)
    data = load_dataset(train.dataset, True, train.data, train.limit)
    loader = DataLoader(data, train.batch_size, shuffle=True, seed=train.seed, device="cpu")
    for epoch in range(train.epochs):
        for group in opt.param_groups:
            group["lr"] = cosine_lr(train.learning_rate, epoch, train.epochs)
        train_epoch(model, loader, opt, vkblas.nn.CrossEntropyLoss(), show=False)
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("apply", ["replicated", "sharded", "holder"])
def test_sync_equals_single_process_training(tmp_path, apply):
    """Same seed, same batches: 2 workers with speed-proportional shares = one process on the whole batch, to
    fp32 rounding (8 Adam steps over 2 epochs, the cosine schedule included)."""
    cfg = config(tmp_path, "sync", epochs=2, sync_apply=apply, model_options=NO_DROPOUT)
    metrics = run_local(cfg)
    want, got = single_process(cfg), weights(cfg.train.out)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=0, atol=2e-5, err_msg=k)
    run = metrics["run"]
    assert run["steps"] == 8 and run["totals"]["samples"] == 1024 and run["totals"]["rejected"] == 0
    assert all(w["samples"] > 0 and 0 <= w["idle_fraction"] < 1 for w in run["workers"])


def test_sync_worker_without_a_share_falling_behind_still_applies_every_step_right(tmp_path, monkeypatch):
    """A worker that gets no share (measured too slow to help) still steps its copy of the model every step, from
    the other workers' mailboxes, which they write again two steps later. Here w0 (which exports the weights) gets
    none in steps 2-5 and is stopped (SIGSTOP: what a loaded machine may do to a process) as step 2 starts, until
    step 6 or for 1 s: the steps wait for it (it is resumed in step 2 or 3), and the weights equal single-process
    training. (Before, w1 went on alone, w0 later averaged gradients of later steps: its copy left the others'.)"""
    shares = SyncHolder.shares

    def none_for_w0(self, total, names, minimum=0):
        return [0, total] if 2 <= self.step <= 5 and names == ["w0", "w1"] else shares(self, total, names, minimum)

    monkeypatch.setattr(SyncHolder, "shares", none_for_w0)
    state: dict = {}

    def stall(runner):
        step = runner.holder.step
        if "stopped" not in state and step >= 2:
            state["pid"] = runner.worker("w0").pid
            os.kill(state["pid"], signal.SIGSTOP)
            state["stopped"], state["until"] = True, time.monotonic() + 1.0
        elif "stopped" in state and "resumed_in" not in state and (step >= 6 or time.monotonic() > state["until"]):
            os.kill(state["pid"], signal.SIGCONT)
            state["resumed_in"] = step

    cfg = config(tmp_path, "sync", limit=1024, batch=64, model_options=NO_DROPOUT)
    try:
        metrics = run_local(cfg, callback=stall)
    finally:
        if "pid" in state and "resumed_in" not in state:
            with contextlib.suppress(ProcessLookupError):
                os.kill(state["pid"], signal.SIGCONT)
    want, got = single_process(cfg), weights(cfg.train.out)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=0, atol=2e-5, err_msg=k)
    assert state["resumed_in"] in (2, 3) and metrics["run"]["steps"] == 16 and not metrics["run"]["deaths"]


# ---------------------------------------------------------------------------------------------- async
def test_async_drops_stale_gradients_and_counts_them(tmp_path):
    """max_staleness 0 and a worker that stalls for a second (while the other keeps updating): its gradient is
    dropped, counted as stale, and the staleness histogram accounts for every update."""
    cfg = config(tmp_path, "async", limit=1024, max_staleness=0)
    metrics = run_local(cfg, faults=[Fault(1, "delay", at=1, seconds=1.0)])
    t = metrics["run"]["totals"]
    assert t["stale"] >= 1 and by_name(metrics)["w1"]["stale"] >= 1
    assert sum(t["staleness_histogram"].values()) == t["accepted"] + t["stale"]
    assert t["accepted"] >= 1 and t["samples"] == metrics["run"]["processed_samples"] == 1024
    assert metrics["run"]["updates"] == t["accepted"]


@pytest.mark.parametrize("algorithm", ["sync", "async"])
def test_bad_gradients_are_rejected_counted_and_never_applied(tmp_path, algorithm):
    """w1-w4 each send one bad gradient, their first, which every worker sends whatever the machine's load: a sync
    run's first step gives every worker a share (no worker has been measured yet), an async run gives every worker
    a batch at the start, and a bad gradient is rejected however late it arrives. (A worker's later updates are
    not sure to happen: a sync worker measured as too slow gets no share, an async one may find the data used up.)
    w0's gradients are good: the run trains on them, never on the bad ones, and nobody is dropped."""
    faults = [Fault(i, kind, at=0) for i, kind in enumerate(("nan", "shape", "dtype", "inf"), start=1)]
    metrics = run_local(config(tmp_path, algorithm, ("cpu",) * 5, limit=1024), faults=faults)
    run = metrics["run"]
    workers = by_name(metrics)
    assert [workers[f"w{i}"]["rejected"] for i in range(5)] == [0, 1, 1, 1, 1] and run["totals"]["rejected"] == 4
    assert run["rejected_by_reason"] == {"nonfinite": 2, "shape": 1, "dtype": 1}
    assert run["totals"]["accepted"] >= 1 and all(w["alive"] for w in workers.values()) and not run["deaths"]
    assert all(np.isfinite(v).all() for v in weights(metrics["config"]["out"]).values())
    assert run["processed_samples"] == 1024  # rejected samples count as processed: the run goes on


@pytest.mark.parametrize("algorithm", ["async", "diloco"])
def test_batch_per_worker_gives_every_worker_the_whole_batch(tmp_path, algorithm):
    """Two workers share 2 x 64 samples a step by speed (~64 each, not ~32): half the updates of shared batches
    (async: one per step; diloco: one per 2 inner steps), all data seen once."""
    steps = 2 if algorithm == "diloco" else 1
    options = {"inner_steps": 2, "outer_momentum": 0.5} if algorithm == "diloco" else {}
    cfg = config(tmp_path, algorithm, limit=1024, batch=64, batch_per_worker=True, **options)
    metrics = run_local(cfg)
    run = metrics["run"]
    t = run["totals"]
    updates = t["accepted"] + t["stale"] + t["rejected"]
    assert 1024 // (64 * steps) <= updates <= 1024 // (64 * steps) + 3  # shares of 64 would give twice as many
    assert run["processed_samples"] == 1024 and metrics["distributed"]["batch_per_worker"] is True


def test_batch_per_worker_is_refused_for_sync(tmp_path):
    with pytest.raises(ValueError, match="batch_per_worker is for async and diloco"):
        config(tmp_path, "sync", batch_per_worker=True)


# ---------------------------------------------------------------------------------------------- faults
@pytest.mark.parametrize("algorithm", ["sync", "async", "diloco"])
def test_kill_9_mid_run_is_noticed_the_run_completes_and_a_replacement_joins(tmp_path, algorithm):
    state: dict = {}

    def chaos(runner):
        if "killed_at" not in state and runner.processed >= 256:
            os.kill(runner.worker("w1").pid, signal.SIGKILL)
            state["killed_at"] = time.monotonic()
        elif "killed_at" in state and runner.deaths and "joined" not in state:
            state["noticed_s"] = runner.deaths[0]["noticed_at"] - state["killed_at"]
            state["joined"] = runner.add_worker("cpu")
        if "killed_at" in state and not ("joined" in state and runner.worker(state["joined"]).ready):
            time.sleep(0.5)  # hold the monitor loop (so the training) back until the replacement has started

    options = {"inner_steps": 2, "outer_momentum": 0.5} if algorithm == "diloco" else {}
    metrics = run_local(config(tmp_path, algorithm, epochs=2, limit=1024, batch=32, **options), callback=chaos)
    run = metrics["run"]
    assert state["joined"] == "w2" and state["noticed_s"] < 10  # seen through its sentinel, not a long poll
    assert [(d["name"], d["exitcode"]) for d in run["deaths"]] == [("w1", -signal.SIGKILL)]
    workers = by_name(metrics)
    assert not workers["w1"]["alive"] and workers["w2"]["alive"] and workers["w2"]["samples"] > 0
    assert run["processed_samples"] == 2048 and len(metrics["epochs"]) == 2
    assert metrics["test_accuracy"] > 0.5


def test_sync_worker_killing_itself_mid_step_gives_its_share_to_the_other(tmp_path):
    metrics = run_local(config(tmp_path, "sync", limit=1024), faults=[Fault(1, "kill", at=2)])
    run = metrics["run"]
    assert run["replans"] == 1 and run["steps"] == 8 and run["processed_samples"] == 1024
    assert by_name(metrics)["w0"]["samples"] > 1024 // 2


# ---------------------------------------------------------------------------------------------- diloco
def test_diloco_applies_a_late_pseudo_gradient_scaled_and_drops_a_too_late_one(tmp_path):
    """Three workers, quorum 1/3: rounds close without the two held back. w1 sends its round-0 pseudo-gradient
    once version 1 exists (1-3 rounds late: applied, scaled); w2 once version 5 exists (above the bound 3:
    dropped). The bound leaves w1 two rounds of slack: on a loaded machine w0 may close rounds on its own while w1
    is still sending (with a bound of 2 and w1 one round slower, its update was dropped)."""
    options = dict(inner_steps=6, round_quorum=0.3, max_staleness=3, outer_momentum=0.5)
    cfg = config(tmp_path, "diloco", ("cpu",) * 3, limit=3072, batch=96, **options)
    faults = [Fault(1, "hold", at=0, version=1), Fault(2, "hold", at=0, version=5)]
    metrics = run_local(cfg, faults=faults)
    run = metrics["run"]
    arrivals = [(name, outcome, s) for r in run["round_log"] for name, outcome, s in r["arrivals"]]
    first = {name: (outcome, s) for name, outcome, s in reversed(arrivals)}  # each worker's first arrival
    assert first["w0"] == ("accepted", 0)
    assert first["w1"][0] == "accepted" and first["w1"][1] in (1, 2, 3)  # applied, scaled by 1 / (1 + s)
    assert first["w2"][0] == "stale" and first["w2"][1] >= 5  # dropped: above the bound
    assert run["rounds_closed_by"]["late_contributions"] >= 1 and by_name(metrics)["w2"]["stale"] >= 1
    assert run["processed_samples"] == 3072 and run["rounds"] >= 5


def test_diloco_int8_codec_with_error_feedback_sends_about_a_quarter_of_the_bytes(tmp_path):
    options = dict(inner_steps=4, outer_momentum=0.5, codec="int8", codec_block=64, error_feedback=True)
    cfg = config(tmp_path, "diloco", epochs=2, limit=1024, **options)
    metrics = run_local(cfg)
    sizes = [p.numel() for p in mlp().parameters()]
    per_update = sum(n + 4 * -(-n // 64) for n in sizes)  # int8 values + one float32 scale per 64
    for w in metrics["run"]["workers"]:
        updates = w["accepted"] + w["stale"] + w["rejected"]
        assert updates >= 1 and w["bytes_sent"] == updates * per_update
    assert per_update < sum(sizes) * 4 / 3.7  # vs fp32
    assert metrics["run"]["codec"] == "int8" and metrics["test_accuracy"] > 0.6


# ---------------------------------------------------------------------------------------------- accuracy
ACCURACY_RUN = dict(epochs=10, limit=4000, batch=64, model_options=NO_DROPOUT)


@pytest.fixture(scope="module")
def single_worker_accuracy(tmp_path_factory) -> float:
    cfg = config(tmp_path_factory.mktemp("single"), "sync", ("cpu",), **ACCURACY_RUN)
    return run_local(cfg)["test_accuracy"]


@pytest.mark.timeout(300)  # the first also runs the single-worker reference (the module's fixture) in its time
@pytest.mark.parametrize(
    "algorithm, options",
    [
        ("sync", {}),
        ("async", {}),
        # the published outer momentum 0.9 needs far more rounds than this run has (~23): 0.5 here
        ("diloco", {"inner_steps": 10, "outer_lr": 0.7, "outer_momentum": 0.5}),
    ],
)
def test_two_workers_reach_single_worker_accuracy(tmp_path, single_worker_accuracy, algorithm, options):
    """Reaching the single worker's accuracy: no more than 0.5 points below it (asynchronous and DiLoCo runs often end
    a little above it; the runs are trained to their plateau so that timing noise stays well inside the margin)."""
    metrics = run_local(config(tmp_path, algorithm, **ACCURACY_RUN, **options))
    assert metrics["test_accuracy"] >= single_worker_accuracy - 0.005, (
        f"{algorithm}: {100 * metrics['test_accuracy']:.2f}% vs single worker {100 * single_worker_accuracy:.2f}%"
    )


# ---------------------------------------------------------------------------------------------- devices, CLI
@requires_vulkan
def test_vulkan_worker_beside_a_cpu_worker(tmp_path):
    metrics = run_local(config(tmp_path, "sync", ("vulkan", "cpu"), limit=256, batch=64, worker_timeout_s=120))
    workers = metrics["run"]["workers"]
    assert [w["device"] for w in workers] == ["vulkan", "cpu"] and all(w["samples"] > 0 for w in workers)
    assert all(np.isfinite(v).all() for v in weights(metrics["config"]["out"]).values())


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as e:
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_trains_on_workers(tmp_path, capsys):
    out = tmp_path / "cli"
    args = ["train", "mnist", "--workers", "2", "--algorithm", "async", "--max-staleness", "3", "--epochs", "1"]
    code, stdout, err = cli(
        capsys, *args, "--limit", "512", "--threads-per-worker", "1", "--data", str(DATA), "--out", str(out), "--quiet"
    )
    assert code == 0, err
    assert "with async on" in stdout and "updates accepted/stale/rejected" in stdout
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["distributed"]["max_staleness"] == 3 and len(metrics["run"]["workers"]) == 2
    assert (out / "curves.png").is_file() and (out / "model.safetensors").is_file()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--workers", "0"], "expected at least one worker"),
        (["--workers", "cpu,tpu"], "--workers 'cpu,tpu': unknown device 'tpu'"),
        (["--algorithm", "async"], "--algorithm need(s) --workers"),
        (["--workers", "2", "--device", "cpu"], "--device and --workers exclude each other"),
        (["--workers", "2", "--max-staleness", "-1"], "--max-staleness: expected an integer >= 0"),
        (["--workers", "2", "--round-quorum", "0"], "--round-quorum: expected a number in (0, 1]"),
        (["--workers", "2", "--algorithm", "gossip"], "invalid choice: 'gossip'"),
    ],
)
def test_cli_bad_worker_arguments_are_one_line_and_exit_2(capsys, argv, message):
    code, out, err = cli(capsys, "train", "mnist", *argv)
    assert code == 2 and out == "" and err.count("\n") == 1 and message in err
