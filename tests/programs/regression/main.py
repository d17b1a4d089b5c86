"""Fitting a polynomial with a small MLP, checkpointed every epoch and resumable.

vkblas test program, written in the style of PyTorch's examples/regression/main.py, with the pieces of the
training toolbox that programs commonly reach for: an IterableDataset streamed by worker processes
(get_worker_info) with a custom collate_fn and persistent_workers, TensorDataset, nn.Sequential with
Module.apply and nn.init, AdamW with a warm-up then cosine schedule (LinearLR + CosineAnnealingLR in SequentialLR)
or ReduceLROnPlateau, torch.autocast with a torch.amp.GradScaler, torch.compile behind a flag, cudnn.benchmark and
set_float32_matmul_precision, clip_grad_norm_, and a full checkpoint (model, optimizer, scheduler, scaler, epoch)
saved with torch.save and resumed with torch.load.
"""

import argparse
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.lr_scheduler import CosineAnnealingLR, LinearLR, ReduceLROnPlateau, SequentialLR
from torch.utils.data import DataLoader, IterableDataset, TensorDataset, get_worker_info

# the curve to learn: y = 0.25 + 0.5 x - x^2 + 0.3 x^3 + 2 x^4, on [-1, 1]
DEGREE = 4
COEFFS = np.array([0.5, -1.0, 0.3, 2.0], dtype=np.float32)  # of x, x^2, ..., x^DEGREE
INTERCEPT = 0.25


def powers(x):
    """(N,) -> (N, DEGREE): x, x^2, ..., x^DEGREE as columns, the model's input."""
    return torch.cat([x.unsqueeze(1) ** k for k in range(1, DEGREE + 1)], 1)


class PolySamples(IterableDataset):
    """An endless-looking stream of (x, f(x) + noise), split between the loader's workers."""

    def __init__(self, n, seed):
        self.n, self.seed = n, seed

    def __len__(self):
        return self.n

    def __iter__(self):
        info = get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        rng = np.random.default_rng(self.seed + worker)
        for _ in range(worker, self.n, workers):
            x = rng.uniform(-1.0, 1.0)
            y = float(COEFFS @ np.array([x**k for k in range(1, DEGREE + 1)])) + INTERCEPT
            yield np.float32(x), np.float32(y + rng.normal(0.0, 0.01))


def collate(batch):
    xs, ys = zip(*batch, strict=True)
    return powers(torch.tensor(xs)), torch.tensor(ys).unsqueeze(1)


def init_weights(module):
    if isinstance(module, nn.Linear):
        nn.init.xavier_uniform_(module.weight)
        nn.init.zeros_(module.bias)


def evaluate(model, loader, device):
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            total += F.mse_loss(model(x), y, reduction="sum").item()
            count += len(y)
    model.train()
    return total / count


def main():
    parser = argparse.ArgumentParser(description="vkblas test program: polynomial regression")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--samples", type=int, default=2048, help="samples per epoch")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--scheduler", choices=["sequential", "plateau"], default="sequential")
    parser.add_argument("--amp", action="store_true", help="autocast to bfloat16 with a GradScaler")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--checkpoint", default="regression.pt")
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    torch.backends.cudnn.benchmark = True
    torch.set_float32_matmul_precision("high")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    train_loader = DataLoader(
        PolySamples(args.samples, args.seed),
        batch_size=args.batch_size,
        num_workers=args.workers,
        collate_fn=collate,
        persistent_workers=args.workers > 0,
    )
    xs = torch.linspace(-1, 1, 256)
    ys = torch.from_numpy(np.polyval(np.r_[COEFFS[::-1], INTERCEPT], xs.numpy()).astype(np.float32))
    val_loader = DataLoader(TensorDataset(powers(xs), ys.unsqueeze(1)), batch_size=64)

    model = nn.Sequential(nn.Linear(DEGREE, 32), nn.Tanh(), nn.Linear(32, 1))
    model.apply(init_weights)
    model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-4)
    steps_per_epoch = len(train_loader)
    if args.scheduler == "sequential":
        warmup = LinearLR(optimizer, start_factor=0.1, total_iters=steps_per_epoch)
        cosine = CosineAnnealingLR(optimizer, T_max=steps_per_epoch * (args.epochs - 1))
        scheduler = SequentialLR(optimizer, [warmup, cosine], milestones=[steps_per_epoch])
    else:
        scheduler = ReduceLROnPlateau(optimizer, factor=0.5, patience=0)
    scaler = torch.amp.GradScaler(device.type, enabled=args.amp)

    start_epoch, first_loss = 0, evaluate(model, val_loader, device)
    if args.resume and os.path.exists(args.checkpoint):
        checkpoint = torch.load(args.checkpoint, map_location=device)
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        scheduler.load_state_dict(checkpoint["scheduler"])
        scaler.load_state_dict(checkpoint["scaler"])
        start_epoch, first_loss = checkpoint["epoch"], checkpoint["first_loss"]
        print(f"resumed from epoch {start_epoch}")
    train_model = torch.compile(model) if args.compile else model

    for epoch in range(start_epoch + 1, args.epochs + 1):
        for x, y in train_loader:
            x, y = x.to(device), y.to(device)
            with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=args.amp):
                loss = F.mse_loss(train_model(x), y)
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
            if args.scheduler == "sequential":
                scheduler.step()
        val_loss = evaluate(model, val_loader, device)
        if args.scheduler == "plateau":
            scheduler.step(val_loss)
        print(
            f"epoch {epoch}: train loss {loss.item():.5f}, val loss {val_loss:.5f}, "
            f"lr {optimizer.param_groups[0]['lr']:.5f}, scale {scaler.get_scale():g}"
        )
        torch.save(
            {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "scaler": scaler.state_dict(),
                "epoch": epoch,
                "first_loss": first_loss,
            },
            args.checkpoint,
        )

    final = evaluate(model, val_loader, device)
    print(f"validation loss {first_loss:.5f} -> {final:.5f}")
    if not final < first_loss / 4:
        sys.exit("the model did not learn")


if __name__ == "__main__":
    main()
