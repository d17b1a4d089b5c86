"""Running a PyTorch program on vkblas: ``vkblas run SCRIPT [ARGS...]`` / ``python -m vkblas.run``.

The program runs as ``python SCRIPT ARGS`` would run it — ``sys.argv`` is ``[SCRIPT, *ARGS]``, ``sys.path[0]`` is
the script's directory, it is the ``__main__`` module, ``sys.exit`` sets the exit code, an uncaught exception prints
its traceback and exits with 1 — with the shim installed (:mod:`.hook`) for its run only.
"""

from __future__ import annotations

import builtins
import importlib.machinery
import os
import sys
import traceback
import types
from collections.abc import Sequence
from pathlib import Path

from .hook import SCRIPT_ENV, installed


def _exit_code(e: SystemExit) -> int:
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code
    print(e.code, file=sys.stderr)
    return 1


def run_script(script: str, args: Sequence[str] = (), device: str | None = None) -> int:
    """Run the program at ``script`` with ``args``; return its exit code. ``device`` sets ``VKBLAS_DEVICE`` for the
    run (what new tensors and ``"cuda"`` mean)."""
    path = Path(script)
    if not path.is_file():
        print(f"vkblas run: error: {script}: no such file", file=sys.stderr)
        return 2
    code = compile(path.read_bytes(), str(path), "exec")
    main = types.ModuleType("__main__")
    main.__file__ = str(path)
    main.__builtins__ = builtins  # type: ignore[attr-defined]
    # spawned children import spawn_main in place of the script (see there); the script itself has no spec
    main.__spec__ = importlib.machinery.ModuleSpec(f"{__package__}.spawn_main", None)
    saved = (sys.argv, list(sys.path), sys.modules.get("__main__"), dict(os.environ))
    sys.argv = [str(path), *args]
    sys.path[0:1] = [str(path.resolve().parent)]
    os.environ[SCRIPT_ENV] = str(path.resolve())
    if device is not None:
        os.environ["VKBLAS_DEVICE"] = device
    sys.modules["__main__"] = main
    try:
        with installed():
            exec(code, main.__dict__)
        return 0
    except SystemExit as e:
        return _exit_code(e)
    except KeyboardInterrupt:
        traceback.print_exc()
        return 130
    except BaseException as e:  # the program's error, reported as Python reports it, without the runner's frames
        traceback.print_exception(type(e), e, e.__traceback__.tb_next if e.__traceback__ else None)
        return 1
    finally:
        sys.argv, sys.path[:] = saved[0], saved[1]
        if saved[2] is not None:
            sys.modules["__main__"] = saved[2]
        os.environ.clear()
        os.environ.update(saved[3])
