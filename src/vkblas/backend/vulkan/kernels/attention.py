"""Fused scaled-dot-product attention, forward and backward (FlashAttention-2's tiling, in fp32 arithmetic).

Two designs, generated from one set of pieces, chosen per adapter (:func:`choose`, :data:`DESIGNS`):

* **register-blocked** (``_blocked_*``, preferred): a workgroup owns ``BR`` consecutive rows of one (batch, head) --
  query rows (forward, ``dq``) or key rows (``dkv``) -- and walks tiles of ``BC`` rows of the other side, both in
  padded row-major workgroup tiles. Each of its ``BR/TM x BC/TN`` invocations computes a TM x TN register block
  (4 x 4 by default: 8 vec4 loads per 64 multiply-adds) of the score tile; the forward's row max is exchanged
  through workgroup memory; the probabilities (or dS) go to workgroup memory, and the second product (P V, dS K,
  P^T dO, dS^T Q) is again a register block of TM own rows by the invocation's vec4 columns. The tile is the first
  of :data:`BLOCK_TILES` that fits the workgroup memory and invocation limits.
* **per-row** (the fallback where no blocked tile fits): each invocation owns one row; a workgroup of ``BR``
  invocations holds its ``BR`` rows in shared memory with a padded pitch, and the other side streams through shared
  memory in tiles of ``BC`` rows that every invocation reads at the same address (a broadcast).

Accumulators live in registers. No T x T matrix is ever written; per own row (or block of rows):

* ``forward``: per key tile, the ``BC`` scores of the own query row, the tile's max, an online-softmax rescale of
  the output accumulator, then ``acc += p * v``; at the end ``out = acc / l`` and the log-sum-exp ``lse`` per row.
* ``dq`` (backward, first): recomputes ``p = exp(s - lse)`` per key, ``dp = dO . v``, ``ds = p (dp - delta)`` and
  ``dq += ds k``; it first computes ``delta = dO . O`` of its own row and stores it for ``dkv``.
* ``dkv`` (backward, second): per own key row, over query tiles: ``dv += p dO``, ``dk += ds q``.

Scores are kept in base 2 (``q`` is loaded times ``scale * log2(e)``; ``exp2``), the log-sum-exp is stored in
natural log. Masking never computes with infinities (drivers that compile with fast-math assume none): a masked
score is a flag that zeroes its probability, the running max starts at a finite -3e38, and a fully masked row
gives 0 (PyTorch's safe softmax). A row with a NaN or +inf score that counts (PyTorch's reference softmax makes the
whole row NaN: exp(inf - inf)) is flagged by its bits and written as NaN, its lse NaN; the backward kernels give
such a row NaN probabilities for every key it visits, masked ones included, as the reference does. Masks: ``bool``
(False = masked) or ``float`` (added; -inf = masked), any strides (broadcast by stride 0). Dropout keeps
``(b, h, i, j)`` when the ``(bits >> 8)`` of the counter-based generator at element ``((b*H + h)*L + i)*S + j``
reach the threshold; the forward stores its (seed, counter) in the ``rng`` view, where the backward kernels read
them, so that a replayed graph (which re-seeds the forward) stays consistent. Every (b, h, row, dim) tensor,
outputs and the backward's saved ``out`` included, is read and written through its strides (params words), so a
model gets its output (B, L, H, Ev) in memory and its gradients in its inputs' layouts; lse, delta and dS are
contiguous.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ....dtypes import DType
from ...base import dropout_threshold
from ...mathlib import NAN, bits
from .random import _PCG
from .wgsl import STORAGE_TYPE, header, store_value

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
#: the finite "minus infinity" of running maxima
_LOWEST = "-3.0e38"
# (rows per workgroup, keys per tile), most preferred first: the per-row kernels
_TILES = ((64, 32), (64, 16), (32, 32), (32, 16), (64, 8), (32, 8), (16, 16), (16, 8))
# (own rows BR, streamed rows per tile BC[, TM own rows and TN streamed rows per invocation: 4, 4 where left out])
# of the register-blocked kernels, most preferred first
BLOCK_TILES: tuple[tuple[int, ...], ...] = ((64, 64), (64, 32), (32, 64), (32, 32), (32, 16), (16, 32), (16, 16))
#: the kernel designs in order of preference; an adapter that cannot fit a design's smallest tile in its workgroup
#: memory gets the next one (tests and benchmarks narrow it to compare the two)
DESIGNS = ("blocked", "rows")


@dataclass(frozen=True)
class Config:
    dtype: DType
    dqk: int
    dv: int
    causal: bool
    mask: str | None  # None, "bool" or "float"
    dropout: bool
    #: the dq kernel also writes the gradient of a float mask (dS, the only T x T output, when asked for)
    mask_grad: bool = False
    br: int = 64
    bc: int = 32
    #: the register-blocked design (``_blocked_*``) instead of one row per invocation, with ``tm`` own rows by
    #: ``tn`` streamed rows per invocation (multiples of 4)
    blocked: bool = False
    tm: int = 4
    tn: int = 4

    @property
    def threads(self) -> int:
        return (self.br // self.tm) * (self.bc // self.tn) if self.blocked else self.br

    @property
    def d4(self) -> int:
        return -(-self.dqk // 4)

    @property
    def v4(self) -> int:
        return -(-self.dv // 4)


def shared_bytes(kind: str, cfg: Config) -> int:
    """Workgroup memory of a kernel, 16 bytes per vec4 (padded pitches as the generators declare them)."""
    if cfg.blocked:
        return 16 * sum(_block_arrays(kind, cfg).values()) + 4 * sum(_block_scalars(kind, cfg).values())
    br, bc, d4, v4 = cfg.br, cfg.bc, cfg.d4, cfg.v4
    if kind == "forward":
        return 16 * (br * (d4 + 1) + bc * (d4 + v4))
    extra = 8 * bc if kind == "dkv" else 0  # the streamed rows' lse and delta
    return 16 * (br * (d4 + 1) + br * (v4 + 1) + bc * (d4 + v4)) + extra


def choose(kind: str, cfg: Config, limit: int, max_threads: int) -> Config:
    """``cfg`` with the first design and tile (in :data:`DESIGNS`' order) that fits the adapter's limits."""
    designs = [d for d in DESIGNS if d == "rows" or kind in BLOCKED] or ["rows"]
    candidates = []
    for design in designs:
        for br, bc, *block in BLOCK_TILES if design == "blocked" else _TILES:
            tm, tn = block or (4, 4)
            if tm % 4 or tn % 4 or br % tm or bc % tn:
                raise ValueError(f"attention tile {br}x{bc}/{tm}x{tn}: blocks must be multiples of 4 dividing it")
            candidates.append(replace(cfg, br=br, bc=bc, tm=tm, tn=tn, blocked=design == "blocked"))
    for c in candidates:
        if c.threads <= max_threads and shared_bytes(kind, c) <= limit:
            return c
    smallest = min((shared_bytes(kind, c) for c in candidates), default=0)
    raise TypeError(
        f"attention with head dims {cfg.dqk}/{cfg.dv} needs {smallest} bytes of workgroup memory (and at most "
        f"{max_threads} invocations), more than this adapter's {limit}"
    )


# ---------------------------------------------------------------- shared WGSL pieces
def _bindings(kind: str, cfg: Config) -> list[tuple[str, str]]:
    """(name, element type) in binding order; the mask, when there is one, comes last."""
    ty = STORAGE_TYPE[cfg.dtype]
    names = {
        "forward": [("o_out", ty), ("o_lse", "f32"), ("rng", "i32"), ("x_q", ty), ("x_k", ty), ("x_v", ty)],
        "dq": [
            ("o_dq", ty),
            ("o_delta", "f32"),
            ("rng", "i32"),
            ("x_q", ty),
            ("x_k", ty),
            ("x_v", ty),
            ("x_out", ty),
            ("x_dout", ty),
            ("x_lse", "f32"),
        ],
        "dkv": [
            ("o_dk", ty),
            ("o_dv", ty),
            ("rng", "i32"),
            ("x_q", ty),
            ("x_k", ty),
            ("x_v", ty),
            ("x_dout", ty),
            ("x_lse", "f32"),
            ("x_delta", "f32"),
        ],
    }[kind]
    if cfg.mask is not None:
        names.append(("x_mask", "u32" if cfg.mask == "bool" else ty))
    if kind == "dq" and cfg.mask_grad:
        names.append(("o_dmask", ty))
    return names


#: bindings that are not (b, h, row, dim) tensors: per-row statistics, the dropout state and dS (contiguous)
_FLAT = ("o_lse", "o_delta", "x_lse", "x_delta", "rng", "o_dmask")


def _strided(kind: str, cfg: Config) -> list[str]:
    """The (b, h, row, dim) bindings, outputs included, in binding order: their strides are params."""
    return [name for name, _ in _bindings(kind, cfg) if name not in _FLAT]


def strided_slots(kind: str, cfg: Config) -> list[int]:
    """The binding positions of :func:`_strided`'s views (whose strides :func:`static_words` takes, in order)."""
    names = [name for name, _ in _bindings(kind, cfg)]
    return [names.index(name) for name in _strided(kind, cfg)]


def _prelude(kind: str, cfg: Config) -> str:
    """Buffer declarations (renamed b0..), the params as named ``let``s, and the (batch, head) of the workgroup.

    Params: one offset per binding, then (forward only) pcg(seed) and the counter, then B, H, L, S, scale * log2 e,
    1 / (1 - p), the keep threshold, and the strides (b, h, row, dim) of each (b, h, row, dim) binding (outputs
    included: ``out`` may be a permuted view, the gradients take their inputs' layout), named by the binding less
    its ``x_`` / ``o_`` prefix."""
    binds = _bindings(kind, cfg)
    src = header([(f"b{i}", t) for i, (_, t) in enumerate(binds)], STORAGE_TYPE[cfg.dtype] == "f16")
    src += _PCG
    body = []
    for i, (name, _) in enumerate(binds):
        body.append(f"    let off_{name} = pi({i}u);")
    w = len(binds)
    if kind == "forward":
        body += [f"    let seed_h = pu({w}u);", f"    let ctr = pu({w + 1}u);"]
        w += 2
    else:
        body += [
            "    let seed_h = bitcast<u32>(b2[u32(off_rng)]);",
            "    let ctr = bitcast<u32>(b2[u32(off_rng) + 1u]);",
        ]
    for k, name in enumerate(("NB", "NH", "L", "S")):
        body.append(f"    let {name} = pu({w + k}u);")
    body += [f"    let SC = pf({w + 4}u);", f"    let KEEP = pf({w + 5}u);", f"    let THR = pu({w + 6}u);"]
    w += 7
    strided = _strided(kind, cfg)
    for name in strided:
        for k, part in enumerate(("b", "h", "n", "d")):
            body.append(f"    let s_{name[2:]}_{part} = pi({w + k}u);")
        w += 4
    body += [
        "    let bh = wid.z * 65535u + wid.y;",
        "    if (bh >= NB * NH) { return; }",
        "    let hb = i32(bh / NH);",
        "    let hh = i32(bh % NH);",
    ]
    for name in strided:
        short = name[2:]
        body.append(f"    let base_{short} = off_{name} + hb * s_{short}_b + hh * s_{short}_h;")
    src += f"@compute @workgroup_size({cfg.threads})\n"
    src += "fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {\n"
    return src + "\n".join(body) + "\n"


def _at(tensor: str, row: str, col: str) -> str:
    """WGSL: the element index of (``row``, ``col``) of this (batch, head) in the strided binding ``tensor``."""
    return f"u32(base_{tensor} + i32({row}) * s_{tensor}_n + i32({col}) * s_{tensor}_d)"


def _binding(kind: str, cfg: Config, name: str) -> str:
    return f"b{[n for n, _ in _bindings(kind, cfg)].index(name)}"


def _indent(code: str, level: int) -> str:
    pad = "    " * level
    return "".join(pad + line + "\n" if line else "\n" for line in code.split("\n"))


def _load_rows(
    kind: str,
    cfg: Config,
    arr: str,
    pitch: int,
    tensor: str,
    d: int,
    first: str,
    limit: str,
    rows: int,
    scale: str = "",
) -> str:
    """Cooperatively load ``rows`` rows (from row ``first``, zero past ``limit`` and past dim ``d``) of a strided
    (b, h, row, dim) input into the vec4 array ``arr`` with ``pitch`` vec4s per row, times ``scale``."""
    dp = 4 * -(-d // 4)
    buf = _binding(kind, cfg, f"x_{tensor}")
    at = _at(tensor, "n", "c")
    return (
        f"for (var t = lid; t < {rows * dp}u; t += {cfg.threads}u) {{\n"
        f"    let r = t / {dp}u;\n    let c = t % {dp}u;\n    let n = {first} + r;\n    var x = 0.0;\n"
        f"    if (n < {limit} && c < {d}u) {{ x = f32({buf}[{at}]){scale}; }}\n"
        f"    {arr}[r * {pitch}u + c / 4u][c % 4u] = x;\n}}"
    )


def _dot(a: str, a0: str, b: str, b0: str, n4: int) -> str:
    """WGSL expression: ``dot(a[a0 ..], b[b0 ..])`` over ``n4`` vec4s, unrolled; ``a`` may instead name the own
    row's registers (``a0`` is then ``None``: ``a_0, a_1, ..``)."""
    first = [f"{a}_{e}" if a0 is None else f"{a}[{a0} + {e}u]" for e in range(n4)]
    return " + ".join(f"dot({x}, {b}[{b0} + {e}u])" for e, x in enumerate(first))


#: own rows of at most this many vec4s (head dims up to 64) are held in registers: a thread's own row is read by
#: every step, and from shared memory that read (one address per thread) costs four times a broadcast's
#: bandwidth; wider rows stay in shared memory (the registers would spill)
_REGS_MAX = 16


def _own_regs(name: str, arr: str, pitch: int, n4: int) -> str:
    """Copy the own row ``arr[lid * pitch ..]`` into registers ``name_0 ..`` (after a barrier)."""
    return "workgroupBarrier();\n" + "\n".join(f"let {name}_{e} = {arr}[lid * {pitch}u + {e}u];" for e in range(n4))


def _dot_own(own: tuple[str, str | None], b: str, b0: str, n4: int) -> str:
    """``dot(own row, b[b0 ..])`` (the own row first: registers or shared memory)."""
    return _dot(own[0], own[1], b, b0, n4)


def _regs(name: str, n4: int) -> str:
    """Declarations of ``n4`` vec4 accumulators ``name_0 ..`` (registers: never indexed dynamically)."""
    return "\n".join(f"var {name}_{e} = vec4<f32>(0.0);" for e in range(n4))


def _axpy(acc: str, weight: str, arr: str, base: str, n4: int) -> str:
    """``acc_e += weight * arr[base + e]`` for every accumulator, unrolled."""
    return "\n".join(f"{acc}_{e} += {weight} * {arr}[{base} + {e}u];" for e in range(n4))


def _score_mask(kind: str, cfg: Config, i: str, j: str) -> str:
    """WGSL setting ``ok`` (the score of (i, j) counts) and adding the float mask to ``s2`` (base-2 score)."""
    src = f"var ok = {i} < L && {j} < S;"
    if cfg.causal:
        src += f"\nok = ok && {j} <= {i};"
    if cfg.mask is not None:
        idx = f"u32(base_mask + i32({i}) * s_mask_n + i32({j}) * s_mask_d)"
        src += f"\nif (ok) {{\n    let mv = {_binding(kind, cfg, 'x_mask')}[{idx}];\n"
        if cfg.mask == "bool":
            src += "    ok = mv != 0u;\n"
        else:  # -inf masks (by its bits: no arithmetic on infinities)
            src += f"    ok = bitcast<u32>(f32(mv)) != 0xff800000u;\n    s2 = s2 + f32(mv) * {LOG2E};\n"
        src += "}"
    return src


def _keep(i: str, j: str) -> str:
    """WGSL bool: dropout keeps (i, j) of this (batch, head)."""
    return f"((pcg((ctr + ((bh * L + {i}) * S + {j})) ^ seed_h) >> 8u) >= THR)"


def _store_row(
    buf: str, dtype: DType, tensor: str, row: str, acc: str, n4: int, d: int, scale: str, nan_if: str | None = None
) -> str:
    """Write the own row's accumulators ``acc_e`` (times ``scale``) to row ``row`` of the strided output
    ``tensor`` (NaN where the WGSL bool ``nan_if`` holds)."""
    lines = []
    for e in range(n4):
        for c in range(min(4, d - 4 * e)):
            v = f"{acc}_{e}[{c}] * {scale}"
            value = store_value(v if nan_if is None else f"select({v}, {NAN}, {nan_if})", "f32", dtype)
            lines.append(f"{buf}[{_at(tensor, row, f'{4 * e + c}u')}] = {value};")
    return "\n".join(lines)


def _kv_loop(cfg: Config, first: str, end: str, loads: list[str], body: str) -> str:
    """A loop over the streamed tiles: barrier, cooperative loads, barrier, the per-row ``body``."""
    return (
        f"for (var t0 = {first}; t0 < {end}; t0 += {cfg.bc}u) {{\n"
        + _indent("workgroupBarrier();\n" + "\n".join(loads) + "\nworkgroupBarrier();\n" + body, 1)
        + "}"
    )


def _key_tiles(kind: str, cfg: Config, end: str, body: str) -> str:
    """The loop of the query-row kernels (forward, dq) over tiles of keys and values up to ``end``."""
    loads = [
        _load_rows(kind, cfg, "ks", cfg.d4, "k", cfg.dqk, "t0", "S", cfg.bc),
        _load_rows(kind, cfg, "vs", cfg.v4, "v", cfg.dv, "t0", "S", cfg.bc),
    ]
    return _kv_loop(cfg, "0u", end, loads, body)


# ---------------------------------------------------------------- the three kernels
def _forward(cfg: Config) -> str:
    br, bc, d4, v4 = cfg.br, cfg.bc, cfg.d4, cfg.v4
    k = "forward"
    q_row = ("q", None) if d4 <= _REGS_MAX else ("qs", f"lid * {d4 + 1}u")
    keep = f"select(0.0, p * KEEP, {_keep('i', 't0 + jj')})" if cfg.dropout else "p"
    # a score that takes part: unmasked, or (a float mask) masked by adding -inf, which leaves NaN for NaN and +inf
    counts = "i < L && j < S" if cfg.mask == "float" else "ok"
    nan_or_inf = f"{bits('isnan', 's2')} || bitcast<u32>(s2) == 0x7f800000u"
    scores = (
        f"var s: array<f32, {bc}>;\nvar okm: array<bool, {bc}>;\nvar mt = {_LOWEST};\n"
        f"for (var jj = 0u; jj < {bc}u; jj++) {{\n"
        f"    let j = t0 + jj;\n    var s2 = {_dot(*q_row, 'ks', f'jj * {d4}u', d4)};\n"
        + _indent(_score_mask(k, cfg, "i", "j"), 1)
        + f"    if (({counts}) && ({nan_or_inf})) {{ bad = true; }}\n"
        + "    s[jj] = s2;\n    okm[jj] = ok;\n    if (ok) { mt = max(mt, s2); }\n}\n"
        # online softmax: rescale what the earlier tiles added up
        "let mn = max(m, mt);\nlet alpha = exp2(m - mn);\nl = l * alpha;\n"
        + "\n".join(f"acc_{e} = acc_{e} * alpha;" for e in range(v4))
        + f"\nfor (var jj = 0u; jj < {bc}u; jj++) {{\n"
        "    let p = select(0.0, exp2(s[jj] - mn), okm[jj]);\n    l += p;\n"
        f"    let pd = {keep};\n" + _indent(_axpy("acc", "pd", "vs", f"jj * {v4}u", v4), 1) + "}\nm = mn;\n"
    )
    end = f"min(S, row0 + {br}u)" if cfg.causal else "S"  # causal: no tile past the last row's diagonal
    main = (
        f"let row0 = wid.x * {br}u;\nlet i = row0 + lid;\n"
        "if (wid.x == 0u && bh == 0u && lid == 0u) {\n"
        "    b2[u32(off_rng)] = bitcast<i32>(seed_h);\n    b2[u32(off_rng) + 1u] = bitcast<i32>(ctr);\n}\n"
        + _load_rows(k, cfg, "qs", d4 + 1, "q", cfg.dqk, "row0", "L", br, " * SC")
        + ("\n" + _own_regs("q", "qs", d4 + 1, d4) if q_row[1] is None else "")
        + f"\nvar m = {_LOWEST};\nvar l = 0.0;\nvar bad = false;\n{_regs('acc', v4)}\n"
        + _key_tiles(k, cfg, end, scores)
        + "\nif (i < L) {\n    let inv = select(0.0, 1.0 / l, l > 0.0);\n"
        + _indent(
            _store_row("b0", cfg.dtype, "out", "i", "acc", v4, cfg.dv, "inv", "bad"),
            1,
        )
        # -inf for a fully masked row, NaN for a NaN one
        + f"    let lse = select(select(bitcast<f32>(0xff800000u), (m + log2(l)) * {LN2}, l > 0.0), {NAN}, bad);\n"
        "    b1[u32(off_o_lse) + bh * L + i] = lse;\n}"
    )
    return _assemble(k, cfg, _arrays(qs=br * (d4 + 1), ks=bc * d4, vs=bc * v4), main)


def _dq(cfg: Config) -> str:
    br, bc, d4, v4 = cfg.br, cfg.bc, cfg.d4, cfg.v4
    k = "dq"
    q_row = ("q", None) if d4 <= _REGS_MAX else ("qs", f"lid * {d4 + 1}u")
    drop = f"\n    dp = select(0.0, dp * KEEP, {_keep('i', 'j')});" if cfg.dropout else ""
    dmask = ""
    if cfg.mask_grad:  # d loss / d mask = ds (the mask adds to the natural-log score)
        out = _binding(k, cfg, "o_dmask")
        value = store_value("ds", "f32", cfg.dtype)
        dmask = f"    if (i < L && j < S) {{ {out}[u32(off_o_dmask) + (bh * L + i) * S + j] = {value}; }}\n"
    body = (
        f"for (var jj = 0u; jj < {bc}u; jj++) {{\n"
        f"    let j = t0 + jj;\n    var s2 = {_dot(*q_row, 'ks', f'jj * {d4}u', d4)};\n"
        + _indent(_score_mask(k, cfg, "i", "j"), 1)
        + f"    let p = select(select(0.0, exp2(s2 - lse2), ok), {NAN}, nan_row);\n"
        f"    var dp = {_dot('dos', f'lid * {v4 + 1}u', 'vs', f'jj * {v4}u', v4)};{drop}\n"
        "    let ds = p * (dp - delta);\n" + _indent(_axpy("acc", "ds", "ks", f"jj * {d4}u", d4), 1) + dmask + "}\n"
    )
    end = f"min(S, row0 + {br}u)" if cfg.causal else "S"
    main = (
        f"let row0 = wid.x * {br}u;\nlet i = row0 + lid;\n"
        + _load_rows(k, cfg, "qs", d4 + 1, "q", cfg.dqk, "row0", "L", br, " * SC")
        + "\n"
        + _load_rows(k, cfg, "dos", v4 + 1, "dout", cfg.dv, "row0", "L", br)
        # delta = dO . O of the own row, stored for the dkv kernel
        + ("\n" + _own_regs("q", "qs", d4 + 1, d4) if q_row[1] is None else "\nworkgroupBarrier();")
        + "\nvar delta = 0.0;\nvar lse2 = 0.0;\nvar nan_row = false;\nif (i < L) {\n"
        + "".join(
            f"    delta += dos[lid * {v4 + 1}u + {c // 4}u][{c % 4}u] * f32(b6[{_at('out', 'i', f'{c}u')}]);\n"
            for c in range(cfg.dv)
        )
        + "    b1[u32(off_o_delta) + bh * L + i] = delta;\n"
        f"    lse2 = b8[u32(off_x_lse) + bh * L + i] * {LOG2E};\n"
        f"    nan_row = {bits('isnan', 'lse2')};\n}}\n{_regs('acc', d4)}\n"
        + _key_tiles(k, cfg, end, body)
        # s = scale q.k (q is held times scale log2 e): dq = scale sum ds k
        + f"\nif (i < L) {{\n    let sc = SC * {LN2};\n"
        + _indent(_store_row("b0", cfg.dtype, "dq", "i", "acc", d4, cfg.dqk, "sc"), 1)
        + "}"
    )
    return _assemble(k, cfg, _arrays(qs=br * (d4 + 1), dos=br * (v4 + 1), ks=bc * d4, vs=bc * v4), main)


def _dkv(cfg: Config) -> str:
    br, bc, d4, v4 = cfg.br, cfg.bc, cfg.d4, cfg.v4
    k = "dkv"
    k_row = ("kr", None) if d4 <= _REGS_MAX else ("ks", f"lid * {d4 + 1}u")
    if cfg.dropout:
        keep = f"    let kept = {_keep('i', 'j')};\n    let pd = select(0.0, p * KEEP, kept);\n"
        drop = "\n    dp = select(0.0, dp * KEEP, kept);"
    else:
        keep, drop = "    let pd = p;\n", ""
    body = (
        f"for (var ii = 0u; ii < {bc}u; ii++) {{\n"
        f"    let i = t0 + ii;\n    var s2 = {_dot_own(k_row, 'qt', f'ii * {d4}u', d4)};\n"
        + _indent(_score_mask(k, cfg, "i", "j"), 1)
        + f"    let p = select(select(0.0, exp2(s2 - lse_t[ii]), ok), {NAN}, {bits('isnan', 'lse_t[ii]')});\n"
        + keep
        + _indent(_axpy("adv", "pd", "dot_t", f"ii * {v4}u", v4), 1)
        + f"    var dp = {_dot('dot_t', f'ii * {v4}u', 'vs', f'lid * {v4 + 1}u', v4)};{drop}\n"
        "    let ds = p * (dp - delta_t[ii]);\n" + _indent(_axpy("adk", "ds", "qt", f"ii * {d4}u", d4), 1) + "}\n"
    )
    rows = (
        f"for (var t = lid; t < {bc}u; t += {br}u) {{\n"
        "    let r = t0 + t;\n    var a = 0.0;\n    var dl = 0.0;\n"
        f"    if (r < L) {{\n        a = b7[u32(off_x_lse) + bh * L + r] * {LOG2E};\n"
        "        dl = b8[u32(off_x_delta) + bh * L + r];\n    }\n"
        "    lse_t[t] = a;\n    delta_t[t] = dl;\n}"
    )
    start = f"(col0 / {bc}u) * {bc}u" if cfg.causal else "0u"  # causal: only rows i >= j see key j
    main = (
        f"let col0 = wid.x * {br}u;\nlet j = col0 + lid;\n"
        + _load_rows(k, cfg, "ks", d4 + 1, "k", cfg.dqk, "col0", "S", br)
        + "\n"
        + _load_rows(k, cfg, "vs", v4 + 1, "v", cfg.dv, "col0", "S", br)
        + ("\n" + _own_regs("kr", "ks", d4 + 1, d4) if k_row[1] is None else "")
        + f"\n{_regs('adk', d4)}\n{_regs('adv', v4)}\n"
        + _kv_loop(
            cfg,
            start,
            "L",
            [
                _load_rows(k, cfg, "qt", d4, "q", cfg.dqk, "t0", "L", bc, " * SC"),
                _load_rows(k, cfg, "dot_t", v4, "dout", cfg.dv, "t0", "L", bc),
                rows,
            ],
            body,
        )
        # qt holds q * scale * log2 e: dk = scale sum ds q = ln2 sum ds qt
        + "\nif (j < S) {\n"
        + _indent(_store_row("b0", cfg.dtype, "dk", "j", "adk", d4, cfg.dqk, f"{LN2}"), 1)
        + _indent(_store_row("b1", cfg.dtype, "dv", "j", "adv", v4, cfg.dv, "1.0"), 1)
        + "}"
    )
    smem = _arrays(ks=br * (d4 + 1), vs=br * (v4 + 1), qt=bc * d4, dot_t=bc * v4)
    smem += f"var<workgroup> lse_t: array<f32, {bc}>;\nvar<workgroup> delta_t: array<f32, {bc}>;\n"
    return _assemble(k, cfg, smem, main)


# ---------------------------------------------------------------- the register-blocked kernels
# A workgroup of WY x WX = (BR/TM) x (BC/TN) threads owns BR rows (query rows: forward, dq; key rows: dkv) and walks
# tiles of BC rows of the other side. Thread (ty, tx) owns the rows ty + r*WY (r < TM) and the streamed rows
# tx + c*WX (c < TN) of every score tile: interleaved, so neighbouring threads read neighbouring rows of the padded
# row-major tiles (no bank conflicts) and threads of one ty read the same own rows (a broadcast). A 4 x 4 block
# costs 8 vec4 loads per 64 multiply-adds (the GEMM's ratio; the per-row kernels load one vec4 per 4). The
# probabilities (or dS) go to workgroup memory as vec4s of 4 of a thread's own rows (``pt[g][c][ty]``), from where
# the second product (P V, dS K, P^T dO, dS^T Q) is again a register block: a thread owns its TM rows and the
# columns tx + e*WX (vec4s). Every value lives in a named register (naga neither unrolls loops nor keeps arrays
# in registers).
def _wy(cfg: Config) -> int:
    return cfg.br // cfg.tm


def _wx(cfg: Config) -> int:
    return cfg.bc // cfg.tn


def _block_arrays(kind: str, cfg: Config) -> dict[str, int]:
    """vec4 workgroup arrays of a blocked kernel and their lengths."""
    br, bc, d4, v4, pw = cfg.br, cfg.bc, cfg.d4, cfg.v4, (_wy(cfg) + 1) * cfg.tm // 4
    if kind == "forward":  # k and then v of a tile share one buffer
        return {"qs": br * (d4 + 1), "kv": bc * (max(d4, v4) + 1), "pt": bc * pw}
    if kind == "dq":
        return {"qs": br * (d4 + 1), "dos": br * (v4 + 1), "ks": bc * (d4 + 1), "vs": bc * (v4 + 1), "pt": bc * pw}
    return {
        "ks": br * (d4 + 1),
        "vs": br * (v4 + 1),
        "qt": bc * (d4 + 1),
        "dot_t": bc * (v4 + 1),
        "pt": bc * pw,
        "dst": bc * pw,
    }


def _block_scalars(kind: str, cfg: Config) -> dict[str, int]:
    """f32 workgroup arrays: the row-max / row-sum exchange (forward), the rows' delta and lse."""
    if kind == "forward":
        return {"red": cfg.br * _wx(cfg)}
    n = cfg.br if kind == "dq" else cfg.bc
    return {"rdelta": n, "rlse": n}


def _quad(cfg: Config, fmt: str) -> str:
    """``fmt`` for each (r, c) of a thread's block, one per line."""
    return "\n".join(fmt.format(r=r, c=c) for r in range(cfg.tm) for c in range(cfg.tn))


def _block_dot(cfg: Config, out: str, a: str, pa: int, b: str, pb: int, n4: int) -> str:
    """``out_r_c += a[own row r] . b[streamed row c]`` over ``n4`` vec4s (both padded row-major tiles)."""
    wy, wx = _wy(cfg), _wx(cfg)
    return (
        f"for (var e = 0u; e < {n4}u; e++) {{\n"
        + "".join(f"    let own{r} = {a}[(ty + {r * wy}u) * {pa}u + e];\n" for r in range(cfg.tm))
        + "".join(f"    let oth{c} = {b}[(tx + {c * wx}u) * {pb}u + e];\n" for c in range(cfg.tn))
        + _indent(_quad(cfg, f"{out}_{{r}}_{{c}} += dot(own{{r}}, oth{{c}});"), 1)
        + "}"
    )


def _cols(cfg: Config, n4: int) -> int:
    """vec4 columns per thread of an ``n4``-vec4-wide accumulator (thread tx owns tx, tx + WX, ..)."""
    return -(-n4 // _wx(cfg))


def _block_acc(cfg: Config, name: str, n4: int) -> str:
    return "\n".join(f"var {name}_{r}_{e} = vec4<f32>(0.0);" for r in range(cfg.tm) for e in range(_cols(cfg, n4)))


def _block_axpy(cfg: Config, acc: str, w: str, b: str, pb: int, n4: int) -> str:
    """``acc_r_e += w[jj][ty][r] * b[jj][tx + e*WX]`` for ``jj`` over the tile's streamed rows (inside a loop)."""
    wx, pw = _wx(cfg), _wy(cfg) + 1
    lines = [f"let w{g} = {w}[({g * cfg.bc}u + jj) * {pw}u + ty];" for g in range(cfg.tm // 4)]
    for e in range(_cols(cfg, n4)):
        upd = f"let x = {b}[jj * {pb}u + tx + {e * wx}u];\n" + "\n".join(
            f"{acc}_{r}_{e} += w{r // 4}[{r % 4}] * x;" for r in range(cfg.tm)
        )
        # a partial last column group (n4 not a multiple of WX): the threads past the width skip it
        lines.append(
            f"{{\n{_indent(upd, 1)}}}" if (e + 1) * wx <= n4 else f"if (tx + {e * wx}u < {n4}u) {{\n{_indent(upd, 1)}}}"
        )
    return "\n".join(lines)


def _block_pv(cfg: Config, terms: list[tuple[str, str, str, int, int]]) -> str:
    """The second products of a tile: for each (acc, weights, tile, pitch, width), ``acc += weights^T tile``."""
    body = "\n".join("{\n" + _indent(_block_axpy(cfg, acc, w, b, pb, n4), 1) + "}" for acc, w, b, pb, n4 in terms)
    return f"for (var jj = 0u; jj < {cfg.bc}u; jj++) {{\n{_indent(body, 1)}}}"


def _put_block(cfg: Config, arr: str, name: str) -> str:
    """Write a thread's block ``name_r_c`` to ``arr`` as vec4s of 4 own rows: group g (rows 4g ..) of streamed row
    ``n`` at ``(g * BC + n) * (WY + 1) + ty`` (the padding keeps neighbouring threads' writes on distinct banks)."""
    pw, lines = _wy(cfg) + 1, []
    for g in range(cfg.tm // 4):
        for c in range(cfg.tn):
            vals = ", ".join(f"{name}_{4 * g + k}_{c}" for k in range(4))
            lines.append(f"{arr}[({g * cfg.bc}u + tx + {c * _wx(cfg)}u) * {pw}u + ty] = vec4<f32>({vals});")
    return "\n".join(lines)


def _store_block(
    cfg: Config,
    buf: str,
    dtype: DType,
    tensor: str,
    row: str,
    acc: str,
    r: int,
    n4: int,
    d: int,
    scale: str,
    nan_if: str = "",
) -> str:
    """Store own row ``r``'s accumulators ``acc_r_e`` (times ``scale``; NaN where ``nan_if``) to row ``row`` of the
    strided output ``tensor``, its columns ``4 (tx + e*WX) ..`` that are below ``d``."""
    lines = []
    for e in range(_cols(cfg, n4)):
        lines.append(f"let cb{e} = 4u * (tx + {e * _wx(cfg)}u);")
        for k in range(4):
            v = f"{acc}_{r}_{e}[{k}] * {scale}"
            value = store_value(f"select({v}, {NAN}, {nan_if})" if nan_if else v, "f32", dtype)
            lines.append(f"if (cb{e} + {k}u < {d}u) {{ {buf}[{_at(tensor, row, f'cb{e} + {k}u')}] = {value}; }}")
    return "{\n" + _indent("\n".join(lines), 1) + "}"


def _each(cfg: Config, body: str, own: str, other: str) -> str:
    """``body`` for each (r, c) of the block, in its own scope, with the own row ``own`` and streamed row ``other``
    of the element (WGSL expressions of r and c) bound to ``i`` and ``j`` as the kernel's kind names them."""
    return "\n".join(
        "{\n" + _indent(f"{own.format(r=r, c=c)}\n{other.format(r=r, c=c)}\n" + body.format(r=r, c=c), 1) + "}"
        for r in range(cfg.tm)
        for c in range(cfg.tn)
    )


def _braces(code: str) -> str:
    """Escape WGSL braces for a later ``str.format`` (the per-element bodies are format templates)."""
    return code.replace("{", "{{").replace("}", "}}")


def _blocked_forward(cfg: Config) -> str:
    br, bc, d4, v4, wy, wx = cfg.br, cfg.bc, cfg.d4, cfg.v4, _wy(cfg), _wx(cfg)
    k = "forward"
    counts = "i < L && j < S" if cfg.mask == "float" else "ok"
    nan_or_inf = f"{bits('isnan', 's2')} || bitcast<u32>(s2) == 0x7f800000u"
    score = (
        "var s2 = s_{r}_{c};\n"
        + _braces(_score_mask(k, cfg, "i", "j"))
        + f"\nif (({counts}) && ({_braces(nan_or_inf)})) {{{{ bad_{{r}} = true; }}}}\n"
        "s_{r}_{c} = s2;\nok_{r}_{c} = ok;\nif (ok) {{ mx_{r} = max(mx_{r}, s2); }}"
    )
    keep = f"select(0.0, p * KEEP, {_braces(_keep('i', 'j'))})" if cfg.dropout else "p"
    prob = "let p = select(0.0, exp2(s_{r}_{c} - m_{r}), ok_{r}_{c});\nl_{r} += p;\ns_{r}_{c} = " + keep + ";"
    own, other = "let i = row0 + ty + {r}u * " + f"{wy}u;", "let j = t0 + tx + {c}u * " + f"{wx}u;"
    nv = _cols(cfg, v4)
    rescale = "\n".join(
        f"var mn_{r} = m_{r};\nfor (var x = 0u; x < {wx}u; x++) {{\n"
        f"    mn_{r} = max(mn_{r}, red[(ty + {r * wy}u) * {wx}u + x]);\n}}\n"
        f"let al_{r} = exp2(m_{r} - mn_{r});\nl_{r} = l_{r} * al_{r};\nm_{r} = mn_{r};\n"
        + "\n".join(f"o_{r}_{e} = o_{r}_{e} * al_{r};" for e in range(nv))
        for r in range(cfg.tm)
    )
    tile = (
        "workgroupBarrier();\n"
        + _load_rows(k, cfg, "kv", d4 + 1, "k", cfg.dqk, "t0", "S", bc)
        + "\nworkgroupBarrier();\n"
        + "\n".join(f"var s_{r}_{c} = 0.0;\nvar ok_{r}_{c} = false;" for r in range(cfg.tm) for c in range(cfg.tn))
        + "\n"
        + "\n".join(f"var mx_{r} = {_LOWEST};" for r in range(cfg.tm))
        + "\n"
        + _block_dot(cfg, "s", "qs", d4 + 1, "kv", d4 + 1, d4)
        + "\n"
        + _each(cfg, score, own, other)
        + "\n"
        # the tile's row max: each thread's 4 keys, then across the WX threads of the row
        + "\n".join(f"red[(ty + {r * wy}u) * {wx}u + tx] = mx_{r};" for r in range(cfg.tm))
        + "\nworkgroupBarrier();\n"
        + rescale
        + "\n"
        + _each(cfg, prob, own, other)
        + "\n"
        + _put_block(cfg, "pt", "s")
        + "\n"
        # every read of k (the scores) is behind the barrier above: v takes its place
        + _load_rows(k, cfg, "kv", v4 + 1, "v", cfg.dv, "t0", "S", bc)
        + "\nworkgroupBarrier();\n"
        + _block_pv(cfg, [("o", "pt", "kv", v4 + 1, v4)])
    )
    end = f"min(S, row0 + {br}u)" if cfg.causal else "S"  # causal: no tile past the last row's diagonal
    finish = []
    for r in range(cfg.tm):
        finish.append(
            f"var lt_{r} = 0.0;\nvar bt_{r} = false;\nfor (var x = 0u; x < {wx}u; x++) {{\n"
            f"    let z = red[(ty + {r * wy}u) * {wx}u + x];\n"
            f"    bt_{r} = bt_{r} || z < 0.0;\n    lt_{r} += max(z, 0.0);\n}}\n"
            f"let i{r} = row0 + ty + {r * wy}u;\nif (i{r} < L) {{\n"
            f"    let inv = select(0.0, 1.0 / lt_{r}, lt_{r} > 0.0);\n"
            + _indent(_store_block(cfg, "b0", cfg.dtype, "out", f"i{r}", "o", r, v4, cfg.dv, "inv", f"bt_{r}"), 1)
            # -inf for a fully masked row, NaN for a NaN one
            + f"    if (tx == 0u) {{\n        b1[u32(off_o_lse) + bh * L + i{r}] = "
            f"select(select(bitcast<f32>(0xff800000u), (m_{r} + log2(lt_{r})) * {LN2}, lt_{r} > 0.0), {NAN}, bt_{r});\n"
            "    }\n}"
        )
    main = (
        f"let row0 = wid.x * {br}u;\nlet ty = lid / {wx}u;\nlet tx = lid % {wx}u;\n"
        "if (wid.x == 0u && bh == 0u && lid == 0u) {\n"
        "    b2[u32(off_rng)] = bitcast<i32>(seed_h);\n    b2[u32(off_rng) + 1u] = bitcast<i32>(ctr);\n}\n"
        + _load_rows(k, cfg, "qs", d4 + 1, "q", cfg.dqk, "row0", "L", br, " * SC")
        + "\n"
        + "\n".join(f"var m_{r} = {_LOWEST};\nvar l_{r} = 0.0;\nvar bad_{r} = false;" for r in range(cfg.tm))
        + "\n"
        + _block_acc(cfg, "o", v4)
        + f"\nfor (var t0 = 0u; t0 < {end}; t0 += {bc}u) {{\n"
        + _indent(tile, 1)
        + "}\n"
        # the row sums (and NaN flags, as -1) across the row's threads; every read of red above is behind a barrier
        + "\n".join(f"red[(ty + {r * wy}u) * {wx}u + tx] = select(l_{r}, -1.0, bad_{r});" for r in range(cfg.tm))
        + "\nworkgroupBarrier();\n"
        + "\n".join(finish)
    )
    return _assemble(k, cfg, _block_smem(k, cfg), main)


def _blocked_dq(cfg: Config) -> str:
    br, bc, d4, v4, wy, wx = cfg.br, cfg.bc, cfg.d4, cfg.v4, _wy(cfg), _wx(cfg)
    k = "dq"
    drop = f"\ndp = select(0.0, dp * KEEP, {_braces(_keep('i', 'j'))});" if cfg.dropout else ""
    dmask = ""
    if cfg.mask_grad:  # d loss / d mask = ds (the mask adds to the natural-log score)
        out = _binding(k, cfg, "o_dmask")
        value = store_value("ds", "f32", cfg.dtype)
        dmask = f"\nif (i < L && j < S) {{{{ {out}[u32(off_o_dmask) + (bh * L + i) * S + j] = {value}; }}}}"
    elem = (
        "var s2 = s_{r}_{c};\n"
        + _braces(_score_mask(k, cfg, "i", "j"))
        + f"\nlet p = select(select(0.0, exp2(s2 - ls_{{r}}), ok), {NAN}, nan_{{r}});\nvar dp = dp_{{r}}_{{c}};"
        + drop
        + "\nlet ds = p * (dp - dl_{r});"
        + dmask
        + "\ns_{r}_{c} = ds;"
    )
    own, other = "let i = row0 + ty + {r}u * " + f"{wy}u;", "let j = t0 + tx + {c}u * " + f"{wx}u;"
    tile = (
        "workgroupBarrier();\n"
        + _load_rows(k, cfg, "ks", d4 + 1, "k", cfg.dqk, "t0", "S", bc)
        + "\n"
        + _load_rows(k, cfg, "vs", v4 + 1, "v", cfg.dv, "t0", "S", bc)
        + "\nworkgroupBarrier();\n"
        + "\n".join(f"var s_{r}_{c} = 0.0;\nvar dp_{r}_{c} = 0.0;" for r in range(cfg.tm) for c in range(cfg.tn))
        + "\n"
        + _block_dot(cfg, "s", "qs", d4 + 1, "ks", d4 + 1, d4)
        + "\n"
        + _block_dot(cfg, "dp", "dos", v4 + 1, "vs", v4 + 1, v4)
        + "\n"
        + _each(cfg, elem, own, other)
        + "\n"
        + _put_block(cfg, "pt", "s")
        + "\nworkgroupBarrier();\n"
        + _block_pv(cfg, [("a", "pt", "ks", d4 + 1, d4)])
    )
    end = f"min(S, row0 + {br}u)" if cfg.causal else "S"
    # delta = dO . O of each row, stored for the dkv kernel, and the rows' lse
    rows = (
        f"for (var t = lid; t < {br}u; t += {cfg.threads}u) {{\n"
        "    let i = row0 + t;\n    var delta = 0.0;\n    var lse2 = 0.0;\n    if (i < L) {\n"
        + "".join(
            f"        delta += dos[t * {v4 + 1}u + {c // 4}u][{c % 4}u] * f32(b6[{_at('out', 'i', f'{c}u')}]);\n"
            for c in range(cfg.dv)
        )
        + "        b1[u32(off_o_delta) + bh * L + i] = delta;\n"
        f"        lse2 = b8[u32(off_x_lse) + bh * L + i] * {LOG2E};\n    }}\n"
        "    rdelta[t] = delta;\n    rlse[t] = lse2;\n}\nworkgroupBarrier();\n"
        + "\n".join(
            f"let dl_{r} = rdelta[ty + {r * wy}u];\nlet ls_{r} = rlse[ty + {r * wy}u];\n"
            f"let nan_{r} = {bits('isnan', f'ls_{r}')};"
            for r in range(cfg.tm)
        )
    )
    # s = scale q.k (q is held times scale log2 e): dq = scale sum ds k
    store = "\n".join(
        f"let i{r} = row0 + ty + {r * wy}u;\nif (i{r} < L) {{\n"
        + _indent(
            _store_block(cfg, "b0", cfg.dtype, "dq", f"i{r}", "a", r, d4, cfg.dqk, "sc"),
            1,
        )
        + "}"
        for r in range(cfg.tm)
    )
    main = (
        f"let row0 = wid.x * {br}u;\nlet ty = lid / {wx}u;\nlet tx = lid % {wx}u;\n"
        + _load_rows(k, cfg, "qs", d4 + 1, "q", cfg.dqk, "row0", "L", br, " * SC")
        + "\n"
        + _load_rows(k, cfg, "dos", v4 + 1, "dout", cfg.dv, "row0", "L", br)
        + "\nworkgroupBarrier();\n"
        + rows
        + "\n"
        + _block_acc(cfg, "a", d4)
        + f"\nfor (var t0 = 0u; t0 < {end}; t0 += {bc}u) {{\n"
        + _indent(tile, 1)
        + f"}}\nlet sc = SC * {LN2};\n"
        + store
    )
    return _assemble(k, cfg, _block_smem(k, cfg), main)


def _blocked_dkv(cfg: Config) -> str:
    br, bc, d4, v4, wy, wx = cfg.br, cfg.bc, cfg.d4, cfg.v4, _wy(cfg), _wx(cfg)
    k = "dkv"
    if cfg.dropout:
        keep = f"let kept = {_braces(_keep('i', 'j'))};\nlet pd = select(0.0, p * KEEP, kept);\n"
        drop = "\ndp = select(0.0, dp * KEEP, kept);"
    else:
        keep, drop = "let pd = p;\n", ""
    elem = (
        "let la = rlse[tx + {c}u * " + f"{wx}u];\n"
        "var s2 = s_{r}_{c};\n"
        + _braces(_score_mask(k, cfg, "i", "j"))
        + f"\nlet p = select(select(0.0, exp2(s2 - la), ok), {NAN}, {_braces(bits('isnan', 'la'))});\n"
        + keep
        + "var dp = dp_{r}_{c};"
        + drop
        + "\ndp_{r}_{c} = p * (dp - rdelta[tx + {c}u * "
        + f"{wx}u]);\ns_{{r}}_{{c}} = pd;"
    )
    # the own rows are keys (j), the streamed ones queries (i)
    own, other = "let j = col0 + ty + {r}u * " + f"{wy}u;", "let i = t0 + tx + {c}u * " + f"{wx}u;"
    rows = (
        f"for (var t = lid; t < {bc}u; t += {cfg.threads}u) {{\n"
        "    let r = t0 + t;\n    var a = 0.0;\n    var dl = 0.0;\n"
        f"    if (r < L) {{\n        a = b7[u32(off_x_lse) + bh * L + r] * {LOG2E};\n"
        "        dl = b8[u32(off_x_delta) + bh * L + r];\n    }\n"
        "    rlse[t] = a;\n    rdelta[t] = dl;\n}"
    )
    tile = (
        "workgroupBarrier();\n"
        + _load_rows(k, cfg, "qt", d4 + 1, "q", cfg.dqk, "t0", "L", bc, " * SC")
        + "\n"
        + _load_rows(k, cfg, "dot_t", v4 + 1, "dout", cfg.dv, "t0", "L", bc)
        + "\n"
        + rows
        + "\nworkgroupBarrier();\n"
        + "\n".join(f"var s_{r}_{c} = 0.0;\nvar dp_{r}_{c} = 0.0;" for r in range(cfg.tm) for c in range(cfg.tn))
        + "\n"
        + _block_dot(cfg, "s", "ks", d4 + 1, "qt", d4 + 1, d4)
        + "\n"
        + _block_dot(cfg, "dp", "vs", v4 + 1, "dot_t", v4 + 1, v4)
        + "\n"
        + _each(cfg, elem, own, other)
        + "\n"
        + _put_block(cfg, "pt", "s")
        + "\n"
        + _put_block(cfg, "dst", "dp")
        + "\nworkgroupBarrier();\n"
        + _block_pv(cfg, [("dv", "pt", "dot_t", v4 + 1, v4), ("dk", "dst", "qt", d4 + 1, d4)])
    )
    start = f"(col0 / {bc}u) * {bc}u" if cfg.causal else "0u"  # causal: only rows i >= j see key j
    # qt holds q * scale * log2 e: dk = scale sum ds q = ln2 sum ds qt
    store = "\n".join(
        f"let j{r} = col0 + ty + {r * wy}u;\nif (j{r} < S) {{\n"
        + _indent(
            _store_block(cfg, "b0", cfg.dtype, "dk", f"j{r}", "dk", r, d4, cfg.dqk, f"{LN2}")
            + "\n"
            + _store_block(cfg, "b1", cfg.dtype, "dv", f"j{r}", "dv", r, v4, cfg.dv, "1.0"),
            1,
        )
        + "}"
        for r in range(cfg.tm)
    )
    main = (
        f"let col0 = wid.x * {br}u;\nlet ty = lid / {wx}u;\nlet tx = lid % {wx}u;\n"
        + _load_rows(k, cfg, "ks", d4 + 1, "k", cfg.dqk, "col0", "S", br)
        + "\n"
        + _load_rows(k, cfg, "vs", v4 + 1, "v", cfg.dv, "col0", "S", br)
        + "\n"
        + _block_acc(cfg, "dk", d4)
        + "\n"
        + _block_acc(cfg, "dv", v4)
        + f"\nfor (var t0 = {start}; t0 < L; t0 += {bc}u) {{\n"
        + _indent(tile, 1)
        + "}\n"
        + store
    )
    return _assemble(k, cfg, _block_smem(k, cfg), main)


def _block_smem(kind: str, cfg: Config) -> str:
    return _arrays(**_block_arrays(kind, cfg)) + "".join(
        f"var<workgroup> {name}: array<f32, {n}>;\n" for name, n in _block_scalars(kind, cfg).items()
    )


def _arrays(**sizes: int) -> str:
    """Declarations of workgroup vec4 arrays."""
    return "".join(f"var<workgroup> {name}: array<vec4<f32>, {n}>;\n" for name, n in sizes.items())


def _assemble(kind: str, cfg: Config, smem: str, main: str) -> str:
    """Header, workgroup arrays, the entry point's prelude, and ``main``'s body."""
    prelude = _prelude(kind, cfg)
    at = prelude.index("@compute")
    return prelude[:at] + smem + prelude[at:] + _indent(main, 1) + "}\n"


SOURCES = {"forward": _forward, "dq": _dq, "dkv": _dkv}
BLOCKED = {"forward": _blocked_forward, "dq": _blocked_dq, "dkv": _blocked_dkv}


def source(kind: str, cfg: Config) -> str:
    return (BLOCKED if cfg.blocked else SOURCES)[kind](cfg)


def params_format(kind: str, cfg: Config) -> tuple[str, int]:
    """(struct format of the params, number of leading dynamic words: offsets, and the seed words of forward)."""
    nviews = len(_bindings(kind, cfg))
    dyn = nviews + (2 if kind == "forward" else 0)
    nstrided = len(_strided(kind, cfg))
    return "<" + "i" * nviews + ("II" if kind == "forward" else "") + "IIIIffI" + "i" * (4 * nstrided), dyn


def static_words(b: int, h: int, n_q: int, n_k: int, scale: float, p: float, strides: list[Any]) -> tuple[Any, ...]:
    """The static params: shapes, scale * log2 e, the dropout keep scale and threshold, then the strides."""
    keep = 1.0 / (1.0 - p) if p < 1.0 else 0.0
    return (b, h, n_q, n_k, scale * LOG2E, keep, dropout_threshold(p), *[x for st in strides for x in st])
