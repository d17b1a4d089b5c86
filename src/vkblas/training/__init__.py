"""Training MNIST-style classifiers: models, the train/eval loops, checkpoints, metrics and plots."""

from .fit import DATASETS, TrainConfig, evaluate_checkpoint, fit, load_dataset
from .loop import PassResult, evaluate, train_epoch
from .models import MODELS, build, cnn, mlp

__all__ = [
    "DATASETS",
    "MODELS",
    "PassResult",
    "TrainConfig",
    "build",
    "cnn",
    "evaluate",
    "evaluate_checkpoint",
    "fit",
    "load_dataset",
    "mlp",
    "train_epoch",
]
