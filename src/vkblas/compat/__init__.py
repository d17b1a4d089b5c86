"""PyTorch programs on vkblas: ``vkblas run SCRIPT`` runs a program written for PyTorch with ``import torch``
resolving to vkblas (:mod:`.runner`, :mod:`.hook`). What is mapped, and what is not, is listed in the README
("vkblas run"); a name that is not mapped fails with an error naming it.

>>> from vkblas.compat import installed
>>> with installed(quiet=True):
...     import torch
...     torch.ones(2, device="cpu") * 2
tensor([2., 2.])
"""

from .hook import install, installed, uninstall
from .missing import NotImplementedInVkblasError
from .runner import run_script

__all__ = ["NotImplementedInVkblasError", "install", "installed", "run_script", "uninstall"]
