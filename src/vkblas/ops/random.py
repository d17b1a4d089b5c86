"""Random numbers made on the device: new tensors (``rand``, ``randn``, ... in ``vkblas.creation``) and in-place
fills (``uniform_``, ``normal_``, ``bernoulli_``).

Every fill takes ``numel`` counters from its generator (``vkblas.random``) and runs the backend's counter-based
``random`` primitive, so ``manual_seed`` gives the same numbers on every device; inside a graph capture the dispatch
is noted, so that each replay takes fresh counters as an eager call would.
"""

from __future__ import annotations

from .. import graphs
from ..backend.base import Backend, View
from ..dtypes import DType
from ..random import Generator, default_generator
from ..tensor import Tensor, check_backend, empty
from ._core import check_inplace, elementwise, write_into


def _draw(backend: Backend, view: View, distribution: str, generator: Generator | None) -> None:
    gen = generator or default_generator
    n = view.numel
    seed, counter = gen.take(n)
    if n:
        backend.random(view, distribution, seed, counter)
        graphs.note_random(backend, gen, n)


def random_tensor(
    shape: tuple[int, ...], distribution: str, dtype: DType, backend: Backend, generator: Generator | None
) -> Tensor:
    """A new tensor of ``uniform`` [0, 1) or ``normal`` (0, 1) numbers."""
    check_backend(backend, dtype, "rand")
    out = empty(shape, dtype, backend)
    _draw(backend, out._view, distribution, generator)
    return out


def _fill(t: Tensor, distribution: str, generator: Generator | None) -> Tensor:
    if check_inplace(t, distribution + "_"):
        raise RuntimeError(f"{distribution}_ cannot be recorded by autograd; call it inside vkblas.no_grad()")
    if not t.dtype.is_floating:
        raise RuntimeError(f"{distribution}_ needs a floating dtype, got {t.dtype!r}")
    _draw(t._backend, t._view, distribution, generator)
    t._view.storage.version += 1
    return t


def uniform_(t: Tensor, a: float = 0.0, b: float = 1.0, generator: Generator | None = None) -> Tensor:
    """Fill ``t`` in place with U(a, b)."""
    _fill(t, "uniform", generator)
    return write_into(t, "lerp", a, b, t) if (a, b) != (0.0, 1.0) else t


def normal_(t: Tensor, mean: float = 0.0, std: float = 1.0, generator: Generator | None = None) -> Tensor:
    """Fill ``t`` in place with N(mean, std**2)."""
    _fill(t, "normal", generator)
    if std != 1.0:
        write_into(t, "mul", t, float(std))
    return write_into(t, "add", t, float(mean)) if mean != 0.0 else t


def bernoulli_(t: Tensor, p: float = 0.5, generator: Generator | None = None) -> Tensor:
    """Fill ``t`` in place with 1 with probability ``p``, else 0."""
    _fill(t, "uniform", generator)
    return write_into(t, "where", elementwise("lt", t, float(p)), 1.0, 0.0)
