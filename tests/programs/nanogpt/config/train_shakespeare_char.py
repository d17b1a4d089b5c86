# A small character-level GPT on tiny Shakespeare, for `python train.py config/train_shakespeare_char.py`.
#
# vkblas test program, written in the style of nanoGPT's config/train_shakespeare_char.py: plain assignments that
# configurator.py runs in train.py's globals. The sizes are nanoGPT's published shakespeare-char setting (6 layers,
# 6 heads, 384 wide, context 256, batch 64, dropout 0.2, AdamW at 1e-3 for 5000 iterations); the tests shrink
# them with --name=value arguments after this file.

dataset = "shakespeare_char"
out_dir = "out-shakespeare-char"

# the text is about a million characters: the model overfits soon, so evaluate often and keep only the best
eval_interval = 250
eval_iters = 200
log_interval = 10
always_save_checkpoint = False

batch_size = 64
block_size = 256
gradient_accumulation_steps = 1

n_layer = 6
n_head = 6
n_embd = 384
dropout = 0.2

learning_rate = 1e-3  # a model this small tolerates a high rate
beta2 = 0.99  # few tokens per step: average the second moment over more steps
max_iters = 5000
warmup_iters = 100
lr_decay_iters = 5000
min_lr = 1e-4
