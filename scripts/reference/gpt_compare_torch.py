#!/usr/bin/env python3
"""Lockstep's GPT against PyTorch: same weights, same batches, same loss, gradients and AdamW.

Reads the file tests/helpers/gpt_reference_dump.cpp writes (a tiny gpt: model's initial
parameters by name, one batch with its loss and gradients, then a batch per AdamW step and the
parameters after them), loads the same parameters into gpt_torch.Gpt, and recomputes in float32
on one thread:
  loss and every gradient of the first batch           must agree within --tol (1e-5)
  the parameters after the steps (train_steps: AdamW,  must agree within --tol-params (1e-4)
  decay on dim >= 2, LambdaLR = lr_at, clipping)
The per-step losses, gradient norms and learning rates are printed beside them.

Error per tensor: max |lockstep - torch| / max |torch| (norm-wise, in the infinity norm: relative
to the tensor's scale, so an entry that cancels to near zero is judged on its tensor's scale);
the loss, a scalar, by |a - b| / |b|. Exit 0 when every check is within its tolerance, 1 if not.

One exception, after the steps: the key third of each attn.qkv.bias. Its gradient is zero in exact
arithmetic (a key bias adds q . b_k to every score of a query's row, and softmax ignores a shift
of the whole row), so both implementations compute rounding noise there (about 1e-11), and Adam,
which divides by the gradient's own size, turns that noise into parameter moves of either sign in
both: comparing them compares noise (4e-4 of the tensor's scale after 20 steps). The q and v
thirds are checked as every other tensor; the key third only by how far it moved in either
implementation, which must stay below 1% of what steps x peak lr would move a parameter with a
real gradient (a key-bias gradient computed wrongly, of real size, moves it about that far).

usage: gpt_compare_torch.py FILE.h5 [--tol 1e-5] [--tol-params 1e-4]
"""
import argparse
import os
import sys

import h5py
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_torch  # noqa: E402


def rel(ours, ref):
    ours = np.asarray(ours, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if ours.shape != ref.shape:
        return float("inf")
    scale = max(float(np.abs(ref).max()) if ref.size else 0.0, 1e-30)
    return float(np.abs(ours - ref).max() / scale) if ref.size else 0.0


def attr(f, name, cast=float):
    v = f.attrs[name]
    return cast(v.decode() if isinstance(v, bytes) else v)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("file")
    p.add_argument("--tol", type=float, default=1e-5, help="loss and gradients")
    p.add_argument("--tol-params", type=float, default=1e-4, help="parameters after the steps")
    a = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    failures = []

    def check(label, err, tol):
        ok = err <= tol
        print(f"{label:<40} {err:.3e}  {'ok' if ok else 'FAIL'} (tol {tol:g})")
        if not ok:
            failures.append(label)

    with h5py.File(a.file, "r") as f:
        spec = attr(f, "spec", str)
        print(f"# {spec}, batch {attr(f, 'batch', int)} x seq {attr(f, 'seq', int)}, "
              f"{attr(f, 'steps', int)} AdamW steps, Lockstep kernels {attr(f, 'kernels', str)}; "
              f"PyTorch {torch.__version__}, float32, 1 thread")
        model = gpt_torch.Gpt.from_spec(spec)
        names = {name for name, _, _ in model.lockstep_tensors()}
        have = set(f["init/params"].keys())
        if names != have:
            print(f"parameter names differ: only in Lockstep {sorted(have - names)}, "
                  f"only in gpt_torch {sorted(names - have)}")
            return 1
        model.load_h5(f["init/params"])

        # One batch: loss and gradients.
        rows = torch.from_numpy(np.asarray(f["init/tokens"], dtype=np.int64))
        loss = model.loss(rows)
        loss.backward()
        ref_loss = float(loss)
        ours = float(np.asarray(f["init/loss"]))
        print(f"loss: lockstep {ours:.8f}  torch {ref_loss:.8f}")
        check("loss", abs(ours - ref_loss) / abs(ref_loss), a.tol)
        grads = model.lockstep_grads()
        worst = max(names, key=lambda n: rel(f["init/grads"][n], grads[n]))
        for name, _, _ in model.lockstep_tensors():
            check(f"grad {name}", rel(f["init/grads"][name], grads[name]), a.tol)
        print(f"max gradient error: {rel(f['init/grads'][worst], grads[worst]):.3e} ({worst})")

        # The AdamW steps, from the same initial parameters.
        model.zero_grad(set_to_none=True)
        model.load_h5(f["init/params"])
        tokens = np.asarray(f["train/tokens"], dtype=np.int64)
        losses, norms, lrs = gpt_torch.train_steps(
            model, [torch.from_numpy(t) for t in tokens], lr=attr(f, "lr"),
            warmup=attr(f, "warmup_steps", int), total=attr(f, "steps", int),
            min_lr=attr(f, "min_lr"), weight_decay=attr(f, "weight_decay"),
            betas=(attr(f, "beta1"), attr(f, "beta2")), eps=attr(f, "eps"),
            clip_norm=attr(f, "clip_norm"), schedule=attr(f, "lr_schedule", str))
        ls_loss, ls_norm, ls_lr = (np.asarray(f["train/" + k]) for k in ("loss", "grad_norm", "lr"))
        print("step  loss(lockstep)  loss(torch)  grad_norm(lockstep)  grad_norm(torch)  lr")
        for s in range(len(losses)):
            print(f"{s:4d}  {ls_loss[s]:.8f}  {losses[s]:.8f}  {ls_norm[s]:.6f}  {norms[s]:.6f}  "
                  f"{lrs[s]:.6e}")
        print(f"learning rates: max relative difference {rel(ls_lr, lrs):.3e}")
        clipped = int(sum(n > attr(f, "clip_norm") for n in ls_norm))
        print(f"clipped steps: {clipped} of {len(losses)}")
        final = {name: (p.detach().t() if tr else p.detach()) for name, p, tr in
                 model.lockstep_tensors()}
        errs = {}
        steps = len(losses)
        for name, _, _ in model.lockstep_tensors():
            ours, ref = np.asarray(f["final/params"][name]), final[name].numpy()
            if name.endswith("attn.qkv.bias"):
                d = len(ref) // 3
                qv = np.r_[0:d, 2 * d:3 * d]
                print(f"{'  whole ' + name:<40} {rel(ours, ref):.3e}  (not checked: key third)")
                limit = 0.01 * steps * attr(f, "lr")
                init = np.asarray(f["init/params"][name])[d:2 * d]
                moved = max(np.abs(ours[d:2 * d] - init).max(), np.abs(ref[d:2 * d] - init).max())
                check(f"key bias moved {name}", moved / limit, 1.0)
                ours, ref = ours[qv], ref[qv]
                name += " (q, v)"
            errs[name] = rel(ours, ref)
            check(f"params after {steps} steps {name}", errs[name], a.tol_params)
        worst = max(errs, key=errs.get)
        print(f"max parameter error after {len(losses)} steps: {errs[worst]:.3e} ({worst})")

    if failures:
        print(f"{len(failures)} check(s) over tolerance: {', '.join(failures)}")
        return 1
    print("Lockstep's GPT matches PyTorch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
