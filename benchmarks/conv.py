"""conv2d benchmark: vkblas forward / forward+backward vs PyTorch CPU and CUDA -- see vkblas.bench.conv."""

from __future__ import annotations

import sys

from vkblas.bench.conv import main

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
