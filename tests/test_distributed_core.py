"""The pure pieces of distributed training (vkblas.distributed): update rules, validation, sizing, codecs, metrics.
Each is tested once here, as functions; the transports (local runner, coordinator) are tested for their own faults."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vkblas.distributed import (
    ErrorFeedback,
    GlobalModel,
    IdleClock,
    RateMeter,
    RejectedUpdateError,
    RunMetrics,
    StalenessFilter,
    StepTimeModel,
    batch_for_time,
    check_update,
    decode,
    encode,
    from_payload,
    pseudo_gradient,
    signature_of,
    split_batch,
    split_for_time,
    to_payload,
    weighted_mean,
)
from vkblas.distributed.codec import SCALE_SUFFIX, CodecError, LazyUpdate, PayloadFile, RangeDecoder

RNG = np.random.default_rng(0)


def _params(seed: int = 0) -> dict[str, np.ndarray]:
    r = np.random.default_rng(seed)
    return {"0.weight": r.standard_normal((4, 3)).astype(np.float32), "0.bias": r.standard_normal(4).astype(np.float32)}


# ---------------------------------------------------------------------------------------------- staleness
def test_staleness_filter_accepts_within_bound_with_inverse_scale():
    f = StalenessFilter(max_staleness=2)
    assert [f.judge(10, 10 + s).scale for s in range(3)] == [1.0, 0.5, 1 / 3]
    assert all(f.judge(10, 10 + s).accepted for s in range(3))


def test_staleness_filter_drops_above_bound_and_from_the_future():
    f = StalenessFilter(max_staleness=2)
    late = f.judge(10, 13)
    assert (late.accepted, late.staleness, late.scale) == (False, 3, 0.0) and "above the bound 2" in late.reason
    future = f.judge(11, 10)
    assert not future.accepted and "newer than the model" in future.reason


def test_staleness_filter_constant_rule_and_bad_settings():
    assert StalenessFilter(5, rule="constant").judge(0, 4).scale == 1.0
    with pytest.raises(ValueError, match="max_staleness"):
        StalenessFilter(-1)
    with pytest.raises(ValueError, match="unknown staleness rule"):
        StalenessFilter(1, rule="linear")


# ---------------------------------------------------------------------------------------------- averaging
def test_weighted_mean_weights_by_samples():
    a, b = {"w": np.array([1.0, 2.0], np.float32)}, {"w": np.array([4.0, 8.0], np.float32)}
    out = weighted_mean([(a, 3), (b, 1)])
    np.testing.assert_allclose(out["w"], [1.75, 3.5])
    assert out["w"].dtype == np.float32


def test_weighted_mean_of_shares_equals_the_whole_batch_gradient():
    # the mean-loss gradient of a batch of 10 is the 6/4-weighted mean of the mean-loss gradients of its shares
    x = RNG.standard_normal((10, 3))
    per_sample = x * 2.0  # stands for per-sample gradients
    whole = per_sample.mean(0)
    shares = [({"g": per_sample[:6].mean(0).astype(np.float32)}, 6)]
    shares.append(({"g": per_sample[6:].mean(0).astype(np.float32)}, 4))
    np.testing.assert_allclose(weighted_mean(shares)["g"], whole, rtol=1e-6)


def test_weighted_mean_rejects_empty_and_zero_weights():
    with pytest.raises(ValueError, match="no contributions"):
        weighted_mean([])
    with pytest.raises(ValueError, match="positive"):
        weighted_mean([({"w": np.zeros(1, np.float32)}, 0)])


def test_pseudo_gradient_is_start_minus_end():
    start, end = {"w": np.array([1.0, 1.0], np.float32)}, {"w": np.array([0.5, 2.0], np.float32)}
    np.testing.assert_array_equal(pseudo_gradient(start, end)["w"], [0.5, -1.0])
    with pytest.raises(ValueError, match="different tensors"):
        pseudo_gradient(start, {"v": end["w"]})


# ---------------------------------------------------------------------------------------------- the global model
def test_diloco_outer_step_is_nesterov_sgd_by_hand():
    """Two outer steps worked out by hand: PyTorch's SGD(nesterov=True), as DiLoCo publishes (lr 0.7, mu 0.9)."""
    g = GlobalModel({"w": np.array([1.0, -2.0], np.float32)}, "diloco")
    d1, d2 = np.array([0.1, -0.2], np.float32), np.array([0.3, 0.0], np.float32)
    g.apply_pseudo_gradient({"w": d1})
    # step 1: buf = d1; update = d1 + 0.9 * buf = 1.9 * d1; w -= 0.7 * update
    w1 = np.array([1.0, -2.0]) - 0.7 * 1.9 * d1
    np.testing.assert_allclose(g.params()["w"], w1, rtol=1e-6)
    g.apply_pseudo_gradient({"w": d2})
    buf2 = 0.9 * d1 + d2
    w2 = w1 - 0.7 * (d2 + 0.9 * buf2)
    np.testing.assert_allclose(g.params()["w"], w2, rtol=1e-6)
    assert g.version == 2


def test_diloco_outer_step_matches_pytorch():
    torch = pytest.importorskip("torch")
    start = _params(1)
    g = GlobalModel(start, "diloco", outer_lr=0.7, outer_momentum=0.9)
    tp = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in start.items()}
    opt = torch.optim.SGD(list(tp.values()), lr=0.7, momentum=0.9, nesterov=True)
    for r in range(3):
        pg = _params(10 + r)
        g.apply_pseudo_gradient(pg)
        for k, p in tp.items():
            p.grad = torch.tensor(pg[k], dtype=torch.float64)
        opt.step()
    for k, p in tp.items():
        np.testing.assert_allclose(g.params()[k], p.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_async_step_scales_the_learning_rate_and_matches_pytorch_adam():
    torch = pytest.importorskip("torch")
    start = _params(2)
    g = GlobalModel(start, "async", "adam", lr=1e-2)
    tp = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in start.items()}
    opt = torch.optim.Adam(list(tp.values()), lr=1e-2)
    for step, scale in enumerate([1.0, 0.5, 1 / 3]):
        grad = _params(20 + step)
        g.apply_gradient(grad, lr_scale=scale)
        for group in opt.param_groups:
            group["lr"] = 1e-2 * scale
        for k, p in tp.items():
            p.grad = torch.tensor(grad[k], dtype=torch.float64)
        opt.step()
    assert g.lr == 1e-2  # the scale applies to one step only
    for k, p in tp.items():
        np.testing.assert_allclose(g.params()[k], p.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_global_model_state_dict_round_trip_continues_identically():
    a = GlobalModel(_params(3), "sync", "adam", lr=1e-2)
    for s in range(2):
        a.apply_gradient(_params(30 + s))
    b = GlobalModel(_params(99), "sync", "adam", lr=1e-2)
    b.load_state_dict(a.state_dict())
    assert b.version == 2
    a.apply_gradient(_params(40))
    b.apply_gradient(_params(40))
    for k in a.names:
        np.testing.assert_array_equal(a.params()[k], b.params()[k])


def test_global_model_errors():
    with pytest.raises(ValueError, match="unknown algorithm"):
        GlobalModel(_params(), "gossip")
    with pytest.raises(ValueError, match="unknown optimizer"):
        GlobalModel(_params(), "sync", "lamb")
    g = GlobalModel(_params(), "sync")
    with pytest.raises(RuntimeError, match="DiLoCo's outer step"):
        g.apply_pseudo_gradient(_params())
    with pytest.raises(ValueError, match="lacks tensors"):
        g.apply_gradient({"0.weight": _params()["0.weight"]})
    with pytest.raises(RuntimeError, match="apply_pseudo_gradient"):
        GlobalModel(_params(), "diloco").apply_gradient(_params())
    with pytest.raises(ValueError, match="learning rate"):
        g.set_lr(float("nan"))


# ---------------------------------------------------------------------------------------------- validation
def test_check_update_accepts_a_good_update_and_returns_its_norm():
    p = _params()
    norm = check_update(p, signature_of(p))
    assert norm == pytest.approx(np.sqrt(sum(float((v.astype(np.float64) ** 2).sum()) for v in p.values())))


@pytest.mark.parametrize(
    "mutate, reason",
    [
        (lambda u: u.pop("0.bias"), "names"),
        (lambda u: u.update(extra=np.zeros(1, np.float32)), "names"),
        (lambda u: u.update({"0.bias": np.zeros(5, np.float32)}), "shape"),
        (lambda u: u.update({"0.bias": np.zeros(4, np.float64)}), "dtype"),
        (lambda u: u.update({"0.bias": [0.0] * 4}), "dtype"),
        (lambda u: u["0.bias"].__setitem__(1, np.nan), "nonfinite"),
        (lambda u: u["0.weight"].__setitem__((0, 0), -np.inf), "nonfinite"),
    ],
)
def test_check_update_rejects(mutate, reason):
    p = _params()
    u = {k: v.copy() for k, v in p.items()}
    mutate(u)
    with pytest.raises(RejectedUpdateError) as e:
        check_update(u, signature_of(p))
    assert e.value.reason == reason


def test_check_update_norm_bound_and_overflowing_norm():
    p = _params()
    with pytest.raises(RejectedUpdateError, match="above the bound") as e:
        check_update(p, signature_of(p), max_norm=1e-3)
    assert e.value.reason == "norm"
    huge = {k: np.full_like(v, 3e38) for k, v in p.items()}  # finite, and its norm is accumulated in float64
    assert check_update(huge, signature_of(p)) == pytest.approx(3e38 * 4.0)


# ---------------------------------------------------------------------------------------------- sizing
def test_split_batch_is_proportional_and_sums_to_the_batch():
    assert split_batch(512, [3000.0, 1000.0]) == [384, 128]
    shares = split_batch(100, [1.0, 1.0, 1.0])
    assert sum(shares) == 100 and max(shares) - min(shares) <= 1
    assert split_batch(10, [1e9, 1.0], minimum=2) == [8, 2]


def test_split_batch_unmeasured_workers_count_as_the_mean():
    assert split_batch(300, [100.0, None, 200.0]) == [67, 100, 133]  # the unmeasured one counts as 150
    assert split_batch(4, [None, None]) == [2, 2]
    with pytest.raises(ValueError, match="cannot give"):
        split_batch(1, [1.0, 1.0])
    with pytest.raises(ValueError, match="at least one worker"):
        split_batch(8, [])


def test_rate_meter_calibrates_then_follows_changes():
    m = RateMeter(alpha=0.5, calibration=2)
    assert m.rate is None and not m.calibrated
    m.observe(100, 1.0)
    m.observe(300, 1.0)
    assert m.rate == pytest.approx(200.0) and m.calibrated
    m.observe(100, 1.0)  # the worker slowed down: halfway to 100
    assert m.rate == pytest.approx(150.0)
    m.observe(0, 1.0)
    m.observe(10, 0.0)
    assert m.observations == 3


def test_rate_meter_warmup_stands_in_until_the_next_observation():
    m = RateMeter(alpha=0.5, calibration=2, warmup=1)
    m.observe(128, 7.0)  # a first unit that compiled pipelines: one batch in seconds
    assert m.rate == pytest.approx(128 / 7.0) and not m.calibrated
    m.observe(1000, 1.0)  # replaces it, not averaged with it
    assert m.rate == pytest.approx(1000.0) and not m.calibrated
    m.observe(3000, 1.0)
    assert m.rate == pytest.approx(2000.0) and m.calibrated
    assert RateMeter.from_state(m.state()).warmup == 1
    old = {k: v for k, v in m.state().items() if k != "warmup"}  # a state stored before warm-up existed
    assert RateMeter.from_state(old).warmup == 0


def test_batch_for_time():
    assert batch_for_time(None, 2.0, minimum=16) == 16
    assert batch_for_time(1000.0, 2.0) == 2000
    assert batch_for_time(1000.0, 2.0, multiple=64) == 1984
    assert batch_for_time(1000.0, 2.0, maximum=512) == 512
    assert batch_for_time(1.0, 2.0, minimum=8) == 8


def test_idle_clock_accounts_waits():
    c = IdleClock()
    c.add_idle(0.0)
    with c.idle():
        pass
    c.add_idle(-1.0)
    assert 0.0 <= c.idle_fraction <= 1.0 and c.wall_s > 0


# ---------------------------------------------------------------------------------------------- codecs
def _update(n: int = 1000, seed: int = 5) -> dict[str, np.ndarray]:
    r = np.random.default_rng(seed)
    return {"a": (r.standard_normal(n) * 1e-2).astype(np.float32), "b": r.standard_normal((7, 3)).astype(np.float32)}


def test_fp32_codec_is_exact_and_fp16_within_half_precision():
    u = _update()
    for codec, rtol in (("fp32", 0.0), ("fp16", 2**-11)):
        out = decode(*encode(u, codec))
        for k in u:
            np.testing.assert_allclose(out[k], u[k], rtol=rtol, atol=1e-7 if rtol else 0)
            assert out[k].dtype == np.float32 and out[k].shape == u[k].shape


def test_fp16_codec_refuses_values_beyond_its_range():
    with pytest.raises(ValueError, match="beyond fp16's range"):
        encode({"w": np.array([1e5], np.float32)}, "fp16")


@pytest.mark.parametrize("block", [1, 7, 64, 256, 5000])
def test_int8_round_trip_error_is_at_most_half_a_step_per_block(block):
    u = _update()
    tensors, meta = encode(u, "int8", block)
    out = decode(tensors, meta)
    for k, x in u.items():
        flat, got = x.reshape(-1), out[k].reshape(-1)
        for start in range(0, flat.size, block):
            step = np.abs(flat[start : start + block]).max() / 127
            assert np.abs(got[start : start + block] - flat[start : start + block]).max() <= step / 2 + 1e-9
        assert tensors[k].dtype == np.int8 and tensors[k + SCALE_SUFFIX].shape == (-(-flat.size // block),)


def test_int8_codec_zero_blocks_and_sizes():
    out = decode(*encode({"z": np.zeros(10, np.float32), "e": np.zeros((0, 3), np.float32)}, "int8", 4))
    assert not out["z"].any() and out["e"].shape == (0, 3)
    u = _update(4096)
    fp32 = len(to_payload(*encode(u, "fp32")))
    int8 = len(to_payload(*encode(u, "int8", 256)))
    assert int8 < fp32 / 3.5  # 1 byte per value + 4 bytes per 256 values + header


def test_error_feedback_keeps_the_sum_of_sent_updates_close_to_the_true_sum():
    ef, plain = ErrorFeedback("int8", block=64), []
    true_sum, sent_sum = np.zeros(1000), np.zeros(1000)
    for r in range(20):
        u = _update(seed=r)
        true_sum += u["a"]
        sent_sum += decode(*ef.compress(u))["a"]
        plain.append(decode(*encode(u, "int8", 64))["a"])
    drift_ef = np.abs(sent_sum - true_sum).max()
    # with feedback the accumulated error is one round's residual, not the sum of twenty
    assert drift_ef <= np.abs(ef.residual["a"]).max() + 1e-6
    assert drift_ef < np.abs(np.sum(plain, axis=0) - true_sum).max()


def test_codec_settings_are_checked():
    with pytest.raises(ValueError, match="unknown codec"):
        encode({}, "bf16")
    with pytest.raises(ValueError, match="block size"):
        encode({}, "int8", 0)
    with pytest.raises(ValueError, match="reserved suffix"):
        encode({"w" + SCALE_SUFFIX: np.zeros(1, np.float32)}, "int8")


def test_payload_round_trip_keeps_tensors_and_metadata():
    tensors, meta = encode(_update(), "int8", 32)
    back, back_meta = from_payload(to_payload(tensors, meta))
    assert back_meta == meta
    for k in tensors:
        np.testing.assert_array_equal(back[k], tensors[k])


@pytest.mark.parametrize(
    "tamper, match",
    [
        (lambda b: b[:5], "too short"),
        (lambda b: b[:-3], "not a readable|truncated"),
        (lambda b: b[:8] + b"[1, 2]" + b[14:], "not a JSON object|not a readable"),
        (lambda b: (10**9).to_bytes(8, "little") + b[8:], "truncated or above"),
    ],
)
def test_from_payload_rejects_malformed_bytes(tamper, match):
    good = to_payload(*encode(_update(), "fp32"))
    with pytest.raises(CodecError, match=match):
        from_payload(tamper(good))


def test_from_payload_size_limit_and_decode_layout_checks():
    data = to_payload(*encode(_update(), "fp32"))
    with pytest.raises(CodecError, match="above the limit"):
        from_payload(data, max_bytes=100)
    t, meta = encode(_update(), "int8", 16)
    with pytest.raises(CodecError, match="unknown payload format"):
        decode(t, {**meta, "format": "other"})
    with pytest.raises(CodecError, match="unknown codec"):
        decode(t, {**meta, "codec": "int4"})
    with pytest.raises(CodecError, match="bad block size"):
        decode(t, {**meta, "block": "x"})
    with pytest.raises(CodecError, match="outside"):
        decode(t, {**meta, "block": "0"})
    with pytest.raises(CodecError, match="scales"):
        decode({"a": t["a"]}, meta)
    with pytest.raises(CodecError, match="float32 scales"):
        decode({"a": t["a"], "a" + SCALE_SUFFIX: t["a" + SCALE_SUFFIX][:-1]}, meta)
    for bad in (np.nan, -1.0, np.inf, 3e38):
        scales = t["a" + SCALE_SUFFIX].copy()
        scales[0] = bad
        with pytest.raises(CodecError, match="scales must be finite"):
            decode({"a": t["a"], "a" + SCALE_SUFFIX: scales}, meta)
    with pytest.raises(CodecError, match="without their tensor"):
        decode({"x" + SCALE_SUFFIX: np.zeros(1, np.float32)}, meta)
    with pytest.raises(CodecError, match="dtype float64"):
        decode({"a": np.zeros(2)}, {"format": meta["format"], "codec": "fp32"})


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=512))
def test_from_payload_raises_only_codec_errors_on_random_bytes(data):
    try:
        tensors, meta = from_payload(data, max_bytes=1 << 16)
        decode(tensors, meta)
    except CodecError:
        pass


@settings(max_examples=100, deadline=None)
@given(st.binary(min_size=1, max_size=64), st.integers(min_value=8, max_value=400))
def test_from_payload_raises_only_codec_errors_on_corrupted_payloads(noise, at):
    good = bytearray(to_payload(*encode(_update(50), "int8", 8)))
    at = min(at, len(good) - 1)
    good[at : at + len(noise)] = noise
    try:
        decode(*from_payload(bytes(good)))
    except CodecError:
        pass


def _file(tmp_path, data: bytes):  # type: ignore[no-untyped-def]
    path = tmp_path / "payload.safetensors"
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("codec", ["fp32", "fp16", "int8"])
def test_payload_file_reads_what_from_payload_reads(tmp_path, codec):
    """A payload read from its file, a tensor or a range at a time: the same tensors, metadata and decoded update
    as parsing its bytes, and only the values asked for (0-d, zero-size and int8 ranges that cut scale blocks)."""
    update = {**_update(), "s": np.array(0.5, np.float32), "e": np.zeros((0, 3), np.float32)}
    tensors, meta = encode(update, codec, 16)
    data = to_payload(tensors, meta)
    back, back_meta = from_payload(data)
    with PayloadFile(_file(tmp_path, data)) as f:
        assert f.meta == back_meta == meta and sorted(f) == sorted(back) and "a" in f and "zz" not in f
        for k, v in back.items():
            assert f.info(k) == (v.dtype, v.shape)
            np.testing.assert_array_equal(f[k], v)
            assert f[k].dtype == v.dtype and f[k].shape == v.shape
        np.testing.assert_array_equal(f.read("a", 3, 40), back["a"][3:40])
        with pytest.raises(CodecError, match="outside"):
            f.read("a", 5, 1001)
        lazy, whole = LazyUpdate(f, f.meta), decode(back, back_meta)
        for k in whole:
            np.testing.assert_array_equal(lazy[k], whole[k])
        ranged, loaded = RangeDecoder(f.get, f.meta, f), RangeDecoder(back.get, back_meta)
        for name, start, stop in [("a", 0, 1000), ("a", 3, 37), ("a", 17, 18), ("a", 990, 1000), ("b", 5, 21),
                                  ("s", 0, 1), ("e", 0, 0)]:  # fmt: skip
            np.testing.assert_array_equal(ranged.values(name, start, stop), loaded.values(name, start, stop))
            np.testing.assert_array_equal(ranged.values(name, start, stop), whole[name].reshape(-1)[start:stop])
    with pytest.raises(CodecError, match="above the limit"):
        PayloadFile(_file(tmp_path, data), max_bytes=100)


def _st_header(entries: dict) -> bytes:
    import json
    import struct

    head = json.dumps(entries).encode()
    return struct.pack("<Q", len(head)) + head


@pytest.mark.parametrize(
    "data, match",
    [
        (b"12345", "too short"),
        ((10**9).to_bytes(8, "little") + b"{}", "truncated or above"),
        (_st_header([1, 2]), "not a JSON object"),  # type: ignore[arg-type]
        (_st_header({"__metadata__": {"a": 1}}), "metadata must map strings"),
        (_st_header({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}) + b"\0" * 4, "data bytes"),
        (_st_header({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}) + b"\0" * 4, "bad shape"),
        (_st_header({"x": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 0]}}), "bad shape"),
        (_st_header({"x": {"dtype": "X9", "shape": [1], "data_offsets": [0, 4]}}) + b"\0" * 4, "entry"),
        (_st_header({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                     "y": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}) + b"\0" * 8, "overlap"),
        (_st_header({"x": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}) + b"\0" * 8, "gaps"),
    ],
)  # fmt: skip
def test_payload_file_refuses_malformed_files(tmp_path, data, match):
    with pytest.raises(CodecError, match=match):
        PayloadFile(_file(tmp_path, data))


@settings(max_examples=100, deadline=None)
@given(st.binary(min_size=1, max_size=64), st.integers(min_value=0, max_value=400))
def test_payload_file_raises_only_codec_errors_and_agrees_with_from_payload(tmp_path_factory, noise, at):
    """Corrupted payloads: opening, reading and decoding the file raise CodecError only; what both readers accept,
    they read alike."""
    good = bytearray(to_payload(*encode(_update(50), "int8", 8)))
    at = min(at, len(good) - 1)
    good[at : at + len(noise)] = noise
    data = bytes(good)
    try:
        parsed = from_payload(data)
    except CodecError:
        parsed = None
    try:
        with PayloadFile(_file(tmp_path_factory.mktemp("p"), data)) as f:
            tensors = {k: f[k] for k in f}
            if parsed is not None:
                assert f.meta == parsed[1] and sorted(tensors) == sorted(parsed[0])
                for k, v in tensors.items():
                    np.testing.assert_array_equal(v, parsed[0][k])
            dict(LazyUpdate(f, f.meta))
    except CodecError:
        pass


# ---------------------------------------------------------------------------------------------- metrics
def test_run_metrics_counts_and_serialises():
    m = RunMetrics()
    w = m.worker("w0", "cpu")
    w.count("accepted", 0)
    w.count("accepted", 2)
    w.count("stale", 5)
    w.count("rejected")
    w.samples, w.samples_per_s, w.wall_s, w.idle_s = 512, 1000.0, 2.0, 0.1
    m.worker("w1", "vulkan:0").count("accepted", 0)
    d = m.to_dict()
    assert d["totals"]["accepted"] == 3 and d["totals"]["stale"] == 1 and d["totals"]["rejected"] == 1
    assert d["totals"]["staleness_histogram"] == {"0": 2, "2": 1, "5": 1}
    assert d["workers"][0]["idle_fraction"] == 0.05
    assert "w0" in m.postfix()
    with pytest.raises(ValueError, match="unknown outcome"):
        w.count("lost")


def test_run_metrics_count_bytes_and_show_batch_sizes():
    m = RunMetrics()
    a, b = m.worker("w0", "cpu"), m.worker("w1", "cpu")
    a.bytes_sent, a.bytes_received, a.batch_size = 100, 400, 64
    b.bytes_sent = 50
    d = m.to_dict()
    assert d["totals"]["bytes_sent"] == 150 and d["totals"]["bytes_received"] == 400
    assert d["workers"][0]["bytes_sent"] == 100 and d["workers"][1]["bytes_received"] == 0
    assert "b64" in m.postfix()["w0"]


def test_check_update_norm_of_a_large_update_is_accumulated_in_float64():
    x = np.full(1 << 20, 1e-3, np.float32)  # a float32 running sum would drift
    norm = check_update({"w": x}, {"w": ((1 << 20,), "float32")})
    assert norm == pytest.approx(np.sqrt((1 << 20) * float(np.float32(1e-3)) ** 2), rel=1e-12)


def test_weighted_mean_of_one_contribution_is_that_contribution():
    u = _params(7)
    out = weighted_mean([(u, 5.0)])
    for k, v in u.items():
        np.testing.assert_array_equal(out[k], v)
        assert out[k].dtype == np.float32 and out[k] is not v


def test_step_time_model_fits_a_fixed_and_a_per_sample_cost_and_forgets():
    m = StepTimeModel(alpha=0.3)
    assert m.predict(10) is None
    m.observe(64, 0.004)
    assert m.fixed == 0.0 and m.predict(128) == pytest.approx(0.008)  # one batch size: proportional
    r = np.random.default_rng(0)
    for n in r.integers(16, 256, 200):
        m.observe(int(n), 0.003 + 2e-5 * n + r.normal(0, 1e-5))
    assert m.fixed == pytest.approx(0.003, abs=2e-4) and m.per_sample == pytest.approx(2e-5, rel=0.05)
    for n in (32, 64, 128) * 20:  # it got twice as fast per sample
        m.observe(n, 0.003 + 1e-5 * n)
    assert m.per_sample == pytest.approx(1e-5, rel=0.05)
    m.observe(0, 1.0)
    m.observe(8, float("nan"))  # nothing to learn from these
    assert m.per_sample == pytest.approx(1e-5, rel=0.05)
    with pytest.raises(ValueError, match="alpha"):
        StepTimeModel(alpha=0)


def _model(fixed: float, per_sample: float) -> StepTimeModel:
    m = StepTimeModel()
    for n in (32, 128):
        m.observe(n, fixed + per_sample * n)
    return m


def test_split_for_time_equalises_predicted_finish_times():
    models = [_model(0.001, 1e-5), _model(0.002, 4e-5), _model(0.0005, 2e-5)]
    shares = split_for_time(1000, models)
    assert sum(shares) == 1000
    times = [m.predict(n) for m, n in zip(models, shares, strict=True)]
    assert max(times) - min(times) < 1e-4  # within about one sample's time of each other
    # proportional shares would leave the worker with the large fixed cost last
    naive = split_batch(1000, [n / m.predict(n) for m, n in zip(models, [333] * 3, strict=True)])
    assert max(m.predict(n) for m, n in zip(models, naive, strict=True)) > max(times)


def test_split_for_time_leaves_out_a_worker_too_slow_to_help_unless_a_minimum_is_asked():
    fast, hopeless = _model(0.001, 1e-5), _model(0.05, 1e-5)
    assert split_for_time(100, [fast, hopeless]) == [100, 0]
    assert split_for_time(100, [fast, hopeless], minimum=1) == [99, 1]
    assert split_for_time(10, [fast, StepTimeModel()]) == [5, 5]  # not measured yet: even
    assert split_for_time(1, [fast, fast]) in ([1, 0], [0, 1])
    with pytest.raises(ValueError, match="cannot give"):
        split_for_time(1, [fast, fast], minimum=1)
    with pytest.raises(ValueError, match="at least one worker"):
        split_for_time(1, [])


def test_rate_meter_state_round_trip():
    m = RateMeter(alpha=0.5, calibration=2)
    assert RateMeter.from_state(m.state()).rate is None
    for samples, seconds in [(100, 1.0), (300, 1.0), (1000, 1.0)]:
        m.observe(samples, seconds)
        restored = RateMeter.from_state(m.state())
        assert (restored.rate, restored.observations, restored.calibrated) == (m.rate, m.observations, m.calibrated)
    restored.observe(100, 1.0)
    m.observe(100, 1.0)
    assert restored.rate == m.rate


def test_payload_keeps_scalars_scalar():
    tensors, _ = from_payload(to_payload({"v": np.array(3, np.int64), "m": np.ones((2, 3), np.float32)[:, ::2]}))
    assert tensors["v"].shape == () and int(tensors["v"]) == 3
    assert tensors["m"].shape == (2, 2)


def test_global_model_state_survives_a_payload_round_trip():
    g = GlobalModel(_params(), "async", "adam", 1e-2)
    g.apply_gradient(_params(1))
    restored = GlobalModel(_params(), "async", "adam", 1e-2)
    restored.load_state_dict(from_payload(to_payload(g.state_dict()))[0])
    assert restored.version == 1
    g.apply_gradient(_params(2))
    restored.apply_gradient(_params(2))
    for k, v in g.params().items():
        np.testing.assert_array_equal(restored.params()[k], v)
