"""Datasets and data loading: ``Dataset``, ``TensorDataset``, ``DataLoader``, ``MNIST``, ``FashionMNIST``."""

from . import transforms
from .dataloader import BatchOrder, DataLoader
from .dataset import Dataset, Subset, TensorDataset
from .datasets import FASHION_MNIST_SOURCE, MNIST, MNIST_SOURCE, FashionMNIST, IDXImageDataset, cache_dir
from .idx import DataError, parse_idx, read_idx, verify_sha256

__all__ = [
    "BatchOrder",
    "DataError",
    "DataLoader",
    "Dataset",
    "FASHION_MNIST_SOURCE",
    "FashionMNIST",
    "IDXImageDataset",
    "MNIST",
    "MNIST_SOURCE",
    "Subset",
    "TensorDataset",
    "cache_dir",
    "parse_idx",
    "read_idx",
    "transforms",
    "verify_sha256",
]
