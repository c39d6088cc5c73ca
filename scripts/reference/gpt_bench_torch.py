#!/usr/bin/env python3
"""Training speed of Lockstep's byte-level GPT (gpt_torch.py's model) in PyTorch on a GPU: the
peer that `lockstep-bench train --model gpt:...` is measured beside (scripts/gpu-check.sh, part gpt).

As a PyTorch user would run it at its fastest: F.scaled_dot_product_attention (flash attention on
Hopper in bf16), torch.compile (--compile MODE, 'none' for eager), bf16 autocast with fp32 weights
(--precision bf16), fused AdamW with decay on the matrices, the gradient clipped to norm 1 as
Lockstep's benchmark does. --precision fp32 turns TF32 off; tf32 turns it on (label it as such).
Each step trains on fresh random tokens made on the device (bytes, or ids below the spec's vocab=;
no input pipeline is measured).

Prints one line of key=value figures, the same keys as lockstep-bench:
  step_ms_median=... tokens_per_second=... peak_memory_mb=... loss=... torch=... device=...
"""
import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_torch import Gpt, parse_spec  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="gpt:small", help="Lockstep's gpt spec (default gpt:small)")
    ap.add_argument("--global-batch", type=int, default=8, help="sequences per step (default 8)")
    ap.add_argument("--precision", choices=["fp32", "tf32", "bf16"], default="bf16")
    ap.add_argument("--compile", default="default",
                    help="torch.compile mode (default, reduce-overhead, max-autotune) or none")
    ap.add_argument("--steps", type=int, default=30, help="timed steps (default 30)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first (default 5)")
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--clip-norm", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("gpt_bench_torch: no CUDA device answers (this benchmark is for GPUs)")
    if a.global_batch <= 0 or a.steps <= 0 or a.warmup < 0:
        sys.exit("gpt_bench_torch: --global-batch and --steps must be positive, --warmup >= 0")
    dev = torch.device("cuda")
    tf32 = a.precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.manual_seed(a.seed)
    spec = parse_spec(a.model)
    model = Gpt(**spec).to(dev)
    params = [p for p in model.parameters()]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": a.weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=a.lr, fused=True)
    loss_fn = model.loss if a.compile == "none" else torch.compile(model.loss, mode=a.compile)
    T = spec["ctx"]

    def step():
        rows = torch.randint(0, spec["vocab"], (a.global_batch, T + 1), device=dev)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = loss_fn(rows)
        loss.backward()
        if a.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(params, a.clip_norm, foreach=True)
        opt.step()
        return loss

    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(a.steps):
        start = time.perf_counter()
        loss = step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    ms = statistics.median(times) * 1e3
    tokens = a.global_batch * T
    print(f"model={a.model} batch={a.global_batch} seq={T} precision={a.precision} "
          f"compile={a.compile} step_ms_median={ms:.3f} tokens_per_second={tokens / ms * 1e3:.0f} "
          f"peak_memory_mb={torch.cuda.max_memory_allocated() / 2**20:.0f} loss={float(loss):.4f} "
          f"torch={torch.__version__} device={torch.cuda.get_device_name().replace(' ', '_')}",
          flush=True)


if __name__ == "__main__":
    main()
