"""What a training run leaves behind besides the checkpoint: ``metrics.json`` and a PNG of the curves."""

from __future__ import annotations

import json
import os
from typing import Any


def write_metrics(path: str | os.PathLike[str], metrics: dict[str, Any]) -> None:
    with open(path, "w") as f:
        json.dump(metrics, f, indent=2)
        f.write("\n")


def plot_curves(path: str | os.PathLike[str], history: list[dict[str, Any]], title: str) -> None:
    """Loss and accuracy per epoch, train and test, side by side (matplotlib's Agg canvas; no display needed)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    epochs = [h["epoch"] for h in history]
    fig = Figure(figsize=(10, 4), layout="constrained")
    FigureCanvasAgg(fig)
    loss_ax, acc_ax = fig.subplots(1, 2)
    for split in ("train", "test"):
        loss_ax.plot(epochs, [h[f"{split}_loss"] for h in history], marker="o", label=split)
        acc_ax.plot(epochs, [100 * h[f"{split}_accuracy"] for h in history], marker="o", label=split)
    loss_ax.set(xlabel="epoch", ylabel="cross-entropy loss", title="loss")
    acc_ax.set(xlabel="epoch", ylabel="accuracy (%)", title="accuracy")
    for ax in (loss_ax, acc_ax):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    fig.savefig(path, dpi=100)


def plot_losses(path: str | os.PathLike[str], history: list[dict[str, Any]], title: str) -> None:
    """Training and validation loss against the iteration (a language model's curves)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 4), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    iters = [h["iter"] for h in history]
    for split in ("train", "val"):
        ax.plot(iters, [h[f"{split}_loss"] for h in history], marker="o", label=split)
    ax.set(xlabel="iteration", ylabel="cross-entropy loss", title=title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.savefig(path, dpi=100)
