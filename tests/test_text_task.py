"""The character-level Shakespeare task: vocabulary, splits, block batches, nanoGPT's schedule, and
`vkblas train shakespeare-char --model gpt` -> `vkblas eval` / `vkblas sample` on cpu and vulkan."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from vkblas.cli import main
from vkblas.data import DataError, RandomSampler
from vkblas.data.text import CharVocab, ShakespeareChar, TextBlocks, find_text
from vkblas.training.text import TextTrainConfig, learning_rate

DATA = Path(os.environ.get("VKBLAS_DATA") or Path(__file__).resolve().parents[1] / ".." / "shared" / "data")
needs_text = pytest.mark.skipif(
    not (DATA / "tinyshakespeare" / "input.txt").is_file(), reason=f"no tinyshakespeare/input.txt in {DATA}"
)
TINY = ["--iters", "12", "--eval-interval", "6", "--eval-iters", "2", "--batch-size", "4", "--block-size", "16"]
TINY += ["--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--quiet"]


def test_vocab_round_trip_and_errors() -> None:
    vocab = CharVocab.from_text("to be or not")
    assert vocab.chars == " benort" and vocab.decode(vocab.encode("not to be")) == "not to be"
    with pytest.raises(ValueError, match="character 'x' is not in the vocabulary"):
        vocab.encode("xo")
    with pytest.raises(ValueError, match="sorted and distinct"):
        CharVocab("ba")


def test_blocks_and_their_batches() -> None:
    data = np.arange(20)
    blocks = TextBlocks(data, block_size=4)
    assert len(blocks) == 16
    x, y = blocks[15]
    assert x.tolist() == [15, 16, 17, 18] and y.tolist() == [16, 17, 18, 19]
    xs, ys = blocks.get_batch(np.array([0, 15]))
    assert xs.tolist() == [[0, 1, 2, 3], [15, 16, 17, 18]] and (ys == xs + 1).all()
    with pytest.raises(IndexError, match="block 16 is out of range for 16 blocks"):
        blocks[16]
    with pytest.raises(ValueError, match="a text of 4 tokens has no block of 4 tokens"):
        TextBlocks(np.arange(4), 4)
    draws = list(RandomSampler(blocks, replacement=True, num_samples=50, seed=0))
    assert len(draws) == 50 and max(draws) <= 15 and draws == list(RandomSampler(blocks, True, 50, seed=0))


@needs_text
def test_shakespeare_splits_like_nanogpt() -> None:
    corpus = ShakespeareChar(DATA, block_size=8)
    text = (DATA / "tinyshakespeare" / "input.txt").read_text()
    n = int(0.9 * len(text))
    assert len(corpus.vocab) == 65 and corpus.vocab.chars == "".join(sorted(set(text)))
    assert corpus.vocab.decode(corpus.train.data) == text[:n] and corpus.vocab.decode(corpus.val.data) == text[n:]


def test_missing_text_names_where_to_put_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VKBLAS_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with pytest.raises(DataError, match="input.txt not found.*tinyshakespeare/input.txt.*char-rnn"):
        find_text(ShakespeareChar.dirnames, "input.txt", tmp_path)


def test_learning_rate_schedule_is_nanogpts() -> None:
    cfg = TextTrainConfig(iters=100, warmup_iters=10, lr=1e-3, min_lr=1e-4)
    assert learning_rate(0, cfg) == pytest.approx(1e-3 / 11) and learning_rate(9, cfg) == pytest.approx(1e-3 * 10 / 11)
    assert learning_rate(10, cfg) == pytest.approx(1e-3) and learning_rate(100, cfg) == pytest.approx(1e-4)
    assert learning_rate(55, cfg) == pytest.approx(1e-4 + 0.5 * 9e-4)
    with pytest.raises(ValueError, match="n_embd=10 must be divisible by n_head=3"):
        TextTrainConfig(n_embd=10, n_head=3)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["train", "shakespeare-char", "--model", "cnn"], "shakespeare-char trains a gpt, not 'cnn'"),
        (["train", "mnist", "--model", "gpt"], "mnist trains an mlp or a cnn, not 'gpt'"),
        (["train", "shakespeare-char", "--optimizer", "sgd"], "shakespeare-char trains with adamw"),
    ],
)
def test_wrong_model_for_the_task(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    assert main(argv) == 1
    assert message in capsys.readouterr().err


@needs_text
def test_train_eval_sample(capsys: pytest.CaptureFixture[str], tmp_path: Path, device: str) -> None:
    out = tmp_path / "gpt"
    code = main(["train", "shakespeare-char", "--model", "gpt", *TINY, "--device", device, "--out", str(out)])
    stdout = capsys.readouterr().out
    assert code == 0 and "step 0: train loss" in stdout and "step 12: train loss" in stdout
    metrics = json.loads((out / "metrics.json").read_text())
    assert [e["iter"] for e in metrics["evals"]] == [0, 6, 12] and metrics["vocab"].startswith("\n !")
    assert metrics["evals"][-1]["train_loss"] < metrics["evals"][0]["train_loss"] < 4.5  # about ln(65) at first
    assert (out / "curves.png").read_bytes()[:4] == b"\x89PNG"

    assert main(["eval", str(out / "model.safetensors"), "--device", device, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["val_loss"] == pytest.approx(metrics["val_loss"], rel=1e-5)

    argv = ["sample", str(out / "model.safetensors"), "--device", device, "--start", "ROMEO:", "--max-new-tokens"]
    assert main([*argv, "30", "--seed", "7", "--num-samples", "2"]) == 0
    text = capsys.readouterr().out
    first, second = text.split("---------------\n")
    assert first.startswith("ROMEO:") and len(first.rstrip("\n")) >= 36 and second.startswith("ROMEO:")
    assert main([*argv, "30", "--seed", "7", "--num-samples", "2"]) == 0
    assert capsys.readouterr().out == text  # the seed fixes the text


@needs_text
@pytest.mark.parametrize("save", ["best", "last"])
def test_checkpoint_keeps_the_best_or_the_last_weights(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, device: str, save: str
) -> None:
    # a learning rate far too high: the validation loss rises after its first fall, so best and last differ
    argv = [
        "train",
        "shakespeare-char",
        *TINY,
        "--lr",
        "0.3",
        "--iters",
        "24",
        "--eval-interval",
        "3",
        "--dropout",
        "0",
    ]
    out = tmp_path / save
    assert main([*argv, "--device", device, "--out", str(out), "--save", save]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    evals = metrics["evals"]
    best = min(evals, key=lambda e: e["val_loss"])
    assert best["iter"] != evals[-1]["iter"]  # the run does overfit/diverge: the two modes are distinguishable
    kept = best if save == "best" else evals[-1]
    assert (metrics["iter"], metrics["val_loss"]) == (kept["iter"], kept["val_loss"])
    assert metrics["final_val_loss"] == evals[-1]["val_loss"]
    assert f"step {kept['iter']}: train loss" in capsys.readouterr().out
    assert main(["eval", str(out / "model.safetensors"), "--device", device, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["val_loss"] == pytest.approx(kept["val_loss"], rel=1e-5)
    assert not list(out.glob("*.part"))


@needs_text
def test_train_with_fp16_mixed_precision(capsys: pytest.CaptureFixture[str], tmp_path: Path, device: str) -> None:
    out = tmp_path / "gpt"
    argv = ["train", "shakespeare-char", *TINY, "--dropout", "0", "--device", device, "--out", str(out)]
    assert main([*argv, "--amp", "float16"]) == 0
    stdout = capsys.readouterr().out
    assert "step 12: train loss" in stdout and "(fp16 mixed precision: loss scale 65536)" in stdout
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["precision"] == "fp16 mixed precision" and metrics["config"]["amp"] == "float16"
    evals = metrics["evals"]
    assert evals[-1]["train_loss"] < evals[0]["train_loss"] and evals[-1]["skipped_steps"] == 0
    assert main(["eval", str(out / "model.safetensors"), "--device", device, "--json"]) == 0  # under autocast too
    assert json.loads(capsys.readouterr().out)["val_loss"] == pytest.approx(metrics["val_loss"], rel=1e-5)
    assert main([*argv, "--out", str(tmp_path / "fp32")]) == 0  # the float32 run: other numbers
    fp32 = json.loads((tmp_path / "fp32" / "metrics.json").read_text())
    assert fp32["precision"] == "float32" and fp32["evals"][-1]["train_loss"] != evals[-1]["train_loss"]
    assert fp32["evals"][-1]["train_loss"] == pytest.approx(evals[-1]["train_loss"], rel=2e-2)


def test_amp_is_for_the_gpt(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "mnist", "--amp", "float16"]) == 2
    assert "--amp trains the GPT of shakespeare-char; mnist trains in float32" in capsys.readouterr().err
    with pytest.raises(ValueError, match="amp must be one of float16 or None"):
        TextTrainConfig(amp="bfloat16")


@needs_text
def test_sample_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "gpt"
    assert main(["train", "shakespeare-char", *TINY, "--iters", "1", "--device", "cpu", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["sample", str(out / "model.safetensors"), "--start", "€"]) == 1
    assert "character '€' is not in the vocabulary" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["sample", str(out / "model.safetensors"), "--temperature", "0"])
    assert exit_info.value.code == 2 and "--temperature: expected a positive number" in capsys.readouterr().err
    assert main(["sample", str(tmp_path / "missing.safetensors")]) == 1
    assert "not a readable safetensors checkpoint" in capsys.readouterr().err
