#!/usr/bin/env python3
"""PyTorch figures on the same GPU, in the same run as Tessera's (scripts/gpu_bench.sh):
device-to-device copy bandwidth, matmul TFLOP/s, and the GPT-2 124M training step of
`tessera bench train --preset gpt2-1024` (same shapes: tied embeddings, pre-LN blocks without
biases, causal attention through F.scaled_dot_product_attention, tanh-GELU MLP, AdamW lr 1e-3
betas (0.9, 0.99) wd 0.1, clip 1.0) in eager mode with bf16 autocast over float32 weights.

  python3 scripts/gpu_reference.py copy --numel 268435456 --dtype float32
  python3 scripts/gpu_reference.py matmul --shape 8192,8192,8192 --dtype bfloat16
  python3 scripts/gpu_reference.py train --batch 8

Each prints one JSON line.
"""
import argparse, json, math, statistics
import torch, torch.nn as nn, torch.nn.functional as F

DT = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def timed(fn, iters, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


class Block(nn.Module):
    def __init__(s, d, h):
        super().__init__(); s.h = h
        s.ln1 = nn.LayerNorm(d); s.attn = nn.Linear(d, 3 * d, bias=False); s.proj = nn.Linear(d, d, bias=False)
        s.ln2 = nn.LayerNorm(d); s.fc = nn.Linear(d, 4 * d, bias=False); s.fc2 = nn.Linear(4 * d, d, bias=False)

    def forward(s, x):
        B, T, C = x.shape
        q, k, v = s.attn(s.ln1(x)).split(C, dim=2)
        q, k, v = [t.view(B, T, s.h, C // s.h).transpose(1, 2) for t in (q, k, v)]
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + s.proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + s.fc2(F.gelu(s.fc(s.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(s, V, T, L, H, D):
        super().__init__(); s.wte = nn.Embedding(V, D); s.wpe = nn.Embedding(T, D)
        s.blocks = nn.ModuleList([Block(D, H) for _ in range(L)]); s.lnf = nn.LayerNorm(D)
        s.head = nn.Linear(D, V, bias=False); s.head.weight = s.wte.weight

    def forward(s, idx, tgt):
        B, T = idx.shape
        x = s.wte(idx) + s.wpe(torch.arange(T, device=idx.device))
        for b in s.blocks:
            x = b(x)
        return F.cross_entropy(s.head(s.lnf(x)).float().view(-1, s.head.weight.shape[0]), tgt.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["copy", "matmul", "train"])
    ap.add_argument("--numel", type=int, default=1 << 28)
    ap.add_argument("--shape", default="8192,8192,8192")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--compile", action="store_true", help="train: torch.compile the model (Inductor)")
    a = ap.parse_args()
    torch.manual_seed(0)
    dev = "cuda"
    if a.what == "copy":
        x = torch.randn(a.numel, device=dev).to(DT[a.dtype]); y = torch.empty_like(x)
        ms = timed(lambda: y.copy_(x), a.iters)
        print(json.dumps({"what": "copy", "dtype": a.dtype, "numel": a.numel, "ms": ms,
                          "gbps": 2 * x.numel() * x.element_size() / ms / 1e6}))
    elif a.what == "matmul":
        M, N, K = map(int, a.shape.split(","))
        x = torch.randn(M, K, device=dev).to(DT[a.dtype]); w = torch.randn(K, N, device=dev).to(DT[a.dtype])
        ms = timed(lambda: x @ w, a.iters)
        print(json.dumps({"what": "matmul", "dtype": a.dtype, "shape": [M, N, K], "ms": ms,
                          "tflops": 2 * M * N * K / ms / 1e9}))
    else:
        V, T, L, H, D, B = 50304, 1024, 12, 12, 768, a.batch
        m = GPT(V, T, L, H, D).to(dev)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1)
        x = torch.randint(0, V, (B, T), device=dev); y = torch.randint(0, V, (B, T), device=dev)
        fwd = torch.compile(m) if a.compile else m  # compiled during the warm-up steps

        def step():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = fwd(x, y)
            opt.zero_grad(set_to_none=True); loss.backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0); opt.step()
            return loss
        ms = timed(step, 10)
        n = sum(p.numel() for p in m.parameters())
        flops_tok = 6 * (n - T * D) + 12 * L * T * D
        tps = B * T / ms * 1e3
        print(json.dumps({"what": "train", "preset": "gpt2-1024", "batch": B, "params": n, "ms_per_step": ms,
                          "tokens_per_s": tps, "model_tflops": flops_tok * tps / 1e12,
                          "mfu": flops_tok * tps / 989e12, "torch": torch.__version__,
                          "compiled": a.compile}))


if __name__ == "__main__":
    main()
