#!/usr/bin/env python3
"""A lockstep-train GPT run's per-step losses against PyTorch's on the same bytes (issue 36).

Lockstep trains on a token file whose training split is exactly one global batch (every step an
epoch of that batch, so the row order does not matter: the loss is their mean), from the initial
parameters that tests/helpers/gpt_reference_dump writes for the same spec and seed (Model's
init_params, as the trainer's), and records each step's loss with --metrics and --log-every 1.
This script loads the same parameters into gpt_torch.Gpt, trains it on the same rows with the
same AdamW, schedule and clipping (gpt_torch.train_steps), and compares the losses step by step:
    max over steps of |lockstep - torch| / |torch|   must be within --tol
fp32 runs with TF32 off on the GPU; bf16 under torch.autocast (bf16 products, fp32 weights and
optimizer), as Lockstep's bf16 runs keep fp32 masters. What "within rounding" allows differs:
the defaults are 1e-4 for fp32 and 2e-2 for bf16; the measured figure is printed either way.

usage: gpt_loss_torch.py --init DUMP.h5 --data TOKENS.h5 --metrics RUN.jsonl
           [--device cpu|cuda] [--precision fp32|bf16] [--lr 1e-3] [--warmup 2] [--min-lr 1e-4]
           [--schedule cosine] [--weight-decay 0.1] [--beta1 0.9] [--beta2 0.95] [--eps 1e-8]
           [--clip-norm 1] [--tol T]
Exit 0 when every step is within --tol, 1 if not, 2 on unusable input.
"""
import argparse
import json
import os
import sys

import h5py
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_torch  # noqa: E402


def lockstep_losses(path):
    """{step: loss} of the run's train records (--log-every 1: one record a step)."""
    losses = {}
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if r.get("kind") == "train":
                losses[int(r["step"])] = float(r["loss"])
    return [losses[s] for s in sorted(losses)], sorted(losses)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--init", required=True, help="gpt_reference_dump's file (init/params, spec)")
    p.add_argument("--data", required=True, help="the token file lockstep-train read")
    p.add_argument("--metrics", required=True, help="lockstep-train --metrics --log-every 1")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--precision", default="fp32", choices=("fp32", "bf16"))
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--min-lr", type=float, default=1e-4)
    p.add_argument("--schedule", default="cosine")
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.95)
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--clip-norm", type=float, default=1.0)
    p.add_argument("--tol", type=float, default=None)
    a = p.parse_args()
    tol = a.tol if a.tol is not None else (1e-4 if a.precision == "fp32" else 2e-2)
    if a.precision == "bf16" and a.device != "cuda":
        print("gpt_loss_torch: bf16 is Lockstep's GPU precision: use --device cuda", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    if a.device == "cpu":
        torch.set_num_threads(1)
    else:  # fp32 means fp32: no TF32 products
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

    ours, steps = lockstep_losses(a.metrics)
    if not ours or steps != list(range(1, len(ours) + 1)):
        print(f"gpt_loss_torch: {a.metrics} holds no train record for every step 1..N "
              f"(run lockstep-train with --metrics and --log-every 1)", file=sys.stderr)
        return 2
    with h5py.File(a.init, "r") as f:
        spec = f.attrs["spec"]
        spec = spec.decode() if isinstance(spec, bytes) else str(spec)
        model = gpt_torch.Gpt.from_spec(spec)
        model.load_h5(f["init/params"])
    with h5py.File(a.data, "r") as f:
        rows = torch.from_numpy(np.asarray(f["train/tokens"], dtype=np.int64))
    model.to(a.device)
    rows = rows.to(a.device)
    if a.precision == "bf16":  # autocast around the forward pass only, as PyTorch's AMP does
        fp32_loss = model.loss
        model.loss = lambda r: loss_under_autocast(fp32_loss, r)
    torch_losses, _, lrs = gpt_torch.train_steps(
        model, [rows] * len(ours), lr=a.lr, warmup=a.warmup, total=len(ours), min_lr=a.min_lr,
        weight_decay=a.weight_decay, betas=(a.beta1, a.beta2), eps=a.eps, clip_norm=a.clip_norm,
        schedule=a.schedule)

    print(f"# {spec}: {rows.shape[0]} rows x {rows.shape[1] - 1} positions, {len(ours)} AdamW "
          f"steps on them; {a.precision} on {a.device}; PyTorch {torch.__version__}")
    print("step  loss(lockstep)  loss(torch)  relative difference  lr")
    worst = 0.0
    for s, (x, y) in enumerate(zip(ours, torch_losses), start=1):
        d = abs(x - y) / abs(y)
        worst = max(worst, d)
        print(f"{s:4d}  {x:.6f}  {y:.6f}  {d:.3e}  {lrs[s - 1]:.3e}")
    ok = worst <= tol
    print(f"loss after {len(ours)} steps: lockstep {ours[-1]:.6f}, torch {torch_losses[-1]:.6f}")
    print(f"max relative loss difference over the steps: {worst:.3e} "
          f"({'ok' if ok else 'FAIL'}, tol {tol:g})")
    return 0 if ok else 1


def loss_under_autocast(loss, rows):
    """The model's loss under bf16 autocast: bf16 products, the parameters kept in fp32."""
    with torch.autocast("cuda", dtype=torch.bfloat16):
        return loss(rows).float()


if __name__ == "__main__":
    sys.exit(main())
