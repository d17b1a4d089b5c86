"""Ready-made models, written with ``vkblas.nn`` as a PyTorch user writes them: ``GPT`` (nanoGPT's)."""

from .gpt import GPT, GPTConfig
from .sampling import probabilities, sample_next

__all__ = ["GPT", "GPTConfig", "probabilities", "sample_next"]
