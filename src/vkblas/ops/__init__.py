"""Every op of vkblas, forward and backward, written against the backend contract (backend/base.py).

``_core`` (plumbing: broadcasting, promotion, running a primitive), ``record`` (one record per elementwise op) and
``elementwise`` (the records), ``pointwise`` (elementwise ops with extra arguments, in-place ops), ``reduction``,
``shape``, ``indexing``, ``linalg``, ``conv``, ``random``; ``methods`` binds the Tensor methods. Importing this
package registers every op's formula with the backends and binds the methods; the ``vkblas.<name>`` functions are
exported by ``vkblas/__init__.py``.
"""

from . import methods  # noqa: F401  (imports every op module)
