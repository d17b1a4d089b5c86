"""benchmarks/gpt_memory.py at a toy size on the cpu: both engines measured, the table printed, and the numbers
consistent (the graph's bytes are part of what is live after forward; PyTorch's hooks see what its nodes save)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import require_torch

ROOT = Path(__file__).resolve().parents[1]


def test_gpt_memory_compares_the_engines(tmp_path: Path) -> None:
    require_torch()
    out = tmp_path / "gpt_memory.json"
    cmd = [sys.executable, str(ROOT / "benchmarks/gpt_memory.py"), "--n-layer", "1", "--n-embd", "32", "--n-head",
           "2", "--vocab-size", "64", "--block-size", "16", "--batch", "2", "--json", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "held by the graph: total" in proc.stdout and "vkblas - PyTorch" in proc.stdout
    results = json.loads(out.read_text())["results"]
    for r in results.values():
        # (the token indices were allocated before the forward, but its nodes hold them: 1 KiB of slack)
        assert 0 < sum(r["graph"].values()) <= r["live after forward"] + 1024
        assert r["live after forward"] <= r["forward"]
        assert r["backward"] > 0 and r["baseline"] > 0
    assert sum(results["PyTorch"]["graph"].values()) == results["PyTorch"]["hooks"]
