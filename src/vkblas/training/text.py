"""Training a character-level GPT as ``vkblas train shakespeare-char --model gpt`` does, the way nanoGPT's
``train.py`` does with its ``shakespeare_char`` config: random blocks of the training split, AdamW with weight decay
on the matrices, a linear warm-up then a cosine decay of the learning rate, gradient clipping, and an estimate of
the training and validation loss every ``eval_interval`` iterations (``eval_iters`` batches of each split; the same
batches at every evaluation, so the curves compare like with like). Writes the checkpoint (``model.safetensors``,
with the model configuration and the vocabulary in its metadata), ``metrics.json`` and ``curves.png``. As nanoGPT's
shakespeare_char config (``always_save_checkpoint = False``: the model overfits this small corpus), the checkpoint
holds the weights of the evaluation with the lowest validation loss (``save="best"``, the default), written at that
evaluation; ``save="last"`` keeps the weights the run ends with.

On a Vulkan device the training step runs as a captured graph (``vkblas.graphs``) after one eager warm-up step.

``amp="float16"`` (``--amp float16``) is fp16 mixed precision: the forward passes (training and the loss estimates)
run under ``vkblas.amp.autocast`` (matrix products and attention in float16, layer norms, softmax and the loss in
float32; see ``vkblas/amp.py``), the loss is scaled by a ``vkblas.amp.GradScaler`` (steps whose gradients overflow
are skipped, the scale adapts), and weights, gradients and AdamW state stay float32. Those steps run eagerly, not
as a captured graph: the scaler reads on the host whether the gradients are finite, once a step.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from .. import amp as _amp
from .. import graphs
from ..autograd import no_grad
from ..data import DataLoader, RandomSampler
from ..data.text import ShakespeareChar, TextBlocks
from ..models import GPT, GPTConfig
from ..nn.utils import clip_grad_norm_
from ..random import manual_seed
from ..tensor import Tensor
from ..version import __version__
from . import checkpoint, report
from .fit import resolve_device

TEXT_DATASETS = {"shakespeare-char": ShakespeareChar}
TEXT_MODELS = ("gpt",)
AMP_DTYPES = ("float16",)
PRECISION = {None: "float32", "float16": "fp16 mixed precision"}
SAVE_MODES = ("best", "last")


@dataclass
class TextTrainConfig:
    """A GPT training run; the defaults are nanoGPT's ``config/train_shakespeare_char.py``."""

    dataset: str = "shakespeare-char"
    model: str = "gpt"
    n_layer: int = 6
    n_head: int = 6
    n_embd: int = 384
    block_size: int = 256
    dropout: float = 0.2
    bias: bool = False
    batch_size: int = 64
    iters: int = 5000
    lr: float = 1e-3
    min_lr: float = 1e-4
    warmup_iters: int = 100
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.99
    grad_clip: float = 1.0  # 0: no clipping
    eval_interval: int = 250
    eval_iters: int = 200
    device: str | None = None
    seed: int = 1337
    out: str = "runs/shakespeare-char-gpt"
    data: str | None = None
    progress: bool = True
    graph: bool = True
    amp: str | None = None  # "float16": fp16 mixed precision (autocast + GradScaler); None: float32
    save: str = "best"  # the checkpoint: the weights of the lowest validation loss, or "last": the final ones

    def __post_init__(self) -> None:
        if self.save not in SAVE_MODES:
            raise ValueError(f"save must be one of {', '.join(SAVE_MODES)}, got {self.save!r}")
        if self.amp is not None and self.amp not in AMP_DTYPES:
            raise ValueError(f"amp must be one of {', '.join(AMP_DTYPES)} or None (float32), got {self.amp!r}")
        if self.dataset not in TEXT_DATASETS:
            raise ValueError(f"unknown text dataset {self.dataset!r}: choose from {', '.join(TEXT_DATASETS)}")
        if self.model not in TEXT_MODELS:
            raise ValueError(f"{self.dataset} trains a {' or '.join(TEXT_MODELS)}, not {self.model!r}")
        for name in ("batch_size", "iters", "eval_interval", "eval_iters"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)}")
        if not 0 < self.min_lr <= self.lr:
            raise ValueError(f"expected 0 < min_lr <= lr, got min_lr={self.min_lr}, lr={self.lr}")
        self.gpt_config()  # checks the model's shape

    def gpt_config(self, vocab_size: int = 1) -> GPTConfig:
        return GPTConfig(
            block_size=self.block_size,
            vocab_size=vocab_size,
            n_layer=self.n_layer,
            n_head=self.n_head,
            n_embd=self.n_embd,
            dropout=self.dropout,
            bias=self.bias,
        )


def learning_rate(it: int, cfg: TextTrainConfig) -> float:
    """nanoGPT's schedule: linear warm-up over ``warmup_iters``, then a cosine from ``lr`` to ``min_lr`` at the
    last iteration."""
    if it < cfg.warmup_iters:
        return cfg.lr * (it + 1) / (cfg.warmup_iters + 1)
    if it >= cfg.iters:
        return cfg.min_lr
    ratio = (it - cfg.warmup_iters) / max(1, cfg.iters - cfg.warmup_iters)
    return cfg.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (cfg.lr - cfg.min_lr)


def random_batches(blocks: TextBlocks, batch_size: int, count: int, seed: int, device: str) -> DataLoader:
    """``count`` batches of blocks drawn at random with replacement (nanoGPT's ``get_batch``), seeded."""
    sampler = RandomSampler(blocks, replacement=True, num_samples=batch_size * count, seed=seed)
    return DataLoader(blocks, batch_size, sampler=sampler, device=device)


def eval_batches(corpus: ShakespeareChar, cfg: TextTrainConfig, device: str) -> dict[str, DataLoader]:
    """The batches of a loss estimate: ``eval_iters`` random ones of each split, drawn with fixed seeds, so that
    every estimate of a run (and a later ``vkblas eval``) sees the same ones."""
    return {
        "train": random_batches(corpus.train, cfg.batch_size, cfg.eval_iters, cfg.seed + 1, device),
        "val": random_batches(corpus.val, cfg.batch_size, cfg.eval_iters, cfg.seed + 2, device),
    }


def autocast_for(device: str, amp: str | None) -> Any:
    """The forward pass's precision context: ``vkblas.amp.autocast`` for ``amp``, else float32 (a no-op)."""
    return _amp.autocast(device.split(":")[0], dtype=amp, enabled=amp is not None)


@no_grad()
def estimate_loss(model: GPT, batches: DataLoader, amp: str | None = None) -> float:
    """The mean loss over ``batches``, in eval mode (no dropout), under ``amp``'s autocast when given; one read of
    the device at the end."""
    was_training = model.training
    model.eval()
    total: Tensor | None = None
    for x, y in batches:
        with autocast_for(str(x.device), amp):
            _, loss = model(x, y)
        total = loss if total is None else total + loss
    model.train(was_training)
    assert total is not None
    return total.item() / len(batches)


class _Step:
    """One training step (forward, backward, clipping, AdamW), eager or replayed from a captured graph; with
    ``amp``, eager under autocast with loss scaling (``scaler``)."""

    def __init__(self, model: GPT, optimizer: Any, grad_clip: float, graph: bool, amp: str | None = None) -> None:
        self.model, self.optimizer, self.grad_clip, self.amp = model, optimizer, grad_clip, amp
        self.graph = graphs.Graph() if graph and amp is None else None
        self.scaler = _amp.GradScaler(enabled=amp is not None)
        self.static: tuple[Tensor, Tensor] | None = None
        self.loss: Tensor | None = None
        self.steps = 0
        self.skipped = 0  # steps the scaler skipped (gradients not finite)

    def _eager(self, x: Tensor, y: Tensor) -> Tensor:
        with autocast_for(str(x.device), self.amp):
            _, loss = self.model(x, y)
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        if self.grad_clip:
            self.scaler.unscale_(self.optimizer)  # clip the true gradients, not the scaled ones
            clip_grad_norm_(self.model.parameters(), self.grad_clip)
        scale = self.scaler.get_scale()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.skipped += self.scaler.get_scale() < scale
        return loss

    def scaling(self) -> dict[str, Any]:
        """The loss scale and the steps skipped so far (mixed precision only)."""
        return {"loss_scale": self.scaler.get_scale(), "skipped_steps": self.skipped} if self.amp else {}

    def __call__(self, x: Tensor, y: Tensor) -> Tensor:
        self.steps += 1
        if self.graph is None or self.steps == 1:  # the first step creates the optimizer state
            self.loss = self._eager(x, y)
        elif self.static is None:
            self.static = (x.clone(), y.clone())
            with graphs.capture(self.graph, device=x.device):
                self.loss = self._eager(*self.static)
        else:
            self.static[0].copy_(x)
            self.static[1].copy_(y)
            self.graph.replay()
        assert self.loss is not None
        return self.loss


def _eval_record(
    model: GPT, corpus: ShakespeareChar, cfg: TextTrainConfig, device: str, it: int, seconds: float
) -> dict[str, Any]:
    batches = eval_batches(corpus, cfg, device)
    losses = {f"{split}_loss": estimate_loss(model, b, cfg.amp) for split, b in batches.items()}
    return {"iter": it, "lr": learning_rate(it, cfg), "seconds": seconds, **losses}


def run_iterations(
    model: GPT, optimizer: Any, cfg: TextTrainConfig, corpus: ShakespeareChar, device: str
) -> Iterator[dict[str, Any]]:
    """Train for ``cfg.iters`` iterations; yield an evaluation record at iteration 0, every ``eval_interval``
    iterations and at the end."""
    train = random_batches(corpus.train, cfg.batch_size, cfg.iters, cfg.seed, device)
    step = _Step(model, optimizer, cfg.grad_clip, cfg.graph and device.startswith("vulkan"), cfg.amp)
    start, seconds, since = time.perf_counter(), 0.0, 0
    bar = tqdm(total=cfg.iters, desc="train", unit="iter", leave=False, disable=not cfg.progress, dynamic_ncols=True)
    for it, (x, y) in enumerate(train):
        if it % cfg.eval_interval == 0:
            seconds += time.perf_counter() - start
            yield {**_eval_record(model, corpus, cfg, device, it, seconds), **step.scaling()}
            start, since = time.perf_counter(), 0
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(it, cfg)
        loss = step(x, y)
        bar.update(1)
        since += 1
        if cfg.progress and since % 10 == 0:  # reading the loss is a sync: not every step
            rate = since * cfg.batch_size * cfg.block_size / (time.perf_counter() - start)
            bar.set_postfix(loss=f"{loss.item():.4f}", tokens_s=f"{rate:,.0f}")
    bar.close()
    seconds += time.perf_counter() - start
    yield {**_eval_record(model, corpus, cfg, device, cfg.iters, seconds), **step.scaling()}


def _checkpoint_info(
    cfg: TextTrainConfig, model_cfg: GPTConfig, corpus: ShakespeareChar, dev: str, model: GPT, record: dict[str, Any]
) -> dict[str, Any]:
    """The metadata of a checkpoint of the weights as they are at the evaluation ``record``."""
    return {
        "config": dataclasses.asdict(cfg),
        "task": "text",
        "model_config": dataclasses.asdict(model_cfg),
        "vocab": corpus.vocab.chars,
        "device": dev,
        "vkblas": __version__,
        "iter": record["iter"],
        "train_loss": record["train_loss"],
        "val_loss": record["val_loss"],
        "parameters": model.get_num_params(),
        "precision": PRECISION[cfg.amp],
    }


def fit_text(cfg: TextTrainConfig) -> dict[str, Any]:
    """Train as configured; write ``model.safetensors``, ``metrics.json`` and ``curves.png`` into ``cfg.out``."""
    dev = resolve_device(cfg.device)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    corpus = TEXT_DATASETS[cfg.dataset](cfg.data, block_size=cfg.block_size)
    manual_seed(cfg.seed)
    model_cfg = cfg.gpt_config(vocab_size=len(corpus.vocab))
    model = GPT(model_cfg).to(dev)
    graph = cfg.graph and dev.startswith("vulkan") and cfg.amp is None  # mixed precision steps run eagerly
    optimizer = model.configure_optimizers(
        cfg.weight_decay, cfg.lr, (cfg.beta1, cfg.beta2), **({"capturable": True} if graph else {})
    )
    history: list[dict[str, Any]] = []
    info: dict[str, Any] = {}
    for record in run_iterations(model, optimizer, cfg, corpus, dev):
        history.append(record)
        scale = f" (fp16 mixed precision: loss scale {record['loss_scale']:g})" if cfg.amp else ""
        last = record["iter"] == cfg.iters
        keep = record["val_loss"] < info["val_loss"] if info else True
        if (cfg.save == "best" and keep) or (cfg.save == "last" and last):
            info = _checkpoint_info(cfg, model_cfg, corpus, dev, model, record)
            checkpoint.save(model, out / "model.safetensors", info)
        saved = " (saved)" if info.get("iter") == record["iter"] else ""
        tqdm.write(
            f"step {record['iter']}: train loss {record['train_loss']:.4f}, val loss {record['val_loss']:.4f}"
            f"{scale}{saved}"
        )
    train_seconds = history[-1]["seconds"]
    metrics = {
        **info,
        "final_train_loss": history[-1]["train_loss"],
        "final_val_loss": history[-1]["val_loss"],
        "evals": history,
        "train_seconds": train_seconds,
        "tokens_per_s": cfg.iters * cfg.batch_size * cfg.block_size / train_seconds if train_seconds else None,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    report.write_metrics(out / "metrics.json", metrics)
    precision = "" if cfg.amp is None else f", {PRECISION[cfg.amp]}"
    report.plot_losses(out / "curves.png", history, f"GPT on {cfg.dataset} ({dev}{precision})")
    return metrics


def load_gpt(path: str, device: str | None = None) -> tuple[GPT, Any, dict[str, Any]]:
    """(model in eval mode on ``device``, its vocabulary, the checkpoint's info) of a checkpoint of
    :func:`fit_text`."""
    from ..data.text import CharVocab

    dev = resolve_device(device)
    state, info = checkpoint.load(path, dev)
    if info.get("task") != "text":
        raise ValueError(f"{path}: not a GPT checkpoint of 'vkblas train shakespeare-char' (it is a classifier)")
    model = GPT(GPTConfig(**info["model_config"])).to(dev)
    model.load_state_dict(state)
    return model.eval(), CharVocab(info["vocab"]), info


def evaluate_text_checkpoint(
    path: str, device: str | None = None, data: str | None = None
) -> tuple[dict[str, float], dict[str, Any]]:
    """The training and validation loss of a checkpoint of :func:`fit_text`, estimated on the same batches as in
    its training run; and the checkpoint's info."""
    model, _, info = load_gpt(path, device)
    cfg = TextTrainConfig(**{**info["config"], "data": data if data is not None else info["config"]["data"]})
    corpus = TEXT_DATASETS[cfg.dataset](cfg.data, block_size=cfg.block_size)
    dev = str(model.lm_head.weight.device)
    batches = eval_batches(corpus, cfg, dev)
    losses = {f"{split}_loss": estimate_loss(model, b, cfg.amp) for split, b in batches.items()}
    return losses, info
