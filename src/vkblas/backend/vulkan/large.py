"""Primitives on tensors larger than one storage binding (``LargeStorage``, see ``memory.py``).

A view of a large storage reaches a kernel through a *window*: the byte range the view touches, within one
segment, bound at an aligned offset, at most ``max-storage-buffer-binding-size`` long. When a view touches more
than that, the op is split into pieces that each fit, and every piece runs as an ordinary dispatch on windows:

* pointwise ops (``elementwise``, ``random``): the output is cut into boxes, halving the dim that contributes most
  to the span of an operand that does not fit; ``random`` cuts in C order so that each piece's counter is the
  C-order index of its first element;
* ``reduce``: the kept dims are cut like a pointwise op; a reduced dim that is too long is halved into two
  partial results (a small workspace) reduced again -- for argmax/argmin the partial indices are shifted by the
  half's start and the winner's index is gathered;
* ``matmul``: rows and batches of the output are cut first (the output must stay contiguous; columns go through
  a contiguous workspace), an operand whose slice is strided but small is copied compact, and only a K too long
  for any binding is halved into partial sums;
* ``gather`` / ``scatter`` (every reduction): the dense side is cut like a pointwise op; a target too long along
  ``dim`` (an embedding table) is visited in index ranges ``[lo, hi)``, each pass taking only the indices in its
  range;
* ``scan``: the other dims are cut like a pointwise op; an axis too long for a binding is halved, and the second
  half's scan then takes in the first half's last value (added or multiplied, broadcast along the axis);
* ``sort``: rows (the dims before the sorted one) are halved, a strided row is sorted through compact copies; one
  row larger than a binding (with its workspace) raises ``UnsupportedError`` naming the limit;
* ``attention`` (forward and backward): batches, then heads, are halved, each piece's dropout counter moved to
  where its elements start, so that the mask is the one the whole would draw; one batch whose strided views do
  not fit though their compact copies do (a head of the (T, H, E) layouts a model passes spans every head's rows)
  goes through compact copies; one (batch, head) larger than a binding raises ``UnsupportedError`` naming the
  limit (as does dropout on such tensors inside a graph capture: a replay re-seeds one dispatch per op);
* ``unfold`` / ``fold``: cut by images and channels (one (H, W) plane must fit in a binding).

Every piece goes back through the backend's public primitive, so a piece that fits takes the ordinary path (plan
cache, vec4 variants) and one that still does not comes back here, smaller. Nothing here runs for tensors that fit
in one binding: the backend only calls in when binding a view raised ``NeedsSplitting``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ...dtypes import float32, int32
from ..base import SCAN_OPS, UnsupportedError, View, contiguous_strides, numel
from .kernels.random import pcg_host
from .memory import LargeStorage, VulkanStorage, Window

if TYPE_CHECKING:
    from .backend import VulkanBackend

#: byte alignment of a window's offset (the most WebGPU asks for: min-storage-buffer-offset-alignment <= 256)
ALIGN = 256
Box = tuple[tuple[int, int], ...]


class WindowStorage(VulkanStorage):
    """A window of a large storage seen as a small storage: what a piece's views bind."""

    __slots__ = ()

    def __init__(self, window: Window, dtype: Any) -> None:
        self.dtype = dtype
        self.numel = window.size // dtype.itemsize
        self.version = 0
        self._pool = None  # owns nothing: the large storage keeps the buffer
        self.buffer = window  # type: ignore[assignment]


def is_large(v: Any) -> bool:
    return isinstance(v, View) and isinstance(v.storage, LargeStorage)


def span(v: View) -> tuple[int, int] | None:
    """(first, last) storage element a view touches; None when it is empty."""
    lo = hi = v.offset
    for n, s in zip(v.shape, v.strides, strict=True):
        if n == 0:
            return None
        if s >= 0:
            hi += (n - 1) * s
        else:
            lo += (n - 1) * s
    return lo, hi


def bind(v: View) -> View | None:
    """``v`` over a window of its large storage (a small storage's view as it is); None when it does not fit."""
    st = v.storage
    if not isinstance(st, LargeStorage):
        return v
    reach = span(v)
    if reach is None:
        return View(st, v.shape, v.strides, 0)  # touches nothing: never dispatched
    found = st.window(reach[0], reach[1], ALIGN)
    if found is None:
        return None
    window, start = found
    return View(WindowStorage(window, st.dtype), v.shape, v.strides, v.offset - start)


def fits(v: View) -> bool:
    return bind(v) is not None


def narrow(v: View, dim: int, start: int, stop: int) -> View:
    shape = list(v.shape)
    shape[dim] = stop - start
    return View(v.storage, tuple(shape), v.strides, v.offset + start * v.strides[dim])


def sub_view(v: View, box: Box) -> View:
    off = v.offset + sum(a * s for (a, _), s in zip(box, v.strides, strict=True))
    return View(v.storage, tuple(b - a for a, b in box), v.strides, off)


def _worst_dim(views: Sequence[View], dims: Sequence[int] | None = None) -> int | None:
    """Among the views that do not fit, the dim (of ``dims``, default all) with extent > 1 that spans the most
    bytes; None when every view fits."""
    best, where = -1, None
    for v in views:
        if fits(v):
            continue
        for d, (n, s) in enumerate(zip(v.shape, v.strides, strict=True)):
            if n > 1 and (dims is None or d in dims) and (n - 1) * abs(s) > best:
                best, where = (n - 1) * abs(s), d
    return where


def halves(n: int) -> tuple[tuple[int, int], tuple[int, int]]:
    mid = n // 2
    return (0, mid), (mid, n)


class Splitter:
    """The large-tensor paths of one :class:`VulkanBackend` (``backend.large``)."""

    def __init__(self, backend: VulkanBackend) -> None:
        self.be = backend

    def _alloc(self, shape: tuple[int, ...], dtype: Any) -> View:
        return View.of(self.be.alloc(max(1, numel(shape)), dtype), shape)

    # ---------------------------------------------------------------- staging
    # A view whose elements fit in a binding but whose span does not (strided, or across a segment boundary) is
    # copied into a compact workspace first (an input) or written through one (an output). The copy is an
    # elementwise op, which this module splits down to single elements if it must.
    def stage_in(self, v: View) -> View:
        b = bind(v)
        if b is not None:
            return b
        tmp = self._alloc(v.shape, v.dtype)
        self.be.elementwise("copy", tmp, [v])
        return tmp

    def stage_out(self, v: View, keep: bool = False) -> tuple[View, Any]:
        """(the view to write, a function to call afterwards); ``keep``: the op accumulates into ``v``."""
        b = bind(v)
        if b is not None:
            return b, lambda: None
        tmp = self.stage_in(v) if keep else self._alloc(v.shape, v.dtype)
        return tmp, lambda: self.be.elementwise("copy", v, [tmp])

    def compact_fits(self, v: View) -> bool:
        return v.numel * v.dtype.itemsize <= self.be.pool.binding

    # ---------------------------------------------------------------- pointwise
    def boxes(self, shape: tuple[int, ...], views: Sequence[View], c_order: bool = False) -> Iterator[Box]:
        """Boxes of ``shape`` over which every view (shaped like it) fits; in C order when ``c_order`` (each box
        then is a contiguous range of C-order indices: only its first dim with extent > 1 is ever cut)."""
        stack: list[Box] = [tuple((0, n) for n in shape)]
        while stack:
            box = stack.pop()
            subs = [sub_view(v, box) for v in views]
            d = _worst_dim(subs)
            if d is None:
                yield box
                continue
            if c_order:
                d = next(i for i, (a, b) in enumerate(box) if b - a > 1)
            a, b = box[d]
            if b - a <= 1:
                raise UnsupportedError("vulkan: one element of a view does not fit in a storage binding")
            mid = (a + b) // 2
            stack.append(box[:d] + ((mid, b),) + box[d + 1 :])
            stack.append(box[:d] + ((a, mid),) + box[d + 1 :])

    def elementwise(self, op: str, out: View, args: Sequence[Any]) -> None:
        views = [out] + [a for a in args if isinstance(a, View)]
        for box in self.boxes(out.shape, views):
            bound = [bind(sub_view(v, box)) for v in views]
            rest = iter(bound[1:])
            self.be.elementwise(op, bound[0], [next(rest) if isinstance(a, View) else a for a in args])

    def random(self, out: View, distribution: str, seed: int, counter: int) -> None:
        cstrides = contiguous_strides(out.shape)
        for box in self.boxes(out.shape, [out], c_order=True):
            start = sum(a * s for (a, _), s in zip(box, cstrides, strict=True))
            self.be.random(bind(sub_view(out, box)), distribution, seed, (counter + start) & 0xFFFFFFFF)

    # ---------------------------------------------------------------- reductions
    def reduce(self, op: str, out: View, x: View, axes: tuple[int, ...]) -> None:
        kept = [d for d in range(len(x.shape)) if d not in axes]
        if fits(out) and fits(x):
            self.be.reduce(op, bind(out), bind(x), axes)
            return
        d_out = _worst_dim([out])
        d_x = _worst_dim([x])
        if d_out is not None or (d_x is not None and d_x in kept):
            k = d_out if d_out is not None else kept.index(d_x)  # the out dim to halve (kept dim kept[k])
            d = kept[k]
            for a, b in halves(x.shape[d]):
                self.be.reduce(op, narrow(out, k, a, b), narrow(x, d, a, b), axes)
            return
        assert d_x is not None
        wide = [k for k, n in enumerate(out.shape) if n > 1]
        if wide and 2 * out.numel * max(x.dtype.itemsize, out.dtype.itemsize, 4) > self.be.pool.binding:
            # the halves' workspace (2, *out) would not fit either (and would be halved along its 2 forever):
            # halve a kept dim first, until two partial outputs fit in one binding
            k = max(wide, key=lambda i: out.shape[i])
            for a, b in halves(out.shape[k]):
                self.be.reduce(op, narrow(out, k, a, b), narrow(x, kept[k], a, b), axes)
            return
        self._reduce_halves(op, out, x, axes, d_x)

    def _reduce_halves(self, op: str, out: View, x: View, axes: tuple[int, ...], d: int) -> None:
        """A reduced dim ``d`` too long for a binding: reduce each half into a workspace, then the two."""
        parts = halves(x.shape[d])
        if op in ("argmax", "argmin"):
            values = self._alloc((2, *out.shape), x.dtype)
            index = self._alloc((2, *out.shape), int32)
            for i, (a, b) in enumerate(parts):
                self.be.reduce(op[3:], _row(values, i), narrow(x, d, a, b), axes)
                self.be.reduce(op, _row(index, i), narrow(x, d, a, b), axes)
            self.be.elementwise("add", _row(index, 1), [_row(index, 1), parts[1][0]])
            winner = View.of(self.be.alloc(max(1, out.numel), int32), (1, *out.shape))
            self.be.reduce(op, View(winner.storage, out.shape, contiguous_strides(out.shape), 0), values, (0,))
            self.be.gather(View(out.storage, (1, *out.shape), (0, *out.strides), out.offset), index, 0, winner)
            return
        acc = float32 if x.dtype.is_floating else x.dtype
        part = self._alloc((2, *out.shape), acc if op in ("sum", "prod") else x.dtype)
        for i, (a, b) in enumerate(parts):
            self.be.reduce(op, _row(part, i), narrow(x, d, a, b), axes)
        self.be.reduce(op, out, part, (0,))

    # ---------------------------------------------------------------- matmul
    def matmul(self, out: View, a: View, b: View) -> None:
        nb = len(out.shape) - 2
        binding = self.be.pool.binding
        if not fits(out):  # rows and batches keep out contiguous
            d = _worst_dim([out], dims=range(nb + 1))
            if d is None:
                d = nb + 1
            if d <= nb:
                for lo, hi in halves(out.shape[d]):
                    self.be.matmul(narrow(out, d, lo, hi), narrow(a, d, lo, hi), narrow(b, d, lo, hi) if d < nb else b)
                return
            self._matmul_columns(out, a, b)
            return
        operands = []
        for v, own in ((a, nb), (b, nb + 1)):  # own: the dim of v that is also an out dim (M for a, N for b)
            if fits(v):
                operands.append(v)
            elif v.numel * v.dtype.itemsize <= binding // 2:  # strided but small: a compact copy fits
                compact = self._alloc(v.shape, v.dtype)
                self.be.elementwise("copy", compact, [v])
                operands.append(compact)
            else:
                cut = [d for d in (*range(nb), own) if v.shape[d] > 1]
                if cut:
                    d = max(cut, key=lambda i: v.shape[i])
                    self._matmul_split_out(out, a, b, d if d < nb else (nb if v is a else nb + 1))
                    return
                self._matmul_split_k(out, a, b)
                return
        if out.is_contiguous():
            self.be.matmul(bind(out), bind(operands[0]), bind(operands[1]))
        else:
            tmp = self._alloc(out.shape, out.dtype)
            self.be.matmul(tmp, bind(operands[0]), bind(operands[1]))
            self.be.elementwise("copy", out, [tmp])

    def _matmul_split_out(self, out: View, a: View, b: View, d: int) -> None:
        """Halve out dim ``d`` (a batch dim, M = nb or N = nb + 1) and a / b with it."""
        nb = len(out.shape) - 2
        for lo, hi in halves(out.shape[d]):
            sa = narrow(a, d, lo, hi) if d <= nb else a
            sb = narrow(b, d, lo, hi) if d < nb or d == nb + 1 else b
            self.be.matmul(narrow(out, d, lo, hi), sa, sb)

    def _matmul_columns(self, out: View, a: View, b: View) -> None:
        self._matmul_split_out(out, a, b, len(out.shape) - 1)

    def _matmul_split_k(self, out: View, a: View, b: View) -> None:
        """K too long for any binding: two partial products, summed."""
        k = a.shape[-1]
        parts = self._alloc((2, *out.shape), out.dtype)
        for i, (lo, hi) in enumerate(halves(k)):
            self.be.matmul(_row(parts, i), narrow(a, len(a.shape) - 1, lo, hi), narrow(b, len(b.shape) - 2, lo, hi))
        self.be.elementwise("add", out, [_row(parts, 0), _row(parts, 1)])

    # ---------------------------------------------------------------- gather / scatter_add
    def index_op(self, kind: str, dense: View, target: View, dim: int, index: View, run: Any, base: int = 0) -> None:
        """``run(dense, target, index, lo, hi)`` over pieces: the dense side (gather's out, scatter_add's src) and
        the index cut together until they fit; the target visited along ``dim`` in index ranges ``[lo, hi)`` (the
        bound target starts at index lo; ``base`` is where this call's target starts in the whole one). Outside
        ``dim`` only the target's first ``index.shape[d]`` entries are ever addressed."""
        part = tuple((0, target.shape[d] if d == dim else index.shape[d]) for d in range(len(index.shape)))
        target = sub_view(target, part)
        d = _worst_dim([dense, index])
        if d is not None:
            for lo, hi in halves(index.shape[d]):
                t = narrow(target, d, lo, hi) if d != dim else target
                self.index_op(kind, narrow(dense, d, lo, hi), t, dim, narrow(index, d, lo, hi), run, base)
            return
        size, lo = target.shape[dim], 0
        while lo < size:  # the longest range from lo whose target slice fits a binding, or at least stages into one
            hi = size
            while hi - lo > 1 and not self.compact_fits(narrow(target, dim, lo, hi)):
                hi = lo + (hi - lo) // 2
            sub = narrow(target, dim, lo, hi)
            if not self.compact_fits(sub):  # one slice along dim is too big: cut the other dims
                others = [i for i in range(len(index.shape)) if i != dim and index.shape[i] > 1]
                if not others:
                    raise UnsupportedError(f"vulkan: {kind}: one element slice of the target exceeds a binding")
                c = max(others, key=lambda i: sub.shape[i])
                for a, b in halves(index.shape[c]):
                    self.index_op(
                        kind, narrow(dense, c, a, b), narrow(sub, c, a, b), dim, narrow(index, c, a, b), run, base + lo
                    )
            else:
                dense_b, done_dense = (
                    self.stage_out(dense) if kind == "gather" else (self.stage_in(dense), lambda: None)
                )
                target_b, done_target = (
                    (self.stage_in(sub), lambda: None) if kind == "gather" else self.stage_out(sub, keep=True)
                )
                run(dense_b, target_b, self.stage_in(index), base + lo, base + hi)
                done_dense()
                done_target()
            lo = hi

    # ---------------------------------------------------------------- scan
    def scan(self, op: str, out: View, x: View, axis: int) -> None:
        if fits(out) and fits(x):
            self.be.scan(op, bind(out), bind(x), axis)
            return
        d = _worst_dim([out, x])
        if d is None:
            raise UnsupportedError("vulkan: scan: one element of a view does not fit in a storage binding")
        (_, mid), (_, n) = halves(x.shape[d])
        self.be.scan(op, narrow(out, d, 0, mid), narrow(x, d, 0, mid), axis)
        second = narrow(out, d, mid, n)
        self.be.scan(op, second, narrow(x, d, mid, n), axis)
        if d == axis:  # the second half continues from the first half's last value
            strides = second.strides[:d] + (0,) + second.strides[d + 1 :]
            carry = View(out.storage, second.shape, strides, out.offset + (mid - 1) * out.strides[d])
            self.be.elementwise("add" if op == SCAN_OPS[0] else "mul", second, [second, carry])

    # ---------------------------------------------------------------- sort
    def sort(self, values: View, indices: View, x: View, descending: bool) -> None:
        """Rows halved until they fit; a strided row is sorted through compact copies. Views that all fit come
        here when the sort's workspace does not (its rows are halved too), or one row is too long: refused."""
        views = [values, indices, x]
        rows = [d for d in range(len(x.shape) - 1) if x.shape[d] > 1]
        if all(fits(v) for v in views):
            if any(is_large(v) for v in views):  # a piece that fits: run it on its windows
                self.be.sort(*(bind(v) for v in views), descending)
                return
            if not rows:
                self._row_too_long(x)
            d = max(rows, key=lambda i: x.shape[i])
        elif rows:
            d = _worst_dim(views, rows) if _worst_dim(views, rows) is not None else max(rows, key=lambda i: x.shape[i])
        else:
            if not all(self.compact_fits(v) for v in views):
                self._row_too_long(x)
            (v_b, v_done), (i_b, i_done) = self.stage_out(values), self.stage_out(indices)
            self.be.sort(v_b, i_b, self.stage_in(x), descending)
            v_done()
            i_done()
            return
        for lo, hi in halves(x.shape[d]):
            self.be.sort(narrow(values, d, lo, hi), narrow(indices, d, lo, hi), narrow(x, d, lo, hi), descending)

    def _row_too_long(self, x: View) -> None:
        n = x.shape[-1] if x.shape else 1
        raise UnsupportedError(
            f"vulkan: sort: one row of {n} {x.dtype.name} elements along the sorted dim needs more than this "
            f"adapter's storage binding limit of {self.be.pool.binding} bytes (with its workspace); sorting longer "
            "rows is not implemented"
        )

    # ---------------------------------------------------------------- attention
    def _attention_split(self, op: str, q: View, k: View, dropout_p: float) -> tuple[int, int]:
        """(the dim to halve: batch, else heads; dropout elements per index along it), or UnsupportedError."""
        b, h, n_q, _ = q.shape
        if b > 1:
            return 0, h * n_q * k.shape[2]
        if h > 1:
            return 1, n_q * k.shape[2]
        raise UnsupportedError(
            f"vulkan: {op}: one (batch, head) of query {q.shape[2:]}, key {k.shape[2:]} (and its mask) exceeds this "
            f"adapter's storage binding limit of {self.be.pool.binding} bytes; splitting a head is not implemented"
        )

    def _refuse_captured_dropout(self, op: str, dropout_p: float) -> None:
        if dropout_p > 0 and self.be.rt.recording is not None:
            raise UnsupportedError(
                f"vulkan: {op}: dropout on tensors larger than a storage binding inside a graph capture is not "
                "supported (a replay re-seeds one dispatch per op)"
            )

    def _attention_staged(
        self, q: View, outputs: Sequence[View | None], inputs: Sequence[View | None]
    ) -> tuple[list[Any], list[Any], Any] | None:
        """One batch whose every view fits a binding when compact: (the outputs, the inputs, a function to call
        after the dispatch), each a view that fits or a compact copy (outputs copied back by the function); None
        for more batches (halving them copies nothing) or a view too large even compact."""
        if q.shape[0] > 1 or not all(t is None or self.compact_fits(t) for t in (*outputs, *inputs)):
            return None
        outs = [(None, lambda: None) if t is None else self.stage_out(t) for t in outputs]
        ins = [None if t is None else self.stage_in(t) for t in inputs]
        return [o for o, _ in outs], ins, lambda: [done() for _, done in outs]

    def attention(self, outputs: tuple[View, View, View], inputs: tuple[View, ...], *args: Any) -> None:
        """``outputs`` (out, lse, rng); ``inputs`` (q, k, v, mask); ``args`` the rest of ``Backend.attention``."""
        out, lse, rng = outputs
        q, k, v, mask = inputs
        causal, scale, dropout_p, seed, counter = args
        if all(fits(t) for t in (*outputs, *inputs) if t is not None):  # a piece that fits: on its windows
            views = [None if t is None else bind(t) for t in (*outputs, *inputs)]
            self.be.attention(*views, causal, scale, dropout_p, seed, counter)
            return
        self._refuse_captured_dropout("attention", dropout_p)
        staged = self._attention_staged(q, outputs, inputs)
        if staged is not None:
            outs, ins, finish = staged
            self.be.attention(*outs, *ins, causal, scale, dropout_p, seed, counter)
            finish()
            return
        d, per = self._attention_split("attention", q, k, dropout_p)
        scratch = self._alloc((2,), int32)  # each piece writes its own (seed, counter); rng gets the whole's
        for lo, hi in halves(q.shape[d]):
            cut = [None if t is None else narrow(t, d, lo, hi) for t in (out, lse, q, k, v, mask)]
            c = (counter + lo * per) & 0xFFFFFFFF
            self.be.attention(cut[0], cut[1], scratch, *cut[2:], causal, scale, dropout_p, seed, c)
        for i, word in enumerate((pcg_host(seed & 0xFFFFFFFF), counter & 0xFFFFFFFF)):
            self.be.elementwise("copy", View(rng.storage, (), (), rng.offset + i), [_signed(word)])

    def attention_backward(self, grads: tuple[View, View, View], saved: tuple[View, ...], *args: Any) -> None:
        """``grads`` (dq, dk, dv); ``saved`` (q, k, v, out, dout, lse, rng, mask, dmask)."""
        q, k, v, out, dout, lse, rng, mask, dmask = saved
        causal, scale, dropout_p = args
        if all(fits(t) for t in (*grads, *saved) if t is not None):  # a piece that fits: on its windows
            views = [None if t is None else bind(t) for t in (*grads, *saved)]
            self.be.attention_backward(*views[:11], causal, scale, dropout_p, views[11])
            return
        self._refuse_captured_dropout("attention backward", dropout_p)
        staged = self._attention_staged(q, (*grads, dmask), (q, k, v, out, dout, lse, rng, mask))
        if staged is not None:
            (*outs, dm), ins, finish = staged
            self.be.attention_backward(*outs, *ins, causal, scale, dropout_p, dm)
            finish()
            return
        d, per = self._attention_split("attention backward", q, k, dropout_p)
        for lo, hi in halves(q.shape[d]):
            piece_rng = self._alloc((2,), int32)  # the forward piece's counter: the whole's moved to lo
            self.be.elementwise("copy", piece_rng, [rng])
            step = View(piece_rng.storage, (), (), 1)
            self.be.elementwise("add", step, [step, _signed((lo * per) & 0xFFFFFFFF)])
            cut = [None if t is None else narrow(t, d, lo, hi) for t in (*grads, q, k, v, out, dout, lse)]
            m, dm = (None if t is None else narrow(t, d, lo, hi) for t in (mask, dmask))
            self.be.attention_backward(*cut, piece_rng, m, causal, scale, dropout_p, dm)

    # ---------------------------------------------------------------- unfold / fold
    def window_op(self, op: str, out: View, src: View, geometry: tuple[int, ...], scalars: tuple[float, ...]) -> None:
        image, cols = (src, out) if op == "unfold" else (out, src)
        kk = geometry[0] * geometry[1]
        if self.compact_fits(image) and self.compact_fits(cols):
            out_b, done = self.stage_out(out)  # fold overwrites its output; unfold writes every entry of cols
            self.be.window_dispatch(op, out_b, self.stage_in(src), geometry, scalars)
            done()
            return
        d = 0 if image.shape[0] > 1 else 1  # cut images, then channels
        if image.shape[d] <= 1:
            raise UnsupportedError(
                f"vulkan: {op}: one (H, W) plane of shape {image.shape}, or its columns, exceeds a storage binding"
            )
        for lo, hi in halves(image.shape[d]):
            sub_image = narrow(image, d, lo, hi)
            sub_cols = narrow(cols, 0, lo, hi) if d == 0 else narrow(cols, 1, lo * kk, hi * kk)
            pair = (sub_cols, sub_image) if op == "unfold" else (sub_image, sub_cols)
            self.window_op(op, *pair, geometry, scalars)


def _signed(word: int) -> int:
    """A uint32 as the int32 with its bits (a Python-number operand of an int32 op)."""
    return word - (1 << 32) if word >= 1 << 31 else word


def _row(v: View, i: int) -> View:
    """Row ``i`` of a contiguous workspace of shape (n, *rest)."""
    rest = v.shape[1:]
    return View(v.storage, rest, contiguous_strides(rest), v.offset + i * numel(rest))
