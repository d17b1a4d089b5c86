"""Reputation, replication and credit: the rules, as small functions over a worker's row.

* A worker's **reputation** is its number of results in a row that agreed with another worker's
  (``consecutive_valid``, as BOINC's adaptive replication counts it); a disagreement sets it to 0. Transient
  failures (an expired or returned lease, a damaged upload) change nothing.
* **Replication**: a unit leased to a worker with reputation below ``trust_after`` is always computed a second
  time by another worker; a trusted worker's unit with probability ``validate_fraction``.
* **Credit** only for validated work: a result that agreed with another worker's earns its samples and FLOPs at
  once; a trusted worker's unchecked result earns them *pending*, granted at its next passed check and forfeited at
  a failed one (so every credited sample is covered by a check).
* **Work only while believed**: a banned worker gets nothing; a worker with ``suspend_after`` invalid results and
  more invalid than valid ones is suspended; a worker none of whose results was validated yet holds at most
  ``max_unchecked`` units and results awaiting a check (BOINC #3061: a host with 1,663 tasks out and none valid
  still got work).
"""

from __future__ import annotations

from .config import RunSpec
from .models import Worker


def trusted(spec: RunSpec, w: Worker) -> bool:
    return w.consecutive_valid >= spec.trust_after


def replication_probability(spec: RunSpec, w: Worker) -> float:
    if not spec.validates:
        return 0.0
    return spec.validate_fraction if trusted(spec, w) else 1.0


def refusal(spec: RunSpec, w: Worker) -> tuple[str, str] | None:
    """(error code, message) when ``w`` may get no more work at all."""
    if w.banned is not None:
        return "banned", f"worker {w.id} is banned by the organiser: {w.banned}"
    if w.invalid >= spec.suspend_after and w.invalid > w.valid:
        return "suspended", (
            f"worker {w.id} is suspended: {w.invalid} of its results disagreed with other workers' "
            f"(--suspend-after {spec.suspend_after}) and only {w.valid} agreed"
        )
    return None


def flops_per_sample(parameters: int) -> float:
    """Training FLOPs per sample: forward and backward of a dense model, ~6 per parameter (Kaplan et al. 2020's
    6ND; it undercounts convolutions, whose weights are reused at every position)."""
    return 6.0 * parameters


def agreed(w: Worker, samples: int, flops: float) -> None:
    """A result of ``w`` agreed with another worker's: credit it and whatever was pending."""
    w.consecutive_valid += 1
    w.valid += 1
    w.credit += samples + w.pending_samples
    w.credit_flops += flops + w.pending_flops
    w.pending_samples, w.pending_flops = 0, 0.0


def disagreed(w: Worker) -> None:
    """A result of ``w`` disagreed with the agreeing ones: no credit, the pending credit forfeited."""
    w.consecutive_valid = 0
    w.invalid += 1
    w.pending_samples, w.pending_flops = 0, 0.0


def unchecked(spec: RunSpec, w: Worker, samples: int, flops: float) -> None:
    """A result accepted without a second copy: pending credit (granted at once when the run validates nothing)."""
    if spec.validates:
        w.pending_samples += samples
        w.pending_flops += flops
    else:
        w.credit += samples
        w.credit_flops += flops
