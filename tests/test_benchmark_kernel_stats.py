"""benchmarks/kernel_stats.py: its Vulkan layer builds and loads, and the driver's statistics are read right.

On a driver with ``VK_KHR_pipeline_executable_properties`` (NVIDIA) the table has each kernel's registers; lavapipe
lacks the extension, and the script must say so (which it can only know once its layer has loaded)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import requires_vulkan

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("kernel_stats", ROOT / "benchmarks/kernel_stats.py")
assert _spec is not None and _spec.loader is not None
ks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ks)


def test_summary_reads_the_drivers_statistics() -> None:
    # NVIDIA's local memory carries bit 36: 2**36 is no spill, 2**36 + 752 is 752 bytes (driver 580.159.04)
    stats = {"Register Count": 235, "Binary Size": 52608, "Local Memory Size": 2**36, "Shared Memory Size": 49152}
    assert ks.summary(stats) == (235, 0, 52608)
    assert ks.summary({**stats, "Local Memory Size": 2**36 + 752}) == (235, 752, 52608)
    assert ks.summary({"Code size": 10}) == ("-", "-", "-")


def test_workgroups_per_sm_by_registers() -> None:
    assert ks.per_sm(235, 256) == 1  # the 4096^3 tile: 8 warps of 7,680 registers
    assert ks.per_sm(128, 256) == 2
    assert ks.per_sm(255, 128) == 2
    assert ks.per_sm(79, 128) == 6  # 80 a thread in 256-register units
    assert ks.per_sm("-", 256) == "-"


def _nvidia_entry(code: bytes, offset: int = 400) -> bytes:
    """A pipeline cache entry laid out as NVIDIA's driver 580.159.04 writes one: a header, then a zstd frame of the
    container (its magic, the code's size and offset at byte 76, the code 8 bytes past the offset)."""
    raw = bytearray(ks._NV_MAGIC + bytes(offset + 8 - len(ks._NV_MAGIC))) + code + b"tail"
    struct.pack_into("<2I", raw, 76, len(code), offset)
    frame = subprocess.run(["zstd", "-c", "-q"], input=bytes(raw), capture_output=True, check=True).stdout
    return bytes(100) + frame


def _need_zstd() -> None:
    if shutil.which("zstd") is None:
        if os.environ.get("VKBLAS_REQUIRE_LAYER_TOOLS") == "1":
            pytest.fail("VKBLAS_REQUIRE_LAYER_TOOLS=1 but the zstd command is missing")
        pytest.skip("the zstd command is missing (apt-get install zstd)")


def test_the_machine_code_is_read_from_nvidias_pipeline_cache_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    _need_zstd()
    monkeypatch.setitem(sys.modules, "zstandard", None)  # the zstd command's path, which CI has
    code = bytes(range(256)) * 3
    assert ks.nvidia_code(_nvidia_entry(code)) == code
    with pytest.raises(ValueError, match="not NVIDIA's pipeline cache entry"):
        ks.nvidia_code(bytes(32) + b"lavapipe's cache data")
    bad = bytearray(
        subprocess.run(["zstd", "-d", "-c", "-q"], input=_nvidia_entry(code)[100:], capture_output=True).stdout
    )
    struct.pack_into("<2I", bad, 76, 10**6, 400)
    frame = subprocess.run(["zstd", "-c", "-q"], input=bytes(bad), capture_output=True, check=True).stdout
    with pytest.raises(ValueError, match="code of 1000000 bytes at 400 is past its end"):
        ks.nvidia_code(frame)


_LOOP = """
        /*0000*/                   S2R R0, SR_TID.X ;                       /* 0x0000000000007919 */
                                                                            /* 0x000e220000002100 */
        /*0010*/                   LDS.128 R4, [R0] ;                       /* 0x0000000000047984 */
                                                                            /* 0x000e280000000c00 */
        /*0020*/                   FFMA.FTZ R8, R4, R5, R8 ;                /* 0x0000000504087223 */
                                                                            /* 0x001fc20000010008 */
        /*0030*/                   FFMA.FTZ R9, R4, R6, R9 ;                /* 0x0000000604097223 */
                                                                            /* 0x000fc20000010009 */
        /*0040*/              @!P0 BRA 0x10 ;                               /* 0xfffffffc00f08947 */
                                                                            /* 0x000fea000383ffff */
        /*0050*/                   EXIT ;                                   /* 0x000000000000794d */
                                                                            /* 0x000fea0003800000 */
"""


def test_another_drivers_cache_data_is_kept_as_it_is(tmp_path: Path) -> None:
    note = ks._write_sass(b"radv cache data", tmp_path / "32x64k16.4x4.db.nn", "SM90")
    assert "not NVIDIA's pipeline cache entry" in note and "32x64k16.4x4.db.nn.bin" in note
    assert (tmp_path / "32x64k16.4x4.db.nn.bin").read_bytes() == b"radv cache data"


def test_the_code_and_its_disassembly_are_written_per_plan_and_layout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both layouts of one plan keep their own files (the layout is part of the name, not a suffix)."""
    _need_zstd()
    monkeypatch.setenv("NVDISASM", str(tmp_path / "nvdisasm"))
    (tmp_path / "nvdisasm").write_text(f"#!/bin/sh\ncat <<'EOF'\n{_LOOP}EOF\n")
    (tmp_path / "nvdisasm").chmod(0o755)
    for layout, code in (("nn", b"\x01" * 32), ("tn", b"\x02" * 48)):
        note = ks._write_sass(_nvidia_entry(code), tmp_path / f"128x256k16.8x16.db.p0.{layout}", "SM90")
        assert note.startswith(f"128x256k16.8x16.db.p0.{layout}: 6 instructions; main loop 4, 11 stall cycles")
        assert (tmp_path / f"128x256k16.8x16.db.p0.{layout}.code").read_bytes() == code
        assert "FFMA.FTZ" in (tmp_path / f"128x256k16.8x16.db.p0.{layout}.sass").read_text()


def test_the_main_loops_instruction_mix_is_read_from_the_disassembly() -> None:
    loop = ks.main_loop(_LOOP)
    assert (loop["instructions"], loop["loop"]) == (6, 4)  # 0x10..0x40: LDS, two FFMAs, the branch back
    assert loop["ops"] == {"FFMA": 2, "LDS": 1, "BRA": 1}
    # the stall counts are bits 41-44 of each instruction's second word: 4 + 1 + 1 + 5
    assert loop["stalls"] == 11
    assert ks.main_loop(_LOOP.replace("@!P0 BRA 0x10", "@!P0 BRA 0x50"))["loop"] == 0


def test_a_built_layer_is_used_where_there_is_no_compiler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A layer carried to a machine without gcc (the lent GPU machine) whose copied timestamps are older than the
    source's is used as it is; with no layer and no compiler the error says what to install."""
    monkeypatch.setattr(ks.shutil, "which", lambda name: None)
    with pytest.raises(SystemExit, match="no C compiler to build the layer with"):
        ks.build_layer(tmp_path / "none")
    dest = tmp_path / "carried"
    dest.mkdir()
    for name in ("libvkstats.so", "layer.json"):
        (dest / name).write_bytes(b"")
        os.utime(dest / name, (0, 0))  # older than vkstats.c
    assert ks.build_layer(dest) == dest


def _have_tools() -> bool:
    return shutil.which("gcc") is not None and Path("/usr/include/vulkan/vk_layer.h").exists()


@requires_vulkan
def test_the_layer_builds_loads_and_reports(tmp_path: Path) -> None:
    if not _have_tools():
        if os.environ.get("VKBLAS_REQUIRE_LAYER_TOOLS") == "1":
            pytest.fail("VKBLAS_REQUIRE_LAYER_TOOLS=1 but gcc or the Vulkan headers are missing")
        pytest.skip("gcc or the Vulkan headers are missing (apt-get install gcc libvulkan-dev)")
    built = ks.build_layer(tmp_path / "vkstats")
    assert (built / "libvkstats.so").exists() and (built / "layer.json").exists()
    cmd = [sys.executable, str(ROOT / "benchmarks/kernel_stats.py"), "--plans", "32x64k16.4x4.db", "--layouts",
           "nn,tn", "--layer-dir", str(built)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    text = proc.stdout + proc.stderr
    assert "did not load" not in text, text
    if proc.returncode == 0:  # a driver with the statistics: one row per layout, registers a number
        rows = [line for line in proc.stdout.splitlines() if "32x64k16.4x4.db" in line]
        assert len(rows) == 2, text
        cells = [c.strip() for c in rows[0].strip("|").split("|")]
        assert cells[ks.COLUMNS.index("registers")].isdigit(), text
    else:  # the layer loaded (it wrote the device's line) and found the extension missing
        assert proc.returncode == 1 and "does not report pipeline statistics" in text, text
