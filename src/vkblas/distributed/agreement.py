"""Validation by redundancy, adapted to floating point: do two workers' results of one unit agree?

A unit names its data, its randomness and its starting weights, so every honest worker computes the same function
of them; devices differ only in rounding (cpu vs Vulkan, another vendor's driver, another BLAS's summation order).
Two results therefore never compare bit for bit, and a comparison per value fails on honest work (gonka #1199
false-rejected 14-77 % of honest positions that way). The comparison here is one number for the whole update:

    distance(a, b) = ||a - b|| / max(||a||, ||b||)        (global L2 over all tensors)

which is 0 for identical results, 2 for a sign flip, about 1.4 for independent noise of the same norm, and 1 for a
zero update ("free rider") against a real one. :data:`TOLERANCE` is measured, per kind of work and codec, on honest
cpu and Vulkan (lavapipe) results of the same units (``benchmarks/tolerance.py``, numbers in BENCHMARKS.md): the
largest spread seen, times a safety factor.

:func:`judge` is the validator's decision for one unit (BOINC's ``check_set``): the largest group of mutually
agreeing results that reaches the quorum wins; the others are invalid; without such a group, more results are
needed (the quorum is raised by the caller and the unit re-issued).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

Params = Mapping[str, np.ndarray]

#: the honest cross-device spread measured by benchmarks/tolerance.py (BENCHMARKS.md, "Validation tolerance"): the
#: largest distance of cpu vs Vulkan (lavapipe) results of the same unit, per (kind of work, codec), over 24 units
#: from the MNIST MLP at three stages of training; inner steps: 50 AdamW steps (the default ``--inner-steps``, the
#: worst case: Adam turns rounding differences of near-zero gradients into whole steps, so copies drift apart as H
#: grows; the median was 0.008, the largest 0.06)
MEASURED_SPREAD = {
    ("gradient", "fp32"): 3.2e-6,
    ("gradient", "fp16"): 4.5e-5,
    ("gradient", "int8"): 1.7e-4,
    ("inner-steps", "fp32"): 0.060,
    ("inner-steps", "fp16"): 0.060,
    ("inner-steps", "int8"): 0.061,
}
SAFETY = 3.0  # the tolerance is this many times the largest honest spread seen
FLOOR = 1e-4  # and never below this (fp32 gradients agreed to 3e-6 here: a device we have not measured may not)
#: the largest distance two honest results may have. Cheats score far above (sign flip 2, noise ~1.4, a free rider
#: 1, another unit's result 0.8-1.2, a result scaled by 1.5: 0.33); a result scaled by less than ~1.2 on inner
#: steps passes, as it would within a device's rounding of 50 Adam steps
TOLERANCE = {k: max(FLOOR, SAFETY * v) for k, v in MEASURED_SPREAD.items()}


def tolerance(kind: str, codec: str) -> float:
    try:
        return TOLERANCE[(kind, codec)]
    except KeyError:
        raise ValueError(f"no measured tolerance for {kind!r} work in codec {codec!r}") from None


_BLOCK = 1 << 20


def _sq(v: np.ndarray) -> float:
    """The sum of squares in float64. einsum, not ``v @ v``: a BLAS dot was 100x slower on a busy machine (its
    threads wait for cores), and the validator computes three of these per pair of 2 MB results."""
    v = v.reshape(-1)
    return float(np.einsum("i,i->", v, v, dtype=np.float64))


def norm(a: Params) -> float:
    return math.sqrt(sum(_sq(v) for v in a.values()))


def distance(a: Params, b: Params) -> float:
    """``||a - b|| / max(||a||, ||b||)`` over all tensors (0 when both are zero). The names must match."""
    if a.keys() != b.keys():
        raise ValueError(f"results name different tensors: {sorted(a)} vs {sorted(b)}")
    diff = 0.0
    for k in a:  # a and b may decode each tensor when read (``codec.LazyUpdate``): each is read once here
        x, y = np.asarray(a[k]).reshape(-1), np.asarray(b[k]).reshape(-1)
        if x.shape != y.shape:
            raise ValueError(f"results' {k!r} differ in size: {x.size} vs {y.size}")
        for i in range(0, x.size, _BLOCK):  # float64 differences a block at a time, not a float64 copy
            diff += _sq(np.subtract(x[i : i + _BLOCK], y[i : i + _BLOCK], dtype=np.float64))
        del x, y
    scale = max(norm(a), norm(b))
    return 0.0 if scale == 0 else math.sqrt(diff) / scale


@dataclass(frozen=True)
class Verdict:
    """The validator's decision about the results of one unit (ids are the caller's)."""

    valid: list[int] = field(default_factory=list)  # agreeing results; ``valid[0]`` is the canonical one (applied)
    invalid: list[int] = field(default_factory=list)  # results that disagree with the agreeing group
    need_more: bool = False  # no group reached the quorum: issue the unit again
    distances: dict[tuple[int, int], float] = field(default_factory=dict)


def judge(results: Sequence[tuple[int, Params]], tol: float, quorum: int = 2) -> Verdict:
    """Decide a unit from its results (``(id, update)`` in arrival order): the largest group of results that all
    agree with its first member within ``tol``, if it has at least ``quorum`` members (ties: the group formed
    earliest). Results outside the group are invalid. With no such group, ``need_more``."""
    if quorum < 2:
        raise ValueError(f"a redundancy quorum is at least 2, got {quorum}")
    ids = [i for i, _ in results]
    d: dict[tuple[int, int], float] = {}
    for x in range(len(results)):
        for y in range(x + 1, len(results)):
            d[(ids[x], ids[y])] = distance(results[x][1], results[y][1])
    best: list[int] = []
    for x, i in enumerate(ids):
        group = [i] + [j for j in ids[x + 1 :] if d[(i, j)] <= tol]
        group += [j for j in ids[:x] if d[(j, i)] <= tol]
        group = sorted(group, key=ids.index)
        if all(d[tuple(sorted((p, q), key=ids.index))] <= tol for p in group for q in group if p != q):
            if len(group) > len(best):
                best = group
    if len(best) < quorum:
        return Verdict(need_more=True, distances=d)
    return Verdict(valid=best, invalid=[i for i in ids if i not in best], distances=d)
