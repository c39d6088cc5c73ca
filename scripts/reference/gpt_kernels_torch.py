#!/usr/bin/env python3
"""Recompute Lockstep's GPT kernels with PyTorch and compare.

Reads the file tests/helpers/gpt_kernels_dump.cpp writes (inputs, forward outputs and gradients of
the CPU twins: GELU, layer norm, token + position embedding, causal multi-head attention on packed
qkv, cross-entropy over [B*T, 256] byte logits) and recomputes every output and gradient with
torch.nn.functional and autograd, in float64 from the same float32 inputs, so the error printed is
the kernel's own. Attention is written out (q k^T / sqrt(Dh), a -inf causal mask, softmax, @ v)
because Debian 12's PyTorch 1.13 has no scaled_dot_product_attention.

Error: max |lockstep - torch| / max |torch| over each tensor (relative to the tensor's scale, so
entries that cancel to near zero are judged on the scale of their tensor). fp32 carries 6e-8
relative precision; sums over up to a few hundred terms stay well below the 1e-5 asserted here,
while an indexing or formula mistake is of order 1. Exit 0 when every tensor is within --tol.

usage: gpt_kernels_torch.py FILE.h5 [--tol 1e-5]
"""
import argparse
import sys

import h5py
import numpy as np
import torch
import torch.nn.functional as F


def t64(a):
    return torch.tensor(np.asarray(a), dtype=torch.float64)


def leaf(a):
    return t64(a).requires_grad_(True)


def rel(ours, ref):
    ref = ref.detach().numpy()
    ours = np.asarray(ours, dtype=np.float64)
    scale = max(np.abs(ref).max(), 1e-30)
    return float(np.abs(ours - ref).max() / scale)


def gelu(g):
    x = leaf(g["x"])
    y = F.gelu(x, approximate="tanh")
    y.backward(t64(g["dy"]))
    return {"y": rel(g["y"], y), "dx": rel(g["dx"], x.grad)}


def layernorm(g):
    x, gamma, beta = leaf(g["x"]), leaf(g["gamma"]), leaf(g["beta"])
    y = F.layer_norm(x, (x.shape[-1],), gamma, beta, eps=1e-5)
    y.backward(t64(g["dy"]))
    mean = x.detach().mean(-1)
    rstd = 1.0 / torch.sqrt(x.detach().var(-1, unbiased=False) + 1e-5)
    return {"y": rel(g["y"], y), "mean": rel(g["mean"], mean), "rstd": rel(g["rstd"], rstd),
            "dx": rel(g["dx"], x.grad), "dgamma": rel(g["dgamma"], gamma.grad),
            "dbeta": rel(g["dbeta"], beta.grad)}


def embedding(g):
    tok = torch.tensor(np.asarray(g["tokens"]), dtype=torch.long)
    wte, wpe = leaf(g["wte"]), leaf(g["wpe"])
    T = tok.shape[1]
    out = F.embedding(tok, wte) + F.embedding(torch.arange(T), wpe)[None]
    out.backward(t64(g["dout"]))
    return {"out": rel(g["out"], out), "dwte": rel(g["dwte"], wte.grad),
            "dwpe": rel(g["dwpe"], wpe.grad)}


def attention(g):
    H = int(g.attrs["heads"])
    qkv = leaf(g["qkv"])
    B, T, C3 = qkv.shape
    C = C3 // 3
    Dh = C // H
    q, k, v = (p.view(B, T, H, Dh).transpose(1, 2) for p in qkv.split(C, dim=-1))
    scores = q @ k.transpose(-2, -1) / Dh ** 0.5
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    probs = F.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
    out = (probs @ v).transpose(1, 2).reshape(B, T, C)
    out.backward(t64(g["dout"]))
    return {"out": rel(g["out"], out), "probs": rel(g["probs"], probs),
            "dqkv": rel(g["dqkv"], qkv.grad)}


def cross_entropy(g):
    logits = leaf(g["logits"])
    targets = torch.tensor(np.asarray(g["targets"]), dtype=torch.long)
    V = logits.shape[-1]
    loss = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
    loss.backward()
    ours_loss = float(g.attrs["mean_loss"])
    return {"mean_loss": abs(ours_loss - loss.item()) / abs(loss.item()),
            "dlogits": rel(g["dlogits"], logits.grad)}


CHECKS = [("gelu", gelu), ("layernorm", layernorm), ("embedding", embedding),
          ("attention", attention), ("cross_entropy", cross_entropy)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("--tol", type=float, default=1e-5)
    a = ap.parse_args()
    torch.set_grad_enabled(True)
    bad = 0
    with h5py.File(a.file, "r") as f:
        for name, check in CHECKS:
            for tensor, err in check(f[name]).items():
                ok = err <= a.tol
                bad += not ok
                print(f"{name:14s} {tensor:10s} max rel error {err:.2e}  {'ok' if ok else 'FAIL'}")
    print(f"torch {torch.__version__}: {'all within' if bad == 0 else f'{bad} tensor(s) beyond'} "
          f"{a.tol:g}")
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
