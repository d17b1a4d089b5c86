"""``einsum``: Einstein summation, composed from views, sums and batched matmuls (so it differentiates for free).

The equation is parsed into one list of labels per operand (``...`` becomes labels of its own, aligned from the
right, which broadcast like any dims). Then: a label repeated within an operand takes the diagonal; a label that
only one operand has and the output does not is summed out at once; operands are contracted left to right, each
pair as one batched matmul of (shared labels still needed) x (labels of the left only) x (labels summed here);
the result is permuted to the output's order. Integer operands contract by broadcast multiply and sum (matmul is
float only).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..tensor import Tensor
from ._core import same_backend

Labels = list[str]


def _parse(equation: str, ndims: Sequence[int]) -> tuple[list[Labels], Labels]:
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ndims):
        raise ValueError(f"einsum(): {equation!r} names {len(terms)} operands, {len(ndims)} were given")
    ell = max((n - (len(t) - 3) for t, n in zip(terms, ndims, strict=True) if "..." in t), default=0)

    def labels(term: str, ndim: int | None) -> Labels:
        if term.count("...") > 1 or "." in term.replace("...", ""):
            raise ValueError(f"einsum(): {term!r} has a misplaced '.' (only one '...' per operand)")
        head, dots, tail = term.partition("...")
        for c in head + tail:
            if not c.isalpha():
                raise ValueError(f"einsum(): invalid subscript {c!r} in {equation!r} (letters only)")
        if not dots:
            if ndim is not None and len(term) != ndim:
                raise ValueError(f"einsum(): {term!r} has {len(term)} subscripts for an operand with {ndim} dims")
            return list(term)
        k = ell if ndim is None else ndim - len(head) - len(tail)
        if k < 0:
            raise ValueError(f"einsum(): {term!r} has more subscripts than the operand's {ndim} dims")
        return list(head) + [f"...{i}" for i in range(ell - k, ell)] + list(tail)

    ins = [labels(t, n) for t, n in zip(terms, ndims, strict=True)]
    if arrow:
        out = labels(rhs, None)
        if len(set(out)) != len(out):
            raise ValueError(f"einsum(): output subscript repeated in {equation!r}")
        missing = set(out) - {x for t in ins for x in t}
        if missing:
            raise ValueError(f"einsum(): output subscript {sorted(missing)} does not appear in the inputs")
    else:  # implicit: the ellipsis, then the labels that appear exactly once, in alphabetical order
        counts: dict[str, int] = {}
        for t in ins:
            for x in t:
                counts[x] = counts.get(x, 0) + 1
        out = [f"...{i}" for i in range(ell)] + sorted(x for x, c in counts.items() if c == 1 and len(x) == 1)
    return ins, out


def _diagonals(x: Tensor, labels: Labels) -> tuple[Tensor, Labels]:
    """Take the diagonal of every label repeated within one operand ("ii->i")."""
    labels = list(labels)
    while len(set(labels)) != len(labels):
        seen: dict[str, int] = {}
        for q, lab in enumerate(labels):
            if lab in seen:
                p = seen[lab]
                if x.shape[p] != x.shape[q]:
                    sz = (x.shape[p], x.shape[q])
                    raise RuntimeError(f"einsum(): subscript {lab!r} repeated with sizes {sz[0]} and {sz[1]}")
                x = x.diagonal(0, p, q)
                labels = [lb for i, lb in enumerate(labels) if i not in (p, q)] + [lab]
                break
            seen[lab] = q
    return x, labels


def _sum_out(x: Tensor, labels: Labels, keep: set[str]) -> tuple[Tensor, Labels]:
    dims = [i for i, lab in enumerate(labels) if lab not in keep]
    if dims:
        x = x.sum(dims)
    return x, [lab for lab in labels if lab in keep]


def _permuted(x: Tensor, labels: Labels, order: Labels, sizes: dict[str, int]) -> Tensor:
    """``x`` with its dims in ``order`` (every label of ``x`` is in it; the others become size-1 dims), broadcast
    to ``sizes``."""
    present = [lab for lab in order if lab in labels]
    if present != labels:
        x = x.permute(*[labels.index(lab) for lab in present])
    dims = iter(x.shape)
    shape = tuple(next(dims) if lab in labels else 1 for lab in order)
    if shape != x.shape:
        x = x.reshape(shape)
    target = tuple(sizes[lab] for lab in order)
    return x.expand(*target) if target != x.shape else x


def _contract(
    a: Tensor, la: Labels, b: Tensor, lb: Labels, keep: set[str], sizes: dict[str, int]
) -> tuple[Tensor, Labels]:
    """``a`` and ``b`` contracted over their shared labels that ``keep`` lacks; the result's labels."""
    batch = [x for x in la if x in lb and x in keep]
    summed = [x for x in la if x in lb and x not in keep]
    left = [x for x in la if x not in lb]
    right = [x for x in lb if x not in la]
    if not a.dtype.is_floating:  # broadcast multiply, then sum (matmul is float only)
        order = batch + left + right + summed
        prod = _permuted(a, la, order, sizes) * _permuted(b, lb, order, sizes)
        return (prod.sum(list(range(len(order) - len(summed), len(order)))) if summed else prod), batch + left + right
    n = lambda labs: 1 if not labs else _numel([sizes[x] for x in labs])  # noqa: E731
    am = _permuted(a, la, batch + left + summed, sizes).reshape(n(batch), n(left), n(summed))
    bm = _permuted(b, lb, batch + summed + right, sizes).reshape(n(batch), n(summed), n(right))
    out = am.matmul(bm).reshape(*[sizes[x] for x in batch + left + right])
    return out, batch + left + right


def _numel(shape: Sequence[int]) -> int:
    total = 1
    for s in shape:
        total *= s
    return total


def einsum(equation: str, *operands: Any) -> Tensor:
    """Einstein summation, ``torch.einsum``'s equation language: ``"ij,jk->ik"``, ``"bhqd,bhkd->bhqk"``,
    ``"ii->i"``, ``"...ij->...ji"``, implicit output (``"ij,jk"``); operands given one by one or as a list."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not operands or not all(isinstance(t, Tensor) for t in operands):
        raise TypeError("einsum(): expected the equation and one or more Tensor operands")
    same_backend("einsum", list(operands))
    ins, out = _parse(equation, [t.ndim for t in operands])
    sizes: dict[str, int] = {}
    for t, labels in zip(operands, ins, strict=True):
        for lab, n in zip(labels, t.shape, strict=True):
            m = sizes.get(lab, 1)
            if n != 1 and m not in (1, n):
                why = f"subscript {lab!r} has sizes {m} and {n} (they must broadcast)"
                raise RuntimeError(f"einsum(): {why} in {equation!r}")
            sizes[lab] = n if m == 1 else m
    terms = [_diagonals(t, labels) for t, labels in zip(operands, ins, strict=True)]
    acc, la = None, []
    for i, (t, labels) in enumerate(terms):
        later = set(out) | {x for _, lbs in terms[i + 1 :] for x in lbs}
        others = later | set(la)
        t, labels = _sum_out(t, labels, others)
        if acc is None:
            acc, la = t, labels
            continue
        acc, la = _contract(acc, la, t, labels, later, sizes)
    assert acc is not None
    acc, la = _sum_out(acc, la, set(out))
    return _permuted(acc, la, out, sizes).contiguous() if out else acc
