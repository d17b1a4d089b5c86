"""Shares of a batch for workers whose step is a captured graph: their shares are kept to a few sizes, so that each
size's graph is captured once and replayed many times, without giving up the time balance of
:func:`~vkblas.distributed.sizing.split_for_time`.

A worker with quantum ``q > 1`` (a Vulkan worker; see ``LocalConfig.share_quantum``) gets, in order of preference:

1. its previous share again, if the workers are still predicted to finish within ``tolerance`` of each other (of
   the step's time) beyond what the exact shares would give: no new graph;
2. its exact share rounded to a multiple of ``q``, then ``q/2``, ``q/4`` … — the coarsest that keeps that balance
   (a GPU's share sits beside a cpu worker's of a few dozen samples: 16 samples moved to the cpu would make it the
   step's straggler by half a step, so the rounding must be finer there than beside another GPU);
3. its exact share (run eagerly if no graph of that size exists).

Workers with quantum 1 (``cpu``) share what is left by time, exactly. With no such worker, the largest graph worker
takes the remainder (the last, partial batch of an epoch: one eager step).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..sizing import StepTimeModel, split_for_time

TOLERANCE = 0.02  # extra imbalance allowed to reuse a graph: 2 % of the step's predicted time


def imbalance(shares: Sequence[int], models: Sequence[StepTimeModel]) -> float:
    """(slowest - fastest) / slowest of the predicted step times of the workers with a share."""
    times = [m.predict(n) for n, m in zip(shares, models, strict=True) if n > 0]
    known = [t for t in times if t is not None]
    if not known or max(known) <= 0:
        return 0.0
    return (max(known) - min(known)) / max(known)


def _complete(total: int, fixed: dict[int, int], models: Sequence[StepTimeModel], quanta: Sequence[int]) -> list[int]:
    """Shares with the graph workers' ``fixed``; the quantum-1 workers share the rest by time."""
    shares = [0] * len(models)
    for i, n in fixed.items():
        shares[i] = n
    free = [i for i, q in enumerate(quanta) if q == 1]
    rest = total - sum(fixed.values())
    if free and rest >= 0:
        for i, n in zip(free, split_for_time(rest, [models[i] for i in free]), strict=True):
            shares[i] = n
        return shares
    # no cpu worker to absorb the difference: the largest graph worker takes it (not below 0)
    for i in sorted(fixed, key=lambda i: -fixed[i]):
        take = max(-shares[i], rest)
        shares[i] += take
        rest -= take
        if rest == 0:
            break
    return shares


def plan_shares(
    total: int,
    models: Sequence[StepTimeModel],
    quanta: Sequence[int],
    previous: Sequence[int | None],
    minimum: int = 0,
    tolerance: float = TOLERANCE,
) -> list[int]:
    """Shares of ``total`` samples (see the module's text); ``previous``: each worker's last share (None: none)."""
    exact = split_for_time(total, models, minimum)
    graph = [i for i, q in enumerate(quanta) if q > 1]
    if not graph or minimum or any(m.predict(1) is None for m in models):
        return exact  # nothing to quantise, a probe step (every worker gets a share), or not measured yet
    allowed = imbalance(exact, models) + tolerance
    candidates: list[dict[int, int]] = []
    if all(previous[i] is not None for i in graph):
        candidates.append({i: int(previous[i]) for i in graph})  # type: ignore[arg-type]
    q = max(quanta[i] for i in graph)
    while q > 1:
        candidates.append({i: max(0, round(exact[i] / min(q, quanta[i]))) * min(q, quanta[i]) for i in graph})
        q //= 2
    for fixed in candidates:
        if sum(fixed.values()) > total:
            continue
        shares = _complete(total, fixed, models, quanta)
        if sum(shares) == total and imbalance(shares, models) <= allowed:
            return shares
    return exact


def quantise_one(exact: int, quantum: int, previous: int | None) -> int:
    """One worker's batch (``async``, ``diloco``: no sum to keep) as a multiple of ``quantum``, at least one
    quantum; the previous one while within a quantum of ``exact`` (so the graph of that size stays in use)."""
    if quantum <= 1:
        return exact
    if previous is not None and abs(exact - previous) < quantum:
        return previous
    return max(1, round(exact / quantum)) * quantum
