"""Checkpoints in safetensors: round trips, and files in PyTorch's key layout loading with strict=True."""

from __future__ import annotations

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import vkblas as vk
from conftest import require_torch
from vkblas import nn

HAS_VULKAN = any(d.startswith("vulkan") for d in vk.devices())
DEVICES = ["cpu", pytest.param("vulkan", marks=pytest.mark.skipif(not HAS_VULKAN, reason="no Vulkan adapter"))]


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))


def cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(4 * 2 * 2, 3),
    )


# PyTorch's state_dict layout for the models above, as torch would write it (num_batches_tracked is int64)
TORCH_LAYOUT = {
    "mlp": (mlp, (2, 4), {"0.weight": (8, 4), "0.bias": (8,), "2.weight": (3, 8), "2.bias": (3,)}),
    "cnn": (
        cnn,
        (2, 1, 4, 4),
        {
            "0.weight": (4, 1, 3, 3),
            "0.bias": (4,),
            "1.weight": (4,),
            "1.bias": (4,),
            "1.running_mean": (4,),
            "1.running_var": (4,),
            "1.num_batches_tracked": (),
            "5.weight": (3, 16),
            "5.bias": (3,),
        },
    ),
}


@pytest.mark.parametrize("device", DEVICES)
def test_tensor_and_dict_round_trip(tmp_path, device):
    path = tmp_path / "t.safetensors"
    data = {
        "f32": vk.randn(3, 2, device=device),
        "i32": vk.tensor([1, -2, 3], device=device),
        "b": vk.tensor([True, False], device=device),
        "scalar": vk.tensor(2.5, device=device),
        "strided": vk.arange(12, device=device).reshape(3, 4).T,
    }
    vk.save(data, path)
    back = vk.load(path, device=device)
    assert list(back) == sorted(data) or set(back) == set(data)
    for k, v in data.items():
        assert back[k].dtype == v.dtype and back[k].shape == v.shape and back[k].device == v.device
        np.testing.assert_array_equal(back[k].numpy(), v.numpy())
    vk.save(data["f32"], path)
    single = vk.load(path, map_location=device)
    np.testing.assert_array_equal(single.numpy(), data["f32"].numpy())


def test_float64_round_trip(tmp_path):
    t = vk.tensor([1.0, 2.0], dtype=vk.float64, device="cpu")
    vk.save({"x": t}, tmp_path / "d.safetensors")
    assert vk.load(tmp_path / "d.safetensors", device="cpu")["x"].dtype == vk.float64


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(TORCH_LAYOUT))
def test_torch_layout_file_loads_strict(tmp_path, device, name):
    make, in_shape, layout = TORCH_LAYOUT[name]
    rng = np.random.default_rng(0)
    arrays = {
        k: (
            np.array(7, dtype=np.int64)
            if k.endswith("num_batches_tracked")
            else rng.uniform(0.5, 1.5, s).astype(np.float32)
        )
        for k, s in layout.items()
    }
    save_file(arrays, str(tmp_path / "m.safetensors"))
    model = make().to(device)
    assert model.load_state_dict(vk.load(tmp_path / "m.safetensors"), strict=True) == ([], [])
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), arrays[k])
        assert v.device == vk.device(device)
    x = vk.randn(*in_shape, device=device)
    y = model.eval()(x)
    vk.save(model.state_dict(), tmp_path / "again.safetensors")
    again = make().to(device)
    again.load_state_dict(vk.load(tmp_path / "again.safetensors", device=device))
    np.testing.assert_allclose(again.eval()(x).detach().numpy(), y.detach().numpy(), rtol=1e-6)
    assert set(load_file(str(tmp_path / "again.safetensors"))) == set(layout)


def test_exchange_with_torch(tmp_path):
    torch = require_torch()
    from safetensors.torch import load_file as torch_load
    from safetensors.torch import save_file as torch_save

    def torch_cnn():
        return torch.nn.Sequential(
            torch.nn.Conv2d(1, 4, 3, padding=1),
            torch.nn.BatchNorm2d(4),
            torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),
            torch.nn.Flatten(),
            torch.nn.Linear(16, 3),
        )

    tm = torch_cnn()
    tm.train()(torch.randn(5, 1, 4, 4))  # non-trivial running stats
    tm.eval()
    torch_save(tm.state_dict(), str(tmp_path / "torch.safetensors"))
    vm = cnn()
    vm.load_state_dict(vk.load(tmp_path / "torch.safetensors", device="cpu"))
    x = np.random.default_rng(1).standard_normal((2, 1, 4, 4)).astype(np.float32)
    np.testing.assert_allclose(
        vm.eval()(vk.tensor(x, device="cpu")).detach().numpy(),
        tm(torch.tensor(x)).detach().numpy(),
        rtol=1e-4,
        atol=1e-5,
    )
    vk.save(vm.state_dict(), tmp_path / "vk.safetensors")
    tm2 = torch_cnn()
    tm2.load_state_dict(torch_load(str(tmp_path / "vk.safetensors")), strict=True)
    for k, v in tm.state_dict().items():
        assert torch.equal(tm2.state_dict()[k], v), k


def test_bad_input(tmp_path):
    with pytest.raises(TypeError, match="dict of Tensors"):
        vk.save([vk.zeros(1, device="cpu")], tmp_path / "x.safetensors")
    with pytest.raises(TypeError, match="key 'a'"):
        vk.save({"a": 1.0}, tmp_path / "x.safetensors")
    (tmp_path / "junk.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ValueError, match="not a readable safetensors file"):
        vk.load(tmp_path / "junk.safetensors")
