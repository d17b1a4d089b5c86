"""Bad inputs raise PyTorch-like errors that name the shapes / dtypes / devices involved, and leave the process (and
the device queue) usable. One table of cases, one generic test."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import vkblas as vb
from conftest import requires_vulkan


@dataclass(frozen=True)
class ErrorCase:
    name: str
    fn: Callable[[str], Any]
    exc: type[BaseException]
    match: str


def f(shape: tuple[int, ...], device: str, requires_grad: bool = False) -> vb.Tensor:
    return vb.ones(*shape, device=device, requires_grad=requires_grad)


def i(data: Any, device: str) -> vb.Tensor:
    return vb.tensor(data, dtype=vb.int32, device=device)


def _backward_twice(d: str) -> None:
    y = (f((2,), d, True) * 2).sum()
    y.backward()
    y.backward()


def _modified_saved(d: str) -> None:
    y = (f((2,), d, True) * 1).sigmoid()
    y.mul_(2.0)
    y.sum().backward()


CASES = [
    # --- shapes
    ErrorCase("broadcast", lambda d: f((3,), d) + f((4,), d), RuntimeError, r"\(3,\).*\(4,\)"),
    ErrorCase("broadcast 2-D", lambda d: f((2, 3), d) * f((3, 2), d), RuntimeError, r"\(2, 3\).*\(3, 2\)"),
    ErrorCase("matmul inner dims", lambda d: f((2, 3), d) @ f((4, 5), d), RuntimeError, r"2x3 and 4x5"),
    ErrorCase("matmul batch dims", lambda d: f((2, 2, 3), d) @ f((3, 3, 1), d), RuntimeError, r"\(2,\).*\(3,\)"),
    ErrorCase("matmul 0-d", lambda d: f((), d) @ f((2,), d), RuntimeError, r"at least 1D.*0D"),
    ErrorCase("reshape", lambda d: f((2, 3), d).reshape(4, 2), RuntimeError, r"\[4, 2\].*size 6"),
    ErrorCase("view of non-contiguous", lambda d: f((2, 3), d).T.view(6), RuntimeError, r"view size.*\(3, 2\)"),
    ErrorCase("expand", lambda d: f((2, 3), d).expand(4, 3), RuntimeError, r"\(4, 3\).*\(2, 3\)"),
    ErrorCase("cat", lambda d: vb.cat([f((2, 3), d), f((2, 4), d)], 0), RuntimeError, r"\(2, 3\).*\(2, 4\)"),
    ErrorCase("stack", lambda d: vb.stack([f((2,), d), f((3,), d)]), RuntimeError, r"\(2,\).*\(3,\)"),
    ErrorCase("split sizes", lambda d: f((5,), d).split([2, 2]), RuntimeError, r"sum exactly to 5"),
    ErrorCase("in-place broadcast", lambda d: f((1, 3), d).add_(f((2, 3), d)), RuntimeError, r"\(1, 3\).*\(2, 3\)"),
    ErrorCase(
        "backward gradient shape",
        lambda d: (f((2,), d, True) * 2).backward(f((3,), d)),
        RuntimeError,
        r"\(3,\).*\(2,\)",
    ),
    ErrorCase("dim out of range", lambda d: f((2, 3), d).sum(dim=2), IndexError, r"range of \[-2, 1\].*got 2"),
    ErrorCase("permute", lambda d: f((2, 3), d).permute(0, 0), RuntimeError, r"permutation.*\(2, 3\)"),
    ErrorCase("max of empty", lambda d: f((0,), d).max(), RuntimeError, r"numel\(\) == 0"),
    ErrorCase("negative size", lambda d: vb.zeros(2, -1, device=d), ValueError, r"\(2, -1\)"),
    # --- dtypes
    ErrorCase("matmul of ints", lambda d: i([[1]], d) @ i([[1]], d), RuntimeError, r"int32"),
    ErrorCase("requires_grad on int", lambda d: i([1, 2], d).requires_grad_(), RuntimeError, r"floating.*int32"),
    ErrorCase("mean of ints", lambda d: i([1, 2], d).mean(), RuntimeError, r"int32"),
    ErrorCase("float index", lambda d: f((3,), d)[vb.tensor([0.0, 1.0], device=d)], IndexError, r"float32"),
    ErrorCase("gather with float index", lambda d: vb.gather(f((3,), d), 0, f((2,), d)), IndexError, r"float32"),
    ErrorCase("one_hot of floats", lambda d: vb.one_hot(f((3,), d), 3), RuntimeError, r"floating"),
    ErrorCase("unknown dtype", lambda d: vb.zeros(2, dtype="complex64", device=d), TypeError, r"complex64"),
    ErrorCase("int overflow", lambda d: vb.tensor([2**40], device=d), OverflowError, r"1099511627776.*int32"),
    ErrorCase("~ on floats", lambda d: ~f((2,), d), TypeError, r"float32"),
    # --- autograd
    ErrorCase("backward without grad", lambda d: f((2,), d).sum().backward(), RuntimeError, r"does not require grad"),
    ErrorCase(
        "in-place on leaf",
        lambda d: f((2,), d, True).add_(1.0),
        RuntimeError,
        r"leaf Variable that requires grad.*add_",
    ),
    ErrorCase("in-place zero_ on leaf", lambda d: f((2,), d, True).zero_(), RuntimeError, r"leaf Variable"),
    ErrorCase("setitem on leaf", lambda d: f((2,), d, True).__setitem__(0, 1.0), RuntimeError, r"autograd"),
    ErrorCase("second backward", _backward_twice, RuntimeError, r"second time.*retain_graph=True"),
    ErrorCase("saved tensor modified", _modified_saved, RuntimeError, r"modified by an inplace operation"),
    ErrorCase("numpy of grad tensor", lambda d: f((2,), d, True).numpy(), RuntimeError, r"detach\(\)"),
    # --- indexing
    ErrorCase(
        "int index", lambda d: f((3, 2), d)[3], IndexError, r"index 3 is out of bounds for dimension 0 with size 3"
    ),
    ErrorCase("negative int index", lambda d: f((3, 2), d)[:, -3], IndexError, r"index -3 .* dimension 1 with size 2"),
    ErrorCase("too many indices", lambda d: f((3,), d)[0, 0], IndexError, r"too many indices.*\(3,\)"),
    ErrorCase("tensor index", lambda d: f((3,), d)[i([0, 5], d)], IndexError, r"index 5 is out of bounds.*size 3"),
    ErrorCase("list index", lambda d: f((3,), d)[[-4]], IndexError, r"index -4 is out of bounds.*size 3"),
    ErrorCase(
        "gather index",
        lambda d: vb.gather(f((2, 3), d), 1, i([[0, 3]], d)),
        IndexError,
        r"index 3 is out of bounds for dimension 1 with size 3",
    ),
    ErrorCase(
        "index_select",
        lambda d: vb.index_select(f((2, 3), d), 0, i([2], d)),
        IndexError,
        r"index 2 is out of bounds for dimension 0 with size 2",
    ),
    ErrorCase(
        "scatter_add index",
        lambda d: vb.scatter_add(f((2,), d), 0, i([2], d), f((1,), d)),
        IndexError,
        r"index 2 is out of bounds",
    ),
    ErrorCase("one_hot class", lambda d: vb.one_hot(i([0, 3], d), 3), IndexError, r"index 3 is out of bounds"),
    ErrorCase("item of many", lambda d: f((2,), d).item(), RuntimeError, r"2 elements"),
    ErrorCase("bad device", lambda d: vb.zeros(2, device="cuda"), ValueError, r"cuda"),
]


def assert_usable(device: str) -> None:
    """After an error the device still computes (its queue is not left broken)."""
    x = vb.tensor([[1.0, 2.0], [3.0, 4.0]], device=device, requires_grad=True)
    y = (x @ x).relu().sum()
    y.backward()
    assert y.item() == 54.0
    np.testing.assert_allclose(x.grad.numpy(), [[7.0, 11.0], [9.0, 13.0]])


def run_and_sync(case: ErrorCase, device: str) -> None:
    """Run the case up to the next sync point: an asynchronous device reports bad indices there, as CUDA does."""
    case.fn(device)
    vb.synchronize(device)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_error(case: ErrorCase, device: str) -> None:
    with pytest.raises(case.exc, match=case.match):
        run_and_sync(case, device)
    assert_usable(device)


def test_error_names_are_unique() -> None:
    assert len({c.name for c in CASES}) == len(CASES)


def test_many_errors_in_a_row_keep_the_device_usable(device: str) -> None:
    for case in CASES:
        with pytest.raises(case.exc):
            run_and_sync(case, device)
    assert_usable(device)


@requires_vulkan
@pytest.mark.parametrize(
    "op",
    [
        lambda a, b: a + b,
        lambda a, b: a @ b,
        lambda a, b: vb.where(a > 0, a, b),
        lambda a, b: vb.cat([a, b]),
        lambda a, b: vb.maximum(a, b),
        lambda a, b: vb.gather(a, 0, vb.tensor([[0, 1], [1, 0]], device="vulkan")),
    ],
    ids=["add", "matmul", "where", "cat", "maximum", "gather"],
)
def test_device_mismatch_names_both_devices(op: Callable[[vb.Tensor, vb.Tensor], Any]) -> None:
    a = vb.ones(2, 2, device="cpu")
    b = vb.ones(2, 2, device="vulkan")
    with pytest.raises(RuntimeError, match=r"same device.*cpu.*vulkan|same device.*vulkan.*cpu|on vulkan.*on cpu"):
        op(a, b)
    assert_usable("vulkan")
    assert_usable("cpu")


@requires_vulkan
def test_backward_gradient_on_other_device() -> None:
    x = vb.ones(2, device="vulkan", requires_grad=True)
    with pytest.raises(RuntimeError, match=r"cpu.*vulkan"):
        (x * 2).backward(vb.ones(2, device="cpu"))
    assert_usable("vulkan")


@requires_vulkan
def test_allocation_beyond_the_device_memory_is_refused_cleanly() -> None:
    with pytest.raises(vb.DeviceOutOfMemoryError, match=r"float32.*bytes"):
        vb.empty(2**42, device="vulkan")
    assert_usable("vulkan")


def test_cpu_allocation_beyond_the_machine_memory_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Refused before numpy is asked: with Linux's ``overcommit_memory=1`` (the H200 machine) ``np.empty`` of 16 TiB
    succeeds, and the survive-errors test's ``empty(2**42) + 1`` then grew host memory by GBs per second."""
    import vkblas.backend.cpu as cpu

    with pytest.raises(vb.DeviceOutOfMemoryError, match=r"cpu: .*float32.*RAM \+ swap"):
        vb.empty(2**42, device="cpu")
    monkeypatch.setattr(cpu, "_MEMORY", 1 << 20)  # a machine of 1 MiB: whatever the kernel's overcommit policy
    vb.zeros(1 << 18, device="cpu")  # exactly 1 MiB fits
    with pytest.raises(MemoryError, match=r"4194304 bytes, more than this machine's 1048576"):
        vb.zeros(1 << 20, device="cpu")
    with pytest.raises(MemoryError):
        vb.tensor(np.zeros(1 << 19), device="cpu")  # uploads go through the same allocation
    monkeypatch.undo()
    assert_usable("cpu")


@requires_vulkan
def test_vulkan_reports_bad_indices_at_the_next_sync_point() -> None:
    x = vb.arange(6.0, device="vulkan").reshape(3, 2)
    picked = x[vb.tensor([0, 7], device="vulkan")]  # recorded: no host round trip here
    assert picked.shape == (2, 2)
    with pytest.raises(IndexError, match="index 7 is out of bounds for dimension 0 with size 3.*device-side"):
        picked.numpy()
    # reported once, and the device keeps working
    assert x.sum().item() == 15.0
    assert_usable("vulkan")


@requires_vulkan
def test_vulkan_cross_entropy_checks_targets_without_a_sync() -> None:
    import vkblas.nn.functional as F

    logits = vb.zeros(4, 3, device="vulkan")
    backend = logits._backend
    reads_before = backend.rt.reads
    loss = F.cross_entropy(logits, vb.tensor([0, 1, 2, 3], device="vulkan"))
    assert backend.rt.reads == reads_before
    with pytest.raises(IndexError, match="target class index 3 is out of range for 3 classes"):
        loss.item()
    assert F.cross_entropy(logits, vb.tensor([0, 1, 2, 2], device="vulkan")).item() == pytest.approx(np.log(3))


@requires_vulkan
def test_vulkan_a_training_loop_of_checked_steps_does_not_sync_every_64_steps() -> None:
    """One target check per step (cross-entropy) filled the 64 flag slots every 64 steps, and the next check then
    read them: a sync that drained the device (~12 % of the eager CNN's speed on an H200). 300 steps run without
    one; the failure of a late check is still reported at the next sync."""
    import vkblas.nn.functional as F

    logits = vb.zeros(4, 3, device="vulkan")
    targets = vb.tensor([0, 1, 2, 2] * 300, device="vulkan")
    backend = logits._backend
    backend.synchronize()
    reads_before = backend.rt.reads
    for i in range(300):
        loss = F.cross_entropy(logits, targets[4 * i : 4 * i + 4])
    assert backend.rt.reads == reads_before
    bad = F.cross_entropy(logits, vb.tensor([0, 3, 1, 1], device="vulkan"))
    with pytest.raises(IndexError, match="target class index 3 is out of range for 3 classes"):
        bad.item()
    assert loss.item() == pytest.approx(np.log(3))
