"""A whole training run as ``vkblas train`` does it: data, model, optimizer, epochs, checkpoint, metrics, plot."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from ..data import MNIST, DataLoader, FashionMNIST, Subset
from ..data.dataset import Dataset
from ..data.datasets import IDXImageDataset, find, not_found
from ..data.transforms import Compose, Normalize, ToTensor
from ..device import device as Device
from ..random import manual_seed
from ..version import __version__
from . import checkpoint, models, report
from .loop import GraphedStep, PassResult, evaluate, train_epoch

DATASETS: dict[str, type[IDXImageDataset]] = {"mnist": MNIST, "fashion-mnist": FashionMNIST}
OPTIMIZERS = ("adam", "adamw", "sgd")
DEFAULT_LR = {"adam": 1e-3, "adamw": 1e-3, "sgd": 0.05}
EVAL_BATCH = 1000


@dataclass
class TrainConfig:
    """Everything that defines a run; stored in the checkpoint and in ``metrics.json``."""

    dataset: str = "mnist"
    model: str = "mlp"
    epochs: int = 10
    batch_size: int = 128
    lr: float | None = None  # None: the optimizer's default (DEFAULT_LR)
    optimizer: str = "adam"
    device: str | None = None  # None: vkblas's default device
    seed: int = 0
    out: str = "runs/mnist-mlp"
    limit: int | None = None  # use only the first N images of each split
    data: str | None = None  # a directory searched before $VKBLAS_DATA and the cache; fit() records where it found it
    download: bool = False  # fetch missing dataset files (network access)
    progress: bool = True
    graph: bool = True  # capture the training step as a graph on Vulkan devices (vkblas.graphs)

    def __post_init__(self) -> None:
        if self.dataset not in DATASETS:
            raise ValueError(f"unknown dataset {self.dataset!r}: choose from {', '.join(DATASETS)}")
        if self.model not in models.MODELS:
            raise ValueError(f"unknown model {self.model!r}: choose from {', '.join(models.MODELS)}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"unknown optimizer {self.optimizer!r}: choose from {', '.join(OPTIMIZERS)}")
        for name in ("epochs", "batch_size", "limit"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value}")
        if self.lr is not None and not self.lr > 0:
            raise ValueError(f"lr must be positive, got {self.lr}")

    @property
    def learning_rate(self) -> float:
        return self.lr if self.lr is not None else DEFAULT_LR[self.optimizer]


def load_dataset(
    name: str, train: bool, data: str | None = None, limit: int | None = None, download: bool = False
) -> Dataset:
    """A split of ``mnist`` / ``fashion-mnist``, normalised with the dataset's mean and std, cut to ``limit``.
    Missing files are fetched with ``download`` (``vkblas train --download``), else the error says how."""
    cls = DATASETS[name]
    if not download and find(cls.source, data) is None:
        raise not_found(cls.source, data, download_hint="or run again with --download (needs network access)")
    transform = Compose([ToTensor(), Normalize((cls.source.mean,), (cls.source.std,))])
    ds = cls(data, train=train, transform=transform, download=download)
    return Subset(ds, range(min(limit, len(ds)))) if limit is not None else ds


def make_loaders(
    dataset: str,
    batch_size: int,
    seed: int,
    device: str | None,
    data: str | None = None,
    limit: int | None = None,
    convert: Callable[[Any], Any] | None = None,
    download: bool = False,
) -> tuple[DataLoader, DataLoader]:
    """(shuffled training loader, test loader); the same ``seed`` gives the same batches, whatever ``convert``."""
    train_ds = load_dataset(dataset, True, data, limit, download)
    train = DataLoader(train_ds, batch_size, shuffle=True, seed=seed, device=device, convert=convert)
    test_ds = load_dataset(dataset, False, data, limit, download)
    test = DataLoader(test_ds, max(batch_size, EVAL_BATCH), device=device, convert=convert)
    return train, test


def data_directory(ds: Dataset) -> str | None:
    """The folder a dataset's files were read from (through a Subset), as an absolute path."""
    while not hasattr(ds, "directory") and hasattr(ds, "dataset"):
        ds = ds.dataset
    directory = getattr(ds, "directory", None)
    return None if directory is None else str(Path(directory).resolve())


def make_optimizer(name: str, params: Any, lr: float, optim: Any = None, capturable: bool = False) -> Any:
    """``name`` (sgd with momentum 0.9, adam, adamw with weight decay 0.01) from ``optim`` (default vkblas.optim);
    ``capturable``: for a graph-captured step (vkblas only)."""
    if optim is None:
        from .. import optim
    kw = {"capturable": True} if capturable else {}
    if name == "sgd":
        return optim.SGD(params, lr=lr, momentum=0.9, **kw)
    if name == "adamw":
        return optim.AdamW(params, lr=lr, weight_decay=0.01, **kw)
    if name == "adam":
        return optim.Adam(params, lr=lr, **kw)
    raise ValueError(f"unknown optimizer {name!r}: choose from {', '.join(OPTIMIZERS)}")


def cosine_lr(base: float, epoch: int, epochs: int) -> float:
    """The learning rate of ``epoch`` (0-based) under cosine decay from ``base`` towards 0."""
    return base * 0.5 * (1 + math.cos(math.pi * epoch / epochs))


def resolve_device(name: str | None) -> str:
    from ..backend import default_device_name

    return str(Device(name if name is not None else default_device_name()[0]))


EpochCallback = Callable[[dict[str, Any]], None]


def fit(cfg: TrainConfig, on_epoch: EpochCallback | None = None) -> dict[str, Any]:
    """Train as configured, evaluating on the test set after every epoch; write the checkpoint
    (``model.safetensors``), ``metrics.json`` and ``curves.png`` into ``cfg.out``; return the metrics."""
    from .. import nn

    dev = resolve_device(cfg.device)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    train_loader, test_loader = make_loaders(
        cfg.dataset, cfg.batch_size, cfg.seed, dev, cfg.data, cfg.limit, download=cfg.download
    )
    # recorded in the checkpoint, so `vkblas eval` finds the data wherever this run found it ($VKBLAS_DATA ...)
    cfg = dataclasses.replace(cfg, data=data_directory(test_loader.dataset) or cfg.data)

    manual_seed(cfg.seed)
    model = models.build(cfg.model).to(dev)
    graph = cfg.graph and GraphedStep.supported(model)
    optimizer = make_optimizer(cfg.optimizer, model.parameters(), cfg.learning_rate, capturable=graph)
    loss_fn = nn.CrossEntropyLoss()

    history: list[dict[str, Any]] = []
    for record in run_epochs(
        model,
        optimizer,
        loss_fn,
        train_loader,
        test_loader,
        cfg.epochs,
        cfg.learning_rate,
        show=cfg.progress,
        graph=graph,
    ):
        history.append(record)
        tqdm.write(_epoch_line(record, cfg.epochs))  # with or without bars: one line per epoch on stdout
        if on_epoch is not None:
            on_epoch(record)
    train_seconds = history[-1]["train_seconds_total"]

    info = {
        "config": dataclasses.asdict(cfg),
        "device": dev,
        "vkblas": __version__,
        "test_accuracy": history[-1]["test_accuracy"],
        "test_loss": history[-1]["test_loss"],
        "test_samples": len(test_loader.dataset),
    }
    checkpoint.save(model, out / "model.safetensors", info)
    metrics = {**info, "epochs": history, "train_seconds": train_seconds, "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    report.write_metrics(out / "metrics.json", metrics)
    report.plot_curves(out / "curves.png", history, f"{cfg.model.upper()} on {cfg.dataset} ({dev})")
    return metrics


def run_epochs(
    model: Any,
    optimizer: Any,
    loss_fn: Any,
    train_loader: Any,
    test_loader: Any,
    epochs: int,
    lr: float,
    show: bool = True,
    no_grad: Callable[[], Any] | None = None,
    graph: bool = False,
) -> Iterator[dict[str, Any]]:
    """Train for ``epochs`` with a cosine-decayed learning rate, evaluating after each; yield one record per epoch.

    Framework-neutral: the PyTorch side of the benchmark runs the very same loop on torch objects. ``graph``
    (vkblas on Vulkan, optimizer built with ``capturable=True``): run the training steps as a captured graph."""
    train_seconds = 0.0
    graphed = GraphedStep(model, optimizer, loss_fn) if graph else None
    for epoch in range(epochs):
        epoch_lr = cosine_lr(lr, epoch, epochs)
        for group in optimizer.param_groups:
            group["lr"] = epoch_lr
        desc = f"epoch {epoch + 1}/{epochs}"
        tr = train_epoch(model, train_loader, optimizer, loss_fn, desc=desc, show=show, graphed=graphed)
        te = evaluate(model, test_loader, loss_fn, desc="test", show=show, no_grad=no_grad)
        train_seconds += tr.seconds
        yield _epoch_record(epoch + 1, epoch_lr, tr, te, train_seconds)


def _epoch_record(epoch: int, lr: float, tr: PassResult, te: PassResult, train_seconds: float) -> dict[str, Any]:
    return {
        "epoch": epoch,
        "lr": lr,
        "train_loss": tr.loss,
        "train_accuracy": tr.accuracy,
        "test_loss": te.loss,
        "test_accuracy": te.accuracy,
        "train_samples_per_s": tr.samples_per_s,
        "eval_samples_per_s": te.samples_per_s,
        "epoch_seconds": tr.seconds + te.seconds,
        "train_seconds_total": train_seconds,
    }


def _epoch_line(h: dict[str, Any], epochs: int) -> str:
    return (
        f"epoch {h['epoch']}/{epochs}: train loss {h['train_loss']:.4f} acc {100 * h['train_accuracy']:.2f}% | "
        f"test loss {h['test_loss']:.4f} acc {100 * h['test_accuracy']:.2f}% | "
        f"{h['train_samples_per_s']:,.0f} samples/s | {h['epoch_seconds']:.1f} s"
    )


def evaluate_checkpoint(
    path: str,
    device: str | None = None,
    data: str | None = None,
    limit: int | None = None,
    batch_size: int = EVAL_BATCH,
    progress: bool = True,
    download: bool = False,
) -> tuple[PassResult, dict[str, Any]]:
    """Rebuild the model saved at ``path`` and evaluate it on its dataset's test split (the same images it was
    evaluated on in training unless ``limit`` says otherwise). Returns (result, the checkpoint's info)."""
    from .. import nn

    dev = resolve_device(device)
    state, info = checkpoint.load(path, dev)
    cfg = info["config"]
    test_ds = load_dataset(
        cfg["dataset"],
        False,
        data if data is not None else cfg.get("data"),
        limit if limit is not None else cfg.get("limit"),
        download,
    )
    model = models.build(cfg["model"]).to(dev)
    model.load_state_dict(state)
    loader = DataLoader(test_ds, batch_size, device=dev)
    return evaluate(model, loader, nn.CrossEntropyLoss(), desc="eval", show=progress), info
