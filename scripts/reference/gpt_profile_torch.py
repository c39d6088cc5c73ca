#!/usr/bin/env python3
"""Where PyTorch's CPU training step of Lockstep's GPT goes, by kind of operation (issue 34).

Runs the reference model (gpt_torch.Gpt: flash scaled_dot_product_attention, AdamW with decay on
the matrices, clipping at 1) on random bytes, global batch B sequences of the model's context, on
one process with --threads threads, under torch.profiler for --steps steps after --warmup, and
prints each kind's self CPU time per step in the categories scripts/reference/perf_categories.sh
gives Lockstep's step (products, attention, layer norm, GELU, loss, embedding, optimizer, copies
and adds, other), then the profiler's own top operations. At one thread a kind's CPU time is its
share of the wall time; compare it with perf_categories.sh at --threads 1.
    build/peers-venv/bin/python scripts/reference/gpt_profile_torch.py --model gpt --batch 32 \
        --threads 1 --steps 10
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_torch  # noqa: E402
import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

# Operation name (aten::..., or a profiler range) -> kind, by the first pattern it contains.
KINDS = [
    ("attention", ("scaled_dot_product", "flash_attention")),
    ("products", ("addmm", "aten::mm", "aten::bmm", "aten::matmul", "aten::linear")),
    ("layer norm", ("layer_norm",)),
    ("gelu", ("gelu",)),
    ("loss", ("cross_entropy", "log_softmax", "nll_loss")),
    ("embedding", ("embedding",)),
    ("optimizer", ("adam", "foreach", "Optimizer", "norm", "clamp", "lerp", "addcdiv", "addcmul",
                   "sqrt")),
    ("copies and adds", ("copy_", "clone", "contiguous", "aten::add", "aten::add_", "aten::fill_",
                         "aten::zero_", "aten::cat", "aten::sum", "aten::mul")),
]


def kind_of(name):
    for kind, patterns in KINDS:
        if any(p in name for p in patterns):
            return kind
    return "other"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gpt")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = gpt_torch.Gpt.from_spec(args.model)
    spec = gpt_torch.parse_spec(args.model)
    total = args.warmup + args.steps
    opt, sched = gpt_torch.make_optimizer(model, 3e-4, 0, total, 0.0, 0.1)
    rows = torch.randint(0, spec["vocab"], (total, args.batch, model.ctx + 1))

    def step(i):
        logits = model(rows[i, :, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 rows[i, :, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()

    for i in range(args.warmup):
        step(i)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t = time.perf_counter()
        for i in range(args.warmup, total):
            step(i)
        wall = (time.perf_counter() - t) / args.steps
    events = prof.key_averages()
    kinds = {}
    for e in events:
        kinds[kind_of(e.key)] = kinds.get(kind_of(e.key), 0.0) + e.self_cpu_time_total / 1e3
    busy = sum(kinds.values()) / args.steps
    print(f"# PyTorch {torch.__version__}, {args.model}, batch {args.batch} x {model.ctx}, "
          f"{args.threads} thread(s), {args.steps} profiled steps: {wall * 1e3:.1f} ms a step "
          f"(under the profiler), {busy:.1f} ms of operations' self CPU time a step")
    order = [k for k, _ in KINDS] + ["other"]
    for k in order:
        ms = kinds.get(k, 0.0) / args.steps
        print(f"kind {k:16s} {ms:8.2f} ms/step  {100 * ms / busy:5.1f}%")
    print(f"# top {args.top} operations by self CPU time (ms per step)")
    for e in sorted(events, key=lambda e: -e.self_cpu_time_total)[:args.top]:
        print(f"  {e.self_cpu_time_total / 1e3 / args.steps:8.2f}  {e.key}  ({kind_of(e.key)})")


if __name__ == "__main__":
    main()
