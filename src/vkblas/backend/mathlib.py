"""The math functions whose edge cases take code: PyTorch's results for NaN, ±inf, ±0, integer corner cases and
huge arguments, written once for numpy (the cpu backend and the test oracle) and once as WGSL helpers (Vulkan).

Why WGSL needs helpers at all: WGSL leaves ``max``/``min`` of NaN, ``log``/``sqrt`` of negative numbers, ``pow``
outside ``x > 0`` and shifts by 32 or more unspecified, and some drivers' ``sin``/``cos`` do no range reduction
(the H200's gave ``sin(1e6) = -0.471`` instead of ``-0.350``). Each helper therefore states the IEEE / C99 rule
itself, tests NaN and infinity on the bit pattern (a compiler assuming finite math cannot fold that away), and
reduces trigonometric arguments exactly (below).

Why plain arithmetic needs some too: WGSL lets an implementation assume no NaN or infinity, ignore the sign of
zero, and compute ``x / y`` as ``x * (1 / y)`` (2.5 ulp only for ``|y|`` in ``[2**-126, 2**126]``); NVIDIA's
compiler does all of these (the H200's relu(NaN) was 0: ``select(a, 0, a < 0)`` became ``max(a, 0)``; its
``inf / 3e38`` was NaN, ``inf * 0``). The builder (``vulkan/kernels/wgsl.py``) therefore ANDs every float
comparison with bit-level NaN tests of its operands (:func:`guard_nan`), divides floats through :data:`DIV`, and
writes ``-0.0`` as a bit pattern; the helpers here do the same by hand.

Helpers are WGSL source per compute type: :func:`per_float` turns a template written for ``f32`` into the
``f16`` variant (computed in f32, stored back: f16 values are exact in f32) and ``_BITS`` gives the bit tests.

**sin / cos.** ``x = k * pi/2 + r`` with ``|r| <= pi/4``, then a minimax polynomial on ``r`` (Cephes' sinf/cosf,
about 1 ulp) chosen by the quadrant ``k mod 4``:

* ``|x| < 8192``: Cody-Waite. ``pi/2 = C1 + C2 + C3`` where C1 and C2 have 11 significant bits, so ``k * C1`` and
  ``k * C2`` are exact for ``|k| < 2**13`` and ``x - k*C1`` is exact (Sterbenz); no fused multiply-add is needed
  (WGSL does not promise one), and one that the compiler introduces only makes it more exact.
* larger ``|x|`` (to 3.4e38): Payne-Hanek in 32-bit integer arithmetic. ``x = m * 2**(e-23)`` with a 24-bit
  integer ``m``; the 96 bits of ``2/pi`` that can matter for this exponent are multiplied by ``m`` exactly
  (32x32->64 products from 16-bit halves); bits 93-94 of the 120-bit product are ``k mod 4``, the 93 below it the
  fraction. Bits of ``2/pi`` are computed here with integer arithmetic (:func:`two_over_pi_words`).
"""

from __future__ import annotations

import fractions
import math

import numpy as np

# ---------------------------------------------------------------- numpy: PyTorch's semantics, vectorised


def np_maximum(a: object, b: object) -> object:
    """``b if a < b or b is NaN else a``: NaN propagates and ties return ``a`` (PyTorch; numpy returns ``b``)."""
    return np.where((a < b) | np.isnan(b), b, a)


def np_minimum(a: object, b: object) -> object:
    return np.where((b < a) | np.isnan(b), b, a)


def np_sign(a: object) -> object:
    """PyTorch's sign: 0 for NaN (numpy gives NaN) and for -0."""
    a = np.asarray(a)
    if a.dtype == np.bool_:
        return a
    return (a > 0).astype(a.dtype) - (a < 0).astype(a.dtype)


def _ints(*xs: object) -> bool:
    return all(np.asarray(x).dtype.kind in "iub" for x in xs)


def np_pow(a: object, b: object) -> object:
    """C99 pow for floats; for integers PyTorch's: a negative exponent gives 1 for 1, +-1 for -1, else 0."""
    if not _ints(a, b):
        return np.power(a, b)
    a, b = np.asarray(a).astype(np.int64), np.asarray(b).astype(np.int64)
    neg = b < 0
    r = np.power(a, np.where(neg, 0, b))
    minus_one = np.where(b % 2 != 0, -1, 1)
    return np.where(neg, np.where(a == 1, 1, np.where(a == -1, minus_one, 0)), r)


def np_fmod(a: object, b: object) -> object:
    """C fmod (sign of the dividend); integer division by zero is refused before this runs."""
    if _ints(a, b):
        return np.fmod(a, np.where(np.asarray(b) == 0, 1, b))
    return np.fmod(a, b)


def np_remainder(a: object, b: object) -> object:
    """PyTorch's remainder: ``fmod`` moved into the divisor's sign (``r + b`` where the signs differ)."""
    r = np_fmod(a, b)
    return np.where((r != 0) & ((np.asarray(b) < 0) != (r < 0)), r + b, r)


def np_floor_divide(a: object, b: object) -> object:
    if _ints(a, b):
        return np.floor_divide(a, np.where(np.asarray(b) == 0, 1, b))
    return np.floor_divide(a, b)  # numpy's divmod algorithm is PyTorch's (b == 0 gives a / b)


def np_trunc_divide(a: object, b: object) -> object:
    if _ints(a, b):
        q = np_floor_divide(a, b)
        return q + ((np_fmod(a, b) != 0) & ((np.asarray(a) < 0) != (np.asarray(b) < 0)))
    return np.trunc(np.divide(a, b))


def np_tanh(a: object) -> object:
    return np.tanh(a)


# ---------------------------------------------------------------- WGSL building blocks
#: per compute type: NaN / infinity tests on the bit pattern, and the type's NaN and infinity
_BITS = {
    "f32": {
        "isnan": "((bitcast<u32>({0}) & 0x7fffffffu) > 0x7f800000u)",
        "isinf": "((bitcast<u32>({0}) & 0x7fffffffu) == 0x7f800000u)",
        "nan": "bitcast<f32>(0x7fc00000u)",
        "inf": "bitcast<f32>(0x7f800000u)",
    },
}


def bits(name: str, x: str) -> str:
    """The f32 bit test ``name`` (``isnan``, ``isinf``) of expression ``x``."""
    return _BITS["f32"][name].format(x)


NAN, INF = _BITS["f32"]["nan"], _BITS["f32"]["inf"]


def per_float(name: str, f32_source: str, int_source: str | None = None) -> dict[str, str]:
    """Helper sources of ``vk_<name>_<T>``: the f32 one as written, an f16 one that computes in f32, and (for
    integer compute types) ``int_source``. The f16 source includes the f32 function it calls (a kernel generator
    emits each function once)."""
    signature = f32_source[f32_source.index(f"fn vk_{name}_f32(") :].split("{", 1)[0]
    params = signature[signature.index("(") + 1 : signature.index(")")]
    names = [p.split(":")[0].strip() for p in params.split(",") if p.strip()]
    args16 = ", ".join(f"{n}: f16" for n in names)
    call = ", ".join(f"f32({n})" for n in names)
    f16 = f"fn vk_{name}_f16({args16}) -> f16 {{ return f16(vk_{name}_f32({call})); }}\n"
    out = {"f32": f32_source, "f16": f32_source + f16}
    if int_source is not None:
        out["*"] = int_source
    return out


def _two_over_pi_bits(nbits: int) -> int:
    """floor(2/pi * 2**nbits) by integer arithmetic: pi from Machin's formula with 64 guard bits."""
    guard = nbits + 64
    one = 1 << guard

    def arctan_inv(n: int) -> int:  # atan(1/n) * 2**guard
        total, term, k, sign = 0, one // n, 1, 1
        while term:
            total += sign * (term // k)
            term //= n * n
            k += 2
            sign = -sign
        return total

    pi = 16 * arctan_inv(5) - 4 * arctan_inv(239)
    return (2 << (guard + nbits)) // pi


def two_over_pi_words(nwords: int = 7) -> list[int]:
    """The first ``32 * nwords`` fraction bits of 2/pi as u32 words, most significant first (0xa2f9836e, ...)."""
    v = _two_over_pi_bits(32 * nwords)
    return [(v >> (32 * (nwords - 1 - i))) & 0xFFFFFFFF for i in range(nwords)]


def _split(value: float, bits_kept: int) -> float:
    """``value`` rounded down to ``bits_kept`` significant bits (an exact float32)."""
    e = int(np.floor(np.log2(value)))
    scale = 2.0 ** (bits_kept - 1 - e)
    return float(np.floor(value * scale) / scale)


def _cody_waite_constants() -> tuple[float, float, float]:
    """pi/2 = C1 + C2 + C3: C1 and C2 with 11 significant bits (exact products with |k| < 2**13), C3 in float32."""
    half_pi = 1 / fractions.Fraction(_two_over_pi_bits(190), 1 << 190)
    c1 = _split(float(half_pi), 11)
    c2 = _split(float(half_pi - fractions.Fraction(c1)), 11)
    c3 = float(np.float32(float(half_pi - fractions.Fraction(c1) - fractions.Fraction(c2))))
    return c1, c2, c3


_C1, _C2, _C3 = _cody_waite_constants()
# words of 2/pi preceded by two zero words: bit j of the fraction (j >= 1) sits at position j + 63
_TABLE = [0, 0, *two_over_pi_words(7)]

_WORDS = ", ".join(f"{w:#010x}u" for w in _TABLE)
TRIG_SOURCE = f"""
var<private> VK_2PI_BITS: array<u32, {len(_TABLE)}> = array<u32, {len(_TABLE)}>({_WORDS});
fn vk_mul32(a: u32, b: u32) -> vec2<u32> {{
    let al = a & 0xffffu; let ah = a >> 16u; let bl = b & 0xffffu; let bh = b >> 16u;
    let ll = al * bl; let lh = al * bh; let hl = ah * bl;
    let mid = (ll >> 16u) + (lh & 0xffffu) + (hl & 0xffffu);
    return vec2<u32>((ll & 0xffffu) | (mid << 16u), ah * bh + (lh >> 16u) + (hl >> 16u) + (mid >> 16u));
}}
fn vk_2pi_window(g: u32) -> u32 {{
    let i = g >> 5u; let sh = g & 31u;
    let hi = VK_2PI_BITS[i] << sh;
    return select(hi | (VK_2PI_BITS[i + 1u] >> (32u - sh)), hi, sh == 0u);
}}
// |x| (finite, >= 0) as (r, k mod 4) with x = k*pi/2 + r, |r| <= pi/4
fn vk_trig_reduce(ax: f32) -> vec2<f32> {{
    if (ax < 8192.0) {{
        let k = round(ax * 0.636619772367581343);
        let r = ((ax - k * {_C1!r}) - k * {_C2!r}) - k * {_C3!r};
        return vec2<f32>(r, f32(u32(k) & 3u));
    }}
    let b = bitcast<u32>(ax);
    let e = i32((b >> 23u) & 0xffu) - 127;
    let m = (b & 0x7fffffu) | 0x800000u;
    let g = u32(e - 25 + 63);
    let w2 = vk_2pi_window(g); let w1 = vk_2pi_window(g + 32u); let w0 = vk_2pi_window(g + 64u);
    let p0 = vk_mul32(m, w0); let p1 = vk_mul32(m, w1); let p2 = vk_mul32(m, w2);
    let r1 = p0.y + p1.x;
    let c1 = select(0u, 1u, r1 < p0.y);
    let t2 = p1.y + p2.x;
    let r2 = t2 + c1;
    var q = (r2 >> 29u) & 3u;
    var hi = r2 & 0x1fffffffu;
    var lo = r1;
    var sign = 1.0;
    if ((hi & 0x10000000u) != 0u) {{  // fraction >= 1/2: round k up, r = -(1 - fraction)
        q = (q + 1u) & 3u;
        lo = ~lo + 1u;
        hi = (~hi + select(0u, 1u, lo == 0u)) & 0x1fffffffu;
        sign = -1.0;
    }}
    let f = f32(hi) * 1.862645149230957e-09 + f32(lo) * 4.336808689942018e-19;
    return vec2<f32>(sign * f * 1.5707963267948966, f32(q));
}}
fn vk_sin_poly(r: f32) -> f32 {{
    let z = r * r;
    return ((-1.9515295891e-4 * z + 8.3321608736e-3) * z - 1.6666654611e-1) * z * r + r;
}}
fn vk_cos_poly(r: f32) -> f32 {{
    let z = r * r;
    return ((2.443315711809948e-5 * z - 1.388731625493765e-3) * z + 4.166664568298827e-2) * z * z - 0.5 * z + 1.0;
}}
"""


def _trig(name: str, quadrant_shift: int, odd: bool) -> dict[str, str]:
    """sin (odd, quadrant as is) or cos (even, quadrant + 1): sin(r), cos(r), -sin(r), -cos(r) by quadrant; an odd
    function takes the sign of ``x`` from its sign bit (sin(-0) = -0)."""
    flip = "q >= 2u" if not odd else "(q >= 2u) != ((bitcast<u32>(x) >> 31u) != 0u)"
    body = f"""
fn vk_{name}_f32(x: f32) -> f32 {{
    if ({bits("isnan", "x")} || {bits("isinf", "x")}) {{ return {NAN}; }}
    let red = vk_trig_reduce(abs(x));
    let q = (u32(red.y) + {quadrant_shift}u) & 3u;
    let v = select(vk_sin_poly(red.x), vk_cos_poly(red.x), (q & 1u) == 1u);
    return select(v, -v, {flip});
}}
"""
    return per_float(name, TRIG_SOURCE + body)


SIN = _trig("sin", 0, odd=True)
COS = _trig("cos", 1, odd=False)
# tan from the same reduction: tan(r) in even quadrants, -1 / tan(r) in odd ones (drivers' tan does no reduction:
# lavapipe's tan(3e38) is -1)
TAN = per_float(
    "tan",
    TRIG_SOURCE
    + f"""
fn vk_tan_f32(x: f32) -> f32 {{
    if ({bits("isnan", "x")} || {bits("isinf", "x")}) {{ return {NAN}; }}
    let red = vk_trig_reduce(abs(x));
    let s = vk_sin_poly(red.x);
    let c = vk_cos_poly(red.x);
    let t = select(s / c, -c / s, (u32(red.y) & 1u) == 1u);
    return select(t, -t, (bitcast<u32>(x) >> 31u) != 0u);
}}
""",
)


# ---------------------------------------------------------------- WGSL helpers of the math table
def _isnan(x: str) -> str:
    return bits("isnan", x)


def _isinf(x: str) -> str:
    return bits("isinf", x)


def _negative(x: str) -> str:
    """The sign bit of ``x`` (true for -0 and negative NaNs)."""
    return f"((bitcast<u32>({x}) >> 31u) != 0u)"


def sign_of_quotient_zero(a: str, b: str) -> str:
    """``copysign(0, a / b)`` for non-NaN ``a``, ``b``: the XOR of their sign bits, as a bit pattern (a ``-0.0``
    literal or ``select(0.0, -0.0, c)`` may lose its sign under a compiler that ignores signed zeros)."""
    return f"bitcast<f32>((bitcast<u32>({a}) ^ bitcast<u32>({b})) & 0x80000000u)"


# x / y with |y| > 2**126 as (x / (y / 4)) / 4: a driver that divides as x * (1 / y) flushes 1 / y to 0 there
# (NaN for inf / 3e38, 0 for 3e38 / 1e38); y / 4 and the final / 4 are exact, and select keeps it branch-free
DIV = per_float(
    "div",
    """fn vk_div_f32(a: f32, b: f32) -> f32 {
    let big = (bitcast<u32>(b) & 0x7fffffffu) > 0x7e800000u;
    let q = a / select(b, b * 0.25, big);
    return select(q, q * 0.25, big);
}
""",
)

MAXIMUM = per_float(
    "maximum",
    f"fn vk_maximum_f32(a: f32, b: f32) -> f32 {{\n"
    f"    return select(a, b, (a < b && !{_isnan('a')}) || {_isnan('b')});\n}}\n",
    "fn vk_maximum_{T}(a: {T}, b: {T}) -> {T} { return max(a, b); }\n",
)
MINIMUM = per_float(
    "minimum",
    f"fn vk_minimum_f32(a: f32, b: f32) -> f32 {{\n"
    f"    return select(a, b, (b < a && !{_isnan('a')}) || {_isnan('b')});\n}}\n",
    "fn vk_minimum_{T}(a: {T}, b: {T}) -> {T} { return min(a, b); }\n",
)
SIGN = per_float(
    "sign",
    "fn vk_sign_f32(a: f32) -> f32 { return select(0.0, 1.0, a > 0.0) - select(0.0, 1.0, a < 0.0); }\n",
    "fn vk_sign_{T}(a: {T}) -> {T} { return select({T}(0), {T}(1), a > {T}(0)) - select({T}(0), {T}(1), a < {T}(0)); }"
    "\n",
)
LOG = per_float(
    "log",
    f"""fn vk_log_f32(x: f32) -> f32 {{
    if (x == 0.0) {{ return -{INF}; }}
    if (x < 0.0 || {_isnan("x")}) {{ return {NAN}; }}
    if ({_isinf("x")}) {{ return x; }}
    return log(x);
}}
""",
)
SQRT = per_float(
    "sqrt",
    f"""fn vk_sqrt_f32(x: f32) -> f32 {{
    if (x == 0.0 || {_isnan("x")}) {{ return x; }}
    if (x < 0.0) {{ return {NAN}; }}
    if ({_isinf("x")}) {{ return x; }}
    return sqrt(x);
}}
""",
)
# tanh(x) = x below 2**-12 (error x**3/3, below f32 resolution; keeps -0), 1 past 15 (drivers that use exp give
# NaN there); NaN stays NaN (clamp of NaN is unspecified)
TANH = per_float(
    "tanh",
    f"""fn vk_tanh_f32(x: f32) -> f32 {{
    if ({_isnan("x")} || abs(x) < 0.000244140625) {{ return x; }}
    return tanh(clamp(x, -15.0, 15.0));
}}
""",
)
# atan: NaN stays NaN and x itself below 2**-12 (error x**3/3; keeps -0): lavapipe's atan(NaN) is a number, and
# its atan(-0) is +0
ATAN = per_float(
    "atan",
    f"fn vk_atan_f32(x: f32) -> f32 {{\n    if ({_isnan('x')} || abs(x) < 0.000244140625) {{ return x; }}\n"
    "    return atan(x);\n}\n",
)
# sinh / cosh: exp(|x|) / 2 past 9 (the other term is below half an ulp there), as exp(|x| - C) * exp(C - ln 2)
# with C = 355/512 (exact subtraction): finite up to the true overflow at 89.416, where exp(|x|) itself or a product
# that the compiler reassociates would overflow (the H200 gave inf at 88.75); h = exp(|x| / 2), h * h / 2 between
# 1 and 9; sinh by its odd series below 1 (no cancellation; x itself below 2**-12 keeps -0); NaN stays NaN
_SINH_SERIES = (
    "".join(f"{1.0 / math.factorial(2 * k + 1)!r} + z * (" for k in range(1, 6))
    + repr(1.0 / math.factorial(13))
    + ")" * 5
)
_HALF_EXP = f"exp(a - 0.693359375) * {math.exp(0.693359375 - math.log(2.0))!r}"
SINH = per_float(
    "sinh",
    f"""fn vk_sinh_f32(x: f32) -> f32 {{
    let a = abs(x);
    if ({_isnan("x")} || a < 0.000244140625) {{ return x; }}
    if (a < 1.0) {{
        let z = x * x;
        return x + x * z * ({_SINH_SERIES});
    }}
    let h = exp(0.5 * min(a, 9.0));
    let r = select((0.5 * h) * h - 0.5 / (h * h), {_HALF_EXP}, a > 9.0);
    return select(r, -r, x < 0.0);
}}
""",
)
COSH = per_float(
    "cosh",
    f"""fn vk_cosh_f32(x: f32) -> f32 {{
    if ({_isnan("x")}) {{ return x; }}
    let a = abs(x);
    let h = exp(0.5 * min(a, 9.0));
    return select((0.5 * h) * h + 0.5 / (h * h), {_HALF_EXP}, a > 9.0);
}}
""",
)
# C99 pow (Annex F.9.4.4), in its order; integers by repeated squaring (wrapping), negative exponents as PyTorch
POW = per_float(
    "pow",
    f"""fn vk_pow_f32(a: f32, b: f32) -> f32 {{
    if (b == 0.0 || a == 1.0) {{ return 1.0; }}
    if ({_isnan("a")} || {_isnan("b")}) {{ return {NAN}; }}
    let ab = abs(a);
    let integral = floor(b) == b;
    let odd = integral && abs(b) < 16777216.0 && floor(b * 0.5) != b * 0.5;
    if ({_isinf("b")}) {{
        if (ab == 1.0) {{ return 1.0; }}
        return select({INF}, 0.0, (ab < 1.0) == (b > 0.0));
    }}
    if (ab == 0.0 || {_isinf("a")}) {{
        // pow(+-0, b) and pow(+-inf, b): 0 or inf by the sign of b (flipped for zeros), signed when b is odd
        let big = (ab == 0.0) == (b < 0.0);
        let r = select(0.0, {INF}, big);
        return select(r, -r, odd && {_negative("a")});
    }}
    if (a < 0.0 && !integral) {{ return {NAN}; }}
    let r = pow(ab, b);
    return select(r, -r, a < 0.0 && odd);
}}
""",
    """fn vk_pow_{T}(a: {T}, b: {T}) -> {T} {
    if (b < 0) { return select(select(0, 1, a == 1), select(1, -1, (b & 1) != 0), a == -1); }
    var r = 1;
    var base = a;
    var e = b;
    loop {
        if (e == 0) { break; }
        if ((e & 1) != 0) { r = r * base; }
        base = base * base;
        e = e >> 1u;
    }
    return r;
}
""",
)
# C fmod, exactly: subtract the largest d * 2**k <= r until r < d; each step is exact (Sterbenz: t <= r < 2t)
_FMOD_F32 = f"""fn vk_fmod_f32(a: f32, b: f32) -> f32 {{
    if ({_isnan("a")} || {_isnan("b")} || {_isinf("a")} || b == 0.0) {{ return {NAN}; }}
    if ({_isinf("b")}) {{ return a; }}
    var r = abs(a);
    let d = abs(b);
    let ed = frexp(d).exp;
    for (var i = 0; i < 300 && r >= d; i++) {{
        var t = ldexp(d, frexp(r).exp - ed);
        if (t > r || {_isinf("t")}) {{ t = ldexp(d, frexp(r).exp - ed - 1); }}
        r = r - t;
    }}
    return select(r, -r, {_negative("a")});
}}
"""
# the integer remainder as a - (a / b) * b (truncating, C's): the H200 computed WGSL's i32 % as if unsigned
# (7 % -2 = 7 % 0xfffffffe = 7); WGSL's / gives INT_MIN / -1 = INT_MIN, so INT_MIN % -1 = 0 as in C
_IREM = "fn vk_irem_{T}(a: {T}, b: {T}) -> {T} { return a - (a / b) * b; }\n"
FMOD = per_float("fmod", _FMOD_F32, _IREM + "fn vk_fmod_{T}(a: {T}, b: {T}) -> {T} { return vk_irem_{T}(a, b); }\n")
REMAINDER = per_float(
    "remainder",
    _FMOD_F32
    + """fn vk_remainder_f32(a: f32, b: f32) -> f32 {
    let r = vk_fmod_f32(a, b);
    return select(r, r + b, r != 0.0 && ((b < 0.0) != (r < 0.0)));
}
""",
    _IREM
    + """fn vk_remainder_{T}(a: {T}, b: {T}) -> {T} {
    let r = vk_irem_{T}(a, b);
    return select(r, r + b, r != 0 && ((b < 0) != (r < 0)));
}
""",
)
FLOOR_DIVIDE = per_float(
    "floor_divide",
    _FMOD_F32
    + DIV["f32"]
    + f"""fn vk_floor_divide_f32(a: f32, b: f32) -> f32 {{
    if (b == 0.0) {{ return a / b; }}
    let m = vk_fmod_f32(a, b);
    var q = vk_div_f32(a - m, b);
    if (m != 0.0 && ((b < 0.0) != (m < 0.0))) {{ q = q - 1.0; }}
    if (q == 0.0) {{ return {sign_of_quotient_zero("a", "b")}; }}
    let f = floor(q);
    return select(f, f + 1.0, q - f > 0.5);
}}
""",
    _IREM
    + """fn vk_floor_divide_{T}(a: {T}, b: {T}) -> {T} {
    let q = a / b;
    return select(q, q - 1, (vk_irem_{T}(a, b) != 0) && ((a < 0) != (b < 0)));
}
""",
)
TRUNC_DIVIDE = per_float(
    "trunc_divide",
    DIV["f32"] + "fn vk_trunc_divide_f32(a: f32, b: f32) -> f32 { return trunc(vk_div_f32(a, b)); }\n",
    "fn vk_trunc_divide_{T}(a: {T}, b: {T}) -> {T} { return a / b; }\n",
)
# shifts by < 0 or >= 32 give 0 (left) or the sign (right), as PyTorch and numpy
LEFT_SHIFT = "select({0} << u32({1}), {T}(0), {1} < {T}(0) || {1} >= {T}(32))"
RIGHT_SHIFT = "select({0} >> u32({1}), select({T}(0), {T}(-1), {0} < {T}(0)), {1} < {T}(0) || {1} >= {T}(32))"
