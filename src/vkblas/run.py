"""``python -m vkblas.run [--device DEVICE] SCRIPT [ARGS...]``: run a PyTorch program on vkblas (the same as
``vkblas run``)."""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    from .cli import main as cli_main

    return cli_main(["run", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
