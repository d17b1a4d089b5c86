"""Datasets and data loading, as in ``torch.utils.data``: datasets, samplers, collation, ``DataLoader`` (with
worker processes), and the MNIST / Fashion-MNIST datasets."""

from . import transforms
from .collate import default_collate, default_convert
from .dataloader import DataLoader
from .dataset import ConcatDataset, Dataset, IterableDataset, Subset, TensorDataset, random_split
from .datasets import FASHION_MNIST_SOURCE, MNIST, MNIST_SOURCE, FashionMNIST, IDXImageDataset, cache_dir
from .idx import DataError, parse_idx, read_idx, verify_sha256
from .sampler import BatchSampler, RandomSampler, Sampler, SequentialSampler, SubsetRandomSampler
from .worker import WorkerInfo, get_worker_info

__all__ = [
    "BatchSampler",
    "ConcatDataset",
    "DataError",
    "DataLoader",
    "Dataset",
    "FASHION_MNIST_SOURCE",
    "FashionMNIST",
    "IDXImageDataset",
    "IterableDataset",
    "MNIST",
    "MNIST_SOURCE",
    "RandomSampler",
    "Sampler",
    "SequentialSampler",
    "Subset",
    "SubsetRandomSampler",
    "TensorDataset",
    "WorkerInfo",
    "cache_dir",
    "default_collate",
    "default_convert",
    "get_worker_info",
    "parse_idx",
    "random_split",
    "read_idx",
    "transforms",
    "verify_sha256",
]
