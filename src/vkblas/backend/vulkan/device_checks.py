"""Value checks on the device: a bad index (``IndexError``), a probability outside [0, 1] or an integer division by
zero (``RuntimeError``) raises at the next sync point, as CUDA's device-side asserts do, and no op waits for the
host.

A check is one dispatch: ``outside`` (or ``inside``) over the checked view, each failing element ORing 1 into the
check's int32 flag slot (an atomic; ``kernels/elementwise.py``'s ``flag`` variant). Eager checks share one flags
buffer of ``EAGER_SLOTS`` slots; a captured graph has its own flags buffer of ``SLOTS``, whose slots each replay ORs
into, so a failure in any replay since the last sync is reported. (A view too large for one binding takes two
passes instead: the marks into a temporary, then a ``max`` reduction into the slot.) A sync point (``to_numpy``,
``synchronize``) reads the flags of everything not yet looked at, resets them, and raises for the first failed check
with the offending value read back from its view. Kernels never read out of bounds meanwhile (gather reads 0,
scatter_add skips).

Errors leave the checks as usable as before: a failure while reading or resetting the flags (a lost batch) drops
the flags buffer, so the next check starts from a freshly zeroed one instead of stale flags.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ...dtypes import int32
from ..base import BackendError, View
from .memory import NeedsSplitting, VulkanStorage
from .queue import Recording

if TYPE_CHECKING:
    from .backend import VulkanBackend

SLOTS = 64  # checks in one captured graph
#: eager checks between two sync points; the next one reads the flags, a sync. That wait drains the device, which
#: then idles while the host records the next batch: at 64 (one cross-entropy target check per step) it cost the
#: MNIST CNN's eager training loop ~12 % of its speed on an H200 (2026-12-03). A check keeps its view's storage
#: until it is reported: a loop that never syncs holds at most this many (usually views of a dataset already on
#: the device, or one small target tensor per step)
EAGER_SLOTS = 1024


class Check(NamedTuple):
    """Every value of ``view`` must lie in ``[low, high]`` (``inside``; NaN fails) or outside it (not ``inside``),
    or equal ``allow``; otherwise ``error(message.format(bad=value))``. (A NamedTuple: one is made per checked
    index tensor.) The check keeps ``view`` until the sync point reports it: a view of the caller's tensor, not a
    masked copy, so that no buffer of the step is held past it (a held one shifts the pool's reuse order, and every
    later dispatch then binds a new combination of buffers: a bind group created per dispatch)."""

    view: View
    low: float
    high: float
    message: str
    error: type[Exception]
    inside: bool
    allow: float | None = None

    def bad_mask(self, values: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore"):
            within = (values >= self.low) & (values <= self.high)
        bad = ~within if self.inside else within
        return bad if self.allow is None else bad & (values != self.allow)


class DeviceChecks:
    """The value checks of one :class:`VulkanBackend` that no sync point has looked at yet."""

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

    def record(self, check: Check) -> None:
        """Check on the device (inside a capture: a check every replay repeats)."""
        rec = self.backend.rt.recording
        if rec is not None:
            self._record_captured(rec, check)
            return
        if len(self.eager) == EAGER_SLOTS:
            self.raise_failed()
        if self.flags is None:
            self.flags = self.zeroed_flags(EAGER_SLOTS)
        self._flag(check, self.flags, len(self.eager))
        self.eager.append(check)

    def zeroed_flags(self, slots: int = SLOTS) -> VulkanStorage:
        flags = self.backend.alloc(slots, int32)
        self.backend.elementwise("copy", View.of(flags, (slots,)), [0])
        return flags

    def after_replay(self, rec: Recording) -> None:
        """A replay of ``rec`` re-ran its checks: the next sync point looks at its flags."""
        if rec.checks and rec not in self.replayed:
            self.replayed.append(rec)

    def _flag(self, check: Check, flags: VulkanStorage, slot: int) -> None:
        """OR 1 into ``flags[slot]`` if a value of the check's view fails it."""
        v, be = check.view, self.backend
        op = ("outside" if check.inside else "inside") + ("" if check.allow is None else "_but")
        args = [v, check.low, check.high] + ([] if check.allow is None else [check.allow])
        try:
            be.flag_where(op, View(flags, v.shape, (0,) * len(v.shape), slot), args)
        except NeedsSplitting:  # a large view: its marks, then their max into the slot (flags are 0 or 1)
            bad = View.of(be.alloc(v.numel, int32), v.shape)
            be.elementwise(op, bad, args)
            step = View.of(be.alloc(1, int32), ())
            be.reduce("max", step, bad, tuple(range(len(bad.shape))))
            flag = View(flags, (), (), slot)
            be.elementwise("flag_or", flag, [flag, step])

    def _record_captured(self, rec: Recording, check: Check) -> None:
        slot = len(rec.checks)
        if slot == SLOTS:
            raise BackendError(
                f"check_values on {self.backend.device_name()}: more than {SLOTS} device checks in one captured graph"
            )
        self._flag(check, rec.flags, slot)
        rec.checks.append(check)

    def raise_failed(self) -> None:
        """Read and reset every unread flag, then raise for the first failed check (if any)."""
        groups: list[tuple[Any, list[Check]]] = []
        if self.eager:
            assert self.flags is not None
            groups.append((self.flags, self.eager))
            self.eager = []
        groups += [(rec.flags, rec.checks) for rec in self.replayed]
        self.replayed = []
        be = self.backend
        failed: list[Check] = []
        try:
            for flags, checks in groups:  # read and reset every group before raising
                raw = be.rt.read(flags.buffer, 0, 4 * len(checks))
                be.elementwise("copy", View.of(flags, (len(checks),)), [0])  # only the slots in use were set
                values = np.frombuffer(raw, dtype=np.int32, count=len(checks))
                failed += [c for c, bad in zip(checks, values, strict=True) if bad]
        except BaseException:
            self.flags = None  # unknown state: the next eager check starts from fresh zeroed flags
            raise
        for check in failed[:1]:
            values = be.to_numpy(check.view)
            bad = values[check.bad_mask(values)]
            shown = bad.reshape(-1)[0].item() if bad.size else "(changed since)"
            raise check.error(
                check.message.format(bad=shown) + " [found by a device-side check, reported at this sync point]"
            )
