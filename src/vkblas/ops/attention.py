"""``scaled_dot_product_attention`` on the backend's fused ``attention`` primitive (backend/base.py), with its
backward.

The inputs are brought to the primitive's (B, H, rows, dim) layout with views: broadcast batch dims get stride 0,
more than two batch dims are merged into B (a copy only where they cannot be merged as views). The output is
(B, L, H, Ev) in memory where the input has heads (PyTorch's fused kernels' layout: a model's
``transpose(1, 2).contiguous()`` of it is a view), and the gradients of q, k, v take their inputs' layouts. A float
mask must have the query's dtype, as in PyTorch. Dropout takes ``B*H*L*S`` counters from the generator, like a
random fill of the score matrix would; inside a graph capture the dispatch is noted, so each replay draws fresh ones
(and the backward reads them from the ``rng`` state the forward kernel stores).
"""

from __future__ import annotations

import math

from .. import graphs
from ..autograd import Node, record
from ..dtypes import bool_, float32, float64, int32
from ..random import Generator, default_generator
from ..tensor import Tensor, empty
from ._core import broadcast_shapes, same_backend
from .autocast import lower


def _four_d(t: Tensor, batch: tuple[int, ...]) -> Tensor:
    """``t`` (batch..., rows, dim) as (B, H, rows, dim): broadcast by views, batch dims merged into B."""
    t = t.expand(*batch, *t.shape[-2:])
    if len(batch) == 2:
        return t
    if len(batch) < 2:
        return t.reshape(*(1,) * (2 - len(batch)), *t.shape)
    return t.reshape(-1, *t.shape[-3:])


def _empty_in_order(shape: tuple[int, ...], order: tuple[int, ...], like: Tensor) -> Tensor:
    """An uninitialised tensor of ``shape`` (``like``'s dtype and backend) whose dims lie in memory in ``order``,
    outermost first: a permuted view of a contiguous one."""
    t = empty(tuple(shape[d] for d in order), like.dtype, like._backend)
    return t.permute(*(order.index(d) for d in range(len(order))))


def _memory_order(t: Tensor) -> tuple[int, ...]:
    """``t``'s dims from outermost to innermost in memory (broadcast dims outermost, ties in dim order): the
    layout ``torch.empty_like`` keeps. A gradient in its input's layout needs no copy on its way back through the
    views the input came from (a GPT's q, k, v are transposed slices of one (B, T, 3C) tensor)."""
    st = t._view.strides
    return tuple(sorted(range(t.ndim), key=lambda d: (st[d] != 0, -abs(st[d]))))


def _mask_4d(mask: Tensor, batch: tuple[int, ...], l: int, s: int) -> Tensor:  # noqa: E741
    m = mask.expand(*batch, l, s)
    if len(batch) == 2:
        return m
    return m.reshape(*(1,) * (2 - len(batch)), *m.shape) if len(batch) < 2 else m.reshape(-1, *m.shape[-3:])


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    *,
    generator: Generator | None = None,
) -> Tensor:
    """``softmax(query @ key^T * scale + mask) @ value`` with dropout ``dropout_p`` on the attention weights
    (PyTorch's semantics: ``scale`` defaults to ``1/sqrt(E)``, ``is_causal`` masks keys after the query's position
    (top-left aligned), a bool mask is True where attention is allowed, a float mask is added; a fully masked row
    gives 0). One fused kernel forward and two backward on Vulkan, so no (L, S) matrix is kept in memory."""
    # under autocast: float16 storage (the kernels compute in float32 arithmetic either way); a float mask too
    query, key, value, attn_mask = lower("scaled_dot_product_attention", query, key, value, attn_mask)
    tensors = [query, key, value] + ([attn_mask] if attn_mask is not None else [])
    backend = same_backend("scaled_dot_product_attention", tensors)
    if query.ndim < 2 or key.ndim < 2 or value.ndim < 2:
        raise RuntimeError(
            f"scaled_dot_product_attention: query {query.shape}, key {key.shape} and value {value.shape} need at "
            "least 2 dims (..., rows, dim)"
        )
    l, e = query.shape[-2:]  # noqa: E741
    s, ev = value.shape[-2:]
    if e == 0:
        raise RuntimeError(f"scaled_dot_product_attention: query {query.shape} and key need a non-empty last dim")
    if key.shape[-1] != e or key.shape[-2] != s:
        raise RuntimeError(
            f"scaled_dot_product_attention: key {key.shape} must be (..., {s}, {e}) for query {query.shape} and "
            f"value {value.shape}"
        )
    if not (query.dtype is key.dtype is value.dtype) or not query.dtype.is_floating:
        raise RuntimeError(
            f"scaled_dot_product_attention: expected query, key and value of one floating dtype, got "
            f"{query.dtype!r}, {key.dtype!r} and {value.dtype!r}"
        )
    if not 0.0 <= dropout_p <= 1.0:
        raise ValueError(f"scaled_dot_product_attention: dropout_p must be in [0, 1], got {dropout_p}")
    if is_causal and attn_mask is not None:
        raise RuntimeError("scaled_dot_product_attention: explicit attn_mask should not be set when is_causal=True")
    if enable_gqa:  # the repeated heads are part of the graph: their gradients sum back to the shared ones
        key, value = _repeat_heads(query, key), _repeat_heads(query, value)
        tensors = [query, key, value] + tensors[3:]
    if attn_mask is not None:
        if attn_mask.dtype is not bool_ and attn_mask.dtype is not query.dtype:
            raise RuntimeError(
                f"scaled_dot_product_attention: expected attn_mask dtype to be bool or {query.dtype!r} (the query's), "
                f"got {attn_mask.dtype!r}"
            )
    batch = broadcast_shapes(query.shape[:-2], key.shape[:-2], value.shape[:-2], op="scaled_dot_product_attention")
    if attn_mask is not None:
        batch = broadcast_shapes(batch, attn_mask.shape[:-2], op="scaled_dot_product_attention")
        broadcast_shapes(attn_mask.shape[-2:], (l, s), op="scaled_dot_product_attention (attn_mask)")
    sc = 1.0 / math.sqrt(e) if scale is None else float(scale)
    q4, k4, v4 = (_four_d(t.detach(), batch) for t in (query, key, value))
    m4 = None if attn_mask is None else _mask_4d(attn_mask.detach(), batch, l, s)
    b, h = q4.shape[:2]
    # (B, L, H, Ev) in memory where the input has heads, as PyTorch's fused kernels write it: a model's
    # ``transpose(1, 2).contiguous()`` of the result is then a view, and the tensor it saves is this one
    out = _empty_in_order((b, h, l, ev), (0, 2, 1, 3) if len(batch) >= 2 else (0, 1, 2, 3), query)
    lse = empty((b, h, l), float64 if query.dtype is float64 else float32, backend)
    rng = empty((2,), int32, backend)
    gen = generator or default_generator
    n = b * h * l * s
    seed, counter = gen.take(n) if dropout_p > 0 else (0, 0)
    if out.numel() and s:
        mv = None if m4 is None else m4._view
        backend.attention(
            out._view,
            lse._view,
            rng._view,
            q4._view,
            k4._view,
            v4._view,
            mv,
            bool(is_causal),
            sc,
            float(dropout_p),
            seed,
            counter,
        )
        if dropout_p > 0:
            graphs.note_random(backend, gen, n)
    elif out.numel():  # no keys: every row is fully masked
        out.zero_()
    kept = out.detach()  # the rule's (the result itself holds the node: no cycle)
    result = out.reshape(*batch, l, ev) if batch != (b, h) else out
    p = float(dropout_p)

    def rule(node: Node, g: Tensor) -> tuple[Tensor | None, ...]:
        g4 = _four_d(g, batch)
        dq, dk, dv = (_empty_in_order(x.shape, _memory_order(x), query) for x in (q4, k4, v4))
        # a float mask that requires grad gets dS (the only (L, S) matrix of the backward, made only then)
        dm = empty((b, h, l, s), query.dtype, backend) if attn_mask is not None and node.needs[-1] else None
        if dq.numel() and dk.numel() and dv.numel():
            views = [t._view for t in (dq, dk, dv, q4, k4, v4, kept, g4, lse, rng)]
            mv, dmv = None if m4 is None else m4._view, None if dm is None else dm._view
            backend.attention_backward(*views, mv, bool(is_causal), sc, p, dmv)
        else:
            dq, dk, dv = (x.new_zeros(x.shape) for x in (q4, k4, v4))
            dm = None if dm is None else dm.new_zeros(dm.shape)
        grads = [x.reshape(*batch, *x.shape[-2:]) for x in (dq, dk, dv)]
        if attn_mask is None:
            return tuple(grads)
        return (*grads, None if dm is None else dm.reshape(*batch, l, s))

    return record(result, "ScaledDotProductAttentionBackward", tensors, rule, (query, key, value))


def _repeat_heads(query: Tensor, kv: Tensor) -> Tensor:
    """Grouped-query attention: each of key's / value's heads serves ``H_q / H_kv`` consecutive query heads."""
    hq, hk = query.shape[-3], kv.shape[-3]
    if query.ndim < 3 or kv.ndim < 3 or hq % hk:
        raise RuntimeError(f"scaled_dot_product_attention: enable_gqa needs query heads {hq} divisible by {hk}")
    return kv.repeat_interleave(hq // hk, -3) if hq != hk else kv
