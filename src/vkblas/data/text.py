"""Character-level language modelling data, as nanoGPT's ``shakespeare_char``: the vocabulary is the sorted set of
characters of the text, the first 90 % of the encoded text is the training split and the last 10 % the validation
split, and an item is a block of ``block_size`` tokens with the same block shifted by one as its targets.

Random blocks, as nanoGPT's ``get_batch`` draws them (``randint(len(data) - block_size, (batch_size,))``), are a
``RandomSampler(blocks, replacement=True, num_samples=..., seed=...)`` over :class:`TextBlocks`; their
``get_batch`` gathers a whole batch with one numpy index, so the loader's fast path applies.

>>> vocab = CharVocab.from_text("hello")
>>> vocab.chars, vocab.encode("hole").tolist(), vocab.decode([3, 2])
('ehlo', [1, 3, 2, 0], 'ol')
>>> x, y = TextBlocks(vocab.encode("hello"), block_size=3)[1]
>>> vocab.decode(x), vocab.decode(y)
('ell', 'llo')
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .dataset import Dataset
from .datasets import search_roots
from .idx import DataError

TINY_SHAKESPEARE_URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"


class CharVocab:
    """The characters of a text, sorted; token ``i`` is ``chars[i]``."""

    def __init__(self, chars: str) -> None:
        if len(set(chars)) != len(chars) or list(chars) != sorted(chars):
            raise ValueError("CharVocab: chars must be sorted and distinct (use CharVocab.from_text)")
        self.chars = chars
        self.stoi = {c: i for i, c in enumerate(chars)}

    @classmethod
    def from_text(cls, text: str) -> CharVocab:
        return cls("".join(sorted(set(text))))

    def __len__(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> np.ndarray:
        """The token ids of ``text`` (int64); a character outside the vocabulary is an error naming it."""
        try:
            return np.array([self.stoi[c] for c in text], dtype=np.int64)
        except KeyError as e:
            raise ValueError(f"character {e.args[0]!r} is not in the vocabulary ({len(self)} characters)") from None

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        return "".join(self.chars[int(i)] for i in ids)


class TextBlocks(Dataset):
    """Every window of a token array: item ``i`` is ``(data[i : i + T], data[i + 1 : i + T + 1])``."""

    def __init__(self, data: np.ndarray, block_size: int) -> None:
        if not isinstance(block_size, int) or block_size < 1:
            raise ValueError(f"block_size must be a positive integer, got {block_size!r}")
        if len(data) <= block_size:
            raise ValueError(f"a text of {len(data)} tokens has no block of {block_size} tokens plus a target")
        self.data, self.block_size = np.asarray(data, dtype=np.int64), block_size
        self._offsets = np.arange(block_size)

    def __len__(self) -> int:
        return len(self.data) - self.block_size

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        if not -len(self) <= index < len(self):
            raise IndexError(f"block {index} is out of range for {len(self)} blocks")
        i = index % len(self)
        return self.data[i : i + self.block_size], self.data[i + 1 : i + 1 + self.block_size]

    def get_batch(self, indices: np.ndarray) -> list[np.ndarray]:
        rows = np.asarray(indices, dtype=np.int64)[:, None] + self._offsets
        return [self.data[rows], self.data[rows + 1]]


def find_text(dirnames: Sequence[str], filename: str, root: str | os.PathLike[str] | None = None) -> Path:
    """The first ``<base>/<dirname>/<filename>`` (or ``<base>/<filename>``) over root, $VKBLAS_DATA and the cache."""
    tried = []
    for base in search_roots(root):
        for d in (base, *(base / n for n in dirnames)):
            tried.append(str(d / filename))
            if (d / filename).is_file():
                return d / filename
    raise DataError(
        f"{filename} not found; looked for {', '.join(tried)}. Download it from {TINY_SHAKESPEARE_URL} into "
        f"a '{dirnames[0]}/' folder of one of those directories"
    )


class ShakespeareChar:
    """Tiny Shakespeare (Karpathy's ``input.txt``, 1.1 M characters, 65 distinct), character-level: ``vocab``,
    and the ``train`` / ``val`` splits as :class:`TextBlocks`."""

    dirnames = ("tinyshakespeare", "shakespeare_char", "shakespeare")

    def __init__(self, root: str | os.PathLike[str] | None = None, block_size: int = 256) -> None:
        self.path = find_text(self.dirnames, "input.txt", root)
        self.text = self.path.read_text(encoding="utf-8")
        self.vocab = CharVocab.from_text(self.text)
        data = self.vocab.encode(self.text)
        n = int(0.9 * len(data))  # nanoGPT's split
        self.train, self.val = TextBlocks(data[:n], block_size), TextBlocks(data[n:], block_size)
