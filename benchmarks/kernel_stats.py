"""Registers, spills and code size of vkblas's GEMM kernels, as the Vulkan driver compiled them.

What holds a tile to one workgroup per SM, whether a kernel spills: wgpu does not expose the driver's pipeline
statistics (``VK_KHR_pipeline_executable_properties``), so this script builds a small Vulkan layer
(``benchmarks/vkstats/vkstats.c``: gcc and the Vulkan headers, ``apt-get install gcc libvulkan-dev``) into
``build/vkstats/``, runs itself again under it, compiles each named plan's kernel on its own and prints what the
driver reports for it. NVIDIA's driver reports registers, local memory (spills) and code size; Mesa's lavapipe
does not have the extension, and the script says so.

    python3 benchmarks/kernel_stats.py --plans 128x256k16.8x16.db.p0,32x64k16.4x4.db --layouts nn,tn,nt

On a machine without gcc (the lent GPU machine), build the layer here first (``--build-only``) and carry
``build/vkstats`` along. The "per SM" column is the register file's limit on an NVIDIA SM (64K 32-bit registers,
allocated per warp in units of 256): workgroup memory and the driver's shared-memory carveout may hold a tile to
fewer.

``--sass DIR`` also writes each kernel's machine code (``PLAN.LAYOUT.code``) and, where ``nvdisasm`` is found
(``$NVDISASM``, the PATH, or Triton's copy), its disassembly (``.sass``), and prints the main loop's instruction
mix. The code comes from the pipeline cache data the driver gives (the layer compiles each pipeline once more
into a cache of its own): on NVIDIA a zstd-compressed container, read by its layout on driver 580.159.04
(:func:`nvidia_code`; ``zstandard`` or the ``zstd`` command decompresses it).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_table  # noqa: E402

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "vkstats" / "vkstats.c"
MANIFEST = HERE / "vkstats" / "layer.json"
BUILD = HERE.parent / "build" / "vkstats"
LAYER = "VK_LAYER_VKBLAS_stats"
COLUMNS = ["plan", "layout", "loads", "threads", "wg memory B", "registers", "spilled B", "code B", "per SM (regs)"]
#: NVIDIA reports local memory with bit 36 set (driver 580.159.04: 2**36 for none, 2**36 + 752 for 752 bytes)
_LOCAL_FLAG = 1 << 36


def build_layer(dest: Path = BUILD) -> Path:
    """The layer's folder (its manifest and ``libvkstats.so``), compiled if missing or older than its source. A
    built layer is used as it is where there is no compiler: one carried to a machine without gcc, whose copied
    timestamps may come out older than the source's. SystemExit naming what is missing where it cannot be built."""
    lib = dest / "libvkstats.so"
    built = lib.exists() and (dest / "layer.json").exists()
    if built and lib.stat().st_mtime >= SOURCE.stat().st_mtime:
        return dest
    cc = shutil.which(os.environ.get("CC", "gcc"))
    if cc is None and built:
        print(f"kernel_stats: no C compiler; using the layer already built in {dest}", file=sys.stderr)
        return dest
    if cc is None:
        raise SystemExit("kernel_stats: no C compiler to build the layer with (apt-get install gcc)")
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [cc, "-O2", "-Wall", "-shared", "-fPIC", "-fvisibility=hidden", "-o", str(lib), str(SOURCE), "-lpthread"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        hint = " (the Vulkan headers: apt-get install libvulkan-dev)" if "vulkan/" in done.stderr else ""
        raise SystemExit(f"kernel_stats: building the layer failed{hint}:\n{done.stderr.strip()}")
    shutil.copyfile(MANIFEST, dest / "layer.json")
    return dest


def read_records(path: Path) -> list[dict[str, Any]]:
    """The layer's JSON lines so far."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def summary(stats: dict[str, Any]) -> tuple[Any, Any, Any]:
    """(registers, spilled bytes, code bytes) from one executable's statistics, "-" where the driver gives none."""
    local = stats.get("Local Memory Size")
    spilled = local & (_LOCAL_FLAG - 1) if isinstance(local, int) else "-"
    return stats.get("Register Count", "-"), spilled, stats.get("Binary Size", "-")


#: NVIDIA's pipeline cache entry, decompressed (driver 580.159.04): this magic, then at byte 76 the code's size
#: and offset (u32, little-endian); the code starts 8 bytes past the offset
_NV_MAGIC = b"NVDANVVMNVuc"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def _unzstd(frame: bytes) -> bytes:
    try:
        import zstandard  # type: ignore[import-not-found]
    except ImportError:
        zstd = shutil.which("zstd")
        if zstd is None:
            msg = "kernel_stats: --sass needs zstandard (pip) or the zstd command (apt-get install zstd)"
            raise SystemExit(msg) from None
        return subprocess.run([zstd, "-d", "-c", "-q"], input=frame, capture_output=True, check=True).stdout
    return zstandard.ZstdDecompressor().decompressobj().decompress(frame)


def nvidia_code(blob: bytes) -> bytes:
    """The machine code in one pipeline's cache data from NVIDIA's driver; ValueError for data of another form."""
    z = blob.find(_ZSTD_MAGIC)
    raw = _unzstd(blob[z:]) if z >= 0 else b""
    if not raw.startswith(_NV_MAGIC) or len(raw) < 84:
        raise ValueError(f"not NVIDIA's pipeline cache entry ({len(blob)} bytes, zstd frame at {z})")
    size, offset = struct.unpack_from("<2I", raw, 76)
    if offset + 8 + size > len(raw):
        raise ValueError(f"NVIDIA's pipeline cache entry: code of {size} bytes at {offset} is past its end")
    return raw[offset + 8 : offset + 8 + size]


_SASS = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;\s*/\* 0x([0-9a-f]{16}) \*/\s*\n\s*/\* 0x([0-9a-f]{16}) \*/")


def main_loop(sass: str) -> dict[str, Any]:
    """The instruction mix of the longest loop (the span of the backward branch that jumps furthest) in ``nvdisasm
    -hex`` output: instructions, stall cycles (the control bits' 4-bit stall count, summed) and opcodes by count."""
    ins = [(int(a, 16), text, int(hi, 16)) for a, text, _, hi in _SASS.findall(sass)]
    loops = []
    for a, text, _ in ins:
        m = re.search(r"\bBRA\b\s+(?:`\()?0x([0-9a-f]+)", text)
        if m and int(m.group(1), 16) < a:
            loops.append((int(m.group(1), 16), a))
    if not loops:
        return {"instructions": len(ins), "loop": 0, "stalls": 0, "ops": collections.Counter()}
    lo, hi = max(loops, key=lambda x: x[1] - x[0])
    body = [(text, (h >> 41) & 0xF) for a, text, h in ins if lo <= a <= hi]
    ops = collections.Counter((t.split()[1] if t.startswith("@") else t.split()[0]).split(".")[0] for t, _ in body)
    return {"instructions": len(ins), "loop": len(body), "stalls": sum(s for _, s in body), "ops": ops}


def _nvdisasm() -> str | None:
    found = os.environ.get("NVDISASM") or shutil.which("nvdisasm")
    if found:
        return found
    try:
        import triton  # type: ignore[import-not-found]
    except ImportError:
        return None
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "nvdisasm"
    return str(tool) if tool.exists() else None


def _write_sass(blob: bytes, stem: Path, arch: str) -> str:
    """``stem``.code and, where nvdisasm is found, ``stem``.sass; a line on the main loop for the table's notes.
    Another driver's cache data is written as it is (``stem``.bin), its form unread."""
    code_path, sass_path, bin_path = (stem.parent / f"{stem.name}.{ext}" for ext in ("code", "sass", "bin"))
    try:
        code = nvidia_code(blob)
    except ValueError as e:
        bin_path.write_bytes(blob)
        return f"{stem.name}: {e}; the cache data is in {bin_path.name}"
    code_path.write_bytes(code)
    tool = _nvdisasm()
    if tool is None:
        return f"{stem.name}: {len(code)} B of code (no nvdisasm: set $NVDISASM)"
    done = subprocess.run([tool, "-b", arch, "-hex", str(code_path)], capture_output=True, text=True)
    sass_path.write_text(done.stdout + done.stderr)
    loop = main_loop(done.stdout)
    mix = ", ".join(f"{k} {v}" for k, v in loop["ops"].most_common(8))
    return (
        f"{stem.name}: {loop['instructions']} instructions; main loop {loop['loop']}, "
        f"{loop['stalls']} stall cycles a turn: {mix}"
    )


def per_sm(registers: Any, threads: int) -> Any:
    """Workgroups of ``threads`` that an NVIDIA SM's 64K registers hold at ``registers`` a thread."""
    if not isinstance(registers, int) or registers <= 0:
        return "-"
    warps = -(-threads // 32)
    per_warp = -(-registers * 32 // 256) * 256
    return 65536 // (warps * per_warp)


def _measure(
    plans: Sequence[str], layouts: Sequence[str], size: int, out_path: Path, sass: Path | None = None, arch: str = ""
) -> tuple[list[list[Any]], list[str]]:
    import numpy as np

    from vkblas.backend.vulkan import gemm
    from vkblas.bench.gemm import _Vk
    from vkblas.dtypes import float32

    vk = _Vk("vulkan")
    device = [r for r in read_records(out_path) if "device" in r]
    if not device:
        raise SystemExit(f"kernel_stats: the layer {LAYER} did not load (VK_LAYER_PATH={os.environ['VK_LAYER_PATH']})")
    if not device[-1]["supported"]:
        raise SystemExit(
            f"kernel_stats: the driver of {vk.name} ({vk.be.dev.info.get('driver')}) does not report pipeline "
            "statistics (it lacks VK_KHR_pipeline_executable_properties)"
        )
    notes: list[str] = []
    rng = np.random.default_rng(0)
    a = rng.standard_normal((size, size), dtype=np.float32)
    b = rng.standard_normal((size, size), dtype=np.float32)
    rows = []
    for layout in layouts:
        out, va, vb = vk.views(a, b, layout, float32)
        for name in plans:
            v = gemm.variant_named(name)
            spec = gemm.make_spec(out, va, vb, False)
            seen = len(read_records(out_path))
            # a comment makes the source new to the device's kernel cache: the driver compiles it here, once
            vk.be.dev.kernel(f"// kernel_stats {name} {layout}\n" + gemm.source(v, spec), gemm.bindings(v, spec))
            new = [r for r in read_records(out_path)[seen:] if "pipeline" in r]
            if len(new) != 1:
                raise SystemExit(f"kernel_stats: expected one pipeline record for {name} {layout}, got {len(new)}")
            regs, spilled, code = summary(new[0]["stats"])
            if sass is not None:
                blob = (Path(os.environ["VKSTATS_CACHE_DIR"]) / f"pipe{new[0]['pipeline']:04d}.bin").read_bytes()
                notes.append(_write_sass(blob, sass / f"{name}.{layout}", arch))
            loads = f"{spec.a_mode},{spec.b_mode}"
            wg = gemm.workgroup_bytes(v, spec)
            rows.append([name, layout, loads, v.threads, wg, regs, spilled, code, per_sm(regs, v.threads)])
    return rows, notes


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--plans", default="128x256k16.8x16.db.p0", help="GEMM tiles by name, comma-separated")
    p.add_argument("--layouts", default="nn,tn,nt", help="operand layouts (nn: A @ B, tn: A.T @ B, nt: A @ B.T)")
    p.add_argument("--size", type=int, default=512, help="M = N = K of the operands the kernels are made for")
    p.add_argument("--layer-dir", type=Path, default=BUILD, help="where the layer is built (default: build/vkstats)")
    p.add_argument("--build-only", action="store_true", help="build the layer into --layer-dir and stop")
    p.add_argument("--sass", type=Path, help="write each kernel's machine code and disassembly into this folder")
    p.add_argument("--arch", default="SM90", help="nvdisasm's architecture for --sass (default SM90: H100, H200)")
    args = p.parse_args(argv)
    plans = [x.strip() for x in args.plans.split(",") if x.strip()]
    layouts = [x.strip() for x in args.layouts.split(",") if x.strip()]
    bad = [x for x in layouts if x not in ("nn", "tn", "nt", "tt")]
    if bad or not plans or args.size < 4:
        p.error(f"--layouts takes nn, tn, nt, tt (got {bad}); --plans at least one; --size at least 4")
    out_path = os.environ.get("VKSTATS_OUT")
    if out_path is None:  # run again under the layer
        layer = build_layer(args.layer_dir)
        if args.build_only:
            print(f"kernel_stats: layer built in {layer}")
            return 0
        with tempfile.TemporaryDirectory() as tmp:
            env = dict(os.environ, VKSTATS_OUT=str(Path(tmp) / "stats.jsonl"), VK_LAYER_PATH=str(layer))
            env["VK_INSTANCE_LAYERS"] = ":".join(filter(None, [env.get("VK_INSTANCE_LAYERS"), LAYER]))
            env["__GL_SHADER_DISK_CACHE"] = "0"  # NVIDIA: compile every pipeline, never take it from the disk cache
            if args.sass is not None:  # the layer writes each pipeline's cache data there
                args.sass.mkdir(parents=True, exist_ok=True)
                (Path(tmp) / "cache").mkdir()
                env["VKSTATS_CACHE_DIR"] = str(Path(tmp) / "cache")
            return subprocess.run(
                [sys.executable, __file__, *(argv if argv is not None else sys.argv[1:])], env=env
            ).returncode
    rows, notes = _measure(plans, layouts, args.size, Path(out_path), args.sass, args.arch)
    print_table("GEMM kernels as the driver compiled them (VK_KHR_pipeline_executable_properties)", COLUMNS, rows)
    for line in notes:
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
