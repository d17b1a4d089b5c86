"""benchmarks/gpt_scale.py at its tiny preset: the child runs train, the loss falls, memory and init are reported,
and the table comes out (the H200 preset is the same code with a larger configuration)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import requires_vulkan

ROOT = Path(__file__).resolve().parents[1]


@requires_vulkan
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_tiny_preset_trains_and_reports(tmp_path: Path, precision: str) -> None:
    out = tmp_path / "gpt_scale.json"
    cmd = [sys.executable, str(ROOT / "benchmarks/gpt_scale.py"), "--preset", "tiny", "--engines", "vkblas"]
    cmd += ["--checkpointing", "on", "--steps", "3", "--budget", "400", "--data", "pattern", "--json", str(out)]
    proc = subprocess.run([*cmd, "--precision", precision], capture_output=True, text=True, timeout=600,
                          env=dict(os.environ))  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    label = {"fp32": "fp32", "fp16": "fp16 mixed precision"}[precision]
    assert f"GPT training step, one GPU, {label} (" in proc.stdout
    assert ("vkblas (fp16 mixed precision)" in proc.stdout) == (precision == "fp16")  # fp16 rows say so
    (res,) = json.loads(out.read_text())["results"]
    assert res["engine"] == "vkblas" and res["checkpointing"] == "on" and res["data"] == "synthetic rule"
    assert res["precision"] == precision and (res["loss_scale"] is None) == (precision == "fp32")
    assert len(res["losses"]) == 3 and res["losses"][-1] < res["losses"][0]
    assert res["peak_bytes"] > 4 * res["params"] * 4  # at least weights, gradients and AdamW's two moments
    assert res["params"] > 3_000_000 and res["step_s"] > 0 and res["init_s"] > 0
