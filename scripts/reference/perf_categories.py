#!/usr/bin/env python3
"""Where Lockstep's CPU training step goes, by kind of operation, from `perf` samples (issue 34).

Runs `lockstep-bench train ARGS... --peak-size 64` under `perf record -F 999` and groups the
samples by the kinds scripts/reference/gpt_profile_torch.py gives PyTorch's step (products,
attention, layer norm, GELU, loss, embedding, optimizer, copies and adds, other), by the symbol
or library they fall in. Prints each kind's CPU time per step (samples / 999 Hz / the steps run,
warm-up included; set-up and the 64^3 peak products land in "other" and "kernel"), then the
bench's own step time. At --threads 1 a kind's CPU time is its share of the wall time.
Needs `perf` (linux-perf) and a build with lockstep-bench.
    python3 scripts/reference/perf_categories.py build -- --model gpt --global-batch 32 \
        --optimizer adamw --weight-decay 0.1 --clip-norm 1 --threads 1 --steps 12 --warmup 2
"""
import os
import re
import subprocess
import sys
import tempfile

FREQ = 999
# (kind, library patterns, symbol patterns): the first kind whose pattern matches.
KINDS = [
    ("products", ("[JIT]", "libdnnl", "libopenblas"), ()),
    ("attention", (), ("attention", "forward_head", "backward_head", "::product<", "causal_softmax",
                       "to_heads", "from_heads")),
    ("layer norm", (), ("layernorm",)),
    ("gelu", (), ("gelu", "forward_span", "backward_span")),
    ("loss", (), ("cross_entropy", "softmax_rows")),
    ("embedding", (), ("embedding", "tokens_from_floats")),
    ("optimizer", (), ("adam", "sgd", "momentum", "optimizer", "sum_of_squares", "scale_span",
                       "clip")),
    ("copies and adds", (), ("memmove", "memcpy", "memset", "residual")),
    ("kernel", ("[kernel",), ()),
]


def kind_of(dso, sym):
    for kind, dsos, syms in KINDS:
        if any(d in dso for d in dsos) or any(s in sym for s in syms):
            return kind
    return "other"


def main():
    if "--" not in sys.argv:
        sys.exit(__doc__)
    cut = sys.argv.index("--")
    build = sys.argv[1] if cut > 1 else "build"
    bench_args = sys.argv[cut + 1:]
    steps = warmup = None
    for i, a in enumerate(bench_args[:-1]):
        if a == "--steps":
            steps = int(bench_args[i + 1])
        if a == "--warmup":
            warmup = int(bench_args[i + 1])
    steps = 30 if steps is None else steps
    warmup = 5 if warmup is None else warmup
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "perf.data")
        run = subprocess.run(["perf", "record", "-q", "-F", str(FREQ), "-o", data,
                              os.path.join(build, "apps", "lockstep-bench"), "train", *bench_args,
                              "--peak-size", "64"], capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit(f"perf_categories: the run failed:\n{run.stdout}{run.stderr}")
        report = subprocess.run(["perf", "report", "-i", data, "--no-children", "-n", "--stdio",
                                 "--sort", "dso,sym"], capture_output=True, text=True).stdout
    kinds = {}
    line_re = re.compile(r"^\s*[\d.]+%\s+(\d+)\s+(\S+(?: tid \d+)?)\s+\[.\]\s+(.*)$")
    for line in report.splitlines():
        m = line_re.match(line)
        if m:
            k = kind_of(m.group(2), m.group(3))
            kinds[k] = kinds.get(k, 0) + int(m.group(1))
    total = sum(kinds.values())
    per_step = 1e3 / FREQ / (steps + warmup)
    print(f"# perf samples of lockstep-bench train {' '.join(bench_args)}: "
          f"{total} samples, {steps + warmup} steps")
    for k in [k for k, _, _ in KINDS] + ["other"]:
        n = kinds.get(k, 0)
        print(f"kind {k:16s} {n * per_step:8.2f} ms/step  {100 * n / max(total, 1):5.1f}%")
    for line in run.stdout.splitlines():
        if line.startswith(("step_ms_median", "tokens_per_second", "samples_per_second")):
            print(line)


if __name__ == "__main__":
    main()
