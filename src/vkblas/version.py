"""The package version (one place: ``vkblas.__version__``, checkpoints and metrics name it)."""

__version__ = "0.1.0"
