#!/usr/bin/env python3
"""The Fashion-MNIST CNN in PyTorch DDP on CPU ranks (gloo), timed like lockstep-bench train.

    python3 scripts/reference/cnn_torch_ddp.py --ranks 2 --threads 1 --data synthetic

Starts --ranks processes on this host (torch.multiprocessing), each with --threads intra-op
threads, the model of cnn_torch.py wrapped in DistributedDataParallel over gloo (at --ranks 1 the
plain model), Adam, and
global batch / ranks samples per rank per step; rank 0 prints the report (common.py's keys). The
side by side with mpiexec -n 2 lockstep-bench train in docs/PERFORMANCE.md uses it.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import cnn_torch  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def rank_main(rank, args, port):
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=args.ranks)
    xt, yt, _, _, classes = common.load(args.data, args.seed)
    torch.manual_seed(args.seed)
    model = cnn_torch.Cnn(xt.shape[3], classes)
    if args.ranks > 1:  # one rank: the plain model, as cnn_torch.py trains it
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    per_rank = args.global_batch // args.ranks
    feed = common.cycle(xt, yt, args.global_batch, args.seed)

    def run_step():
        xb, yb = next(feed)  # every rank draws the global batch and trains on its slice
        x = torch.from_numpy(xb[rank * per_rank:(rank + 1) * per_rank])
        y = torch.from_numpy(yb[rank * per_rank:(rank + 1) * per_rank]).long()
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(args.warmup):
        run_step()
    dist.barrier()
    steps, total = common.measure(run_step, dist.barrier, args.steps)
    if rank == 0:
        name = f"cpu, DDP gloo, {args.ranks} rank(s) x {torch.get_num_threads()} thread(s)"
        common.report("PyTorch", torch.__version__, name, args, steps, total, args.steps)
    dist.destroy_process_group()


def main():
    extra = [("--ranks", 2, "processes on this host"), ("--threads", 1, "torch threads per rank")]
    argv, own = [], {}
    it = iter(sys.argv[1:])
    for a in it:  # take our two options out; common.parse_args reads the rest
        name = a.split("=")[0]
        if name in [e[0] for e in extra]:
            own[name] = int(a.split("=", 1)[1] if "=" in a else next(it))
        else:
            argv.append(a)
    sys.argv[1:] = argv
    args = common.parse_args("PyTorch DDP")
    args.ranks = own.get("--ranks", 2)
    args.threads = own.get("--threads", 1)
    if args.ranks < 1 or args.threads < 1 or args.global_batch % args.ranks:
        sys.exit("--ranks and --threads must be >= 1, and --global-batch a multiple of --ranks")
    port = 29500 + os.getpid() % 1000
    mp.spawn(rank_main, args=(args, port), nprocs=args.ranks)


if __name__ == "__main__":
    main()
