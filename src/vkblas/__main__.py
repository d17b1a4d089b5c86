"""``python -m vkblas``: the ``vkblas`` command."""

import sys

from .cli import main

sys.exit(main())
