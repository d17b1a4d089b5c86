"""The shape of the code: no import circle anywhere under src/vkblas, layers that import only downwards, and no
concrete backend named outside ``backend/``.

Every ``import`` / ``from ... import`` of every module is read with ``ast``, inside functions too: a lazy import
closes a circle as surely as one at the top, it only moves the failure to run time. Imports under
``if TYPE_CHECKING:`` never run (annotations only) and are not counted. An edge goes to the module named
(``from .x import y`` to ``x.y`` when that is a module, else to ``x``); importing a submodule also runs its
package's ``__init__``, which counts as a module of its own, as in import-linter.

``bench/`` measures concrete backends (copy bandwidth, GEMM speed), so it may import them; it sits at the top with
the CLI, and nothing but the CLI imports it.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import vkblas
from vkblas.ops import elementwise, unary_math
from vkblas.ops.record import RECORDS

SRC = Path(vkblas.__file__).resolve().parent
PKG = "vkblas"

# Lowest first; a module may import its own layer and the ones below. autograd imports nothing of vkblas (the
# Tensor hands it the seed gradient), so tensor.py can import it; graphs and device know only the backend contract.
LAYERS: list[set[str]] = [
    {"dtypes", "random", "version"},
    {"backend"},
    {"device", "graphs", "autograd", "accelerator"},
    {"tensor"},
    {"ops"},
    {"creation"},
    {"nn", "optim", "data", "io", "gradcheck", "pickling", "jit", "utils", "amp"},
    {"models"},
    {"training"},
    {"distributed"},  # reuses training's run definition, models and datasets
    # "": the package root, which re-exports everything; compat: the PyTorch shim of `vkblas run`, which re-exports it
    {"cli", "bench", "__main__", "", "compat", "run"},
]
CONCRETE_BACKENDS = ("vkblas.backend.cpu", "vkblas.backend.vulkan")


def _module_name(path: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    return ".".join(parts[:-1] if is_package else parts), is_package


@cache
def modules() -> dict[str, tuple[Path, bool]]:
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        name, is_package = _module_name(path)
        found[name] = (path, is_package)
    return found


def _runtime_imports(tree: ast.AST) -> list[tuple[ast.Import | ast.ImportFrom, bool]]:
    """(import node, inside a function) for every import that can run, skipping ``if TYPE_CHECKING:`` bodies."""
    found: list[tuple[ast.Import | ast.ImportFrom, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child, in_function)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append((node, in_function))
        inner = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(tree, False)
    return found


def _targets(module: str, is_package: bool, node: ast.Import | ast.ImportFrom) -> list[str]:
    mods = modules()
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        if node.level:
            base = module.split(".") if is_package else module.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)]
            prefix = ".".join(base + ([node.module] if node.module else []))
        else:
            prefix = node.module or ""
        names = [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in mods else prefix for a in node.names]
    out = []
    for name in names:
        if name.split(".")[0] != PKG:
            continue
        while name not in mods and "." in name:  # `import vkblas.x.y` of a name inside a module
            name = name.rsplit(".", 1)[0]
        out.append(name)
    return out


def _parse(path: Path) -> ast.Module:
    """``ast.parse`` of a module, asked twice at most: CPython 3.11 before 3.11.8 can raise a spurious
    ``SystemError: AST constructor recursion depth mismatch`` (python/cpython#106905, seen once in a full run here,
    with earlier tests' threads alive); each call starts its count afresh, so a second one answers."""
    source = path.read_text()
    try:
        return ast.parse(source, str(path))
    except SystemError as e:
        if "recursion depth mismatch" not in str(e):
            raise
        return ast.parse(source, str(path))


@cache
def graph() -> dict[str, dict[str, bool]]:
    """module -> {imported module: whether every import of it is inside a function}."""
    edges: dict[str, dict[str, bool]] = {}
    for name, (path, is_package) in modules().items():
        out: dict[str, bool] = {}
        for node, lazy in _runtime_imports(_parse(path)):
            for target in _targets(name, is_package, node):
                if target != name:
                    out[target] = out.get(target, True) and lazy
        edges[name] = out
    return edges


def _cycles(edges: dict[str, dict[str, bool]]) -> list[list[str]]:
    """Strongly connected components with more than one module (iterative Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges.get(child, {}))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        m = stack.pop()
                        on_stack.discard(m)
                        component.append(m)
                        if m == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def _layer(module: str) -> int:
    top = module.split(".")[1] if "." in module else ""
    for i, names in enumerate(LAYERS):
        if top in names:
            return i
    raise AssertionError(f"{module} belongs to no layer: place vkblas.{top} in LAYERS of tests/test_architecture.py")


def test_the_parser_sees_every_kind_of_import() -> None:
    edges = graph()
    assert len(edges) > 60 and sum(len(e) for e in edges.values()) > 200
    # a lazy import (inside a function) and a TYPE_CHECKING one that must not count
    assert edges["vkblas.backend"].get("vkblas.backend.vulkan") is True
    assert "vkblas.tensor" not in edges["vkblas.autograd"]
    assert _cycles({"a": {"b": False}, "b": {"c": True}, "c": {"a": False}, "d": {"a": False}}) == [["a", "b", "c"]]


def test_no_import_circles() -> None:
    cycles = _cycles(graph())
    assert not cycles, "import circles (lazy imports count): " + "; ".join(" <-> ".join(c) for c in cycles)


def test_layers_import_only_downwards() -> None:
    wrong = [
        f"{m} (layer {_layer(m)}) imports {t} (layer {_layer(t)}){' lazily' if lazy else ''}"
        for m, targets in graph().items()
        for t, lazy in targets.items()
        if _layer(t) > _layer(m)
    ]
    assert not wrong, "upward imports:\n" + "\n".join(wrong)


def test_only_backend_and_bench_import_concrete_backends() -> None:
    wrong = [
        f"{m} imports {t}"
        for m, targets in graph().items()
        for t in targets
        if t.startswith(CONCRETE_BACKENDS) and not m.startswith(("vkblas.backend", "vkblas.bench"))
    ]
    assert not wrong, "only backend/ (and bench/, which measures backends) may name a concrete backend:\n" + "\n".join(
        wrong
    )


def test_only_the_cli_imports_bench() -> None:
    wrong = [
        f"{m} imports {t}"
        for m, targets in graph().items()
        for t in targets
        if t.startswith("vkblas.bench") and not m.startswith(("vkblas.bench", "vkblas.cli"))
    ]
    assert not wrong, "\n".join(wrong)


def test_no_names_made_by_globals() -> None:
    """Names are written out where readers and IDEs look for them (no ``globals().update``). ``compat/`` is exempt:
    its modules are facades that stand for whole PyTorch modules under ``vkblas run`` (they re-export a vkblas
    module's public names, and readers look those up in PyTorch's documentation, not here)."""
    wrong = [
        f"{path.relative_to(SRC)}:{node.lineno}"
        for name, (path, _) in modules().items()
        if not name.startswith(f"{PKG}.compat")
        for node in ast.walk(_parse(path))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "globals"
    ]
    assert not wrong, wrong


def test_vkblas_exports_exactly_the_exported_records() -> None:
    """``vkblas`` star-imports the record modules (ops/elementwise.py, ops/unary_math.py): their public names must
    be the records marked ``export``, each defined in one of them."""
    public = [n for module in (elementwise, unary_math) for n in vars(module) if not n.startswith("_")]
    exported = {r.name for r in RECORDS.values() if r.export}
    assert len(public) == len(set(public)) and set(public) == exported
    assert all(getattr(vkblas, n) is RECORDS[n].function for n in exported)
