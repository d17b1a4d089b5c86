"""WGSL building blocks shared by every kernel generator.

* dtype -> WGSL storage / compute types (bool lives in a u32 word, float16 needs ``enable f16``),
* :class:`Expr` / :class:`WgslMath`: the math namespace that lets ``backend/elementwise.py``'s formulas generate
  WGSL (each math function's WGSL spelling is in that module's ``MATH`` table, beside numpy's).
  Values are WGSL expression strings with a type; every intermediate is bound to a ``let`` so shared
  sub-expressions (``_sigmoid`` used twice in ``silu_grad``) are not textually duplicated. Python numbers in a
  formula become ``T(x)`` literals of the other operand's type (numpy/NEP 50 rules: a float literal with an int
  operand promotes to f32; ints divide as floats),
* the kernel header (uniform params block + storage bindings) and the strided-index code generator.

Params: every kernel reads its per-dispatch parameters from ``P``, a 256-byte window of one uniform ring buffer
bound with a dynamic offset (see ``queue.py``). ``pu(i)`` / ``pi(i)`` / ``pf(i)`` read word ``i`` as u32/i32/f32.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ....dtypes import BYTES, DType, bool_, float16, float32, int8, int32, uint8
from ...elementwise import MATH, MathFunction
from ...mathlib import DIV

WORKGROUP = 256
PARAM_WORDS = 64  # 256-byte params window per dispatch

# 8-bit dtypes are packed four to a u32 word (element i in bits 8*(i%4) ..); they compute in i32
STORAGE_TYPE = {float32: "f32", float16: "f16", int32: "i32", bool_: "u32", uint8: "u32", int8: "u32"}
COMPUTE_TYPE = {float32: "f32", float16: "f16", int32: "i32", bool_: "bool", uint8: "i32", int8: "i32"}
_RANK = {"bool": 0, "i32": 1, "f16": 2, "f32": 3}


def load(buf: str, index: str, dtype: DType) -> str:
    """A WGSL expression loading element ``index`` of binding ``buf`` as the dtype's compute type."""
    if dtype is bool_:
        return f"({buf}[{index}] != 0u)"
    if dtype in BYTES:  # the element's byte of its word, sign-extended for int8
        word, shift = f"{buf}[({index}) >> 2u]", f"((({index}) & 3u) * 8u)"
        return (
            f"extractBits(bitcast<i32>({word}), {shift}, 8u)"
            if dtype is int8
            else f"i32(extractBits({word}, {shift}, 8u))"
        )
    return f"{buf}[{index}]"


def written_type(dtype: DType) -> str:
    """The element type of a binding a kernel stores into: 8-bit dtypes need atomic words (invocations that own
    different bytes of one word write concurrently), see :func:`store`."""
    return "atomic<u32>" if dtype in BYTES else STORAGE_TYPE[dtype]


def store(buf: str, index: str, code: str, src: str, dtype: DType) -> str:
    """A WGSL statement storing the compute value ``code`` (of type ``src``) as element ``index`` of ``buf`` (declared
    with :func:`written_type`). An 8-bit element is a read-modify-write of its own byte: clear it, then set it,
    each an atomic on the word, so the other bytes' writers cannot be lost."""
    if dtype not in BYTES:
        return f"{buf}[{index}] = {store_value(code, src, dtype)};"
    value = f"(bitcast<u32>({convert(code, src, 'i32')}) & 0xffu)"
    return (
        f"{{ let vk_i = {index}; let vk_s = (vk_i & 3u) * 8u; atomicAnd(&{buf}[vk_i >> 2u], ~(0xffu << vk_s)); "
        f"atomicOr(&{buf}[vk_i >> 2u], {value} << vk_s); }}"
    )


def convert(code: str, src: str, dst: str) -> str:
    """Convert a WGSL value between compute types (bool <-> numbers included)."""
    if src == dst:
        return code
    if dst == "bool":  # NaN is true: IEEE !=, spelled !(==) (naga emits an ordered != that NaN fails)
        return guard_nan(f"!({code} == {src}(0))", [code], "!=") if src in ("f32", "f16") else f"({code} != {src}(0))"
    return f"{dst}({code})"


def store_value(code: str, src: str, dtype: DType) -> str:
    """Expression for storing a compute value of type ``src`` into storage of ``dtype`` (cast on store; an 8-bit
    dtype's value is its i32, which :func:`store` packs)."""
    if dtype is bool_:
        return f"select(0u, 1u, {convert(code, src, 'bool')})"
    if dtype in BYTES:
        return convert(code, src, "i32")
    return convert(code, src, COMPUTE_TYPE[dtype])


def literal(x: Any, ty: str) -> str:
    if ty == "bool":
        return "true" if x else "false"
    if ty == "i32":
        return f"i32({int(x)})"
    # WGSL has no inf/nan literals: their f32 bit patterns; -0.0 too, which a compiler that ignores the sign of
    # zero may fold into +0.0
    if math.isnan(x):
        return f"{ty}(bitcast<f32>(0x7fc00000u))"
    if math.isinf(x) or (x == 0 and math.copysign(1.0, x) < 0):
        bits = "0x80000000u" if x == 0 else "0x7f800000u" if x > 0 else "0xff800000u"
        return f"{ty}(bitcast<f32>({bits}))"
    return f"{ty}({float(x)!r})"


class Emitter:
    """Collects ``let`` statements and helper functions while an op formula is evaluated."""

    def __init__(self, default_type: str) -> None:
        self.lines: list[str] = []
        self.helpers: dict[str, str] = {}
        self.default_type = default_type
        self._n = 0

    def add_helper(self, source: str) -> None:
        """Add the declarations of ``source`` (helper functions, private tables), each once per kernel: helpers of
        several math functions share some (sin and cos share the range reduction)."""
        for decl in _declarations(source):
            self.helpers.setdefault(decl.split("\n", 1)[0], decl if decl.endswith("\n") else decl + "\n")

    def let(self, code: str, ty: str) -> Expr:
        name = f"t{self._n}"
        self._n += 1
        self.lines.append(f"    let {name}: {ty} = {code};")
        return Expr(name, ty, self)

    def value(self, x: Any, like: str | None = None) -> tuple[str, str]:
        """(code, type) of an Expr or a Python number (typed like ``like`` where NEP 50 allows)."""
        if isinstance(x, Expr):
            return x.code, x.ty
        ty = like or self.default_type
        if isinstance(x, bool):
            return literal(x, "bool"), "bool"
        if isinstance(x, float) and ty in ("i32", "bool"):
            ty = "f32"  # int tensor with a float literal -> float result (numpy promotes)
        elif ty == "bool":
            ty = "i32"
        return literal(x, ty), ty


def _declarations(source: str) -> list[str]:
    """Top-level declarations of WGSL source: each starts at a line with no indent (``fn``, ``var<private>``)."""
    decls: list[str] = []
    for line in source.strip("\n").splitlines(keepends=True):
        if decls and (line[:1].isspace() or line.startswith("}") or not line.strip()):
            decls[-1] += line
        elif line.startswith("//") and decls and decls[-1].startswith("//"):
            decls[-1] += line
        else:
            decls.append(line)
    merged: list[str] = []
    for d in decls:  # a comment belongs to the declaration after it
        if merged and merged[-1].startswith("//"):
            merged[-1] += d
        else:
            merged.append(d)
    return merged


def _unify(em: Emitter, a: Any, b: Any, arith: bool) -> tuple[str, str, str]:
    """Codes of a and b converted to one common type (bool -> i32 when used in arithmetic)."""
    ta = a.ty if isinstance(a, Expr) else None
    tb = b.ty if isinstance(b, Expr) else None
    ca, ta = em.value(a, tb)
    cb, tb = em.value(b, ta)
    ty = ta if _RANK[ta] >= _RANK[tb] else tb
    if arith and ty == "bool":
        ty = "i32"
    return convert(ca, ta, ty), convert(cb, tb, ty), ty


class Expr:
    """A typed WGSL expression; Python operators build new expressions."""

    __slots__ = ("code", "ty", "em")
    __hash__ = None  # type: ignore[assignment]  # == builds an expression

    def __init__(self, code: str, ty: str, em: Emitter) -> None:
        self.code, self.ty, self.em = code, ty, em

    def _bin(self, other: Any, op: str, reverse: bool = False) -> Expr:
        a, b = (other, self) if reverse else (self, other)
        ca, cb, ty = _unify(self.em, a, b, arith=True)
        if op == "/" and ty == "i32":  # numpy true division of ints
            ca, cb, ty = f"f32({ca})", f"f32({cb})", "f32"
        if op == "/":  # exact for huge divisors too (mathlib.DIV)
            self.em.add_helper(DIV[ty])
            return self.em.let(f"vk_div_{ty}({ca}, {cb})", ty)
        return self.em.let(f"{ca} {op} {cb}", ty)

    def _cmp(self, other: Any, op: str) -> Expr:
        ca, cb, ty = _unify(self.em, self, other, arith=op not in ("==", "!="))
        if ty not in ("f32", "f16"):
            return self.em.let(f"{ca} {op} {cb}", "bool")
        # IEEE: NaN != x is true; naga's != is ordered (false for NaN)
        cmp = f"!({ca} == {cb})" if op == "!=" else f"{ca} {op} {cb}"
        return self.em.let(guard_nan(cmp, [c for c, x in ((ca, self), (cb, other)) if isinstance(x, Expr)], op), "bool")

    def __add__(self, o: Any) -> Expr:
        return self._bin(o, "+")

    def __radd__(self, o: Any) -> Expr:
        return self._bin(o, "+", True)

    def __sub__(self, o: Any) -> Expr:
        return self._bin(o, "-")

    def __rsub__(self, o: Any) -> Expr:
        return self._bin(o, "-", True)

    def __mul__(self, o: Any) -> Expr:
        return self._bin(o, "*")

    def __rmul__(self, o: Any) -> Expr:
        return self._bin(o, "*", True)

    def __truediv__(self, o: Any) -> Expr:
        return self._bin(o, "/")

    def __rtruediv__(self, o: Any) -> Expr:
        return self._bin(o, "/", True)

    def __neg__(self) -> Expr:
        ty = "i32" if self.ty == "bool" else self.ty
        return self.em.let(f"-{convert(self.code, self.ty, ty)}", ty)

    def __lt__(self, o: Any) -> Expr:
        return self._cmp(o, "<")

    def __le__(self, o: Any) -> Expr:
        return self._cmp(o, "<=")

    def __gt__(self, o: Any) -> Expr:
        return self._cmp(o, ">")

    def __ge__(self, o: Any) -> Expr:
        return self._cmp(o, ">=")

    def __eq__(self, o: Any) -> Expr:  # type: ignore[override]
        return self._cmp(o, "==")

    def __ne__(self, o: Any) -> Expr:  # type: ignore[override]
        return self._cmp(o, "!=")


def guard_nan(cmp: str, operands: Sequence[str], op: str, lanes: int = 1) -> str:
    """The float comparison ``cmp`` made false (true for ``!=``) for NaN operands by bit tests: a compiler that
    assumes no NaN folds ``select(a, 0, a < 0)`` into ``max(a, 0)``, which loses a NaN ``a`` (the H200's relu). With
    the test in the condition, any such fold happens only where ``a`` is not NaN. Literal operands need none.
    ``lanes`` 4: ``cmp`` and the operands are vec4s, the tests per component (``&``/``|`` of bool vectors)."""
    if lanes == 1:
        tests = [f"((bitcast<u32>(f32({c})) & 0x7fffffffu) > 0x7f800000u)" for c in operands]
        both, either = "&&", "||"
    else:
        u = f"vec{lanes}<u32>"
        tests = [f"((bitcast<{u}>(vec{lanes}<f32>({c})) & {u}(0x7fffffffu)) > {u}(0x7f800000u))" for c in operands]
        both, either = "&", "|"
        cmp = f"({cmp})"  # the operands of & and | are unary expressions in WGSL's grammar
    if not tests:
        return cmp
    if op == "!=":
        return f"({cmp} {either} {f' {either} '.join(tests)})"
    return f"({cmp} {both} !({f' {either} '.join(tests)}))"


def _per_type(text: str | Mapping[str, str], ty: str) -> str:
    """A math-table entry's WGSL text for result type ``ty`` (a mapping gives one per type, ``"*"`` the rest)."""
    if isinstance(text, str):
        return text
    return text[ty] if ty in text else text["*"]


class WgslMath:
    """The ``m`` namespace for elementwise formulas, producing WGSL: ``m.<name>(...)`` renders the template of
    ``MATH[name]`` (``backend/elementwise.py``, the one table that also gives numpy's spelling)."""

    def __init__(self, em: Emitter) -> None:
        self.em = em

    def __getattr__(self, name: str) -> Any:
        fn = MATH.get(name)
        if fn is None:
            raise AttributeError(f"no math function {name!r} in backend/elementwise.py MATH")
        return lambda *args: self._call(name, fn, args)

    def _call(self, name: str, fn: MathFunction, args: Sequence[Any]) -> Expr:
        codes, ty = self._operands(fn.operands, args)
        if fn.helper is not None:
            self.em.add_helper(_per_type(fn.helper, ty).replace("{T}", ty))
        return self.em.let(_per_type(fn.wgsl, ty).format(*codes, T=ty), "bool" if fn.operands == "logic" else ty)

    def _operands(self, rule: str, args: Sequence[Any]) -> tuple[list[str], str]:
        em = self.em
        if rule == "same":
            code, ty = em.value(args[0])
            return [code], ty
        if rule == "float3":  # three operands of one float type (fma): f16 when every tensor operand is
            exprs = [a for a in args if isinstance(a, Expr)]
            ty = "f16" if exprs and all(a.ty == "f16" for a in exprs) else "f32"
            return [convert(*em.value(a, ty), ty) for a in args], ty
        if rule == "same2":
            ca, cb, ty = _unify(em, args[0], args[1], arith=False)
            return [ca, cb], ty
        if rule == "logic":
            return [convert(*em.value(a, "bool"), "bool") for a in args], "bool"
        if rule == "select":
            cond = convert(*em.value(args[0], "bool"), "bool")
            ca, cb, ty = _unify(em, args[1], args[2], arith=False)
            return [cond, ca, cb], ty
        if len(args) == 1:
            code, ty = em.value(args[0])
            codes = [code]
        else:
            ca, cb, ty = _unify(em, args[0], args[1], arith=True)
            codes = [ca, cb]
        if rule == "float" and ty not in ("f32", "f16"):  # numpy: float functions of ints give floats
            codes, ty = [convert(c, ty, "f32") for c in codes], "f32"
        return codes, ty


def header(buffers: Sequence[tuple[str, str]], f16: bool) -> str:
    """Enable line, params window, storage bindings ``(name, wgsl element type)`` from binding 1 on."""
    out = ["enable f16;"] if f16 else []
    out.append(f"@group(0) @binding(0) var<uniform> P: array<vec4<u32>, {PARAM_WORDS // 4}>;")
    # every binding read_write: the same buffer may be bound twice (in-place ops), and wgpu forbids mixing
    # read-only and writable storage usages of one buffer within a dispatch
    for i, (name, ty) in enumerate(buffers):
        out.append(f"@group(0) @binding({i + 1}) var<storage, read_write> {name}: array<{ty}>;")
    out.append("fn pu(i: u32) -> u32 { return P[i >> 2u][i & 3u]; }")
    out.append("fn pi(i: u32) -> i32 { return bitcast<i32>(pu(i)); }")
    out.append("fn pf(i: u32) -> f32 { return bitcast<f32>(pu(i)); }")
    return "\n".join(out) + "\n"


MAIN_1D = (
    f"@compute @workgroup_size({WORKGROUP})\n"
    "fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,\n"
    "        @builtin(local_invocation_index) lid: u32) {\n"
    f"    let gid = (wid.y * nwg.x + wid.x) * {WORKGROUP}u + lid;\n"
)


def strided_offsets(
    lin: str, rank: int, shape_at: int, names: Sequence[str], inits: Sequence[str], strides_at: Sequence[int]
) -> str:
    """WGSL declaring ``var <name>: i32`` = init + sum(coord_d * stride_d) for each operand, where the coords are
    those of the linear C-order index ``lin`` over a shape of ``rank`` dims (params words ``shape_at..``; operand
    k's strides at words ``strides_at[k]..``). Unrolled: the rank is a specialisation of the kernel."""
    lines = [f"    var {n}: i32 = {i};" for n, i in zip(names, inits, strict=True)]
    if rank:
        lines.append(f"    var rem: u32 = {lin};")
    for d in reversed(range(rank)):
        if d:
            lines.append(f"    let c{d} = i32(rem % pu({shape_at + d}u)); rem = rem / pu({shape_at + d}u);")
        else:
            lines.append("    let c0 = i32(rem);")
        for n, st in zip(names, strides_at, strict=True):
            lines.append(f"    {n} += c{d} * pi({st + d}u);")
    return "\n".join(lines) + "\n"


def grid(groups: int, limit: int = 65535) -> tuple[int, int, int]:
    """Workgroup counts covering ``groups`` linear workgroups within the per-dimension limit (2D when needed)."""
    if groups <= limit:
        return groups, 1, 1
    y = -(-groups // limit)
    return limit, y, 1


def coalesce(shape: Sequence[int], strides: Sequence[Sequence[int]]) -> tuple[list[int], list[list[int]]]:
    """Drop size-1 dims and merge neighbours that are contiguous in every operand (fewer index divisions)."""
    out_shape: list[int] = []
    out_strides: list[list[int]] = [[] for _ in strides]
    for d, n in enumerate(shape):
        if n == 1:
            continue
        if out_shape and all(st[-1] == s[d] * n for st, s in zip(out_strides, strides, strict=True)):
            out_shape[-1] *= n
            for st, s in zip(out_strides, strides, strict=True):
                st[-1] = s[d]
            continue
        out_shape.append(n)
        for st, s in zip(out_strides, strides, strict=True):
            st.append(s[d])
    return out_shape, out_strides
