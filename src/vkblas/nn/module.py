"""``Module``: the base of every layer. Attributes register themselves by assignment (PyTorch's ``__setattr__``):
a :class:`Parameter` becomes a parameter, a ``Module`` a child, ``register_buffer`` a buffer. ``state_dict`` keys are
dotted paths such as ``layers.0.weight``, which is what lets checkpoints move between vkblas and PyTorch.

Deliberate difference: a plain ``list``/``tuple``/``dict`` holding modules or parameters raises ``TypeError``
(PyTorch silently never trains them); use ``ModuleList`` / ``ModuleDict`` / ``ParameterList``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

import numpy as np

from ..autograd import no_grad
from ..dtypes import DType, float16, float32, float64
from ..tensor import Tensor
from .parameter import Parameter


class IncompatibleKeys(NamedTuple):
    missing_keys: list[str]
    unexpected_keys: list[str]


def _holds_trainables(value: Any) -> bool:
    items = value.values() if isinstance(value, Mapping) else value if isinstance(value, (list, tuple)) else ()
    return any(isinstance(v, (Module, Parameter)) or _holds_trainables(v) for v in items)


class Module:
    """Base class of layers and models: override :meth:`forward`, call the module to run it."""

    training: bool

    def __init__(self) -> None:
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent", set())
        object.__setattr__(self, "_modules", OrderedDict())

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required "forward" function')

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    # ------------------------------------------------------------------ registration
    def __setattr__(self, name: str, value: Any) -> None:
        if "_parameters" not in self.__dict__:
            raise AttributeError(f"cannot assign {name!r} before Module.__init__() call (call super().__init__())")
        if isinstance(value, Parameter):
            self._drop(name)
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._drop(name)
            self._modules[name] = value
        elif name in self._parameters:
            if value is not None:
                raise TypeError(
                    f"cannot assign {type(value).__name__} as parameter {name!r} (vkblas.nn.Parameter or None expected)"
                )
            self._parameters[name] = None
        elif name in self._buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign {type(value).__name__} as buffer {name!r} (Tensor or None expected)")
            self._buffers[name] = value
        elif name in self._modules:
            if value is not None:
                raise TypeError(
                    f"cannot assign {type(value).__name__} as child module {name!r} (Module or None expected)"
                )
            self._modules[name] = None
        else:
            if _holds_trainables(value):
                raise TypeError(
                    f"{type(self).__name__}.{name}: a plain {type(value).__name__} holding modules or parameters "
                    "would not be registered (they would never train nor be saved); use nn.ModuleList, "
                    "nn.ModuleDict or nn.ParameterList"
                )
            object.__setattr__(self, name, value)

    def _drop(self, name: str) -> None:
        for d in (self._parameters, self._buffers, self._modules):
            d.pop(name, None)
        self.__dict__.pop(name, None)

    def __getattr__(self, name: str) -> Any:
        d = self.__dict__
        for store in ("_parameters", "_buffers", "_modules"):
            if store in d and name in d[store]:
                return d[store][name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name: str) -> None:
        for d in (self._parameters, self._buffers, self._modules):
            if name in d:
                del d[name]
                self._non_persistent.discard(name)
                return
        object.__delattr__(self, name)

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"cannot assign {type(param).__name__} as parameter {name!r} (Parameter or None expected)")
        self._check_name(name)
        self._drop(name)
        self._parameters[name] = param

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign {type(tensor).__name__} as buffer {name!r} (Tensor or None expected)")
        self._check_name(name)
        self._drop(name)
        self._buffers[name] = tensor
        if not persistent:
            self._non_persistent.add(name)

    def add_module(self, name: str, module: Module | None) -> None:
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        self._check_name(name)
        self._drop(name)
        self._modules[name] = module

    register_module = add_module

    @staticmethod
    def _check_name(name: str) -> None:
        if not isinstance(name, str) or not name or "." in name:
            raise KeyError(f"module, parameter and buffer names must be non-empty strings without '.', got {name!r}")

    # ------------------------------------------------------------------ traversal
    def named_modules(
        self, memo: set[int] | None = None, prefix: str = "", remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Module]]:
        """Every module of the tree (self first) with its dotted name, each once. Iterative (no recursion limit)."""
        seen: set[int] = set() if memo is None else memo
        stack: list[tuple[str, Module]] = [(prefix, self)]
        while stack:
            name, m = stack.pop()
            if remove_duplicate and id(m) in seen:
                continue
            seen.add(id(m))
            yield name, m
            kids = [(f"{name}.{k}" if name else k, c) for k, c in m._modules.items() if c is not None]
            stack.extend(reversed(kids))

    def modules(self) -> Iterator[Module]:
        for _, m in self.named_modules():
            yield m

    def named_children(self) -> Iterator[tuple[str, Module]]:
        seen: set[int] = set()
        for name, m in self._modules.items():
            if m is not None and id(m) not in seen:
                seen.add(id(m))
                yield name, m

    def children(self) -> Iterator[Module]:
        for _, m in self.named_children():
            yield m

    def _named_members(
        self, store: str, prefix: str, recurse: bool, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Tensor]]:
        seen: set[int] = set()
        mods = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse else [(prefix, self)]
        for mod_name, m in mods:
            for k, v in getattr(m, store).items():
                if v is None or (remove_duplicate and id(v) in seen):
                    continue
                seen.add(id(v))
                yield (f"{mod_name}.{k}" if mod_name else k), v

    def named_parameters(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Parameter]]:
        yield from self._named_members("_parameters", prefix, recurse, remove_duplicate)  # type: ignore[misc]

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Tensor]]:
        yield from self._named_members("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def apply(self, fn: Callable[[Module], None]) -> Module:
        """Call ``fn`` on every sub-module (children first) and then on self."""
        for m in reversed(list(self.modules())):
            fn(m)
        return self

    # ------------------------------------------------------------------ state
    def state_dict(
        self, destination: dict[str, Tensor] | None = None, prefix: str = "", keep_vars: bool = False
    ) -> dict[str, Tensor]:
        """Parameters and persistent buffers by dotted name (detached unless ``keep_vars``), in registration order."""
        out: dict[str, Tensor] = OrderedDict() if destination is None else destination
        for name, m in self.named_modules(prefix=prefix.rstrip(".")):
            dot = f"{name}." if name else ""
            for k, p in m._parameters.items():
                if p is not None:
                    out[dot + k] = p if keep_vars else p.detach()
            for k, b in m._buffers.items():
                if b is not None and k not in m._non_persistent:
                    out[dot + k] = b if keep_vars else b.detach()
        return out

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> IncompatibleKeys:
        """Copy values into this module's parameters and buffers (on their devices and dtypes).

        Mis-shaped entries always raise; missing and unexpected keys raise when ``strict`` (all listed at once),
        otherwise they are returned as ``(missing_keys, unexpected_keys)``.
        """
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict).__name__}")
        own = self.state_dict(keep_vars=True)
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        mis_shaped = []
        for k, dst in own.items():
            if k in state_dict:
                shape = tuple(np.shape(state_dict[k])) if not isinstance(state_dict[k], Tensor) else state_dict[k].shape
                if shape != dst.shape:
                    mis_shaped.append(
                        f"size mismatch for {k}: copying a param with shape {shape} from checkpoint, "
                        f"the shape in current model is {dst.shape}."
                    )
        errors = list(mis_shaped)
        if strict:
            if missing:
                errors.insert(0, "Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in missing) + ".")
            if unexpected:
                errors.insert(0, "Unexpected key(s) in state_dict: " + ", ".join(f'"{k}"' for k in unexpected) + ".")
        if errors:
            raise RuntimeError(f"Error(s) in loading state_dict for {type(self).__name__}:\n\t" + "\n\t".join(errors))
        with no_grad():
            for k, dst in own.items():
                if k in state_dict:
                    dst.copy_(state_dict[k])
        return IncompatibleKeys(missing, unexpected)

    # ------------------------------------------------------------------ modes, devices, grads
    def train(self, mode: bool = True) -> Module:
        if not isinstance(mode, bool):
            raise ValueError(f"training mode is expected to be boolean, got {mode!r}")
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self) -> Module:
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.parameters():
            if p.grad is not None:
                if set_to_none:
                    p.grad = None
                else:
                    with no_grad():
                        p.grad.zero_()

    def to(self, *args: Any, **kwargs: Any) -> Module:
        """Move (and/or cast floating) parameters and buffers in place: the Parameter objects stay the same, so an
        optimizer built before ``to`` keeps working."""

        def move(t: Tensor) -> None:
            kw = dict(kwargs)
            conv_args = tuple(a for a in args if t.dtype.is_floating or not _is_dtype(a))
            if not t.dtype.is_floating:
                kw.pop("dtype", None)
            new = t.detach().to(*conv_args, **kw)
            if new is not t and (new._view is not t._view or new._backend is not t._backend):
                t._view, t._backend = new._view, new._backend
            if t.grad is not None:
                t.grad = t.grad.to(*conv_args, **kw)

        for m in self.modules():
            for store in (m._parameters, m._buffers):
                for v in store.values():
                    if v is not None:
                        move(v)
        return self

    def cpu(self) -> Module:
        return self.to("cpu")

    def float(self) -> Module:
        return self.to(float32)

    def half(self) -> Module:
        return self.to(float16)

    def double(self) -> Module:
        return self.to(float64)

    # ------------------------------------------------------------------ repr and errors
    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        lines = [f"({name}): " + repr(m).replace("\n", "\n  ") for name, m in self._modules.items()]
        head = type(self).__name__ + "(" + self.extra_repr()
        if not lines:
            return head + ")"
        return head + "\n  " + "\n  ".join(lines) + "\n)"

    def _bad_input(self, expected: str, x: Tensor) -> ValueError:
        """The error for an input of the wrong shape, naming this layer, the expected and the actual shape."""
        return ValueError(
            f"{type(self).__name__}({self.extra_repr()}): expected input of shape {expected}, got {x.shape}"
        )


def _is_dtype(a: Any) -> bool:
    return isinstance(a, DType) or (isinstance(a, str) and a in ("float32", "float16", "float64", "int32"))
