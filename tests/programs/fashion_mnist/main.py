"""Clothing classification on Fashion-MNIST, with a validation split and a reload check of the saved weights.

vkblas test program, written in the style of PyTorch's examples/mnist/main.py (its torch.accelerator version).
It exercises torch.accelerator.is_available() / current_accelerator() for the device, --no-accel,
torchvision.datasets.FashionMNIST with Compose/ToTensor/Normalize, Subset and random_split with a seeded
torch.Generator, DataLoader with shuffle, num_workers, persistent_workers and pin_memory, a Conv2d/Dropout/Linear
nn.Module, optim.Adam with StepLR and get_last_lr(), F.nll_loss, and torch.save of a state_dict read back with
torch.load(map_location=..., weights_only=True) into a fresh model by load_state_dict.
"""

import argparse
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, Subset, random_split
from torchvision import datasets, transforms


class FashionNet(nn.Module):
    """Two convolution + max-pool stages and two fully connected layers; log-probabilities of the 10 classes."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, 1)
        self.conv2 = nn.Conv2d(8, 16, 3, 1)
        self.dropout = nn.Dropout(0.25)
        self.fc1 = nn.Linear(16 * 5 * 5, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        x = self.dropout(F.relu(self.fc1(x)))
        return F.log_softmax(self.fc2(x), dim=1)


def train_epoch(model, device, loader, optimizer, epoch, log_interval):
    model.train()
    for step, (images, labels) in enumerate(loader):
        images, labels = images.to(device), labels.to(device)
        optimizer.zero_grad()
        loss = F.nll_loss(model(images), labels)
        loss.backward()
        optimizer.step()
        if step % log_interval == 0:
            seen, total = step * len(images), len(loader.dataset)
            print(f"Train Epoch: {epoch} [{seen}/{total} ({100.0 * step / len(loader):.0f}%)]\tLoss: {loss.item():.6f}")


def evaluate(model, device, loader, name):
    model.eval()
    loss, correct = 0.0, 0
    with torch.no_grad():
        for images, labels in loader:
            images, labels = images.to(device), labels.to(device)
            log_probs = model(images)
            loss += F.nll_loss(log_probs, labels, reduction="sum").item()
            correct += (log_probs.argmax(dim=1) == labels).sum().item()
    n = len(loader.dataset)
    print(f"{name}: Average loss: {loss / n:.4f}, Accuracy: {correct}/{n} ({100.0 * correct / n:.0f}%)")
    return correct


def main():
    parser = argparse.ArgumentParser(description="vkblas test program: Fashion-MNIST")
    parser.add_argument("--batch-size", type=int, default=64, metavar="N")
    parser.add_argument("--test-batch-size", type=int, default=1000, metavar="N")
    parser.add_argument("--epochs", type=int, default=5, metavar="N")
    parser.add_argument("--lr", type=float, default=1e-3, metavar="LR")
    parser.add_argument("--gamma", type=float, default=0.7, metavar="M")
    parser.add_argument("--no-accel", action="store_true", help="disables the accelerator")
    parser.add_argument("--seed", type=int, default=1, metavar="S")
    parser.add_argument("--log-interval", type=int, default=10, metavar="N")
    parser.add_argument("--subset", type=int, default=None, metavar="N", help="use the first N images of each split")
    parser.add_argument("--data", default="../data", help="dataset root")
    parser.add_argument("--save-path", default="fashion_cnn.pt")
    args = parser.parse_args()

    use_accel = not args.no_accel and torch.accelerator.is_available()
    torch.manual_seed(args.seed)
    if use_accel:
        device = torch.accelerator.current_accelerator()
    else:
        device = torch.device("cpu")

    train_kwargs = {"batch_size": args.batch_size, "shuffle": True}
    test_kwargs = {"batch_size": args.test_batch_size}
    if use_accel:
        accel_kwargs = {"num_workers": 1, "persistent_workers": True, "pin_memory": True}
        train_kwargs.update(accel_kwargs)
        test_kwargs.update(accel_kwargs)

    transform = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.2860,), (0.3530,))])
    full = datasets.FashionMNIST(args.data, train=True, download=True, transform=transform)
    test_set = datasets.FashionMNIST(args.data, train=False, transform=transform)
    if args.subset is not None:
        full, test_set = Subset(full, range(args.subset)), Subset(test_set, range(args.subset))
    n_val = len(full) // 10
    train_set, val_set = random_split(full, [len(full) - n_val, n_val], generator=torch.Generator().manual_seed(42))
    train_loader = DataLoader(train_set, **train_kwargs)
    val_loader = DataLoader(val_set, **test_kwargs)
    test_loader = DataLoader(test_set, **test_kwargs)

    model = FashionNet().to(device)
    optimizer = optim.Adam(model.parameters(), lr=args.lr)
    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    for epoch in range(1, args.epochs + 1):
        train_epoch(model, device, train_loader, optimizer, epoch, args.log_interval)
        evaluate(model, device, val_loader, "Validation set")
        scheduler.step()
        print(f"lr now {scheduler.get_last_lr()[0]:.6f}")
    correct = evaluate(model, device, test_loader, "Test set")

    torch.save(model.state_dict(), args.save_path)
    reloaded = FashionNet().to(device)
    reloaded.load_state_dict(torch.load(args.save_path, map_location=device, weights_only=True))
    if evaluate(reloaded, device, test_loader, "Reloaded model") != correct:
        print("the reloaded model does not give the same predictions")
        sys.exit(1)


if __name__ == "__main__":
    main()
