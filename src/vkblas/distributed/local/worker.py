"""The body of a worker process: set up (data, model on its device, shared memory), say Hello, then run the
algorithm's loop until the runner says Stop. An exception is reported to the runner as ``Failed`` (with its
traceback) before the process exits with status 1; a vanished runner ends the process quietly."""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
import traceback
from typing import Any

from tqdm import tqdm

from . import asynchronous, diloco, sync
from .context import StopWorker, WorkerContext
from .protocol import Failed, Hello, WorkerSpec

LOOPS = {"sync": sync.run_worker, "async": asynchronous.run_worker, "diloco": diloco.run_worker}


def main(spec: WorkerSpec, conn: Any) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the runner's to handle: it stops the workers
    faulthandler.enable()  # a crash in native code (a driver) leaves a traceback on stderr
    # tqdm (the training loop's, disabled here) would otherwise create a multiprocessing lock: a semaphore that a
    # worker killed with SIGKILL leaves to the resource tracker, which then warns about a leak
    tqdm.set_lock(threading.RLock())
    try:
        ctx = WorkerContext(spec, conn)
        conn.send(Hello(spec.name, os.getpid(), ctx.device))
        ctx.start_clock()
        LOOPS[spec.config.algorithm](ctx)
    except StopWorker:
        pass
    except (EOFError, BrokenPipeError, ConnectionResetError):
        pass  # the runner is gone
    except BaseException as e:  # reported, then the process ends
        try:
            conn.send(Failed(f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))
        except (OSError, EOFError):
            pass
        sys.exit(1)
