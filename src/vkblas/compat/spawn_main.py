"""The main module of a process that a program run by ``vkblas run`` starts with ``spawn`` (DataLoader workers,
``multiprocessing``): it installs the PyTorch shim, then runs the program as ``__mp_main__``, as Python's own
``spawn`` does for a script, so that what the program defines is found when the child unpickles it.

The runner names this module as the program's ``__spec__`` and the program's path in ``$VKBLAS_RUN_SCRIPT``; the
child's ``multiprocessing`` machinery imports this module in place of the script (``sys.argv`` is the program's).
"""

from __future__ import annotations

import os
import runpy

from .hook import SCRIPT_ENV, install

if __name__ == "__mp_main__":
    install(quiet=True)
    globals().update(runpy.run_path(os.environ[SCRIPT_ENV], run_name="__mp_main__"))
