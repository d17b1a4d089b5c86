"""The `vkblas` command: help, one-line argument errors, info, and train -> eval on a 1 000-image subset."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vkblas.cli import main

DATA = Path(os.environ.get("VKBLAS_DATA") or Path(__file__).resolve().parents[1] / ".." / "shared" / "data")
needs_data = pytest.mark.skipif(not (DATA / "mnist").is_dir(), reason=f"no MNIST files in {DATA}")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as e:  # argparse: --help and usage errors
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("argv", [[], ["info"], ["train"], ["eval"], ["sample"], ["run"], ["bench"]])
def test_help_everywhere(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, out, _ = run(capsys, *argv, "--help")
    assert code == 0 and out.startswith("usage: vkblas")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "the following arguments are required: COMMAND"),
        (["fly"], "invalid choice: 'fly'"),
        (["train", "cifar"], "invalid choice: 'cifar'"),
        (["train", "mnist", "--epochs", "0"], "argument --epochs: expected a positive integer, got 0"),
        (["train", "mnist", "--lr", "fast"], "argument --lr: expected a positive number, got 'fast'"),
        (["train", "mnist", "--model", "resnet"], "invalid choice: 'resnet'"),
        (["train", "mnist", "--device", "tpu"], "unknown device 'tpu'"),
        (["eval"], "the following arguments are required: checkpoint"),
        (["bench", "fft"], "invalid choice: 'fft'"),
        (["run"], "the following arguments are required: script"),
        (["sample"], "the following arguments are required: checkpoint"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and message in err and err.startswith("vkblas")


def test_info(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "info")
    assert code == 0 and "default device:" in out and "cpu" in out
    code, out, _ = run(capsys, "info", "--json")
    info = json.loads(out)
    assert code == 0 and info["default_device"] in info["devices"] and info["why"]


def test_python_dash_m() -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    done = subprocess.run([sys.executable, "-m", "vkblas", "--help"], capture_output=True, text=True, env=env)
    assert done.returncode == 0 and "train" in done.stdout


def test_runtime_errors_are_one_line_exit_1(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("VKBLAS_DATA", raising=False)
    code, _, err = run(capsys, "train", "mnist", "--data", str(tmp_path), "--out", str(tmp_path / "run"), "--quiet")
    assert code == 1 and err.count("\n") == 1 and "MNIST not found" in err and str(tmp_path) in err
    (tmp_path / "junk.safetensors").write_bytes(b"not a checkpoint")
    code, _, err = run(capsys, "eval", str(tmp_path / "junk.safetensors"))
    assert code == 1 and err.count("\n") == 1 and "not a readable safetensors checkpoint" in err


@pytest.mark.parametrize(
    "flag, value, says",
    [
        ("--eval-share", "2", "--eval-share: Input should be less than or equal to 1"),
        ("--checkpoint-seconds", "-1", "--checkpoint-seconds: Input should be greater than or equal to 0"),
        ("--max-staleness", "-1", "--max-staleness:"),
        ("--no-validation", "--validate-fraction=0.1", "--no-validation turns checks off; it contradicts"),
        ("--inner-state", "kept", "inner_state 'kept' makes a unit depend on its worker's private AdamW state"),
    ],
)
def test_serve_options_out_of_range_are_one_line_exit_1(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, flag: str, value: str, says: str
) -> None:
    code, _, err = run(
        capsys, "distributed", "serve", "mnist", "--db", str(tmp_path / "c.db"), "--store", str(tmp_path), flag, value
    )
    assert code == 1 and err.count("\n") == 1 and says in err, err
    assert not (tmp_path / "c.db").exists()  # refused before anything was made


def test_bench_gemm_dispatch(capsys: pytest.CaptureFixture[str]) -> None:
    try:
        import vkblas.bench.gemm  # noqa: F401
    except ImportError:
        code, _, err = run(capsys, "bench", "gemm")
        assert code == 1 and "vkblas.bench.gemm" in err
    else:
        code, out, _ = run(capsys, "bench", "gemm", "--help")
        assert code == 0 and "usage" in out


@needs_data
def test_train_then_eval_reproduces_accuracy(capsys: pytest.CaptureFixture[str], tmp_path: Path, device: str) -> None:
    out = tmp_path / "run"
    code, stdout, err = run(
        capsys,
        "train",
        "mnist",
        "--model",
        "mlp",
        "--epochs",
        "1",
        "--limit",
        "1000",
        "--batch-size",
        "50",
        "--device",
        device,
        "--seed",
        "0",
        "--out",
        str(out),
        "--data",
        str(DATA),
    )
    assert code == 0, err
    assert "epoch 1/1:" in err  # the bar
    assert "epoch 1/1: train loss" in stdout and "test accuracy" in stdout
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["device"].startswith(device) and metrics["test_samples"] == 1000 and len(metrics["epochs"]) == 1
    accuracy = metrics["test_accuracy"]
    assert 0.7 < accuracy <= 1.0  # 1 000 images, one epoch
    assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    code, stdout, err = run(capsys, "eval", str(out / "model.safetensors"), "--device", device, "--json", "--quiet")
    assert code == 0, err
    result = json.loads(stdout)
    assert result["samples"] == 1000 and result["test_accuracy"] == pytest.approx(accuracy, abs=1e-9)


def test_data_not_found_says_what_the_cli_offers(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CLI has --download, not download=True: the message names what the user can type."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("VKBLAS_DATA", raising=False)
    code, _, err = run(capsys, "train", "mnist", "--data", str(tmp_path), "--out", str(tmp_path / "run"), "--quiet")
    assert code == 1 and "--download" in err and "download=True" not in err


def test_bench_gemm_runs_only_the_sizes_asked_for_header_first(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    bench = pytest.importorskip("vkblas.bench.gemm")
    seen: list[str] = []

    def fake_run(shapes, *args, **kwargs):  # the measuring loop; its own header line is tested below
        seen.extend(s.label for s in shapes)
        return ["shape"], [], {"date": "-", "adapter": "-", "driver": "-"}

    monkeypatch.setattr(bench, "run", fake_run)
    code, _, _ = run(capsys, "bench", "gemm", "--sizes", "256,512", "--no-torch")
    assert code == 0 and seen == ["square 256", "square 512"]
    code, _, err = run(capsys, "bench", "gemm", "--sizes", "big")
    assert code == 2 and "--sizes" in err


@pytest.mark.vulkan
def test_bench_gemm_prints_its_header_before_the_first_row(capsys: pytest.CaptureFixture[str]) -> None:
    bench = pytest.importorskip("vkblas.bench.gemm")
    from conftest import vulkan_available

    if not vulkan_available():
        pytest.skip("no Vulkan adapter")
    bench.run(bench.square_shapes([8]), "vulkan", f16=False, cpu=False, use_torch=False)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[0] == "shape" and lines[1].split()[0] == "square"


@needs_data
def test_eval_finds_the_data_training_found(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """run.sh passes the data through $VKBLAS_DATA; a later `vkblas eval` in another shell has no such variable."""
    out = tmp_path / "run"
    monkeypatch.setenv("VKBLAS_DATA", str(DATA))
    argv = ["train", "mnist", "--epochs", "1", "--limit", "200", "--device", "cpu", "--out", str(out), "--quiet"]
    code, _, err = run(capsys, *argv)
    assert code == 0, err
    recorded = json.loads((out / "metrics.json").read_text())["config"]["data"]
    assert recorded is not None and Path(recorded).is_absolute() and (Path(recorded) / "train-images-idx3-ubyte.gz")
    monkeypatch.delenv("VKBLAS_DATA")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "empty-cache"))
    code, _, err = run(capsys, "eval", str(out / "model.safetensors"), "--device", "cpu", "--quiet")
    assert code == 0, err
    assert (out / "model.safetensors").stat().st_mode & 0o777 == 0o666 & ~_umask()


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@pytest.mark.vulkan
def test_bench_gemm_variants_ranks_plans_and_shows_the_tuners_choice(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("vkblas.bench.gemm")
    from conftest import vulkan_available

    if not vulkan_available():
        pytest.skip("no Vulkan adapter")
    code, out, _ = run(capsys, "bench", "gemm-variants", "--top", "2", "--only", "mlp fc3 dW", "--no-torch")
    assert code == 0, out
    rows = [line for line in out.splitlines() if line.startswith("| mlp fc3 dW")]
    assert 2 <= len(rows) <= 3 and sum("(tuner)" in r for r in rows) == 1
    times = [float(r.split("|")[5]) for r in rows[:2]]
    assert times == sorted(times)  # fastest first
    code, _, err = run(capsys, "bench", "gemm-variants", "--top", "0")
    assert code == 2 and "--top" in err
    # tiles outside the table, named: timed and shown beside the fastest, each once
    asked = "32x48k16.4x12.db,32x32k16.4x4.db/2"
    code, out, _ = run(
        capsys, "bench", "gemm-variants", "--top", "1", "--only", "mlp fc3 dW", "--no-torch", "--variants", asked
    )
    assert code == 0, out
    plans = [line.split("|")[4].strip().removesuffix(" (tuner)") for line in out.splitlines() if "| mlp fc3 dW" in line]
    assert "32x48k16.4x12.db/1" in plans and "32x32k16.4x4.db/2" in plans and len(plans) == len(set(plans))
    for bad, said in (("64x64k6.4x4.db", "K step 6"), ("32x32k16.4x4.db/0", "split count must be 1..")):
        code, _, err = run(capsys, "bench", "gemm-variants", "--variants", bad)
        assert code == 2 and said in err


@pytest.mark.vulkan
def test_bench_gemm_variants_times_the_tuners_second_stage(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With 4 compute units (lavapipe has 1 or 2) the leading tiles' whole-wave plans are timed too: stream-K over
    4 and 8 workgroups for the 10 x 256 weight gradient. The first round's times are replaced so that a plain
    tile leads: on a loaded machine a K-group tile, which takes no stream-K, could lead by noise (it failed a CI
    run so)."""
    pytest.importorskip("vkblas.bench.gemm")
    from conftest import vulkan_available

    if not vulkan_available():
        pytest.skip("no Vulkan adapter")
    from vkblas.backend.vulkan import autotune
    from vkblas.bench import gemm_variants

    monkeypatch.setattr(autotune.Tuner, "compute_units", lambda self: 4)
    timed: list[str] = []
    time_plans = gemm_variants._timed

    def seen(vk, plans, *args):
        first = not timed
        timed.extend(plans)
        times = time_plans(vk, plans, *args)
        if first:  # a plain tile, one workgroup per output tile, leads
            lead = next(k for k, gp in plans.items() if gp.variant.kgroups == 1 and not gp.variant.stream)
            times = {k: 1e-6 if k == lead else 1.0 for k in times}
        return times

    monkeypatch.setattr(gemm_variants, "_timed", seen)
    argv = ["bench", "gemm-variants", "--top", "1", "--rounds", "1", "--only", "mlp fc3 dW", "--no-torch"]
    code, out, _ = run(capsys, *argv)
    assert code == 0, out
    assert sum(p.endswith((".sk4/1", ".sk8/1")) for p in timed) == 2, timed  # the leading tile's two
