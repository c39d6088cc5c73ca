#!/usr/bin/env python3
"""Lockstep's byte-level GPT (--model gpt:layers=L,heads=H,dim=D,ctx=C) in PyTorch.

The model is GPT-2's, as Lockstep builds it from the stack embed, L x block, lmhead:
  x = wte[tok] + wpe[pos]
  per block: x = x + attn.proj(attention(ln1(x)));  x = x + mlp.proj(gelu_tanh(mlp.fc(ln2(x))))
  logits = ln_f(x) @ wte^T          (tied to the embedding, no bias)
LayerNorm eps 1e-5; causal attention on the packed q|k|v columns of attn.qkv, heads split as
q.view(B, T, H, D/H).transpose(1, 2), scale 1/sqrt(D/H); no dropout; vocabulary 256 (bytes).
Loss: mean cross-entropy over all B*T positions; a data row holds T + 1 tokens (inputs row[:T],
targets row[1:]).

Lockstep's parameter names (layer index = position in the stack), dense weights stored (in, out)
so that y = x W + b, which is nn.Linear's weight transposed:
  embed0.wte (V, D), embed0.wpe (C, D)
  block{i}.ln1.weight/.bias (D), .attn.qkv.weight (D, 3D)/.bias (3D), .attn.proj.weight (D, D)/
    .bias (D), .ln2.weight/.bias (D), .mlp.fc.weight (D, 4D)/.bias (4D), .mlp.proj.weight (4D, D)/
    .bias (D)                                                   for i = 1..L
  lmhead{L+1}.ln.weight/.bias (D)
load_h5 / save_h5 move them between the module and an HDF5 group by these names.

train_steps runs AdamW as Lockstep's trainer does: torch.optim.AdamW with two groups (decay on
the tensors of dim >= 2, none on the rest), LambdaLR reproducing runtime/model/lr_schedule.h
(lr_at) exactly, clip_grad_norm_ before each update.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 256


PRESETS = {"tiny": dict(layers=4, heads=4, dim=128, ctx=128),
           "small": dict(layers=12, heads=12, dim=768, ctx=1024)}


def parse_spec(spec):
    """Lockstep's gpt preset: 'gpt', 'gpt:tiny', 'gpt:small' and key=value overrides, applied left
    to right ('gpt:small,ctx=256', 'gpt:small,vocab=50304') -> dict(layers=, heads=, dim=, ctx=,
    vocab=) (vocab 256, bytes, unless given)."""
    kind, _, args = spec.replace(" ", "").partition(":")
    if kind != "gpt":
        raise ValueError(f"not a gpt spec: {spec!r}")
    out = dict(PRESETS["tiny"], vocab=VOCAB)
    for word in filter(None, args.split(",")):
        if word in PRESETS:
            out.update(PRESETS[word])
            continue
        key, eq, value = word.partition("=")
        if key not in out or not eq:
            raise ValueError(f"{spec!r}: {word!r} is not tiny, small or layers=, heads=, dim=, ctx=, "
                             "vocab=")
        out[key] = int(value)
    return out


def causal_attention(q, k, v):
    """softmax(q k^T / sqrt(Dh) + causal mask) v over [B, H, T, Dh]."""
    sdpa = getattr(F, "scaled_dot_product_attention", None)  # PyTorch >= 2.0
    if sdpa is not None:
        return sdpa(q, k, v, is_causal=True)
    T = q.shape[-2]
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
    return att @ v


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.qkv(x).split(D, dim=2)
        split = lambda t: t.view(B, T, self.heads, D // self.heads).transpose(1, 2)
        y = causal_attention(split(q), split(k), split(v))
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, D))


class Mlp(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc = nn.Linear(dim, 4 * dim)
        self.proj = nn.Linear(4 * dim, dim)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim, eps=1e-5)
        self.attn = Attention(dim, heads)
        self.ln2 = nn.LayerNorm(dim, eps=1e-5)
        self.mlp = Mlp(dim)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Gpt(nn.Module):
    def __init__(self, layers, heads, dim, ctx, vocab=VOCAB):
        super().__init__()
        if dim % heads:
            raise ValueError(f"dim {dim} is not a multiple of heads {heads}")
        self.ctx = ctx
        self.wte = nn.Parameter(torch.empty(vocab, dim))
        self.wpe = nn.Parameter(torch.empty(ctx, dim))
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim, eps=1e-5)
        self.init_gpt2(0)

    @classmethod
    def from_spec(cls, spec):
        return cls(**parse_spec(spec))

    def init_gpt2(self, seed):
        """GPT-2's initialisation: N(0, 0.02) weights and embeddings, zero biases, unit norms
        (for benchmarks; the comparison with Lockstep loads Lockstep's weights instead)."""
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if p.dim() >= 2:
                    p.copy_(torch.randn(p.shape, generator=g) * 0.02)
                elif name.endswith("weight"):
                    p.fill_(1.0)
                else:
                    p.zero_()

    def forward(self, tokens):
        """Logits [B, T, V] of tokens [B, T] (int64)."""
        T = tokens.shape[1]
        if T > self.ctx:
            raise ValueError(f"sequence of {T} tokens is longer than ctx {self.ctx}")
        x = self.wte[tokens] + self.wpe[:T]
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x) @ self.wte.t()

    def loss(self, rows):
        """Mean cross-entropy of rows [B, T + 1] (inputs row[:T], targets row[1:])."""
        logits = self(rows[:, :-1])
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), rows[:, 1:].reshape(-1))

    def lockstep_tensors(self):
        """[(Lockstep name, parameter, transposed)] in Lockstep's buffer order; transposed marks
        nn.Linear weights, stored (out, in) here and (in, out) by Lockstep."""
        out = [("embed0.wte", self.wte, False), ("embed0.wpe", self.wpe, False)]
        for i, b in enumerate(self.blocks, start=1):
            for name, mod in (("ln1", b.ln1), ("attn.qkv", b.attn.qkv), ("attn.proj", b.attn.proj),
                              ("ln2", b.ln2), ("mlp.fc", b.mlp.fc), ("mlp.proj", b.mlp.proj)):
                linear = isinstance(mod, nn.Linear)
                out.append((f"block{i}.{name}.weight", mod.weight, linear))
                out.append((f"block{i}.{name}.bias", mod.bias, False))
        head = len(self.blocks) + 1
        out += [(f"lmhead{head}.ln.weight", self.ln_f.weight, False),
                (f"lmhead{head}.ln.bias", self.ln_f.bias, False)]
        return out

    def load_h5(self, group):
        """Copies every parameter from an h5py group holding Lockstep's names."""
        import numpy as np
        with torch.no_grad():
            for name, p, transposed in self.lockstep_tensors():
                a = torch.from_numpy(np.asarray(group[name], dtype=np.float32))
                a = a.t() if transposed else a
                if tuple(a.shape) != tuple(p.shape):
                    raise ValueError(f"{name}: file has {tuple(group[name].shape)}, the model "
                                     f"wants {tuple(p.shape)}{' transposed' if transposed else ''}")
                p.copy_(a)

    def save_h5(self, group):
        """Writes every parameter to an h5py group under Lockstep's names and layouts."""
        for name, p, transposed in self.lockstep_tensors():
            a = p.detach().t() if transposed else p.detach()
            group.create_dataset(name, data=a.contiguous().cpu().numpy())

    def lockstep_grads(self):
        """{Lockstep name: gradient in Lockstep's layout} after a backward pass."""
        return {name: (p.grad.t() if transposed else p.grad).detach()
                for name, p, transposed in self.lockstep_tensors()}


def lr_at(step, peak, warmup, total, min_lr, kind="cosine"):
    """runtime/model/lr_schedule.cpp's lr_at, term for term (0-based step)."""
    if step < warmup:
        return peak * (step + 1) / warmup
    if kind == "constant":
        return peak
    span = total - warmup
    t = 1.0 if span <= 0 else (step - warmup) / span
    t = min(max(t, 0.0), 1.0)
    frac = 0.5 * (1.0 + math.cos(math.pi * t)) if kind == "cosine" else 1.0 - t
    return min_lr + (peak - min_lr) * frac


def make_optimizer(model, lr, warmup, total, min_lr, weight_decay, betas=(0.9, 0.999), eps=1e-8,
                   schedule="cosine"):
    """AdamW with decay on the tensors of dim >= 2 only, and its LambdaLR schedule."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps)
    # LambdaLR multiplies the group's initial lr (the peak) by the factor; peak 0 trains nothing.
    factor = lambda s: lr_at(s, lr, warmup, total, min_lr, schedule) / lr if lr else 0.0
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, factor)


def train_steps(model, batches, lr, warmup, total, min_lr, weight_decay, betas=(0.9, 0.999),
                eps=1e-8, clip_norm=1.0, schedule="cosine"):
    """One AdamW step per batch (int64 rows [B, T + 1]): the loss before the update, the gradient
    clipped to clip_norm (<= 0: no clipping), then the update. Returns (losses, norms, lrs)."""
    opt, sched = make_optimizer(model, lr, warmup, total, min_lr, weight_decay, betas, eps,
                                schedule)
    losses, norms, lrs = [], [], []
    for rows in batches:
        opt.zero_grad(set_to_none=True)
        loss = model.loss(rows)
        loss.backward()
        if clip_norm > 0:
            norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)))
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
        losses.append(float(loss))
    return losses, norms, lrs
