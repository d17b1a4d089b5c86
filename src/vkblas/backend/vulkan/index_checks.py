"""Index checks on the device: an out-of-range index raises ``IndexError`` at the next sync point, as CUDA's
device-side asserts do, and no op waits for the host.

A check is two dispatches: ``out_of_range`` marks the bad entries of the index, a ``max`` reduction folds them into
one int32 flag slot. Eager checks share one flags buffer of ``SLOTS`` slots; a captured graph has its own flags
buffer, and each replay ORs its step's result into the graph's slot, so a failure in any replay since the last sync
is reported. A sync point (``to_numpy``, ``synchronize``) reads the flags of everything not yet looked at, resets
them, and raises for the first failed check with the offending value read back from its index. Kernels never read
out of bounds meanwhile (gather reads 0, scatter_add skips).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ...dtypes import int32
from ..base import BackendError, View
from .memory import VulkanStorage
from .queue import Recording

if TYPE_CHECKING:
    from .backend import VulkanBackend

SLOTS = 64
Check = tuple[View, int, int, str, type[Exception]]  # index view, low, high, message, error to raise


class IndexChecks:
    """The index checks of one :class:`VulkanBackend` that no sync point has looked at yet."""

    def __init__(self, backend: VulkanBackend) -> None:
        self.backend = backend
        #: eager checks recorded since the last sync, one flag slot each in ``flags``
        self.eager: list[Check] = []
        self.flags: VulkanStorage | None = None
        #: replayed graphs whose captured checks have not been looked at yet
        self.replayed: list[Recording] = []

    @property
    def unread(self) -> bool:
        return bool(self.eager or self.replayed)

    def record(self, index: View, low: int, high: int, message: str, error: type[Exception] = IndexError) -> None:
        """Check ``low <= index < high`` on the device (inside a capture: a check every replay repeats)."""
        rec = self.backend.rt.recording
        if rec is not None:
            self._record_captured(rec, index, low, high, message, error)
            return
        if self.flags is None:
            self.flags = self.zeroed_flags()
        if len(self.eager) == SLOTS:
            self.raise_failed()
        slot = View(self.flags, (), (), len(self.eager))
        self.backend.reduce("max", slot, self._out_of_range(index, low, high), tuple(range(len(index.shape))))
        self.eager.append((index, low, high, message, error))

    def zeroed_flags(self) -> VulkanStorage:
        flags = self.backend.alloc(SLOTS, int32)
        self.backend.elementwise("copy", View.of(flags, (SLOTS,)), [0])
        return flags

    def after_replay(self, rec: Recording) -> None:
        """A replay of ``rec`` re-ran its checks: the next sync point looks at its flags."""
        if rec.checks and rec not in self.replayed:
            self.replayed.append(rec)

    def _out_of_range(self, index: View, low: int, high: int) -> View:
        """Reduced later over all axes: 1 where ``index`` is outside [low, high) (bool stored as int)."""
        bad = View.of(self.backend.alloc(index.numel, int32), index.shape)
        self.backend.elementwise("out_of_range", bad, [index, low, high])
        return bad

    def _record_captured(
        self, rec: Recording, index: View, low: int, high: int, message: str, error: type[Exception]
    ) -> None:
        slot = len(rec.checks)
        if slot == SLOTS:
            raise BackendError(
                f"check_range on {self.backend.device_name()}: more than {SLOTS} index checks in one captured graph"
            )
        be = self.backend
        step = View.of(be.alloc(1, int32), ())
        be.reduce("max", step, self._out_of_range(index, low, high), tuple(range(len(index.shape))))
        flag = View(rec.flags, (), (), slot)
        be.elementwise("flag_or", flag, [flag, step])
        rec.checks.append((index, low, high, message, error))

    def raise_failed(self) -> None:
        """Read and reset every unread flag, then raise (IndexError unless the check named another error) for the
        first failed check, if any."""
        groups: list[tuple[Any, list[Check]]] = []
        if self.eager:
            assert self.flags is not None
            groups.append((self.flags, self.eager))
            self.eager = []
        groups += [(rec.flags, rec.checks) for rec in self.replayed]
        self.replayed = []
        be = self.backend
        failed = []
        for flags, checks in groups:  # read and reset every group before raising
            raw = be.rt.read(flags.buffer, 0, 4 * len(checks))
            be.elementwise("copy", View.of(flags, (SLOTS,)), [0])
            values = np.frombuffer(raw, dtype=np.int32, count=len(checks))
            failed += [c for c, bad in zip(checks, values, strict=True) if bad]
        for index, low, high, message, error in failed[:1]:
            values = be.to_numpy(index)
            bad = values[(values < low) | (values >= high)]
            shown = int(bad.reshape(-1)[0]) if bad.size else "(changed since)"
            raise error(message.format(bad=shown) + " [found by a device-side check, reported at this sync point]")
