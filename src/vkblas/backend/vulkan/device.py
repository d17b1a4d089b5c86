"""Adapter discovery, device creation, shader compilation and the pipeline cache.

Kernels are compiled through ``wgpuDeviceCreateShaderModuleTrusted(..., runtimeChecks=0)``: naga then emits no
bounds checks on array accesses (DESIGN.md: 15x on GEMM). Every kernel of this package guards its accesses with
explicit size tests and the backend validates view extents on the host, so unchecked code never reads out of
bounds. ``VKBLAS_SHADER_CHECKS=1`` compiles through the ordinary checked path instead (the tests run both ways).

All pipelines share explicit layouts: binding 0 is the params uniform (dynamic offset, 256 bytes), bindings 1..k
storage buffers. So bind groups depend only on the buffers, not on the kernel, and are cached by buffer identity.
"""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass
from typing import Any

import wgpu
from wgpu.backends.wgpu_native import _api, _ffi

from ..base import BackendError, NoAdapterError
from .kernels.wgsl import PARAM_WORDS

_KEY_LIMITS = (
    "max-buffer-size",
    "max-storage-buffer-binding-size",
    "max-storage-buffers-per-shader-stage",
    "max-compute-workgroups-per-dimension",
    "max-compute-invocations-per-workgroup",
    "max-compute-workgroup-storage-size",
    "max-uniform-buffer-binding-size",
    "min-uniform-buffer-offset-alignment",
    "max-dynamic-uniform-buffers-per-pipeline-layout",
    "max-immediate-size",
)
_WANTED_FEATURES = ("shader-f16", "timestamp-query", "subgroup")
_HARDWARE = {"DiscreteGPU": 0, "IntegratedGPU": 1, "VirtualGPU": 2}
_INSTANCE_CONFIGURED = False


def _configure_instance() -> None:
    """Ask wgpu for Vulkan explicitly: without a Vulkan driver it would silently pick OpenGL (DESIGN.md §3)."""
    global _INSTANCE_CONFIGURED
    if _INSTANCE_CONFIGURED:
        return
    if sys.platform != "darwin":  # Metal stays the backend on Apple
        try:
            wgpu.backends.wgpu_native.extras.set_instance_extras(backends=["Vulkan"])
        except Exception:  # noqa: BLE001 - the instance already exists (another library configured it)
            pass
    _INSTANCE_CONFIGURED = True


def _enumerate() -> list[Any]:
    _configure_instance()
    return list(wgpu.gpu.enumerate_adapters_sync())


def _adapter_info(adapter: Any) -> dict[str, Any]:
    info = adapter.info
    limits = adapter.limits
    return {
        "name": info.get("device", ""),
        "vendor": info.get("vendor", ""),
        "backend_type": info.get("backend_type", ""),
        "adapter_type": info.get("adapter_type", ""),
        "driver": info.get("description", ""),
        "features": sorted(adapter.features),
        "limits": {k: limits[k] for k in _KEY_LIMITS if k in limits},
    }


def list_adapters() -> list[dict[str, Any]]:
    """Every adapter wgpu sees (Vulkan ones on Linux/Windows), with its type, driver, features and key limits."""
    return [dict(_adapter_info(a), index=i) for i, a in enumerate(_enumerate())]


def _expected_backend() -> str:
    return "Metal" if sys.platform == "darwin" else "Vulkan"


def select_adapter(index: int | None = None) -> tuple[int, Any]:
    """(index, adapter): adapter ``index`` of :func:`list_adapters`, else the best hardware one, else any."""
    adapters = _enumerate()
    if index is not None:
        if not 0 <= index < len(adapters):
            raise NoAdapterError(f"vulkan: adapter index {index} out of range; {len(adapters)} adapter(s) found")
        return index, adapters[index]
    usable = [(i, a) for i, a in enumerate(adapters) if a.info.get("backend_type") == _expected_backend()]
    if not usable:
        seen = ", ".join(f"{a.info.get('device')} ({a.info.get('backend_type')})" for a in adapters) or "none"
        raise NoAdapterError(
            f"vulkan: no {_expected_backend()} adapter found (adapters seen: {seen}). Install a Vulkan driver; on "
            "Debian/Ubuntu without a GPU, `apt-get install mesa-vulkan-drivers libvulkan1` provides lavapipe."
        )
    return min(usable, key=lambda ia: _HARDWARE.get(ia[1].info.get("adapter_type", ""), 9))


@dataclass(frozen=True, slots=True)
class Kernel:
    """A compiled pipeline and the number of storage bindings it uses."""

    pipeline: Any
    handle: Any  # the native WGPUComputePipeline, for direct lib calls on the hot path
    nbuf: int
    source: str
    #: what asked for it, for profiles (``profile.py``): the calling module and function, and its ``op``/``kind``
    label: str = ""


def _caller_label(depth: int = 2) -> str:
    """``module.function op`` of the plan builder that compiles a kernel (paid once per kernel, at compile time).
    Kernels are cached by source, so ops that generate the same WGSL share the label of the first to compile it;
    where a helper compiles for its caller (``foreach.kernel``, attention's ``build`` closure) the label names it."""
    frame = sys._getframe(depth)
    module = frame.f_globals.get("__name__", "?").rsplit(".", 1)[-1]
    loc = frame.f_locals
    what = next((v for k in ("op", "kind") if isinstance(v := loc.get(k), str)), getattr(loc.get("v"), "name", ""))
    return f"{module}.{frame.f_code.co_name} {what}".strip()


class Device:
    """The wgpu device plus what kernels need from it: limits, features, compiled-pipeline cache."""

    def __init__(self, adapter_index: int | None = None) -> None:
        self.index, self.adapter = select_adapter(adapter_index)
        self.info = _adapter_info(self.adapter)
        feats = [f for f in _WANTED_FEATURES if f in self.adapter.features]
        alimits = self.adapter.limits
        wanted = {
            "max-buffer-size": alimits["max-buffer-size"],
            "max-storage-buffer-binding-size": alimits["max-storage-buffer-binding-size"],
            "max-storage-buffers-per-shader-stage": alimits["max-storage-buffers-per-shader-stage"],
            "max-compute-workgroup-storage-size": alimits["max-compute-workgroup-storage-size"],
            "max-compute-invocations-per-workgroup": alimits["max-compute-invocations-per-workgroup"],
        }
        self.device = self.adapter.request_device_sync(required_features=feats, required_limits=wanted)
        self.features = frozenset(self.device.features)
        self.limits = dict(self.device.limits)
        self.has_f16 = "shader-f16" in self.features
        self.checked = os.environ.get("VKBLAS_SHADER_CHECKS", "") == "1"
        self._kernels: dict[str, Kernel] = {}
        self._bgls: dict[int, Any] = {}
        self._layouts: dict[int, Any] = {}
        # kernels may compile on several threads at once (the GEMM tuner's candidates): a bind group layout and
        # its pipeline layout are made together, once, or a pipeline could get a layout its bind groups lack
        self._layout_lock = threading.Lock()
        self._compiling: dict[str, threading.Lock] = {}  # a source being compiled: others wait for it, not redo it

    def describe(self) -> dict[str, Any]:
        return {
            "name": "vulkan",
            "adapter": self.info["name"],
            "vendor": self.info["vendor"],
            "adapter_type": self.info["adapter_type"],
            "backend_type": self.info["backend_type"],
            "driver": self.info["driver"],
            "features": sorted(self.features),
            "limits": {k: self.limits[k] for k in _KEY_LIMITS if k in self.limits},
            "shader_checks": self.checked,
        }

    # -- layouts shared by every pipeline with the same number of storage buffers
    def bind_group_layout(self, nbuf: int) -> Any:
        bgl = self._bgls.get(nbuf)
        if bgl is not None:
            return bgl
        with self._layout_lock:
            bgl = self._bgls.get(nbuf)
            if bgl is not None:
                return bgl
            c = wgpu.ShaderStage.COMPUTE
            entries = [
                {
                    "binding": 0,
                    "visibility": c,
                    "buffer": {"type": "uniform", "has_dynamic_offset": True, "min_binding_size": PARAM_WORDS * 4},
                }
            ]
            entries += [{"binding": i + 1, "visibility": c, "buffer": {"type": "storage"}} for i in range(nbuf)]
            bgl = self.device.create_bind_group_layout(entries=entries)
            self._layouts[nbuf] = self.device.create_pipeline_layout(bind_group_layouts=[bgl])
            self._bgls[nbuf] = bgl  # last: a reader that finds it finds the pipeline layout too
        return bgl

    def _module(self, source: str) -> Any:
        if self.checked:
            return self.device.create_shader_module(code=source)
        ffi, lib = _ffi.ffi, _api.libf
        code = ffi.new("char[]", source.encode())
        wgsl = ffi.new("WGPUShaderSourceWGSL *")
        wgsl.chain.next = ffi.NULL
        wgsl.chain.sType = _ffi.lib.WGPUSType_ShaderSourceWGSL
        wgsl.code.data = code
        wgsl.code.length = len(source.encode())
        desc = ffi.new("WGPUShaderModuleDescriptor *")
        desc.nextInChain = ffi.cast("WGPUChainedStruct *", wgsl)
        desc.label.data = ffi.NULL
        desc.label.length = 0
        # runtimeChecks = 0: no bounds checks, no forced loop bounding (our kernels guard and terminate)
        handle = lib.wgpuDeviceCreateShaderModuleTrusted(self.device._internal, desc, 0)
        if handle == ffi.NULL:
            raise RuntimeError("shader module creation failed")
        return _api.GPUShaderModule("vkblas", handle, self.device)

    def kernel(self, source: str, nbuf: int) -> Kernel:
        """The compiled pipeline for ``source`` (cached by source text). Safe to call from several threads: wgpu
        compiles outside the GIL, so the GEMM tuner compiles its candidates side by side; a source is compiled
        once, a second caller waiting for the first."""
        k = self._kernels.get(source)
        if k is not None:
            return k
        with self._layout_lock:
            busy = self._compiling.setdefault(source, threading.Lock())
        with busy:
            k = self._kernels.get(source)
            if k is None:
                k = self._kernels[source] = self._compile(source, nbuf)
        self._compiling.pop(source, None)
        return k

    def _compile(self, source: str, nbuf: int) -> Kernel:
        self.bind_group_layout(nbuf)
        try:
            module = self._module(source)
            pipe = self.device.create_compute_pipeline(
                layout=self._layouts[nbuf], compute={"module": module, "entry_point": "main"}
            )
        except Exception as e:  # noqa: BLE001 - wgpu raises several error types for invalid WGSL
            numbered = "\n".join(f"{i + 1:4d} {line}" for i, line in enumerate(source.splitlines()))
            raise BackendError(f"vulkan: kernel compilation failed: {e}\n{numbered}") from e
        return Kernel(pipe, pipe._internal, nbuf, source, _caller_label(3))
