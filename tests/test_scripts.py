"""The shell scripts: Vulkan driver detection (scripts/have_vulkan.sh, used by setup.sh) on fake file systems, and
which data folder run.sh / test.sh choose (scripts/data_env.sh), as the README says."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def have_vulkan(fs: Path, **env: str) -> int:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("VK_", "XDG_"))}
    clean.update(VKBLAS_FS_ROOT=str(fs), HOME="/home/nobody", **env)
    return subprocess.run(["bash", str(ROOT / "scripts/have_vulkan.sh")], env=clean, capture_output=True).returncode


def touch(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{}")


@pytest.fixture
def fs(tmp_path: Path) -> Path:
    """A machine with the Vulkan loader and an empty /etc/vulkan/icd.d."""
    touch(tmp_path / "usr/lib/x86_64-linux-gnu/libvulkan.so.1")
    (tmp_path / "etc/vulkan/icd.d").mkdir(parents=True)
    return tmp_path


def test_lavapipe_in_usr_share_counts_though_etc_is_empty(fs: Path) -> None:
    assert have_vulkan(fs) == 1
    touch(fs / "usr/share/vulkan/icd.d/lvp_icd.x86_64.json")
    assert have_vulkan(fs) == 0


def test_icd_in_etc_or_named_by_the_environment(fs: Path) -> None:
    touch(fs / "etc/vulkan/icd.d/nvidia_icd.json")
    assert have_vulkan(fs) == 0
    (fs / "etc/vulkan/icd.d/nvidia_icd.json").unlink()
    touch(fs / "opt/driver/my_icd.json")
    assert have_vulkan(fs, VK_DRIVER_FILES="/opt/driver/my_icd.json") == 0
    assert have_vulkan(fs, VK_ICD_FILENAMES="/opt/driver") == 0
    assert have_vulkan(fs, VK_ICD_FILENAMES="/opt/missing.json") == 1


def test_a_driver_without_the_loader_is_not_enough(fs: Path) -> None:
    touch(fs / "usr/share/vulkan/icd.d/lvp_icd.x86_64.json")
    (fs / "usr/lib/x86_64-linux-gnu/libvulkan.so.1").unlink()
    assert have_vulkan(fs) == 1


def data_choice(tmp_path: Path, env_data: str | None) -> str:
    """VKBLAS_DATA after sourcing data_env.sh in a checkout with ../shared/data beside it."""
    checkout = tmp_path / "checkout"
    (checkout / "scripts").mkdir(parents=True, exist_ok=True)
    (checkout / "scripts/data_env.sh").write_text((ROOT / "scripts/data_env.sh").read_text())
    (tmp_path / "shared/data").mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "VKBLAS_DATA"}
    if env_data is not None:
        env["VKBLAS_DATA"] = env_data
    done = subprocess.run(
        ["bash", "-c", 'source scripts/data_env.sh; echo "${VKBLAS_DATA:-}"'],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def test_vkblas_data_wins_over_shared_data_as_the_readme_says(tmp_path: Path) -> None:
    assert data_choice(tmp_path, "/my/data") == "/my/data"
    assert data_choice(tmp_path, None) == str((tmp_path / "shared/data").resolve())
    readme = (ROOT / "README.md").read_text()
    sentence = re.search(r"`scripts/run.sh` reads MNIST from (.*?);", readme, re.S)
    assert sentence, "the README says where run.sh reads MNIST from"
    text = sentence.group(1)
    assert text.index("$VKBLAS_DATA") < text.index("../shared/data") < text.index("~/.cache/vkblas")
    for script in ("run.sh", "test.sh"):
        assert "source scripts/data_env.sh" in (ROOT / "scripts" / script).read_text()
