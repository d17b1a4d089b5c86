"""The public coordinator's pure pieces: the comparison of two results and the validator's verdict, the norm band
and the trimmed mean, rate limits and the client's address behind proxies."""

from __future__ import annotations

import numpy as np
import pytest

from vkblas.distributed.agreement import TOLERANCE, distance, judge, tolerance
from vkblas.distributed.coordinator.addresses import client_address, parse_networks
from vkblas.distributed.coordinator.ratelimit import RateLimiter
from vkblas.distributed.robust import NormBand, aggregate, trimmed_mean


def _u(seed: int, scale: float = 1.0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "w": (scale * rng.standard_normal((8, 4))).astype(np.float32),
        "b": rng.standard_normal(4).astype(np.float32),
    }


def test_distance_scores_cheats_far_above_rounding():
    a = _u(0)
    close = {k: v + np.float32(1e-7) * np.sign(v) for k, v in a.items()}
    assert distance(a, a) == 0 and distance(a, close) < 1e-6
    assert distance(a, {k: -v for k, v in a.items()}) == pytest.approx(2.0)
    assert distance(a, {k: np.zeros_like(v) for k, v in a.items()}) == pytest.approx(1.0)
    assert distance(a, {k: 1.5 * v for k, v in a.items()}) == pytest.approx(1 / 3, rel=1e-5)
    assert 1.0 < distance(a, _u(1)) < 1.8
    assert distance({"x": np.zeros(3, np.float32)}, {"x": np.zeros(3, np.float32)}) == 0.0
    with pytest.raises(ValueError, match="different tensors"):
        distance(a, {"w": a["w"]})
    # every measured tolerance is far below what the cheats above score
    assert max(TOLERANCE.values()) < 0.25 and tolerance("gradient", "fp32") >= 1e-4
    with pytest.raises(ValueError, match="no measured tolerance for 'x'"):
        tolerance("x", "fp32")


def test_judge_takes_the_agreeing_group_and_asks_for_more_without_one():
    honest, cheat = _u(0), {k: -v for k, v in _u(0).items()}
    twin = {k: v * np.float32(1 + 1e-6) for k, v in honest.items()}
    v = judge([(1, honest), (2, twin)], tol=1e-4)
    assert (v.valid, v.invalid, v.need_more) == ([1, 2], [], False)
    v = judge([(1, cheat), (2, honest)], tol=1e-4)
    assert v.need_more and not v.valid and v.distances[(1, 2)] == pytest.approx(2.0)
    v = judge([(1, cheat), (2, honest), (3, twin)], tol=1e-4)  # the third copy breaks the tie
    assert (v.valid, v.invalid) == ([2, 3], [1])
    v = judge([(1, _u(1)), (2, _u(2)), (3, _u(3))], tol=1e-4)
    assert v.need_more  # nobody agrees: still more copies wanted (the caller bounds them)
    with pytest.raises(ValueError, match="at least 2"):
        judge([(1, honest)], tol=1e-4, quorum=1)


def test_norm_band_flags_norms_far_from_the_recent_median():
    band, recent = NormBand(factor=4.0, min_history=4), [1.0, 1.2, 0.9, 1.1, 1.0]
    assert band.check(1.5, recent) == "" and band.check(0.3, recent) == ""
    assert "above 4 x the recent median" in band.check(10.0, recent)
    assert "below the recent median" in band.check(0.0, recent)  # a free rider's zero update
    assert band.check(1e9, recent[:3]) == ""  # too little history to judge
    with pytest.raises(ValueError, match="factor must be > 1"):
        NormBand(factor=1.0)


def test_trimmed_mean_drops_outliers_per_value():
    honest = [({"w": np.full(3, 1.0 + 0.01 * i, np.float32)}, 1.0) for i in range(8)]
    bad = [({"w": np.array([1e6, -1e6, 1e6], np.float32)}, 1.0), ({"w": np.array([-1e6, 1e6, 0], np.float32)}, 1.0)]
    out = trimmed_mean(honest + bad, trim=0.1)  # n = 10: one dropped at each end of every value
    assert np.all(np.abs(out["w"] - 1.035) < 0.05)
    assert np.abs(aggregate(honest + bad, "mean")["w"]).max() > 1e4  # the plain mean is ruined
    few = honest[:3]
    np.testing.assert_allclose(trimmed_mean(few, 0.1)["w"], aggregate(few, "mean")["w"])  # nothing to trim
    weighted = trimmed_mean([({"w": np.ones(1, np.float32)}, 3.0), ({"w": np.zeros(1, np.float32)}, 1.0)], 0.0)
    assert weighted["w"][0] == pytest.approx(0.75)
    with pytest.raises(ValueError, match="trim must be in"):
        trimmed_mean(honest, 0.5)
    with pytest.raises(ValueError, match="unknown aggregation rule 'median'"):
        aggregate(honest, "median")


def test_rate_limiter_bursts_refills_and_forgets_old_keys():
    rl = RateLimiter(rate=2.0, burst=3, max_keys=2)
    assert [rl.take("a", 0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert rl.take("a", 0.0) == pytest.approx(0.5)  # one token every 0.5 s
    assert rl.take("a", 0.6) == 0.0 and rl.take("b", 0.6) == 0.0
    rl.take("c", 0.6)  # a third key: the least recently used one ("a") is forgotten
    assert len(rl._buckets) == 2 and "a" not in rl._buckets
    assert RateLimiter(rate=0, burst=1).take("x", 0.0) == 0.0  # off
    with pytest.raises(ValueError, match="rate must be >= 0"):
        RateLimiter(rate=-1, burst=1)


def test_client_address_believes_forwarded_for_only_from_trusted_proxies():
    proxies = parse_networks(["127.0.0.1", "10.0.0.0/8"])
    assert client_address("203.0.113.9", "1.2.3.4", proxies) == "203.0.113.9"  # not a proxy: header ignored
    assert client_address("127.0.0.1", "1.2.3.4", proxies) == "1.2.3.4"
    # the client wrote "6.6.6.6" itself; our two proxies appended what they saw: the first untrusted from the right
    assert client_address("127.0.0.1", "6.6.6.6, 198.51.100.7, 10.1.2.3", proxies) == "198.51.100.7"
    assert client_address("127.0.0.1", "10.0.0.1", proxies) == "10.0.0.1"  # only proxies: the leftmost
    assert client_address("127.0.0.1", "not-an-ip", proxies) == "127.0.0.1"
    assert client_address(None, "1.2.3.4", proxies) == "unknown"
    with pytest.raises(ValueError, match="trusted proxy 'example.com'"):
        parse_networks(["example.com"])
