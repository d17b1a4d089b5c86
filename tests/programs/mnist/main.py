"""Digit classification on MNIST with a small convolutional network.

vkblas test program, written in the style of PyTorch's examples/mnist/main.py. It exercises argparse options as
that example has them (--batch-size, --test-batch-size, --epochs, --lr, --gamma, --no-accel/--no-cuda,
--dry-run, --seed, --log-interval, --save-model), the device chosen by torch.cuda.is_available(),
torchvision.datasets.MNIST with transforms.Compose([ToTensor(), Normalize(...)]), DataLoader(**kwargs) with
shuffle=True and, on the GPU, num_workers=1 and pin_memory=True, an nn.Module of Conv2d, Dropout and Linear layers
with F.relu, F.max_pool2d, torch.flatten and F.log_softmax, F.nll_loss, optim.Adadelta with a StepLR schedule,
argmax/eq/view_as accuracy counting under torch.no_grad(), and torch.save of the state_dict.

--subset N (not in the original) keeps the first N images of each split, for quick runs.
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, Subset
from torchvision import datasets, transforms

MNIST_MEAN, MNIST_STD = 0.1307, 0.3081  # of the training images' pixels, scaled to [0, 1]


class DigitNet(nn.Module):
    """Two 3x3 convolutions, one 2x2 max-pool, two fully connected layers; log-probabilities of the 10 digits."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, kernel_size=3, stride=1)  # 28x28 -> 26x26
        self.conv2 = nn.Conv2d(16, 32, kernel_size=3, stride=1)  # 26x26 -> 24x24, pooled to 12x12
        self.drop_features = nn.Dropout(0.25)
        self.fc1 = nn.Linear(32 * 12 * 12, 128)
        self.drop_hidden = nn.Dropout(0.5)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = self.drop_features(F.max_pool2d(x, 2))
        x = torch.flatten(x, 1)
        x = self.drop_hidden(F.relu(self.fc1(x)))
        return F.log_softmax(self.fc2(x), dim=1)


def train_epoch(model, device, loader, optimizer, epoch, args):
    model.train()
    for step, (images, labels) in enumerate(loader):
        images, labels = images.to(device), labels.to(device)
        optimizer.zero_grad()
        loss = F.nll_loss(model(images), labels)
        loss.backward()
        optimizer.step()
        if step % args.log_interval == 0:
            seen, total = step * len(images), len(loader.dataset)
            print(f"Train Epoch: {epoch} [{seen}/{total} ({100.0 * step / len(loader):.0f}%)]\tLoss: {loss.item():.6f}")
            if args.dry_run:  # one batch is enough to see that it works
                return


def evaluate(model, device, loader):
    model.eval()
    total_loss, correct = 0.0, 0
    with torch.no_grad():
        for images, labels in loader:
            images, labels = images.to(device), labels.to(device)
            log_probs = model(images)
            total_loss += F.nll_loss(log_probs, labels, reduction="sum").item()
            guess = log_probs.argmax(dim=1, keepdim=True)
            correct += guess.eq(labels.view_as(guess)).sum().item()
    n = len(loader.dataset)
    print(f"Test set: Average loss: {total_loss / n:.4f}, Accuracy: {correct}/{n} ({100.0 * correct / n:.0f}%)")


def parse_args():
    parser = argparse.ArgumentParser(description="vkblas test program: MNIST in the style of PyTorch's example")
    parser.add_argument("--batch-size", type=int, default=64, metavar="N", help="training batch size (64)")
    parser.add_argument("--test-batch-size", type=int, default=1000, metavar="N", help="test batch size (1000)")
    parser.add_argument("--epochs", type=int, default=14, metavar="N", help="passes over the training set (14)")
    parser.add_argument("--lr", type=float, default=1.0, metavar="LR", help="Adadelta learning rate (1.0)")
    parser.add_argument("--gamma", type=float, default=0.7, metavar="M", help="learning rate factor per epoch (0.7)")
    parser.add_argument("--no-accel", "--no-cuda", dest="no_accel", action="store_true", help="train on the CPU")
    parser.add_argument("--dry-run", action="store_true", help="one training batch per epoch")
    parser.add_argument("--seed", type=int, default=1, metavar="S", help="random seed (1)")
    parser.add_argument("--log-interval", type=int, default=10, metavar="N", help="batches between log lines (10)")
    parser.add_argument("--save-model", action="store_true", help="write the trained weights to mnist_cnn.pt")
    parser.add_argument("--subset", type=int, default=None, metavar="N", help="use the first N images of each split")
    parser.add_argument("--data", default="../data", help="where the MNIST files are")
    return parser.parse_args()


def loader_kwargs(batch_size, shuffle, use_cuda):
    kwargs = {"batch_size": batch_size, "shuffle": shuffle}
    if use_cuda:  # decode batches in a worker process, into page-locked memory that copies to the GPU faster
        kwargs.update({"num_workers": 1, "pin_memory": True})
    return kwargs


def main():
    args = parse_args()
    use_cuda = not args.no_accel and torch.cuda.is_available()
    torch.manual_seed(args.seed)
    device = torch.device("cuda" if use_cuda else "cpu")

    to_input = transforms.Compose([transforms.ToTensor(), transforms.Normalize((MNIST_MEAN,), (MNIST_STD,))])
    train_set = datasets.MNIST(args.data, train=True, download=True, transform=to_input)
    test_set = datasets.MNIST(args.data, train=False, transform=to_input)
    if args.subset is not None:
        train_set, test_set = Subset(train_set, range(args.subset)), Subset(test_set, range(args.subset))
    train_loader = DataLoader(train_set, **loader_kwargs(args.batch_size, True, use_cuda))
    test_loader = DataLoader(test_set, **loader_kwargs(args.test_batch_size, False, use_cuda))

    model = DigitNet().to(device)
    optimizer = optim.Adadelta(model.parameters(), lr=args.lr)
    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)  # lr * gamma after every epoch
    for epoch in range(1, args.epochs + 1):
        train_epoch(model, device, train_loader, optimizer, epoch, args)
        evaluate(model, device, test_loader)
        scheduler.step()

    if args.save_model:
        torch.save(model.state_dict(), "mnist_cnn.pt")


if __name__ == "__main__":
    main()
