"""Token files for a character-level model of tiny Shakespeare.

vkblas test program, written in the style of nanoGPT's data/shakespeare_char/prepare.py. Every distinct
character of the text is one token. The first 90 % of the text goes to train.bin, the rest to val.bin, as
numpy uint16 arrays written with ndarray.tofile (train.py reads them back with np.memmap); meta.pkl is a
pickle of the vocabulary: vocab_size, stoi (character -> id) and itos (id -> character).

Nothing is downloaded: the text is input.txt beside this file, or else $VKBLAS_DATA/tinyshakespeare/input.txt.
"""

import os
import pickle
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def find_text():
    places = [os.path.join(HERE, "input.txt")]
    if os.environ.get("VKBLAS_DATA"):
        places.append(os.path.join(os.environ["VKBLAS_DATA"], "tinyshakespeare", "input.txt"))
    for path in places:
        if os.path.isfile(path):
            return path
    sys.exit("prepare.py: tiny Shakespeare not found; put input.txt at " + " or ".join(places))


def main():
    path = find_text()
    with open(path, encoding="utf-8") as f:
        text = f.read()
    print(f"{path}: {len(text):,} characters")

    alphabet = sorted(set(text))
    stoi = {ch: i for i, ch in enumerate(alphabet)}
    itos = dict(enumerate(alphabet))
    print(f"vocab size: {len(alphabet)}")
    print(f"characters: {''.join(alphabet)!r}")

    ids = np.array([stoi[ch] for ch in text], dtype=np.uint16)
    split_at = int(0.9 * len(ids))
    for name, part in (("train", ids[:split_at]), ("val", ids[split_at:])):
        part.tofile(os.path.join(HERE, f"{name}.bin"))
        print(f"{name} has {len(part):,} tokens")

    with open(os.path.join(HERE, "meta.pkl"), "wb") as f:
        pickle.dump({"vocab_size": len(alphabet), "stoi": stoi, "itos": itos}, f)


if __name__ == "__main__":
    main()
