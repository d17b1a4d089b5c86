"""The backend contract: the few primitives every backend implements. Everything else is built from them in ``ops``.

A backend owns *storage* (a flat buffer of ``numel`` elements of one dtype) and runs primitives over *views* of it.
A :class:`View` is storage plus shape, strides and offset, all counted in elements; a stride of 0 broadcasts. Views
are how transposes, slices and broadcasting reach kernels without copies.

Primitives (all outputs are views the caller allocated; inputs may be any views, overlapping included):

=====================  ==============================================================================================
``elementwise``        ``out = OPS[op](*args)`` where args are views shaped like ``out`` (broadcast by strides) or
                       Python numbers; see ``backend/elementwise.py``. Casts happen on store when dtypes differ.
``reduce``             sum / prod / max / min / argmax / argmin of ``x`` over ``axes``; ``out`` has ``x``'s shape
                       with those axes removed (sum and prod of nothing: 0 and 1). argmax/argmin take one axis and
                       give int32 (first index on ties; NaN is the largest and the smallest).
``matmul``             ``out[..., m, n] = sum_k a[..., m, k] * b[..., k, n]``; equal batch shapes (broadcast by
                       strides), ``out`` contiguous.
``gather``             ``out[i][j][k] = x[i][index[i][j][k]][k]`` (for ``dim=1``; ``torch.gather`` semantics).
``scatter``            ``out[i][index[i][j][k]][k] (op)= src[i][j][k]`` in place, ``op`` one of :data:`SCATTER_OPS`:
                       ``assign`` (duplicates: one of them wins), ``sum``, ``prod``, ``amax``, ``amin``
                       (``scatter_add`` is ``scatter("sum", ...)``).
``scan``               inclusive prefix ``sum`` / ``prod`` of ``x`` along ``axis`` into ``out`` (``x``'s shape).
``sort``               ``values`` and int32 ``indices`` of ``x`` sorted along its last dim, ascending or
                       descending; stable (equal values keep their order) and NaN sorts above every number, so
                       ``indices`` are numpy's ``argsort(kind="stable")`` (PyTorch's stable sort).
``attention``          fused scaled-dot-product attention and its backward (:meth:`Backend.attention`,
                       :meth:`Backend.attention_backward`): softmax(q k^T * scale + mask) v, no T x T in memory
                       on a GPU; the cpu backend may compute it as plain matrices.
``unfold``             im2col (``torch.nn.functional.unfold``): ``x`` (N, C, H, W) -> ``out`` (N, C*kh*kw, OH*OW),
                       row ``(c, i, j)`` holds ``x[n, c, oh*sh - ph + i*dh, ow*sw - pw + j*dw]`` (``pad_value``
                       outside ``x``). ``out`` may have any strides (conv2d writes a (C*kh*kw, N, L) layout).
``fold``               col2im (``torch.nn.functional.fold``), the adjoint of ``unfold``: ``out`` (N, C, H, W) is
                       overwritten with, per pixel, the sum of the ``cols`` entries ``unfold`` read from it.
``convolution``        optional (:meth:`Backend.convolution`): conv2d's forward, input gradient and weight gradient
                       (groups 1) without im2col columns in memory; a backend without it gets ``unfold`` / ``fold``
                       and ``matmul`` from ``vkblas.ops``, in chunks of images.
``max_pool2d``         optional (:meth:`Backend.max_pool2d`, :meth:`Backend.max_pool2d_backward`): max and argmax
                       over non-overlapping windows in one pass, and the gradient put back at the argmax; a backend
                       without them gets ``unfold`` + reductions and a one-hot ``fold`` from ``vkblas.ops``.
``layer_norm``         optional (:meth:`Backend.layer_norm`, :meth:`Backend.layer_norm_backward`): rows normalised
                       in one pass each, keeping only the per-row mean and rstd for the backward; a backend
                       without them gets ``vkblas.ops.norm``'s composition of ``elementwise`` and ``reduce``.
``cross_entropy``      optional (:meth:`Backend.cross_entropy`, :meth:`Backend.cross_entropy_backward`): per row of
                       logits, the log-sum-exp and the loss at a class index in one pass, and the gradient
                       ``(softmax - onehot) * scale`` in one more; the default is ``nn.functional``'s composition.
``random``             fill ``out`` from the counter-based generator: ``uniform`` in [0, 1) or ``normal`` (0, 1),
                       from ``(seed, counter)``; the same numbers on every backend (up to float rounding).
``to_numpy`` / ``from_numpy``   the only host transfers; ``to_numpy`` is a sync point.
``check_values``       values of a view must lie in (or outside) a closed interval, or equal one allowed value:
                       indices (a loss's ``ignore_index``), probabilities, divisors; an asynchronous backend may
                       report a failure at its next sync point.
``foreach``            a short *program* of elementwise formulas run over many tensors at once (PyTorch's
                       ``_foreach`` / multi-tensor apply; the optimizers' update of every parameter): a default
                       built from ``elementwise`` is given; a GPU backend fuses it into one dispatch per few tensors.
=====================  ==============================================================================================

Optional: **graph capture** (``vkblas.graphs``). A backend with ``can_capture = True`` records the device work issued
between ``capture_begin`` and ``capture_end`` into a :class:`Capture` and re-issues it with ``capture_replay``
(CUDA graphs' semantics); ``capture_release`` gives back the memory the capture holds and ``capture_paused`` runs
work in the middle of a capture without recording it. The layers above use only these methods.

Backends never see autograd. They raise :class:`BackendError` subclasses with messages that name the op, the
device, the shapes and the dtypes involved; they never fall back to another device.
"""

from __future__ import annotations

import math
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, NamedTuple

import numpy as np

from ..dtypes import DType

Scalar = bool | int | float
#: ``foreach``'s steps: (destination slot, elementwise op, argument slots (>= 0) or scalars (-1 - index))
ForeachProgram = tuple[tuple[int, str, tuple[int, ...]], ...]


class BackendError(RuntimeError):
    """Base of the errors a backend raises."""


class UnsupportedError(BackendError):
    """The device cannot run this op or dtype (it is never silently run elsewhere)."""


class DeviceOutOfMemoryError(BackendError, MemoryError):
    """An allocation did not fit on the device."""


class NoAdapterError(BackendError):
    """No adapter of the requested kind exists on this machine."""


class GraphCaptureError(BackendError, RuntimeError):
    """An operation that a graph cannot record was called during capture (a host read, an upload, a sync)."""


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(strides))


def numel(shape: Sequence[int]) -> int:
    return math.prod(shape)


class Storage:
    """A flat buffer owned by one backend. Subclasses hold the actual memory."""

    __slots__ = ("dtype", "numel", "version", "__weakref__")

    def __init__(self, dtype: DType, numel: int) -> None:
        self.dtype = dtype
        self.numel = numel
        #: bumped by every in-place write; autograd uses it to detect a saved tensor modified before backward
        self.version = 0


class View(NamedTuple):
    """Storage plus shape, strides and offset in elements. A NamedTuple: views are made for every op, and tuple
    construction is several times cheaper than a frozen dataclass's."""

    storage: Any
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int = 0

    @property
    def dtype(self) -> DType:
        return self.storage.dtype

    @property
    def numel(self) -> int:
        return numel(self.shape)

    def is_contiguous(self) -> bool:
        shape, strides = self.shape, self.strides
        if len(shape) == 2:  # the loop below, written out for the common ranks (every op asks)
            return (shape[1] == 1 or strides[1] == 1) and (shape[0] == 1 or strides[0] == shape[1])
        if len(shape) == 1:
            return shape[0] == 1 or strides[0] == 1
        expected = 1
        for n, s in zip(reversed(self.shape), reversed(self.strides), strict=True):
            if n != 1 and s != expected:
                return False
            expected *= n
        return True

    def is_non_overlapping(self) -> bool:
        """No two indices reach one element (sufficient test: each dim, by increasing stride, steps past the
        extent of the ones inside it), so the view can be written in parallel."""
        if 0 in self.shape:
            return True
        reach = 0
        for s, n in sorted((abs(s), n) for n, s in zip(self.shape, self.strides, strict=True) if n > 1):
            if s <= reach:
                return False
            reach += (n - 1) * s
        return True

    @staticmethod
    def of(storage: Any, shape: Sequence[int]) -> View:
        shape = tuple(shape)
        return View(storage, shape, contiguous_strides(shape), 0)


class Capture(ABC):
    """The device work a backend recorded between ``capture_begin`` and ``capture_end``, replayable by that backend
    (opaque to the layers above except for what is declared here)."""

    @property
    @abstractmethod
    def num_dispatches(self) -> int:
        """Dispatches one replay issues."""

    @abstractmethod
    def note_random(self, generator: Any, numel: int) -> None:
        """The dispatch recorded last fills ``numel`` random numbers: every replay takes fresh ``(seed, counter)``
        from ``generator`` (anything with ``take(n) -> (seed, counter)``) for it, as an eager call would."""


class Backend(ABC):
    """One kind of device. ``name`` is what users type: ``"cpu"`` or ``"vulkan"``."""

    name: str
    #: whether the graph-capture methods below are implemented (see the module docstring)
    can_capture: bool = False

    # -- description
    @abstractmethod
    def supports(self, dtype: DType) -> bool: ...

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}

    # -- memory
    @abstractmethod
    def alloc(self, numel: int, dtype: DType) -> Storage: ...

    @abstractmethod
    def from_numpy(self, array: np.ndarray, dtype: DType) -> Storage:
        """A new storage holding ``array`` (any shape; flattened in C order) converted to ``dtype``."""

    @abstractmethod
    def to_numpy(self, view: View) -> np.ndarray:
        """The view's values as a new numpy array of its shape (bool -> np.bool_). A sync point."""

    def synchronize(self) -> None:  # noqa: B027 - optional for synchronous backends
        """Wait until all recorded work has finished."""

    def empty_cache(self) -> None:  # noqa: B027 - a backend without a cache of free memory has nothing to do
        """Give cached free memory back to the driver."""

    def memory_stats(self) -> dict[str, int]:
        """Bytes of device memory: ``allocated`` (held by tensors now), ``peak_allocated`` (the most since
        ``reset_peak_memory_stats``), ``reserved`` (held by the backend, cached free buffers included). A backend
        that does not count its storages has none to report."""
        raise UnsupportedError(f"{self.name}: this backend keeps no memory statistics")

    def reset_peak_memory_stats(self) -> None:
        """Start ``peak_allocated`` again from what is allocated now."""
        raise UnsupportedError(f"{self.name}: this backend keeps no memory statistics")

    # -- compute
    @abstractmethod
    def elementwise(self, op: str, out: View, args: Sequence[View | Scalar]) -> None: ...

    @abstractmethod
    def reduce(self, op: str, out: View, x: View, axes: tuple[int, ...]) -> None: ...

    @abstractmethod
    def matmul(self, out: View, a: View, b: View) -> None: ...

    def matmul_bias(self, out: View, a: View, b: View, bias: View) -> bool:
        """Optional: ``out`` (m, n) = ``a`` (m, k) @ ``b`` (k, n) + ``bias`` (n,) added to every row, in the
        GEMM's epilogue (a linear layer as one kernel, PyTorch's addmm). Returns whether it did the work; the
        default leaves it to :meth:`matmul` and an elementwise add. The bias is added to the f32 sum before the
        one rounding to ``out``'s dtype: for f32 without split-K the bits of the composition; with split-K it
        joins the first split's partial sum; for f16 the sum is rounded once instead of twice."""
        return False

    def matmul_sum_rows(self, out: View, a: View, b: View, sums: View) -> bool:
        """Optional: ``out`` (m, n) = ``a`` (m, k) @ ``b`` (k, n) and, written by the same work, ``sums`` (m,) =
        ``a``'s row sums: a linear layer's weight and bias gradients from ``a`` = dY^T in one kernel, with no
        reduction of its own over dY. Returns whether it did the work; the default leaves it to :meth:`matmul`
        and :meth:`reduce`. The sums accumulate in f32 in another order than ``reduce``'s."""
        return False

    @abstractmethod
    def gather(self, out: View, x: View, dim: int, index: View) -> None: ...

    @abstractmethod
    def scatter(self, op: str, out: View, dim: int, index: View, src: View) -> None: ...

    def scatter_add(self, out: View, dim: int, index: View, src: View) -> None:
        self.scatter("sum", out, dim, index, src)

    @abstractmethod
    def scan(self, op: str, out: View, x: View, axis: int) -> None: ...

    @abstractmethod
    def sort(self, values: View, indices: View, x: View, descending: bool) -> None: ...

    @abstractmethod
    def random(self, out: View, distribution: str, seed: int, counter: int) -> None: ...

    @abstractmethod
    def attention(
        self,
        out: View,
        lse: View,
        rng: View,
        q: View,
        k: View,
        v: View,
        mask: View | None,
        causal: bool,
        scale: float,
        dropout_p: float,
        seed: int,
        counter: int,
    ) -> None:
        """``out = dropout(softmax(q k^T * scale + mask)) v`` over (B, H, L, E) ``q``, (B, H, S, E) ``k``,
        (B, H, S, Ev) ``v`` (any strides); ``out`` (B, H, L, Ev) has any non-overlapping strides (a model wants it
        (B, L, H, Ev) in memory), the float32 log-sum-exp ``lse`` (B, H, L) of each score row is contiguous.
        ``mask`` (B, H, L, S, any strides): bool (False masks) or of q's dtype (added; -inf masks); ``causal``
        masks ``j > i``. A fully masked row gives 0 and lse -inf. Dropout keeps element
        ``e = ((b*H + h)*L + i)*S + j`` when ``bits(e) >> 8 >= dropout_threshold(p)`` (the generator of
        ``random`` at ``(seed, counter)``), scaling kept ones by ``1 / (1 - p)``; ``rng`` (2 int32) receives
        ``(pcg(seed), counter)`` for the backward."""

    @abstractmethod
    def attention_backward(
        self,
        dq: View,
        dk: View,
        dv: View,
        q: View,
        k: View,
        v: View,
        out: View,
        dout: View,
        lse: View,
        rng: View,
        mask: View | None,
        causal: bool,
        scale: float,
        dropout_p: float,
        dmask: View | None = None,
    ) -> None:
        """The gradients (of q's, k's and v's full shapes, any non-overlapping strides) of :meth:`attention` for
        the incoming ``dout``, from its saved ``out`` (both any strides), ``lse`` and ``rng`` (the same dropout
        mask); with ``dmask`` (contiguous (B, H, L, S)), also the gradient of a float mask."""

    @abstractmethod
    def unfold(
        self,
        out: View,
        x: View,
        kernel_size: tuple[int, int],
        stride: tuple[int, int],
        padding: tuple[int, int],
        dilation: tuple[int, int],
        pad_value: float,
    ) -> None:
        """im2col: ``out[n, (c*kh + i)*kw + j, oh*OW + ow] = x[n, c, oh*sh - ph + i*dh, ow*sw - pw + j*dw]``, or
        ``pad_value`` where that lies outside ``x`` (0 for conv, -inf for max pooling). ``OH = (H + 2*ph -
        dh*(kh-1) - 1) // sh + 1`` (likewise OW); ``out`` must not overlap ``x``."""

    @abstractmethod
    def fold(
        self,
        out: View,
        cols: View,
        kernel_size: tuple[int, int],
        stride: tuple[int, int],
        padding: tuple[int, int],
        dilation: tuple[int, int],
    ) -> None:
        """col2im, the adjoint of :meth:`unfold`: ``out`` (N, C, H, W) is overwritten with, for every pixel, the
        sum of the ``cols`` (N, C*kh*kw, OH*OW) entries that ``unfold`` reads from it (0 where none does).
        Deterministic: no atomics, each output pixel gathers its own terms. ``out`` must not overlap ``cols``."""

    def convolution(
        self,
        kind: str,
        out: View,
        a: View,
        b: View,
        kernel_size: tuple[int, int],
        stride: tuple[int, int],
        padding: tuple[int, int],
        dilation: tuple[int, int],
        bias: View | None = None,
    ) -> bool:
        """Optional: one product of a 2-D convolution (groups 1, symmetric ``padding``), ``out`` contiguous:

        * ``forward``: ``out`` (N, O, OH, OW) = conv2d(``a`` = x (N, C, H, W), ``b`` = weight (O, C, kh, kw)),
          plus ``bias`` (O,) when given;
        * ``input``: ``out`` (N, C, H, W) = the input gradient from ``a`` = grad (N, O, OH, OW) and ``b`` = the
          weight (O, C, kh, kw);
        * ``weight``: ``out`` (O, C*kh*kw) = the weight gradient from ``a`` = grad (N, O, OH, OW), ``b`` = x;
          and, when ``bias`` (O,) is given, the bias gradient written into it (grad summed over N, OH, OW).

        Returns whether it did the work; the default leaves it to ``vkblas.ops``' ``unfold`` / ``matmul`` /
        ``fold`` composition. Why a primitive: the composition stores C*kh*kw values per output pixel (the
        MNIST CNN's second conv at batch 512: 340 MB), and moves them through memory twice more."""
        return False

    def max_pool2d(self, values: View, indices: View, x: View, kernel_size: tuple[int, int]) -> bool:
        """Optional: max pooling of ``x`` (N, C, H, W) over the non-overlapping windows of ``unfold`` with stride =
        kernel, no padding, no dilation (``OH = H // kh``, ``OW = W // kw``), in one pass. ``values`` (N, C, OH, OW)
        receives each window's maximum (NaN if it holds one), ``indices`` (N, C, OH, OW) int32 the position
        ``i*kw + j`` in the window of its first maximum, or of its last NaN where it holds one (PyTorch's choice).
        Returns whether it did the work; the default leaves it to ``vkblas.ops``' composition of ``unfold`` and
        reductions. Why a primitive: the composition writes the whole window tensor and reads it back four
        times (max, argmax, and the NaN rule's two passes), and on the cpu backend those passes over
        max-pooling's windows were most of a small CNN's training step."""
        return False

    def max_pool2d_backward(self, grad_input: View, grad: View, indices: View, kernel_size: tuple[int, int]) -> bool:
        """Optional, with :meth:`max_pool2d`: ``grad_input`` (N, C, H, W) is overwritten with ``grad`` (N, C, OH, OW)
        at each window's ``indices`` position and 0 everywhere else (what ``fold`` of the one-hot gradient windows
        gives: ``0 + g``, so -0 comes out +0). Returns whether it did the work; the default leaves it to the
        composition."""
        return False

    def layer_norm(
        self,
        out: View,
        mean: View | None,
        rstd: View,
        x: View,
        weight: View | None,
        bias: View | None,
        eps: float,
    ) -> bool:
        """Optional: per row ``r`` of the (R, N) ``x`` (any strides), ``mean[r]`` and ``rstd[r] = 1 / sqrt(var[r] +
        eps)`` (biased variance) into the (R,) float32 views (float64 for float64 ``x``), and ``out = (x - mean) *
        rstd * weight + bias`` (weight, bias (N,) or None: 1 and 0). ``mean=None`` is RMS normalisation: the mean is
        taken as 0 (``rstd = 1 / sqrt(mean(x^2) + eps)``). Statistics in at least float32 arithmetic. Returns whether
        it did the work; the default leaves it to ``vkblas.ops.norm``'s composition. Why a primitive: the
        composition's autograd keeps the centred and the normalised input (two tensors of ``x``'s size) and runs ~10
        dispatches forward and ~20 backward per normalisation."""
        return False

    def layer_norm_backward(
        self, dx: View, dy: View, x: View, weight: View | None, mean: View | None, rstd: View
    ) -> bool:
        """Optional, with :meth:`layer_norm`: ``dx`` (R, N) of the incoming ``dy`` (R, N) from the saved statistics:
        with ``xhat = (x - mean) * rstd`` and ``h = dy * weight``, ``dx = rstd * (h - mean(h) - xhat * mean(h *
        xhat))`` (without ``mean(h)`` for ``mean=None``). The weight's and bias's gradients are column sums, left to
        ``reduce``. Returns whether it did the work."""
        return False

    def cross_entropy(
        self,
        loss: View,
        lse: View,
        wk: View,
        x: View,
        target: View,
        weight: View | None,
        ignore_index: int,
        label_smoothing: float,
        mean: View | None = None,
    ) -> bool:
        """Optional: per row ``i`` of the (M, C) logits ``x`` (any strides; C > 0) and int32 ``target`` (M,), the
        float32 ``lse[i] = log(sum_c exp(x[i, c]))`` (NaN for a row holding NaN or +inf, or all -inf),
        ``wk[i] = keep_i * weight[t_i]`` (``keep_i`` 0 where ``t_i == ignore_index``, weight 1 when None), and
        ``loss[i] = keep_i * (a * w_t (lse_i - x[i, t_i]) + c (W lse_i - sum_c weight_c x[i, c]))`` with ``a = 1 -
        label_smoothing``, ``c = label_smoothing / C``, ``W = sum_c weight_c`` (0 for an ignored row, whatever its
        logits). The caller checks targets; a kernel must still never read outside ``x`` for a bad one. Returns
        whether it did the work; the default leaves it to ``nn.functional``'s composition (four reduction and
        elementwise passes for the log-sum-exp, a gather and an elementwise). With ``mean`` (a (2,) float32 view),
        also ``mean = (sum_i loss_i / sum_i wk_i, sum_i wk_i)`` (the ``reduction="mean"`` loss and its
        denominator, summed in float32); a backend that can do the rows but not the mean in one pass returns
        False for that call (nothing written) and the caller asks again without it."""
        return False

    def cross_entropy_backward(
        self,
        dx: View,
        scale: View,
        x: View,
        target: View,
        lse: View,
        weight: View | None,
        ignore_index: int,
        label_smoothing: float,
        den: View | None = None,
    ) -> bool:
        """Optional, with :meth:`cross_entropy`: ``dx`` (M, C) ``= s_i * (exp(x - lse_i) * (a w_t + c W) - c
        weight_c - a w_t [c == t_i])`` where ``s_i = scale[i]`` (the incoming gradient over the mean's denominator;
        stride 0 for one shared value), or ``scale[i] / den`` with the 0-d float32 ``den`` (the mean's division
        done here, in float32: the same bits as dividing first), on kept rows and 0 on ignored ones (so an
        ignored row's gradient is 0, or NaN where its softmax is). Returns whether it did the work."""
        return False

    def check_values(
        self,
        view: View,
        low: float,
        high: float,
        message: str,
        error: type[Exception] = IndexError,
        inside: bool = True,
        allow: float | None = None,
    ) -> None:
        """Raise ``error(message.format(bad=value))`` if a value of ``view`` lies outside ``[low, high]`` (NaN
        counts as outside), or, with ``inside=False``, if one lies inside it (a divisor equal to 0). A value equal
        to ``allow`` always passes (a cross-entropy target's ``ignore_index``).

        Synchronous backends check at once. An asynchronous backend may instead record the check on the device and
        raise at its next sync point, as CUDA's device-side asserts do, so a training step needs no host round
        trip; the kernels themselves never read out of bounds either way. This default reads the values back."""
        a = self.to_numpy(view)
        with np.errstate(invalid="ignore"):
            within = (a >= low) & (a <= high)
        failed = ~within if inside else within
        bad = a[failed if allow is None else failed & (a != allow)]
        if bad.size:
            raise error(message.format(bad=bad.reshape(-1)[0].item()))

    def foreach(self, program: ForeachProgram, tensors: Sequence[Sequence[View]], scalars: Sequence[Any]) -> None:
        """Run ``program`` over every entry of ``tensors``, each a list of same-shaped views (its *slots*; further
        slots are temporaries). A step ``(dst, op, args)`` sets slot ``dst`` to ``OPS[op](*args)`` elementwise, where
        an arg ``a >= 0`` is slot ``a``'s current value and ``a < 0`` is ``scalars[-1 - a]``: a Python number or a
        0-d view (a device scalar, e.g. a capturable optimizer's learning rate). Steps run in order; a slot written
        by a step is written through its view (in place). This default runs each step as one ``elementwise`` call
        per tensor (a temporary slot gets a buffer), so its numbers are those of the separate ops."""
        for views in tensors:
            if not views or not views[0].numel:
                continue
            shape = views[0].shape
            slots: list[View | None] = list(views)
            scal = [View(s.storage, shape, (0,) * len(shape), s.offset) if isinstance(s, View) else s for s in scalars]
            for dst, op, args in program:
                operands = [slots[a] if a >= 0 else scal[-1 - a] for a in args]
                while len(slots) <= dst:
                    slots.append(None)
                if slots[dst] is None:
                    slots[dst] = View.of(self.alloc(views[0].numel, views[0].dtype), shape)
                out = slots[dst]
                assert out is not None
                self.elementwise(op, out, operands)

    # -- graph capture (optional: ``can_capture``)
    def _cannot_capture(self) -> UnsupportedError:
        return UnsupportedError(f"graph capture is not supported on device '{self.name}'")

    def capture_begin(self) -> Capture:
        """Start recording every dispatch (each still runs now). Until :meth:`capture_end`, host reads, uploads and
        ``synchronize`` raise :class:`GraphCaptureError`: a replay would not repeat them."""
        raise self._cannot_capture()

    def capture_end(self) -> None:
        """Stop recording. The memory the capture binds stays reserved for it until :meth:`capture_release`."""
        raise self._cannot_capture()

    def capture_replay(self, capture: Capture) -> None:
        """Re-issue a finished capture's work (asynchronously, like every op)."""
        raise self._cannot_capture()

    def capture_release(self, capture: Capture) -> None:
        """Give back the memory a finished capture holds; the capture cannot be replayed afterwards."""
        raise self._cannot_capture()

    def capture_paused(self) -> AbstractContextManager[None]:
        """A context in which work runs eagerly and is not recorded (one-time set-up during a capture)."""
        raise self._cannot_capture()

    def capture_profile(self, capture: Capture) -> list[Any]:
        """Run a finished capture once more, timing each dispatch on the device: a list of records with
        ``kernel`` (a label), ``grid`` and ``seconds``, in recording order."""
        raise self._cannot_capture()


def window_output_size(
    hw: Sequence[int], kernel: Sequence[int], stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int]
) -> tuple[int, int]:
    """(OH, OW) of ``unfold`` / ``fold`` over a (H, W) image; ValueError if the dilated kernel does not fit."""
    out = []
    for n, k, s, p, d in zip(hw, kernel, stride, padding, dilation, strict=True):
        if k < 1 or s < 1 or d < 1 or p < 0:
            raise ValueError(
                f"kernel {tuple(kernel)}, stride {tuple(stride)}, dilation {tuple(dilation)} must be "
                f">= 1 and padding {tuple(padding)} >= 0"
            )
        span = d * (k - 1) + 1
        if n + 2 * p < span:
            raise ValueError(
                f"input of size {tuple(hw)} (padded {n + 2 * p}) is smaller than the dilated kernel {span}"
            )
        out.append((n + 2 * p - span) // s + 1)
    return out[0], out[1]


_host_cap = threading.local()


@contextmanager
def thread_cap(n: int) -> Iterator[None]:
    """Within this block, the calling thread's ops split their host loops over at most ``n`` threads (a background
    job, such as the coordinator's evaluation, that must not take the cores other work runs on). Backends that do
    not split work over host threads ignore it."""
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"thread_cap needs an int n >= 1, got {n!r}")
    previous = getattr(_host_cap, "n", None)
    _host_cap.n = n
    try:
        yield
    finally:
        _host_cap.n = previous


def host_thread_cap() -> int | None:
    """The calling thread's :func:`thread_cap`, or None outside one."""
    return getattr(_host_cap, "n", None)


REDUCE_OPS = ("sum", "prod", "max", "min", "argmax", "argmin")
SCATTER_OPS = ("assign", "sum", "prod", "amax", "amin")
SCAN_OPS = ("sum", "prod")
RANDOM_DISTRIBUTIONS = ("uniform", "normal")

# The counter-based generator every backend implements bit for bit (uint32 arithmetic, wrapping):
#   pcg(x)   = w ^ (w >> 22)  where  s = x * 747796405 + 2891336453,  w = ((s >> ((s >> 28) + 4)) ^ s) * 277803737
#   bits(i)  = pcg((counter + i) ^ pcg(seed))           for the i-th element of the output in C order
#   uniform  = (bits >> 8) * 2**-24                     in [0, 1)
#   normal   = sqrt(-2 log(u1)) * cos(2 pi u2)          u1 = ((pcg(bits) >> 8) + 1) * 2**-24,  u2 = uniform
PCG_MUL, PCG_INC, PCG_OUT = 747796405, 2891336453, 277803737


def dropout_threshold(p: float) -> int:
    """Dropout keeps an element when the 24-bit uniform integer ``bits >> 8`` is at least this (u >= p exactly,
    the same decision on every backend)."""
    return min(max(math.ceil(p * (1 << 24)), 0), 1 << 24)
