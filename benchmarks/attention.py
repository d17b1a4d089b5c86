"""Scaled-dot-product attention: vkblas's fused kernels against the explicit matmul + softmax path and PyTorch, in
one run, forward and forward + backward, float32.

For every shape (nanoGPT's shakespeare-char setting first: B=64, H=6, T=256, D=64, causal) and every engine:
* ``vkblas <device> fused``: ``F.scaled_dot_product_attention`` (on Vulkan one fused kernel forward, two backward;
  on the cpu device numpy matrices);
* ``vkblas <device> explicit``: ``softmax((q @ k^T) * scale + causal mask) @ v`` written out, as nanoGPT's slow
  path does (the (T, T) scores in memory);
* ``torch <device> sdpa`` / ``torch <device> explicit``: the same two in PyTorch (cuda when it has a GPU).

Times are the best of ``--repeat`` runs, each ending in a sync (``.numpy()`` of a scalar; ``torch.cuda.synchronize``).

    python benchmarks/attention.py [--quick] [--devices cpu,vulkan] [--shapes 0,1] [--variants auto,rows,64x32]
                                   [--repeat 5] [--json out.json] [--preset h200]

``--quick`` divides every batch by 16 (the CPU machine: lavapipe is a CPU implementation, for ratios only).
``--variants`` (Vulkan only) adds fused rows for other kernel choices: ``auto`` (what the device picks), ``rows``
(the per-row kernels), ``BRxBC[/TMxTN]`` (the register-blocked kernels preferring that tile, TM x TN rows per
invocation, 4x4 where left out; a kernel it does not fit takes the usual order). The kernels each variant ran are
printed under each table.

``--preset h200`` (the GPU machine, under 2 minutes): the Vulkan devices and torch cuda only (no cpu rows), the
nanoGPT and GPT-2 shapes, the variants ``auto,rows,64x32,32x32,32x16,64x16,64x32/8x4,32x32/8x4,32x32/4x8``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import best_of, print_table, torch_or_none, vkblas_devices  # noqa: E402

# (name, B, H, T, D, causal)
SHAPES = [
    ("nanoGPT shakespeare-char", 64, 6, 256, 64, True),
    ("GPT-2 small, T=1024", 8, 12, 1024, 64, True),
    ("encoder, T=512", 16, 8, 512, 64, False),
    ("D=128, T=2048", 2, 8, 2048, 128, True),
]


def flops(b: int, h: int, t: int, d: int, causal: bool, backward: bool) -> float:
    """Useful multiply-adds x 2 of attention (QK^T and PV; backward 2.5x forward), halved when causal."""
    fwd = 4.0 * b * h * t * t * d * (0.5 if causal else 1.0)
    return fwd * (3.5 if backward else 1.0)


def _variant_setting(variant: str) -> tuple[tuple[str, ...], tuple[tuple[int, int], ...]] | None:
    """(DESIGNS, BLOCK_TILES) of the Vulkan attention kernels for a ``--variants`` entry (None: the defaults):
    ``rows`` alone, or the blocked tile ``BRxBC`` first (a kernel it does not fit takes the usual order)."""
    if variant == "auto":
        return None
    from vkblas.backend.vulkan.kernels import attention as att

    if variant == "rows":
        return ("rows",), ()
    tile, _, block = variant.partition("/")
    dims = tuple(int(x) for x in tile.split("x")) + tuple(int(x) for x in block.split("x") if block)
    return att.DESIGNS, (dims, *att.BLOCK_TILES)


def vkblas_case(dev: str, shape: tuple, fused: bool, backward: bool, variant: str = "auto") -> Callable[[], None]:
    import vkblas

    setting = _variant_setting(variant)
    if setting is not None:
        from vkblas.backend.vulkan.kernels import attention as att

        defaults = att.DESIGNS, att.BLOCK_TILES

    _, b, h, t, d, causal = shape
    q, k, v = (vkblas.randn(b, h, t, d, device=dev, requires_grad=backward) for _ in range(3))
    mask = vkblas.ones(t, t, dtype=vkblas.bool, device=dev).tril() if causal else None
    scale = 1.0 / math.sqrt(d)

    def attention() -> Any:
        if fused:
            return vkblas.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        s = (q @ k.transpose(-2, -1)) * scale
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        return s.softmax(-1) @ v

    def run() -> None:
        if setting is not None:  # the kernel choice is part of the plan key: set it only around this case
            att.DESIGNS, att.BLOCK_TILES = setting
        try:
            out = attention()
            if backward:
                q.grad = k.grad = v.grad = None
                out.sum().backward()
                q.grad.sum().item()
            else:
                out.sum().item()
        finally:
            if setting is not None:
                att.DESIGNS, att.BLOCK_TILES = defaults

    return run


def adapter_line(dev: str) -> str:
    import vkblas

    d = vkblas.backend.get(dev).dev
    smem = d.limits["max-compute-workgroup-storage-size"]
    return f"kernels on {dev} ({d.info['name']}, {smem} bytes of workgroup memory):"


def chosen_tiles(dev: str, shape: tuple, variant: str) -> str:
    """The kernels a variant runs on the Vulkan device for ``shape`` (design, tile, invocations), per kind."""
    import vkblas
    from vkblas.backend.vulkan.kernels import attention as att

    _, _, _, _, d, causal = shape
    limits = vkblas.backend.get(dev).dev.limits
    setting = _variant_setting(variant)
    defaults = att.DESIGNS, att.BLOCK_TILES
    if setting is not None:
        att.DESIGNS, att.BLOCK_TILES = setting
    try:
        parts = []
        for kind in ("forward", "dq", "dkv"):
            cfg = att.Config(vkblas.float32, d, d, causal, None, False)
            smem, inv = limits["max-compute-workgroup-storage-size"], limits["max-compute-invocations-per-workgroup"]
            c = att.choose(kind, cfg, smem, inv)
            design = f"blocked {c.br}x{c.bc}/{c.tm}x{c.tn}" if c.blocked else f"rows {c.br}x{c.bc}"
            parts.append(f"{kind} {design} ({c.threads} inv.)")
    finally:
        att.DESIGNS, att.BLOCK_TILES = defaults
    return f"  {dev} {variant}: " + ", ".join(parts)


def torch_case(torch: Any, dev: str, shape: tuple, fused: bool, backward: bool) -> Callable[[], None]:
    _, b, h, t, d, causal = shape
    q, k, v = (torch.randn(b, h, t, d, device=dev, requires_grad=backward) for _ in range(3))
    mask = torch.ones(t, t, dtype=torch.bool, device=dev).tril() if causal else None

    def run() -> None:
        if fused:
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        else:
            s = (q @ k.transpose(-2, -1)) / math.sqrt(d)
            if mask is not None:
                s = s.masked_fill(~mask, float("-inf"))
            out = s.softmax(-1) @ v
        if backward:
            q.grad = k.grad = v.grad = None
            out.sum().backward()
        if dev == "cuda":
            torch.cuda.synchronize()

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="batches / 16 (the CPU machine)")
    parser.add_argument("--devices", default=None, help="vkblas devices, comma-separated (default: all)")
    parser.add_argument("--shapes", default=None, help="indices into the shape list, comma-separated (default: all)")
    parser.add_argument("--variants", default="auto", help="Vulkan fused kernel choices, comma-separated")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", default=None)
    parser.add_argument("--preset", choices=["h200"], default=None, help="the GPU machine (see above)")
    args = parser.parse_args()

    torch_devices = ["cpu", "cuda"]
    devices = args.devices.split(",") if args.devices else vkblas_devices()
    if args.preset == "h200":  # the GPU adapters (a CPU one such as lavapipe only where there is no other)
        import vkblas

        gpus = [f"vulkan:{a['index']}" for a in vkblas.info()["adapters"] if a["adapter_type"] != "CPU"]
        devices = gpus or [d for d in devices if d.startswith("vulkan")]
        torch_devices = ["cuda"]
        args.shapes = args.shapes or "0,1"
        if args.variants == "auto":
            args.variants = "auto,rows,64x32,32x32,32x16,64x16,64x32/8x4,32x32/8x4,32x32/4x8"
    torch = torch_or_none()
    if torch is not None:
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 against fp32
        torch.backends.cudnn.allow_tf32 = False
    variants = args.variants.split(",")
    chosen = [SHAPES[int(i)] for i in args.shapes.split(",")] if args.shapes else SHAPES
    if args.quick:
        chosen = [(n, max(1, b // 16), h, t, d, c) for n, b, h, t, d, c in chosen]
    results: list[dict[str, Any]] = []
    for shape in chosen:
        name, b, h, t, d, causal = shape
        engines: list[tuple[str, Callable[[bool], Callable[[], None]]]] = []
        notes = []
        for dev in devices:
            for var in variants if dev.startswith("vulkan") else ["auto"]:
                label = f"vkblas {dev} fused" + ("" if var == "auto" else f" {var}")
                engines.append((label, lambda bw, dev=dev, sh=shape, var=var: vkblas_case(dev, sh, True, bw, var)))
            engines.append((f"vkblas {dev} explicit", lambda bw, dev=dev, sh=shape: vkblas_case(dev, sh, False, bw)))
            if dev.startswith("vulkan"):
                notes.append(adapter_line(dev))
                notes += [chosen_tiles(dev, shape, var) for var in variants]
        if torch is not None:
            for tdev in [t for t in torch_devices if t == "cpu" or torch.cuda.is_available()]:
                for fused, kind in ((True, "sdpa"), (False, "explicit")):
                    engines.append(
                        (
                            f"torch {tdev} {kind}",
                            lambda bw, tdev=tdev, sh=shape, f=fused: torch_case(torch, tdev, sh, f, bw),
                        )
                    )
        rows = []
        for label, make in engines:
            row: dict[str, Any] = {"shape": name, "B": b, "H": h, "T": t, "D": d, "causal": causal, "engine": label}
            for backward in (False, True):
                key = "fwd+bwd" if backward else "fwd"
                try:
                    sec = best_of(make(backward), repeat=args.repeat)
                except Exception as e:  # noqa: BLE001 - a device that cannot run a case is reported, not fatal
                    row[key + "_ms"], row[key + "_error"] = None, f"{type(e).__name__}: {e}"[:120]
                    continue
                row[key + "_ms"] = sec * 1e3
                row[key + "_gflops"] = flops(b, h, t, d, causal, backward) / sec / 1e9
            rows.append(row)
            results.append(row)
        # speed relative to PyTorch's SDPA on its GPU (its cpu without one), forward + backward
        ref = [r for r in rows if r["engine"].startswith("torch") and r["engine"].endswith("sdpa")]
        ref_ms = ref[-1].get("fwd+bwd_ms") if ref else None
        table = [
            [
                r["engine"],
                *(
                    f"{r[k + '_ms']:.3f}" if r.get(k + "_ms") is not None else r.get(k + "_error", "-")
                    for k in ("fwd", "fwd+bwd")
                ),
                *(f"{r[k + '_gflops']:.1f}" if r.get(k + "_ms") is not None else "-" for k in ("fwd", "fwd+bwd")),
                f"{ref_ms / r['fwd+bwd_ms']:.2f}x" if ref_ms and r.get("fwd+bwd_ms") else "-",
            ]
            for r in rows
        ]
        print_table(
            f"\n{name}: B={b} H={h} T={t} D={d}{' causal' if causal else ''} (float32)",
            ["engine", "fwd ms", "fwd+bwd ms", "fwd GFLOP/s", "fwd+bwd GFLOP/s", "fwd+bwd speed vs torch sdpa"],
            table,
        )
        for note in notes:
            print(note, flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
