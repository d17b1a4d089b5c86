"""benchmarks/speed.py --memory at a small batch on the cpu: the CNN step measured for vkblas and PyTorch and the
table printed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import require_torch

ROOT = Path(__file__).resolve().parents[1]


def test_speed_memory_table_compares_the_engines() -> None:
    require_torch()
    cmd = [
        sys.executable,
        str(ROOT / "benchmarks/speed.py"),
        "--memory",
        "--memory-devices",
        "cpu",
        "--memory-batch",
        "8",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "cnn: batch 8" in proc.stdout and "vkblas cpu | torch cpu" in proc.stdout
    rows = {line.split("|")[0].strip(): line.split("|")[1:] for line in proc.stdout.splitlines() if "|" in line}
    assert set(rows) >= {"live after forward", "peak in forward", "peak in backward", "peak of the step"}
    assert all(float(v) > 0 for v in rows["peak of the step"])
