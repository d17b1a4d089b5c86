"""The ``vkblas`` command: ``info``, ``train``, ``eval`` and ``bench``. Run ``vkblas COMMAND --help``.

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


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {value}")
    return value


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

    out = args.out or f"runs/{args.dataset}-{args.model}"
    cfg = TrainConfig(
        dataset=args.dataset,
        model=args.model,
        epochs=args.epochs,
        batch_size=args.batch_size,
        lr=args.lr,
        optimizer=args.optimizer,
        device=args.device,
        seed=args.seed,
        out=out,
        limit=args.limit,
        data=args.data,
        download=args.download,
        progress=not args.quiet,
        graph=not args.no_graph,
    )
    metrics = fit(cfg)
    print(
        f"test accuracy {100 * metrics['test_accuracy']:.2f}% on {metrics['device']} after {cfg.epochs} epoch(s); "
        f"wrote {out}/model.safetensors, metrics.json, curves.png"
    )
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from .training import evaluate_checkpoint

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
    from .training.compare import main as train_main

    return int(train_main(args.rest) or 0)


# ---------------------------------------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    from .training import DATASETS, MODELS
    from .training.fit import OPTIMIZERS

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
    train.add_argument("dataset", choices=sorted(DATASETS))
    train.add_argument("--model", choices=list(MODELS), default="mlp")
    train.add_argument("--epochs", type=_positive_int, default=10)
    train.add_argument("--batch-size", type=_positive_int, default=128)
    train.add_argument(
        "--lr",
        type=_positive_float,
        default=None,
        help="peak learning rate, decayed by a cosine (default: 1e-3 for adam/adamw, 0.05 for sgd)",
    )
    train.add_argument("--optimizer", choices=OPTIMIZERS, default="adam")
    train.add_argument("--seed", type=int, default=0, help="seeds the initial weights and the data order")
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
    _common(train)
    train.set_defaults(func=cmd_train)

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

    bench = sub.add_parser(
        "bench",
        help="benchmarks: 'gemm' (matmul), 'conv' (conv2d) or 'train' (vkblas vs PyTorch)",
        description="Extra arguments go to the benchmark: vkblas bench train --help",
    )
    bench.add_argument("what", choices=("gemm", "conv", "train"))
    bench.add_argument("rest", nargs=argparse.REMAINDER, help="arguments for the benchmark")
    bench.set_defaults(func=cmd_bench)
    return parser


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
