"""PyTorch programs (tests/programs: our own, written in the style of nanoGPT's model/train/sample and of PyTorch's
MNIST and other examples) run unmodified with `vkblas run`, at CI sizes, on cpu and on a Vulkan device (lavapipe in
CI).

A program that stops anywhere, at a name vkblas does not have included, fails its test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import vkblas

PROGRAMS = Path(__file__).parent / "programs"
SRC = Path(__file__).resolve().parents[1] / "src"
DATA = Path(os.environ.get("VKBLAS_DATA") or Path(__file__).resolve().parents[1] / ".." / "shared" / "data")
HAS_VULKAN = any(d.startswith("vulkan") for d in vkblas.devices())
DEVICES = ["cpu", pytest.param("vulkan", marks=pytest.mark.skipif(not HAS_VULKAN, reason="no Vulkan adapter"))]
needs_mnist = pytest.mark.skipif(not (DATA / "mnist").is_dir(), reason=f"no MNIST files in {DATA}")
needs_fashion = pytest.mark.skipif(not (DATA / "fashion").is_dir(), reason=f"no Fashion-MNIST files in {DATA}")
needs_text = pytest.mark.skipif(not (DATA / "tinyshakespeare" / "input.txt").is_file(), reason="no tinyshakespeare")


def vkblas_run(script: Path, args: list[str], cwd: Path, device: str, timeout: float = 300) -> str:
    """Run ``vkblas run SCRIPT ARGS`` with vkblas's default device set to ``device``; return stdout."""
    env = {**os.environ, "PYTHONPATH": str(SRC), "VKBLAS_DEVICE": device, "VKBLAS_DATA": str(DATA)}
    env.setdefault("LP_NUM_THREADS", "0")
    done = subprocess.run(
        [sys.executable, "-m", "vkblas", "run", str(script), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return _check(done)


def _check(done: subprocess.CompletedProcess[str]) -> str:
    if done.returncode == 0:
        return done.stdout
    raise AssertionError(f"exit code {done.returncode}\n--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr}")


# ------------------------------------------------------------------------------------------------ PyTorch's MNIST
@needs_mnist
@pytest.mark.parametrize("device", DEVICES)
def test_mnist_example(device: str, tmp_path: Path) -> None:
    args = ["--epochs", "1", "--dry-run", "--subset", "128", "--test-batch-size", "64", "--save-model"]
    out = vkblas_run(PROGRAMS / "mnist" / "main.py", args, tmp_path, device)
    assert "Train Epoch: 1 [0/128 (0%)]" in out and "Test set: Average loss:" in out
    assert (tmp_path / "mnist_cnn.pt").is_file()


# ------------------------------------------------------------------------------------------------ in that style
@needs_fashion
@pytest.mark.parametrize("device", DEVICES)
def test_fashion_mnist_example(device: str, tmp_path: Path) -> None:
    args = ["--epochs", "2", "--subset", "256", "--batch-size", "32", "--test-batch-size", "128"]
    out = vkblas_run(PROGRAMS / "fashion_mnist" / "main.py", [*args, "--log-interval", "4"], tmp_path, device)
    assert "Train Epoch: 2 [" in out and "Validation set: Average loss:" in out and "lr now 0.000490" in out
    test_line = next(line for line in out.splitlines() if line.startswith("Test set:"))
    reloaded = next(line for line in out.splitlines() if line.startswith("Reloaded model:"))
    assert test_line.split(":", 1)[1] == reloaded.split(":", 1)[1]
    assert (tmp_path / "fashion_cnn.pt").read_bytes()[8:9] == b"{"  # a safetensors file


@pytest.mark.parametrize("device", DEVICES)
def test_regression_example_with_workers_amp_and_resume(device: str, tmp_path: Path) -> None:
    script = PROGRAMS / "regression" / "main.py"
    args = ["--samples", "512", "--amp", "--compile"]
    out = vkblas_run(script, [*args, "--epochs", "2"], tmp_path, device)
    assert "epoch 2: train loss" in out and "validation loss" in out
    resumed = vkblas_run(script, [*args, "--epochs", "3", "--resume"], tmp_path, device)
    assert "resumed from epoch 2" in resumed and "epoch 3: train loss" in resumed and "epoch 1:" not in resumed


def test_regression_example_with_reduce_on_plateau(tmp_path: Path) -> None:
    out = vkblas_run(
        PROGRAMS / "regression" / "main.py",
        ["--samples", "512", "--scheduler", "plateau", "--workers", "0"],
        tmp_path,
        "cpu",
    )
    assert "epoch 4: train loss" in out


# ------------------------------------------------------------------------------------------------ nanoGPT
def _nanogpt(tmp_path: Path) -> Path:
    """A copy of the nanoGPT-style program folder, with the Shakespeare text prepared by its prepare.py."""
    work = tmp_path / "nanogpt"
    shutil.copytree(PROGRAMS / "nanogpt", work, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(DATA / "tinyshakespeare" / "input.txt", work / "data" / "shakespeare_char" / "input.txt")
    out = vkblas_run(work / "data" / "shakespeare_char" / "prepare.py", [], work, "cpu")
    assert "vocab size: 65" in out and "train has 1,003,854 tokens" in out
    return work


TINY_GPT = [
    "config/train_shakespeare_char.py",
    "--eval_iters=2",
    "--max_iters=4",
    "--eval_interval=2",
    "--log_interval=1",
    "--batch_size=4",
    "--block_size=32",
    "--n_layer=2",
    "--n_head=2",
    "--n_embd=32",
    "--always_save_checkpoint=True",
    "--out_dir=out",
]


@needs_text
def test_nanogpt_prepare(tmp_path: Path) -> None:
    work = _nanogpt(tmp_path)
    assert (work / "data" / "shakespeare_char" / "train.bin").stat().st_size == 2 * 1_003_854


@needs_text
@pytest.mark.parametrize("device", DEVICES)
def test_nanogpt_train_then_sample(device: str, tmp_path: Path) -> None:
    work = _nanogpt(tmp_path)
    dev = "cpu" if device == "cpu" else "cuda"
    out = vkblas_run(work / "train.py", [*TINY_GPT, f"--device={dev}", "--compile=True"], work, device)
    assert "step 0: train loss" in out and "step 4: train loss" in out and "saving checkpoint to out" in out
    text = vkblas_run(
        work / "sample.py", ["--out_dir=out", f"--device={dev}", "--num_samples=2", "--max_new_tokens=20"], work, device
    )
    assert text.count("---------------") == 2
