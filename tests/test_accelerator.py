"""vkblas.accelerator (PyTorch >= 2.6's torch.accelerator API over the Vulkan devices), device aliases, and
pickling objects that hold tensors (vkblas.pickling)."""

from __future__ import annotations

import io
import pickle

import numpy as np
import pytest

import vkblas
from conftest import requires_vulkan
from vkblas import accelerator, nn, pickling
from vkblas.device import register_alias


def test_no_accelerator_when_the_default_device_is_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VKBLAS_DEVICE", "cpu")
    assert not accelerator.is_available() and accelerator.current_accelerator() is None
    assert accelerator.device_count() == 0
    with pytest.raises(RuntimeError, match="no accelerator: vkblas's default device is cpu"):
        accelerator.current_device_index()


@requires_vulkan
def test_the_vulkan_default_device_is_the_accelerator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VKBLAS_DEVICE", "vulkan:0")
    assert accelerator.is_available() and accelerator.device_count() == len(vkblas.devices()) - 1
    assert accelerator.current_accelerator() == vkblas.device("vulkan:0") and accelerator.current_device_index() == 0
    x = vkblas.ones(3, device=accelerator.current_accelerator()) * 2
    accelerator.synchronize()
    assert x.tolist() == [2.0, 2.0, 2.0]
    with accelerator.device_index(0):
        assert accelerator.current_device_idx() == 0
    with pytest.raises(ValueError, match="accelerator index 7 is out of range"):
        accelerator.set_device_index(7)


def test_device_alias_is_resolved_everywhere_a_device_is_named() -> None:
    with pytest.raises(ValueError, match="unknown device 'cuda'"):
        vkblas.device("cuda")
    register_alias("cuda", lambda index: "cpu")
    try:
        assert vkblas.device("cuda") == vkblas.device("cpu") and vkblas.device("cuda", 0).type == "cpu"
        assert vkblas.zeros(2, device="cuda:0").device.type == "cpu"
        assert vkblas.ones(2, device="cpu").to("cuda").device.type == "cpu"
        with pytest.raises(ValueError, match="bad device index in 'cuda:x'"):
            vkblas.device("cuda:x")
    finally:
        register_alias("cuda", None)
    with pytest.raises(ValueError, match="unknown device 'cuda'"):
        vkblas.zeros(1, device="cuda")


def test_pickling_round_trip_of_nested_objects_with_tensors() -> None:
    model = nn.Linear(3, 2).to("cpu")
    obj = {
        "model": model.state_dict(),
        "param": model.weight,
        "history": [vkblas.tensor(1.5, device="cpu"), (2, "two"), vkblas.ones(2, 3, device="cpu").T],
        "exact": vkblas.tensor([1.0, 2.0], dtype=vkblas.float64, device="cpu"),
        "flags": vkblas.tensor([True, False], device="cpu"),
    }
    back = pickling.loads(pickling.dumps(obj), device="cpu", weights_only=True)
    np.testing.assert_array_equal(back["model"]["weight"].numpy(), model.weight.detach().numpy())
    assert isinstance(back["param"], nn.Parameter) and back["param"].requires_grad
    assert back["history"][0].shape == () and back["history"][0].item() == 1.5 and back["history"][1] == (2, "two")
    assert back["history"][2].shape == (3, 2)  # a transposed view arrives with its own shape
    assert back["exact"].dtype is vkblas.float64 and back["flags"].dtype is vkblas.bool
    assert not back["model"]["weight"].requires_grad


def test_weights_only_refuses_code() -> None:
    class Evil:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (print, ("ran",))

    raw = pickle.dumps(Evil())
    with pytest.raises(pickle.UnpicklingError, match="weights_only=True refuses to load builtins.print"):
        pickling.load(io.BytesIO(raw), weights_only=True)


@requires_vulkan
def test_pickled_tensors_arrive_on_the_device_asked_for() -> None:
    raw = pickling.dumps([vkblas.tensor([1.0, 2.0], dtype=vkblas.float64, device="cpu")])
    (t,) = pickling.loads(raw, device="vulkan")
    assert t.device.type == "vulkan" and t.dtype is vkblas.float32 and t.tolist() == [1.0, 2.0]


MB3 = 3_145_728  # the pool's bucket for 3 000 000 bytes: 12 sixteenths of 4 MiB


@requires_vulkan
def test_memory_statistics_follow_the_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VKBLAS_DEVICE", "vulkan:0")
    accelerator.synchronize()
    start = accelerator.memory_allocated()
    accelerator.reset_peak_memory_stats()
    assert accelerator.max_memory_allocated() == start
    x = vkblas.empty(750_000, device="vulkan:0")  # 3 000 000 bytes
    assert accelerator.memory_allocated() == start + MB3 == accelerator.max_memory_allocated()
    y = x + 1
    assert accelerator.memory_allocated(0) == start + 2 * MB3
    del y  # its buffer goes back to the pool's cache: no longer allocated, still reserved
    assert accelerator.memory_allocated() == start + MB3
    assert accelerator.max_memory_allocated() == start + 2 * MB3
    assert accelerator.memory_reserved() >= accelerator.memory_allocated() + MB3
    stats = accelerator.memory_stats("vulkan:0")
    assert stats == {
        "allocated_bytes.all.current": start + MB3,
        "allocated_bytes.all.peak": start + 2 * MB3,
        "reserved_bytes.all.current": accelerator.memory_reserved(),
    }
    accelerator.reset_peak_memory_stats()
    assert accelerator.max_memory_allocated() == start + MB3
    accelerator.empty_cache()
    assert accelerator.memory_reserved() == accelerator.memory_allocated() == start + MB3
    del x
    assert accelerator.memory_allocated() == start and accelerator.max_memory_allocated() == start + MB3


@requires_vulkan
def test_memory_statistics_count_a_tensor_beyond_one_binding() -> None:
    """A storage larger than a binding is several segment buffers: all of them count."""
    from vkblas.backend.vulkan import VulkanBackend
    from vkblas.tensor import from_host

    small = VulkanBackend(limits={"max-storage-buffer-binding-size": 1 << 18, "max-buffer-size": 1 << 20})
    before = small.memory_stats()["allocated"]
    t = from_host(np.zeros(700_000, np.float32), vkblas.float32, small)  # 2.8 MB: 3 segments of at most 1 MiB
    assert len(t._view.storage.segments) == 3
    # two full segments, and the last one's 702 848 bytes in a 1 MiB bucket (powers of two up to 1 MiB)
    assert small.memory_stats()["allocated"] - before == 3 * (1 << 20)
    del t
    assert small.memory_stats()["allocated"] == before


def test_memory_statistics_need_a_vulkan_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VKBLAS_DEVICE", "cpu")
    with pytest.raises(RuntimeError, match="no accelerator"):
        accelerator.memory_allocated()
    with pytest.raises(ValueError, match="memory statistics are kept for the Vulkan backend's pool only"):
        accelerator.max_memory_allocated("cpu")


def test_cpu_backend_counts_the_bytes_its_storages_hold() -> None:
    """The cpu backend's own statistics (``vkblas.accelerator`` is Vulkan's only, as torch.accelerator has no
    cpu): bytes of live storages, unrounded, and the peak since the reset."""
    cpu = vkblas.backend.get("cpu")
    start = cpu.memory_stats()["allocated"]
    cpu.reset_peak_memory_stats()
    a = vkblas.zeros(1000, device="cpu")
    b = vkblas.zeros(500, dtype=vkblas.float64, device="cpu")
    assert cpu.memory_stats()["allocated"] == start + 8000
    del a, b
    stats = cpu.memory_stats()
    assert stats["allocated"] == start and stats["peak_allocated"] == start + 8000
    assert stats["reserved"] >= stats["allocated"]
    cpu.reset_peak_memory_stats()
    assert cpu.memory_stats()["peak_allocated"] == start
