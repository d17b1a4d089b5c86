"""A GPT (decoder-only transformer) written the way nanoGPT's ``model.py`` is written, with ``vkblas.nn``.

Same modules, names and initialisation as nanoGPT (so a ``state_dict`` loads into nanoGPT's model in PyTorch and
back): token and position embeddings, ``n_layer`` pre-norm blocks of causal self-attention and a GELU MLP, a final
LayerNorm, and an ``lm_head`` whose weight is the token embedding's (weight tying). Attention uses
``F.scaled_dot_product_attention`` where vkblas has it (nanoGPT probes with ``hasattr`` too) and otherwise the
explicit masked softmax, with the causal mask built once from two ``arange`` comparisons.

>>> import vkblas
>>> from vkblas.models import GPT, GPTConfig
>>> model = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=8, block_size=4, vocab_size=11)).to("cpu")
>>> idx = vkblas.tensor([[1, 2, 3]], device="cpu")
>>> logits, loss = model(idx, targets=idx)
>>> logits.shape, loss.shape
((1, 3, 11), ())
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .. import nn
from ..autograd import no_grad
from ..creation import arange, ones, zeros
from ..dtypes import int32
from ..nn import functional as F
from ..ops.shape import cat
from ..optim import AdamW
from ..tensor import Tensor
from ..utils.checkpoint import checkpoint
from .sampling import sample_next


@dataclass
class GPTConfig:
    """nanoGPT's configuration; the defaults are GPT-2 small's."""

    block_size: int = 1024
    vocab_size: int = 50304  # GPT-2's 50257 padded up to a multiple of 64
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.0
    bias: bool = True  # biases in the Linears and LayerNorms, as GPT-2; False is a little better and faster
    #: run each block under ``vkblas.utils.checkpoint.checkpoint``: its activations are recomputed in backward
    #: instead of kept (one more forward of the blocks, for memory of about one block's activations)
    activation_checkpointing: bool = False

    def __post_init__(self) -> None:
        for name in ("block_size", "vocab_size", "n_layer", "n_head", "n_embd"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"GPTConfig.{name} must be a positive integer, got {value!r}")
        if self.n_embd % self.n_head:
            raise ValueError(f"GPTConfig: n_embd={self.n_embd} must be divisible by n_head={self.n_head}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"GPTConfig: dropout must be in [0, 1), got {self.dropout}")


class LayerNorm(nn.Module):
    """LayerNorm with an optional bias (``torch.nn.LayerNorm`` has no ``bias=False`` before PyTorch 2.1)."""

    def __init__(self, ndim: int, bias: bool) -> None:
        super().__init__()
        self.weight = nn.Parameter(ones(ndim))
        self.bias = nn.Parameter(zeros(ndim)) if bias else None

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)  # q, k, v of all heads at once
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head, self.n_embd, self.dropout = config.n_head, config.n_embd, config.dropout
        self.flash = hasattr(F, "scaled_dot_product_attention")
        if not self.flash:
            # True where a position may attend (itself and the past); not saved in the state_dict, as nanoGPT
            # with flash attention has no such buffer
            pos = arange(config.block_size, dtype=int32)
            self.register_buffer("causal", pos.unsqueeze(1) >= pos.unsqueeze(0), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        if self.flash:
            y = F.scaled_dot_product_attention(  # type: ignore[attr-defined]
                q, k, v, attn_mask=None, dropout_p=self.dropout if self.training else 0.0, is_causal=True
            )
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.shape[-1]))
            att = att.masked_fill(~self.causal[:T, :T], float("-inf"))
            att = F.softmax(att, dim=-1)
            att = self.attn_dropout(att)
            y = att @ v  # (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(config.vocab_size, config.n_embd),
                wpe=nn.Embedding(config.block_size, config.n_embd),
                drop=nn.Dropout(config.dropout),
                h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
                ln_f=LayerNorm(config.n_embd, bias=config.bias),
            )
        )
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        # 0 .. block_size - 1, made once: vkblas's arange is a host upload, which a captured graph cannot repeat
        self.register_buffer("positions", arange(config.block_size, dtype=int32), persistent=False)
        self.transformer.wte.weight = (
            self.lm_head.weight
        )  # weight tying (https://paperswithcode.com/method/weight-tying)
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():  # GPT-2's scaled init of the residual projections
            if pn.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    def get_num_params(self, non_embedding: bool = True) -> int:
        """Parameters; without the position embeddings by default (the token embeddings are the head's weights)."""
        n = sum(p.numel() for p in self.parameters())
        return n - self.transformer.wpe.weight.numel() if non_embedding else n

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx: Tensor, targets: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        """Logits (B, T, vocab) and the mean cross-entropy against ``targets`` (-1: ignored); without targets only
        the last position's logits (B, 1, vocab), which is all generation needs."""
        if idx.ndim != 2:
            raise ValueError(f"GPT: expected token indices of shape (B, T), got {idx.shape}")
        b, t = idx.shape
        if t > self.config.block_size:
            raise ValueError(f"Cannot forward sequence of length {t}, block size is only {self.config.block_size}")
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(self.positions[:t]))
        for block in self.transformer.h:
            x = checkpoint(block, x) if self.config.activation_checkpointing else block(x)
        x = self.transformer.ln_f(x)
        if targets is None:
            return self.lm_head(x[:, [-1], :]), None
        logits = self.lm_head(x)
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1), ignore_index=-1)
        return logits, loss

    def configure_optimizers(
        self, weight_decay: float, learning_rate: float, betas: tuple[float, float], **kwargs: Any
    ) -> AdamW:
        """AdamW with weight decay on the matrices (dim >= 2: Linear and embedding weights) and none on biases and
        LayerNorm gains, as nanoGPT does; ``kwargs`` go to AdamW (e.g. ``capturable=True``)."""
        params = [p for _, p in self.named_parameters() if p.requires_grad]
        groups = [
            {"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
        ]
        return AdamW(groups, lr=learning_rate, betas=betas, **kwargs)

    @no_grad()
    def generate(self, idx: Tensor, max_new_tokens: int, temperature: float = 1.0, top_k: int | None = None) -> Tensor:
        """Continue the sequences ``idx`` (B, T) by ``max_new_tokens`` tokens, each sampled from the softmax of the
        last logits divided by ``temperature``, among the ``top_k`` most likely where given. Call ``eval()`` first
        so that dropout is off. The draws come from vkblas's generator (``vkblas.manual_seed``)."""
        for _ in range(max_new_tokens):
            idx_cond = idx if idx.shape[1] <= self.config.block_size else idx[:, -self.config.block_size :]
            logits, _ = self(idx_cond)
            idx_next = sample_next(logits[:, -1, :], temperature, top_k)
            idx = cat((idx, idx_next), dim=1)
        return idx
