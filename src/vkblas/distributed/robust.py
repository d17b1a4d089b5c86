"""Robust aggregation, the second line behind validation by redundancy (most results are not re-computed).

* :class:`NormBand`: an update's norm is compared with the recent distribution of accepted ones (their median):
  outside ``[median / factor, median * factor]`` it is *suspicious* (noise and scaled updates are far above, a free
  rider's zero update far below). The coordinator does not drop a suspicious result: it sends it to validation
  (BOINC's third verdict, "suspicious: replicate", with the quorum raised, not left at 1 as in BOINC #2138).
* :func:`trimmed_mean`: the coordinate-wise trimmed mean of a round's results (Yin et al., "Byzantine-Robust
  Distributed Learning", ICML 2018): per value, the ``trim`` share of the largest and of the smallest are dropped
  and the rest averaged with their weights, so a minority of wrong results moves no value beyond the honest range.
  With fewer results than ``1 / trim`` nothing can be trimmed and it is the weighted mean.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .algorithms import weighted_mean

Params = dict[str, np.ndarray]
AGGREGATES = ("mean", "trimmed-mean")


@dataclass(frozen=True)
class NormBand:
    """``factor``: how far from the recent median a norm may be; ``min_history``: below this many recent norms
    every norm passes (nothing to compare with yet)."""

    factor: float = 4.0
    min_history: int = 8

    def __post_init__(self) -> None:
        if not self.factor > 1:
            raise ValueError(f"the norm band's factor must be > 1, got {self.factor}")

    def check(self, value: float, recent: Sequence[float]) -> str:
        """``""`` when ``value`` is within the band of ``recent``, else why not."""
        if len(recent) < self.min_history:
            return ""
        med = statistics.median(recent)
        if not med > 0:
            return ""
        if value > med * self.factor:
            return f"norm {value:.4g} is above {self.factor:g} x the recent median {med:.4g}"
        if value < med / self.factor:
            return f"norm {value:.4g} is below the recent median {med:.4g} / {self.factor:g}"
        return ""


def trimmed_mean(contributions: Sequence[tuple[Mapping[str, np.ndarray], float]], trim: float) -> Params:
    """Per value: drop the ``floor(trim * n)`` largest and smallest of the ``n`` contributions, weighted mean of
    the rest (weights: samples). ``trim`` in [0, 0.5)."""
    if not 0 <= trim < 0.5:
        raise ValueError(f"trim must be in [0, 0.5), got {trim}")
    n = len(contributions)
    k = math.floor(trim * n)
    if k == 0:
        return weighted_mean(contributions)
    weights = np.array([w for _, w in contributions], np.float64)
    out: Params = {}
    for name in contributions[0][0]:
        stack = np.stack([np.asarray(u[name], np.float32).reshape(-1) for u, _ in contributions])  # [n, size]
        order = np.argsort(stack, axis=0, kind="stable")
        keep = order[k : n - k]  # [n - 2k, size]: the indices of the middle values, per value
        vals = np.take_along_axis(stack, keep, axis=0).astype(np.float64)
        w = weights[keep]
        out[name] = (
            ((vals * w).sum(axis=0) / w.sum(axis=0)).astype(np.float32).reshape(np.shape(contributions[0][0][name]))
        )
    return out


def aggregate(
    contributions: Sequence[tuple[Mapping[str, np.ndarray], float]], rule: str = "mean", trim: float = 0.1
) -> Params:
    """A round's update by ``rule`` (:data:`AGGREGATES`)."""
    if rule == "mean":
        return weighted_mean(contributions)
    if rule == "trimmed-mean":
        return trimmed_mean(contributions, trim)
    raise ValueError(f"unknown aggregation rule {rule!r}: choose from {', '.join(AGGREGATES)}")


class StreamedAggregate(Mapping[str, np.ndarray]):
    """A round's update by ``rule``, computed when asked for (``self[name]``) one tensor at a time and, within
    it, ``BLOCK`` values at a time: ``sources[i](name, start, stop)`` gives values ``start .. stop`` of contribution
    ``i``'s tensor, flattened (e.g. decoded from its stored int8 payload). Both rules are coordinate-wise, so this
    is :func:`aggregate` exactly, and nothing holds a whole float32 tensor of any contribution: with an optimizer
    that steps tensor by tensor (``GlobalModel``) a round costs about one tensor of extra memory."""

    BLOCK = 1 << 20

    def __init__(
        self,
        sources: Sequence[Callable[[str, int, int], np.ndarray]],
        weights: Sequence[float],
        shapes: Mapping[str, tuple[int, ...]],
        rule: str = "mean",
        trim: float = 0.1,
    ) -> None:
        if len(sources) != len(weights) or not sources:
            raise ValueError(f"{len(sources)} sources and {len(weights)} weights: need as many, at least one")
        if rule not in AGGREGATES:
            raise ValueError(f"unknown aggregation rule {rule!r}: choose from {', '.join(AGGREGATES)}")
        self.sources, self.weights, self.shapes = list(sources), list(weights), dict(shapes)
        self.rule, self.trim = rule, trim

    def __getitem__(self, name: str) -> np.ndarray:
        shape = self.shapes[name]
        out = np.empty(math.prod(shape), np.float32)
        for start in range(0, out.size, self.BLOCK):
            stop = min(out.size, start + self.BLOCK)
            part = [({name: src(name, start, stop)}, w) for src, w in zip(self.sources, self.weights, strict=True)]
            out[start:stop] = aggregate(part, self.rule, self.trim)[name]
        return out.reshape(shape)

    def __contains__(self, name: object) -> bool:  # Mapping's default would compute the tensor
        return name in self.shapes

    def __iter__(self) -> Iterator[str]:
        return iter(self.shapes)

    def __len__(self) -> int:
        return len(self.shapes)
