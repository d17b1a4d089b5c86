"""Training a GPT of about 1.2B parameters on one GPU: vkblas on Vulkan against PyTorch (CUDA where present) in one
run, at the same configuration, batch, data and optimizer; fp32 weights, gradients and AdamW state in both.

Each engine trains in a child process of its own (so each one's peak memory is its own and the device is empty
for the next), for ``--steps`` steps or until its share of ``--budget`` seconds is spent, with and without
activation checkpointing of every block (``GPTConfig(activation_checkpointing=True)`` in vkblas,
``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)`` around each nanoGPT block in PyTorch). The table
gives tokens/s over the steps after the first (the first compiles kernels; both sync once a step, on the loss),
the peak memory (vkblas: the Vulkan pool's peak of live buffers, ``vkblas.accelerator.max_memory_allocated``;
PyTorch: ``torch.cuda.max_memory_allocated``), the time to build and initialise the model on the device, and the
loss at the first and last step.

* Model: nanoGPT's GPT (tests/programs/nanogpt/model.py in PyTorch, ``vkblas.models.GPT`` here: the same modules,
  initialisation and weight tying), bias=False, dropout 0. ``--preset h200``: 24 layers, d_model 2048, 16 heads,
  vocabulary 50304, block 1024 (1.21B parameters), batch 8 x 1024 tokens. ``--preset tiny``: 2 layers, d_model 64,
  vocabulary 50304, block 64, batch 2 (a CPU machine, lavapipe: the same code path, ratios meaningless).
* Data: Tiny Shakespeare (``$VKBLAS_DATA/tinyshakespeare/input.txt``) as bytes (token ids 0..255 of the 50304), the
  same random windows for every engine; without the file, random sequences with a learnable rule (``--data``).
* PyTorch: eager, fp32 with TF32 off (``allow_tf32 = False`` for matmul and cuDNN, matmul precision "highest"),
  ``F.scaled_dot_product_attention``, nanoGPT's AdamW (``fused=True`` on CUDA, its ``configure_optimizers``).
* vkblas: eager, ``F.scaled_dot_product_attention`` (fused kernels), AdamW of ``GPT.configure_optimizers``;
  the model is built on the device (``VKBLAS_DEVICE``), so 1.2B parameters initialise in seconds.
* ``--precision fp16`` (or ``both``): **fp16 mixed precision** runs, in a table of their own: vkblas's forward under
  ``vkblas.amp.autocast(device_type, dtype=float16)`` with ``vkblas.amp.GradScaler`` beside PyTorch's under
  ``torch.autocast(device_type, dtype=torch.float16)`` with ``torch.amp.GradScaler``; weights, gradients and AdamW
  state stay fp32 in both; the backward pass and the optimizer step run outside autocast, as PyTorch's recipe has
  it. What each computes in float16: vkblas's ``amp.py`` docstring; PyTorch's cuBLAS float16 GEMMs accumulate in
  float32 (split-K partial sums may be float16: ``allow_fp16_reduced_precision_reduction``, PyTorch's default).

The bound: ``--budget`` (default 290 s) is the whole command's wall time. Each of the runs (4 by default: two
engines, checkpointing off and on; times two with ``--precision both``) gets ``budget / (runs x 1.25)`` seconds
from its start (imports, initialisation and the compiling first step included), takes no step that would end
after that (two at least), and is killed at 1.25 times its share (its row then says so): the command ends within
``--budget`` seconds, on an H200 too.

    python3 benchmarks/gpt_scale.py --preset h200          # the GPU machine
    python3 benchmarks/gpt_scale.py --preset tiny           # here (vkblas on lavapipe, PyTorch on the CPU)
    python3 benchmarks/gpt_scale.py --preset h200 --checkpointing on --engines vkblas --steps 4
    python3 benchmarks/gpt_scale.py --preset h200 --precision both --checkpointing on --budget 230  # fp32 and fp16
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import print_table  # noqa: E402

PRESETS: dict[str, dict[str, Any]] = {
    "h200": dict(n_layer=24, n_embd=2048, n_head=16, vocab_size=50304, block_size=1024, batch=8, steps=8),
    "tiny": dict(n_layer=2, n_embd=64, n_head=2, vocab_size=50304, block_size=64, batch=2, steps=4),
}
LR, BETAS, WEIGHT_DECAY = 3e-4, (0.9, 0.95), 0.1
START = time.perf_counter()
#: a child is killed at this many times its share (so the whole command ends within --budget seconds)
KILL_AT = 1.25


# ---------------------------------------------------------------- data: the same batches for every engine
def load_tokens(kind: str) -> np.ndarray | None:
    """Tiny Shakespeare as byte tokens, or None for the synthetic rule (``kind``: auto, shakespeare, pattern)."""
    if kind == "pattern":
        return None
    path = Path(os.environ.get("VKBLAS_DATA", "data")) / "tinyshakespeare" / "input.txt"
    if path.exists():
        return np.frombuffer(path.read_bytes(), dtype=np.uint8).astype(np.int64)
    if kind == "shakespeare":
        raise SystemExit(f"--data shakespeare: {path} does not exist (set VKBLAS_DATA)")
    return None


def batch(tokens: np.ndarray | None, step: int, b: int, t: int) -> tuple[np.ndarray, np.ndarray]:
    """Inputs and next-token targets (b, t) for ``step``; the synthetic rule: x[i+1] = (5 x[i] + 3) mod 256."""
    rng = np.random.default_rng(1000 + step)
    if tokens is not None:
        starts = rng.integers(0, len(tokens) - t - 1, b)
        seq = np.stack([tokens[s : s + t + 1] for s in starts])
    else:
        seq = np.empty((b, t + 1), np.int64)
        seq[:, 0] = rng.integers(0, 256, b)
        for i in range(t):
            seq[:, i + 1] = (5 * seq[:, i] + 3) % 256
    return np.ascontiguousarray(seq[:, :-1]), np.ascontiguousarray(seq[:, 1:])


# ---------------------------------------------------------------- one engine, in a child process
def run_vkblas(cfg: dict[str, Any], args: argparse.Namespace, tokens: np.ndarray | None) -> dict[str, Any]:
    os.environ["VKBLAS_DEVICE"] = args.device  # build and initialise the parameters on the device
    import vkblas as vb
    from vkblas.models import GPT, GPTConfig

    dev = args.device
    t0 = time.perf_counter()
    vb.manual_seed(0)
    model = GPT(GPTConfig(**model_config(cfg), activation_checkpointing=args.ck == "on"))
    assert str(model.lm_head.weight.device).startswith(dev.split(":")[0])
    opt = model.configure_optimizers(WEIGHT_DECAY, LR, BETAS)
    vb.synchronize(dev)
    init_s = time.perf_counter() - t0
    vb.accelerator.reset_peak_memory_stats(dev)
    fp16 = args.amp == "on"
    kind = "cpu" if dev == "cpu" else "vulkan"
    scaler = vb.amp.GradScaler(kind, enabled=fp16)

    def step(i: int) -> float:
        x, y = batch(tokens, i, cfg["batch"], cfg["block_size"])
        with vb.amp.autocast(kind, dtype=vb.float16, enabled=fp16):
            _, loss = model(vb.tensor(x, device=dev), vb.tensor(y, device=dev))
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)  # fp32: opt.step(); fp16: unless a gradient overflowed (its check is one more sync)
        scaler.update()
        return loss.item()  # the step's one sync

    runtime = getattr(model.lm_head.weight._backend, "rt", None)  # the Vulkan runtime counts dispatches
    out = train(step, args, counter=(lambda: runtime.dispatches) if runtime is not None else None)
    out.update(init_s=init_s, peak_bytes=vb.accelerator.max_memory_allocated(dev), params=model.get_num_params())
    out.update(loss_scale=scaler.get_scale() if fp16 else None)
    return out


def run_torch(cfg: dict[str, Any], args: argparse.Namespace, tokens: np.ndarray | None) -> dict[str, Any]:
    import torch
    from torch.utils.checkpoint import checkpoint

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    spec = importlib.util.spec_from_file_location("nanogpt_model", HERE.parent / "tests/programs/nanogpt/model.py")
    assert spec is not None and spec.loader is not None
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    t0 = time.perf_counter()
    torch.manual_seed(0)
    with torch.device(dev), contextlib.redirect_stdout(sys.stderr):  # initialised on the device, as vkblas's
        model = ref.GPT(ref.GPTConfig(**model_config(cfg)))
        opt = model.configure_optimizers(WEIGHT_DECAY, LR, BETAS, dev)
    if args.ck == "on":
        for block in model.transformer.h:
            block.forward = lambda x, f=block.forward: checkpoint(f, x, use_reentrant=False)
    if dev == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    init_s = time.perf_counter() - t0
    fp16 = args.amp == "on"
    scaler = torch.amp.GradScaler(dev, enabled=fp16)

    def step(i: int) -> float:
        x, y = batch(tokens, i, cfg["batch"], cfg["block_size"])
        with torch.autocast(device_type=dev, dtype=torch.float16, enabled=fp16):
            _, loss = model(torch.from_numpy(x).to(dev), torch.from_numpy(y).to(dev))
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss.item()

    out = train(step, args)
    peak = torch.cuda.max_memory_allocated() if dev == "cuda" else None
    out.update(init_s=init_s, peak_bytes=peak, params=model.get_num_params(), device=dev)
    out.update(loss_scale=scaler.get_scale() if fp16 else None)
    return out


def model_config(cfg: dict[str, Any]) -> dict[str, Any]:
    keys = ("n_layer", "n_embd", "n_head", "vocab_size", "block_size")
    return {**{k: cfg[k] for k in keys}, "dropout": 0.0, "bias": False}


def train(step: Any, args: argparse.Namespace, counter: Any = None) -> dict[str, Any]:
    """Step 0 (compiles), then steps until ``args.steps``, or until another step would end after the child's time
    share (counted from its start, import and initialisation included); tokens/s over the steps after step 0, and,
    with ``counter`` (the device's dispatch count), dispatches per step over the same steps."""
    losses = [step(0)]
    first = counter() if counter is not None else None
    t0 = last = time.perf_counter()
    per_step = 0.0
    while len(losses) < args.steps and (len(losses) < 2 or last + per_step < START + args.share):
        losses.append(step(len(losses)))
        now = time.perf_counter()
        per_step, last = now - last, now
    elapsed = time.perf_counter() - t0
    timed = len(losses) - 1
    dispatches = (counter() - first) / timed if counter is not None and timed else None
    return {"losses": losses, "timed_steps": timed, "step_s": elapsed / timed if timed else math.nan,
            "dispatches": dispatches}  # fmt: skip


# ---------------------------------------------------------------- the parent: one child per run, one table
def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    for k in ("n_layer", "n_embd", "n_head", "vocab_size", "block_size", "batch", "steps"):
        p.add_argument(f"--{k.replace('_', '-')}", dest=k, type=int, default=None, help=f"override the preset's {k}")
    p.add_argument("--engines", default="vkblas,torch", help="comma-separated: vkblas, torch")
    p.add_argument("--checkpointing", choices=("on", "off", "both"), default="both")
    p.add_argument(
        "--precision",
        choices=("fp32", "fp16", "both"),
        default="fp32",
        help="fp32, fp16 mixed precision (autocast float16 + GradScaler in both engines), or both (separate tables)",
    )
    p.add_argument("--device", default="vulkan", help="vkblas's device (default: vulkan)")
    p.add_argument("--data", choices=("auto", "shakespeare", "pattern"), default="auto")
    p.add_argument("--budget", type=float, default=290.0, help="seconds for the whole command, shared by the runs")
    p.add_argument("--json", default=None, help="also write the results here")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)  # engine name: run one engine and print JSON
    p.add_argument("--ck", default="off", help=argparse.SUPPRESS)
    p.add_argument("--amp", default="off", help=argparse.SUPPRESS)
    p.add_argument("--share", type=float, default=60.0, help=argparse.SUPPRESS)
    args = p.parse_args()
    cfg = dict(PRESETS[args.preset])
    cfg.update({k: v for k in cfg if (v := getattr(args, k, None)) is not None})
    args.steps = max(2, cfg["steps"])
    if args.child:
        tokens = load_tokens(args.data)
        out = (run_vkblas if args.child == "vkblas" else run_torch)(cfg, args, tokens)
        out["data"] = "tinyshakespeare bytes" if tokens is not None else "synthetic rule"
        print("RESULT " + json.dumps(out), flush=True)
        return 0

    modes = ["off", "on"] if args.checkpointing == "both" else [args.checkpointing]
    precisions = ["fp32", "fp16"] if args.precision == "both" else [args.precision]
    runs = [(e, m, p) for p in precisions for m in modes for e in args.engines.split(",")]
    share = args.budget / (len(runs) * KILL_AT)  # a run stops stepping after its share, is killed at 1.25 x
    n_params = 12 * cfg["n_layer"] * cfg["n_embd"] ** 2 + cfg["vocab_size"] * cfg["n_embd"]
    print(
        f"GPT {cfg['n_layer']} layers, d_model {cfg['n_embd']}, {cfg['n_head']} heads, vocab {cfg['vocab_size']}, "
        f"block {cfg['block_size']} (~{n_params / 1e9:.2f}B parameters), batch {cfg['batch']} x {cfg['block_size']}, "
        f"AdamW lr {LR}, {' and '.join(PRECISION[p] for p in precisions)}; up to {args.steps} steps or {share:.0f} s "
        f"per run (the whole: <= {args.budget:.0f} s)",
        flush=True,
    )
    results: list[dict[str, Any]] = []
    base = [sys.executable, str(Path(__file__).resolve()), "--preset", args.preset, "--data", args.data]
    base += [f"--{k.replace('_', '-')}={cfg[k]}" for k in cfg]
    base += ["--device", args.device, "--share", str(share)]
    for engine, ck, precision in runs:
        t0 = time.perf_counter()
        amp = "on" if precision == "fp16" else "off"
        try:
            proc = subprocess.run(
                [*base, "--child", engine, "--ck", ck, "--amp", amp],
                capture_output=True,
                text=True,
                timeout=KILL_AT * share,
            )
            line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
            res = json.loads(line[7:]) if line else {"error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
        except subprocess.TimeoutExpired:
            res = {"error": f"killed after {KILL_AT * share:.0f} s (--budget)"}
        res.update(engine=engine, checkpointing=ck, precision=precision, wall_s=time.perf_counter() - t0)
        results.append(res)
    for precision in precisions:  # one table per precision: fp16 rows never sit among the fp32 ones
        mine = [r for r in results if r["precision"] == precision]
        print_table(
            f"GPT training step, one GPU, {PRECISION[precision]} (tokens/s over the steps after the first; peak: "
            "tensors' memory)",
            COLUMNS,
            [row(r, cfg) for r in mine],
        )
        ratios = compare(mine)
        if ratios:
            print_table(
                f"vkblas / PyTorch at the same checkpointing, {PRECISION[precision]}",
                ["ckpt", "tokens/s ratio", "peak ratio"],
                ratios,
            )
    if args.json:
        Path(args.json).write_text(json.dumps({"config": cfg, "results": results}, indent=1))
    return 0 if all("error" not in r for r in results) else 1


PRECISION = {"fp32": "fp32", "fp16": "fp16 mixed precision"}
COLUMNS = ["engine", "ckpt", "tokens/s", "s/step", "steps", "peak GiB", "dispatches/step", "init s", "loss first",
           "loss last", "run s"]  # fmt: skip


def row(res: dict[str, Any], cfg: dict[str, Any]) -> list[Any]:
    name = res["engine"] if res["engine"] == "vkblas" else f"torch {res.get('device', '')}".strip()
    if res["precision"] == "fp16":
        name += " (fp16 mixed precision)"
    if "error" in res:
        return [name, res["checkpointing"], "failed: " + res["error"][:60], "", "", "", "", "", "", "", res["wall_s"]]
    tok = cfg["batch"] * cfg["block_size"] / res["step_s"]
    peak = "n/a (cpu)" if res["peak_bytes"] is None else res["peak_bytes"] / 2**30
    losses = res["losses"]
    disp = "" if res.get("dispatches") is None else f"{res['dispatches']:.0f}"
    return [name, res["checkpointing"], tok, res["step_s"], len(losses), peak, disp, res["init_s"], losses[0],
            losses[-1], res["wall_s"]]  # fmt: skip


def compare(results: list[dict[str, Any]]) -> list[list[Any]]:
    out = []
    for ck in ("off", "on"):
        got = {r["engine"]: r for r in results if r["checkpointing"] == ck and "error" not in r}
        if "vkblas" in got and "torch" in got:
            v, t = got["vkblas"], got["torch"]
            peak = v["peak_bytes"] / t["peak_bytes"] if t["peak_bytes"] else "n/a"
            out.append([ck, t["step_s"] / v["step_s"], peak])
    return out


if __name__ == "__main__":
    sys.exit(main())
