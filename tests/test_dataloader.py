"""vkblas.data against torch.utils.data: collation, samplers, Subset / ConcatDataset / random_split, and the
DataLoader with samplers, batch samplers, collate functions, iterable datasets and worker processes."""

from __future__ import annotations

import collections
import threading
import time
from typing import Any

import numpy as np
import pytest

import vkblas
from dataset_helpers import Broken, CountingStream, RandomItems, Squares, WhoAmI, keep_order, shifted_init
from vkblas import data

torch = pytest.importorskip("torch")
tud = torch.utils.data

Point = collections.namedtuple("Point", "x label")


# ------------------------------------------------------------------------------------------------ helpers
def plain(obj: Any) -> Any:
    """A comparable picture of a batch: tensors as (kind, numpy values), containers with their types."""
    if isinstance(obj, (vkblas.Tensor, torch.Tensor)):
        values = obj.detach().numpy() if isinstance(obj, torch.Tensor) else obj.numpy()
        return ("tensor", values.dtype.kind, values.tolist())
    if isinstance(obj, dict):
        return ("dict", {k: plain(v) for k, v in obj.items()})
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return (type(obj).__name__, [plain(v) for v in obj])
    if isinstance(obj, (list, tuple)):
        return (type(obj).__name__, [plain(v) for v in obj])
    if isinstance(obj, np.ndarray):
        return ("ndarray", obj.dtype.str, obj.tolist())
    return obj


def same(ours: Any, theirs: Any) -> None:
    assert plain(ours) == plain(theirs)


class Counting(CountingStream, vkblas.data.IterableDataset):
    pass


class TorchCounting(CountingStream, tud.IterableDataset):
    pass


# ------------------------------------------------------------------------------------------------ collation
SAMPLES = {
    "arrays and ints": [(np.ones(2, np.float32), 1), (np.zeros(2, np.float32), 0)],
    "floats and bools": [(1.5, True), (2.5, False)],
    "dicts with strings": [{"a": np.arange(3), "s": "x"}, {"a": np.arange(3) + 1, "s": "y"}],
    "namedtuples": [Point(np.float32(1.0), 3), Point(np.float32(2.0), 4)],
    "nested lists": [[np.array([1]), [2, 3]], [np.array([4]), [5, 6]]],
    "numpy scalars": [np.int64(3), np.int64(4)],
}


@pytest.mark.parametrize("name", list(SAMPLES))
def test_default_collate_matches_pytorch(name: str) -> None:
    ours, theirs = data.default_collate(SAMPLES[name]), tud.default_collate(SAMPLES[name])
    # vkblas keeps no float64/int64 on devices: compare kinds (float / int / bool) and values
    assert plain(ours) == plain(theirs) or _kinds_only(plain(ours)) == _kinds_only(plain(theirs))


def _kinds_only(p: Any) -> Any:
    if isinstance(p, tuple) and p and p[0] == "tensor":
        return ("tensor", {"u": "i"}.get(p[1], p[1]), np.asarray(p[2], dtype=float).round(6).tolist())
    if isinstance(p, tuple):
        return tuple(_kinds_only(v) for v in p)
    if isinstance(p, list):
        return [_kinds_only(v) for v in p]
    if isinstance(p, dict):
        return {k: _kinds_only(v) for k, v in p.items()}
    return p


def test_default_convert_matches_pytorch() -> None:
    sample = {"x": np.arange(3), "t": (np.float32(2.0), "s"), "n": 4}
    assert _kinds_only(plain(data.default_convert(sample))) == _kinds_only(plain(tud.default_convert(sample)))


@pytest.mark.parametrize(
    ("batch", "error", "message"),
    [
        ([np.zeros(2), np.zeros(3)], RuntimeError, "stack expects each tensor to be equal size"),
        ([[1, 2], [3]], RuntimeError, "each element in list of batch should be of equal size"),
        ([np.array(["a"]), np.array(["b"])], TypeError, "default_collate: batch must contain tensors"),
        ([object(), object()], TypeError, "default_collate: batch must contain tensors"),
    ],
)
def test_collate_errors_like_pytorch(batch: list[Any], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        tud.default_collate(batch)
    with pytest.raises(error, match=message):
        data.default_collate(batch)


def test_collate_stacks_tensor_samples() -> None:
    batch = data.default_collate([vkblas.ones(2, device="cpu"), vkblas.zeros(2, device="cpu")])
    assert batch.shape == (2, 2) and batch.tolist() == [[1.0, 1.0], [0.0, 0.0]]


# ------------------------------------------------------------------------------------------------ samplers
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("n", [0, 1, 7, 8])
def test_sequential_and_batch_samplers_match_pytorch(n: int, drop_last: bool) -> None:
    ours = data.BatchSampler(data.SequentialSampler(range(n)), 4, drop_last)
    theirs = tud.BatchSampler(tud.SequentialSampler(range(n)), 4, drop_last)
    assert list(ours) == list(theirs) and len(ours) == len(theirs)


@pytest.mark.parametrize(
    ("kw", "length"), [({}, 10), ({"num_samples": 25}, 25), ({"replacement": True, "num_samples": 30}, 30)]
)
def test_random_sampler_rules(kw: dict[str, Any], length: int) -> None:
    g = vkblas.Generator().manual_seed(5)
    ours = data.RandomSampler(range(10), generator=g, **kw)
    assert len(ours) == len(tud.RandomSampler(range(10), **kw)) == length
    first, second = list(ours), list(ours)
    assert len(first) == length and first != second and all(0 <= i < 10 for i in first)
    if not kw.get("replacement"):  # whole permutations, then part of one
        assert sorted(first[:10]) == list(range(10)) and len(set(first[20:])) == len(first[20:])
    g.manual_seed(5)
    assert list(ours) == first  # reseeding the generator replays the order


def test_random_sampler_follows_manual_seed_and_seed_argument() -> None:
    vkblas.manual_seed(3)
    a = list(data.RandomSampler(range(20)))
    vkblas.manual_seed(3)
    assert list(data.RandomSampler(range(20))) == a
    fixed, twin = data.RandomSampler(range(20), seed=1), data.RandomSampler(range(20), seed=1)
    epochs = [list(fixed), list(fixed)]
    assert epochs[0] != epochs[1]  # one numpy generator seeded once: a new order each pass ...
    assert [list(twin), list(twin)] == epochs  # ... and the same sequence of orders for the same seed
    assert sorted(data.SubsetRandomSampler([3, 5, 9], seed=0)) == [3, 5, 9]


def test_random_orders_are_drawn_when_a_pass_starts() -> None:
    """On the thread that starts the pass (the loader's prefetch thread must not draw from the generator)."""
    g = vkblas.Generator().manual_seed(0)
    batches = data.BatchSampler(data.RandomSampler(range(5), generator=g), 2, drop_last=False)
    it = iter(batches)
    assert g.get_state() == (0, 1)
    assert sorted(sum(it, [])) == [0, 1, 2, 3, 4]
    iter(data.SubsetRandomSampler([1, 2], generator=g))
    assert g.get_state() == (0, 2)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda m: m.RandomSampler(range(3), replacement=1), "replacement should be a boolean value"),
        (lambda m: m.RandomSampler(range(3), num_samples=0), "num_samples should be a positive integer value"),
        (lambda m: m.BatchSampler(range(3), 0, False), "batch_size should be a positive integer value"),
        (lambda m: m.BatchSampler(range(3), 2, 1), "drop_last should be a boolean value"),
    ],
)
def test_sampler_errors_like_pytorch(make: Any, message: str) -> None:
    with pytest.raises((TypeError, ValueError), match=message):
        make(tud)
    with pytest.raises((TypeError, ValueError), match=message):
        make(data)


# ------------------------------------------------------------------------------------------------ datasets
def test_subset_and_concat_match_pytorch() -> None:
    a, b = Squares(3), Squares(5)
    for i in (0, 2, 3, 7, -1, -8):
        same(data.ConcatDataset([a, b])[i], tud.ConcatDataset([a, b])[i])
    assert len(data.ConcatDataset([a, b])) == 8 and data.ConcatDataset([a, b]).cumulative_sizes == [3, 8]
    with pytest.raises(ValueError, match="absolute value of index should not exceed dataset length"):
        data.ConcatDataset([a, b])[-9]
    same(data.Subset(b, [4, 1])[0], tud.Subset(b, [4, 1])[0])
    assert len(data.Subset(b, [4, 1])) == 2
    with pytest.raises(ValueError, match="datasets should not be an empty iterable"):
        data.ConcatDataset([])
    with pytest.raises(TypeError, match="ConcatDataset does not support IterableDataset"):
        data.ConcatDataset([Counting(0, 2)])


def test_concat_of_vectorised_datasets_keeps_the_fast_path_and_the_order() -> None:
    x = data.TensorDataset(np.arange(4.0), np.arange(4))
    y = data.TensorDataset(np.arange(10.0, 13.0), np.arange(10, 13))
    both = x + y
    assert data.dataset.vectorised(both)
    xs, ys = both.get_batch(np.array([5, 0, 6, 3, 4]))
    assert xs.tolist() == [11.0, 0.0, 12.0, 3.0, 10.0] and ys.tolist() == [11, 0, 12, 3, 10]


@pytest.mark.parametrize("lengths", [[3, 7], [0.3, 0.7], [0.25, 0.25, 0.5], [0.34, 0.33, 0.33]])
def test_random_split_lengths_match_pytorch(lengths: list[Any]) -> None:
    ours = data.random_split(Squares(10), lengths, generator=vkblas.Generator().manual_seed(0))
    theirs = tud.random_split(Squares(10), lengths, generator=torch.Generator().manual_seed(0))
    assert [len(s) for s in ours] == [len(s) for s in theirs]
    seen = sorted(i for s in ours for i in s.indices)
    assert seen == list(range(10))


def test_random_split_errors() -> None:
    with pytest.raises(ValueError, match="Sum of input lengths does not equal the length of the input dataset"):
        data.random_split(Squares(10), [3, 3])
    with pytest.raises(ValueError, match="Fraction at index 0 is not between 0 and 1"):
        data.random_split(Squares(10), [1.5, -0.5])


# ------------------------------------------------------------------------------------------------ the loader
LOADERS = {
    "batch_size": dict(batch_size=3),
    "drop_last": dict(batch_size=3, drop_last=True),
    "sampler": dict(batch_size=2, sampler=[5, 1, 4]),
    "batch_sampler": dict(batch_sampler=[[0, 1], [6], [3, 2, 5]]),
    "collate_fn": dict(batch_size=4, collate_fn=keep_order),
    "no auto-batching": dict(batch_size=None),
}


@pytest.mark.parametrize("name", list(LOADERS))
def test_loader_over_a_plain_object_matches_pytorch(name: str) -> None:
    ds = Squares(7)
    ours = data.DataLoader(ds, device="cpu", **LOADERS[name])
    theirs = tud.DataLoader(ds, **LOADERS[name])
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs, strict=True):
        assert _kinds_only(plain(a)) == _kinds_only(plain(b))


def test_loader_batches_are_lists_like_pytorch() -> None:
    batch = next(iter(data.DataLoader(data.TensorDataset(np.arange(4.0)), batch_size=2, device="cpu")))
    assert isinstance(batch, list) and len(batch) == 1 and batch[0].tolist() == [0.0, 1.0]


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("num_workers", [0, 2])
def test_iterable_dataset_matches_pytorch(num_workers: int, drop_last: bool) -> None:
    kw = dict(batch_size=3, drop_last=drop_last, num_workers=num_workers)
    ours = [b.tolist() for b in data.DataLoader(Counting(0, 11), device="cpu", **kw)]
    theirs = [b.tolist() for b in tud.DataLoader(TorchCounting(0, 11), **kw)]
    assert ours == theirs
    assert len(data.DataLoader(Counting(0, 11), **kw)) == len(tud.DataLoader(Counting(0, 11), **kw))


def test_workers_give_the_same_batches_in_order() -> None:
    ds = Squares(23)
    one = [plain(b) for b in data.DataLoader(ds, batch_size=4, device="cpu")]
    many = data.DataLoader(ds, batch_size=4, num_workers=2, prefetch_factor=3, device="cpu")
    assert [plain(b) for b in many] == one


def test_persistent_workers_serve_every_epoch_and_know_who_they_are() -> None:
    loader = data.DataLoader(WhoAmI(), batch_size=2, num_workers=2, persistent_workers=True, device="cpu")
    epochs = [[b[1].tolist() + b[2].tolist() for b in loader] for _ in range(2)]
    pids = {tuple(tuple(e[2:]) for e in epoch) for epoch in epochs}
    assert len(pids) == 1  # the same two processes both times
    assert [e[:2] for e in epochs[0]] == [[0, 0], [1, 1], [0, 0], [1, 1]]  # round-robin, in order
    fresh = data.DataLoader(WhoAmI(), batch_size=4, num_workers=1, device="cpu")
    assert {tuple(b[2].tolist()) for b in fresh} != {tuple(b[2].tolist()) for b in fresh}  # new workers per epoch


def test_worker_seeds_and_init_fn() -> None:
    loader = data.DataLoader(RandomItems(), batch_size=2, num_workers=2, worker_init_fn=shifted_init, device="cpu")
    got = [b.tolist() for b in loader]
    np.random.seed(1000)
    first = [np.random.random(), np.random.random()]
    np.testing.assert_allclose(got[0], first, rtol=1e-6)  # float32 on the way back


def test_worker_errors_reach_the_caller() -> None:
    loader = data.DataLoader(Broken(8), batch_size=2, num_workers=2, device="cpu")
    with pytest.raises(ValueError, match="Caught ValueError in DataLoader worker process 1") as info:
        list(loader)
    assert "item 3 is broken" in str(info.value) and "Original Traceback" in str(info.value)


def test_unpicklable_dataset_is_a_clear_error() -> None:
    ds = data.TensorDataset(np.zeros(4))
    ds.lock = threading.Lock()  # type: ignore[attr-defined]
    with pytest.raises(RuntimeError, match="cannot be sent to a worker process"):
        list(data.DataLoader(ds, num_workers=1))


def test_pin_memory_and_timeout_are_accepted() -> None:
    loader = data.DataLoader(Squares(4), batch_size=2, pin_memory=True, num_workers=1, timeout=30, device="cpu")
    assert len(list(loader)) == 2


@pytest.mark.parametrize(
    "kw",
    [
        dict(num_workers=-1),
        dict(timeout=-1),
        dict(prefetch_factor=2),
        dict(persistent_workers=True),
        dict(shuffle=True, sampler=[0]),
        dict(batch_sampler=[[0]], batch_size=2),
        dict(batch_sampler=[[0]], drop_last=True),
        dict(batch_size=None, drop_last=True),
    ],
)
def test_bad_loader_arguments_like_pytorch(kw: dict[str, Any]) -> None:
    with pytest.raises(ValueError) as theirs:
        tud.DataLoader(Squares(3), **kw)
    with pytest.raises(ValueError) as ours:
        data.DataLoader(Squares(3), **kw)
    assert str(ours.value) == str(theirs.value)


def test_iterable_dataset_refuses_shuffle_like_pytorch() -> None:
    for kw in (dict(shuffle=True), dict(sampler=[0])):
        with pytest.raises(ValueError) as theirs:
            tud.DataLoader(TorchCounting(0, 3), **kw)
        with pytest.raises(ValueError) as ours:
            data.DataLoader(Counting(0, 3), **kw)
        assert str(ours.value).split(", but")[0] == str(theirs.value).split(", but")[0]


def test_shuffled_loader_with_generator_and_workers_covers_everything() -> None:
    g = vkblas.Generator().manual_seed(2)
    loader = data.DataLoader(Squares(10), batch_size=3, shuffle=True, generator=g, num_workers=2, device="cpu")
    first = sum((b[1].tolist() for b in loader), [])
    assert sorted(first) == sorted(i * i for i in range(10))
    g.manual_seed(2)
    assert sum((b[1].tolist() for b in loader), []) == first


def test_worker_startup_is_bounded() -> None:
    start = time.perf_counter()
    list(data.DataLoader(Squares(2), num_workers=1))
    assert time.perf_counter() - start < 60
