"""The ``vkblas`` command: ``info``, ``train``, ``eval``, ``sample``, ``run``, ``bench`` and ``distributed``. Run
``vkblas COMMAND --help``.

Bad arguments exit with code 2 and one line on stderr; failures (data not found, device errors) with code 1 and one
line (set ``VKBLAS_DEBUG=1`` for the traceback).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad argument is one line on stderr (and exit code 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _number(convert: Callable[[str], Any], ok: Callable[[Any], bool], expected: str) -> Callable[[str], Any]:
    """An argparse type: ``convert(text)``, refused with "expected ``expected``, got …" unless ``ok``."""

    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {value}")
        return value

    return parse


_positive_int = _number(int, lambda v: v >= 1, "a positive integer")
_nonnegative_int = _number(int, lambda v: v >= 0, "an integer >= 0")
_positive_float = _number(float, lambda v: v > 0, "a positive number")
_fraction = _number(float, lambda v: 0 < v <= 1, "a number in (0, 1]")


def _device(text: str) -> str:
    from .backend import parse

    try:
        parse(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


# ---------------------------------------------------------------------------------------------------- commands
def cmd_info(args: argparse.Namespace) -> int:
    import vkblas

    info = vkblas.info()
    info["devices"] = vkblas.devices()
    if args.json:
        print(json.dumps(info, indent=2, default=str))
        return 0
    print(f"vkblas {vkblas.__version__}")
    print(f"default device: {info['default_device']} ({info['why']})")
    print(f"devices: {', '.join(info['devices'])}")
    adapters = info.get("adapters") or []
    if not adapters:
        print("Vulkan adapters: none (install a Vulkan driver; on a machine without a GPU, Mesa's lavapipe)")
    for i, adapter in enumerate(adapters):
        print(f"vulkan:{i}")
        for key, value in adapter.items():
            print(f"  {key}: {_short(value)}")
    for key, value in info.items():
        if key not in ("default_device", "why", "adapters", "devices"):
            print(f"{key}: {_short(value)}")
    return 0


def _short(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, (list, tuple, set)):
        return ", ".join(str(v) for v in value)
    return str(value)


def cmd_train(args: argparse.Namespace) -> int:
    from .training import TrainConfig, fit
    from .training.text import TEXT_DATASETS

    given = [f"--{k.replace('_', '-')}" for k in DISTRIBUTED if getattr(args, k) not in (None, False)]
    if args.workers is None and given:
        return _usage("train", f"{', '.join(given)} need(s) --workers (training on several workers)")
    if args.workers is not None and args.device is not None:
        return _usage("train", "--device and --workers exclude each other: name the devices in --workers")
    if args.dataset in TEXT_DATASETS:
        if args.workers is not None:
            return _usage("train", f"--workers trains mnist or fashion-mnist; {args.dataset} trains on one device")
        return _train_text(args)
    if args.amp is not None:
        return _usage("train", f"--amp trains the GPT of shakespeare-char; {args.dataset} trains in float32")
    if args.model not in (None, "mlp", "cnn"):
        raise ValueError(f"{args.dataset} trains an mlp or a cnn, not {args.model!r}")
    args.model = args.model or "mlp"
    out = args.out or f"runs/{args.dataset}-{args.model}"
    cfg = TrainConfig(
        dataset=args.dataset,
        model=args.model,
        epochs=args.epochs,
        batch_size=args.batch_size or 128,
        lr=args.lr,
        optimizer=args.optimizer or "adam",
        device=args.device,
        seed=args.seed if args.seed is not None else 0,
        out=out,
        limit=args.limit,
        data=args.data,
        download=args.download,
        progress=not args.quiet,
        graph=not args.no_graph,
    )
    if args.workers is not None:
        return _train_on_workers(args, cfg)
    metrics = fit(cfg)
    print(
        f"test accuracy {100 * metrics['test_accuracy']:.2f}% on {metrics['device']} after {cfg.epochs} epoch(s); "
        f"wrote {out}/model.safetensors, metrics.json, curves.png"
    )
    return 0


def _train_text(args: argparse.Namespace) -> int:
    from .training.text import TextTrainConfig, fit_text

    if args.model not in (None, "gpt"):
        raise ValueError(f"{args.dataset} trains a gpt, not {args.model!r}")
    if args.optimizer not in (None, "adamw"):
        raise ValueError(f"{args.dataset} trains with adamw (nanoGPT's), not {args.optimizer!r}")
    given = {
        "batch_size": args.batch_size,
        "lr": args.lr,
        "min_lr": args.lr / 10 if args.lr is not None else None,  # nanoGPT's ratio
        "iters": args.iters,
        "eval_interval": args.eval_interval,
        "eval_iters": args.eval_iters,
        "block_size": args.block_size,
        "n_layer": args.n_layer,
        "n_head": args.n_head,
        "n_embd": args.n_embd,
        "dropout": args.dropout,
        "amp": args.amp,
        "save": args.save,
    }
    cfg = TextTrainConfig(
        dataset=args.dataset,
        device=args.device,
        seed=args.seed if args.seed is not None else TextTrainConfig.seed,
        out=args.out or f"runs/{args.dataset}-gpt",
        data=args.data,
        progress=not args.quiet,
        graph=not args.no_graph,
        **{k: v for k, v in given.items() if v is not None},
    )
    metrics = fit_text(cfg)
    print(
        f"val loss {metrics['val_loss']:.4f} (train {metrics['train_loss']:.4f}) on {metrics['device']} after "
        f"{cfg.iters} iterations; wrote {cfg.out}/model.safetensors, metrics.json, curves.png"
    )
    return 0


#: the ``vkblas train`` options of training on several workers (None / False: not given)
DISTRIBUTED = (
    "algorithm",
    "max_staleness",
    "sync_apply",
    "inner_steps",
    "outer_lr",
    "outer_momentum",
    "round_quorum",
    "round_deadline",
    "codec",
    "codec_block",
    "error_feedback",
    "batch_per_worker",
    "threads_per_worker",
)


def _usage(command: str, message: str) -> int:
    print(f"vkblas {command}: error: {message} (see vkblas {command} --help)", file=sys.stderr)
    return EXIT_USAGE


def _train_on_workers(args: argparse.Namespace, train: Any) -> int:
    from .distributed.local import LocalConfig, parse_workers, run_local

    try:
        options = {k: getattr(args, k) for k in DISTRIBUTED if getattr(args, k) not in (None, False)}
        cfg = LocalConfig(train, parse_workers(args.workers), **options)
    except ValueError as e:
        return _usage("train", str(e))
    metrics = run_local(cfg)
    run = metrics["run"]["totals"]
    print(
        f"test accuracy {100 * metrics['test_accuracy']:.2f}% with {cfg.algorithm} on {metrics['device']} after "
        f"{train.epochs} epoch(s), {metrics['samples_per_s']:,.0f} samples/s, updates accepted/stale/rejected "
        f"{run['accepted']}/{run['stale']}/{run['rejected']}; wrote {train.out}/model.safetensors, metrics.json, "
        "curves.png"
    )
    return 0


def cmd_sample(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .creation import tensor
    from .dtypes import int32
    from .random import manual_seed
    from .training.text import load_gpt

    model, vocab, _ = load_gpt(args.checkpoint, device=args.device)
    start = args.start.replace("\\n", "\n").replace("\\t", "\t")  # a typed \\n is a newline
    if start.startswith("FILE:"):
        start = Path(start[5:]).read_text(encoding="utf-8")
    if not start:
        raise ValueError("--start must not be empty: the model continues a text")
    x = tensor(vocab.encode(start)[None, :], dtype=int32, device=model.lm_head.weight.device)
    manual_seed(args.seed)
    for k in range(args.num_samples):
        y = model.generate(x, args.max_new_tokens, temperature=args.temperature, top_k=args.top_k)
        print(vocab.decode(y[0].tolist()))
        if k + 1 < args.num_samples:
            print("---------------")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from .training import evaluate_checkpoint
    from .training.checkpoint import read_info

    if read_info(args.checkpoint).get("task") == "text":
        return _eval_text(args)

    result, info = evaluate_checkpoint(
        args.checkpoint,
        device=args.device,
        data=args.data,
        limit=args.limit,
        batch_size=args.batch_size,
        progress=not args.quiet,
        download=args.download,
    )
    cfg = info["config"]
    if args.json:
        print(
            json.dumps(
                {
                    "test_accuracy": result.accuracy,
                    "test_loss": result.loss,
                    "samples": result.samples,
                    "samples_per_s": result.samples_per_s,
                    "trained": info,
                },
                indent=2,
            )
        )
    else:
        print(
            f"{cfg['model']} on {cfg['dataset']} test ({result.samples} images): accuracy "
            f"{100 * result.accuracy:.2f}%, loss {result.loss:.4f}, {result.samples_per_s:,.0f} samples/s "
            f"(at training: {100 * info['test_accuracy']:.2f}%)"
        )
    return 0


def _eval_text(args: argparse.Namespace) -> int:
    from .training.text import evaluate_text_checkpoint

    losses, info = evaluate_text_checkpoint(args.checkpoint, device=args.device, data=args.data)
    if args.json:
        print(json.dumps({**losses, "trained": info}, indent=2))
    else:
        print(
            f"gpt on {info['config']['dataset']}: val loss {losses['val_loss']:.4f}, train loss "
            f"{losses['train_loss']:.4f} (at training: val {info['val_loss']:.4f})"
        )
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from .compat import run_script

    return run_script(args.script, args.args, device=args.device)


def cmd_bench(args: argparse.Namespace) -> int:
    if args.what == "gemm":
        try:
            from .bench.gemm import main as gemm_main  # type: ignore[import-not-found]
        except ImportError:
            print(
                "vkblas bench: error: the GEMM benchmark (vkblas.bench.gemm) is not available in this build",
                file=sys.stderr,
            )
            return 1
        return int(gemm_main(args.rest) or 0)
    if args.what == "conv":
        from .bench.conv import main as conv_main

        return int(conv_main(args.rest) or 0)
    if args.what == "gemm-variants":
        from .bench.gemm_variants import main as variants_main

        return int(variants_main(args.rest) or 0)
    from .training.compare import main as train_main

    return int(train_main(args.rest) or 0)


# ---------------------------------------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    from .training import DATASETS, MODELS
    from .training.fit import OPTIMIZERS
    from .training.text import TEXT_DATASETS, TEXT_MODELS

    parser = _Parser(prog="vkblas", description="vkblas: train models on any GPU through Vulkan.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    info = sub.add_parser("info", help="adapters, backend, driver, features, limits and the default device")
    info.add_argument("--json", action="store_true", help="print the information as JSON")
    info.set_defaults(func=cmd_info)

    train = sub.add_parser(
        "train",
        help="train a classifier on MNIST or Fashion-MNIST",
        description="Train, evaluating on the test set each epoch; writes model.safetensors, "
        "metrics.json and curves.png into --out.",
    )
    train.add_argument("dataset", choices=sorted(DATASETS) + sorted(TEXT_DATASETS))
    train.add_argument(
        "--model", choices=[*MODELS, *TEXT_MODELS], default=None, help="default: mlp; gpt for shakespeare-char"
    )
    train.add_argument("--epochs", type=_positive_int, default=10)
    train.add_argument(
        "--batch-size", type=_positive_int, default=None, help="default: 128; 64 blocks for shakespeare-char"
    )
    train.add_argument(
        "--lr",
        type=_positive_float,
        default=None,
        help="peak learning rate, decayed by a cosine (default: 1e-3 for adam/adamw, 0.05 for sgd)",
    )
    train.add_argument("--optimizer", choices=OPTIMIZERS, default=None, help="default: adam; adamw for gpt")
    train.add_argument(
        "--seed", type=int, default=None, help="seeds the initial weights and the data order (default: 0; gpt: 1337)"
    )
    train.add_argument("--out", default=None, help="output directory (default: runs/DATASET-MODEL)")
    train.add_argument(
        "--limit",
        type=_positive_int,
        default=None,
        help="use only the first N images of the training and of the test split",
    )
    train.add_argument(
        "--no-graph",
        action="store_true",
        help="run every training step eagerly instead of replaying a captured graph (Vulkan devices)",
    )
    gpt = train.add_argument_group("shakespeare-char (a GPT; defaults: nanoGPT's shakespeare_char config)")
    gpt.add_argument("--iters", type=_positive_int, default=None, help="training iterations (default: 5000)")
    gpt.add_argument("--eval-interval", type=_positive_int, default=None, help="iterations between loss estimates")
    gpt.add_argument("--eval-iters", type=_positive_int, default=None, help="batches per loss estimate (200)")
    gpt.add_argument("--block-size", type=_positive_int, default=None, help="context length (256)")
    gpt.add_argument("--n-layer", type=_positive_int, default=None, help="transformer blocks (6)")
    gpt.add_argument("--n-head", type=_positive_int, default=None, help="attention heads (6)")
    gpt.add_argument("--n-embd", type=_positive_int, default=None, help="embedding width (384)")
    gpt.add_argument("--dropout", type=float, default=None, help="dropout probability (0.2)")
    gpt.add_argument(
        "--save",
        choices=["best", "last"],
        default=None,
        help="the checkpoint: the weights of the evaluation with the lowest validation loss (default, as nanoGPT's "
        "shakespeare_char config: the model overfits), or the last ones",
    )
    gpt.add_argument(
        "--amp",
        choices=["float16"],
        default=None,
        help="fp16 mixed precision: matrix products in float16 under vkblas.amp.autocast, dynamic loss scaling "
        "(GradScaler), float32 weights and AdamW state; steps run eagerly (default: float32 throughout)",
    )
    _common(train)
    _distributed(train)
    train.set_defaults(func=cmd_train)

    sample = sub.add_parser(
        "sample",
        help="print text generated by a GPT checkpoint of 'vkblas train shakespeare-char'",
        description="Continue --start with tokens drawn from the model (temperature, top-k).",
    )
    sample.add_argument("checkpoint", help="a model.safetensors written by 'vkblas train shakespeare-char'")
    sample.add_argument(
        "--start", default="\\n", help="the text to continue; a typed \\n is a newline; FILE:path reads a file"
    )
    sample.add_argument("--max-new-tokens", type=_positive_int, default=500)
    sample.add_argument("--temperature", type=_positive_float, default=0.8, help="< 1: less random, > 1: more")
    sample.add_argument("--top-k", type=_positive_int, default=200, help="draw among the k most likely tokens")
    sample.add_argument("--num-samples", type=_positive_int, default=1)
    sample.add_argument("--seed", type=int, default=1337)
    sample.add_argument(
        "--device", type=_device, default=None, help="cpu, vulkan or vulkan:N (default: vkblas's default device)"
    )
    sample.set_defaults(func=cmd_sample)

    ev = sub.add_parser("eval", help="evaluate a checkpoint written by 'vkblas train' on its test set")
    ev.add_argument("checkpoint", help="a model.safetensors written by 'vkblas train'")
    ev.add_argument("--batch-size", type=_positive_int, default=1000)
    ev.add_argument(
        "--limit",
        type=_positive_int,
        default=None,
        help="evaluate on the first N test images (default: those used in training)",
    )
    ev.add_argument("--json", action="store_true", help="print the result as JSON")
    _common(ev)
    ev.set_defaults(func=cmd_eval)

    run = sub.add_parser(
        "run",
        help="run a PyTorch program on vkblas ('import torch' resolves to vkblas; 'cuda' is the Vulkan device)",
        description="Run SCRIPT as 'python SCRIPT ARGS' would, with torch, torchvision's datasets and transforms "
        "resolving to vkblas for that run; options after SCRIPT are the program's. See the README for what is "
        "mapped.",
    )
    run.add_argument(
        "--device", type=_device, default=None, help="vkblas's default device for the run (VKBLAS_DEVICE), e.g. vulkan"
    )
    run.add_argument("script", help="the program, a .py file")
    run.add_argument("args", nargs=argparse.REMAINDER, help="the program's arguments")
    run.set_defaults(func=cmd_run)

    bench = sub.add_parser(
        "bench",
        help="benchmarks: 'gemm' (matmul), 'gemm-variants' (every GEMM plan, kernel for kernel), 'conv' (conv2d) "
        "or 'train' (vkblas vs PyTorch)",
        description="Extra arguments go to the benchmark: vkblas bench train --help",
    )
    bench.add_argument("what", choices=("gemm", "gemm-variants", "conv", "train"))
    bench.add_argument("rest", nargs=argparse.REMAINDER, help="arguments for the benchmark")
    bench.set_defaults(func=cmd_bench)

    from .distributed.cli import add_commands

    add_commands(sub, _positive_int, _positive_float, _device)
    return parser


def _distributed(p: argparse.ArgumentParser) -> None:
    from .distributed import ALGORITHMS, CODECS

    g = p.add_argument_group(
        "training on several workers",
        "one process per worker, all on this machine; see README 'Training on several workers'",
    )
    g.add_argument(
        "--workers",
        default=None,
        metavar="DEVICES|N",
        help="devices, one worker each (cpu,vulkan:0,cpu), or a count of workers on the default device",
    )
    g.add_argument("--algorithm", choices=ALGORITHMS, default=None, help="sync (default), async or diloco")
    g.add_argument(
        "--max-staleness",
        type=_nonnegative_int,
        default=None,
        help="async: drop gradients more than S versions old (default max(4, 2 x workers)); diloco: rounds (1)",
    )
    g.add_argument(
        "--sync-apply",
        choices=("replicated", "sharded", "holder"),
        default=None,
        help="sync: every worker steps its copy (replicated, default), its slice of the parameters (sharded), "
        "or the runner steps them (holder)",
    )
    g.add_argument("--inner-steps", type=_positive_int, default=None, help="diloco: inner AdamW steps H (20)")
    g.add_argument("--outer-lr", type=_positive_float, default=None, help="diloco: outer Nesterov SGD lr (0.7)")
    g.add_argument("--outer-momentum", type=float, default=None, help="diloco: outer momentum in [0, 1) (0.9; 0: none)")
    g.add_argument(
        "--round-quorum",
        type=_fraction,
        default=None,
        help="diloco: close a round once this fraction of its planned samples arrived on time (1.0)",
    )
    g.add_argument(
        "--round-deadline",
        type=_positive_float,
        default=None,
        help="diloco: close a round at this multiple of its predicted duration (1.5)",
    )
    g.add_argument("--codec", choices=CODECS, default=None, help="diloco: how pseudo-gradients travel (fp32)")
    g.add_argument("--codec-block", type=_positive_int, default=None, help="diloco int8: values per scale (256)")
    g.add_argument(
        "--error-feedback", action="store_true", help="diloco: keep what the codec lost and add it next round"
    )
    g.add_argument(
        "--batch-per-worker",
        action="store_true",
        help="async, diloco: every worker trains on batches of --batch-size (N workers: N x the global batch)",
    )
    g.add_argument(
        "--threads-per-worker",
        type=_positive_int,
        default=None,
        help="BLAS threads of each cpu worker (default: the cores shared out among the cpu workers)",
    )


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--device",
        type=_device,
        default=None,
        help="cpu, vulkan or vulkan:N (default: the best hardware GPU, else cpu; see 'vkblas info')",
    )
    p.add_argument(
        "--data",
        default=None,
        metavar="DIR",
        help="directory with the dataset's .gz files (searched before $VKBLAS_DATA and ~/.cache/vkblas)",
    )
    p.add_argument(
        "--download",
        action="store_true",
        help="fetch missing dataset files from the canonical mirrors (sha256-checked; needs network access)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``vkblas`` console script; returns the exit code."""
    args = build_parser().parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except KeyboardInterrupt:
        print("vkblas: interrupted", file=sys.stderr)
        return 130
    except (ValueError, RuntimeError, OSError) as e:  # DataError, BackendError … : one clear line, no traceback
        if os.environ.get("VKBLAS_DEBUG"):
            raise
        print(f"vkblas {args.command}: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
