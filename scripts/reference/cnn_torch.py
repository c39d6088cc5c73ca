#!/usr/bin/env python3
"""The Fashion-MNIST CNN in PyTorch, timed like lockstep-bench train (see common.py).

    python3 scripts/reference/cnn_torch.py --data data/fashion-mnist.h5 --global-batch 128
    python3 scripts/reference/cnn_torch.py --global-batch 1024 --precision bf16 --epochs 5
    python3 scripts/reference/cnn_torch.py --precision tf32    # TF32 tensor cores, labelled so

One GPU (cuda:0, else the CPU). Batches go from pinned host memory to the device each step, as
Lockstep's loader feeds its device step. On a GPU the model runs through torch.compile (the
idiomatic fast path); LOCKSTEP_REFERENCE_COMPILE picks how: `default` (the default; `1` too),
`reduce-overhead` (torch.compile's CUDA graphs) or `eager` (`0` too: no compilation). The mode is
named in the report's first line.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402


class Cnn(torch.nn.Module):
    def __init__(self, channels, classes):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(channels, 32, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(32, 64, 3, padding=1)
        self.dense = torch.nn.Linear(7 * 7 * 64, classes)

    def forward(self, x):  # x: NHWC, as the HDF5 file stores it
        x = x.permute(0, 3, 1, 2)
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.dense(x.permute(0, 2, 3, 1).flatten(1))  # NHWC flatten, as Lockstep's dense


def compile_mode(device):
    """eager, default or reduce-overhead, from LOCKSTEP_REFERENCE_COMPILE (eager on a CPU)."""
    asked = os.environ.get("LOCKSTEP_REFERENCE_COMPILE", "default")
    mode = {"0": "eager", "1": "default"}.get(asked, asked)
    if mode not in ("eager", "default", "reduce-overhead"):
        sys.exit(f"cnn_torch.py: LOCKSTEP_REFERENCE_COMPILE={asked!r}: expected eager, default "
                 "or reduce-overhead")
    return mode if device.type == "cuda" else "eager"


def build(args, channels, classes, device):
    """A fresh model from the seed, its Adam and the (compiled) training step."""
    torch.manual_seed(args.seed)
    model = Cnn(channels, classes).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    forward = model
    mode = compile_mode(device)
    if mode != "eager":
        forward = torch.compile(model, mode=mode)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.precision == "bf16")

    def train_on(x, y):
        with autocast:
            loss = F.cross_entropy(forward(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return model, train_on, autocast


def main():
    args = common.parse_args("PyTorch")
    xt, yt, xe, ye, classes = common.load(args.data, args.seed)
    device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    torch.backends.cudnn.benchmark = True
    # cuDNN convolutions default to TF32 on Ampere and later; fp32 rows must be true fp32 (and
    # bf16's fp32 leftovers too): TF32 only where asked for.
    tf32 = args.precision == "tf32"
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    _, train_on, _ = build(args, xt.shape[3], classes, device)
    feed = common.cycle(xt, yt, args.global_batch, args.seed)

    # Two page-locked staging slots, allocated once, as Lockstep's device step has: a slot is
    # refilled only after the event recorded behind its last copy has passed.
    pinned = device.type == "cuda"
    slots = [(torch.empty((args.global_batch,) + xt.shape[1:], pin_memory=pinned),
              torch.empty(args.global_batch, dtype=torch.long, pin_memory=pinned),
              torch.cuda.Event() if pinned else None) for _ in range(2)]
    turn = [0]

    def run_step():
        xb, yb = next(feed)
        hx, hy, copied = slots[turn[0] % 2]
        turn[0] += 1
        if copied is not None:
            copied.synchronize()
        hx.numpy()[...] = xb
        hy.numpy()[...] = yb
        x = hx.to(device, non_blocking=True)
        y = hy.to(device, non_blocking=True)
        if copied is not None:
            copied.record()
        train_on(x, y)

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(args.warmup):
        run_step()
    steps, total = common.measure(run_step, sync, args.steps)
    name = torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu"
    common.report(f"PyTorch ({compile_mode(device)})", torch.__version__, name, args, steps, total, args.steps)

    if args.epochs > 0:
        model, train_on, autocast = build(args, xt.shape[3], classes, device)
        for epoch in range(args.epochs):
            for xb, yb in common.batches(xt, yt, args.global_batch, args.seed, epoch):
                train_on(torch.from_numpy(xb).to(device), torch.from_numpy(yb).long().to(device))
        correct = 0
        with torch.no_grad(), autocast:
            for i in range(0, len(xe), 1000):
                logits = model(torch.from_numpy(xe[i:i + 1000]).to(device))
                correct += int((logits.argmax(1).cpu().numpy() == ye[i:i + 1000]).sum())
        print(f"test_accuracy={correct / len(xe):.4f} epochs={args.epochs}")


if __name__ == "__main__":
    main()
