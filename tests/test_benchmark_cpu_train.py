"""benchmarks/cpu_train.py runs the cpu backend whatever the default device is: on a machine with a GPU its
batches went to the GPU while the model stayed on the cpu (a device-mismatch error on the H100 host)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import require_torch, vulkan_available

ROOT = Path(__file__).resolve().parents[1]


def test_cpu_train_keeps_to_the_cpu_where_vulkan_is_the_default_device() -> None:
    require_torch()
    if not vulkan_available():
        pytest.skip("no Vulkan adapter: the default device is the cpu already")
    cmd = [sys.executable, str(ROOT / "benchmarks/cpu_train.py"), "--models", "mlp,cnn9216", "--batch-sizes", "4"]
    cmd += ["--steps", "1", "--warmup", "0", "--threads", "1"]
    env = {**os.environ, "VKBLAS_DEVICE": "vulkan"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.startswith(("mlp ", "cnn9216 "))]
    assert len(rows) == 2, proc.stdout
