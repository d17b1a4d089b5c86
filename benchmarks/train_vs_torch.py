"""Training throughput and accuracy: vkblas on every device present vs PyTorch on CPU (and CUDA where present).

Same model and initial weights, same batches in the same order, same optimizer, schedule and epochs, in one run.

    python benchmarks/train_vs_torch.py --epochs 3                 # full MNIST
    python benchmarks/train_vs_torch.py --epochs 1 --limit 2000    # a short run
    python benchmarks/train_vs_torch.py --model cnn --dataset fashion-mnist --json results.json

The code lives in ``vkblas.training.compare`` (also ``vkblas bench train``); see ``--help`` for every flag.
"""

from __future__ import annotations

import sys

from vkblas.training.compare import main

if __name__ == "__main__":
    sys.exit(main())
