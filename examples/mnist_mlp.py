"""Train an MLP on MNIST with vkblas, written the way a PyTorch user writes it.

    python examples/mnist_mlp.py [--device vulkan] [--epochs 5]

Differences from the PyTorch version: ``import vkblas`` instead of ``import torch``; the dataset and loader come from
``vkblas.data`` (no torchvision), and the loader already puts batches on the device.
"""

from __future__ import annotations

import argparse

import vkblas
from vkblas import nn, optim
from vkblas.data import MNIST, DataLoader, transforms


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.flatten = nn.Flatten()
        self.fc1 = nn.Linear(28 * 28, 512)
        self.fc2 = nn.Linear(512, 256)
        self.fc3 = nn.Linear(256, 10)
        self.dropout = nn.Dropout(0.2)

    def forward(self, x: vkblas.Tensor) -> vkblas.Tensor:
        x = self.flatten(x)
        x = self.dropout(nn.functional.relu(self.fc1(x)))
        x = self.dropout(nn.functional.relu(self.fc2(x)))
        return self.fc3(x)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="cpu, vulkan, vulkan:N (default: vkblas's default device)")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--data", default=None, help="directory with the MNIST .gz files")
    args = parser.parse_args()

    vkblas.manual_seed(0)
    device = args.device or vkblas.info()["default_device"]
    transform = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))])
    train_loader = DataLoader(
        MNIST(args.data, train=True, transform=transform), batch_size=128, shuffle=True, seed=0, device=device
    )
    test_loader = DataLoader(MNIST(args.data, train=False, transform=transform), batch_size=1000, device=device)

    model = MLP().to(device)
    optimizer = optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()

    for epoch in range(args.epochs):
        model.train()
        for step, (images, labels) in enumerate(train_loader):
            optimizer.zero_grad()
            loss = loss_fn(model(images), labels)
            loss.backward()
            optimizer.step()
            if step % 100 == 0:
                print(f"epoch {epoch + 1} step {step:4d}  loss {loss.item():.4f}")  # .item() waits for the GPU

        model.eval()
        correct = 0
        with vkblas.no_grad():
            for images, labels in test_loader:
                correct += (model(images).argmax(1) == labels).sum().item()
        print(f"epoch {epoch + 1}: test accuracy {100 * correct / len(test_loader.dataset):.2f}%")

    vkblas.save(model.state_dict(), "mnist_mlp.safetensors")


if __name__ == "__main__":
    main()
