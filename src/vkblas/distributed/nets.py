"""The model a run trains, for both sides: ``vkblas train``'s image models (``mlp``, ``cnn``) and the GPTs of
:mod:`.text`, built from the run's (dataset, model) pair. A run's weights are the model's *parameters*
(``named_parameters``): a tied weight (the GPT's ``lm_head`` is its token embedding) travels once."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .text import GPT_SIZES, build_gpt, is_text


def build(model: str, dataset: str) -> Any:
    """The run's model on the cpu (move it with ``.to``)."""
    if model in GPT_SIZES:
        if not is_text(dataset):
            raise ValueError(f"model {model!r} is a GPT: it trains on a text dataset, not {dataset!r}")
        return build_gpt(model, dataset)
    if is_text(dataset):
        raise ValueError(f"dataset {dataset!r} is text: train a GPT on it ({', '.join(GPT_SIZES)}), not {model!r}")
    from ..training.models import build as build_image_model

    return build_image_model(model)


def initial_params(model: str, dataset: str, seed: int) -> dict[str, np.ndarray]:
    """The weights every run of (model, dataset, seed) starts from, made on the cpu."""
    from ..random import manual_seed

    manual_seed(seed)
    return {k: p.detach().numpy() for k, p in build(model, dataset).named_parameters()}


def load_params(module: Any, params: Mapping[str, np.ndarray]) -> None:
    """Copy a run's weights into ``module``; every parameter must be there (tied aliases follow their weight)."""
    names = {k for k, _ in module.named_parameters()}
    if names != set(params):
        raise ValueError(f"weights name {sorted(set(params) ^ names)[:5]} that the model has not, or lack them")
    module.load_state_dict(params, strict=False)
