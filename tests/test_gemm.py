"""The GEMM kernel family (backend/vulkan/gemm.py) and its tuner (autotune.py), on whatever Vulkan adapter exists
(lavapipe in CI): every variant the tuner can pick, every load mode, split-K, f16, int32, odd sizes (1, primes),
batched and broadcast, transposed and non-contiguous operands, forward and backward through autograd.
Sizes stay small: lavapipe runs GEMM at a few GFLOP/s."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

os.environ.setdefault("LP_NUM_THREADS", "0")
os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")

pytest.importorskip("wgpu")

from vkblas import dtypes as D  # noqa: E402
from vkblas.backend.base import NoAdapterError, View, contiguous_strides  # noqa: E402
from vkblas.backend.vulkan import VulkanBackend, autotune, gemm, units  # noqa: E402
from vkblas.backend.vulkan.matmul import encode_matmul  # noqa: E402

RNG = np.random.default_rng(3)
MODES = [("vk", "vi"), ("vi", "vk"), ("si", "sk"), ("sk", "si")]


@pytest.fixture(scope="module")
def vk() -> VulkanBackend:
    try:
        return VulkanBackend()
    except NoAdapterError as e:
        pytest.skip(f"no Vulkan adapter on this machine: {e}")


@pytest.fixture
def fresh(vk, monkeypatch, tmp_path) -> VulkanBackend:
    """The backend with a new tuner, an empty plan cache and the autotune cache file under tmp_path."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    vk.plans.clear()
    vk.__dict__.pop("_gemm_tuner", None)
    yield vk
    vk.plans.clear()
    vk.__dict__.pop("_gemm_tuner", None)


def _specs() -> list[tuple[gemm.Variant, gemm.Spec]]:
    """Each variant once, cycling through load modes, split-K and store widths; the fallback variant in full."""
    out = []
    for i, v in enumerate(gemm.VARIANTS):
        dtype = D.float16 if v.f16_math else D.float32
        a_mode, b_mode = MODES[i % 4]
        out.append((v, gemm.Spec(dtype, i % 2, a_mode, b_mode, i % 3 != 1, i % 3 == 2)))
    small = gemm.BY_NAME["32x32k16.4x4.db"]
    for dtype in (D.float32, D.float16, D.int32):
        for j, (a_mode, b_mode) in enumerate(MODES):
            split = dtype is not D.int32 and j % 2 == 1
            out.append((small, gemm.Spec(dtype, 0, a_mode, b_mode, j < 2, split)))
    return out


def _id(x: object) -> str:
    if isinstance(x, gemm.Variant):
        return x.name
    assert isinstance(x, gemm.Spec)
    tail = "split" if x.split else f"r{x.rank}"
    return f"{x.dtype.name}-{x.a_mode}{x.b_mode}-{'o4' if x.out_vec else 'o1'}-{tail}"


@pytest.mark.parametrize("variant,spec", _specs(), ids=_id)
def test_variant_self_check(vk, variant, spec):
    if spec.dtype is D.float16 and not vk.dev.has_f16:
        pytest.skip("adapter has no shader-f16")
    if not gemm.applicable(variant, spec, vk.dev.limits):
        pytest.skip(f"{variant.name} does not fit this adapter's workgroup limits")
    ok, err = autotune.self_check(vk, variant, spec)
    assert ok, f"{variant.name} {spec}: relative error {err}"


def _view(be, host: np.ndarray, dtype, transposed: bool = False, offset: int = 0, step: int = 1) -> View:
    """A device view with ``host``'s values: stored transposed (read through strides), at an element offset, or
    as every ``step``-th column of a wider matrix (non-contiguous)."""
    stored = np.ascontiguousarray(np.swapaxes(host, -1, -2)) if transposed else host
    if step > 1:
        wide = np.zeros((*stored.shape[:-1], stored.shape[-1] * step), stored.dtype)
        wide[..., ::step] = stored
        st = list(contiguous_strides(wide.shape))
        st[-1] = step
        stored_flat = wide.reshape(-1)
    else:
        st = list(contiguous_strides(stored.shape))
        stored_flat = stored.reshape(-1)
    if transposed:
        st[-1], st[-2] = st[-2], st[-1]
    flat = np.concatenate([np.zeros(offset, stored_flat.dtype), stored_flat])
    return View(be.from_numpy(flat, dtype), host.shape, tuple(st), offset)


def _check(be, a: np.ndarray, b: np.ndarray, dtype=D.float32, la: dict | None = None, lb: dict | None = None) -> None:
    va = _view(be, a, dtype, **(la or {}))
    vb = _view(be, b, dtype, **(lb or {}))
    oshape = (*np.broadcast_shapes(a.shape[:-2], b.shape[:-2]), a.shape[-2], b.shape[-1])
    out = View.of(be.alloc(max(1, int(np.prod(oshape))), dtype), oshape)
    encode_matmul(be, out, va, vb)  # the family directly (backend.matmul validates, then calls the same)
    got = be.to_numpy(out)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    if dtype is D.int32:
        np.testing.assert_array_equal(got, ref.astype(np.int64))
    else:
        tol = 2e-2 if dtype is D.float16 else 1e-5
        scale = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)) + 1e-30
        assert np.max(np.abs(got - ref) / scale) <= tol


@pytest.mark.parametrize(
    "m,k,n",
    [(1, 1, 1), (1, 7, 1), (2, 3, 5), (13, 17, 19), (31, 1, 37), (64, 64, 64), (4, 128, 8), (67, 44, 36), (3, 2053, 5)],
)
def test_sizes_and_layouts(fresh, m, k, n):
    a = RNG.standard_normal((m, k))
    b = RNG.standard_normal((k, n))
    _check(fresh, a, b)
    _check(fresh, a, b, la={"transposed": True})  # A.T @ B in a backward: read through strides
    _check(fresh, a, b, lb={"transposed": True}, la={"offset": 1})
    _check(fresh, a, b, la={"step": 2}, lb={"step": 3})  # non-contiguous slices


def test_batched_broadcast_f16_int(fresh):
    a = RNG.standard_normal((2, 3, 9, 12))
    b = RNG.standard_normal((2, 3, 12, 8))
    _check(fresh, a, b)
    if fresh.dev.has_f16:
        _check(fresh, a, b, D.float16)
    w = RNG.standard_normal((12, 8))  # one weight broadcast over the batch (stride 0)
    va = _view(fresh, a, D.float32)
    vw = View(fresh.from_numpy(w, D.float32), (2, 3, 12, 8), (0, 0, 8, 1), 0)
    out = View.of(fresh.alloc(2 * 3 * 9 * 8, D.float32), (2, 3, 9, 8))
    encode_matmul(fresh, out, va, vw)
    np.testing.assert_allclose(fresh.to_numpy(out), a @ w, rtol=1e-5, atol=1e-5)
    ai = RNG.integers(-9, 9, (5, 11)).astype(np.int32)
    _check(fresh, ai, ai.T.copy(), D.int32)


def test_split_k_default(fresh):
    m, k, n = 4, 2048, 4  # small M*N, large K: the heuristic splits K
    v, splits = gemm.default_choice(D.float32, m, n, k, 1, fresh.dev.limits)
    assert splits > 1
    _check(fresh, RNG.standard_normal((m, k)), RNG.standard_normal((k, n)))


def test_autotune_cache_roundtrip(fresh, monkeypatch, tmp_path):
    monkeypatch.setenv("VKBLAS_AUTOTUNE", "1")
    monkeypatch.setattr(autotune, "MIN_TUNE_FLOPS", 1)
    monkeypatch.setattr(
        gemm, "candidates", lambda *a: [(gemm.BY_NAME["32x32k16.4x4.db"], 1), (gemm.BY_NAME["32x64k16.4x4.db"], 1)]
    )
    a, b = RNG.standard_normal((40, 24)), RNG.standard_normal((24, 40))
    _check(fresh, a, b)
    tuner = autotune.tuner(fresh)
    assert tuner.log and tuner.log[0]["winner"].split("/")[0] in ("32x32k16.4x4.db", "32x64k16.4x4.db")
    assert tuner.log[0]["build_s"] > 0 and tuner.log[0]["time_s"] > 0  # where the first call's wait went
    data = json.loads((tmp_path / "vkblas" / "gemm-autotune.json").read_text())
    assert tuner.key in data and tuner.log[0]["class"] in data[tuner.key]
    # a new process (new tuner) reuses the winner without timing
    fresh.plans.clear()
    fresh.__dict__.pop("_gemm_tuner")
    _check(fresh, a, b)
    assert autotune.tuner(fresh).log == []


def _correlate(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """One output plane of a 3x3, padding-1 correlation of (C, H, W) with (C, 3, 3), in float64."""
    p = np.pad(x.astype(np.float64), ((0, 0), (1, 1), (1, 1)))
    h, wd = x.shape[1:]
    return sum(w[:, i, j, None, None] * p[:, i : i + h, j : j + wd] for i in range(3) for j in range(3)).sum(0)


def test_a_damaged_autotune_cache_is_tuned_again_not_fatal(fresh, monkeypatch, tmp_path):
    """A cache file of the right JSON but the wrong shape (another tool's, a hand edit): entries that are not strings,
    a table that is not a table, a split count this version cannot read are ignored; matmul and conv2d still run,
    and the file is rewritten whole."""
    monkeypatch.setenv("VKBLAS_AUTOTUNE", "1")
    monkeypatch.setattr(autotune, "MIN_TUNE_FLOPS", 1)
    monkeypatch.setattr(gemm, "candidates", lambda *a: [(gemm.BY_NAME["32x32k16.4x4.db"], 1)])
    key = autotune.Tuner(fresh).key
    path = tmp_path / "vkblas" / "gemm-autotune.json"
    path.parent.mkdir(parents=True)
    a, b = RNG.standard_normal((40, 24)), RNG.standard_normal((24, 40))
    for damaged in ([1, 2], {"some|class": 3, "other|class": "32x32k16.4x4.db/abc", "f32|x": "32x32k16.4x4.db/999"}):
        path.write_text(json.dumps({key: damaged, "another adapter": "?"}))
        fresh.plans.clear()
        fresh.__dict__.pop("_gemm_tuner", None)
        t = autotune.tuner(fresh)
        assert all(isinstance(v, str) for v in t.table.values())
        assert t._parse("32x32k16.4x4.db/abc") is None and t._parse("32x32k16.4x4.db/999") is None
        _check(fresh, a, b)
        x, w = (RNG.standard_normal(s).astype(np.float32) for s in ((2, 16, 6, 6), (16, 16, 3, 3)))
        out = View.of(fresh.alloc(2 * 16 * 36, D.float32), (2, 16, 6, 6))
        vx, vw = (View.of(fresh.from_numpy(z.reshape(-1), D.float32), z.shape) for z in (x, w))
        assert fresh.convolution("forward", out, vx, vw, (3, 3), (1, 1), (1, 1), (1, 1))  # reads the table
        want = np.stack([np.stack([_correlate(x[i], w[o]) for o in range(16)]) for i in range(2)])
        np.testing.assert_allclose(fresh.to_numpy(out), want, rtol=1e-4, atol=1e-4)
        data = json.loads(path.read_text())
        assert all(isinstance(v, str) for v in data[key].values()) and t.log


def test_processes_saving_the_autotune_cache_at_once_keep_each_others_entries(tmp_path):
    """Four processes remembering 100 choices each into one cache file, side by side: all 400 are there (without the
    lock, read-merge-replace lost some of them)."""
    script = """
import sys, types
from vkblas.backend.vulkan import autotune
info = {"name": "test", "vendor": 0, "driver": "d", "adapter_type": "CPU"}
be = types.SimpleNamespace(dev=types.SimpleNamespace(info=info, features=set(), limits={}))
t = autotune.Tuner(be)
for i in range(100):
    t.remember(f"p{sys.argv[1]}|{i}", "implicit")
"""
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path))
    procs = [subprocess.Popen([sys.executable, "-c", script, str(p)], env=env) for p in range(4)]
    assert [p.wait(timeout=120) for p in procs] == [0] * 4
    (table,) = json.loads((tmp_path / "vkblas" / "gemm-autotune.json").read_text()).values()
    assert len(table) == 400
    assert not [f for f in (tmp_path / "vkblas").iterdir() if f.name.startswith(".gemm-autotune.")]  # no leftovers


def test_tuning_warms_the_gpu_up_before_its_first_round_counts(fresh, monkeypatch):
    """GPU clocks ramp up over the first work after idling. A ramp under which the first candidate times 4x slow
    had the first round prune it (past ``PRUNE_RATIO``) and pick a slower one, as an H100's first tuning at 4096^3
    did (a tile 1.38x slower). The tuner first times its first candidate until two timings agree, so the ramp is
    spent before the round, and not again while it keeps the GPU busy."""
    monkeypatch.setenv("VKBLAS_AUTOTUNE", "1")
    monkeypatch.setattr(autotune, "MIN_TUNE_FLOPS", 1)
    fast, slow = gemm.BY_NAME["32x32k16.4x4.db"], gemm.BY_NAME["32x64k16.4x4.db"]
    monkeypatch.setattr(gemm, "candidates", lambda *a: [(fast, 1), (slow, 1)])
    calls, first = [], []

    def ramped(self, gp, *views):  # true times 1.0 and 1.3, 10 ms of wall each; the first 5 ms of work 4x slow
        now = time.perf_counter()
        first.append(now)
        calls.append(gp.variant.name)
        time.sleep(0.01)
        cold = 4.0 if now - first[0] < 0.005 else 1.0
        return cold * (1.0 if gp.variant is fast else 1.3)

    monkeypatch.setattr(autotune.Tuner, "time", ramped)
    a, b = RNG.standard_normal((40, 24)), RNG.standard_normal((24, 40))
    _check(fresh, a, b)
    t = autotune.tuner(fresh)
    assert t.log[0]["winner"] == f"{fast.name}/1" and t.log[0]["warm_s"] > 0
    warmups = len(calls) - 4  # two rounds of two candidates
    assert warmups >= 10 and calls[:warmups] == [fast.name] * warmups
    calls.clear()
    _check(fresh, RNG.standard_normal((40, 600)), RNG.standard_normal((600, 40)))  # another class, at once
    assert len(calls) == 4 and t.log[1]["warm_s"] == 0.0


def test_autotune_shows_progress_on_long_runs(fresh, monkeypatch, capsys):
    """A tuning run that goes on past PROGRESS_DELAY_S shows a bar on stderr (a large convolution's first call
    compiles hundreds of candidates): it counts building and every timing pass of every candidate, the one that
    cannot build included, to its total."""
    monkeypatch.setenv("VKBLAS_AUTOTUNE", "1")
    monkeypatch.setattr(autotune, "MIN_TUNE_FLOPS", 1)
    monkeypatch.setattr(autotune, "PROGRESS_DELAY_S", 0.0)
    bad = gemm.BY_NAME["64x64k16.4x4.db"]
    pairs = [(gemm.BY_NAME["32x32k16.4x4.db"], 1), (gemm.BY_NAME["32x64k16.4x4.db"], 1), (bad, 1)]
    monkeypatch.setattr(gemm, "candidates", lambda *a: pairs)
    real = gemm.build_plan

    def build(be, out, a, b, v, *rest):
        if v is bad:
            raise ValueError("does not fit")
        return real(be, out, a, b, v, *rest)

    monkeypatch.setattr(gemm, "build_plan", build)
    bars = []
    real_progress = autotune._progress
    monkeypatch.setattr(autotune, "_progress", lambda *a: bars.append(real_progress(*a)) or bars[-1])
    _check(fresh, RNG.standard_normal((40, 24)), RNG.standard_normal((24, 40)))
    assert "vkblas: tuning GEMM float32|" in capsys.readouterr().err
    total = len(pairs) * (1 + autotune._PASSES)
    assert len(bars) == 1 and bars[0].total == total and bars[0].n == total


def test_autotune_times_only_the_first_rounds_contenders_again(fresh, monkeypatch):
    """Every candidate is timed once; only those within PRUNE_RATIO of the first round's fastest a second time (a
    first call's wait on a GPU is mostly timing). The winner is the fastest best-of-rounds; the log counts the
    pruned, and the progress bar still adds up to its total."""
    monkeypatch.setenv("VKBLAS_AUTOTUNE", "1")
    monkeypatch.setattr(autotune, "MIN_TUNE_FLOPS", 1)
    monkeypatch.setattr(autotune, "PROGRESS_DELAY_S", 0.0)
    names = ["32x32k16.4x4.db", "32x64k16.4x4.db", "64x64k16.4x4.db", "32x128k16.4x8.db"]
    pairs = [(gemm.BY_NAME[n], 1) for n in names]
    monkeypatch.setattr(gemm, "candidates", lambda *a: pairs)
    # first round: 1.0, 2.0 (within 2.5x), then hopeless ones; the second candidate is faster in round two
    monkeypatch.setattr(autotune.Tuner, "_warm_up", lambda self, *a: None)  # this timer counts its calls
    first = dict(zip(names, [1.0, 2.0, 2.6, 9.0], strict=True))
    second = {names[0]: 0.9, names[1]: 0.5}
    timed = []

    def fake_time(self, gp, out, a, b, bias=None):
        name = gp.variant.name
        timed.append(name)
        return (first if timed.count(name) == 1 else second)[name] * 1e-3

    monkeypatch.setattr(autotune.Tuner, "time", fake_time)
    bars = []
    real_progress = autotune._progress
    monkeypatch.setattr(autotune, "_progress", lambda *a: bars.append(real_progress(*a)) or bars[-1])
    _check(fresh, RNG.standard_normal((40, 24)), RNG.standard_normal((24, 40)))
    assert sorted(timed) == sorted(names + names[:2])
    log = autotune.tuner(fresh).log[0]
    assert log["winner"] == f"{names[1]}/1" and log["pruned"] == len(names) - 2
    assert bars[0].n == bars[0].total == len(pairs) * (1 + autotune._PASSES)


def test_autotune_compiles_candidates_on_threads_once_per_source(fresh, monkeypatch):
    """A tuning run compiles its candidates' kernels and their self-checks' kernels on a pool of threads, each
    source once (a split and an unsplit f32 variant share one: a second thread waits for the first); the checks
    run and the timing stays on the calling thread, which compiles no GEMM itself; every candidate is timed, and
    the result is a correct product."""
    import threading

    monkeypatch.setenv("VKBLAS_AUTOTUNE", "1")
    monkeypatch.setattr(autotune, "MIN_TUNE_FLOPS", 1)
    monkeypatch.setattr(autotune, "COMPILE_THREADS", 3)
    names = ["32x32k16.4x4.db", "32x64k16.4x4.db", "64x64k16.4x4.db"]
    pairs = [(gemm.BY_NAME[n], s) for n in names for s in (1, 2, 4)]
    monkeypatch.setattr(gemm, "candidates", lambda *a: pairs)
    dev, compiled = fresh.dev, []
    real_compile = dev._compile

    def compile_(source, nbuf):
        compiled.append((source, threading.get_ident()))
        return real_compile(source, nbuf)

    monkeypatch.setattr(dev, "_compile", compile_)
    sizes = {f"@workgroup_size({gemm.BY_NAME[n].threads})" for n in names}
    monkeypatch.setattr(dev, "_kernels", {s: k for s, k in dev._kernels.items() if not any(z in s for z in sizes)})
    # two broadcast batch dims (they do not coalesce): the self-check's problem, one batch dim, is another kernel
    ha, hb = RNG.standard_normal((2, 1, 40, 600)), RNG.standard_normal((1, 3, 600, 44))
    a = View(fresh.from_numpy(ha.reshape(-1), D.float32), (2, 3, 40, 600), (24000, 0, 600, 1))
    b = View(fresh.from_numpy(hb.reshape(-1), D.float32), (2, 3, 600, 44), (0, 26400, 44, 1))
    out = View.of(fresh.alloc(2 * 3 * 40 * 44, D.float32), (2, 3, 40, 44))
    encode_matmul(fresh, out, a, b)
    np.testing.assert_allclose(fresh.to_numpy(out), ha @ hb, rtol=1e-4, atol=1e-3)
    sources = [src for src, _ in compiled]
    assert len(sources) == len(set(sources))  # none compiled twice
    on_pool = {src for src, t in compiled if t != threading.get_ident() and "var<workgroup> As" in src}
    assert len(on_pool) >= len(names)  # every variant's kernel, on the pool
    assert not [src for src, t in compiled if t == threading.get_ident() and "var<workgroup> As" in src]
    by = gemm.BY_NAME
    checks = {gemm.source(by[n], autotune.check_spec(by[n], s)) for n, s in autotune.tuner(fresh).verified}
    assert checks & on_pool  # the self-checks' kernels among them
    (entry,) = autotune.tuner(fresh).log
    assert set(entry["seconds"]) == {f"{v.name}/{s}" for v, s in pairs}
    assert 0 < entry["compile_s"] <= entry["build_s"]


def test_device_makes_one_bind_group_layout_per_binding_count_across_threads(vk):
    """Kernels compile on several threads (the tuner): the layouts of a binding count are made once, and the
    pipeline layout found beside a bind group layout is the one made with it."""
    import threading

    dev, nbuf, got = vk.dev, 11, []
    dev._bgls.pop(nbuf, None)
    dev._layouts.pop(nbuf, None)
    start = threading.Barrier(6)

    def make():
        start.wait()
        got.append((dev.bind_group_layout(nbuf), dev._layouts[nbuf]))

    threads = [threading.Thread(target=make) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(b) for b, _ in got}) == 1 and len({id(lay) for _, lay in got}) == 1
    assert got[0] == (dev._bgls[nbuf], dev._layouts[nbuf])


def test_autotune_tunes_each_batch_count_apart(fresh, monkeypatch):
    """A batched GEMM of 2 and one of 40 (a convolution at two batch sizes: the same per-image shape) are two shape
    classes; a choice made for the small batch must not be reused for the large one."""
    monkeypatch.setenv("VKBLAS_AUTOTUNE", "1")
    monkeypatch.setattr(autotune, "MIN_TUNE_FLOPS", 1)
    monkeypatch.setattr(gemm, "candidates", lambda *a: [(gemm.BY_NAME["32x32k16.4x4.db"], 1)])
    for n in (2, 40, 33):  # 33 rounds up to 40's class
        _check(fresh, RNG.standard_normal((n, 20, 24)), RNG.standard_normal((n, 24, 36)))
    classes = [e["class"] for e in autotune.tuner(fresh).log]
    assert len(classes) == 2 and "|b2|" in classes[0] and "|b64|" in classes[1]


def test_autotune_off(fresh, monkeypatch):
    monkeypatch.setenv("VKBLAS_AUTOTUNE", "0")
    assert not autotune.Tuner(fresh).enabled


def test_self_check_disables_wrong_variant(fresh, monkeypatch):
    real = autotune.self_check
    bad = gemm.default_choice(D.float32, 50, 50, 20, 1, fresh.dev.limits)[0].name

    def fake(be, v, spec):
        return (False, 1.0) if v.name == bad else real(be, v, spec)

    monkeypatch.setattr(autotune, "self_check", fake)
    with pytest.warns(RuntimeWarning, match="disabled"):
        _check(fresh, RNG.standard_normal((50, 20)), RNG.standard_normal((20, 50)))
    assert bad in autotune.tuner(fresh).disabled


def test_startup_check_verifies_defaults_and_disables_a_wrong_one(fresh, monkeypatch):
    autotune.startup_check(fresh)
    checked = {name for name, _ in autotune.tuner(fresh).verified}
    usable = {
        n for n in autotune.STARTUP_VARIANTS if gemm.applicable(gemm.BY_NAME[n], _common_spec(), fresh.dev.limits)
    }
    assert usable and usable <= checked

    fresh.__dict__.pop("_gemm_tuner", None)
    real, bad = autotune.self_check, "64x64k16.4x4.db"
    monkeypatch.setattr(
        autotune, "self_check", lambda be, v, spec: (False, 1.0) if v.name == bad else real(be, v, spec)
    )
    with pytest.warns(RuntimeWarning, match=f"{bad}.*disabled"):
        autotune.startup_check(fresh)
    assert autotune.tuner(fresh).disabled == {bad}


def _common_spec() -> gemm.Spec:
    return gemm.Spec(D.float32, 0, "vk", "vi", True, False)


def test_autograd_forward_backward():
    vb = pytest.importorskip("vkblas")
    if not any(d.startswith("vulkan") for d in vb.devices()):
        pytest.skip("no Vulkan adapter")
    x = RNG.standard_normal((7, 13)).astype(np.float32)
    w = RNG.standard_normal((5, 13)).astype(np.float32)
    tx = vb.tensor(x, device="vulkan", requires_grad=True)
    tw = vb.tensor(w, device="vulkan", requires_grad=True)
    y = tx @ tw.T  # Linear: B read transposed; backward needs dY @ W and dY.T @ X
    g = RNG.standard_normal((7, 5)).astype(np.float32)
    y.backward(vb.tensor(g, device="vulkan"))
    np.testing.assert_allclose(y.detach().numpy(), x @ w.T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(tx.grad.numpy(), g @ w, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(tw.grad.numpy(), g.T @ x, rtol=1e-5, atol=1e-5)


def _bias_case(be, m: int, k: int, n: int, dtype=D.float32) -> tuple[View, View, View, np.ndarray]:
    a, b = RNG.standard_normal((m, k)), RNG.standard_normal((k, n))
    bias = RNG.standard_normal(n)
    bias[: min(n, 3)] = [np.inf, -np.inf, np.nan][: min(n, 3)]  # special values pass through the epilogue's add
    ref = a.astype(np.float64) @ b.astype(np.float64) + bias
    return _view(be, a, dtype), _view(be, b, dtype, transposed=True), _view(be, bias, dtype), ref


@pytest.mark.parametrize("variant", [v for v in gemm.VARIANTS if not v.f16_math], ids=lambda v: v.name)
def test_every_variant_adds_a_column_bias_in_its_epilogue(fresh, variant):
    """``out = a @ b + bias[n]`` (a linear layer) in one kernel: edge tiles in both directions, N not a multiple of
    4 (scalar stores) and one that is (vec4 stores); for f32 without split-K, the bits of matmul then add."""
    if not gemm.applicable(variant, _common_spec(), fresh.dev.limits):
        pytest.skip(f"{variant.name} does not fit this adapter's workgroup limits")
    for m, k, n in ((37, 21, 10), (70, 33, 132)):
        va, vb, vbias, ref = _bias_case(fresh, m, k, n)
        fused = View.of(fresh.alloc(m * n, D.float32), (m, n))
        gp = gemm.build_plan(fresh, fused, va, vb, variant, 1, bias="cols")
        gemm.record(fresh, gp, fused, va, vb, vbias)
        plain = View.of(fresh.alloc(m * n, D.float32), (m, n))
        gemm.record(fresh, gemm.build_plan(fresh, plain, va, vb, variant, 1), plain, va, vb)
        fresh.elementwise("add", plain, [plain, View(vbias.storage, (m, n), (0, 1), 0)])
        got = fresh.to_numpy(fused)
        np.testing.assert_array_equal(got, fresh.to_numpy(plain))
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-4)


def test_matmul_bias_split_k_f16_and_refusals(fresh):
    # split-K: the bias joins split 0's partial sums (added once, not once per split)
    m, k, n = 6, 3000, 9
    va, vb, vbias, ref = _bias_case(fresh, m, k, n)
    out = View.of(fresh.alloc(m * n, D.float32), (m, n))
    gp = gemm.build_plan(fresh, out, va, vb, gemm.BY_NAME["32x32k16.4x4.db"], 8, bias="cols")
    assert gp.splits == 8
    gemm.record(fresh, gp, out, va, vb, vbias)
    scale = np.abs(ref[:, 3:]).max()
    np.testing.assert_allclose(fresh.to_numpy(out), ref, rtol=1e-5, atol=1e-5 * scale)
    if fresh.dev.has_f16:
        va, vb, vbias, ref = _bias_case(fresh, 20, 40, 12, D.float16)
        out = View.of(fresh.alloc(20 * 12, D.float16), (20, 12))
        assert fresh.matmul_bias(out, va, vb, vbias)
        np.testing.assert_allclose(fresh.to_numpy(out).astype(np.float64), ref, rtol=2e-2, atol=5e-2)
    # what the epilogue cannot read is left to the caller's composition: a strided bias, another dtype
    va, vb, vbias, _ = _bias_case(fresh, 5, 7, 4)
    out = View.of(fresh.alloc(20, D.float32), (5, 4))
    strided = View(vbias.storage, (2,), (2,), 0)
    assert not fresh.matmul_bias(
        View.of(fresh.alloc(10, D.float32), (5, 2)), va, _view(fresh, np.ones((7, 2)), D.float32), strided
    )
    assert not fresh.matmul_bias(out, va, vb, _view(fresh, np.ones(4), D.int32))


def _sums_case(be, m: int, k: int, n: int, dtype=D.float32) -> tuple[View, View, View, np.ndarray, np.ndarray]:
    """a (read through its transpose, as a layer's dY^T), b, a NaN-filled (M,) target for the row sums, and the
    float64 product and row sums; a's rows hold an inf, a -inf and a NaN where there are rows enough."""
    a, b = RNG.standard_normal((m, k)), RNG.standard_normal((k, n))
    for r, x in enumerate([np.inf, -np.inf, np.nan][: max(0, m - 3)]):
        a[r, (5 * r) % k] = x
    a, b = (x.astype(np.float16 if dtype is D.float16 else np.float32).astype(np.float64) for x in (a, b))
    sums = _view(be, np.full(m, np.nan), dtype)
    with np.errstate(invalid="ignore"):  # the NaN and inf rows' products
        ref = a @ b
    return _view(be, a, dtype, transposed=True), _view(be, b, dtype), sums, ref, a.sum(1)


@pytest.mark.parametrize("variant", gemm.VARIANTS, ids=lambda v: v.name)
def test_every_variant_sums_the_rows_of_a_beside_its_product(fresh, variant):
    """``bias[m] = sum_k a[m, k]`` written by the GEMM of ``a @ b`` (a layer's bias gradient beside its weight
    gradient): edge tiles in M, N and K (several tile columns: only the first sums), M past one tile row, inf and
    NaN rows; without and with split-K (the partial sums' second pass); the product unchanged."""
    dtype = D.float16 if variant.f16_math else D.float32
    if dtype is D.float16 and not fresh.dev.has_f16:
        pytest.skip("no f16 on this adapter")
    spec = gemm.Spec(dtype, 0, "vi", "vi", True, False, bias="sum_rows")
    if not gemm.applicable(variant, spec, fresh.dev.limits):
        pytest.skip(f"{variant.name} does not fit this adapter's workgroup limits")
    for (m, k, n), splits in (((37, 45, 70), 1), ((2 * variant.bm + 5, 300, 9), 4)):
        # f16 math rounds each K tile's partial products to f16: an error growing as sqrt(K), as the values do
        tol = dict(rtol=2e-2, atol=1e-2 * np.sqrt(k)) if dtype is D.float16 else dict(rtol=1e-5, atol=1e-4)
        va, vb, vsums, ref, ref_sums = _sums_case(fresh, m, k, n, dtype)
        out = View.of(fresh.alloc(m * n, dtype), (m, n))
        gp = gemm.build_plan(fresh, out, va, vb, variant, splits, bias="sum_rows")
        assert gp.splits == splits
        gemm.record(fresh, gp, out, va, vb, vsums)
        got = fresh.to_numpy(out).astype(np.float64)
        finite = np.isfinite(ref).all(1)
        np.testing.assert_allclose(got[finite], ref[finite], **tol)
        np.testing.assert_allclose(fresh.to_numpy(vsums).astype(np.float64), ref_sums, **tol)


def test_row_sums_are_refused_where_they_do_not_apply(fresh):
    va, vb, vsums, _, _ = _sums_case(fresh, 6, 5, 4)
    out = View.of(fresh.alloc(24, D.float32), (6, 4))
    with pytest.raises(ValueError, match="row sums"):  # not beside an epilogue op
        gemm.make_spec(out, va, vb, False, bias="sum_rows", act="relu")
    a3 = View(va.storage, (2, 3, 5), (15, 5, 1), 0)
    out3 = View.of(fresh.alloc(24, D.float32), (2, 3, 4))
    b3 = View(vb.storage, (2, 5, 4), (0, 4, 1), 0)
    with pytest.raises(ValueError, match="row sums"):  # one matrix product, not a batch
        gemm.make_spec(out3, a3, b3, False, bias="sum_rows")
    with pytest.raises(ValueError, match="bias mode"):
        gemm.make_spec(out, va, vb, False, bias="sum")


def test_linear_with_bias_is_one_gemm_dispatch_forward_and_two_backward():
    """nn.Linear's forward on vulkan is one dispatch (the bias in the GEMM's epilogue), its backward two (the bias
    gradient written by the weight gradient's GEMM), with its values and gradients those of the float64
    reference."""
    vb = pytest.importorskip("vkblas")
    if not any(d.startswith("vulkan") for d in vb.devices()):
        pytest.skip("no Vulkan adapter")
    layer = vb.nn.Linear(13, 10).to("vulkan")
    x = vb.tensor(RNG.standard_normal((7, 13)).astype(np.float32), device="vulkan", requires_grad=True)
    layer(x)  # plans built outside the count
    rt = layer.weight._backend.rt
    before = rt.dispatches
    y = layer(x)
    assert rt.dispatches - before == 1
    w, bias = layer.weight.detach().numpy().astype(np.float64), layer.bias.detach().numpy().astype(np.float64)
    xh = x.detach().numpy().astype(np.float64)
    np.testing.assert_allclose(y.detach().numpy(), xh @ w.T + bias, rtol=1e-5, atol=1e-5)
    g = RNG.standard_normal((7, 10))
    g[3, 4] = np.inf
    gt = vb.tensor(g.astype(np.float32), device="vulkan")
    layer(x).backward(gt)  # plans built outside the count
    x.grad = layer.weight.grad = layer.bias.grad = None
    y = layer(x)
    before = rt.dispatches
    y.backward(gt)
    # the input gradient's GEMM, and the weight gradient's, which writes the bias gradient too (its row sums)
    assert rt.dispatches - before == 2
    np.testing.assert_allclose(layer.bias.grad.numpy(), g.sum(0), rtol=1e-5, atol=1e-5)
    # the inf reaches weight-gradient row 4 and input-gradient row 3 (inf or NaN there); the other rows compare
    keep_w, keep_x = np.arange(10) != 4, np.arange(7) != 3
    np.testing.assert_allclose(layer.weight.grad.numpy()[keep_w], (g.T @ xh)[keep_w], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(x.grad.numpy()[keep_x], (g @ w)[keep_x], rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------ an elementwise op in the epilogue (epilogue.py)
def _act_case(be, m: int, k: int, n: int) -> tuple[View, View, np.ndarray, View]:
    """Operands whose product has NaN, +-inf, zeros and both signs, and a saved ReLU output with zeros, negatives,
    positives and NaN (relu_grad's second operand)."""
    a, b = RNG.standard_normal((m, k)), RNG.standard_normal((k, n))
    a[0, 0], a[1 % m, :] = np.nan, 0.0
    if m > 2:
        a[2, 0] = np.inf
    saved = RNG.choice([0.0, -1.0, 2.0, np.nan], size=(m, n))
    return _view(be, a, D.float32), _view(be, b, D.float32, transposed=True), saved, _view(be, saved, D.float32)


def _act_pair(be, gp_fused, gp_plain, op, va, vb, vsaved, m, n) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(fused out, fused op result, the op run as its own dispatch on the plain GEMM's out)."""
    new = [View.of(be.alloc(m * n, D.float32), (m, n)) for _ in range(4)]
    out, res, plain, ref = new
    extra = (res,) if op == "relu" else (res, vsaved)
    gemm.record(be, gp_fused, out, va, vb, act=extra)
    gemm.record(be, gp_plain, plain, va, vb)
    be.elementwise(op, ref, [plain] if op == "relu" else [plain, vsaved])
    np.testing.assert_array_equal(be.to_numpy(out), be.to_numpy(plain))  # the GEMM's own output is still stored
    return be.to_numpy(out), be.to_numpy(res), be.to_numpy(ref)


@pytest.mark.parametrize("variant", [v for v in gemm.VARIANTS if not v.f16_math], ids=lambda v: v.name)
def test_every_variant_runs_relu_and_its_mask_in_its_epilogue(fresh, variant):
    """``relu(a @ b)`` and ``relu_grad(a @ b, saved)`` in the GEMM's epilogue: the same bits as the separate
    elementwise dispatch, NaN and inf included, on edge tiles with scalar (N % 4 != 0) and vec4 stores."""
    if not gemm.applicable(variant, _common_spec(), fresh.dev.limits):
        pytest.skip(f"{variant.name} does not fit this adapter's workgroup limits")
    for m, k, n in ((37, 21, 10), (70, 33, 132)):
        va, vb, saved, vsaved = _act_case(fresh, m, k, n)
        probe = View.of(fresh.alloc(m * n, D.float32), (m, n))
        plain_gp = gemm.build_plan(fresh, probe, va, vb, variant, 1)
        for op in ("relu", "relu_grad"):
            gp = gemm.build_plan(fresh, probe, va, vb, variant, 1, act=op)
            assert gp.spec.act == op and gp.splits == 1
            out, res, ref = _act_pair(fresh, gp, plain_gp, op, va, vb, vsaved, m, n)
            np.testing.assert_array_equal(res, ref)
            want = np.where(out < 0, 0, out) if op == "relu" else np.where(saved <= 0, 0, out)
            np.testing.assert_array_equal(res, want.astype(np.float32))


@pytest.mark.parametrize("ty", ["f32", "vec4<f32>", "f16", "vec4<f16>"])
def test_epilogue_conditions_test_nan_by_bits(ty):
    """The H200's driver folded the fused ``select(v, 0, v < 0)`` into ``max(v, 0)``: relu(NaN) became 0 there
    while the separate dispatch kept NaN (the test above failed on it; lavapipe does not fold, so it passes here).
    Each epilogue condition carries a NaN bit test of its float operand, as the elementwise table's comparisons do
    (``wgsl.guard_nan``), which no float mode can fold away."""
    for act, tested in (("relu", "v"), ("relu_grad", "s")):
        code = gemm._epilogue(act, "v", "s", ty)
        u = "vec4<u32>" if ty.startswith("vec4") else "u32"
        f = "vec4<f32>" if ty.startswith("vec4") else "f32"
        assert f"bitcast<{u}>({f}({tested}))" in code and "0x7f800000u" in code, code


def test_epilogue_op_with_split_k_joins_the_sum_of_the_partials(fresh):
    m, k, n = 6, 3000, 9
    va, vb, _, vsaved = _act_case(fresh, m, k, n)
    probe = View.of(fresh.alloc(m * n, D.float32), (m, n))
    v = gemm.BY_NAME["32x32k16.4x4.db"]
    plain_gp = gemm.build_plan(fresh, probe, va, vb, v, 8)
    for op in ("relu", "relu_grad"):
        gp = gemm.build_plan(fresh, probe, va, vb, v, 8, act=op)
        assert gp.splits == 8 and gp.act == op and not gp.spec.act  # the partials are plain; the sum does the op
        _, res, ref = _act_pair(fresh, gp, plain_gp, op, va, vb, vsaved, m, n)
        np.testing.assert_array_equal(res, ref)
    with pytest.raises(ValueError, match="epilogue"):
        gemm.make_spec(probe, va, vb, True, act="relu")  # split partials cannot apply it
    with pytest.raises(ValueError, match="takes 1 views"):
        gemm.record(fresh, gemm.build_plan(fresh, probe, va, vb, v, 1, act="relu"), probe, va, vb)


def _mm_relu(be, a: np.ndarray, b: np.ndarray) -> tuple[View, View, View, View]:
    va, vb = _view(be, a, D.float32), _view(be, b, D.float32)
    m, n = a.shape[0], b.shape[1]
    return va, vb, View.of(be.alloc(m * n, D.float32), (m, n)), View.of(be.alloc(m * n, D.float32), (m, n))


def test_backend_folds_the_relu_after_a_matmul_and_keeps_every_order(fresh, monkeypatch):
    """Through the backend's own calls: matmul then relu of its output is one dispatch with both results right;
    anything else in between (a read, another op, an upload) records the GEMM first, in its place."""
    from vkblas.backend.vulkan import epilogue

    a, b = RNG.standard_normal((9, 12)), RNG.standard_normal((12, 20))
    ref = a.astype(np.float32).astype(np.float64) @ b.astype(np.float32).astype(np.float64)
    va, vb, out, act = _mm_relu(fresh, a, b)
    fresh.matmul(out, va, vb)  # plans built (and tuned) outside the count
    fresh.elementwise("relu", act, [out])
    rt = fresh.rt
    before = rt.dispatches
    fresh.matmul(out, va, vb)
    assert rt.held is not None
    fresh.elementwise("relu", act, [out])
    assert rt.dispatches - before == 1
    np.testing.assert_allclose(fresh.to_numpy(out), ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(fresh.to_numpy(act), np.maximum(fresh.to_numpy(out), 0))
    # in-place relu of the product (F.relu(inplace=True)): fused too
    before = rt.dispatches
    fresh.matmul(out, va, vb)
    fresh.elementwise("relu", out, [out])
    assert rt.dispatches - before == 1
    np.testing.assert_array_equal(fresh.to_numpy(out), fresh.to_numpy(act))
    # not the GEMM's output exactly (a part of it; another tensor): two dispatches, the same values
    other = _view(fresh, RNG.standard_normal((9, 20)), D.float32)
    for x, y in ((View(out.storage, (4, 20), (20, 1), 20), View(act.storage, (4, 20), (20, 1), 0)), (other, act)):
        before = rt.dispatches
        fresh.matmul(out, va, vb)
        fresh.elementwise("relu", y, [x])
        assert rt.dispatches - before == 2
        np.testing.assert_array_equal(fresh.to_numpy(y), np.maximum(fresh.to_numpy(x), 0))
    # the op's result in a GEMM operand's buffer would be written while the GEMM reads it: not fused
    before = rt.dispatches
    fresh.matmul(out, va, vb)
    fresh.elementwise("relu", View(vb.storage, (9, 20), (20, 1), 0), [out])
    assert rt.dispatches - before == 2
    # an upload waits for the held GEMM that reads its buffer's old contents
    va, vb, out, act = _mm_relu(fresh, a, b)
    fresh.matmul(out, va, vb)
    fresh.rt.upload(va.storage.buffer, memoryview(np.zeros(9 * 12, np.float32)).cast("B"))
    np.testing.assert_allclose(fresh.to_numpy(out), ref, rtol=1e-5, atol=1e-5)
    # switched off: never held
    monkeypatch.setattr(epilogue, "ENABLED", False)
    fresh.matmul(out, va, vb)
    assert rt.held is None


def test_a_held_stream_k_gemm_takes_the_relu_as_its_tile_unstreamed(fresh):
    """A stream-K GEMM (tiles shared between workgroups, a fix-up pass) followed by a ReLU of its output: the op
    joins the epilogue of the same tile run one workgroup per output tile, one dispatch, both results right (the
    H100's tuner picked stream-K for an MLP's input gradient, and the fused rebuild refused it)."""
    a, b = RNG.standard_normal((40, 600)), RNG.standard_normal((600, 40))
    ref = a.astype(np.float32).astype(np.float64) @ b.astype(np.float32).astype(np.float64)
    va, vb, out, act = _mm_relu(fresh, a, b)
    tile = gemm.BY_NAME["32x32k16.4x4.db"]
    gp = gemm.build_plan(fresh, out, va, vb, gemm.streamed(tile, 6), 1)
    assert gp.reduce is not None  # 4 tiles of 38 K iterations over 6 workgroups: shared tiles, a fix-up pass
    from vkblas.backend.vulkan import epilogue

    before = fresh.rt.dispatches  # (reading the count records a held GEMM)
    epilogue.record(fresh, gp, out, va, vb)
    assert fresh.rt.held is not None
    fresh.elementwise("relu", act, [out])
    assert fresh.rt.dispatches - before == 1
    # K = 600: float32 sums of |values| up to ~400
    np.testing.assert_allclose(fresh.to_numpy(out), ref, rtol=1e-5, atol=1e-3)
    np.testing.assert_array_equal(fresh.to_numpy(act), np.maximum(fresh.to_numpy(out), 0))


def _relu_net_step(vkb, monkeypatch, fused: bool, capture: bool) -> tuple[list[np.ndarray], int]:
    """One training step of a small conv + MLP net with every ReLU after a GEMM: its parameters after an Adam
    step and the step's dispatches (eager, or a replay of the captured step)."""
    from vkblas import graphs, nn
    from vkblas.backend.vulkan import epilogue

    monkeypatch.setattr(epilogue, "ENABLED", fused)
    vkb.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Conv2d(4, 16, 3), nn.ReLU(), nn.Flatten(),
        nn.Linear(16 * 4 * 4, 24), nn.ReLU(), nn.Linear(24, 5),
    ).to("vulkan")  # fmt: skip
    opt = vkb.optim.Adam(net.parameters(), lr=1e-2, capturable=capture)
    rng = np.random.default_rng(5)
    x = vkb.tensor(rng.standard_normal((6, 1, 8, 8)).astype(np.float32), device="vulkan")
    y = vkb.tensor(rng.integers(0, 5, 6).astype(np.int32), device="vulkan")

    def step():
        opt.zero_grad()
        loss = nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()

    step()
    rt = x._backend.rt
    if capture:
        g = graphs.Graph()
        with graphs.capture(g, device="vulkan"):
            step()
        before = rt.dispatches
        g.replay()
    else:
        before = rt.dispatches
        step()
    count = rt.dispatches - before
    return [p.detach().numpy() for p in net.parameters()], count


@pytest.mark.parametrize("capture", [False, True], ids=["eager", "captured"])
def test_training_step_with_epilogue_relus_has_the_bits_of_separate_ones(fresh, monkeypatch, capture):
    """Forward: conv, conv and linear each take their ReLU into the epilogue; backward: both linears' and the
    second conv's input gradients take the ReLU mask (six dispatches a step fewer; the Flatten between is a view),
    and the step's bits are those of the separate dispatches."""
    vkb = pytest.importorskip("vkblas")
    base, n_base = _relu_net_step(vkb, monkeypatch, False, capture)
    fused, n_fused = _relu_net_step(vkb, monkeypatch, True, capture)
    assert n_base - n_fused == 6
    for p, q in zip(base, fused, strict=True):
        np.testing.assert_array_equal(p, q)


def test_convolution_only_variants_are_timed_only_for_gathered_gemms():
    limits = {"max-compute-invocations-per-workgroup": 256, "max-compute-workgroup-storage-size": 49152}
    names = {v.name for v, _ in gemm.candidates(D.float32, 64, 576, 288, 512, limits)}
    gathered = {v.name for v, _ in gemm.candidates(D.float32, 64, 576, 288, 512, limits, gathered=True)}
    assert gemm.CONV_ONLY <= set(gemm.BY_NAME) and not names & gemm.CONV_ONLY and gemm.CONV_ONLY <= gathered


_REARRANGED = [
    (gemm.BY_NAME[name], warp, band)
    for name in ("32x32k16.4x4.db", "64x64k16.4x4.db", "32x128k16.4x8.db", "128x128k8.8x8.db")
    for warp, band in gemm.LAYOUTS
]


@pytest.mark.parametrize(
    "base,warp,band", _REARRANGED, ids=lambda x: x.name if isinstance(x, gemm.Variant) else str(x).replace(" ", "")
)
def test_rearranged_variants_pass_the_self_check_in_every_load_mode(vk, base, warp, band):
    """The layout knobs only move threads and workgroups: every load mode, split-K and both store widths stay exact."""
    v = gemm.rearranged(base, warp, band)
    assert v.name.startswith(base.name) and v.name != base.name
    for i, (a_mode, b_mode) in enumerate(MODES):
        spec = gemm.Spec(D.float32, i % 2, a_mode, b_mode, i != 1, i == 3)
        if not gemm.applicable(v, spec, vk.dev.limits):
            pytest.skip(f"{v.name} does not fit this adapter's workgroup limits")
        ok, err = autotune.self_check(vk, v, spec)
        assert ok, f"{v.name} {spec}: relative error {err}"


@pytest.mark.parametrize("band", [1, 3, 8])
def test_a_banded_walk_covers_every_tile_once(vk, band):
    """7 x 5 tiles of 32 x 32 (the last row and column partial): bands of 3 leave a short band of 1 at the bottom."""
    v = gemm.rearranged(gemm.BY_NAME["32x32k16.4x4.db"], (8, 4), band)
    a, b = RNG.standard_normal((7 * 32 - 5, 40)), RNG.standard_normal((40, 5 * 32 - 3))
    va, vb = _view(vk, a.astype(np.float32), D.float32), _view(vk, b.astype(np.float32), D.float32)
    nan = np.full(a.shape[0] * b.shape[1], np.nan, np.float32)  # a tile no workgroup writes keeps its NaN
    out = View.of(vk.from_numpy(nan, D.float32), (a.shape[0], b.shape[1]))
    gemm.record(vk, gemm.build_plan(vk, out, va, vb, v, 1), out, va, vb)
    np.testing.assert_allclose(vk.to_numpy(out), a.astype(np.float32) @ b.astype(np.float32), rtol=1e-4, atol=1e-4)


def test_a_warp_that_does_not_tile_the_threads_is_refused():
    with pytest.raises(ValueError, match=r"32x32k16.4x4.db.w16x2: warp \(16, 2\) must be 32 threads tiling 8 x 8"):
        gemm.rearranged(gemm.BY_NAME["32x32k16.4x4.db"], (16, 2))
    with pytest.raises(ValueError, match="must be 32 threads"):
        gemm.rearranged(gemm.BY_NAME["64x64k16.4x4.db"], (4, 4))


def test_a_variant_is_found_by_its_name_in_the_tables_notation():
    """Every table variant and every layout of one spell themselves back; a name outside the table builds the
    tile it says (what ``vkblas bench gemm-variants --variants`` times before a tile becomes a candidate)."""
    for v in gemm.VARIANTS:
        assert gemm.variant_named(v.name) is v
        fresh = gemm._NAME.fullmatch(v.name)
        assert fresh is not None and fresh["base"] == (v.name.rpartition(".kg")[0] if v.kgroups > 1 else v.name)
    for warp, band in gemm.LAYOUTS:
        v = gemm.rearranged(gemm.BY_NAME["128x128k8.8x8.db"], warp, band)
        assert gemm.variant_named(v.name) == v
    v = gemm.variant_named("128x192k16.8x12.p0")
    assert (v.bm, v.bn, v.bk, v.tm, v.tn, v.stages, v.pad, v.f16_math, v.threads) == (
        128,
        192,
        16,
        8,
        12,
        2,
        0,
        False,
        256,
    )
    assert gemm.variant_named("64x64k32.4x4.ss").stages == 1
    assert gemm.variant_named("64x64k16.4x4.h16").f16_math
    v = gemm.variant_named("128x256k16.8x16.db.p0.hl.sk132")
    assert (v.hoist, v.stream, v.name) == (True, 132, "128x256k16.8x16.db.p0.hl.sk132")
    assert not gemm.variant_named("128x256k16.8x16.db.p0").hoist


@pytest.mark.parametrize(
    "name,message",
    [
        ("128x256", "expected BMxBNkBK.TMxTN"),
        ("128x192k16.6x12.db", "per-thread block 6x12 must be positive multiples of 4 dividing the tile 128x192"),
        ("128x128k8.0x8.db", "per-thread block 0x8 must be positive"),
        ("0x32k8.8x8.db", "dividing the tile 0x32"),
        ("64x64k6.4x4.db", "the K step 6 a positive multiple of 4"),
        ("128x192k16.8x12.db.w3x4", r"warp \(3, 4\) must be 32 threads tiling 16 x 16"),
    ],
)
def test_a_name_that_spells_no_variant_is_refused_saying_why(name, message):
    with pytest.raises(ValueError, match=message):
        gemm.variant_named(name)


@pytest.mark.parametrize(
    "name",
    [
        "32x48k16.4x12.db",
        "48x32k12.12x4.db.p0",
        "32x32k32.4x4.ss",
        "64x32k8.8x4.db.p2",
        "32x32k16.4x4.db.hl",
        "48x32k12.12x4.db.p0.hl",
        "32x32k32.4x4.ss.hl",
        "16x16k8.4x4.db.p0.hl.kg4",
    ],
)
def test_tiles_outside_the_table_are_exact_in_every_load_mode(vk, name):
    """The generator takes any tile the notation spells (widths of 3 vec4s, K steps of 12 and 32, single-staged,
    padding 0 and 2, hoisted load addresses, K groups), not only the table's: each load mode, split-K and both
    store widths against numpy."""
    v = gemm.variant_named(name)
    for i, (a_mode, b_mode) in enumerate(MODES):
        spec = gemm.Spec(D.float32, i % 2, a_mode, b_mode, i != 1, i == 3)
        assert gemm.applicable(v, spec, vk.dev.limits)
        ok, err = autotune.self_check(vk, v, spec)
        assert ok, f"{v.name} {spec}: relative error {err}"


# stream-K: (M, K, N, tile, workgroups): a workgroup's share under one tile's K iterations (several workgroups per
# tile), over several tiles (whole tiles between two partial ones), more workgroups than iterations, a share that
# is whole tiles (no fixup pass), one workgroup, edge tiles on every side
_STREAMS = [
    (37, 100, 45, "32x32k16.4x4.db", 5),
    (64, 64, 64, "32x32k16.4x4.db", 3),
    (100, 333, 70, "32x64k16.4x4.db", 7),
    (5, 17, 3, "32x32k16.4x4.db", 1),
    (64, 16, 64, "32x32k16.4x4.db", 16),
    (130, 400, 66, "32x32k16.4x4.ss", 13),
    (70, 50, 90, "64x64k8.4x4.db", 200),
    (100, 333, 70, "32x64k16.4x4.db.hl", 7),
]


@pytest.mark.parametrize("m,k,n,base,groups", _STREAMS)
@pytest.mark.parametrize("layout", ["nn", "tn", "nt", "offset"])
def test_stream_k_matches_numpy(vk, m, k, n, base, groups, layout):
    """Every output element is written once: by the one workgroup that covered its tile's whole K range, or by the
    fixup pass from the partial tiles of those that shared it (out starts NaN, so an unwritten element shows)."""
    v = gemm.variant_named(f"{base}.sk{groups}")
    a, b = RNG.standard_normal((m, k)).astype(np.float32), RNG.standard_normal((k, n)).astype(np.float32)
    va = _view(vk, a, D.float32, transposed=layout == "tn", offset=3 * (layout == "offset"))
    vb = _view(vk, b, D.float32, transposed=layout == "nt")
    ooff = 1 if layout == "offset" else 0  # a misaligned out: scalar stores
    out = View(vk.from_numpy(np.full(m * n + ooff, np.nan, np.float32), D.float32), (m, n), (n, 1), ooff)
    gp = gemm.build_plan(vk, out, va, vb, v, 1)
    gemm.record(vk, gp, out, va, vb)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(vk.to_numpy(out), ref, rtol=1e-4, atol=1e-4 * np.sqrt(k))
    assert gp.plan.groups[0] <= groups


@pytest.mark.parametrize("groups", [5, 13])
def test_stream_k_carries_nan_and_inf_through_shared_tiles(vk, groups):
    """NaN and infinities in K ranges that two workgroups share reach the output as numpy's product has them: the
    fixup pass sums partial tiles, inf + finite stays inf, inf - inf is NaN."""
    m, k, n = 37, 100, 45
    a, b = RNG.standard_normal((m, k)).astype(np.float32), RNG.standard_normal((k, n)).astype(np.float32)
    a[0, 5], a[1, 70], a[2, 10], a[2, 90] = np.nan, np.inf, np.inf, -np.inf
    b[70, :3] = 0.0  # inf * 0: NaN in row 1's first columns
    va, vb = _view(vk, a, D.float32), _view(vk, b, D.float32)
    out = View.of(vk.alloc(m * n, D.float32), (m, n))
    gp = gemm.build_plan(vk, out, va, vb, gemm.variant_named(f"32x32k16.4x4.db.sk{groups}"), 1)
    assert gp.reduce is not None  # tiles shared, summed by the fixup pass
    gemm.record(vk, gp, out, va, vb)
    with np.errstate(invalid="ignore"):
        ref = a.astype(np.float64) @ b.astype(np.float64)
    got = vk.to_numpy(out)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_array_equal(np.isinf(got) * np.sign(got), np.isinf(ref) * np.sign(ref))
    finite = np.isfinite(ref)
    np.testing.assert_allclose(got[finite], ref[finite], rtol=1e-4, atol=1e-3)


def test_stream_k_in_half_precision_and_through_the_self_check(vk):
    v = gemm.variant_named("32x64k16.4x4.db.sk6")
    a, b = RNG.standard_normal((50, 90)), RNG.standard_normal((90, 70))
    va, vb = _view(vk, a.astype(np.float16), D.float16), _view(vk, b.astype(np.float16), D.float16)
    out = View.of(vk.alloc(50 * 70, D.float16), (50, 70))
    gemm.record(vk, gemm.build_plan(vk, out, va, vb, v, 1), out, va, vb)
    ref = a.astype(np.float16).astype(np.float64) @ b.astype(np.float16).astype(np.float64)
    np.testing.assert_allclose(vk.to_numpy(out).astype(np.float64), ref, rtol=1e-2, atol=5e-2)
    for a_mode, b_mode in MODES:
        ok, err = autotune.self_check(vk, v, gemm.Spec(D.float32, 0, a_mode, b_mode, True, False))
        assert ok, f"{v.name} {a_mode}/{b_mode}: relative error {err}"


def test_stream_k_refuses_what_it_does_not_do(vk):
    v = gemm.variant_named("32x32k16.4x4.db.sk4")
    a, b = _view(vk, np.ones((2, 8, 8), np.float32), D.float32), _view(vk, np.ones((2, 8, 8), np.float32), D.float32)
    out = View.of(vk.alloc(128, D.float32), (2, 8, 8))
    with pytest.raises(ValueError, match="stream-K variant 32x32k16.4x4.db.sk4: .* a batch of 2"):
        gemm.build_plan(vk, out, a, b, v, 1)
    a2, b2, o2 = (View.of(vk.alloc(64, D.float32), (8, 8)) for _ in range(3))
    with pytest.raises(ValueError, match="splits=2"):
        gemm.build_plan(vk, o2, a2, b2, v, 2)
    with pytest.raises(ValueError, match="bias='cols'"):
        gemm.build_plan(vk, o2, a2, b2, v, 1, bias="cols")
    empty = View.of(vk.alloc(1, D.float32), (8, 0))
    with pytest.raises(ValueError, match="K=0"):
        gemm.build_plan(vk, o2, empty, View.of(vk.alloc(1, D.float32), (0, 8)), v, 1)
    with pytest.raises(ValueError, match="without a band walk or f16 math"):
        gemm.variant_named("64x64k16.4x4.h16.sk8")
    with pytest.raises(ValueError, match="at least one workgroup"):
        gemm.variant_named("64x64k16.4x4.db.sk0")
    assert gemm.variant_named("128x256k16.8x16.db.p0.sk132") == gemm.streamed(
        gemm.BY_NAME["128x256k16.8x16.db.p0"], 132
    )


def test_stream_k_partials_beyond_a_binding_are_refused_and_the_tuner_takes_the_tile(monkeypatch, tmp_path):
    """Stream-K's partial tiles are one workspace binding: a backend that binds less (lowered limits here) refuses
    the plan, saying why; a cached stream-K choice then runs as its tile, and the product is right."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    small = VulkanBackend(limits={"max-storage-buffer-binding-size": 1 << 18, "max-buffer-size": 1 << 20})
    a, b = RNG.standard_normal((64, 400)), RNG.standard_normal((400, 64))
    va, vb = _view(small, a, D.float32), _view(small, b, D.float32)
    out = View.of(small.alloc(64 * 64, D.float32), (64, 64))
    tile = gemm.BY_NAME["32x32k16.4x4.db"]
    with pytest.raises(ValueError, match=r"partial tiles of its 50 workgroups \(409600 bytes\) exceed one binding"):
        gemm.build_plan(small, out, va, vb, gemm.streamed(tile, 64), 1)
    t = autotune.tuner(small)
    t.enabled = True
    cls = autotune.shape_class(gemm.make_spec(out, va, vb, False), 64, 64, 400, 1)
    t.table[cls] = f"{tile.name}.sk64/1"
    gp = t.plan(out, va, vb)
    assert gp.variant == tile and gp.splits == 1
    gemm.record(small, gp, out, va, vb)
    ref = a.astype(np.float32).astype(np.float64) @ b.astype(np.float32).astype(np.float64)
    np.testing.assert_allclose(small.to_numpy(out), ref, rtol=1e-5, atol=1e-3)


def test_the_tuner_times_only_split_counts_whose_partials_fit_a_binding(monkeypatch, tmp_path):
    """Split-K's f32 partials are one binding: with 64 KiB of output and 256 KiB a binding, split 8 is not timed
    (it failed the timing run as an unbound large storage); splits 1 to 4 are."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("VKBLAS_AUTOTUNE", "1")
    monkeypatch.setattr(autotune, "MIN_TUNE_FLOPS", 1)
    tile = gemm.BY_NAME["32x32k16.4x4.db"]
    monkeypatch.setattr(gemm, "candidates", lambda *a: [(tile, s) for s in (1, 2, 4, 8)])
    monkeypatch.setattr(autotune.Tuner, "compute_units", lambda self: 1)
    small = VulkanBackend(limits={"max-storage-buffer-binding-size": 1 << 18, "max-buffer-size": 1 << 20})
    a, b = RNG.standard_normal((128, 400)), RNG.standard_normal((400, 128))
    _check(small, a, b)
    timed = autotune.tuner(small).log[0]["seconds"]
    assert sorted(timed) == [f"{tile.name}/{s}" for s in (1, 2, 4)]


def test_the_tuners_log_counts_the_second_stages_building_as_building(fresh, monkeypatch):
    """A first call's wait is told as building (compiling, self-checking) and timing (``vkblas bench conv`` prints
    them): the second stage's candidates are built too, so their seconds count as building, and both stages'
    compiling is summed (the log had the second stage's compiling against the first stage's building)."""
    import time as _time

    monkeypatch.setenv("VKBLAS_AUTOTUNE", "1")
    monkeypatch.setattr(autotune, "MIN_TUNE_FLOPS", 1)
    tile = gemm.BY_NAME["32x32k16.4x4.db"]
    monkeypatch.setattr(gemm, "candidates", lambda *a: [(tile, 1)])
    monkeypatch.setattr(autotune.Tuner, "compute_units", lambda self: 3)
    monkeypatch.setattr(autotune.Tuner, "time", lambda self, gp, *views: 1e-3)
    monkeypatch.setattr(autotune, "WARM_IDLE_S", 1e9)  # no warm-up: its 0.15 s would be timing too
    built = autotune.Tuner.candidate_plans

    def slow_build(self, *args, **kwargs):
        plans = built(self, *args, **kwargs)
        _time.sleep(0.2)
        self.compile_s = 0.05
        return plans

    monkeypatch.setattr(autotune.Tuner, "candidate_plans", slow_build)
    _check(fresh, RNG.standard_normal((40, 600)), RNG.standard_normal((600, 40)))
    e = autotune.tuner(fresh).log[0]
    assert e["wave_fits"] > 0 and e["build_s"] >= 0.4 and e["compile_s"] == pytest.approx(0.1)
    assert e["time_s"] < 0.2


def test_the_second_stage_is_skipped_where_the_first_stages_waves_are_full(fresh, monkeypatch, tmp_path):
    """4 workgroups on 4 compute units fill their wave (``WAVE_FILL``): no second stage; on 5 units they would not."""
    monkeypatch.setenv("VKBLAS_AUTOTUNE", "1")
    monkeypatch.setattr(autotune, "MIN_TUNE_FLOPS", 1)
    tile = gemm.BY_NAME["32x32k16.4x4.db"]
    monkeypatch.setattr(gemm, "candidates", lambda *a: [(tile, 1)])
    monkeypatch.setattr(autotune.Tuner, "time", lambda self, gp, *views: 1e-3)
    a, b = RNG.standard_normal((40, 600)), RNG.standard_normal((600, 40))  # 4 tiles of 38 K tiles
    for n_units, fits in ((4, False), (5, True)):  # 5: split 5 (20 workgroups), stream-K over 5 and 10
        monkeypatch.setattr(autotune.Tuner, "compute_units", lambda self, u=n_units: u)
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / str(n_units)))  # an empty cache: the class is tuned
        fresh.plans.clear()
        fresh.__dict__.pop("_gemm_tuner", None)
        _check(fresh, a, b)
        assert (autotune.tuner(fresh).log[0]["wave_fits"] > 0) == fits


def test_a_self_check_larger_than_a_binding_passes_the_variant_over(monkeypatch, tmp_path):
    """With 64 KiB a binding, a 64x64 tile's batched split-K self-check needs more than one: that variant is passed over
    (not disabled), and the product is right (the check's NeedsSplitting reached matmul, whose large-tensor path
    then cut the operands again and again, to a RecursionError)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("VKBLAS_AUTOTUNE", "1")
    monkeypatch.setattr(autotune, "MIN_TUNE_FLOPS", 1)
    big, small_tile = gemm.BY_NAME["64x64k16.4x4.db"], gemm.BY_NAME["32x32k16.4x4.db"]
    monkeypatch.setattr(gemm, "candidates", lambda *a: [(big, 2), (small_tile, 2)])
    monkeypatch.setattr(autotune.Tuner, "compute_units", lambda self: 1)
    small = VulkanBackend(limits={"max-storage-buffer-binding-size": 1 << 16, "max-buffer-size": 1 << 20})
    _check(small, RNG.standard_normal((2, 64, 100)), RNG.standard_normal((2, 100, 64)))  # a batch: checked on 2
    t = autotune.tuner(small)
    assert sorted(t.log[0]["seconds"]) == [f"{small_tile.name}/2"] and not t.disabled


@pytest.mark.parametrize("count", [1, 2, 7, 132, 528])
def test_find_units_reads_the_one_wave_staircase(count):
    """A modelled GPU of ``count`` units: one wave as long as one workgroup (clocks 10 % lower with every unit
    busy, timing noise of +-5 %), a second wave twice as long; the probe's search finds the count exactly."""
    rng = np.random.default_rng(count)

    def seconds(groups: int) -> float:
        waves = -(-groups // count)
        droop = 1 + 0.1 * min(groups, count) / count
        return 80e-6 * waves * droop * rng.uniform(0.95, 1.05)

    assert units.find_units(seconds) == count
    assert units.find_units(lambda g: 1e-4, most=64) == 64  # no second wave within reach: the most it tried


@pytest.mark.parametrize("every", [3, 4, 5, 7])
def test_find_units_is_not_misled_by_one_slow_timing(every, count=132):
    """A GPU whose clocks dip now and then: every ``every``-th timing reads 2.2x slow, as a second wave would. A
    single such reading within one wave must not end the search early (132 SMs read as fewer leaves the tuner's
    whole-wave split counts wrong); each grid's time is the faster of two readings."""
    calls = iter(range(10**6))

    def seconds(groups: int) -> float:
        waves = -(-groups // count)
        return 80e-6 * waves * (2.2 if next(calls) % every == every - 1 else 1.0)

    assert units.find_units(seconds) == count


def test_compute_units_are_measured_once_and_kept(fresh, monkeypatch, tmp_path):
    """The probe on a real adapter: lavapipe runs one workgroup per thread it has (LP_NUM_THREADS=0: none besides
    the caller's), so that many units; the count goes into the cache file and a new tuner reads it back untimed."""
    t = autotune.tuner(fresh)
    n = t.compute_units()
    if os.environ.get("LP_NUM_THREADS") == "0" and fresh.dev.info.get("adapter_type") == "CPU":
        assert n == 1
    assert 1 <= n <= units.MAX_UNITS
    data = json.loads((tmp_path / "vkblas" / "gemm-autotune.json").read_text())
    assert data[t.key][autotune.UNITS_KEY] == str(n)
    fresh.__dict__.pop("_gemm_tuner")
    monkeypatch.setattr(units, "find_units", lambda *a, **k: pytest.fail("measured again"))
    assert autotune.tuner(fresh).compute_units() == n


def test_wave_fits_give_every_unit_the_same_work():
    """The MNIST CNN's dense conv2 weight gradient (288 x 36864 x 64) in 96x64 tiles is 3 tiles: 44, 88, 132 and
    176 splits make 1-4 workgroups on each of an H100's 132 SMs; stream-K over 132 and 264 where it can run. A
    4096^3 product has more tiles than units: stream-K only. Too little K for a split of two K tiles: none."""
    v = gemm.BY_NAME["96x64k16.12x4.db"]
    fits = gemm.wave_fits(v, 288, 64, 36864, 1, 132, True)
    assert fits == [(v, 44), (v, 88), (v, 132), (v, 176), (gemm.streamed(v, 132), 1), (gemm.streamed(v, 264), 1)]
    assert gemm.wave_fits(v, 288, 64, 36864, 1, 132, False) == fits[:4]
    big = gemm.BY_NAME["128x256k16.8x16.db.p0"]
    assert gemm.wave_fits(big, 4096, 4096, 4096, 1, 132, True) == [(gemm.streamed(big, n), 1) for n in (132, 264)]
    assert gemm.wave_fits(v, 288, 64, 64, 1, 132, True) == []


def test_the_tuners_second_stage_can_pick_stream_k_and_the_cache_keeps_it(fresh, monkeypatch):
    """With 3 compute units (the first stage's 4 workgroups fill 4 of 6 slots in two waves) the second stage times
    the first stage's tile split over whole waves and as stream-K;
    where stream-K is fastest it is the class's choice, the product is right, a new process reads the choice back
    untimed, and a call of the class that stream-K cannot run (a bias in the epilogue) gets the tile unstreamed."""
    monkeypatch.setenv("VKBLAS_AUTOTUNE", "1")
    monkeypatch.setattr(autotune, "MIN_TUNE_FLOPS", 1)
    tile = gemm.BY_NAME["32x32k16.4x4.db"]
    monkeypatch.setattr(gemm, "candidates", lambda *a: [(tile, 1)])
    monkeypatch.setattr(autotune.Tuner, "compute_units", lambda self: 3)
    timed = []

    def fake_time(self, gp, *views):
        timed.append(f"{gp.variant.name}/{gp.splits}")
        return 1e-3 if gp.variant.stream == 6 else 2e-3

    monkeypatch.setattr(autotune.Tuner, "time", fake_time)
    a, b = RNG.standard_normal((40, 600)), RNG.standard_normal((600, 40))  # 4 tiles of 38 K tiles
    _check(fresh, a, b)
    t = autotune.tuner(fresh)
    streams = [f"{tile.name}.sk3/1", f"{tile.name}.sk6/1"]
    assert set(timed) == {f"{tile.name}/1", f"{tile.name}/3", *streams}  # 3 splits: 12 workgroups, 4 a unit
    assert t.log[0]["winner"] == streams[1] and t.log[0]["wave_fits"] == 3
    fresh.plans.clear()
    fresh.__dict__.pop("_gemm_tuner")
    timed.clear()
    _check(fresh, a, b)
    assert timed == []
    t = autotune.tuner(fresh)
    va, vb = _view(fresh, a, D.float32), _view(fresh, b, D.float32)
    out = View.of(fresh.alloc(1600, D.float32), (40, 40))
    assert t.plan(out, va, vb).variant.stream == 6
    bias = View.of(fresh.alloc(40, D.float32), (40,))
    assert t.plan(out, va, vb, bias=bias, bias_on="cols").variant == tile


# K groups (``Variant.kgroups``): copies of the tile's threads over shares of K, summed in workgroup memory. Tiles
# small enough for lavapipe's 32 KiB of workgroup memory: single- and double-staged, 2 to 16 groups
_KGROUPS = ["16x16k8.4x4.ss.p0.kg16", "16x32k8.4x4.db.p0.kg4", "32x32k8.4x4.db.kg4", "16x16k8.4x4.db.kg2"]


@pytest.mark.parametrize("name", _KGROUPS)
def test_k_groups_pass_the_self_check_in_every_load_mode(vk, name):
    """f32 (with and without split-K, both store widths, batched), int32 and f16 in every load mode."""
    v = gemm.variant_named(name)
    assert v.threads == v.kgroups * v.tile_threads
    for i, (a_mode, b_mode) in enumerate(MODES):
        dtypes = [D.float32, D.int32] + [D.float16] * vk.dev.has_f16
        for dtype in dtypes:
            spec = gemm.Spec(dtype, i % 2, a_mode, b_mode, i != 1, i == 3 and dtype is not D.int32)
            assert gemm.applicable(v, spec, vk.dev.limits)
            ok, err = autotune.self_check(vk, v, spec)
            assert ok, f"{v.name} {spec}: relative error {err}"


@pytest.mark.parametrize("name", _KGROUPS)
@pytest.mark.parametrize(
    "m,k,n,splits",
    # the MLP's fc3 weight gradient; K shorter than the groups' K tiles (groups with no K at all); K = 1; K = 0
    # (a zero product); edge tiles everywhere with split-K on top
    [(10, 512, 256, 1), (5, 3, 7, 1), (3, 1, 2, 1), (4, 0, 6, 1), (37, 1000, 45, 3)],
)
def test_k_groups_match_numpy_where_groups_run_empty(vk, name, m, k, n, splits):
    """Every output element written once, by the first group, with every group's share: out starts NaN, the
    operands hold NaN and infinities (inf - inf across two groups' shares is NaN, as numpy has it)."""
    v = gemm.variant_named(name)
    a, b = RNG.standard_normal((m, k)), RNG.standard_normal((k, n))
    if k >= 3:
        a[0, 0], a[1, k - 1], a[2, 0], a[2, k - 1] = np.nan, np.inf, np.inf, -np.inf
    va, vb = _view(vk, a.astype(np.float32), D.float32, transposed=True), _view(vk, b.astype(np.float32), D.float32)
    out = View.of(vk.from_numpy(np.full(m * n, np.nan, np.float32), D.float32), (m, n))
    gemm.record(vk, gemm.build_plan(vk, out, va, vb, v, splits), out, va, vb)
    with np.errstate(invalid="ignore"):
        ref = a.astype(np.float32).astype(np.float64) @ b.astype(np.float32).astype(np.float64)
    got = vk.to_numpy(out)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_array_equal(np.isinf(got) * np.sign(got), np.isinf(ref) * np.sign(ref))
    finite = np.isfinite(ref)
    np.testing.assert_allclose(got[finite], ref[finite], rtol=1e-4, atol=1e-4 * np.sqrt(max(k, 1)))


@pytest.mark.parametrize("name", _KGROUPS)
def test_k_groups_take_a_bias_an_epilogue_op_and_row_sums(vk, name):
    """The first group's epilogue adds a column bias and runs relu / relu_grad with the bits of the separate
    elementwise dispatch after the same GEMM; the row sums (a layer's bias gradient) add up every group's share,
    with and without split-K."""
    v = gemm.variant_named(name)
    m, k, n = 37, 100, 10
    va, vb, vbias, ref = _bias_case(vk, m, k, n)
    out = View.of(vk.alloc(m * n, D.float32), (m, n))
    gemm.record(vk, gemm.build_plan(vk, out, va, vb, v, 1, bias="cols"), out, va, vb, vbias)
    np.testing.assert_allclose(vk.to_numpy(out), ref, rtol=1e-5, atol=1e-4)
    va, vb, saved, vsaved = _act_case(vk, m, k, n)
    for op in ("relu", "relu_grad"):
        fused = gemm.build_plan(vk, out, va, vb, v, 1, act=op)
        _, res, ref = _act_pair(vk, fused, gemm.build_plan(vk, out, va, vb, v, 1), op, va, vb, vsaved, m, n)
        np.testing.assert_array_equal(res, ref)
        assert np.isnan(res).any() and (res == 0).any() and (res > 0).any()
    for (m, k, n), splits in (((37, 45, 70), 1), ((2 * v.bm + 5, 300, 9), 4), ((10, 512, 256), 1)):
        va, vb, vsums, ref, ref_sums = _sums_case(vk, m, k, n)
        out = View.of(vk.alloc(m * n, D.float32), (m, n))
        gemm.record(vk, gemm.build_plan(vk, out, va, vb, v, splits, bias="sum_rows"), out, va, vb, vsums)
        finite = np.isfinite(ref).all(1)
        np.testing.assert_allclose(vk.to_numpy(out)[finite], ref[finite], rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(vk.to_numpy(vsums), ref_sums, rtol=1e-5, atol=1e-4)


def test_k_groups_are_refused_where_they_do_not_apply():
    for name, message in (
        ("16x16k8.4x4.db.kg3", r"K groups take a power of two \(3\)"),
        ("16x16k8.4x4.db.kg4.sk8", "without stream-K"),
        ("32x32k16.4x4.db.w8x4.kg2", "without stream-K or a warp layout"),
    ):
        with pytest.raises(ValueError, match=message):
            gemm.variant_named(name)
    v = gemm.variant_named("16x16k8.4x4.db.kg4")
    assert gemm.variant_named(v.name) == v == gemm.k_grouped(gemm.variant_named("16x16k8.4x4.db"), 4)
    g = gemm.Gather("window", True, 3, (8, 8), (6, 6), 2, (192, 64, 8, 1), kernel=(3, 3))
    gathered = gemm.Spec(D.float32, 0, g.mode, "vi", True, False, a_gather=g)
    limits = {"max-compute-invocations-per-workgroup": 256, "max-compute-workgroup-storage-size": 49152}
    assert not gemm.applicable(v, gathered, limits)
    with pytest.raises(ValueError, match="K groups take no gathered operand"):
        gemm.source(v, gathered)
    # workgroup memory: every group's operand tiles and half the groups' output tiles for the sum
    assert v.smem_bytes(4) == 4 * 2 * 8 * (16 + 16 + 8) * 4 + 2 * 16 * 16 * 4


def test_k_group_variants_are_timed_only_for_a_few_output_tiles_over_a_long_k():
    limits = {"max-compute-invocations-per-workgroup": 256, "max-compute-workgroup-storage-size": 49152}
    grouped = {v.name for v in gemm.VARIANTS if v.kgroups > 1}
    assert grouped and not grouped & {v.name for v, _ in gemm.candidates(D.float32, 4096, 4096, 4096, 1, limits)}
    small = [(v, s) for v, s in gemm.candidates(D.float32, 10, 256, 512, 1, limits) if v.kgroups > 1]
    assert small and all(s == 1 for _, s in small)  # one dispatch: no split-K on top
    assert not [v for v, _ in gemm.candidates(D.float32, 10, 256, 512, 1, limits, gathered=True) if v.kgroups > 1]
    assert not [v for v, _ in gemm.candidates(D.float32, 10, 256, 16, 1, limits) if v.kgroups > 1]  # short K
