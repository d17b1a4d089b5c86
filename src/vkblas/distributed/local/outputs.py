"""What a local distributed run leaves behind, in ``vkblas train``'s layout: ``model.safetensors`` (loadable by
``vkblas eval`` and PyTorch), ``metrics.json`` and ``curves.png``. Each epoch's weights are evaluated here, after
training, exactly as ``vkblas train`` evaluates them (same test split, same loop)."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from ... import nn
from ...data import DataLoader
from ...training import checkpoint, report
from ...training.fit import EVAL_BATCH, _epoch_line, load_dataset
from ...training.loop import evaluate
from ...version import __version__
from .config import LocalConfig
from .context import build_model
from .holder import Holder
from .transport import FlatLayout


def load_flat(model: Any, layout: FlatLayout, flat: np.ndarray, device: str) -> Any:
    """Set ``model``'s parameters to the flat vector ``flat``."""
    checkpoint.load_into(model, layout.views(flat), device)
    return model


def history(cfg: LocalConfig, holder: Holder, layout: FlatLayout, show: bool) -> list[dict[str, Any]]:
    """One record per epoch, with the keys ``vkblas train`` writes (and the bytes sent so far)."""
    train = cfg.train
    dev = cfg.eval_device
    model = build_model(cfg).to(dev)
    test = DataLoader(load_dataset(train.dataset, False, train.data, train.limit), EVAL_BATCH, device=dev)
    loss_fn = nn.CrossEntropyLoss()
    out, previous = [], 0.0
    for snap in holder.snapshots:
        te = evaluate(load_flat(model, layout, snap.params, dev), test, loss_fn, desc=f"test {snap.epoch}", show=show)
        sums = holder.epoch_sums.get(snap.epoch - 1)
        seconds = snap.train_seconds - previous
        previous = snap.train_seconds
        out.append(
            {
                "epoch": snap.epoch,
                "lr": holder.lr_at(snap.epoch - 1),
                "train_loss": sums.loss / sums.samples if sums and sums.samples else float("nan"),
                "train_accuracy": sums.correct / sums.samples if sums and sums.samples else float("nan"),
                "test_loss": te.loss,
                "test_accuracy": te.accuracy,
                "train_samples_per_s": holder.n_train / seconds if seconds > 0 else float("nan"),
                "eval_samples_per_s": te.samples_per_s,
                "epoch_seconds": seconds,
                "train_seconds_total": snap.train_seconds,
                "bytes_sent_total": snap.bytes_sent,
                "workers_alive": snap.workers_alive,
            }
        )
        tqdm.write(f"{_epoch_line(out[-1], train.epochs)} | {snap.workers_alive} worker(s)")
    return out


def write(
    cfg: LocalConfig,
    holder: Holder,
    layout: FlatLayout,
    final: np.ndarray,
    train_seconds: float,
    run: dict[str, Any],
) -> dict[str, Any]:
    """Evaluate, then write the three files into ``cfg.train.out``; return the metrics."""
    train = cfg.train
    out = Path(train.out)
    out.mkdir(parents=True, exist_ok=True)
    records = history(cfg, holder, layout, train.progress)
    last = records[-1]
    info = {
        "config": dataclasses.asdict(train),
        "distributed": cfg.to_dict(),
        "device": ",".join(cfg.workers),
        "vkblas": __version__,
        "test_accuracy": last["test_accuracy"],
        "test_loss": last["test_loss"],
        "test_samples": len(load_dataset(train.dataset, False, train.data, train.limit)),
    }
    model = load_flat(build_model(cfg).to("cpu"), layout, final, "cpu")
    checkpoint.save(model, out / "model.safetensors", info)
    metrics = {
        **info,
        "epochs": records,
        "train_seconds": train_seconds,
        "samples_per_s": holder.processed / train_seconds if train_seconds > 0 else float("nan"),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "run": run,
    }
    report.write_metrics(out / "metrics.json", metrics)
    title = f"{train.model.upper()} on {train.dataset} ({cfg.algorithm}, {len(cfg.workers)} workers)"
    report.plot_curves(out / "curves.png", records, title)
    return metrics
