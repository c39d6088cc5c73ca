#!/usr/bin/env python3
"""Lockstep's byte-level GPT in PyTorch DDP on CPU ranks (gloo), timed beside lockstep-train.

    lockstep-data text --in /usr/share/common-licenses/GPL-3 --out gpl3.h5 --seq-len 64
    python3 scripts/reference/gpt_torch_ddp.py --ranks 2 --threads 1 --data gpl3.h5 \
        --model gpt:layers=2,heads=4,dim=128,ctx=64

Starts --ranks processes on this host (torch.multiprocessing), each with --threads intra-op
threads, gpt_torch.Gpt (GPT-2 initialisation) wrapped in DistributedDataParallel over gloo (at
--ranks 1 the plain model), AdamW with decay on the tensors of dim >= 2, Lockstep's warm-up and
cosine schedule (gpt_torch.lr_at) and gradient clipping, global batch / ranks sequences per rank
per step; --precision bf16 runs the forward pass and the loss under CPU autocast to bf16. Every
rank draws the same shuffled global batch and trains on its slice, as cnn_torch_ddp.py does. The data is a `lockstep-data text` corpus: train/tokens and test/tokens,
uint8 (N, T + 1), inputs row[:T], targets row[1:]; 'synthetic' gives random bytes of --seq.

Rank 0 prints, after --warmup untimed steps and --steps timed ones:
  tokens_per_second=...  (global batch x T / the median step time)  step_ms_median=...
  train_loss=... train_bits_per_byte=...   (the last step's loss, averaged over ranks)
  test_loss=... test_bits_per_byte=...     (with --eval-rows > 0: the first rows of test/)
bits per byte = mean cross-entropy in nats / ln 2.
"""
import argparse
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_torch  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=2, help="processes on this host")
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    p.add_argument("--data", default="data/text.h5",
                   help="lockstep-data text corpus (HDF5); 'synthetic' for random bytes")
    p.add_argument("--seq", type=int, default=64, help="tokens per sequence with --data synthetic")
    p.add_argument("--model", default="gpt:layers=2,heads=4,dim=128,ctx=64",
                   help="Lockstep's --model spec (gpt:layers=L,heads=H,dim=D,ctx=C)")
    p.add_argument("--global-batch", type=int, default=32, help="sequences per step, all ranks")
    p.add_argument("--steps", type=int, default=50, help="timed steps")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    p.add_argument("--lr", type=float, default=3e-4, help="peak learning rate")
    p.add_argument("--min-lr", type=float, default=3e-5)
    p.add_argument("--warmup-steps", type=int, default=10, help="linear learning-rate warm-up")
    p.add_argument("--weight-decay", type=float, default=0.1, help="on tensors of dim >= 2")
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.95)
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--clip-norm", type=float, default=1.0, help="0: no clipping")
    p.add_argument("--eval-rows", type=int, default=256,
                   help="test rows for test_loss at the end (0: none)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                   help="bf16: forward and loss under torch.autocast('cpu', torch.bfloat16) "
                        "(its linear layers on bf16 operands), fp32 weights and optimizer")
    a = p.parse_args()
    if min(a.ranks, a.threads, a.global_batch, a.steps, a.seq) < 1:
        p.error("--ranks, --threads, --global-batch, --steps and --seq must be >= 1")
    if a.global_batch % a.ranks:
        p.error("--global-batch must be a multiple of --ranks")
    if a.warmup < 0 or a.eval_rows < 0:
        p.error("--warmup and --eval-rows must be >= 0")
    return a


def load(args):
    """(train, test): uint8 arrays (N, T + 1)."""
    if args.data == "synthetic":
        rng = np.random.default_rng(args.seed)
        return (rng.integers(0, 256, (4096, args.seq + 1), dtype=np.uint8),
                rng.integers(0, 256, (256, args.seq + 1), dtype=np.uint8))
    import h5py
    try:
        f = h5py.File(args.data, "r")
    except OSError as e:
        sys.exit(f"{args.data}: cannot open ({e}); make it with lockstep-data text --in FILE "
                 f"--out {args.data} --seq-len 64")
    with f:
        if "train/tokens" not in f:
            sys.exit(f"{args.data}: no train/tokens (not a lockstep-data text corpus)")
        train = f["train/tokens"][...]
        test = f["test/tokens"][...] if "test/tokens" in f else train[:0]
    return train, test


def batches(rows, batch, seed):
    """Endless shuffled full batches of rows, epoch after epoch."""
    epoch = 0
    while True:
        order = np.random.default_rng(seed + epoch).permutation(len(rows))
        for i in range(len(rows) // batch):
            yield rows[order[i * batch:(i + 1) * batch]]
        epoch += 1


def rank_main(rank, args, port):
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=args.ranks)
    train, test = load(args)
    seq = train.shape[1] - 1
    model = gpt_torch.Gpt.from_spec(args.model)
    if seq > model.ctx:
        sys.exit(f"the data's sequences hold {seq} tokens, more than the model's ctx {model.ctx}")
    if len(train) < args.global_batch:
        sys.exit(f"train/ has {len(train)} rows, fewer than --global-batch {args.global_batch}")
    model.init_gpt2(args.seed)
    net = torch.nn.parallel.DistributedDataParallel(model) if args.ranks > 1 else model
    total = args.warmup + args.steps
    opt, sched = gpt_torch.make_optimizer(model, args.lr, args.warmup_steps, total, args.min_lr,
                                          args.weight_decay, (args.beta1, args.beta2), args.eps)
    per_rank = args.global_batch // args.ranks
    feed = batches(train, args.global_batch, args.seed)
    last_loss = [0.0]

    def run_step():
        rows = torch.from_numpy(next(feed)[rank * per_rank:(rank + 1) * per_rank].astype(np.int64))
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            logits = net(rows[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                     rows[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if args.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_norm)
        opt.step()
        sched.step()
        last_loss[0] = float(loss)

    for _ in range(args.warmup):
        run_step()
    times = []
    dist.barrier()
    for _ in range(args.steps):
        t = time.perf_counter()
        run_step()
        dist.barrier()
        times.append(time.perf_counter() - t)
    mean_loss = torch.tensor([last_loss[0]], dtype=torch.float64)
    dist.all_reduce(mean_loss)
    train_loss = float(mean_loss) / args.ranks
    test_loss = None
    if args.eval_rows > 0 and len(test) > 0:
        rows = test[:args.eval_rows]
        mine = torch.from_numpy(rows[rank::args.ranks].astype(np.int64))
        sums = torch.zeros(2, dtype=torch.float64)  # summed loss, positions
        with torch.no_grad():
            for i in range(0, len(mine), per_rank):
                r = mine[i:i + per_rank]
                logits = model(r[:, :-1])
                sums[0] += float(torch.nn.functional.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]), r[:, 1:].reshape(-1), reduction="sum"))
                sums[1] += r[:, 1:].numel()
        dist.all_reduce(sums)
        test_loss = float(sums[0] / sums[1])
    if rank == 0:
        med = statistics.median(times)
        tokens = args.global_batch * seq
        print(f"# PyTorch {torch.__version__} on cpu, DDP gloo, {args.ranks} rank(s) x "
              f"{torch.get_num_threads()} thread(s): {args.model}, global batch {args.global_batch}"
              f" x {seq} tokens, {'bf16 autocast' if args.precision == 'bf16' else 'fp32'}, "
              f"{args.steps} timed steps after {args.warmup} warm-up steps")
        print(f"tokens_per_second={tokens / med:.1f} "
              f"tokens_per_second_mean={tokens * len(times) / sum(times):.1f}")
        print(f"step_ms_median={med * 1e3:.3f} step_ms_min={min(times) * 1e3:.3f} "
              f"step_ms_max={max(times) * 1e3:.3f}")
        print(f"train_loss={train_loss:.4f} train_bits_per_byte={train_loss / math.log(2):.4f}")
        if test_loss is not None:
            print(f"test_loss={test_loss:.4f} test_bits_per_byte={test_loss / math.log(2):.4f}")
        sys.stdout.flush()
    # Leave together, and without destroy_process_group: in back-to-back runs rank 0 was seen to
    # hang there after its peer had left (torch 1.13, gloo), with every figure already printed.
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main():
    args = parse_args()
    port = 29500 + os.getpid() % 1000
    mp.spawn(rank_main, args=(args, port), nprocs=args.ranks)


if __name__ == "__main__":
    main()
