#!/usr/bin/env python3
"""Training parity with nanoGPT: the shakespeare-char CPU recipe (configs/shakespeare_char.json)
trained by PyTorch as nanoGPT's train.py trains it, and by Tessera, for several seeds; both
models then evaluated by the same code on the same 200 validation batches.

PyTorch side (written from nanoGPT's model.py and train.py, hyperparameters from the config):
character vocabulary of the sorted characters, first 90% train / last 10% validation; batches of
12 random windows of 64 (torch.randint, as nanoGPT's get_batch); GPT with tied embeddings,
pre-LayerNorm blocks without biases, exact GELU, N(0, 0.02) init with c_proj at
0.02 / sqrt(2 n_layer); AdamW (0.9, 0.99), weight decay 0.1 on 2-D parameters only; learning rate
1e-3, linear warm-up (it + 1) / (100 + 1), cosine to 1e-4 at step 2000; clip 1.0; 2000 steps.

Tessera side: `tessera train configs/shakespeare_char.json` with train.seed set, saved,
`tessera export`ed and loaded by transformers' GPT2LMHeadModel (the export tests check that it
computes Tessera's loss to 1e-5).

Evaluation, the same for both: the mean cross-entropy over 200 batches of 12 validation windows
whose positions a torch.Generator seeded 1234 draws once.

    build/test-python/bin/python scripts/parity_nanogpt.py --data ../shared/data/tinyshakespeare.txt
        [--seeds 1 2 3] [--tessera build/tools/tessera] [--steps 2000]

Prints one line per seed and run, the means and their gap (nanoGPT's recipe is matched when the
gap is within 0.01). Takes about 4.5 minutes per seed on 2 cores.

Measured 2026-11-26 (2 cores, transformers 4.44.2, Debian's torch 1.13), seeds 1 2 3:
PyTorch 1.9146 1.9123 1.9217 (mean 1.9162), Tessera 1.9053 1.9220 1.9007 (mean 1.9093):
gap -0.0069, within 0.01.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
LAYERS, HEADS, DIM, BLOCK, BATCH = 4, 4, 128, 64, 12
LR, MIN_LR, WARMUP, DECAY, BETAS, WD, CLIP = 1e-3, 1e-4, 100, 2000, (0.9, 0.99), 0.1, 1.0
EVAL_BATCHES = 200


class LayerNorm(nn.Module):  # without bias, as nanoGPT's bias=False
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, None, 1e-5)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.ln_2 = LayerNorm(DIM), LayerNorm(DIM)
        self.c_attn = nn.Linear(DIM, 3 * DIM, bias=False)
        self.attn_proj = nn.Linear(DIM, DIM, bias=False)
        self.c_fc = nn.Linear(DIM, 4 * DIM, bias=False)
        self.mlp_proj = nn.Linear(4 * DIM, DIM, bias=False)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(DIM, dim=2)
        q, k, v = (t.view(B, T, HEADS, C // HEADS).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // HEADS)
        att = att.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
        x = x + self.attn_proj((att @ v).transpose(1, 2).reshape(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self, vocab):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, DIM), nn.Embedding(BLOCK, DIM)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f = LayerNorm(DIM)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * LAYERS) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for b in self.blocks:
            x = b(x)
        return self.ln_f(x) @ self.wte.weight.t()  # tied LM head


def lr_at(it):
    if it < WARMUP:
        return LR * (it + 1) / (WARMUP + 1)
    if it > DECAY:
        return MIN_LR
    return MIN_LR + 0.5 * (1 + math.cos(math.pi * (it - WARMUP) / (DECAY - WARMUP))) * (LR - MIN_LR)


def train_pytorch(train, vocab, seed, steps):
    torch.manual_seed(seed)
    model = GPT(vocab)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": rest, "weight_decay": 0.0}],
                            lr=LR, betas=BETAS)
    for it in range(steps):
        ix = torch.randint(len(train) - BLOCK, (BATCH,))
        x = torch.stack([train[i:i + BLOCK] for i in ix])
        y = torch.stack([train[i + 1:i + 1 + BLOCK] for i in ix])
        for g in opt.param_groups:
            g["lr"] = lr_at(it)
        loss = F.cross_entropy(model(x).view(-1, vocab), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
    return model


def train_tessera(tessera, data, seed, steps, work):
    cfg = json.load(open(os.path.join(ROOT, "configs", "shakespeare_char.json")))
    cfg["train"].update({"seed": seed, "steps": steps, "eval_interval": 0, "sample_tokens": 0})
    cfg["data"]["cache_dir"] = os.path.join(work, "cache")
    path = os.path.join(work, f"seed{seed}.json")
    json.dump(cfg, open(path, "w"))
    ck, out = os.path.join(work, f"ck{seed}"), os.path.join(work, f"hf{seed}")
    run = subprocess.run([tessera, "train", path, "--data", data, "--save", ck, "--json"],
                         capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"tessera train failed:\n{run.stderr[-3000:]}")
    own = json.loads(run.stdout.strip().splitlines()[-1])["val_loss"]
    subprocess.run([tessera, "export", ck, out], check=True, capture_output=True)
    from transformers import GPT2LMHeadModel
    model = GPT2LMHeadModel.from_pretrained(out)
    return (lambda idx: model(idx).logits), own


@torch.no_grad()
def evaluate(logits_of, val, vocab):
    gen = torch.Generator().manual_seed(1234)
    total = 0.0
    for _ in range(EVAL_BATCHES):
        ix = torch.randint(len(val) - BLOCK, (BATCH,), generator=gen)
        x = torch.stack([val[i:i + BLOCK] for i in ix])
        y = torch.stack([val[i + 1:i + 1 + BLOCK] for i in ix])
        total += F.cross_entropy(logits_of(x).reshape(-1, vocab), y.reshape(-1)).item()
    return total / EVAL_BATCHES


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, help="tinyshakespeare.txt")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--tessera", default=os.path.join(ROOT, "build", "tools", "tessera"))
    ap.add_argument("--steps", type=int, default=2000)
    args = ap.parse_args()
    text = open(args.data, encoding="utf-8").read()
    chars = sorted(set(text))
    lookup = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([lookup[c] for c in text], dtype=torch.long)
    n = int(len(data) * 0.9)
    train, val, vocab = data[:n], data[n:], len(chars)
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for seed in args.seeds:
            t0 = time.time()
            model = train_pytorch(train, vocab, seed, args.steps).eval()
            ours = evaluate(model, val, vocab)
            t1 = time.time()
            logits_of, own = train_tessera(args.tessera, args.data, seed, args.steps, work)
            theirs = evaluate(logits_of, val, vocab)
            rows.append((ours, theirs))
            print(f"seed {seed}: PyTorch (nanoGPT) {ours:.4f} ({t1 - t0:.0f} s), Tessera {theirs:.4f} "
                  f"({time.time() - t1:.0f} s; its own evaluation {own:.4f})", flush=True)
    torch_mean = sum(r[0] for r in rows) / len(rows)
    tessera_mean = sum(r[1] for r in rows) / len(rows)
    gap = tessera_mean - torch_mean
    print(f"mean over {len(rows)} seeds: PyTorch {torch_mean:.4f}, Tessera {tessera_mean:.4f}, gap {gap:+.4f} "
          f"({'within' if abs(gap) <= 0.01 else 'OUTSIDE'} 0.01)")


if __name__ == "__main__":
    main()
