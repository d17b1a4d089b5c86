"""Where a GPT training step's memory goes: vkblas against PyTorch, at the same configuration, by category.

One training step of nanoGPT's GPT (``vkblas.models.GPT``; PyTorch: tests/programs/nanogpt/model.py, eager fp32,
``F.scaled_dot_product_attention``), bias=False, dropout 0, AdamW, measured after a warm-up step (so AdamW's state
exists) with the gradients set to None first, as ``benchmarks/gpt_scale.py`` steps. Every number is bytes above the
*baseline* at the start of the step (weights and AdamW's two moments), except the last row:

* **held by the graph after forward**, by the op whose node holds it (attention, softmax/dropout, GELU, layer norm,
  linear inputs, embedding, cross-entropy, other: adds, views, copies), each storage counted once and the
  parameters not at all. vkblas: every tensor a node keeps (its saved tensors, its rule's closure, and, before the
  engine kept edges instead, its inputs). PyTorch: each node's ``_saved_*`` tensors, checked against the total of
  ``torch.autograd.graph.saved_tensors_hooks``.
* **live after forward**: all that is allocated then (the graph's tensors, the logits the caller holds, ...);
* **peak in forward / backward / optimizer step**, and the step's peak including the baseline.

How it is counted: vkblas's backend statistics (``memory_stats``: live storages; on Vulkan the pool's buckets, as
``vkblas.accelerator.max_memory_allocated``); PyTorch on CUDA ``torch.cuda.max_memory_allocated``, on the CPU the
profiler's allocation events (``profile_memory=True``), summed in time order. Memory is deterministic, so the
CPU's numbers are the GPU's up to allocator rounding; ``--preset h200-16th`` is the 1.2B configuration with every
size but the depth, heads and batch divided by 16, whose bytes are the 1.2B model's divided by 256 to within the
small per-row terms (each size is tokens x width, tokens x vocabulary, width x vocabulary or width^2 x layers).

    python3 benchmarks/gpt_memory.py                           # small: 2 layers, width 256, vocab 50304, on cpu
    python3 benchmarks/gpt_memory.py --preset h200-16th        # the 1.2B model's proportions, here
    python3 benchmarks/gpt_memory.py --preset h200 --device vulkan   # the GPU machine (PyTorch on CUDA)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import PhasePeaks, print_table  # noqa: E402

PRESETS: dict[str, dict[str, int]] = {
    "small": dict(n_layer=2, n_embd=256, n_head=8, vocab_size=50304, block_size=256, batch=4),
    "h200-16th": dict(n_layer=24, n_embd=128, n_head=16, vocab_size=3144, block_size=64, batch=8),
    "h200": dict(n_layer=24, n_embd=2048, n_head=16, vocab_size=50304, block_size=1024, batch=8),
}
#: a node's category: the first whose words appear in its name (lower case); the rest is "other"
CATEGORIES: list[tuple[str, tuple[str, ...]]] = [
    ("attention", ("attention",)),
    ("softmax / dropout", ("softmax", "dropout")),
    ("GELU", ("gelu",)),
    ("layer norm", ("layernorm", "rmsnorm")),
    ("linear inputs", ("mm",)),
    ("embedding", ("embedding", "gather", "index")),
    ("cross-entropy", ("nll", "crossentropy")),
    ("checkpointed blocks' inputs", ("checkpoint",)),
]
OTHER = "other (adds, views, copies)"
PHASES = ("forward", "backward", "optimizer step")


def category(node_name: str) -> str:
    name = node_name.lower()
    return next((c for c, words in CATEGORIES if any(w in name for w in words)), OTHER)


def batch(cfg: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    seq = np.random.default_rng(0).integers(0, cfg["vocab_size"], (cfg["batch"], cfg["block_size"] + 1))
    return np.ascontiguousarray(seq[:, :-1]), np.ascontiguousarray(seq[:, 1:])


def model_config(cfg: dict[str, int]) -> dict[str, Any]:
    keys = ("n_layer", "n_embd", "n_head", "vocab_size", "block_size")
    return {**{k: cfg[k] for k in keys}, "dropout": 0.0, "bias": False}


# ---------------------------------------------------------------- vkblas
def _tensors_in(obj: Any, tensor_type: type, depth: int = 0) -> Iterator[Any]:
    """The tensors ``obj`` refers to: itself, inside tuples, lists, dicts and objects' attributes, and in a
    function's closure (a checkpoint's rule holds its arguments that way)."""
    if isinstance(obj, tensor_type):
        yield obj
    elif depth >= 6 or isinstance(obj, (str, bytes, int, float, type)):
        return
    elif isinstance(obj, (tuple, list)):
        for o in obj:
            yield from _tensors_in(o, tensor_type, depth + 1)
    elif isinstance(obj, dict):
        for o in obj.values():
            yield from _tensors_in(o, tensor_type, depth + 1)
    elif isinstance(obj, types.FunctionType):
        for cell in obj.__closure__ or ():
            try:
                yield from _tensors_in(cell.cell_contents, tensor_type, depth + 1)
            except ValueError:  # an empty cell
                continue
    elif hasattr(obj, "__dict__") and not isinstance(obj, types.ModuleType):
        yield from _tensors_in(vars(obj), tensor_type, depth + 1)


def vkblas_graph_bytes(root: Any, exclude: set[int]) -> dict[str, int]:
    """Bytes of the storages the graph from ``root`` (a Node) holds, by category, each storage once; what a rule
    keeps (saved tensors, closure, extra) is counted before what a node holds only as its inputs."""
    from vkblas.tensor import Tensor

    nodes, stack, seen = [], [root], {id(root)}
    while stack:
        node = stack.pop()
        nodes.append(node)
        for child in node.next_nodes():
            if id(child) not in seen:
                seen.add(id(child))
                stack.append(child)
    counted, out = set(exclude), {}
    for pass_inputs in (False, True):
        for node in nodes:
            held = (node.inputs,) if pass_inputs else (node.saved, node.extra, node.rule)
            for t in _tensors_in(held, Tensor):
                st = t._view.storage
                if id(st) not in counted:
                    counted.add(id(st))
                    key = category(node.name) + (" (inputs held)" if pass_inputs else "")
                    out[key] = out.get(key, 0) + st.numel * st.dtype.itemsize
    return out


def run_vkblas(cfg: dict[str, int], device: str, checkpointing: bool) -> dict[str, Any]:
    import vkblas as vb
    from vkblas.models import GPT, GPTConfig

    vb.manual_seed(0)
    model = GPT(GPTConfig(**model_config(cfg), activation_checkpointing=checkpointing)).to(device)
    opt = model.configure_optimizers(0.1, 3e-4, (0.9, 0.95))
    x, y = (vb.tensor(a, device=device) for a in batch(cfg))
    exclude = {id(p._view.storage) for p in model.parameters()} | {id(b._view.storage) for b in model.buffers()}
    meter = PhasePeaks.of_backend(model.lm_head.weight._backend)

    def step(record: bool) -> None:  # the caller holds the logits until the step ends, as gpt_scale.py's does
        opt.zero_grad(set_to_none=True)
        meter.start()
        logits, loss = meter.measure("forward", lambda: model(x, y))
        if record:
            meter.live("live after forward")
            meter.res["graph"] = vkblas_graph_bytes(loss.grad_fn, exclude)
        meter.measure("backward", loss.backward)
        meter.measure("optimizer step", opt.step)

    step(False)  # the warm-up step: AdamW's state
    step(True)
    return meter.res


# ---------------------------------------------------------------- PyTorch
def torch_graph_bytes(loss: Any, exclude: set[int]) -> dict[str, int]:
    """Bytes of the storages PyTorch's graph saves (each node's ``_saved_*`` tensors), by category."""
    import torch

    nodes, stack, seen = [], [loss.grad_fn], {loss.grad_fn}
    while stack:
        node = stack.pop()
        nodes.append(node)
        for child, _ in node.next_functions:
            if child is not None and child not in seen:
                seen.add(child)
                stack.append(child)
    counted, out = set(exclude), {}
    for node in nodes:
        for attr in dir(node):
            if not attr.startswith("_saved_"):
                continue
            for t in _tensors_in(getattr(node, attr), torch.Tensor):
                st = t.untyped_storage()
                if st.data_ptr() not in counted:
                    counted.add(st.data_ptr())
                    key = category(node.name())
                    out[key] = out.get(key, 0) + st.nbytes()
    return out


def saved_by_hooks(fn: Callable[[], Any], exclude: set[int]) -> tuple[Any, int]:
    """``fn()`` under ``saved_tensors_hooks``, and the bytes of the distinct non-parameter storages it saved."""
    import torch

    saved: dict[int, int] = {}

    def pack(t: Any) -> Any:
        st = t.untyped_storage()
        if st.data_ptr() not in exclude:
            saved[st.data_ptr()] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return out, sum(saved.values())


class CpuAllocations:
    """The CPU allocator's bytes over time, from the profiler's allocation events, with phase marks."""

    def __init__(self) -> None:
        from torch.profiler import ProfilerActivity, profile

        self.prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)

    def phase(self, name: str) -> Any:
        from torch.profiler import record_function

        return record_function("phase:" + name)

    def peaks(self) -> dict[str, int]:
        """Per phase, the most bytes allocated at once above the level at the profile's start."""
        from torch._C._profiler import _EventType

        allocs, spans = [], {}
        stack = list(self.prof.profiler.kineto_results.experimental_event_tree())
        while stack:
            ev = stack.pop()
            stack.extend(ev.children)
            if ev.tag == _EventType.Allocation:
                allocs.append((ev.start_time_ns, ev.extra_fields.alloc_size))
            elif ev.name.startswith("phase:"):
                spans[ev.name[6:]] = (ev.start_time_ns, ev.end_time_ns)
        level, out = 0, {}
        for at, nbytes in sorted(allocs):
            level += nbytes
            for name, (lo, hi) in spans.items():
                if lo <= at <= hi:
                    out[name] = max(out.get(name, 0), level)
        out["live after forward"] = sum(n for at, n in allocs if at <= spans["forward"][1])
        return out


def run_torch(cfg: dict[str, int], checkpointing: bool) -> dict[str, Any]:
    import contextlib

    import torch
    from torch.utils.checkpoint import checkpoint

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    spec = importlib.util.spec_from_file_location("nanogpt_model", HERE.parent / "tests/programs/nanogpt/model.py")
    assert spec is not None and spec.loader is not None
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    torch.manual_seed(0)
    with torch.device(dev), contextlib.redirect_stdout(sys.stderr):
        model = ref.GPT(ref.GPTConfig(**model_config(cfg)))
        opt = model.configure_optimizers(0.1, 3e-4, (0.9, 0.95), dev)
    if checkpointing:
        for block in model.transformer.h:
            block.forward = lambda x, f=block.forward: checkpoint(f, x, use_reentrant=False)
    x, y = (torch.from_numpy(a).to(dev) for a in batch(cfg))
    exclude = {p.untyped_storage().data_ptr() for p in model.parameters()}
    res: dict[str, Any] = {}
    opt.zero_grad(set_to_none=True)
    model(x, y)[1].backward()  # the warm-up step: AdamW's state
    opt.step()
    opt.zero_grad(set_to_none=True)
    (cuda_step if dev == "cuda" else cpu_step)(model, opt, x, y, exclude, res, checkpointing)
    if checkpointing:  # reading a checkpointed node's saved tensors recomputes them: only the hooks' total counts
        res["graph"] = {"total (saved_tensors_hooks)": res["hooks"]}
    return res


def cuda_step(
    model: Any, opt: Any, x: Any, y: Any, exclude: set[int], res: dict[str, Any], checkpointing: bool
) -> None:
    import torch

    torch.cuda.synchronize()
    res["baseline"] = base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    (logits, loss), res["hooks"] = saved_by_hooks(lambda: model(x, y), exclude)
    res["forward"] = torch.cuda.max_memory_allocated() - base
    res["live after forward"] = torch.cuda.memory_allocated() - base
    res["graph"] = {} if checkpointing else torch_graph_bytes(loss, exclude)
    for phase, fn in (("backward", loss.backward), ("optimizer step", opt.step)):
        torch.cuda.reset_peak_memory_stats()
        fn()
        torch.cuda.synchronize()
        res[phase] = torch.cuda.max_memory_allocated() - base


def cpu_step(model: Any, opt: Any, x: Any, y: Any, exclude: set[int], res: dict[str, Any], checkpointing: bool) -> None:
    import torch

    mem = CpuAllocations()
    with mem.prof:
        with mem.phase("forward"):
            (logits, loss), res["hooks"] = saved_by_hooks(lambda: model(x, y), exclude)
        res["graph"] = {} if checkpointing else torch_graph_bytes(loss, exclude)
        with mem.phase("backward"):
            loss.backward()
        with mem.phase("optimizer step"):
            opt.step()
    res.update(mem.peaks())
    state = [t for s in opt.state.values() for t in s.values() if torch.is_tensor(t) and t.numel() > 1]
    res["baseline"] = sum(t.numel() * t.element_size() for t in [*model.parameters(), *state])


# ---------------------------------------------------------------- the table
def table(cfg: dict[str, int], results: dict[str, dict[str, Any]], unit: str) -> None:
    scale = {"MiB": 2**20, "GiB": 2**30}[unit]
    engines = list(results)
    keys = sorted({k for r in results.values() for k in r["graph"]}, key=lambda k: (k.endswith(")"), k))
    rows: list[list[Any]] = []

    def row(label: str, values: list[int]) -> None:
        cells = [round(v / scale, 1) for v in values]
        rows.append([label, *cells] + ([f"{cells[0] - cells[1]:+.1f}"] if len(cells) == 2 else []))

    for k in keys:
        row(f"held by the graph: {k}", [r["graph"].get(k, 0) for r in results.values()])
    row("held by the graph: total", [sum(r["graph"].values()) for r in results.values()])
    if "hooks" in results.get("PyTorch", {}):
        print(f"PyTorch's saved_tensors_hooks saw {results['PyTorch']['hooks'] / scale:.1f} {unit}")
    for k in ("live after forward", *PHASES):
        row(k if k == "live after forward" else f"peak: {k}", [r[k] for r in results.values()])
    row("step's peak, weights and AdamW state included",
        [r["baseline"] + max(r[p] for p in PHASES) for r in results.values()])  # fmt: skip
    header = ["bytes above weights + AdamW state", *engines] + (["vkblas - PyTorch"] if len(engines) == 2 else [])
    print_table(
        f"GPT {cfg['n_layer']} layers, width {cfg['n_embd']}, {cfg['n_head']} heads, vocab {cfg['vocab_size']}, "
        f"block {cfg['block_size']}, batch {cfg['batch']}: one training step, in {unit}",
        header,
        rows,
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", choices=sorted(PRESETS), default="small")
    for k in PRESETS["small"]:
        p.add_argument(f"--{k.replace('_', '-')}", dest=k, type=int, default=None, help=f"override the preset's {k}")
    p.add_argument("--engines", default="vkblas,torch", help="comma-separated: vkblas, torch")
    p.add_argument("--device", default="cpu", help="vkblas's device (cpu, vulkan)")
    p.add_argument("--checkpointing", action="store_true", help="checkpoint every block in both engines")
    p.add_argument("--unit", choices=("MiB", "GiB"), default=None)
    p.add_argument("--json", default=None, help="also write the results here")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    cfg = dict(PRESETS[args.preset])
    cfg.update({k: v for k in cfg if (v := getattr(args, k, None)) is not None})
    if args.child:  # one engine in a process of its own: its allocator holds nothing of the other's
        run = run_vkblas(cfg, args.device, args.checkpointing) if args.child == "vkblas" else None
        print("RESULT " + json.dumps(run if run is not None else run_torch(cfg, args.checkpointing)), flush=True)
        return 0
    results = {}
    for engine in args.engines.split(","):
        cmd = [sys.executable, __file__, "--child", engine, "--device", args.device]
        cmd += [f"--{k.replace('_', '-')}={v}" for k, v in cfg.items()] + (["--checkpointing"] * args.checkpointing)
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
        if line is None:
            print(f"{engine} failed:\n{proc.stdout}{proc.stderr}", file=sys.stderr)
            return 1
        results["vkblas" if engine == "vkblas" else "PyTorch"] = json.loads(line[7:])
    table(cfg, results, args.unit or ("GiB" if cfg["n_embd"] >= 1024 else "MiB"))
    if args.json:
        Path(args.json).write_text(json.dumps({"config": cfg, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
