"""GEMM benchmark: vkblas fp32 / f16 vs numpy and PyTorch (CPU, cuBLAS fp32 and TF32) -- see vkblas.bench.gemm."""

from __future__ import annotations

import sys

from vkblas.bench.gemm import main

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
