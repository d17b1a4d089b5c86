"""Train the GPT of model.py on a token file made by data/<dataset>/prepare.py.

vkblas test program, written in the style of nanoGPT's train.py. Its settings are the module globals below,
which configurator.py overrides from the command line:

    python train.py config/train_shakespeare_char.py --device=cpu --compile=False

It exercises: batches of random windows cut from an np.memmap with torch.randint, torch.from_numpy and
torch.stack, moved with pin_memory()/non_blocking on CUDA; torch.amp.autocast (nullcontext on the CPU) and
torch.amp.GradScaler; AdamW from model.configure_optimizers with the learning rate set by hand in
optimizer.param_groups (linear warm-up, then cosine decay); gradient accumulation, clip_grad_norm_ and
zero_grad(set_to_none=True); torch.compile behind a flag; TF32 switches in torch.backends; evaluation under
@torch.no_grad() with model.eval()/model.train(); a checkpoint dict written with torch.save and read back with
torch.load to resume; and, when torchrun sets RANK, DistributedDataParallel.
"""

import math
import os
import pickle
import time
from contextlib import nullcontext

import numpy as np
import torch
from model import GPT, GPTConfig
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel

# ---- settings -------------------------------------------------------------------------------------------------
# output
out_dir = "out"
init_from = "scratch"  # "scratch", or "resume" from out_dir/ckpt.pt
eval_interval = 500  # evaluate (and maybe save) every eval_interval iterations
eval_iters = 50  # batches per split in one evaluation
eval_only = False  # evaluate once and stop
log_interval = 10
always_save_checkpoint = True  # False: save only when the validation loss improves
# data
dataset = "shakespeare_char"
batch_size = 32
block_size = 128
gradient_accumulation_steps = 1  # micro-batches per optimizer step
# model
n_layer = 4
n_head = 4
n_embd = 256
dropout = 0.1
bias = False
# optimizer and learning-rate schedule
learning_rate = 6e-4  # peak
min_lr = 6e-5  # floor after the decay
weight_decay = 0.1
beta1 = 0.9
beta2 = 0.95
grad_clip = 1.0  # 0.0: no clipping
decay_lr = True
warmup_iters = 200
lr_decay_iters = 5000
max_iters = 5000  # optimizer steps
# system
backend = "nccl"  # for torch.distributed
device = "cuda"  # "cpu", "cuda", "cuda:1", ...
dtype = "bfloat16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "float16"
compile = True
settings = [k for k, v in globals().items() if not k.startswith("_") and isinstance(v, (bool, int, float, str))]
exec(open(os.path.join(os.path.dirname(__file__), "configurator.py")).read())
config = {k: globals()[k] for k in settings}  # what this run was asked to do, kept in the checkpoint
# ----------------------------------------------------------------------------------------------------------------

ddp = "RANK" in os.environ  # started by torchrun: one process per GPU
if ddp:
    init_process_group(backend=backend)
    rank, local_rank, world_size = (int(os.environ[k]) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE"))
    device = f"cuda:{local_rank}"
    torch.cuda.set_device(device)
    if gradient_accumulation_steps % world_size:
        raise SystemExit(f"gradient_accumulation_steps={gradient_accumulation_steps} is not a multiple of {world_size}")
    gradient_accumulation_steps //= world_size  # the processes share the micro-batches of a step
else:
    rank, world_size = 0, 1
master_process = rank == 0  # the one that evaluates, logs and saves
seed_offset = rank  # each process draws different batches
tokens_per_step = gradient_accumulation_steps * world_size * batch_size * block_size
print(f"{tokens_per_step:,} tokens per optimizer step")

if master_process:
    os.makedirs(out_dir, exist_ok=True)
torch.manual_seed(1337 + seed_offset)
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
device_type = "cuda" if device.startswith("cuda") else "cpu"
ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
ctx = nullcontext() if device_type == "cpu" else torch.amp.autocast(device_type=device_type, dtype=ptdtype)

data_dir = os.path.join("data", dataset)


def get_batch(split):
    """batch_size random windows of block_size tokens from `split`, and the same windows one token later."""
    # mapped anew on each call: a long-lived memmap keeps every page it has read resident
    tokens = np.memmap(os.path.join(data_dir, f"{split}.bin"), dtype=np.uint16, mode="r")
    starts = torch.randint(len(tokens) - block_size, (batch_size,))
    x = torch.stack([torch.from_numpy(tokens[s : s + block_size].astype(np.int64)) for s in starts])
    y = torch.stack([torch.from_numpy(tokens[s + 1 : s + 1 + block_size].astype(np.int64)) for s in starts])
    if device_type == "cuda":  # from page-locked memory the copy runs while the GPU is still busy
        return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    return x.to(device), y.to(device)


def unprefixed(state_dict, prefix="_orig_mod."):
    """The state dict of a model saved while wrapped by torch.compile, with the wrapper's prefix taken off."""
    return {(k[len(prefix) :] if k.startswith(prefix) else k): v for k, v in state_dict.items()}


vocab_size = 50304  # GPT-2's, unless the dataset says otherwise
meta_path = os.path.join(data_dir, "meta.pkl")
if os.path.exists(meta_path):
    with open(meta_path, "rb") as f:
        vocab_size = pickle.load(f)["vocab_size"]
    print(f"vocabulary of {vocab_size} tokens (from {meta_path})")

model_args = dict(
    n_layer=n_layer,
    n_head=n_head,
    n_embd=n_embd,
    block_size=block_size,
    bias=bias,
    vocab_size=vocab_size,
    dropout=dropout,
)
iter_num, best_val_loss, checkpoint = 0, float("inf"), None
if init_from == "scratch":
    print("training a new model")
    model = GPT(GPTConfig(**model_args))
elif init_from == "resume":
    checkpoint = torch.load(os.path.join(out_dir, "ckpt.pt"), map_location=device)
    for k in ("n_layer", "n_head", "n_embd", "block_size", "bias", "vocab_size"):  # the shape is the saved one
        model_args[k] = checkpoint["model_args"][k]
    model = GPT(GPTConfig(**model_args))
    model.load_state_dict(unprefixed(checkpoint["model"]))
    iter_num, best_val_loss = checkpoint["iter_num"], checkpoint["best_val_loss"]
    print(f"resuming from {out_dir} at iteration {iter_num}")
else:
    raise SystemExit(f"init_from={init_from!r}: expected 'scratch' or 'resume'")
model.to(device)

# loss scaling keeps small float16 gradients from flushing to zero; disabled, the scaler passes things through
scaler = torch.amp.GradScaler(device_type, enabled=(dtype == "float16" and device_type == "cuda"))
optimizer = model.configure_optimizers(weight_decay, learning_rate, (beta1, beta2), device_type)
if checkpoint is not None:
    optimizer.load_state_dict(checkpoint["optimizer"])
checkpoint = None  # let the loaded tensors go

if compile:
    print("compiling the model")
    model = torch.compile(model)
if ddp:
    model = DistributedDataParallel(model, device_ids=[local_rank])
raw_model = model.module if ddp else model  # what gets saved


@torch.no_grad()
def estimate_loss():
    """The mean loss over eval_iters batches of each split, with dropout off."""
    model.eval()
    means = {}
    for split in ("train", "val"):
        losses = torch.zeros(eval_iters)
        for i in range(eval_iters):
            inputs, targets = get_batch(split)
            with ctx:
                _, loss = model(inputs, targets)
            losses[i] = loss.item()
        means[split] = losses.mean()
    model.train()
    return means


def get_lr(it):
    """Linear warm-up to learning_rate over warmup_iters, half a cosine down to min_lr at lr_decay_iters, and
    min_lr after that."""
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    progress = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    return min_lr + (learning_rate - min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


def save_checkpoint():
    print(f"saving checkpoint to {out_dir}")
    state = {
        "model": raw_model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "model_args": model_args,
        "iter_num": iter_num,
        "best_val_loss": best_val_loss,
        "config": config,
    }
    torch.save(state, os.path.join(out_dir, "ckpt.pt"))


inputs, targets = get_batch("train")
while True:
    lr = get_lr(iter_num) if decay_lr else learning_rate
    for group in optimizer.param_groups:
        group["lr"] = lr

    if iter_num % eval_interval == 0 and master_process:
        losses = estimate_loss()
        print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
        improved = losses["val"] < best_val_loss
        if improved:
            best_val_loss = losses["val"]
        if iter_num > 0 and (improved or always_save_checkpoint):
            save_checkpoint()
    if eval_only or iter_num >= max_iters:
        break

    step_started = time.time()
    for micro_step in range(gradient_accumulation_steps):
        if ddp:  # average the gradients across processes once, after the last micro-batch
            model.require_backward_grad_sync = micro_step == gradient_accumulation_steps - 1
        with ctx:
            _, loss = model(inputs, targets)
            loss = loss / gradient_accumulation_steps  # the step's gradient is the mean over micro-batches
        inputs, targets = get_batch("train")  # read while the device still runs the forward pass
        scaler.scale(loss).backward()
    if grad_clip > 0.0:
        scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)

    if iter_num % log_interval == 0 and master_process:
        step_loss = loss.item() * gradient_accumulation_steps  # .item() waits for the device to finish the step
        seconds = time.time() - step_started
        speed = tokens_per_step / seconds
        print(f"iter {iter_num}: loss {step_loss:.4f}, lr {lr:.2e}, {seconds * 1000:.0f} ms, {speed:,.0f} tokens/s")
    iter_num += 1

if ddp:
    destroy_process_group()
