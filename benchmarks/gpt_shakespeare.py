"""The character-level GPT at nanoGPT's shakespeare-char setting: vkblas beside PyTorch, the same model, data and
optimizer, in one run (issue 14).

    python benchmarks/gpt_shakespeare.py                       # every framework and mode present, timed steps
    python benchmarks/gpt_shakespeare.py --preset tiny         # a small model: the CPU machine
    python benchmarks/gpt_shakespeare.py --train-iters 5000    # also the whole run: the validation loss each reaches

Rows: vkblas eager and vkblas with the step captured and replayed (``vkblas.graphs``, as ``vkblas train
shakespeare-char`` does on a Vulkan device); PyTorch eager fp32 with TF32 off and ``torch.compile`` on CUDA (PyTorch
CPU eager where there is no CUDA). The PyTorch model is the test program ``tests/programs/nanogpt/model.py``,
written as nanoGPT's ``model.py``; vkblas's is ``vkblas.models.GPT``; both are built from the same configuration
and start from the same weights (copied from vkblas's). Both take the same batches (random windows of the training
split, drawn once on the host with one seed and uploaded each step), AdamW with nanoGPT's weight decay groups
(PyTorch's ``fused=True`` on CUDA, as nanoGPT), gradient clipping at 1.0, the same learning-rate schedule.

Timed steps: ``--warmup`` steps, then ``--steps`` steps ending in a sync; tokens/s = steps * batch * block / time.
With ``--train-iters N`` each row then trains a fresh model for the whole schedule of N iterations and reports the
validation loss over ``--eval-iters`` fixed batches every ``--eval-interval`` iterations and at the end: the best of
those and the final one. nanoGPT's 1.4697 is the best: its shakespeare-char config evaluates every 250 iterations
and keeps the checkpoint only when the validation loss improves, since the model overfits this small corpus.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_table, torch_or_none  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
PRESETS = {
    # nanoGPT's config/train_shakespeare_char.py
    "nanogpt": dict(n_layer=6, n_head=6, n_embd=384, block_size=256, batch_size=64, dropout=0.2),
    "tiny": dict(n_layer=2, n_head=2, n_embd=64, block_size=64, batch_size=8, dropout=0.0),
}


@dataclass
class Setting:
    n_layer: int
    n_head: int
    n_embd: int
    block_size: int
    batch_size: int
    dropout: float
    lr: float = 1e-3
    min_lr: float = 1e-4
    warmup_iters: int = 100
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.99)
    grad_clip: float = 1.0

    def model(self, vocab: int) -> dict[str, Any]:
        """The GPT configuration's fields (the same names in vkblas's GPTConfig and nanoGPT's)."""
        names = ("block_size", "n_layer", "n_head", "n_embd", "dropout")
        return {"vocab_size": vocab, "bias": False, **{k: getattr(self, k) for k in names}}

    def lr_at(self, it: int, iters: int) -> float:
        """nanoGPT's schedule, as ``vkblas.training.text.learning_rate``."""
        if it < self.warmup_iters:
            return self.lr * (it + 1) / (self.warmup_iters + 1)
        ratio = min(1.0, (it - self.warmup_iters) / max(1, iters - self.warmup_iters))
        return self.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (self.lr - self.min_lr)


class Batches:
    """Random windows of a split, drawn on the host with one seed: every row sees the same batches."""

    def __init__(self, data: np.ndarray, setting: Setting, seed: int) -> None:
        self.data, self.s, self.rng = data.astype(np.int64), setting, np.random.default_rng(seed)

    def __call__(self) -> tuple[np.ndarray, np.ndarray]:
        t = self.s.block_size
        starts = self.rng.integers(0, len(self.data) - t - 1, size=self.s.batch_size)
        x = np.stack([self.data[i : i + t] for i in starts])
        y = np.stack([self.data[i + 1 : i + 1 + t] for i in starts])
        return x, y


class Row:
    """One framework and mode: ``step(x, y, lr)`` trains on host batches; ``sync()`` waits for the device;
    ``val_loss(batches)`` estimates the loss in eval mode."""

    step: Callable[[np.ndarray, np.ndarray, float], None]
    sync: Callable[[], None]
    val_loss: Callable[[list[tuple[np.ndarray, np.ndarray]]], float]
    parameters: int


def vkblas_row(setting: Setting, vocab: int, device: str, graph: bool, seed: int) -> Row:
    import vkblas
    from vkblas.models import GPT, GPTConfig
    from vkblas.nn.utils import clip_grad_norm_

    vkblas.manual_seed(seed)
    cfg = GPTConfig(**setting.model(vocab))
    model = GPT(cfg).to(device)
    opt = model.configure_optimizers(
        setting.weight_decay, setting.lr, setting.betas, **({"capturable": True} if graph else {})
    )

    def eager(x: Any, y: Any) -> None:
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        clip_grad_norm_(model.parameters(), setting.grad_clip)
        opt.step()

    state: dict[str, Any] = {"steps": 0}

    def step(xh: np.ndarray, yh: np.ndarray, lr: float) -> None:
        for group in opt.param_groups:
            group["lr"] = lr
        x = vkblas.tensor(xh.astype(np.int32), device=device)
        y = vkblas.tensor(yh.astype(np.int32), device=device)
        state["steps"] += 1
        if not graph or state["steps"] == 1:  # the first step creates the optimizer state
            eager(x, y)
        elif "graph" not in state:
            state["graph"], state["static"] = vkblas.graphs.Graph(), (x.clone(), y.clone())
            with vkblas.graphs.capture(state["graph"], device=device):
                eager(*state["static"])
        else:
            state["static"][0].copy_(x)
            state["static"][1].copy_(y)
            state["graph"].replay()

    def val_loss(batches: list[tuple[np.ndarray, np.ndarray]]) -> float:
        model.eval()
        with vkblas.no_grad():
            total = 0.0
            for xh, yh in batches:
                x = vkblas.tensor(xh.astype(np.int32), device=device)
                total += model(x, vkblas.tensor(yh.astype(np.int32), device=device))[1].item()
        model.train()
        return total / len(batches)

    row = Row()
    row.step, row.val_loss, row.parameters = step, val_loss, sum(p.numel() for p in model.parameters())
    row.sync = lambda: vkblas.synchronize(device)
    row.model = model  # type: ignore[attr-defined]
    return row


def torch_row(setting: Setting, vocab: int, device: str, compile_: bool, weights: dict[str, np.ndarray]) -> Row:
    torch = torch_or_none()
    sys.path.insert(0, str(REPO / "tests" / "programs" / "nanogpt"))
    from model import GPT, GPTConfig  # the nanoGPT-style test program, under real PyTorch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    cfg = GPTConfig(**setting.model(vocab))
    model = GPT(cfg)
    missing = set(model.state_dict()) - set(weights)
    if missing:
        raise RuntimeError(f"vkblas's GPT lacks weights the PyTorch model has: {sorted(missing)[:5]}")
    model.load_state_dict({k: torch.from_numpy(weights[k].copy()) for k in model.state_dict()})
    model.to(device)
    opt = model.configure_optimizers(setting.weight_decay, setting.lr, setting.betas, device.split(":")[0])
    fwd = torch.compile(model) if compile_ else model

    def step(xh: np.ndarray, yh: np.ndarray, lr: float) -> None:
        for group in opt.param_groups:
            group["lr"] = lr
        x, y = torch.from_numpy(xh).to(device), torch.from_numpy(yh).to(device)
        _, loss = fwd(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), setting.grad_clip)
        opt.step()

    @torch.no_grad()
    def val_loss(batches: list[tuple[np.ndarray, np.ndarray]]) -> float:
        model.eval()
        total = sum(model(torch.from_numpy(x).to(device), torch.from_numpy(y).to(device))[1].item() for x, y in batches)
        model.train()
        return total / len(batches)

    row = Row()
    row.step, row.val_loss, row.parameters = step, val_loss, sum(p.numel() for p in model.parameters())
    row.sync = (lambda: torch.cuda.synchronize()) if device.startswith("cuda") else (lambda: None)
    return row


def timed(row: Row, batches: Batches, setting: Setting, warmup: int, steps: int, iters: int) -> float:
    """tokens/s over ``steps`` steps after ``warmup`` (the learning rate follows the schedule of ``iters``)."""
    for it in range(warmup):
        row.step(*batches(), setting.lr_at(it, iters))
    row.sync()
    t0 = time.perf_counter()
    for it in range(warmup, warmup + steps):
        row.step(*batches(), setting.lr_at(it, iters))
    row.sync()
    return steps * setting.batch_size * setting.block_size / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", choices=sorted(PRESETS), default="nanogpt")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--train-iters", type=int, default=0, help="also train each row for this many iterations")
    p.add_argument("--eval-iters", type=int, default=200)
    p.add_argument("--eval-interval", type=int, default=250, help="evaluate every this many iterations (nanoGPT's)")
    p.add_argument("--stop-after", type=int, default=0, help="train only this many iterations of the schedule")
    p.add_argument("--rows", default="", help="comma-separated subset of the row names (default: all present)")
    p.add_argument("--data", default=None, help="the folder holding tinyshakespeare/input.txt (default: VKBLAS_DATA)")
    args = p.parse_args(argv)

    import vkblas
    from vkblas.data.text import ShakespeareChar

    setting = Setting(**PRESETS[args.preset])
    corpus = ShakespeareChar(args.data, block_size=setting.block_size)
    train, val = np.asarray(corpus.train.data), np.asarray(corpus.val.data)
    vocab = len(corpus.vocab)
    torch = torch_or_none()
    vk_dev = next((d for d in vkblas.devices() if d.startswith("vulkan")), "cpu")
    builders: dict[str, Callable[[], Row]] = {
        f"vkblas {vk_dev} eager": lambda: vkblas_row(setting, vocab, vk_dev, False, 1337),
    }
    if vk_dev != "cpu":
        builders[f"vkblas {vk_dev} graph replay"] = lambda: vkblas_row(setting, vocab, vk_dev, True, 1337)
    if torch is not None:
        reference = vkblas_row(setting, vocab, "cpu", False, 1337).model  # type: ignore[attr-defined]
        weights = {k: v.numpy() for k, v in reference.state_dict().items()}
        tdev = "cuda" if torch.cuda.is_available() else "cpu"
        builders[f"PyTorch {tdev} eager fp32"] = lambda: torch_row(setting, vocab, tdev, False, weights)
        if tdev == "cuda":
            builders["PyTorch cuda torch.compile fp32"] = lambda: torch_row(setting, vocab, tdev, True, weights)
    wanted = [r.strip() for r in args.rows.split(",") if r.strip()]
    names = [n for n in builders if not wanted or any(w in n for w in wanted)]

    val_batches = Batches(val, setting, seed=2)
    fixed_val = [val_batches() for _ in range(args.eval_iters)]
    rows = []
    for name in names:
        row = builders[name]()
        rate = timed(row, Batches(train, setting, seed=1), setting, args.warmup, args.steps, max(args.train_iters, 1))
        result = [name, row.parameters, round(rate)]
        if args.train_iters:
            row = builders[name]()  # a fresh model for the whole schedule
            batches, t0, train_s, losses = Batches(train, setting, seed=1), time.perf_counter(), 0.0, []
            for it in range(min(args.train_iters, args.stop_after or args.train_iters)):
                row.step(*batches(), setting.lr_at(it, args.train_iters))
                if (it + 1) % args.eval_interval == 0 or it + 1 in (args.train_iters, args.stop_after):
                    row.sync()
                    train_s += time.perf_counter() - t0  # evaluation is not training time
                    losses.append((it + 1, row.val_loss(fixed_val)))
                    print(f"  {name}: iteration {it + 1}, {train_s:.0f} s, val loss {losses[-1][1]:.4f}", flush=True)
                    t0 = time.perf_counter()
            best = min(losses, key=lambda e: e[1])
            result += [round(train_s, 1), f"{best[1]:.4f} (it {best[0]})", round(losses[-1][1], 4)]
        rows.append(result)
        print(f"{name}: {result[2:]}", flush=True)
    header = ["row", "parameters", "tokens/s"]
    header += ["train s", "best val loss", "final val loss"] if args.train_iters else []
    base = next((r[2] for r in rows if "eager fp32" in r[0]), None)
    if base:
        header.append("x PyTorch eager")
        for r in rows:
            r.append(round(r[2] / base, 2))
    print_table(
        f"GPT {args.preset} (n_layer {setting.n_layer}, n_embd {setting.n_embd}, block {setting.block_size}, "
        f"batch {setting.batch_size}, dropout {setting.dropout}), {args.steps} timed steps after {args.warmup}",
        header,
        rows,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
