"""GEMM variant choice: heuristic defaults, an autotuner with a per-adapter cache file, and a correctness self-check.

* **Shape class** of a call: dtype, load modes of a and b, vector stores, and the batch count, M, N, K rounded up
  to powers of two. Every variant is correct for every shape, so the class only decides what is fastest. (The
  batch count is there because a convolution's GEMM is batched over images: on an H200 the choice made for a batch
  of 4 images, split-K 2, took the batch-512 forward 0.57 ms against its own choice's 0.41.)
* **Tuning**: on the first call of a shape class on an adapter, every candidate (variant, split count) of
  :func:`gemm.candidates` is compiled, self-checked and timed on the call's own operands, in its own compute pass
  bracketed by GPU timestamp queries where the adapter has ``timestamp-query`` (else wall clock to completion),
  in ``_PASSES`` rounds, each candidate's best kept; after the first, only those within ``PRUNE_RATIO`` of its
  fastest are timed again. A run after the GPU idled first warms its clocks up (``WARM_IDLE_S``). A second stage
  then times, for the ``FINALISTS`` fastest tiles, the plans that give each compute unit the same work
  (``gemm.wave_fits``: split-K counts and stream-K over whole multiples of the units, which ``units.py`` measures
  once per adapter).
  The winner goes into ``$XDG_CACHE_HOME/vkblas/gemm-autotune.json`` (default ``~/.cache``) under a key made of
  adapter, vendor, driver and template version, and is reused from then on, in this and later processes. A run
  that lasts (a large convolution's first call) shows a progress bar on stderr. Other timed choices live in the
  same table (:meth:`Tuner.remember`: a convolution's Winograd or implicit GEMM, ``conv.py``). Processes that tune
  at the same time merge their entries under a lock file; entries the file holds in another shape are ignored.
* Tuning is skipped (heuristic defaults) for ``VKBLAS_AUTOTUNE=0``, for problems under ``MIN_TUNE_FLOPS`` (launch
  overhead dominates there) and on CPU adapters such as lavapipe unless ``VKBLAS_AUTOTUNE=1``.
* **Self-check**: the first time a compiled (variant, spec) is used on a device it runs once on a small problem with
  the same specialisation (edge tiles included) and is compared with numpy; a variant the driver gets wrong is
  disabled for this process with a warning, and the next choice is used.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import struct
import tempfile
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import wgpu
from tqdm import tqdm

from ...dtypes import float16, float32, int32
from ..base import BackendError, View, contiguous_strides
from ..filelock import locked
from . import gemm, units
from .gemm import GemmPlan, Spec, Variant
from .kernels.plan import Plan
from .memory import NeedsSplitting

# a captured step of a small model is a few dozen GEMMs of 2-100 MFLOP each, where the default's 8 workgroups of a
# 10 x 256 weight gradient took 33 us on an H200: those are tuned too (the cost is once per shape class and adapter)
MIN_TUNE_FLOPS = 1 << 21
_TARGET_S = 0.02  # GPU time per timed candidate
#: threads that compile a tuning run's candidates side by side (each waits in the driver's compiler, not in Python)
COMPILE_THREADS = min(8, os.cpu_count() or 1)
_PASSES = 2  # rounds over the candidates
#: after the first round, only the candidates within this factor of its fastest are timed again: a first call's
#: wait on a GPU is mostly timing (a large convolution's 180 candidates, 8 s on an H200), and most candidates are
#: several times slower than the best. Wide, because one round's noise has put a 1.8x slower candidate first
PRUNE_RATIO = 2.5
_FALLBACK = "32x32k16.4x4.db"
#: a GPU's clocks ramp up over the first tenths of a second of work after it idled, and the pruning above trusts
#: the first round: on an H100 (2026-12-07) a process's first tuning, at 4096^3, timed the big tiles it times first
#: cold, pruned them, and picked a tile 1.38x slower. So a tuning run that follows this much idle time first runs
#: its first candidate for ``WARM_MIN_S``, then until two timings in a row agree (``WARM_MAX_S`` at most)
WARM_IDLE_S = 1.0
WARM_MIN_S = 0.15
WARM_MAX_S = 0.5
#: the tuner's second stage times the plans that fill whole waves (``gemm.wave_fits``) for this many of the first
#: stage's fastest tiles: the tile that is best once its waves are full is often not the first stage's best (at
#: 3072^3 on an H100 the 128x256 tile ran three waves for 2.2 waves of work, behind a 96x64 tile)
FINALISTS = 4
#: ... and only when the first stage's fastest plan fills less than this share of the units' slots in its waves
#: (workgroups / (units x waves)). On an H100 (2026-12-07, 15 shape classes, a cold tuner) the second stage gained
#: 32 % and 18 % where that plan filled 73 % (3072^3 in 128x256 tiles; conv2's dense dW in 96x64 tiles, 64 splits),
#: nothing at 85 % (the MLP's fc1 dX and dW) or below, and at most 1 % in the eight classes filled 97 %; each of
#: its plans is compiled, self-checked and timed in a first call's wait
WAVE_FILL = 0.9
UNITS_KEY = "compute-units"  # the cache table's entry for the measured compute units (``units.py``)


#: seconds a tuning run goes before its progress bar shows: most shape classes tune in well under a second on a
#: GPU, but a large convolution's first call compiles hundreds of candidates (about 25 s on an H200), and on a CPU
#: adapter (``VKBLAS_AUTOTUNE=1``) timing them takes minutes
PROGRESS_DELAY_S = 2.0


def _progress(cls: str, total: int) -> tqdm:
    """The bar of one tuning run (stderr, shown only after ``PROGRESS_DELAY_S``, gone when done): a first call
    that tunes must not look hung."""
    return tqdm(total=total, desc=f"vkblas: tuning GEMM {cls}", unit="step", delay=PROGRESS_DELAY_S, leave=False)


def cache_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "vkblas" / "gemm-autotune.json"


def _bucket(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def shape_class(spec: Spec, m: int, n: int, k: int, nbatch: int) -> str:
    gathers = "".join(f"|{op}:{g.key()}" for op, g in (("a", spec.a_gather), ("b", spec.b_gather)) if g)
    return (
        f"{spec.dtype.name}|{spec.a_mode}{spec.b_mode}|{'o4' if spec.out_vec else 'o1'}|"
        f"{f'b{_bucket(nbatch)}' if nbatch > 1 else 's'}|{_bucket(m)}x{_bucket(n)}x{_bucket(k)}{gathers}"
    )


class Tuner:
    """Per-backend variant choice (one per ``VulkanBackend``, created on its first matmul)."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        info = backend.dev.info
        env = os.environ.get("VKBLAS_AUTOTUNE", "")
        self.off = env == "0"  # the user's "no tuning": nothing is timed, a convolution's Winograd choice neither
        self.enabled = not self.off and (info.get("adapter_type") != "CPU" or env == "1")
        self.timestamps = "timestamp-query" in backend.dev.features
        self.key = f"{info['name']}|{info['vendor']}|{info['driver']}|wgpu {wgpu.__version__}|t{gemm.TEMPLATE_VERSION}"
        self.table: dict[str, str] = self._load().get(self.key, {})
        self.disabled: set[str] = set()
        self.verified: set[tuple[str, Spec]] = set()
        self.log: list[dict[str, Any]] = []  # what tuning measured (the benchmark prints it)
        self.compile_s = 0.0  # the last candidate_plans' seconds compiling on the pool of threads
        self.warmed_s = 0.0  # the last tuning run's seconds warming the GPU up (``_warm_up``)
        self._busy_until = -float("inf")  # perf_counter when this tuner last kept the GPU busy

    # -- cache file
    def _load(self) -> dict[str, dict[str, str]]:
        """The cache file's tables by adapter key; what is not a table of strings (a damaged or foreign file, an
        entry of another shape) is left out, as if never tuned: tuning again is the cure, not a crash."""
        try:
            data = json.loads(cache_path().read_text())
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict):
            return {}
        return {
            key: {k: v for k, v in table.items() if isinstance(v, str)}
            for key, table in data.items()
            if isinstance(table, dict)
        }

    def _save(self) -> None:
        path = cache_path()
        tmp = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # read, merge and replace under a lock: processes tuning side by side (the workers of a distributed run)
            # keep each other's entries
            with locked(path.with_name(path.name + ".lock")):
                data = self._load()
                data.setdefault(self.key, {}).update(self.table)
                fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".gemm-autotune.")
                with os.fdopen(fd, "w") as f:
                    json.dump(data, f, indent=1, sort_keys=True)
                os.replace(tmp, path)
                tmp = None
        except OSError as e:  # a read-only home must not break matmul
            warnings.warn(f"vkblas: could not write the autotune cache {path}: {e}", stacklevel=3)
        finally:
            if tmp is not None:  # a failed write leaves no temporary behind
                with contextlib.suppress(OSError):
                    os.unlink(tmp)

    def remember(self, key: str, choice: str) -> None:
        """Keep another choice made by timing (a convolution's Winograd or implicit GEMM) in the cache file."""
        self.table[key] = choice
        self._save()

    # -- choice
    def plan(
        self,
        out: View,
        a: View,
        b: View,
        gathers: gemm.Gathers = gemm.NO_GATHER,
        bias: View | None = None,
        bias_on: str = "rows",
    ) -> GemmPlan:
        """The GEMM plan of ``out = a @ b`` (``gathers``: operands read through a convolution's geometry;
        ``bias``: a contiguous view added in the epilogue, to every row (``bias_on="rows"``: (M,)) or column
        (``"cols"``: (N,)))."""
        axis = bias_on if bias is not None else ""
        M, N, K = out.shape[-2], out.shape[-1], a.shape[-1]
        nbatch = max(1, out.numel // max(1, M * N))
        limits = self.backend.dev.limits
        spec = gemm.make_spec(out, a, b, False, gathers, axis)
        choice: tuple[Variant, int] | None = None
        if self.enabled and 2 * M * N * K * nbatch >= MIN_TUNE_FLOPS:
            cls = shape_class(spec, M, N, K, nbatch)
            choice = self._parse(self.table.get(cls))
            if choice is None:
                choice = self.tune(out, a, b, cls, gathers, bias, axis)
        if choice is None or choice[0].name in self.disabled:
            choice = gemm.default_choice(a.dtype, M, N, K, nbatch, limits)
        # then the small fallback, then any other variant: a driver bug in one variant must not stop matmul; a
        # stream-K choice is followed by its tile, for a call of the class that stream-K refuses (a bias, or
        # partial tiles past the binding of a backend that binds less than the tuning one)
        tried = [choice, (gemm.unstreamed(choice[0]), 1)] if choice[0].stream else [choice]
        tried += [(gemm.BY_NAME[_FALLBACK], 1), *[(v, 1) for v in reversed(gemm.VARIANTS)]]
        for v, s in tried:
            if v.name in self.disabled or not gemm.applicable(v, spec, limits):
                continue
            try:
                gp = gemm.build_plan(self.backend, out, a, b, v, s, gathers, axis)
            except ValueError:
                if not v.stream:
                    raise
                continue  # (the ValueError says why)
            if self.verify(gp):
                return gp
        raise BackendError(
            f"matmul on vulkan ({self.backend.dev.info['name']}): every GEMM variant failed its "
            f"self-check ({sorted(self.disabled)})"
        )

    def _parse(self, entry: str | None) -> tuple[Variant, int] | None:
        if not entry:
            return None
        name, _, splits = entry.partition("/")
        v = gemm.table_variant(name)
        if v is None or name in self.disabled or not (splits or "1").isdigit():
            return None  # a variant gone, disabled, or an entry this version cannot read: tuned again
        n = int(splits or 1)
        return (v, n) if 1 <= n <= gemm.MAX_SPLITS else None

    def tune(
        self,
        out: View,
        a: View,
        b: View,
        cls: str,
        gathers: gemm.Gathers = gemm.NO_GATHER,
        bias: View | None = None,
        axis: str = "",
    ) -> tuple[Variant, int] | None:
        """Time every candidate on the call's operands; remember and return the fastest."""
        M, N, K = out.shape[-2], out.shape[-1], a.shape[-1]
        nbatch = max(1, out.numel // max(1, M * N))
        self.backend.rt.flush()  # pending work first: our passes then run after it, in queue order
        t0 = time.perf_counter()
        pairs = gemm.candidates(a.dtype, M, N, K, nbatch, self.backend.dev.limits, gathers != gemm.NO_GATHER)
        with _progress(cls, len(pairs) * (1 + _PASSES)) as bar:
            plans = self.candidate_plans(pairs, out, a, b, gathers, axis, bar.update)
            bar.update(len(pairs) - len(plans))  # those that did not build or fit are not timed either
            t1 = time.perf_counter()
            # every candidate timed in _PASSES rounds, its best kept: with one pass an H200 lease picked a variant
            # that took 0.75 ms in the step over one that took 0.42 ms (timing noise: GPU clocks, other work)
            results: dict[str, float] = {}
            live = plans
            if plans:
                self._warm_up(next(iter(plans.values())), out, a, b, bias)
            for round_ in range(_PASSES):
                for name, gp in live.items():
                    t = self.time(gp, out, a, b, bias)
                    results[name] = min(t, results.get(name, t))
                    bar.update()
                bar.update(len(pairs) - len(live))  # the round's steps of those not timed in it
                if round_ == 0 and results:  # the hopeless ones are not timed again
                    fastest = min(results.values())
                    live = {name: gp for name, gp in plans.items() if results[name] <= PRUNE_RATIO * fastest}
            pruned = len(plans) - len(live)
            if results:
                self.compute_units()  # (its one probe, on an adapter's first tuning, is timing)
            compile_s, self.compile_s, t_fit = self.compile_s, 0.0, time.perf_counter()
            fits = self._wave_fit_plans(plans, results, out, a, b, gathers, axis) if results else {}
            fit_build_s = time.perf_counter() - t_fit  # the second stage's building is building, not timing
            compile_s += self.compile_s
            for _ in range(_PASSES):
                for name, gp in fits.items():
                    t = self.time(gp, out, a, b, bias)
                    results[name] = min(t, results.get(name, t))
            plans.update(fits)
        self._busy_until = time.perf_counter()
        if not results:
            return None
        name = min(results, key=results.__getitem__)
        best = (results[name], (plans[name].variant, plans[name].splits))
        v, s = best[1]
        self.table[cls] = f"{v.name}/{s}"
        # where a first call's wait goes: compiling and self-checking the candidates, or timing them
        build_s = t1 - t0 + fit_build_s
        spent = {"build_s": build_s, "compile_s": compile_s, "time_s": time.perf_counter() - t0 - build_s}
        spent["warm_s"] = self.warmed_s
        spent["pruned"] = pruned
        spent["wave_fits"] = len(fits)
        self.log.append({"class": cls, "winner": self.table[cls], "seconds": results, **spent})
        self._save()
        return best[1]

    def _wave_fit_plans(
        self,
        plans: dict[str, GemmPlan],
        results: dict[str, float],
        out: View,
        a: View,
        b: View,
        gathers: gemm.Gathers,
        axis: str,
    ) -> dict[str, GemmPlan]:
        """The second stage's plans: ``gemm.wave_fits`` of the ``FINALISTS`` fastest tiles timed so far, built and
        self-checked, those not timed already; none where the fastest plan fills ``WAVE_FILL`` of its waves."""
        count = self.compute_units()
        if count < 2:
            return {}
        M, N, K = out.shape[-2], out.shape[-1], a.shape[-1]
        nbatch = max(1, out.numel // max(1, M * N))
        ranked = sorted(results, key=results.__getitem__)
        best = plans[ranked[0]]
        workgroups = -(-M // best.variant.bm) * -(-N // best.variant.bn) * best.splits * nbatch
        if workgroups / (count * -(-workgroups // count)) >= WAVE_FILL:
            return {}  # its waves are (nearly) full already
        streamable = gemm.can_stream(a.dtype, nbatch, K, bias=axis, gathers=gathers)
        tiles = list(dict.fromkeys(plans[name].variant for name in ranked))[:FINALISTS]
        pairs = [
            (v, s)
            for tile in tiles
            for v, s in gemm.wave_fits(tile, M, N, K, nbatch, count, streamable)
            if f"{v.name}/{s}" not in plans
        ]
        return self.candidate_plans(pairs, out, a, b, gathers, axis) if pairs else {}

    def compute_units(self) -> int:
        """The compute units this adapter spreads workgroups over (``units.py``), measured on first use and kept in
        the cache file (``UNITS_KEY``)."""
        kept = self.table.get(UNITS_KEY, "")
        if kept.isdigit() and int(kept) > 0:
            return int(kept)
        be = self.backend
        # a store per probe invocation, in one binding (a backend with lowered limits binds less: it probes fewer)
        most = min(units.MAX_UNITS, be.pool.binding // (4 * units.PROBE_THREADS))
        numel = most * units.PROBE_THREADS
        probe = Plan(be.dev.kernel(units.probe_source(), 1), "<iIf", (units.PROBE_ITERATIONS, 0.999), (1, 1, 1),
                     ((0, numel - 1),))  # fmt: skip
        sink = View(be.alloc(numel, float32), (numel,), (1,), 0)

        def seconds(groups: int) -> float:
            return self.time_launches(lambda: [(probe, (sink,), (), (groups, 1, 1))])

        t0 = time.perf_counter()
        while time.perf_counter() - t0 < WARM_MIN_S:  # the clocks up first: a cold single workgroup reads slow
            seconds(1)
        count = units.find_units(seconds, most)
        self.remember(UNITS_KEY, str(count))
        return count

    def candidate_plans(
        self,
        pairs: list[tuple[Variant, int]],
        out: View,
        a: View,
        b: View,
        gathers: gemm.Gathers = gemm.NO_GATHER,
        axis: str = "",
        built: Callable[[], Any] | None = None,
    ) -> dict[str, GemmPlan]:
        """``name/splits`` -> plan for each (variant, split count) that fits this device, builds and passes its
        self-check (the candidates :meth:`tune` times, and the benchmark's); ``built`` is called after each plan
        that made it (a progress bar's step)."""
        limits = self.backend.dev.limits
        spec = gemm.make_spec(out, a, b, False, gathers, axis)
        binding = self.backend.pool.binding  # split-K's partials are one binding: the counts that fit it
        todo = [
            (v, s)
            for v, s in pairs
            if v.name not in self.disabled and gemm.applicable(v, spec, limits) and 4 * s * out.numel <= binding
        ]

        def build(pair: tuple[Variant, int]) -> GemmPlan | None:
            try:
                gp = gemm.build_plan(self.backend, out, a, b, *pair, gathers, axis)
            except (BackendError, ValueError):
                return None
            self._compile_check(gp)
            return gp

        # compiling is most of a first call's wait on a GPU (a driver compiles each unrolled kernel for 0.1 s or
        # more) and happens outside the GIL: one pair per kernel source (a variant, split or not) compiles on a
        # pool of threads, with its self-check's kernel, and the other pairs then find their kernels cached
        firsts = list({(v.name, s > 1): (v, s) for v, s in reversed(todo)}.values())
        t0 = time.perf_counter()
        with ThreadPoolExecutor(max(1, min(COMPILE_THREADS, len(firsts)))) as pool:
            early = dict(zip(firsts, pool.map(build, firsts), strict=True))
        self.compile_s = time.perf_counter() - t0
        plans: dict[str, GemmPlan] = {}
        for pair in todo:  # self-checked and named in the candidates' order, on this thread (they record work)
            gp = early[pair] if pair in early else build(pair)
            if gp is None:
                continue
            key = f"{pair[0].name}/{gp.splits}"
            if key not in plans and self.verify(gp):
                plans[key] = gp
                if built is not None:
                    built()
        return plans

    # -- timing
    def _warm_up(self, gp: GemmPlan, out: View, a: View, b: View, bias: View | None) -> None:
        """After ``WARM_IDLE_S`` without tuning (a process's first tuning run, too), time ``gp`` for ``WARM_MIN_S``
        and then until two timings in a row agree within 5 %, ``WARM_MAX_S`` at most: the clocks are up before the
        first round counts (a flat start is no proof: a GPU's clocks may not have begun to rise)."""
        self.warmed_s = 0.0
        if time.perf_counter() - self._busy_until < WARM_IDLE_S:
            return
        t0 = time.perf_counter()
        last = self.time(gp, out, a, b, bias)
        while (spent := time.perf_counter() - t0) < WARM_MAX_S:
            t = self.time(gp, out, a, b, bias)
            if spent >= WARM_MIN_S and t >= 0.95 * last:
                break
            last = t
        self.warmed_s = time.perf_counter() - t0

    def time(self, gp: GemmPlan, out: View, a: View, b: View, bias: View | None = None) -> float:
        """Seconds per run of ``gp`` (GPU timestamps when available)."""
        return self.time_launches(lambda: gemm.launches(self.backend, gp, out, a, b, bias))

    def time_launches(self, make: Callable[[], list[Any]]) -> float:
        """Seconds per run of the dispatches ``make()`` lays out as (plan, views, scalars, grid): any sequence of
        kernels (a convolution's algorithms are timed against each other with it). Pending work is submitted
        first: the operands then hold their values (leftover infs or NaNs could time a slow path)."""
        self.backend.rt.flush()
        t1 = self._run(make(), 1)  # also the warm-up
        reps = int(min(50, max(1, _TARGET_S / max(t1, 1e-7))))
        return self._run(make(), reps) / reps

    def _run(self, launches: list[Any], reps: int) -> float:
        dev = self.backend.dev
        device = dev.device
        align = 256  # a multiple of min-uniform-buffer-offset-alignment on every adapter
        ubuf = device.create_buffer(
            size=align * len(launches), usage=wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_DST
        )
        raw = bytearray(align * len(launches))
        groups = []
        for i, (plan, views, scalars, grid) in enumerate(launches):
            struct.pack_into(plan.fmt, raw, i * align, *[v.offset for v in views], *scalars, *plan.static)
            entries = [{"binding": 0, "resource": {"buffer": ubuf, "offset": 0, "size": align}}]
            entries += [
                # a window of a large tensor's buffer (large.py) binds from its offset, as the queue binds it
                {"binding": j + 1, "resource": {"buffer": pb.buf, "offset": pb.offset, "size": pb.size}}
                for j, pb in enumerate(v.storage.buffer for v in views)
            ]
            bg = device.create_bind_group(layout=dev.bind_group_layout(plan.kernel.nbuf), entries=entries)
            groups.append((plan.kernel.pipeline, bg, i * align, grid))
        device.queue.write_buffer(ubuf, 0, raw)
        enc = device.create_command_encoder()
        ts: dict[str, Any] = {}
        if self.timestamps:
            qs = device.create_query_set(type="timestamp", count=2)
            ts = {
                "timestamp_writes": {"query_set": qs, "beginning_of_pass_write_index": 0, "end_of_pass_write_index": 1}
            }
        cpass = enc.begin_compute_pass(**ts)
        for _ in range(reps):
            for pipe, bg, off, grid in groups:
                cpass.set_pipeline(pipe)
                cpass.set_bind_group(0, bg, [off])
                cpass.dispatch_workgroups(*grid)
        cpass.end()
        read = device.create_buffer(size=16, usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
        if self.timestamps:
            resolve = device.create_buffer(size=16, usage=wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC)
            enc.resolve_query_set(ts["timestamp_writes"]["query_set"], 0, 2, resolve, 0)
            enc.copy_buffer_to_buffer(resolve, 0, read, 0, 16)
        t0 = time.perf_counter()
        device.queue.submit([enc.finish()])
        read.map_sync(wgpu.MapMode.READ, 0, 16)
        wall = time.perf_counter() - t0
        t_begin, t_end = struct.unpack("<QQ", bytes(read.read_mapped(0, 16)))
        read.unmap()
        if self.timestamps and t_end > t_begin:
            # wgpu reports ticks; only ratios between candidates matter, but scale to ns where the period is known
            return (t_end - t_begin) * 1e-9
        return wall

    # -- self-check
    def verify(self, gp: GemmPlan) -> bool:
        """Run ``gp``'s variant once per specialisation on a small problem with edge tiles; False (and the variant
        disabled, with a warning) when it disagrees with numpy. A gathered spec checks the variant on strided
        operands of the same scalar layouts (the gathers' own arithmetic is in the conv tests)."""
        return self.verify_variant(gp.variant, _plain(gp.spec))

    def _compile_check(self, gp: GemmPlan) -> None:
        """Compile the kernel :meth:`verify` will run for ``gp`` unless it was checked already (safe on a tuner's
        pool thread: it records nothing). A kernel that fails to compile is left for the check to report."""
        plain = _plain(gp.spec)
        if (gp.variant.name, plain) in self.verified:
            return
        spec = check_spec(gp.variant, plain)
        try:
            self.backend.dev.kernel(gemm.source(gp.variant, spec), gemm.bindings(gp.variant, spec))
        except BackendError:
            pass  # verify compiles it again on the calling thread, and raises there

    def verify_variant(self, v: Variant, spec: Spec) -> bool:
        key = (v.name, spec)
        if key in self.verified:
            return True
        try:
            ok, err = self_check(self.backend, v, spec)
        except NeedsSplitting:  # its check problem is more than one binding of this backend: not usable here
            return False  # (raised on, it read as the call's own operands being too large: large.py recursed)
        if ok:
            self.verified.add(key)
            return True
        self.disabled.add(v.name)
        warnings.warn(
            f"vkblas: GEMM variant {v.name} ({spec.dtype.name}, loads {spec.a_mode}/{spec.b_mode}) gave wrong "
            f"results on {self.backend.dev.info['name']} (max error {err:.3g}); it is disabled",
            RuntimeWarning,
            stacklevel=4,
        )
        return False


#: what the fp32 defaults pick, small to large (gemm.default_choice), checked when a device starts
STARTUP_VARIANTS = (
    "32x32k16.4x4.db",
    "64x64k16.4x4.db",
    "128x128k8.8x8.db",
    "128x256k8.8x16.db",
    "128x256k16.8x16.db.p0",
)


def startup_check(backend: Any) -> None:
    """Device start-up self-check: each default fp32 variant on a small edge-tiled problem in the common layout
    (row-major operands, vec4 loads and stores) against numpy. Drivers' feature reports are not trusted blindly: a
    variant the driver gets wrong is disabled here, with a warning, before any user matmul. Other variants and
    layouts are checked on first use."""
    t = tuner(backend)
    spec = Spec(float32, 0, "vk", "vi", True, False)
    for name in STARTUP_VARIANTS:
        v = gemm.BY_NAME[name]
        if gemm.applicable(v, spec, backend.dev.limits):
            t.verify_variant(v, spec)


def _operand(
    be: Any,
    rng: np.random.Generator,
    dtype: Any,
    rows: int,
    cols: int,
    mode: str,
    nb: int,
    i_first: bool,
) -> tuple[View, np.ndarray]:
    """A (nb, rows, cols) device view whose load mode is ``mode`` (rows x cols is the logical operand; ``i_first``
    says whether the M/N axis is rows) and its host values."""
    host = rng.integers(-3, 4, (nb, rows, cols)) if dtype is int32 else rng.standard_normal((nb, rows, cols))
    host = host.astype(dtype.np)
    # which axis is contiguous: the "i" (M/N) axis for vi/si, the K axis for vk/sk
    i_contig = mode in ("vi", "si")
    contig_axis = (1 if i_first else 2) if i_contig else (2 if i_first else 1)
    stored = host if contig_axis == 2 else np.ascontiguousarray(np.swapaxes(host, 1, 2))
    off = 0 if mode[0] == "v" else 1  # misaligned: forces scalar loads
    flat = np.concatenate([np.zeros(off, dtype.np), stored.reshape(-1)])
    st = contiguous_strides(stored.shape)
    strides = st if contig_axis == 2 else (st[0], st[2], st[1])
    storage = be.from_numpy(flat, dtype)
    shape = (nb, rows, cols) if nb > 1 else (rows, cols)
    strides = strides if nb > 1 else strides[1:]
    return View(storage, shape, tuple(strides), off), host if nb > 1 else host[0]


def _plain(spec: Spec) -> Spec:
    """The spec a variant is self-checked under: ``spec``'s load layouts without gathers or bias."""
    return dataclasses.replace(spec, a_gather=None, b_gather=None, bias="")


def _check_problem(v: Variant, spec: Spec) -> tuple[int, int, int, int, int]:
    """(M, N, K, batch, out's offset) of ``v``'s self-check in ``spec``'s layouts: edge tiles on every side,
    three K tiles and a remainder, a misaligned out where the spec stores scalars."""
    n_aligned = spec.out_vec or spec.b_mode == "vi"
    ooff = 0 if spec.out_vec or spec.split or not n_aligned else 1
    return v.bm + 4, v.bn + (4 if n_aligned else 3), 3 * v.bk + 4, 2 if spec.rank else 1, ooff


def check_spec(v: Variant, spec: Spec) -> Spec:
    """The spec of the GEMM :func:`self_check` builds for ``v`` in ``spec``'s layouts (its kernel's source)."""
    _, n, _, nb, ooff = _check_problem(v, spec)
    return Spec(
        spec.dtype, int(nb > 1), spec.a_mode, spec.b_mode, n % 4 == 0 and (spec.split or ooff % 4 == 0), spec.split
    )


def self_check(be: Any, v: Variant, spec: Spec) -> tuple[bool, float]:
    """(passed, max relative error) of variant ``v`` with ``spec``'s load modes on a small edge-tiled problem."""
    rng = np.random.default_rng(7)
    dtype = spec.dtype
    M, N, K, nb, ooff = _check_problem(v, spec)
    a, ha = _operand(be, rng, dtype, M, K, spec.a_mode, nb, True)
    b, hb = _operand(be, rng, dtype, K, N, spec.b_mode, nb, False)
    oshape = (nb, M, N) if nb > 1 else (M, N)
    out = View(be.alloc(int(np.prod(oshape)) + ooff, dtype), oshape, contiguous_strides(oshape), ooff)
    gp = gemm.build_plan(be, out, a, b, v, 2 if spec.split else 1)
    if gp.spec != check_spec(v, spec):  # the test problem must match the spec (and what _compile_check compiled)
        raise AssertionError(f"self-check built {gp.spec} for {spec}, expected {check_spec(v, spec)}")
    gemm.record(be, gp, out, a, b)
    got = be.to_numpy(out).astype(np.float64)
    ref = ha.astype(np.float64) @ hb.astype(np.float64)
    scale = np.abs(ha.astype(np.float64)) @ np.abs(hb.astype(np.float64)) + 1e-30
    err = float(np.max(np.abs(got - ref) / scale))
    tol = 0.0 if dtype is int32 else (1e-2 if dtype is float16 else 1e-5)
    return bool(err <= tol), err


def tuner(backend: Any) -> Tuner:
    """The backend's tuner (created on first use; it lives as long as the backend)."""
    t = getattr(backend, "_gemm_tuner", None)
    if t is None:
        t = Tuner(backend)
        backend._gemm_tuner = t
    return t


__all__ = [
    "MIN_TUNE_FLOPS",
    "Tuner",
    "cache_path",
    "check_spec",
    "float16",
    "self_check",
    "shape_class",
    "startup_check",
    "tuner",
]
