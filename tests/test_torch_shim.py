"""The PyTorch shim of `vkblas run` (vkblas.compat), in-process: what `import torch` resolves to and only for the
run, errors naming missing names, the CUDA mapping, the flags and pass-throughs, torch.save / torch.load (also
against real PyTorch and safetensors), GradScaler against PyTorch's, torchvision's datasets, and the runner."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import vkblas
from conftest import requires_vulkan
from vkblas.compat import NotImplementedInVkblasError, installed, run_script
from vkblas.data import DataError

real_torch = pytest.importorskip("torch")
SRC = Path(__file__).resolve().parents[1] / "src"
DATA = Path(os.environ.get("VKBLAS_DATA") or Path(__file__).resolve().parents[1] / ".." / "shared" / "data")
needs_mnist = pytest.mark.skipif(not (DATA / "mnist").is_dir(), reason=f"no MNIST files in {DATA}")


@pytest.fixture
def torch(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``import torch`` as a program under ``vkblas run`` sees it (default device: cpu)."""
    monkeypatch.setenv("VKBLAS_DEVICE", "cpu")
    with installed():
        import torch as shim

        yield shim


@pytest.fixture
def torch_on_vulkan(monkeypatch: pytest.MonkeyPatch) -> Any:
    if not any(d.startswith("vulkan") for d in vkblas.devices()):
        pytest.skip("no Vulkan adapter")
    monkeypatch.setenv("VKBLAS_DEVICE", "vulkan")
    with installed():
        import torch as shim

        yield shim


# ------------------------------------------------------------------------------------------------ the import hook
def test_torch_is_vkblas_only_inside_the_run(torch: Any) -> None:
    import torch.nn.functional as F
    from torch.optim.lr_scheduler import StepLR
    from torch.utils.data import DataLoader

    assert (
        torch.Tensor is vkblas.Tensor and torch.nn.Module is vkblas.nn.Module and DataLoader is vkblas.data.DataLoader
    )
    assert F.cross_entropy is vkblas.nn.functional.cross_entropy and StepLR is vkblas.optim.lr_scheduler.StepLR
    assert torch.optim.AdamW is vkblas.optim.AdamW and torch.nn.init.normal_ is vkblas.nn.init.normal_
    assert torch.cuda.amp.GradScaler is not None and torch.backends.cudnn.is_available() is False


def test_the_real_torch_comes_back_after_the_run() -> None:
    with installed():
        import torch as inside
    import torch as after

    assert inside is not real_torch and after is real_torch and sys.modules["torch.nn"] is real_torch.nn
    assert not hasattr(vkblas.Tensor, "cuda") and not hasattr(vkblas.nn.Module, "cuda")
    with pytest.raises(ValueError, match="unknown device 'cuda'"):
        vkblas.device("cuda")


@pytest.mark.parametrize(
    ("get", "name"),
    [
        (lambda t: t.stft, "torch.stft"),
        (lambda t: t.nn.functional.grid_sample, "torch.nn.functional.grid_sample"),
        (lambda t: t.optim.LBFGS, "torch.optim.LBFGS"),
        (lambda t: t.optim.lr_scheduler.CyclicLR, "torch.optim.lr_scheduler.CyclicLR"),
        (lambda t: t.nn.TransformerEncoder, "torch.nn.TransformerEncoder"),
        (lambda t: t.cuda.max_memory_allocated, "torch.cuda.max_memory_allocated"),
        (lambda t: t.utils.data.WeightedRandomSampler, "torch.utils.data.WeightedRandomSampler"),
        (lambda t: t.ones(2).kthvalue, "torch.Tensor.kthvalue"),
    ],
)
def test_a_missing_name_is_an_error_naming_it(torch: Any, get: Any, name: str) -> None:
    with pytest.raises(NotImplementedInVkblasError, match=f"^{name} is not implemented in vkblas yet"):
        get(torch)


def test_missing_names_probe_false_and_missing_modules_fail_to_import(torch: Any) -> None:
    assert not hasattr(torch.nn.functional, "grid_sample")  # how programs probe
    assert hasattr(torch.nn.functional, "scaled_dot_product_attention")  # nanoGPT's probe finds the fused kernel
    with pytest.raises(ModuleNotFoundError, match="module torch.distributions is not implemented in vkblas yet"):
        import torch.distributions  # noqa: F401
    with pytest.raises(ModuleNotFoundError, match="module torchvision.models is not implemented"):
        import torchvision.models  # noqa: F401
    with pytest.raises(ImportError, match="stft"):
        from torch import stft  # noqa: F401
    import torchvision

    with pytest.raises(NotImplementedInVkblasError, match="torchvision.datasets.CIFAR10 is not implemented"):
        torchvision.datasets.CIFAR10  # noqa: B018


# ------------------------------------------------------------------------------------------------ devices
def test_without_an_accelerator_cuda_is_unavailable_and_says_why(torch: Any, capfd: pytest.CaptureFixture[str]) -> None:
    assert torch.cuda.is_available() is False and torch.accelerator.is_available() is False
    assert torch.cuda.device_count() == 0 and torch.accelerator.current_accelerator() is None
    err = capfd.readouterr().err
    assert err.count("torch.cuda.is_available() is False: vkblas's default device is cpu") == 1  # said once
    with pytest.raises(RuntimeError, match="device 'cuda' stands for vkblas's Vulkan accelerator under vkblas run"):
        torch.zeros(2, device="cuda")
    assert torch.device("cpu").type == "cpu" and torch.ones(2).cpu().device.type == "cpu"


def test_cuda_is_the_vulkan_device(torch_on_vulkan: Any, capfd: pytest.CaptureFixture[str]) -> None:
    torch = torch_on_vulkan
    assert torch.cuda.is_available() and torch.accelerator.is_available()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    assert device == vkblas.device("vulkan:0") and torch.accelerator.current_accelerator() == device
    x = torch.ones(3, device="cpu").cuda()
    model = torch.nn.Linear(3, 2).cuda()
    y = model(x.pin_memory().to(device, non_blocking=True))
    assert x.is_cuda and y.device == device and not x.is_pinned()
    assert torch.zeros(2, device="cuda:0").device == device and torch.cuda.current_device() == 0
    torch.cuda.manual_seed_all(3)
    torch.cuda.synchronize()
    torch.accelerator.synchronize()
    assert "llvmpipe" in torch.cuda.get_device_name(0) or torch.cuda.get_device_name(0)
    assert capfd.readouterr().err.count("'cuda' is vkblas's Vulkan device vulkan:0") == 1
    with pytest.raises(RuntimeError, match="device 'cuda:5' does not exist"):
        torch.zeros(1, device="cuda:5")


# ------------------------------------------------------------------------------------------------ torch names
def test_pytorch_forms_and_pass_throughs(torch: Any, capfd: pytest.CaptureFixture[str]) -> None:
    assert torch.randint(10, (4,)).shape == (4,) and torch.randint(3, 5, (2, 2)).tolist()[0][0] in (3, 4)
    assert torch.randint(0, 2, size=(3,)).shape == (3,)
    model = torch.nn.Linear(2, 2)
    assert torch.compile(model) is model and torch.compile(mode="max-autotune")(model) is model
    torch.set_float32_matmul_precision("high")
    assert torch.get_float32_matmul_precision() == "high"
    with pytest.raises(RuntimeError, match="Invalid float32 matmul precision 'fast'"):
        torch.set_float32_matmul_precision("fast")
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = torch.backends.cudnn.benchmark = True
    with pytest.raises(AttributeError, match="torch.backends.cuda.matmul has no switch 'allow_tf64'"):
        torch.backends.cuda.matmul.allow_tf64 = True
    assert not torch.backends.mps.is_available() and not torch.cuda.is_bf16_supported()
    with torch.inference_mode():
        assert not (torch.ones(1, requires_grad=True) * 2).requires_grad
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):  # vkblas has none: float32, said once
        assert (torch.ones(2) @ torch.ones(2)).dtype is torch.float32
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=False):  # accepted, quietly
        assert (torch.ones(2) @ torch.ones(2)).dtype is torch.float32
    assert "bfloat16" in repr(torch.bfloat16)
    with pytest.raises(TypeError, match="unknown dtype torch.bfloat16"):
        torch.zeros(2, dtype=torch.bfloat16)
    assert f"{torch.tensor(2.5):.3f}" == "2.500" and f"{torch.tensor([1.0, 2.0])}".startswith("tensor(")
    err = capfd.readouterr().err
    assert "torch.compile runs the model eagerly" in err and "vkblas has no bfloat16: the block runs in float32" in err


def test_distributed_names_exist_and_refuse(torch: Any) -> None:
    from torch.distributed import destroy_process_group, init_process_group
    from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: N817

    assert torch.distributed.is_available() is False and torch.distributed.is_initialized() is False
    with pytest.raises(NotImplementedError, match="torch.distributed.init_process_group is not implemented"):
        init_process_group(backend="nccl")
    with pytest.raises(NotImplementedError, match="destroy_process_group"):
        destroy_process_group()
    with pytest.raises(NotImplementedError, match="DistributedDataParallel is not implemented"):
        DDP(torch.nn.Linear(1, 1))


# ------------------------------------------------------------------------------------------------ save / load
def test_a_state_dict_is_a_safetensors_file_pytorch_reads(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    with installed():
        import torch

        model = torch.nn.Linear(3, 2)
        torch.save(model.state_dict(), tmp_path / "m.pt")
        weight = model.weight.detach().numpy()
    theirs = load_file(str(tmp_path / "m.pt"))  # PyTorch (real, outside the run) reads it
    np.testing.assert_array_equal(theirs["weight"].numpy(), weight)
    with installed():
        import torch

        model2 = torch.nn.Linear(3, 2)
        model2.load_state_dict(torch.load(tmp_path / "m.pt", map_location="cpu", weights_only=True))
        np.testing.assert_array_equal(model2.weight.detach().numpy(), weight)


def test_a_checkpoint_dict_round_trips(torch: Any, tmp_path: Path) -> None:
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    ckpt = {"model": model.state_dict(), "optimizer": opt.state_dict(), "iter_num": 7, "best": torch.tensor(1.5)}
    torch.save(ckpt, str(tmp_path / "ckpt.pt"))
    back = torch.load(str(tmp_path / "ckpt.pt"), map_location="cpu")
    assert back["iter_num"] == 7 and f"{back['best']:.1f}" == "1.5"
    opt2 = torch.optim.AdamW(torch.nn.Linear(3, 2).parameters(), lr=0.1)
    opt2.load_state_dict(back["optimizer"])
    assert opt2.param_groups[0]["lr"] == 0.1 and len(opt2.state) == 2


def test_pytorch_zip_checkpoints_get_a_clear_error(tmp_path: Path) -> None:
    real_torch.save({"w": real_torch.ones(2)}, tmp_path / "real.pt")
    with installed():
        import torch

        with pytest.raises(ValueError, match="written by PyTorch itself .* safetensors.torch.save_file"):
            torch.load(tmp_path / "real.pt")
        with pytest.raises(TypeError, match="map_location must be a device or a device name"):
            torch.load(tmp_path / "real.pt", map_location=lambda s, loc: s)


# ------------------------------------------------------------------------------------------------ autocast
def test_torch_autocast_is_vkblas_float16(torch: Any, capfd: pytest.CaptureFixture[str]) -> None:
    assert torch.autocast is torch.amp.autocast and issubclass(torch.amp.autocast, vkblas.amp.autocast)
    lin = torch.nn.Linear(3, 2)
    with torch.autocast("cpu", dtype=torch.float16):
        y = lin(torch.ones(4, 3))
        loss = torch.nn.functional.cross_entropy(y, torch.tensor([0, 1, 0, 1]))
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") is torch.float16
    assert y.dtype is torch.float16 and loss.dtype is torch.float32
    loss.backward()
    assert lin.weight.grad.dtype is torch.float32
    with torch.autocast("cuda"):  # no Vulkan device stands for CUDA here (default device: cpu)
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype is torch.float32
    assert not torch.amp.is_autocast_available("cuda") and not torch.is_autocast_enabled("cuda")
    assert (
        "torch.autocast('cuda'): no Vulkan device stands for CUDA: the block runs in float32" in capfd.readouterr().err
    )
    with torch.cuda.amp.autocast():
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype is torch.float32


def test_torch_autocast_cuda_is_the_vulkan_device(torch_on_vulkan: Any) -> None:
    torch = torch_on_vulkan
    a = torch.ones(4, 4, device="cuda")
    with torch.autocast(device_type="cuda", dtype=torch.float16):
        assert (a @ a).dtype is torch.float16 and torch.is_autocast_enabled()
    with torch.cuda.amp.autocast():
        assert (a @ a).dtype is torch.float16
    scaler = torch.amp.GradScaler("cuda")
    assert scaler.is_enabled() and scaler.get_scale() == 2.0**16


# ------------------------------------------------------------------------------------------------ GradScaler
def _scaler_run(lib: Any, grads: list[float], **kw: Any) -> tuple[list[float], list[float]]:
    p = lib.zeros(1, requires_grad=True) if lib is real_torch else vkblas.zeros(1, device="cpu", requires_grad=True)
    opt = lib.optim.SGD([p], lr=1.0)
    scaler = lib.amp.GradScaler("cpu", init_scale=8.0, growth_interval=2, **kw)
    scales, values = [], []
    for g in grads:
        loss = (p * g).sum()
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        scales.append(scaler.get_scale())
        values.append(float(p.detach().numpy()[0]))
    return scales, values


def test_grad_scaler_matches_pytorch() -> None:
    grads = [1.0, 2.0, float("inf"), 0.5, float("nan"), 1.0, 1.0, 1.0]
    want = _scaler_run(real_torch, grads)  # scales grow every 2 clean steps, halve and skip on inf / NaN
    with installed():
        import torch

        assert _scaler_run(torch, grads) == want
        assert _scaler_run(torch, grads, enabled=False)[0] == [1.0] * len(grads)


def test_grad_scaler_errors_like_pytorch(torch: Any) -> None:
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([p], lr=1.0)
    scaler = torch.amp.GradScaler("cpu")
    with pytest.raises(AssertionError, match="No inf checks were recorded prior to update"):
        scaler.update()
    scaler.scale(p.sum()).backward()
    scaler.unscale_(opt)
    with pytest.raises(RuntimeError, match="unscale_\\(\\) has already been called on this optimizer"):
        scaler.unscale_(opt)
    scaler.step(opt)
    with pytest.raises(RuntimeError, match="step\\(\\) has already been called since the last update"):
        scaler.step(opt)


# ------------------------------------------------------------------------------------------------ torchvision
def test_torchvision_mnist_without_files_says_where_to_put_them(
    torch: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("VKBLAS_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    from torchvision import datasets

    with pytest.raises(DataError, match=r"vkblas run does not download.*MNIST/raw"):
        datasets.MNIST(str(tmp_path), train=True, download=True)


@needs_mnist
def test_torchvision_mnist_items_and_batches(torch: Any) -> None:
    from torchvision import datasets, transforms

    transform = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))])
    ds = datasets.MNIST(str(DATA), train=False, download=True, transform=transform)
    image, label = ds[0]
    assert isinstance(image, torch.Tensor) and image.shape == (1, 28, 28) and label == 7 and len(ds) == 10000
    raw, _ = datasets.MNIST(str(DATA), train=False)[0]
    assert raw.dtype == np.uint8 and raw.shape == (28, 28)
    x, y = next(iter(torch.utils.data.DataLoader(ds, batch_size=5)))
    np.testing.assert_allclose(x[0].numpy(), image.numpy(), rtol=1e-6)
    assert y.tolist()[0] == 7


# ------------------------------------------------------------------------------------------------ the runner
def _script(tmp_path: Path, body: str) -> Path:
    (tmp_path / "helper.py").write_text("VALUE = 41\n")
    path = tmp_path / "prog.py"
    path.write_text(body)
    return path


def test_runner_gives_python_script_semantics(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    prog = _script(
        tmp_path,
        "import sys, torch\nfrom helper import VALUE\n"
        "print(__name__, sys.argv[1:], VALUE + 1, torch.ones(1).item())\n"
        "sys.exit(int(sys.argv[1]))\n",
    )
    assert run_script(str(prog), ["3", "--flag"], device="cpu") == 3
    assert capfd.readouterr().out == "__main__ ['3', '--flag'] 42 1.0\n"
    assert "torch" not in sys.modules or sys.modules["torch"] is real_torch


def test_runner_reports_the_programs_traceback(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    prog = _script(tmp_path, "import torch\n\ndef f():\n    return torch.stft(torch.ones(2, 2))\n\nf()\n")
    assert run_script(str(prog), device="cpu") == 1
    err = capfd.readouterr().err
    assert 'prog.py", line 4, in f' in err and "torch.stft is not implemented in vkblas yet" in err
    assert "runner.py" not in err
    assert run_script(str(tmp_path / "nope.py")) == 2 and "nope.py: no such file" in capfd.readouterr().err


def test_python_dash_m_vkblas_run_and_the_command(tmp_path: Path) -> None:
    prog = _script(tmp_path, "import torch\nprint(torch.cuda.is_available(), torch.zeros(2).tolist())\n")
    env = {**os.environ, "PYTHONPATH": str(SRC), "VKBLAS_DEVICE": "cpu"}
    for argv in ([sys.executable, "-m", "vkblas.run", str(prog)], [sys.executable, "-m", "vkblas", "run", str(prog)]):
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert done.stdout == "False [0.0, 0.0]\n" and "vkblas run: torch.cuda.is_available() is False" in done.stderr


@requires_vulkan
def test_runner_device_option_sets_the_default_device(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    prog = _script(tmp_path, "import torch\nprint(torch.ones(1).device, torch.cuda.is_available())\n")
    assert run_script(str(prog), device="vulkan") == 0
    assert capfd.readouterr().out == "vulkan:0 True\n"
