"""What the PyTorch and JAX reference scripts share: options, data, FLOP count, timing report.

The reference model is the tutorial's CNN, exactly as lockstep-train --model cnn builds it:
conv3x3:32 (zero padding 1), relu, maxpool2, conv3x3:64, relu, maxpool2, dense to the classes,
NHWC float32 inputs scaled as the Lockstep HDF5 file's attributes say, softmax cross-entropy, Adam.
Precision as labelled: fp32 is true float32 arithmetic, as Lockstep's fp32 (the scripts turn off
TF32, which PyTorch's cuDNN convolutions and JAX's default matmul precision use on Ampere and
Hopper GPUs); tf32 lets the GPU's tensor cores round float32 inputs to TF32; bf16 runs activations
and matmuls in bf16 with fp32 master weights. On the CPU tf32 computes as fp32.
The printed lines use lockstep-bench train's keys, so the three tables line up:
  samples_per_second=...  step_ms_median=...  achieved_gflops=...  test_accuracy=...
"""
import argparse
import statistics
import sys
import time


def parse_args(framework):
    p = argparse.ArgumentParser(
        description=f"The Fashion-MNIST CNN in {framework}, timed like lockstep-bench train")
    p.add_argument("--data", default="data/fashion-mnist.h5",
                   help="Lockstep HDF5 file (lockstep-data fashion-mnist); 'synthetic' for random data")
    p.add_argument("--global-batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=200, help="timed steps")
    p.add_argument("--warmup", type=int, default=20, help="untimed steps first (compilation)")
    p.add_argument("--epochs", type=int, default=0,
                   help="> 0: also train this many epochs and report the test accuracy")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--precision", choices=["fp32", "tf32", "bf16"], default="fp32",
                   help="fp32: float32 arithmetic (TF32 off); tf32: TF32 tensor-core matmuls and "
                        "convolutions on float32 data; bf16: bf16 activations and matmuls, fp32 "
                        "master weights")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    for name in ("global_batch", "steps"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if a.warmup < 0 or a.epochs < 0:
        p.error("--warmup and --epochs must be >= 0")
    return a


def load(path, seed):
    """(x_train, y_train, x_test, y_test, classes): float32 NHWC images and int32 labels."""
    import numpy as np
    if path == "synthetic":
        rng = np.random.default_rng(seed)
        x = rng.standard_normal((60000, 28, 28, 1), dtype=np.float32)
        y = rng.integers(0, 10, 60000, dtype=np.int32)
        return x, y, x[:10000], y[:10000], 10
    try:
        import h5py
    except ImportError:
        sys.exit("h5py is needed to read " + path + " (or pass --data synthetic)")
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        sys.exit(f"{path}: cannot open ({e}); make it with lockstep-data fashion-mnist --out {path}")
    with f:
        def split(group):
            images = f[group]["images"]
            raw = images[...]
            attr = lambda k, d: float(images.attrs.get(k, f[group].attrs.get(k, f.attrs.get(k, d))))
            scale = attr("norm_scale", 1 / 255 if raw.dtype == np.uint8 else 1)
            x = ((raw.astype(np.float32) * scale - attr("norm_mean", 0)) / attr("norm_std", 1))
            return x.astype(np.float32), f[group]["labels"][...].astype(np.int32)
        xt, yt = split("train")
        xe, ye = split("test")
        classes = int(f.attrs.get("num_classes", int(yt.max()) + 1))
    return xt, yt, xe, ye, classes


def flops_per_sample(h=28, w=28, c=1, classes=10):
    """Forward FLOPs (2 per multiply-add) of the CNN, as lockstep-bench train counts them."""
    conv1 = 2 * h * w * 32 * 9 * c
    conv2 = 2 * (h // 2) * (w // 2) * 64 * 9 * 32
    dense = 2 * (h // 4) * (w // 4) * 64 * classes
    return conv1 + conv2 + dense


def report(framework, version, device, args, step_seconds, total_seconds, timed_steps):
    sps = args.global_batch * timed_steps / total_seconds
    med = statistics.median(step_seconds)
    train_flops = 3 * flops_per_sample()
    print(f"# {framework} {version} on {device}: cnn, global batch {args.global_batch}, "
          f"{args.precision}, {timed_steps} timed steps after {args.warmup} warm-up steps")
    print(f"samples_per_second={sps:.1f} samples_per_second_at_median={args.global_batch / med:.1f}")
    print(f"step_ms_median={med * 1e3:.3f} step_ms_min={min(step_seconds) * 1e3:.3f} "
          f"step_ms_max={max(step_seconds) * 1e3:.3f}")
    print(f"flops_per_sample_train={train_flops:.4g}")
    print(f"achieved_gflops={sps * train_flops / 1e9:.3f}")
    sys.stdout.flush()


def batches(x, y, batch, seed, epoch):
    """The epoch's shuffled full batches (the last partial one dropped)."""
    import numpy as np
    order = np.random.default_rng(seed + epoch).permutation(len(x))
    for i in range(len(x) // batch):
        idx = order[i * batch:(i + 1) * batch]
        yield x[idx], y[idx]


def measure(run_step, sync, n):
    """Times n steps one by one (a device sync after each: the step-time spread) and then n more
    back to back (one sync at the end: the throughput). Returns (step seconds, total seconds)."""
    steps = []
    sync()
    for _ in range(n):
        t = time.perf_counter()
        run_step()
        sync()
        steps.append(time.perf_counter() - t)
    start = time.perf_counter()
    for _ in range(n):
        run_step()
    sync()
    return steps, time.perf_counter() - start


def cycle(x, y, batch, seed):
    """Endless shuffled full batches, epoch after epoch."""
    epoch = 0
    while True:
        yield from batches(x, y, batch, seed, epoch)
        epoch += 1
