#!/usr/bin/env python3
"""The Fashion-MNIST CNN in JAX (jit-compiled step, optax Adam), timed like lockstep-bench train
(see common.py).

    python3 scripts/reference/cnn_jax.py --data data/fashion-mnist.h5 --global-batch 128
    python3 scripts/reference/cnn_jax.py --global-batch 1024 --precision bf16 --epochs 5
    python3 scripts/reference/cnn_jax.py --precision tf32      # TF32 tensor cores, labelled so

One device (the first GPU, else the CPU). Batches are put on the device each step, as Lockstep's
loader feeds its device step. Written with jax.lax only (no Flax), so it needs jax and optax.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402


def init(key, channels, classes):
    """He-uniform-like weights as in Lockstep (HWIO kernels, (in, out) dense), zero biases."""
    k1, k2, k3 = jax.random.split(key, 3)

    def uniform(k, shape, fan_in):
        bound = (6.0 / fan_in) ** 0.5
        return jax.random.uniform(k, shape, jnp.float32, -bound, bound)

    return {
        "conv1_w": uniform(k1, (3, 3, channels, 32), 9 * channels), "conv1_b": jnp.zeros(32),
        "conv2_w": uniform(k2, (3, 3, 32, 64), 9 * 32), "conv2_b": jnp.zeros(64),
        "dense_w": uniform(k3, (7 * 7 * 64, classes), 7 * 7 * 64), "dense_b": jnp.zeros(classes),
    }


def forward(params, x, dtype, precision):
    def conv(x, w, b):
        y = jax.lax.conv_general_dilated(x.astype(dtype), w.astype(dtype), (1, 1), "SAME",
                                         dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                         precision=precision, preferred_element_type=jnp.float32)
        return y + b

    def pool(x):
        return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")

    x = pool(jax.nn.relu(conv(x, params["conv1_w"], params["conv1_b"])))
    x = pool(jax.nn.relu(conv(x, params["conv2_w"], params["conv2_b"])))
    x = x.reshape(x.shape[0], -1).astype(dtype)
    return jnp.dot(x, params["dense_w"].astype(dtype), precision=precision,
                   preferred_element_type=jnp.float32) + params["dense_b"]


def main():
    args = common.parse_args("JAX")
    xt, yt, xe, ye, classes = common.load(args.data, args.seed)
    device = jax.devices()[0]
    dtype = jnp.bfloat16 if args.precision == "bf16" else jnp.float32
    # JAX's default precision lets a GPU run float32 matmuls and convolutions on TF32 tensor
    # cores; HIGHEST keeps fp32 rows true fp32. (bf16 inputs are exact in either.)
    precision = jax.lax.Precision.HIGHEST if args.precision == "fp32" else jax.lax.Precision.DEFAULT
    tx = optax.adam(args.lr)

    def loss_fn(params, x, y):
        logits = forward(params, x, dtype, precision)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    @jax.jit
    def train_step(params, state, x, y):
        grads = jax.grad(loss_fn)(params, x, y)
        updates, state = tx.update(grads, state, params)
        return optax.apply_updates(params, updates), state

    predict = jax.jit(lambda params, x: jnp.argmax(forward(params, x, dtype, precision), axis=1))

    def fresh():
        # The optimizer state placed on the device too: left uncommitted, it would make the second
        # call compile the step again (inside the timed steps when --warmup is 1).
        params = jax.device_put(init(jax.random.PRNGKey(args.seed), xt.shape[3], classes), device)
        return params, jax.device_put(tx.init(params), device)

    params, state = fresh()
    feed = common.cycle(xt, yt, args.global_batch, args.seed)
    holder = {"params": params, "state": state}

    def run_step():
        xb, yb = next(feed)
        x, y = jax.device_put(xb, device), jax.device_put(yb, device)
        holder["params"], holder["state"] = train_step(holder["params"], holder["state"], x, y)

    def sync():
        jax.block_until_ready(holder["params"])

    for _ in range(args.warmup):
        run_step()
    steps, total = common.measure(run_step, sync, args.steps)
    common.report("JAX", jax.__version__, device.device_kind, args, steps, total, args.steps)

    if args.epochs > 0:
        params, state = fresh()
        for epoch in range(args.epochs):
            for xb, yb in common.batches(xt, yt, args.global_batch, args.seed, epoch):
                params, state = train_step(params, state, jax.device_put(xb, device),
                                           jax.device_put(yb, device))
        correct = 0
        for i in range(0, len(xe), 1000):
            correct += int((jax.device_get(predict(params, xe[i:i + 1000])) == ye[i:i + 1000]).sum())
        print(f"test_accuracy={correct / len(xe):.4f} epochs={args.epochs}")


if __name__ == "__main__":
    main()
