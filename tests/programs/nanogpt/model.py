"""A character- or token-level GPT: a stack of pre-norm transformer blocks predicting the next token.

vkblas test program, written in the style of nanoGPT's model.py (github.com/karpathy/nanoGPT). It exercises the
PyTorch APIs such one-file GPTs are made of: a config dataclass; nn.Module blocks held in nn.ModuleDict and
nn.ModuleList; a custom LayerNorm over F.layer_norm with nn.Parameter weights; one fused query/key/value
nn.Linear whose output is split() and reshaped into heads with view/transpose; a hasattr probe for
F.scaled_dot_product_attention, falling back to an explicit causal softmax over a torch.tril mask kept as a
buffer; weight tying by assigning one nn.Parameter to two modules; Module.apply initialisation, with a scaled
normal init chosen by parameter name; AdamW parameter groups with an inspect.signature probe for `fused`; and
sampling under @torch.no_grad() with torch.topk and torch.multinomial.

train.py and sample.py use it under `vkblas run`; tests/test_gpt.py imports it under real PyTorch as the
reference for vkblas.models.GPT. The two share parameter names (transformer.wte.weight,
transformer.h.0.attn.c_attn.weight, ..., lm_head.weight), so state dicts load from one into the other.
"""

import inspect
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class GPTConfig:
    """Shape of the network. The defaults are GPT-2 small's (vocabulary padded to a multiple of 64)."""

    block_size: int = 1024  # the longest context the model reads, in tokens
    vocab_size: int = 50304
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768  # width of the residual stream
    dropout: float = 0.0
    bias: bool = True  # additive terms in every Linear and LayerNorm, as in GPT-2

    @property
    def head_size(self):
        return self.n_embd // self.n_head


class LayerNorm(nn.Module):
    """Normalises over the last dimension; `bias=False` drops the additive term (older nn.LayerNorm cannot)."""

    def __init__(self, width, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.bias = nn.Parameter(torch.zeros(width)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, eps=1e-5)


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention where each position attends to itself and to earlier positions only."""

    def __init__(self, config):
        super().__init__()
        if config.n_embd % config.n_head:
            raise ValueError(f"n_embd={config.n_embd} does not split into n_head={config.n_head} equal heads")
        self.n_head = config.n_head
        self.head_size = config.head_size
        self.dropout = config.dropout
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)  # q, k and v in one matmul
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        # PyTorch 2.0 brought a fused attention kernel; before it, attention is computed as written below
        self.flash = hasattr(torch.nn.functional, "scaled_dot_product_attention")
        if not self.flash:
            print("F.scaled_dot_product_attention is not available: computing attention explicitly")
            n = config.block_size
            lower = torch.tril(torch.ones(n, n)).view(1, 1, n, n)  # 1 where row i may look at column j
            # derived from block_size alone, so left out of the state dict: a checkpoint is the same either way
            self.register_buffer("causal_mask", lower, persistent=False)

    def split_heads(self, t):
        """(B, T, n_embd) -> (B, n_head, T, head_size)"""
        B, T, _ = t.size()
        return t.view(B, T, self.n_head, self.head_size).transpose(1, 2)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = (self.split_heads(t) for t in self.c_attn(x).split(C, dim=2))
        if self.flash:
            p = self.dropout if self.training else 0.0
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=p, is_causal=True)
        else:
            scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_size))  # (B, n_head, T, T)
            scores = scores.masked_fill(self.causal_mask[:, :, :T, :T] == 0, float("-inf"))
            weights = self.attn_dropout(F.softmax(scores, dim=-1))
            y = weights @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # the heads side by side again
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    """The per-position feed-forward layer: widen four times, GELU, project back."""

    def __init__(self, config):
        super().__init__()
        hidden = 4 * config.n_embd
        self.c_fc = nn.Linear(config.n_embd, hidden, bias=config.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(hidden, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    """Attention then MLP, each reading a normalised copy of the residual stream and adding its result to it."""

    def __init__(self, config):
        super().__init__()
        self.ln_1 = LayerNorm(config.n_embd, config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = LayerNorm(config.n_embd, config.bias)
        self.mlp = MLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(
            {
                "wte": nn.Embedding(config.vocab_size, config.n_embd),  # token -> vector
                "wpe": nn.Embedding(config.block_size, config.n_embd),  # position -> vector
                "drop": nn.Dropout(config.dropout),
                "h": nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
                "ln_f": LayerNorm(config.n_embd, config.bias),
            }
        )
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        # one matrix both embeds the input tokens and scores the output tokens (weight tying)
        self.transformer.wte.weight = self.lm_head.weight

        self.apply(self._init_weights)
        # the two projections of each block add into the residual stream; GPT-2 shrinks their initial
        # weights by sqrt(2 * n_layer) so that the stream's variance does not grow with depth
        for name, param in self.named_parameters():
            if name.endswith("c_proj.weight"):
                torch.nn.init.normal_(param, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))
        print(f"GPT: {self.get_num_params() / 1e6:.2f}M parameters")

    def get_num_params(self, non_embedding=True):
        """How many numbers the model learns; by default without the position table. The token table is
        counted: it is also the output layer's weight."""
        total = sum(p.numel() for p in self.parameters())
        return total - self.transformer.wpe.weight.numel() if non_embedding else total

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            torch.nn.init.zeros_(module.bias)

    def forward(self, idx, targets=None):
        """Logits for every position and the mean cross-entropy against `targets` (-1 marks a position to
        skip); without targets, the logits of the last position only, shape (B, 1, vocab_size)."""
        B, T = idx.size()
        if T > self.config.block_size:
            raise ValueError(f"a sequence of {T} tokens does not fit in block_size={self.config.block_size}")
        positions = torch.arange(0, T, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(positions))
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        if targets is None:
            return self.lm_head(x[:, [-1], :]), None  # a list index keeps the time dimension
        logits = self.lm_head(x)
        loss = F.cross_entropy(logits.view(B * T, -1), targets.view(B * T), ignore_index=-1)
        return logits, loss

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        """AdamW that decays the matrices (Linear and Embedding weights) and leaves biases and gains alone."""
        trainable = {name: p for name, p in self.named_parameters() if p.requires_grad}
        matrices = [p for p in trainable.values() if p.dim() >= 2]
        vectors = [p for p in trainable.values() if p.dim() < 2]
        groups = [
            {"params": matrices, "weight_decay": weight_decay},
            {"params": vectors, "weight_decay": 0.0},
        ]
        for label, params in (("with weight decay", matrices), ("without", vectors)):
            print(f"{label}: {len(params)} tensors, {sum(p.numel() for p in params):,} parameters")
        # newer PyTorch builds have a fused AdamW kernel, for CUDA tensors only
        has_fused = "fused" in inspect.signature(torch.optim.AdamW).parameters
        use_fused = has_fused and device_type == "cuda"
        print(f"fused AdamW: {use_fused}")
        options = {"fused": True} if use_fused else {}
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, **options)

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None):
        """Append `max_new_tokens` sampled tokens to each row of `idx` (B, T) and return the longer rows.
        Put the model in eval() mode first, or dropout stays on."""
        for _ in range(max_new_tokens):
            window = idx
            if window.size(1) > self.config.block_size:  # the model sees at most block_size tokens
                window = window[:, -self.config.block_size :]
            logits, _ = self(window)
            logits = logits[:, -1, :] / temperature
            if top_k is not None:
                best, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                logits[logits < best[:, [-1]]] = -float("inf")  # everything below the k-th largest is ruled out
            probs = F.softmax(logits, dim=-1)
            next_token = torch.multinomial(probs, num_samples=1)
            idx = torch.cat((idx, next_token), dim=1)
        return idx
